// Package discovery finds the devices the driver publishes by reading a sysfs tree: RDMA NICs
// (class/infiniband), EFA devices among them (PCI driver "efa") and, when asked, NVIDIA GPUs (PCI display
// and 3D controllers of vendor 0x10de). Everything is read beneath a root directory, so tests hand it a fake
// tree made in a temp dir (docs/dra.md).
package discovery

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Kind says what a device is; it is published as the "type" attribute the DeviceClasses select on.
type Kind string

const (
	KindGPU Kind = "gpu"
	KindNIC Kind = "nic"
)

// Transports a NIC serves, as the agent and a TransferJob's spec.transport name them.
const (
	TransportVerbs = "verbs"
	TransportEFA   = "efa"
	TransportTCP   = "tcp"
)

const nvidiaVendor = "0x10de"

// Device is one device found in the tree, with what the driver publishes about it.
type Device struct {
	Name       string // the ResourceSlice device name: a DNS label ("gpu-0", "nic-mlx5-0")
	Kind       Kind
	PCIAddress string // "0000:17:00.0"
	PCIeRoot   string // "pci0000:16": the host bridge the device hangs below
	NUMANode   int    // -1 when sysfs does not say
	VendorID   string // "0x15b3"
	DeviceID   string // "0x1021"

	// NICs only.
	RDMADevice string   // "mlx5_0", "rdmap79s0"
	Driver     string   // the PCI driver: "mlx5_core", "efa"
	LinkLayer  string   // port 1's: "InfiniBand", "Ethernet", "Unspecified" (EFA)
	RateGbps   int64    // port 1's rate, 0 when unreadable
	NetDev     string   // the netdev of the same PCI function, "" for none
	Uverbs     string   // its verbs character device ("uverbs0": /dev/infiniband/uverbs0), "" when unknown
	Transports []string // in the order verbs, efa, tcp
	Rail       int      // the NIC's index among the node's NICs in PCI address order

	// GPUs only.
	Index int   // the GPU's index among the node's GPUs in PCI address order
	Rails []int // the rails of the NICs on the same PCIe root
}

// Options choose what Scan looks for.
type Options struct {
	// GPUs: publish NVIDIA GPUs too (for clusters without NVIDIA's own DRA driver).
	GPUs bool
}

// Result is one scan: the devices in a stable order (GPUs, then NICs, each by PCI address) and what was
// skipped, with why, so a malformed entry is visible without failing the node's other devices.
type Result struct {
	Devices []Device
	Skipped []string
}

