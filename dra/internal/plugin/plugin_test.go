package plugin

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"

	"conduit.dev/dra/internal/discovery"
	"conduit.dev/dra/internal/faketree"
)

func node(t *testing.T) (*Plugin, string) {
	t.Helper()
	root := t.TempDir()
	if err := faketree.Write(root, faketree.EightGPUsEightNICs()); err != nil {
		t.Fatal(err)
	}
	res, err := discovery.Scan(root, discovery.Options{GPUs: true})
	if err != nil {
		t.Fatal(err)
	}
	cdi := t.TempDir()
	p := New("conduit.dev", "node-a", cdi)
	p.SetDevices(res.Devices)
	return p, cdi
}

func claim(uid string, results ...resourceapi.DeviceRequestAllocationResult) *resourceapi.ResourceClaim {
	return &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Name: "c-" + uid, Namespace: "ns", UID: types.UID(uid)},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results}}},
	}
}

func result(req, pool, dev string) resourceapi.DeviceRequestAllocationResult {
	return resourceapi.DeviceRequestAllocationResult{Request: req, Driver: "conduit.dev", Pool: pool, Device: dev}
}

func TestPrepareWritesTheClaimsCDISpecAndUnprepareRemovesIt(t *testing.T) {
	p, cdi := node(t)
	c := claim("uid-1", result("gpu", "node-a", "gpu-3"), result("nic", "node-a", "nic-mlx5-3"),
		resourceapi.DeviceRequestAllocationResult{Request: "other", Driver: "gpu.nvidia.com", Pool: "node-a", Device: "gpu-0"})
	got, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{c})
	if err != nil || got["uid-1"].Err != nil {
		t.Fatalf("prepare: %v %v", err, got["uid-1"].Err)
	}
	devs := got["uid-1"].Devices
	if len(devs) != 2 || devs[1].DeviceName != "nic-mlx5-3" || devs[1].CDIDeviceIDs[0] != "conduit.dev/claim=uid-1" {
		t.Fatalf("devices %+v (the other driver's device is not ours to prepare)", devs)
	}
	b, err := os.ReadFile(specFile(cdi, "uid-1"))
	if err != nil {
		t.Fatal(err)
	}
	var s cdiSpec
	if err := json.Unmarshal(b, &s); err != nil {
		t.Fatal(err)
	}
	e := s.Devices[0].ContainerEdits
	env := strings.Join(e.Env, " ")
	if s.Kind != "conduit.dev/claim" || s.Devices[0].Name != "uid-1" ||
		!strings.Contains(env, "CONDUIT_NICS=mlx5_3") || !strings.Contains(env, "CONDUIT_IFNAMES=ibp3") ||
		!strings.Contains(env, "CONDUIT_GPUS=0000:41:00.0") {
		t.Fatalf("spec %s", b)
	}
	if len(e.DeviceNodes) != 2 || e.DeviceNodes[0].Path != "/dev/infiniband/uverbs3" || e.DeviceNodes[1].Path != "/dev/infiniband/rdma_cm" {
		t.Fatalf("device nodes %+v", e.DeviceNodes)
	}

	un, err := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "uid-1"}})
	if err != nil || un["uid-1"] != nil {
		t.Fatalf("unprepare: %v %v", err, un)
	}
	if _, err := os.Stat(specFile(cdi, "uid-1")); !os.IsNotExist(err) {
		t.Fatalf("spec still there: %v", err)
	}
	// Again (the kubelet retries): not an error.
	if un, _ := p.UnprepareResourceClaims(context.Background(), []kubeletplugin.NamespacedObject{{UID: "uid-1"}}); un["uid-1"] != nil {
		t.Fatal(un["uid-1"])
	}
}

func TestClaimsThisNodeCannotPrepareFailWithTheReasonAndLeaveNoSpec(t *testing.T) {
	p, cdi := node(t)
	unallocated := claim("uid-u")
	unallocated.Status.Allocation = nil
	got, err := p.PrepareResourceClaims(context.Background(), []*resourceapi.ResourceClaim{
		claim("uid-b", result("nic", "node-b", "nic-mlx5-0")),
		claim("uid-g", result("nic", "node-a", "nic-mlx5-9")),
		unallocated,
	})
	if err != nil {
		t.Fatal(err)
	}
	for uid, want := range map[types.UID]string{"uid-b": "not this node's", "uid-g": "no longer on this node", "uid-u": "not allocated"} {
		if got[uid].Err == nil || !strings.Contains(got[uid].Err.Error(), want) {
			t.Errorf("%s: %v, want %q", uid, got[uid].Err, want)
		}
	}
	if left, _ := os.ReadDir(cdi); len(left) != 0 {
		t.Errorf("CDI dir holds %v", left)
	}
}
