package plugin

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/apimachinery/pkg/types"

	"conduit.dev/dra/internal/discovery"
)

// The CDI kind of the devices the driver's specs define: one CDI device per prepared claim, named by the
// claim's UID (never reused, so a runtime's cached spec cannot be a false hit).
const (
	cdiVendor  = "conduit.dev"
	cdiClass   = "claim"
	cdiVersion = "0.6.0"
)

// Environment variables a container with a prepared claim gets, naming what was allocated to it.
const (
	EnvNICs    = "CONDUIT_NICS"    // RDMA device names: "mlx5_0,mlx5_1"
	EnvIfNames = "CONDUIT_IFNAMES" // their netdevs, where they have one: "ibp0"
	EnvGPUs    = "CONDUIT_GPUS"    // GPUs' PCI addresses: "0000:11:00.0"
)

// CDIDeviceID is the ID the kubelet hands the runtime for the claim: "conduit.dev/claim=<uid>".
func CDIDeviceID(claim types.UID) string {
	return fmt.Sprintf("%s/%s=%s", cdiVendor, cdiClass, claim)
}

// specFile is where the claim's spec lives in the CDI directory; the runtime reads every *.json there.
func specFile(dir string, claim types.UID) string {
	return filepath.Join(dir, fmt.Sprintf("%s-%s_%s.json", cdiVendor, cdiClass, claim))
}

type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name           string         `json:"name"`
	ContainerEdits containerEdits `json:"containerEdits"`
}

type containerEdits struct {
	Env         []string     `json:"env,omitempty"`
	DeviceNodes []deviceNode `json:"deviceNodes,omitempty"`
}

type deviceNode struct {
	Path string `json:"path"`
}

// spec is the CDI spec of one claim's devices: each NIC's verbs device and the RDMA connection manager's
// (shared by all), and the environment naming the NICs and GPUs. A GPU's own device nodes are left to
// NVIDIA's container toolkit, which knows its minors and companion devices.
func spec(claim types.UID, devs []discovery.Device) cdiSpec {
	var nics, ifNames, gpus []string
	var nodes []deviceNode
	for _, d := range devs {
		switch d.Kind {
		case discovery.KindNIC:
			nics = append(nics, d.RDMADevice)
			if d.NetDev != "" {
				ifNames = append(ifNames, d.NetDev)
			}
			if d.Uverbs != "" {
				nodes = append(nodes, deviceNode{Path: "/dev/infiniband/" + d.Uverbs})
			}
		case discovery.KindGPU:
			gpus = append(gpus, d.PCIAddress)
		}
	}
	if len(nics) > 0 {
		nodes = append(nodes, deviceNode{Path: "/dev/infiniband/rdma_cm"})
	}
	env := []string{EnvNICs + "=" + strings.Join(nics, ","), EnvIfNames + "=" + strings.Join(ifNames, ","),
		EnvGPUs + "=" + strings.Join(gpus, ",")}
	return cdiSpec{Version: cdiVersion, Kind: cdiVendor + "/" + cdiClass,
		Devices: []cdiDevice{{Name: string(claim), ContainerEdits: containerEdits{Env: env, DeviceNodes: nodes}}}}
}

// writeSpec writes the claim's spec whole or not at all (a temp file renamed into place), since a runtime may
// read the directory at any moment.
func writeSpec(dir string, claim types.UID, devs []discovery.Device) error {
	b, err := json.MarshalIndent(spec(claim, devs), "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("CDI directory: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".conduit-*.tmp")
	if err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return fmt.Errorf("CDI spec: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("CDI spec: %w", err)
	}
	return os.Rename(tmp.Name(), specFile(dir, claim))
}

// removeSpec deletes the claim's spec; one already gone is fine (unprepare is retried by the kubelet).
func removeSpec(dir string, claim types.UID) error {
	if err := os.Remove(specFile(dir, claim)); err != nil && !os.IsNotExist(err) {
		return err
	}
	return nil
}
