"""The cluster of test_dra.py: the DRA driver conduit.dev against a real kube-apiserver, kube-scheduler and
kube-controller-manager (its resourceclaim controller), all v1.34.2, shared by every test of the module
(docs/dra.md).

Two Node objects stand in for machines (no kubelet: scheduling needs only the Node, Ready, with room for
pods): ``dra-8x8`` (8 GPUs, 8 InfiniBand NICs, NIC i on GPU i's PCIe root) and ``dra-p5`` (8 GPUs, 32 EFA, four
per GPU's root). Each has a conduit-dra-driver process reading a fake sysfs tree of that shape
(conduit-fake-sysfs) and publishing with the identity the chart gives it in a cluster: the chart's service
account, through a token bound to a pod on that node (so the token names the node), under the chart's RBAC and
ValidatingAdmissionPolicy, rendered by helm and applied as they are.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import pytest
from harness.kube import KubeEnv, KubeToolsMissing
from harness.processes import Process, ProcessSet
from harness.wait import wait_for

REPO = Path(__file__).resolve().parents[3]
NAMESPACE = "conduit-dra"
RELEASE = "conduit"
DRIVER_SA = f"{RELEASE}-dra-driver"  # the chart's name for it (fullname "conduit" + "-dra-driver")
LAYOUTS = {"dra-8x8": "8gpu-8nic", "dra-p5": "p5"}


def _node_tools() -> dict[str, str]:
    r = subprocess.run([os.fspath(REPO / "scripts/kube-tools.sh"), "--node", "--print"], capture_output=True,
                       text=True, timeout=60)
    paths = dict(ln.split("=", 1) for ln in r.stdout.splitlines() if "=" in ln)
    missing = [k for k in ("KUBE_SCHEDULER", "KUBE_CONTROLLER_MANAGER") if not os.access(paths.get(k, ""), os.X_OK)]
    if missing:
        pytest.fail(f"no {', '.join(missing)}: run scripts/kube-tools.sh --node", pytrace=False)
    return paths


@dataclass
class Node:
    name: str
    sysfs: Path          # the fake tree its driver reads
    kubeconfig: Path     # the driver's credential: the chart's service account, token bound to a pod here
    token: str
    driver: Process | None = None


@dataclass
class Cluster:
    kube: KubeEnv
    work: Path
    bins: dict[str, str]
    procs: ProcessSet
    nodes: dict[str, Node] = field(default_factory=dict)

    def api(self, method: str, path: str, body: object = None, *, token: str | None = None,
            content_type: str | None = None) -> object:
        """The REST API as the admin (or TOKEN's identity); returns the requests.Response."""
        headers = {}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        if content_type:
            headers["Content-Type"] = content_type
        return self.kube.request(method, path, body=body, headers=headers)

    def ok(self, method: str, path: str, body: object = None, **kw: object) -> dict:
        r = self.api(method, path, body, **kw)
        assert r.status_code < 300, f"{method} {path}: {r.status_code} {r.text[:400]}"
        return r.json()

    def slices(self, node: str) -> list[dict]:
        sel = f"spec.driver=conduit.dev,spec.nodeName={node}"
        return self.ok("GET", f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector={sel}")["items"]

    def devices(self, node: str) -> dict[str, dict]:
        """{device name: its attributes as plain values} of NODE's published slices."""
        out = {}
        for s in self.slices(node):
            for d in s["spec"].get("devices", []):
                out[d["name"]] = {k: next(iter(v.values())) for k, v in d.get("attributes", {}).items()}
        return out


def _now() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _make_node(c: Cluster, name: str) -> None:
    c.ok("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node",
                                   "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}})
    room = {"cpu": "64", "memory": "512Gi", "pods": "110"}
    c.ok("PATCH", f"/api/v1/nodes/{name}/status", {"status": {
        "capacity": room, "allocatable": room,
        "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady", "message": "a test node",
                        "lastHeartbeatTime": _now(), "lastTransitionTime": _now()}]}},
         content_type="application/merge-patch+json")
    # Admission (TaintNodesByCondition) taints a new Node not-ready until its node-lifecycle controller sees
    # the kubelet's Ready; with no kubelet and no such controller here, the test lifts the taint itself.
    c.ok("PATCH", f"/api/v1/nodes/{name}", {"spec": {"taints": None}}, content_type="application/merge-patch+json")


def _driver_identity(c: Cluster, node: str) -> tuple[Path, str]:
    """A kubeconfig whose token is the chart's driver service account's, bound to a pod on NODE, as the
    DaemonSet's pod there gets it (the token then names the node)."""
    pod = c.ok("POST", f"/api/v1/namespaces/{NAMESPACE}/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"dra-driver-{node}"},
        "spec": {"nodeName": node, "serviceAccountName": DRIVER_SA,
                 "containers": [{"name": "driver", "image": "localhost/conduit-dra-driver:test"}]}})
    tr = c.ok("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{DRIVER_SA}/token", {
        "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"expirationSeconds": 3600,
                 "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                                    "uid": pod["metadata"]["uid"]}}})
    token = tr["status"]["token"]
    kc = c.work / f"{node}.kubeconfig"
    ca = subprocess.run(["base64", "-w0", os.fspath(c.kube.ca)], capture_output=True, text=True).stdout
    kc.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: e2e, cluster: {{server: "{c.kube.url}", certificate-authority-data: {ca}}}}}]
