package slices

import (
	"fmt"
	"testing"

	resourceapi "k8s.io/api/resource/v1"

	"conduit.dev/dra/internal/discovery"
)

func attr(t *testing.T, d resourceapi.Device, name resourceapi.QualifiedName) resourceapi.DeviceAttribute {
	t.Helper()
	a, ok := d.Attributes[name]
	if !ok {
		t.Fatalf("%s has no attribute %s", d.Name, name)
	}
	return a
}

func TestNICAttributesNameItsRootTransportsAndRail(t *testing.T) {
	d := Device(discovery.Device{Name: "nic-mlx5-3", Kind: discovery.KindNIC, PCIAddress: "0000:42:00.0",
		PCIeRoot: "pci0000:40", NUMANode: 1, RDMADevice: "mlx5_3", Driver: "mlx5_core", LinkLayer: "Ethernet",
		RateGbps: 200, NetDev: "eth3", Transports: []string{"verbs", "tcp"}, Rail: 3})
	if got := *attr(t, d, "resource.kubernetes.io/pcieRoot").StringValue; got != "pci0000:40" {
		t.Errorf("pcieRoot %q", got)
	}
	if *attr(t, d, "type").StringValue != "nic" || *attr(t, d, "rail").IntValue != 3 || *attr(t, d, "linkGbps").IntValue != 200 {
		t.Errorf("attributes %v", d.Attributes)
	}
	if !*attr(t, d, "verbs").BoolValue || *attr(t, d, "efa").BoolValue || !*attr(t, d, "tcp").BoolValue {
		t.Errorf("transport booleans %v", d.Attributes)
	}
	if *attr(t, d, "transports").StringValue != "verbs,tcp" || *attr(t, d, "ifName").StringValue != "eth3" {
		t.Errorf("attributes %v", d.Attributes)
	}
	if len(d.Attributes) > resourceapi.ResourceSliceMaxAttributesAndCapacitiesPerDevice {
		t.Errorf("%d attributes: over the API's limit", len(d.Attributes))
	}
}

func TestGPUWithoutNUMANodeHasNoNUMAAttribute(t *testing.T) {
	d := Device(discovery.Device{Name: "gpu-0", Kind: discovery.KindGPU, PCIeRoot: "pci0000:10", NUMANode: -1, Rails: []int{0, 1}})
	if _, ok := d.Attributes["numaNode"]; ok {
		t.Error("numaNode published for an unknown NUMA node")
	}
	if *attr(t, d, "rails").StringValue != "0,1" || *attr(t, d, "type").StringValue != "gpu" {
		t.Errorf("attributes %v", d.Attributes)
	}
}

func TestOnePoolPerNodeInSlicesOfAtMost128(t *testing.T) {
	var devs []discovery.Device
	for i := 0; i < 300; i++ {
		devs = append(devs, discovery.Device{Name: fmt.Sprintf("nic-%d", i), Kind: discovery.KindNIC, NUMANode: -1})
	}
	r := Resources("node-a", devs)
	pool, ok := r.Pools["node-a"]
	if len(r.Pools) != 1 || !ok {
		t.Fatalf("pools %v", r.Pools)
	}
	if len(pool.Slices) != 3 || len(pool.Slices[0].Devices) != 128 || len(pool.Slices[2].Devices) != 44 {
		t.Fatalf("%d slices", len(pool.Slices))
	}
	if empty := Resources("node-b", nil).Pools["node-b"]; len(empty.Slices) != 1 || len(empty.Slices[0].Devices) != 0 {
		t.Fatalf("a node without devices: %+v, want one empty slice", empty)
	}
}
