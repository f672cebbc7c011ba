// Package plugin is the driver's kubelet side: NodePrepareResources writes a CDI spec giving the pod the
// allocated NICs' device nodes and environment naming them; NodeUnprepareResources removes it. The gRPC
// services, the registration with the kubelet and the claim lookups are k8s.io/dynamic-resource-allocation's
// kubeletplugin; this package is what it calls.
package plugin

import (
	"context"
	"errors"
	"fmt"
	"sync"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"conduit.dev/dra/internal/discovery"
)

// Plugin prepares claims from the devices of the latest scan.
type Plugin struct {
	driver string
	node   string
	cdiDir string

	mu      sync.Mutex
	devices map[string]discovery.Device // by device name, from the latest scan
	fatal   func(error)
}

// OnFatal sets what a fatal background error calls (the driver's cancel).
func (p *Plugin) OnFatal(f func(error)) { p.fatal = f }

var _ kubeletplugin.DRAPlugin = (*Plugin)(nil)

// New is a plugin for driver DRIVER on node NODE writing CDI specs into cdiDir.
func New(driver, node, cdiDir string) *Plugin {
	return &Plugin{driver: driver, node: node, cdiDir: cdiDir, devices: map[string]discovery.Device{}}
}

// SetDevices replaces what the node has (after each scan).
func (p *Plugin) SetDevices(devs []discovery.Device) {
	m := make(map[string]discovery.Device, len(devs))
	for _, d := range devs {
		m[d.Name] = d
	}
	p.mu.Lock()
	p.devices = m
	p.mu.Unlock()
}

// PrepareResourceClaims writes one CDI spec per claim; a claim whose devices this node does not have is
// reported failed (the kubelet retries it) and leaves no spec behind.
func (p *Plugin) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	out := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	for _, c := range claims {
		res, err := p.prepare(c)
		if err != nil {
			klog.FromContext(ctx).Error(err, "Prepare failed", "claim", klog.KObj(c))
			res = kubeletplugin.PrepareResult{Err: err}
		}
		out[c.UID] = res
	}
	return out, nil
}

func (p *Plugin) prepare(c *resourceapi.ResourceClaim) (kubeletplugin.PrepareResult, error) {
	if c.Status.Allocation == nil {
		return kubeletplugin.PrepareResult{}, fmt.Errorf("claim %s/%s is not allocated", c.Namespace, c.Name)
	}
	p.mu.Lock()
	have := p.devices
	p.mu.Unlock()

	var devs []discovery.Device
	var results []kubeletplugin.Device
	for _, r := range c.Status.Allocation.Devices.Results {
		if r.Driver != p.driver {
			continue // another driver's device in the same claim (a GPU of NVIDIA's): its plugin prepares it
		}
		if r.Pool != p.node {
			return kubeletplugin.PrepareResult{}, fmt.Errorf("claim %s/%s: device %s is in pool %s, not this node's (%s)",
				c.Namespace, c.Name, r.Device, r.Pool, p.node)
		}
		d, ok := have[r.Device]
		if !ok {
			return kubeletplugin.PrepareResult{}, fmt.Errorf("claim %s/%s: device %s is no longer on this node",
				c.Namespace, c.Name, r.Device)
		}
		devs = append(devs, d)
		results = append(results, kubeletplugin.Device{Requests: []string{r.Request}, PoolName: r.Pool,
			DeviceName: r.Device, CDIDeviceIDs: []string{CDIDeviceID(c.UID)}})
	}
	if err := writeSpec(p.cdiDir, c.UID, devs); err != nil {
		return kubeletplugin.PrepareResult{}, err
	}
	return kubeletplugin.PrepareResult{Devices: results}, nil
}

// UnprepareResourceClaims removes each claim's spec: everything Prepare made.
func (p *Plugin) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	out := make(map[types.UID]error, len(claims))
	for _, c := range claims {
		out[c.UID] = removeSpec(p.cdiDir, c.UID)
	}
	return out, nil
}

// HandleError logs what the helper met in the background (publishing slices); a fatal one ends the driver
// through the given cancel, so the DaemonSet restarts it instead of it running on without publishing.
func (p *Plugin) HandleError(ctx context.Context, err error, msg string) {
	klog.FromContext(ctx).Error(err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && p.fatal != nil {
		p.fatal(fmt.Errorf("%s: %w", msg, err))
	}
}
