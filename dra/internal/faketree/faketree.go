// Package faketree writes fake sysfs trees shaped like real GPU nodes, for the discovery unit tests and (via
// cmd/conduit-fake-sysfs) for the scenario tests that run the driver against them. Only what discovery
// reads is written: the devices/ hierarchy below PCI host bridges, bus/pci/devices links, class/infiniband
// links with ports/1, netdevs and driver links.
package faketree

import (
	"fmt"
	"os"
	"path/filepath"
)

// GPU is an NVIDIA GPU below host bridge pci0000:<Root>.
type GPU struct {
	Root string // host bridge bus, two hex digits
	Bus  string // the GPU's own bus, two hex digits
	NUMA int
}

// NIC is an RDMA device below host bridge pci0000:<Root>.
type NIC struct {
	Root      string
	Bus       string
	NUMA      int
	Name      string // class/infiniband name: "mlx5_0", "rdmap16s0"
	Driver    string // "mlx5_core", "efa"
	LinkLayer string
	Rate      string // ports/1/rate as the kernel prints it
	NetDev    string // "" for none (EFA)
}

// Tree is a node's devices.
type Tree struct {
	GPUs []GPU
	NICs []NIC
}

// Layouts the tests use, by name (the fake-sysfs command's --layout).
var Layouts = map[string]func() Tree{
	"8gpu-8nic": EightGPUsEightNICs,
	"p5":        P5,
	"none":      func() Tree { return Tree{} },
}

// EightGPUsEightNICs: a DGX-like node, GPU i and NIC mlx5_i (400 Gb/s InfiniBand, netdev ibp<i>) below the
// same host bridge, four GPUs per NUMA node.
func EightGPUsEightNICs() Tree {
	var t Tree
	for i := 0; i < 8; i++ {
		root := fmt.Sprintf("%02x", 0x10*(i+1))
		t.GPUs = append(t.GPUs, GPU{Root: root, Bus: hexAdd(root, 1), NUMA: i / 4})
		t.NICs = append(t.NICs, NIC{Root: root, Bus: hexAdd(root, 2), NUMA: i / 4, Name: fmt.Sprintf("mlx5_%d", i),
			Driver: "mlx5_core", LinkLayer: "InfiniBand", Rate: "400 Gb/sec (4X NDR)", NetDev: fmt.Sprintf("ibp%d", i)})
	}
	return t
}

// P5: an AWS p5.48xlarge-like node, 8 GPUs and 32 EFA devices (100 Gb/s each, no netdev), four EFA below
// each GPU's host bridge.
func P5() Tree {
	var t Tree
	for i := 0; i < 8; i++ {
		root := fmt.Sprintf("%02x", 0x10*(i+1))
		t.GPUs = append(t.GPUs, GPU{Root: root, Bus: hexAdd(root, 1), NUMA: i / 4})
		for j := 0; j < 4; j++ {
			bus := hexAdd(root, 2+j)
			t.NICs = append(t.NICs, NIC{Root: root, Bus: bus, NUMA: i / 4, Name: "rdmap" + fmt.Sprint(0x10*(i+1)+2+j) + "s0",
				Driver: "efa", LinkLayer: "Unspecified", Rate: "100 Gb/sec (4X EDR)"})
		}
	}
	return t
}

func hexAdd(h string, n int) string {
	var v int
	fmt.Sscanf(h, "%x", &v)
	return fmt.Sprintf("%02x", v+n)
}

// Write creates the tree beneath dir (which may exist). Besides the devices it writes what a real tree has
// and discovery must pass over: each host bridge's root port (a PCI bridge) and an ASPEED VGA controller.
func Write(dir string, t Tree) error {
	w := writer{dir: dir}
	w.pci("pci0000:00", "", "0000:00:1f.0", "0x1a03", "0x2000", "0x030000", "ast", 0)
	for _, g := range t.GPUs {
		w.pci("pci0000:"+g.Root, "0000:"+g.Root+":01.0", "0000:"+g.Bus+":00.0", "0x10de", "0x2330", "0x030200", "nvidia", g.NUMA)
	}
	for i, n := range t.NICs {
		dev, devID := "0x15b3", "0x1021"
		if n.Driver == "efa" {
			dev, devID = "0x1d0f", "0xefa1"
		}
		pci := w.pci("pci0000:"+n.Root, "0000:"+n.Root+":01.0", "0000:"+n.Bus+":00.0", dev, devID, "0x020000", n.Driver, n.NUMA)
		ib := filepath.Join(pci, "infiniband", n.Name)
		w.file(filepath.Join(ib, "ports", "1", "rate"), n.Rate)
		w.file(filepath.Join(ib, "ports", "1", "link_layer"), n.LinkLayer)
		w.link(filepath.Join(ib, "device"), "../..")
		w.link(filepath.Join(dir, "class", "infiniband", n.Name), w.rel(filepath.Join(dir, "class", "infiniband"), ib))
		if n.NetDev != "" {
			w.file(filepath.Join(pci, "net", n.NetDev, "address"), "00:00:00:00:00:00")
		}
		uverbs := filepath.Join(pci, "infiniband_verbs", fmt.Sprintf("uverbs%d", i))
		w.file(filepath.Join(uverbs, "ibdev"), n.Name)
		w.link(filepath.Join(dir, "class", "infiniband_verbs", filepath.Base(uverbs)),
			w.rel(filepath.Join(dir, "class", "infiniband_verbs"), uverbs))
	}
	return w.err
}

type writer struct {
	dir string
	err error
}

// pci writes one PCI function below host bridge hostBridge (and below root port port, when given) and its
// bus/pci/devices link; it returns the function's directory.
func (w *writer) pci(hostBridge, port, addr, vendor, device, class, driver string, numa int) string {
	parent := filepath.Join(w.dir, "devices", hostBridge)
	if port != "" {
		parent = filepath.Join(parent, port)
		if _, err := os.Stat(parent); err != nil {
			w.function(parent, "0x8086", "0x347a", "0x060400", "pcieport", numa)
		}
	}
	fn := filepath.Join(parent, addr)
	w.function(fn, vendor, device, class, driver, numa)
	return fn
}

func (w *writer) function(fn, vendor, device, class, driver string, numa int) {
	w.file(filepath.Join(fn, "vendor"), vendor)
	w.file(filepath.Join(fn, "device"), device)
	w.file(filepath.Join(fn, "class"), class)
	w.file(filepath.Join(fn, "numa_node"), fmt.Sprint(numa))
	drivers := filepath.Join(w.dir, "bus", "pci", "drivers", driver)
	w.mkdir(drivers)
	w.link(filepath.Join(fn, "driver"), w.rel(fn, drivers))
	bus := filepath.Join(w.dir, "bus", "pci", "devices")
	w.link(filepath.Join(bus, filepath.Base(fn)), w.rel(bus, fn))
}

func (w *writer) rel(from, to string) string {
	r, err := filepath.Rel(from, to)
	if err != nil && w.err == nil {
		w.err = err
	}
	return r
}

func (w *writer) mkdir(d string) {
	if w.err == nil {
		w.err = os.MkdirAll(d, 0o755)
	}
}

func (w *writer) file(path, content string) {
	w.mkdir(filepath.Dir(path))
	if w.err == nil {
		w.err = os.WriteFile(path, []byte(content+"\n"), 0o644)
	}
}

// link makes a relative symlink, as sysfs's are, so a tree copied or moved keeps resolving.
func (w *writer) link(path, target string) {
	w.mkdir(filepath.Dir(path))
	if w.err == nil {
		w.err = os.Symlink(target, path)
	}
}
