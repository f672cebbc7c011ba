// Package slices turns discovered devices into the ResourceSlice content the driver publishes: one pool per
// node, named for the node, each device with the standard resource.kubernetes.io/pcieRoot attribute and
// Conduit's own (docs/dra.md lists them).
package slices

import (
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"

	"conduit.dev/dra/internal/discovery"
)

// DriverName is the driver's name in ResourceSlices, DeviceClass selectors and claims' results; attributes
// without a domain are Conduit's, read in CEL as device.attributes["conduit.dev"].<name>.
const DriverName = "conduit.dev"

// maxDevicesPerSlice is resource.k8s.io/v1's limit (ResourceSliceMaxDevices).
const maxDevicesPerSlice = resourceapi.ResourceSliceMaxDevices

// Resources is the driver's whole desired state for node: one pool named for the node, the devices in
// slices of at most 128, and at least one slice even when there are none (an empty pool says the driver
// runs and found nothing, which no pool at all does not).
func Resources(node string, devs []discovery.Device) *resourceslice.DriverResources {
	pool := resourceslice.Pool{}
	for start := 0; start == 0 || start < len(devs); start += maxDevicesPerSlice {
		end := min(start+maxDevicesPerSlice, len(devs))
		s := resourceslice.Slice{Devices: []resourceapi.Device{}}
		for _, d := range devs[start:end] {
			s.Devices = append(s.Devices, Device(d))
		}
		pool.Slices = append(pool.Slices, s)
	}
	return &resourceslice.DriverResources{Pools: map[string]resourceslice.Pool{node: pool}}
}

// Device is one device's entry in a slice.
func Device(d discovery.Device) resourceapi.Device {
	a := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		deviceattribute.StandardDeviceAttributePCIeRoot: str(d.PCIeRoot),
		"type":     str(string(d.Kind)),
		"pciBusID": str(d.PCIAddress),
		"vendorID": str(d.VendorID),
		"deviceID": str(d.DeviceID),
	}
	if d.NUMANode >= 0 {
		a["numaNode"] = num(int64(d.NUMANode))
	}
	switch d.Kind {
	case discovery.KindNIC:
		a["rdmaDevice"] = str(d.RDMADevice)
		a["driver"] = str(d.Driver)
		a["rail"] = num(int64(d.Rail))
		a["linkGbps"] = num(d.RateGbps)
		if d.LinkLayer != "" {
			a["linkLayer"] = str(d.LinkLayer)
		}
		if d.NetDev != "" {
			a["ifName"] = str(d.NetDev)
		}
		// The list for people ("verbs,tcp") and one boolean per transport for selectors
		// (device.attributes["conduit.dev"].efa), since attributes hold no lists.
		a["transports"] = str(strings.Join(d.Transports, ","))
		for _, t := range []string{discovery.TransportVerbs, discovery.TransportEFA, discovery.TransportTCP} {
			a[resourceapi.QualifiedName(t)] = boolean(contains(d.Transports, t))
		}
	case discovery.KindGPU:
		a["index"] = num(int64(d.Index))
		rails := make([]string, len(d.Rails))
		for i, r := range d.Rails {
			rails[i] = strconv.Itoa(r)
		}
		a["rails"] = str(strings.Join(rails, ","))
	}
	return resourceapi.Device{Name: d.Name, Attributes: a}
}

func str(s string) resourceapi.DeviceAttribute   { return resourceapi.DeviceAttribute{StringValue: &s} }
func num(n int64) resourceapi.DeviceAttribute    { return resourceapi.DeviceAttribute{IntValue: &n} }
func boolean(b bool) resourceapi.DeviceAttribute { return resourceapi.DeviceAttribute{BoolValue: &b} }

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