var (
	pciAddressRE = regexp.MustCompile(`^[0-9a-f]{4,}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)
	pciRootRE    = regexp.MustCompile(`^pci[0-9a-f]{4,}:[0-9a-f]{2}$`)
	rateRE       = regexp.MustCompile(`^\s*([0-9]+(?:\.[0-9]+)?)\s*Gb/sec`)
	notLabelRE   = regexp.MustCompile(`[^a-z0-9-]+`)
)

// Scan reads the tree beneath root (normally /sys). It fails only when root is not a sysfs tree at all
// (no devices/ directory); a device that cannot be read is skipped and named in Result.Skipped.
func Scan(root string, opts Options) (Result, error) {
	var res Result
	devicesDir, err := filepath.EvalSymlinks(filepath.Join(root, "devices"))
	if err != nil {
		return res, fmt.Errorf("%s is not a sysfs tree: %w", root, err)
	}
	if fi, err := os.Stat(devicesDir); err != nil || !fi.IsDir() {
		return res, fmt.Errorf("%s is not a sysfs tree: %s is not a directory", root, devicesDir)
	}
	s := scanner{root: root, devicesDir: devicesDir}

	nics, err := s.nics(&res.Skipped)
	if err != nil {
		return res, err
	}
	var gpus []Device
	if opts.GPUs {
		if gpus, err = s.gpus(&res.Skipped); err != nil {
			return res, err
		}
	}
	for i := range nics {
		nics[i].Rail = i
	}
	for i := range gpus {
		gpus[i].Index = i
		gpus[i].Name = fmt.Sprintf("gpu-%d", i)
		for _, n := range nics {
			if n.PCIeRoot == gpus[i].PCIeRoot {
				gpus[i].Rails = append(gpus[i].Rails, n.Rail)
			}
		}
	}
	res.Devices = append(gpus, nics...)
	return res, nil
}

type scanner struct {
	root       string
	devicesDir string // root/devices with every symlink resolved
}

// pciDevice resolves link (a "device" link, a bus/pci/devices entry) to its PCI function's directory and
// reads what every PCI device has.
func (s scanner) pciDevice(link string) (Device, string, error) {
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		return Device{}, "", err
	}
	addr := filepath.Base(dir)
	if !pciAddressRE.MatchString(addr) {
		return Device{}, "", fmt.Errorf("%s is not a PCI function (resolves to %s)", link, dir)
	}
	root, err := s.pcieRoot(dir)
	if err != nil {
		return Device{}, "", err
	}
	d := Device{PCIAddress: addr, PCIeRoot: root, NUMANode: -1}
	d.VendorID, _ = readLine(filepath.Join(dir, "vendor"))
	d.DeviceID, _ = readLine(filepath.Join(dir, "device"))
	if v, err := readLine(filepath.Join(dir, "numa_node")); err == nil {
		if n, err := strconv.Atoi(v); err == nil && n >= 0 {
			d.NUMANode = n
		}
	}
	if drv, err := os.Readlink(filepath.Join(dir, "driver")); err == nil {
		d.Driver = filepath.Base(drv)
	}
	return d, dir, nil
}

// pcieRoot is the first directory below devices/ on the device's resolved path: the host bridge
// ("pci0000:16"), which is what resource.kubernetes.io/pcieRoot names (k8s.io/dynamic-resource-allocation's
// deviceattribute derives it the same way from /sys/bus/pci/devices/<address>).
func (s scanner) pcieRoot(dir string) (string, error) {
	rel, err := filepath.Rel(s.devicesDir, dir)
	if err != nil || strings.HasPrefix(rel, "..") {
		return "", fmt.Errorf("%s is not below %s", dir, s.devicesDir)
	}
	first := strings.SplitN(rel, string(filepath.Separator), 2)[0]
	if !pciRootRE.MatchString(first) {
		return "", fmt.Errorf("%s is not below a PCI host bridge (devices/pciDDDD:BB)", dir)
	}
	return first, nil
}

func (s scanner) nics(skipped *[]string) ([]Device, error) {
	names, err := entries(filepath.Join(s.root, "class", "infiniband"))
	if err != nil {
		return nil, err
	}
	uverbs := s.uverbs()
	var out []Device
	for _, name := range names {
		ibdev := filepath.Join(s.root, "class", "infiniband", name)
		d, dir, err := s.pciDevice(filepath.Join(ibdev, "device"))
		if err != nil {
			*skipped = append(*skipped, fmt.Sprintf("infiniband/%s: %v", name, err))
			continue
		}
		d.Kind = KindNIC
		d.RDMADevice = name
		d.Uverbs = uverbs[name]
		d.Name = "nic-" + label(name)
		port := filepath.Join(ibdev, "ports", "1")
		d.LinkLayer, _ = readLine(filepath.Join(port, "link_layer"))
		if rate, err := readLine(filepath.Join(port, "rate")); err == nil {
			d.RateGbps = parseRate(rate)
		}
		if nets, _ := entries(filepath.Join(dir, "net")); len(nets) > 0 {
			d.NetDev = nets[0]
		}
		if d.Driver == "efa" {
			d.Transports = []string{TransportEFA}
		} else {
			d.Transports = []string{TransportVerbs}
		}
		if d.NetDev != "" {
			d.Transports = append(d.Transports, TransportTCP)
		}
		out = append(out, d)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PCIAddress < out[j].PCIAddress })
	return out, nil
}

// uverbs maps each RDMA device name to its verbs character device: class/infiniband_verbs/uverbsN/ibdev
// names the device that uverbsN belongs to.
func (s scanner) uverbs() map[string]string {
	out := map[string]string{}
	dir := filepath.Join(s.root, "class", "infiniband_verbs")
	names, _ := entries(dir)
	for _, n := range names {
		if ib, err := readLine(filepath.Join(dir, n, "ibdev")); err == nil && ib != "" {
			out[ib] = n
		}
	}
	return out
}

func (s scanner) gpus(skipped *[]string) ([]Device, error) {
	bus := filepath.Join(s.root, "bus", "pci", "devices")
	names, err := entries(bus)
	if err != nil {
		return nil, err
	}
	var out []Device
	for _, name := range names {
		vendor, _ := readLine(filepath.Join(bus, name, "vendor"))
		class, _ := readLine(filepath.Join(bus, name, "class"))
		if vendor != nvidiaVendor || !isGPUClass(class) {
			continue
		}
		d, _, err := s.pciDevice(filepath.Join(bus, name))
		if err != nil {
			*skipped = append(*skipped, fmt.Sprintf("bus/pci/devices/%s: %v", name, err))
			continue
		}
		d.Kind = KindGPU
		out = append(out, d)
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].PCIAddress < out[j].PCIAddress })
	return out, nil
}

// isGPUClass: PCI class 0x0302 (3D controller, what data-centre GPUs report) or 0x0300 (VGA controller);
// sysfs prints class, subclass and programming interface as "0x030200".
func isGPUClass(class string) bool {
	return strings.HasPrefix(class, "0x0302") || strings.HasPrefix(class, "0x0300")
}

// parseRate reads "400 Gb/sec (4X NDR)" as 400 and "2.5 Gb/sec (1X SDR)" as 3 (whole Gb/s, rounded); 0 when
// the text says no rate.
func parseRate(s string) int64 {
	m := rateRE.FindStringSubmatch(s)
	if m == nil {
		return 0
	}
	f, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		return 0
	}
	return int64(f + 0.5)
}

// label turns an RDMA device name ("mlx5_0") into a DNS label ("mlx5-0"), as device names must be.
func label(s string) string {
	l := strings.Trim(notLabelRE.ReplaceAllString(strings.ToLower(s), "-"), "-")
	if len(l) > 59 {
		l = l[:59]
	}
	return l
}

func readLine(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.TrimSpace(line), nil
}

// entries lists a directory's names in order; a directory that is absent has none (a node without RDMA has
// no class/infiniband), any other error is the caller's.
func entries(dir string) ([]string, error) {
	des, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(des))
	for _, de := range des {
		out = append(out, de.Name())
	}
	return out, nil
}
