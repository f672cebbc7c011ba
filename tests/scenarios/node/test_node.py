"""A real Kubernetes node (issue 37, first milestone): containerd, a kubelet v1.34 with its own client certificate,
kube-scheduler and kube-controller-manager joined to the test apiserver (scripts/kube-node.sh), this tree's
agent and controller images built without a registry and imported into the node's containerd
(scripts/kube-images.sh), and then what a user checks:

  1. the node is Ready, runs kubelet v1.34 on containerd, and carries no not-ready taint;
  2. a Pod of the agent image (imagePullPolicy: Never, its token from a Secret) is Running and Ready (the kubelet
     probed /readyz over the pod network), its log says the agent listens, and it answers on its pod IP with
     the Secret's token (401 without);
  3. `helm install` of the chart with the local images: the agent DaemonSet's pod Running and Ready, the
     controller Deployment Available, and the FabricNode of the node Reachable (the controller, in its pod,
     found the agent and reached it); a TransferJob copying a file of its namespace on the node Succeeded and
     the copy is byte-identical; `helm uninstall` ends both pods;
  4. stop leaves nothing of the node on the machine (processes, mounts, network namespaces, bridge, cgroups).

One apiserver and one node for the module. Needs root, scripts/install-deps.sh --node and
scripts/kube-tools.sh --node: a machine without them fails here, saying which (never a faked node).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests
from e2e.util import free_port
from harness.kube import KubeEnv, KubeToolsMissing, kube_tools
from harness.node import KubeNode, NodeUnavailable

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "helm/conduit"
NODE = "conduit-node"


@dataclass
class Cluster:
    kube: KubeEnv
    node: KubeNode
    images: dict[str, str]
    work: Path
    tools: dict[str, str]


@pytest.fixture(scope="module")
def cluster(build, request) -> Iterator[Cluster]:
    work = Path(tempfile.mkdtemp(prefix="conduit-node."))
    kube = node = None
    why = ""
    try:
        try:
            tools = kube_tools(REPO)
            kube = KubeEnv(REPO, work / "env", long_lived=True, node=True)
            # A node that cannot start says why (the script's own lines); its start stopped what it started.
            node = KubeNode(REPO, work / "node", kube, NODE, long_lived=True)
            images = node.load_images(build.dir)
        except KubeToolsMissing as e:
            why = f"{e} (build them with scripts/kube-tools.sh --node)"
        except NodeUnavailable as e:
            why = str(e)
        if why:
            pytest.fail(why, pytrace=False)
        yield Cluster(kube, node, images, work, tools)
    finally:
        if node:
            node.stop()
        if kube:
            kube.stop()
        if request.config.getoption("--keep"):
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(autouse=True)
def _node_processes_are_the_modules(request) -> Iterator[None]:
    """Shims that a test's pods started belong to the node (the module's), not to the test; stop reaps them."""
    yield
    if "cluster" in request.fixturenames:
        request.getfixturevalue("cluster").node.adopt()


def wait_for(what: str, check, timeout: float = 90.0, every: float = 0.5):
    """CHECK() until it returns something true; its value, or fail naming WHAT and its last value."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(every)
    pytest.fail(f"{what} not within {timeout:.0f} s (last: {last!r})", pytrace=False)


def when(kube: KubeEnv, path: str, pred):
    """A check for wait_for: the object at PATH once PRED(it) holds, else None."""
    return lambda: (lambda obj: obj if pred(obj) else None)(kube.get(path))


def pulled_never(ref: str) -> str:
    """Chart values for the local image REF (repository:tag), never pulled."""
    repo, tag = ref.rsplit(":", 1)
    return f'{{repository: {repo}, tag: "{tag}", pullPolicy: Never}}'


def condition(obj: dict, kind: str) -> str:
    """The status of OBJ's condition KIND ("" when it has none, or OBJ is an error Status)."""
    status = obj.get("status")
    conditions = status.get("conditions", []) if isinstance(status, dict) else []
    return next((c.get("status", "") for c in conditions if c.get("type") == kind), "")


def test_node_is_ready(cluster, report):
    k, n = cluster.kube, cluster.node
    got = k.get(f"/api/v1/nodes/{NODE}")
    assert condition(got, "Ready") == "True", f"node {NODE} not Ready: {got.get('status', {}).get('conditions')}"
    info = got["status"]["nodeInfo"]
    assert info["kubeletVersion"] == "v1.34.2", f"kubelet {info['kubeletVersion']}"
    assert info["containerRuntimeVersion"].startswith("containerd://1."), info["containerRuntimeVersion"]
    assert any(a == {"type": "InternalIP", "address": n.env["NODE_IP"]} for a in got["status"]["addresses"]), \
        f"node addresses {got['status']['addresses']} lack InternalIP {n.env['NODE_IP']}"
    # The node lifecycle controller (kube-controller-manager) lifts the not-ready taint once it sees Ready.
    wait_for("node.kubernetes.io/not-ready taint lifted",
             lambda: not any(t["key"].startswith("node.kubernetes.io/not-ready")
                             for t in k.get(f"/api/v1/nodes/{NODE}").get("spec", {}).get("taints", [])), 60)
    report(f"node Ready in {n.ms('NODE_START_MS') / 1000:.1f} s (containerd {n.ms('CONTAINERD_START_MS')} ms, pause "
           f"image {n.ms('PAUSE_IMAGE_MS')} ms + import {n.ms('PAUSE_IMPORT_MS')} ms, kubelet to Ready "
           f"{n.ms('KUBELET_READY_MS')} ms); agent and controller images {cluster.images['build_s']} s, imported "
           f"in {cluster.images['import_s']} s")


