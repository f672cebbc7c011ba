package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"conduit.dev/dra/internal/discovery"
	"conduit.dev/dra/internal/plugin"
	"conduit.dev/dra/internal/slices"
)

// publisher keeps the node's slices (and, as a kubelet plugin, the devices claims are prepared from)
// current.
type publisher interface {
	Update(ctx context.Context, r *resourceslice.DriverResources, devs []discovery.Device) error
	Stop()
}

type cancelKey struct{}

// fatalFrom is the driver's cancel, for errors after which it must not run on.
func fatalFrom(ctx context.Context) func(error) {
	cancel, _ := ctx.Value(cancelKey{}).(context.CancelCauseFunc)
	return func(err error) {
		if cancel != nil {
			cancel(err)
		}
	}
}

// sliceController publishes without a kubelet: the ResourceSlice controller alone, with the Node as owner
// (so spec.nodeName is set, and the slices go with the Node).
type sliceController struct{ c *resourceslice.Controller }

func startPublisher(ctx context.Context, cfg config, client kubernetes.Interface, desired *resourceslice.DriverResources) (publisher, error) {
	c, err := resourceslice.StartController(ctx, resourceslice.Options{
		DriverName: slices.DriverName,
		KubeClient: client,
		Owner:      &resourceslice.Owner{APIVersion: "v1", Kind: "Node", Name: cfg.nodeName},
		Resources:  desired,
		ErrorHandler: func(ctx context.Context, err error, msg string) {
			klog.FromContext(ctx).Error(err, msg)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("ResourceSlice controller: %w", err)
	}
	return sliceController{c}, nil
}

func (s sliceController) Update(_ context.Context, r *resourceslice.DriverResources, _ []discovery.Device) error {
	s.c.Update(r)
	return nil
}

func (s sliceController) Stop() { s.c.Stop() }

// kubeletPlugin serves the kubelet through kubeletplugin's helper, which also publishes the slices (the
// kubelet removes a driver's slices when the driver unregisters, so they are published only while it is
// registered).
type kubeletPlugin struct {
	h *kubeletplugin.Helper
	p *plugin.Plugin
}

func startKubeletPlugin(ctx context.Context, cfg config, client kubernetes.Interface, devs []discovery.Device,
	desired *resourceslice.DriverResources) (publisher, error) {
	p := plugin.New(slices.DriverName, cfg.nodeName, cfg.cdiDir)
	p.OnFatal(fatalFrom(ctx))
	p.SetDevices(devs)
	// The helper listens in its data directory but does not make it (the DaemonSet's hostPath usually has).
	dataDir := filepath.Join(cfg.kubeletDir, "plugins", slices.DriverName)
	if err := os.MkdirAll(dataDir, 0o750); err != nil {
		return nil, fmt.Errorf("kubelet plugin directory: %w", err)
	}
	h, err := kubeletplugin.Start(ctx, p,
		kubeletplugin.DriverName(slices.DriverName),
		kubeletplugin.KubeClient(client),
		kubeletplugin.NodeName(cfg.nodeName),
		kubeletplugin.RegistrarDirectoryPath(filepath.Join(cfg.kubeletDir, "plugins_registry")),
		kubeletplugin.PluginDataDirectoryPath(dataDir),
	)
	if err != nil {
		return nil, fmt.Errorf("kubelet plugin: %w", err)
	}
	kp := kubeletPlugin{h, p}
	if err := kp.Update(ctx, desired, devs); err != nil {
		h.Stop()
		return nil, err
	}
	return kp, nil
}

func (k kubeletPlugin) Update(ctx context.Context, r *resourceslice.DriverResources, devs []discovery.Device) error {
	k.p.SetDevices(devs)
	return k.h.PublishResources(ctx, *r)
}

func (k kubeletPlugin) Stop() { k.h.Stop() }