users: [{{name: driver, user: {{token: {token}}}}}]
contexts: [{{name: e2e, context: {{cluster: e2e, user: driver}}}}]
current-context: e2e
""")
    kc.chmod(0o600)
    return kc, token


def start_driver(c: Cluster, n: Node) -> Process:
    return c.procs.start([c.bins["DRA_DRIVER"], "--kubeconfig", n.kubeconfig, "--node-name", n.name,
                          "--sysfs-root", n.sysfs, "--gpus", "--rescan-interval", "300ms", "--v=2"],
                         name=f"dra-driver-{n.name}", stderr=c.work / f"driver-{n.name}.log")


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    r = subprocess.run([os.fspath(REPO / "scripts/dra-build.sh")], capture_output=True, text=True, timeout=1200)
    if r.returncode != 0:
        pytest.fail(f"scripts/dra-build.sh: {r.stderr.strip()[-800:]}", pytrace=False)
    bins = dict(ln.split("=", 1) for ln in r.stdout.splitlines() if "=" in ln)

    work = Path(tempfile.mkdtemp(prefix="conduit-dra.", dir=os.environ.get("TMPDIR")))
    try:
        kube = KubeEnv(REPO, work / "env", long_lived=True)
    except KubeToolsMissing as e:
        pytest.fail(f"{e} (build them with scripts/kube-tools.sh)", pytrace=False)
    procs = ProcessSet(long_lived=True)
    c = Cluster(kube, work, bins, procs)
    try:
        tools = _node_tools()
        kc = os.fspath(kube.kubeconfig)
        procs.start([tools["KUBE_SCHEDULER"], f"--kubeconfig={kc}", "--leader-elect=false", "--secure-port=0"],
                    name="kube-scheduler", stderr=work / "kube-scheduler.log")
        # Only the controller that makes a pod's ResourceClaims from its templates (and deletes them with it).
        procs.start([tools["KUBE_CONTROLLER_MANAGER"], f"--kubeconfig={kc}", "--leader-elect=false",
                     "--secure-port=0", "--controllers=resourceclaim-controller",
                     "--use-service-account-credentials=false"],
                    name="kube-controller-manager", stderr=work / "kube-controller-manager.log")

        # The chart's driver identity, policy and DeviceClasses, as helm renders them.
        r = kube.kubectl("create", "namespace", NAMESPACE)
        assert r.returncode == 0, r.stderr
        kube.namespace = NAMESPACE
        helm_env = {**os.environ, **{f"HELM_{k}_HOME": os.fspath(work / "helm" / k.lower())
                                     for k in ("CONFIG", "CACHE", "DATA")}}
        r = subprocess.run([kube.tools["HELM"], "template", RELEASE, os.fspath(REPO / "helm/conduit"), "-n", NAMESPACE,
                            "--set", "dra.enabled=true,dra.gpus=true", "--show-only", "templates/dra-rbac.yaml",
                            "--show-only", "templates/dra-deviceclass.yaml"],
                           capture_output=True, text=True, env=helm_env, timeout=60)
        assert r.returncode == 0, f"helm template: {r.stderr}"
        r = kube.kubectl("apply", "-f", "-", input=r.stdout)
        assert r.returncode == 0, f"the chart's DRA objects: {r.stderr}"

        for name, layout in LAYOUTS.items():
            _make_node(c, name)
            sysfs = work / f"sysfs-{name}"
            subprocess.run([bins["FAKE_SYSFS"], "--layout", layout, os.fspath(sysfs)], check=True, timeout=30)
            kcfg, token = _driver_identity(c, name)
            c.nodes[name] = Node(name, sysfs, kcfg, token)

        # Policies take effect a moment after they are created: wait until one node's identity is refused
        # another's slice (a dry run, so nothing is written either way) before any driver writes.
        a, b = c.nodes["dra-8x8"], "dra-p5"
        wait_for(lambda: c.api("POST", "/apis/resource.k8s.io/v1/resourceslices?dryRun=All",
                               foreign_slice(b), token=a.token).status_code == 403,
                 30, "the chart's ValidatingAdmissionPolicy in force")

        for n in c.nodes.values():
            n.driver = start_driver(c, n)
        yield c
    finally:
        procs.stop_all()
        kube.stop()
        if request.config.getoption("--keep"):
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def foreign_slice(node: str, pool: str | None = None) -> dict:
    """A ResourceSlice of driver conduit.dev for NODE, with one device."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
            "metadata": {"generateName": f"{node}-forged-"},
            "spec": {"driver": "conduit.dev", "nodeName": node,
                     "pool": {"name": pool or node, "generation": 1, "resourceSliceCount": 1},
                     "devices": [{"name": "nic-forged"}]}}
