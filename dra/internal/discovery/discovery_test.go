package discovery

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"conduit.dev/dra/internal/faketree"
)

func write(t *testing.T, tree faketree.Tree) string {
	t.Helper()
	dir := t.TempDir()
	if err := faketree.Write(dir, tree); err != nil {
		t.Fatal(err)
	}
	return dir
}

func scan(t *testing.T, root string, opts Options) Result {
	t.Helper()
	res, err := Scan(root, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func byKind(devs []Device, k Kind) []Device {
	var out []Device
	for _, d := range devs {
		if d.Kind == k {
			out = append(out, d)
		}
	}
	return out
}

func TestEightGPUNodeHasEachNICOnItsGPUsRoot(t *testing.T) {
	res := scan(t, write(t, faketree.EightGPUsEightNICs()), Options{GPUs: true})
	if len(res.Skipped) != 0 {
		t.Fatalf("skipped: %v", res.Skipped)
	}
	gpus, nics := byKind(res.Devices, KindGPU), byKind(res.Devices, KindNIC)
	if len(gpus) != 8 || len(nics) != 8 {
		t.Fatalf("want 8 GPUs and 8 NICs (the ASPEED VGA and the root ports are not devices), got %d and %d", len(gpus), len(nics))
	}
	for i := 0; i < 8; i++ {
		g, n := gpus[i], nics[i]
		if g.Name != "gpu-"+itoa(i) || n.Name != "nic-mlx5-"+itoa(i) || n.RDMADevice != "mlx5_"+itoa(i) {
			t.Errorf("names %q %q %q", g.Name, n.Name, n.RDMADevice)
		}
		if g.PCIeRoot == "" || g.PCIeRoot != n.PCIeRoot {
			t.Errorf("GPU %d on %q, NIC %d on %q: want one root", i, g.PCIeRoot, i, n.PCIeRoot)
		}
		if len(g.Rails) != 1 || g.Rails[0] != n.Rail || n.Rail != i {
			t.Errorf("GPU %d rails %v, NIC rail %d", i, g.Rails, n.Rail)
		}
		if n.RateGbps != 400 || n.LinkLayer != "InfiniBand" || n.NetDev != "ibp"+itoa(i) || n.Driver != "mlx5_core" {
			t.Errorf("NIC %d: %+v", i, n)
		}
		if n.Uverbs != "uverbs"+itoa(i) {
			t.Errorf("NIC %d uverbs %q", i, n.Uverbs)
		}
		if strings.Join(n.Transports, ",") != "verbs,tcp" {
			t.Errorf("NIC %d transports %v", i, n.Transports)
		}
		if g.NUMANode != i/4 || n.NUMANode != i/4 {
			t.Errorf("NUMA %d %d", g.NUMANode, n.NUMANode)
		}
	}
	if gpus[0].PCIeRoot != "pci0000:10" || gpus[0].PCIAddress != "0000:11:00.0" || nics[0].PCIAddress != "0000:12:00.0" {
		t.Errorf("GPU 0 %s on %s, NIC 0 %s", gpus[0].PCIAddress, gpus[0].PCIeRoot, nics[0].PCIAddress)
	}
}

func TestP5NodeHasFourEFAPerGPURoot(t *testing.T) {
	res := scan(t, write(t, faketree.P5()), Options{GPUs: true})
	gpus, nics := byKind(res.Devices, KindGPU), byKind(res.Devices, KindNIC)
	if len(gpus) != 8 || len(nics) != 32 {
		t.Fatalf("want 8 GPUs and 32 EFA, got %d and %d", len(gpus), len(nics))
	}
	perRoot := map[string]int{}
	for _, n := range nics {
		if n.Driver != "efa" || strings.Join(n.Transports, ",") != "efa" || n.NetDev != "" || n.RateGbps != 100 {
			t.Errorf("EFA %s: %+v", n.Name, n)
		}
		perRoot[n.PCIeRoot]++
	}
	for _, g := range gpus {
		if perRoot[g.PCIeRoot] != 4 || len(g.Rails) != 4 {
			t.Errorf("%s on %s: %d EFA on its root, rails %v", g.Name, g.PCIeRoot, perRoot[g.PCIeRoot], g.Rails)
		}
		for _, r := range g.Rails {
			if nics[r].PCIeRoot != g.PCIeRoot {
				t.Errorf("%s rail %d is on %s", g.Name, r, nics[r].PCIeRoot)
			}
		}
	}
	if len(perRoot) != 8 {
		t.Errorf("EFA on %d roots, want 8", len(perRoot))
	}
}

func TestGPUsOnlyWhenAsked(t *testing.T) {
	res := scan(t, write(t, faketree.EightGPUsEightNICs()), Options{})
	if len(byKind(res.Devices, KindGPU)) != 0 || len(byKind(res.Devices, KindNIC)) != 8 {
		t.Fatalf("without GPUs: %d devices", len(res.Devices))
	}
}

func TestNodeWithoutRDMAHasNoDevices(t *testing.T) {
	res := scan(t, write(t, faketree.Tree{}), Options{GPUs: true})
	if len(res.Devices) != 0 || len(res.Skipped) != 0 {
		t.Fatalf("got %+v", res)
	}
}

func TestNotASysfsTreeIsAnError(t *testing.T) {
	_, err := Scan(filepath.Join(t.TempDir(), "absent"), Options{})
	if err == nil || !strings.Contains(err.Error(), "is not a sysfs tree") {
		t.Fatalf("err %v", err)
	}
}

func TestBrokenDeviceIsSkippedWithItsReason(t *testing.T) {
	root := write(t, faketree.EightGPUsEightNICs())
	// A class/infiniband entry whose device link dangles (a NIC going away mid-scan) and one whose device is
	// not below a host bridge.
	ib := filepath.Join(root, "class", "infiniband")
	if err := os.MkdirAll(filepath.Join(ib, "gone"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../../devices/pci0000:99/0000:99:00.0", filepath.Join(ib, "gone", "device")); err != nil {
		t.Fatal(err)
	}
	virt := filepath.Join(root, "devices", "virtual", "0000:aa:00.0")
	if err := os.MkdirAll(filepath.Join(virt, "infiniband", "rxe0"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../..", filepath.Join(virt, "infiniband", "rxe0", "device")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../../devices/virtual/0000:aa:00.0/infiniband/rxe0", filepath.Join(ib, "rxe0")); err != nil {
		t.Fatal(err)
	}
	res := scan(t, root, Options{GPUs: true})
	if len(res.Devices) != 16 {
		t.Errorf("%d devices, want the 16 good ones", len(res.Devices))
	}
	joined := strings.Join(res.Skipped, "\n")
	if len(res.Skipped) != 2 || !strings.Contains(joined, "infiniband/gone") || !strings.Contains(joined, "not below a PCI host bridge") {
		t.Errorf("skipped: %v", res.Skipped)
	}
}

func TestRateParsing(t *testing.T) {
	for in, want := range map[string]int64{"400 Gb/sec (4X NDR)": 400, "2.5 Gb/sec (1X SDR)": 3, "100 Gb/sec": 100, "": 0, "invalid": 0} {
		if got := parseRate(in); got != want {
			t.Errorf("parseRate(%q) = %d, want %d", in, got, want)
		}
	}
}

func itoa(i int) string { return string(rune('0' + i)) }