def test_agent_image_runs_as_a_pod(cluster, report):
    k = cluster.kube
    ns, token = "node-pod", os.urandom(16).hex()
    for argv in (["create", "namespace", ns],
                 ["-n", ns, "create", "secret", "generic", "agent-token", f"--from-literal=token={token}"]):
        r = k.kubectl(*argv, namespace=ns)
        assert r.returncode == 0, f"kubectl {' '.join(argv[:3])}: {r.stderr.strip()}"
    pod = f"""apiVersion: v1
kind: Pod
metadata: {{name: agent, namespace: {ns}}}
spec:
  terminationGracePeriodSeconds: 5
  containers:
  - name: agent
    image: {cluster.images['AGENT_IMAGE']}
    imagePullPolicy: Never
    args: ["--listen=0.0.0.0:7070", "--token-file=/etc/conduit/token", "--memory-cap=64MiB"]
    readinessProbe: {{httpGet: {{path: /readyz, port: 7070}}, periodSeconds: 1}}
    volumeMounts: [{{name: token, mountPath: /etc/conduit, readOnly: true}}]
  volumes: [{{name: token, secret: {{secretName: agent-token}}}}]
"""
    t0 = time.monotonic()
    r = k.kubectl("apply", "-f", "-", input=pod, namespace=ns)
    assert r.returncode == 0, f"pod not accepted: {r.stderr.strip()}"
    path = f"/api/v1/namespaces/{ns}/pods/agent"
    got = wait_for("the agent pod Ready", when(k, path, lambda p: condition(p, "Ready") == "True"))
    ready_s = time.monotonic() - t0
    assert got["status"]["phase"] == "Running", f"phase {got['status']['phase']}"
    assert got["spec"]["nodeName"] == NODE
    state = got["status"]["containerStatuses"][0]
    assert state["image"].endswith(cluster.images["AGENT_IMAGE"].split("/", 1)[1]) and state["restartCount"] == 0, \
        f"container status {state}"

    logs = k.kubectl("logs", "agent", namespace=ns)
    assert logs.returncode == 0, f"kubectl logs: {logs.stderr.strip()}"
    assert "listening" in logs.stdout and "0.0.0.0:7070" in logs.stdout, f"agent log: {logs.stdout[-400:]}"

    # The host reaches the pod through the node's bridge; the Secret's token is what the agent took.
    url = f"http://{got['status']['podIP']}:7070/v1/node"
    assert requests.get(url, timeout=5).status_code == 401, "the agent answered without its token"
    answer = requests.get(url, headers={"Authorization": f"Bearer {token}"}, timeout=5)
    assert answer.status_code == 200, f"GET /v1/node with the Secret's token: {answer.status_code} {answer.text[:200]}"

    t1 = time.monotonic()
    r = k.kubectl("delete", "pod", "agent", "--wait=true", "--timeout=60s", namespace=ns, timeout=90)
    assert r.returncode == 0, f"kubectl delete pod: {r.stderr.strip()}"
    report(f"agent pod Ready in {ready_s:.1f} s (answers on {got['status']['podIP']} with its token); deleted in "
           f"{time.monotonic() - t1:.1f} s")


