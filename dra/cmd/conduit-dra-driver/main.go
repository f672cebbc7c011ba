// conduit-dra-driver publishes a node's RDMA NICs (and, with --gpus, its NVIDIA GPUs) as DRA devices of the
// driver conduit.dev: one ResourceSlice pool per node, kept current by rescanning sysfs (docs/dra.md).
//
//	conduit-dra-driver --node-name NODE [--kubeconfig FILE] [--sysfs-root /sys] [--gpus] [--rescan-interval 10s]
//	    [--kubelet-plugin [--kubelet-dir /var/lib/kubelet] [--cdi-dir /var/run/cdi]]
//	conduit-dra-driver --dry-run [--sysfs-root DIR] [--gpus]     print what would be published, as JSON
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/klog/v2"

	"conduit.dev/dra/internal/discovery"
	"conduit.dev/dra/internal/slices"
)

type config struct {
	kubeconfig string
	nodeName   string
	sysfsRoot  string
	gpus       bool
	rescan     time.Duration
	dryRun     bool

	kubeletPlugin bool
	kubeletDir    string
	cdiDir        string
}

func parseFlags() (config, error) {
	var c config
	fs := flag.NewFlagSet("conduit-dra-driver", flag.ContinueOnError)
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig file (default: the pod's in-cluster credentials)")
	fs.StringVar(&c.nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name (default $NODE_NAME)")
	fs.StringVar(&c.sysfsRoot, "sysfs-root", "/sys", "the sysfs tree devices are read from")
	fs.BoolVar(&c.gpus, "gpus", false, "publish NVIDIA GPUs too (for clusters without NVIDIA's DRA driver)")
	fs.DurationVar(&c.rescan, "rescan-interval", 10*time.Second, "how often sysfs is read again for added or removed devices")
	fs.BoolVar(&c.dryRun, "dry-run", false, "print the devices that would be published as JSON and exit")
	fs.BoolVar(&c.kubeletPlugin, "kubelet-plugin", false,
		"also serve the kubelet (register as its DRA plugin, prepare claims with CDI specs); without it only ResourceSlices are published")
	fs.StringVar(&c.kubeletDir, "kubelet-dir", "/var/lib/kubelet", "the kubelet's root directory (its plugins_registry and plugins/ are beneath)")
	fs.StringVar(&c.cdiDir, "cdi-dir", "/var/run/cdi", "where CDI specs of prepared claims are written")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	fs.Var(flagValue{klogFlags.Lookup("v")}, "v", "log verbosity")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return c, err
	}
	if fs.NArg() != 0 {
		return c, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	}
	if !c.dryRun && c.nodeName == "" {
		return c, errors.New("--node-name (or $NODE_NAME) is required: the driver publishes only its own node's devices")
	}
	if c.rescan < 100*time.Millisecond {
		return c, fmt.Errorf("--rescan-interval %v is too short (at least 100ms)", c.rescan)
	}
	return c, nil
}

// flagValue forwards one klog flag into the driver's own flag set.
type flagValue struct{ f *flag.Flag }

func (v flagValue) String() string {
	if v.f == nil {
		return ""
	}
	return v.f.Value.String()
}
func (v flagValue) Set(s string) error { return v.f.Value.Set(s) }

func main() {
	cfg, err := parseFlags()
	if errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "conduit-dra-driver: %v\n", err)
		os.Exit(2)
	}
	if err := run(cfg); err != nil {
		fmt.Fprintf(os.Stderr, "conduit-dra-driver: %v\n", err)
		os.Exit(1)
	}
}

// lastSkipped: the skipped devices last logged, so a rescan logs them again only when they change rather
// than at every interval.
var lastSkipped string

func scan(cfg config) (discovery.Result, error) {
	res, err := discovery.Scan(cfg.sysfsRoot, discovery.Options{GPUs: cfg.gpus})
	if now := strings.Join(res.Skipped, "\n"); now != lastSkipped {
		lastSkipped = now
		for _, s := range res.Skipped {
			klog.InfoS("Device skipped", "reason", s)
		}
	}
	return res, err
}

func run(cfg config) error {
	res, err := scan(cfg)
	if err != nil {
		return err
	}
	if cfg.dryRun {
		if cfg.nodeName == "" {
			cfg.nodeName, _ = os.Hostname()
		}
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(slices.Resources(cfg.nodeName, res.Devices))
	}

	restConfig, err := kubeConfig(cfg.kubeconfig)
	if err != nil {
		return err
	}
	client, err := kubernetes.NewForConfig(restConfig)
	if err != nil {
		return fmt.Errorf("kubernetes client: %w", err)
	}

	sigCtx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	ctx, cancel := context.WithCancelCause(sigCtx)
	defer cancel(nil)
	ctx = context.WithValue(ctx, cancelKey{}, cancel)

	desired := slices.Resources(cfg.nodeName, res.Devices)
	var pub publisher
	if cfg.kubeletPlugin {
		pub, err = startKubeletPlugin(ctx, cfg, client, res.Devices, desired)
	} else {
		pub, err = startPublisher(ctx, cfg, client, desired)
	}
	if err != nil {
		return err
	}
	defer pub.Stop()
	klog.InfoS("Publishing", "driver", slices.DriverName, "node", cfg.nodeName, "devices", len(res.Devices),
		"sysfsRoot", cfg.sysfsRoot, "kubeletPlugin", cfg.kubeletPlugin)

	// sysfs gives no reliable inotify events for devices coming and going, so the tree is read again on an
	// interval; the controller is told only when what it publishes changes.
	tick := time.NewTicker(cfg.rescan)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
				return err
			}
			klog.InfoS("Stopping")
			return nil
		case <-tick.C:
		}
		res, err := scan(cfg)
		if err != nil {
			// A tree that vanished (an unmounted host /sys) keeps the last published state rather than
			// withdrawing every device over what is likely a transient fault.
			klog.ErrorS(err, "Rescan failed; keeping the published devices")
			continue
		}
		next := slices.Resources(cfg.nodeName, res.Devices)
		if !apiequality.Semantic.DeepEqual(next, desired) {
			klog.InfoS("Devices changed", "devices", len(res.Devices))
			desired = next
			if err := pub.Update(ctx, desired, res.Devices); err != nil {
				klog.ErrorS(err, "Publishing the change failed")
			}
		}
	}
}

func kubeConfig(path string) (*rest.Config, error) {
	if path == "" {
		c, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a pod: %w", err)
		}
		return c, nil
	}
	c, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("--kubeconfig %s: %w", path, err)
	}
	return c, nil
}