def test_chart_runs_on_the_node(cluster, report):
    k, n = cluster.kube, cluster.node
    api = k.url.removeprefix("https://")
    host, port = api.rsplit(":", 1)
    agent_port = free_port()  # the agent runs with hostNetwork
    images = cluster.images
    # Where the chart mounts host paths, this node's directory; no RDMA here; the apiserver at the node's
    # address, since no kube-proxy routes the kubernetes Service (pods read KUBERNETES_SERVICE_HOST/PORT).
    env = f'[{{name: KUBERNETES_SERVICE_HOST, value: "{host}"}}, {{name: KUBERNETES_SERVICE_PORT, value: "{port}"}}]'
    values = f"""crds: {{upgradeJob: {{enabled: false}}}}
agent:
  image: {pulled_never(images['AGENT_IMAGE'])}
  port: {agent_port}
  nodeSelector: {{feature.node.kubernetes.io/pci-15b3.present: null}}
  rdma: {{enabled: false}}
  memoryCap: 256MiB
  regionPool: 64MiB
  dataDir: {n.dir}/agent-data
  importSocket: {{hostDir: {n.dir}/agent-run}}
  podResources: {{path: {n.env['KUBELET_ROOT']}/pod-resources}}
  extraEnv: {env}
  readinessProbe: {{initialDelaySeconds: 0, periodSeconds: 1}}
controller:
  image: {pulled_never(images['CONTROLLER_IMAGE'])}
  replicas: 1
  extraEnv: {env}
  readinessProbe: {{initialDelaySeconds: 0, periodSeconds: 1}}
"""
    (cluster.work / "values.yaml").write_text(values)
    hdir = cluster.work / "helm"
    henv = {**os.environ, "HELM_CONFIG_HOME": f"{hdir}/config", "HELM_CACHE_HOME": f"{hdir}/cache",
            "HELM_DATA_HOME": f"{hdir}/data", "KUBECONFIG": os.fspath(k.kubeconfig)}

    def helm(*args):
        r = subprocess.run([cluster.tools["HELM"], *args], capture_output=True, text=True, env=henv, timeout=180)
        assert r.returncode == 0, f"helm {args[0]}: {(r.stdout + r.stderr).strip()[-400:]}"

    ns = "conduit-system"
    t0 = time.monotonic()
    helm("install", "conduit", os.fspath(CHART), "-n", ns, "--create-namespace", "-f",
         os.fspath(cluster.work / "values.yaml"))

    wait_for("the agent DaemonSet's pod Ready on the node",
             when(k, f"/apis/apps/v1/namespaces/{ns}/daemonsets/conduit-agent",
                  lambda d: d.get("status", {}).get("desiredNumberScheduled") == 1
                  and d.get("status", {}).get("numberReady") == 1), 120)
    agent_s = time.monotonic() - t0
    wait_for("the controller Deployment Available",
             when(k, f"/apis/apps/v1/namespaces/{ns}/deployments/conduit-controller",
                  lambda d: condition(d, "Available") == "True"), 120)
    controller_s = time.monotonic() - t0
    pods = k.get(f"/api/v1/namespaces/{ns}/pods").get("items", [])
    phases = {p["metadata"]["name"]: (p["status"].get("phase"), p["spec"].get("nodeName")) for p in pods}
    assert len(pods) == 2 and all(ph == ("Running", NODE) for ph in phases.values()), f"pods: {phases}"

    # The controller, from its pod, found the agent through the EndpointSlice and reached it (TLS, the node
    # certificate the agent got through a CSR the controller signed).
    fabric = wait_for(f"FabricNode {NODE} Reachable", when(k, f"/apis/conduit.dev/v1alpha1/fabricnodes/{NODE}",
                                                         lambda f: condition(f, "Reachable") == "True"), 60)
    reachable_s = time.monotonic() - t0
    assert fabric["metadata"]["name"] == NODE

    # A TransferJob through it all: the controller asks the agent to copy a file of the job's namespace into
    # another (the agent is its own target, as a peer: TLS and its node certificate), verified with CRC32C.
    team = "team-a"
    data = os.urandom(3 * 1024 * 1024 + 12345)
    src = n.dir / "agent-data" / team / "ckpt.bin"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(data)
    r = k.kubectl("create", "namespace", team, namespace=team)
    assert r.returncode == 0, f"create namespace: {r.stderr.strip()}"
    job = f"""apiVersion: conduit.dev/v1alpha1
kind: TransferJob
metadata: {{name: copy, namespace: {team}}}
spec:
  source: {{node: {NODE}, file: {team}/ckpt.bin}}
  targets: [{{node: {NODE}, file: {team}/ckpt-copy.bin}}]
  verify: crc32c
"""
    t1 = time.monotonic()
    r = k.kubectl("apply", "-f", "-", input=job, namespace=team)
    assert r.returncode == 0, f"TransferJob not accepted: {r.stderr.strip()}"
    path = f"/apis/conduit.dev/v1alpha1/namespaces/{team}/transferjobs/copy"
    done = wait_for("the TransferJob's end",
                    when(k, path, lambda j: j.get("status", {}).get("phase") in ("Succeeded", "Failed")), 60)
    assert done["status"]["phase"] == "Succeeded", f"TransferJob: {done['status']}"
    copy = src.with_name("ckpt-copy.bin")
    assert copy.read_bytes() == data, f"{copy} is not the source's {len(data)} bytes"
    job_s = time.monotonic() - t1

    helm("uninstall", "conduit", "-n", ns, "--wait", "--timeout", "90s")
    wait_for("the chart's pods gone", lambda: not k.get(f"/api/v1/namespaces/{ns}/pods").get("items", [1]), 90)
    report(f"helm install: agent pod Ready {agent_s:.1f} s, controller Available {controller_s:.1f} s, FabricNode "
           f"Reachable {reachable_s:.1f} s; a TransferJob copied {len(data)} bytes intact in {job_s:.1f} s; "
           f"uninstalled, pods gone at {time.monotonic() - t0:.1f} s")


def test_stop_leaves_nothing_behind(cluster, report):
    n = cluster.node
    running = n.leftovers()
    for what in ("process", "mount", "bridge", "cgroup"):
        assert any(x.startswith(what) for x in running), f"leftovers() does not see the running node's {what}es"
    took = n.stop()
    left = n.leftovers()
    assert not left, f"left behind by kube-node.sh stop: {'; '.join(left)}"
    report(f"node stopped in {took:.1f} s, nothing left (processes, mounts, netns, bridge, cgroups)")

