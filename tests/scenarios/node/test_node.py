"""A real Kubernetes node (issue 37): containerd, a kubelet v1.34 with its own client certificate,
kube-scheduler and kube-controller-manager joined to the test apiserver (scripts/kube-node.sh), this tree's
agent, controller and workload images built without a registry and imported into the node's containerd
(scripts/kube-images.sh), and then what a user checks:

  1. the node is Ready, runs kubelet v1.34 on containerd, and carries no not-ready taint;
  2. a Pod of the agent image (imagePullPolicy: Never, its token from a Secret) is Running and Ready (the kubelet
     probed /readyz over the pod network), its log says the agent listens, and it answers on its pod IP with
     the Secret's token (401 without);
  3. `helm install` of the chart with the local images: the agent DaemonSet's pod Running and Ready with the
     chart's security context, the controller Deployment Available and leading; the agent's node certificate
     issued through a CSR sent with its pod's bound token and signed by the controller in its pod
     (CN conduit:agent:<node>, the agent signer's); the agent serves HTTPS under the Service's name (refused by
     its address), takes the controller's client certificate without a token, refuses its own node
     certificate on an operator route and nobody at all; the FabricNode Reachable; a TransferJob copying a
     file on the node Succeeded and the copy is byte-identical; the controller was never refused (403);
  4. the example workload (helm/conduit/examples/workload-with-import-socket.yaml, this tree's SDK in an
     image) mounts the agent's import socket and shares a region through the SDK; the example pod-selector
     TransferJob (crds/examples/pod-targets.yaml) fills it, and a process of the pod reads the source's bytes;
  5. an agent whose shm rail is wedged for real (a peer process in its pod's /dev/shm and PID namespace takes
     shm's lock and is killed, as docs/reliability.md tells) answers /healthz 503 and the kubelet's liveness
     probe restarts it: restarts 1 for that pod, 0 for the others; it comes back Ready with the same node
     certificate;
  6. `helm upgrade` (the controller's pod replaced) keeps the agent's node certificate (same serial, no new
     CSR) and the new controller reaches the agent with it; `helm uninstall` leaves no object of the
     release in the apiserver and no pod or container of it on the node;
  7. stop leaves nothing of the node on the machine (processes, mounts, network namespaces, bridge, cgroups).

One apiserver, one node and one release for the module, the tests in this order. Needs root,
scripts/install-deps.sh --node and scripts/kube-tools.sh --node: a machine without them fails here, saying
which (never a faked node).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import select
import shutil
import signal
import socket
import ssl
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
from node.chart import (CHART, NS, RELEASE, WORKLOAD_DIGEST, AgentHttps, Helm, pod_targets_job, secret_data, values,
                        workload)

REPO = Path(__file__).resolve().parents[3]
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
            tools = kube_tools(REPO, node=True)
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


@dataclass
class Release:
    helm: Helm
    values: Path
    agent: AgentHttps  # the agent of the node, over HTTPS as the SDK calls it
    port: int
    dir: Path  # the release's Secrets as files: ca.crt, the controller's client certificate, the signer's
    installed_at: float
    token: str = ""
    facts: dict | None = None  # what a test found that a later one compares with


@pytest.fixture(scope="module")
def release(cluster) -> Iterator[Release]:
    """The chart installed on the node (test_chart_runs_on_the_node checks the install); uninstalled at the end
    whatever happened (test_upgrade_keeps_the_node_certificate_then_uninstall checks that it leaves nothing)."""
    k, n = cluster.kube, cluster.node
    port = free_port()  # the agent runs with hostNetwork
    vals = cluster.work / "values.yaml"
    vals.write_text(values(k, n.dir, n.env["KUBELET_ROOT"], cluster.images, port))
    helm = Helm(cluster.tools["HELM"], k, cluster.work / "helm")
    d = cluster.work / "release"
    d.mkdir()
    t0 = time.monotonic()
    r = helm("install", RELEASE, os.fspath(CHART), "-n", NS, "--create-namespace", "-f", os.fspath(vals))
    assert r.returncode == 0, f"helm install: {(r.stdout + r.stderr).strip()[-400:]}"
    rel = Release(helm, vals, AgentHttps(n.env["NODE_IP"], port, d / "ca.crt", f"{RELEASE}-agent"), port, d, t0,
                  facts={})
    try:
        yield rel
    finally:
        if helm("status", RELEASE, "-n", NS).returncode == 0:
            helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "90s")


def pods(k: KubeEnv, ns: str, selector: str = "") -> list[dict]:
    q = f"?labelSelector={selector}" if selector else ""
    return k.get(f"/api/v1/namespaces/{ns}/pods{q}").get("items", [])


def agent_pod(k: KubeEnv) -> dict:
    """The DaemonSet's pod on the node ({} when there is none, or more than one)."""
    got = pods(k, NS, "app.kubernetes.io/component=agent")
    return got[0] if len(got) == 1 else {}


def agent_log(k: KubeEnv, lines: int = 40) -> str:
    """The last LINES of the agent's log (and its previous container's, after a restart)."""
    name = agent_pod(k).get("metadata", {}).get("name", "")
    now = k.kubectl("logs", name, f"--tail={lines}", namespace=NS).stdout
    before = k.kubectl("logs", name, "--previous", f"--tail={lines}", namespace=NS).stdout
    return (f"[previous container] {before}\n[now] " if before else "") + now


def ready(pod: dict) -> bool:
    return condition(pod, "Ready") == "True"


def restarts(pod: dict) -> int:
    return sum(c.get("restartCount", 0) for c in pod.get("status", {}).get("containerStatuses", []))


def container_pid(pod: dict, comm: str) -> int:
    """The host pid of the process COMM in POD's first container (its cgroup names the container's ID)."""
    cid = pod["status"]["containerStatuses"][0].get("containerID", "").split("//", 1)[-1]
    for e in os.scandir("/proc"):
        if e.name.isdigit() and cid:
            try:
                if Path(f"/proc/{e.name}/comm").read_text().strip() == comm and \
                        f"/{cid}" in Path(f"/proc/{e.name}/cgroup").read_text():
                    return int(e.name)
            except OSError:
                continue
    return 0


def node_certificate(cluster: Cluster, pod: dict) -> Path:
    """The agent's node certificate (key and certificate) in its pod's in-memory emptyDir, on the node."""
    return Path(cluster.node.env["KUBELET_ROOT"]) / "pods" / pod["metadata"]["uid"] / \
        "volumes/kubernetes.io~empty-dir/identity/node.pem"


def openssl(*args) -> str:
    r = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, timeout=30)
    return (r.stdout + r.stderr).strip()


def agent_csrs(k: KubeEnv) -> list[dict]:
    return [c for c in k.get("/apis/certificates.k8s.io/v1/certificatesigningrequests").get("items", [])
            if c["spec"].get("signerName") == "conduit.dev/agent"]


def job_end(k: KubeEnv, ns: str, name: str, timeout: float = 60) -> dict:
    return wait_for(f"TransferJob {ns}/{name}'s end",
                    when(k, f"/apis/conduit.dev/v1alpha1/namespaces/{ns}/transferjobs/{name}",
                         lambda j: j.get("status", {}).get("phase") in ("Succeeded", "Failed")), timeout)


def copy_job(k: KubeEnv, ns: str, name: str, src: str, dst: str) -> dict:
    """A TransferJob copying file SRC of NS's directory on the node to DST, verified; its end."""
    job = f"""apiVersion: conduit.dev/v1alpha1
kind: TransferJob
metadata: {{name: {name}, namespace: {ns}}}
spec:
  source: {{node: {NODE}, file: {ns}/{src}}}
  targets: [{{node: {NODE}, file: {ns}/{dst}}}]
  verify: crc32c
"""
    r = k.kubectl("apply", "-f", "-", input=job, namespace=ns)
    assert r.returncode == 0, f"TransferJob not accepted: {r.stderr.strip()}"
    return job_end(k, ns, name)


def test_chart_runs_on_the_node(cluster, release, report):
    k, n, rel = cluster.kube, cluster.node, release
    t0 = rel.installed_at
    wait_for("the agent DaemonSet's pod Ready on the node",
             when(k, f"/apis/apps/v1/namespaces/{NS}/daemonsets/{RELEASE}-agent",
                  lambda d: d.get("status", {}).get("desiredNumberScheduled") == 1
                  and d.get("status", {}).get("numberReady") == 1), 120)
    agent_s = time.monotonic() - t0
    wait_for("the controller Deployment Available",
             when(k, f"/apis/apps/v1/namespaces/{NS}/deployments/{RELEASE}-controller",
                  lambda d: condition(d, "Available") == "True"), 120)
    controller_s = time.monotonic() - t0
    got = pods(k, NS)
    phases = {p["metadata"]["name"]: (p["status"].get("phase"), p["spec"].get("nodeName")) for p in got}
    assert len(got) == 2 and all(ph == ("Running", NODE) for ph in phases.values()), f"pods: {phases}"
    agent = agent_pod(k)
    controller = next(p for p in got if p is not agent and p["metadata"]["name"] != agent["metadata"]["name"])

    # The chart's security context as the runtime applied it to the agent's process: root with IPC_LOCK
    # alone (bit 14), no new privileges, a seccomp filter.
    pid = container_pid(agent, "conduit-agent")
    assert pid, f"no conduit-agent process in container {agent['status']['containerStatuses'][0].get('containerID')}"
    status = dict(ln.split(":\t", 1) for ln in Path(f"/proc/{pid}/status").read_text().splitlines() if ":\t" in ln)
    assert (status["Uid"].split()[1], status["CapEff"], status["NoNewPrivs"], status["Seccomp"]) == \
        ("0", f"{1 << 14:016x}", "1", "2"), \
        f"agent process: euid {status['Uid']}, CapEff {status['CapEff']}, NoNewPrivs {status['NoNewPrivs']}, " \
        f"Seccomp {status['Seccomp']}"

    # The release's Secrets, as files for the calls below.
    tls = secret_data(k, NS, f"{RELEASE}-agent-tls")
    client = secret_data(k, NS, f"{RELEASE}-controller-client-tls")
    signer = secret_data(k, NS, f"{RELEASE}-agent-signer")
    for name, data in (("ca.crt", tls["ca.crt"]), ("controller.crt", client["tls.crt"]),
                       ("controller.key", client["tls.key"]), ("signer.crt", signer["tls.crt"])):
        (rel.dir / name).write_bytes(data)
    rel.token = secret_data(k, NS, f"{RELEASE}-agent-token")["token"].decode()

    # The controller, in its pod, leads.
    lease = wait_for("the controller's Lease held", when(
        k, f"/apis/coordination.k8s.io/v1/namespaces/{NS}/leases/{RELEASE}-controller",
        lambda le: le.get("spec", {}).get("holderIdentity")), 30)
    assert lease["spec"]["holderIdentity"].startswith(controller["metadata"]["name"]), \
        f"Lease holder {lease['spec']['holderIdentity']}, not the controller's pod {controller['metadata']['name']}"

    # The agent's node certificate: asked for with its pod's bound token (the apiserver recorded the pod and
    # node), approved and signed by the controller with the agent signer; the agent holds what was issued.
    csrs = wait_for("the agent's CSR issued", lambda: [c for c in agent_csrs(k)
                                                       if c.get("status", {}).get("certificate")], 30)
    assert len(csrs) == 1, f"{len(csrs)} issued CSRs for conduit.dev/agent, want the agent's one"
    csr = csrs[0]
    extra = csr["spec"].get("extra", {})
    assert csr["spec"]["username"] == f"system:serviceaccount:{NS}:{RELEASE}-agent" and \
        extra.get("authentication.kubernetes.io/pod-name") == [agent["metadata"]["name"]] and \
        extra.get("authentication.kubernetes.io/node-name") == [NODE], \
        f"the CSR's requester: {csr['spec']['username']} {extra}"
    assert [c["type"] for c in csr["status"]["conditions"]] == ["Approved"], csr["status"]["conditions"]
    issued = rel.dir / "issued.crt"
    issued.write_bytes(base64.b64decode(csr["status"]["certificate"]))
    pem = node_certificate(cluster, agent)
    assert pem.exists(), f"no node certificate at {pem}"
    subject = openssl("x509", "-in", pem, "-noout", "-subject")
    assert re.search(rf"CN\s*=\s*conduit:agent:{NODE}$", subject), f"the node certificate names: {subject}"
    assert openssl("verify", "-CAfile", rel.dir / "signer.crt", pem).endswith(": OK"), \
        "the node certificate is not the agent signer's"
    serial = openssl("x509", "-in", pem, "-noout", "-serial")
    assert serial == openssl("x509", "-in", issued, "-noout", "-serial"), "the agent holds another certificate"
    rel.facts.update(serial=serial, csrs=len(agent_csrs(k)), agent_uid=agent["metadata"]["uid"])

    # HTTPS under the Service's name (refused by the address, no plain HTTP); who gets in: the controller by
    # its client certificate alone, an operator by the token; the agent's own node certificate not on an
    # operator's route, nobody not at all.
    a = rel.agent
    with pytest.raises(ssl.SSLCertVerificationError):
        a.call("GET", "/healthz", name=n.env["NODE_IP"])
    with pytest.raises(requests.RequestException):
        requests.get(f"http://{n.env['NODE_IP']}:{rel.port}/healthz", timeout=5)
    ctl = (rel.dir / "controller.crt", rel.dir / "controller.key")
    calls = {"nobody GET /v1/node": (a.call("GET", "/v1/node"), 401),
             "controller GET /v1/regions": (a.call("GET", "/v1/regions", cert=ctl), 200),
             "token GET /v1/regions": (a.call("GET", "/v1/regions", token=rel.token), 200),
             "agent GET /v1/regions": (a.call("GET", "/v1/regions", cert=(pem, pem)), 403)}
    for what, (answer, want) in calls.items():
        assert answer.status == want, f"{what}: {answer}, want {want}"
    # Its fabric endpoints on the node's own address (the values bind them there: node/chart.py says why).
    transports = a.call("GET", "/v1/node", token=rel.token).json().get("fabric", [])
    tcp = [t["address"] for t in transports if t.get("provider", "").startswith("tcp")]
    assert len(tcp) == 1 and socket.inet_aton(n.env["NODE_IP"]).hex() in tcp[0], \
        f"the agent's tcp endpoint is not on the node's address {n.env['NODE_IP']}: {transports}"
    refusal = calls["agent GET /v1/regions"][0].json().get("error", {}).get("message", "")
    assert f'the agent of node "{NODE}" may not GET /v1/regions' in refusal, f"the refusal says: {refusal}"

    # The controller, from its pod, found the agent through the EndpointSlice and reached it (TLS, its client
    # certificate).
    fabric = wait_for(f"FabricNode {NODE} Reachable", when(k, f"/apis/conduit.dev/v1alpha1/fabricnodes/{NODE}",
                                                         lambda f: condition(f, "Reachable") == "True"), 60)
    reachable_s = time.monotonic() - t0
    assert fabric["spec"]["agentEndpoint"] == f"https://{n.env['NODE_IP']}:{rel.port}", fabric["spec"]
    assert next(c["reason"] for c in fabric["status"]["conditions"] if c["type"] == "Reachable") == "AgentAnswered"

    # A TransferJob through it all: the controller asks the agent to copy a file of the job's namespace into
    # another (the agent is its own target, as a peer: its node certificate), verified with CRC32C.
    team = "team-a"
    data = os.urandom(3 * 1024 * 1024 + 12345)
    src = n.dir / "agent-data" / team / "ckpt.bin"
    src.parent.mkdir(parents=True, exist_ok=True)
    src.write_bytes(data)
    r = k.kubectl("create", "namespace", team, namespace=team)
    assert r.returncode == 0, f"create namespace: {r.stderr.strip()}"
    t1 = time.monotonic()
    done = copy_job(k, team, "copy", "ckpt.bin", "ckpt-copy.bin")
    assert done["status"]["phase"] == "Succeeded", f"TransferJob: {done['status']}; the agent's log: {agent_log(k)}"
    copy = src.with_name("ckpt-copy.bin")
    assert copy.read_bytes() == data, f"{copy} is not the source's {len(data)} bytes"
    job_s = time.monotonic() - t1

    logs = k.kubectl("logs", f"deploy/{RELEASE}-controller", namespace=NS)
    refused = [ln for ln in logs.stdout.splitlines() if re.search(r"\b403\b|forbidden", ln, re.I)]
    assert logs.returncode == 0 and not refused, f"the controller was refused with its RBAC: {refused[:1]}"
    report(f"helm install: agent pod Ready {agent_s:.1f} s, controller Available {controller_s:.1f} s, FabricNode "
           f"Reachable {reachable_s:.1f} s; node certificate {serial} from the pod's CSR; a TransferJob copied "
           f"{len(data)} bytes intact in {job_s:.1f} s")


def test_workload_shares_a_region_a_pod_selector_job_fills(cluster, release, report):
    k, n, rel = cluster.kube, cluster.node, release
    team = "team-a"
    # The example mounts the release's agent token and CA from Secrets of the workload's namespace: a user
    # copies them there.
    for name, keys in ((f"{RELEASE}-agent-token", ["token"]), (f"{RELEASE}-agent-tls", ["ca.crt"])):
        data = k.get(f"/api/v1/namespaces/{NS}/secrets/{name}").get("data", {})
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": team},
                "data": {key: data[key] for key in keys}}
        r = k.kubectl("apply", "-f", "-", input=json.dumps(body), namespace=team)
        assert r.returncode == 0, f"copy Secret {name}: {r.stderr.strip()}"
    nbytes = 8 * 1024 * 1024 + 12345
    t0 = time.monotonic()
    manifest = workload(cluster.images["WORKLOAD_IMAGE"], team, rel.port, n.dir / "agent-run", nbytes)
    r = k.kubectl("apply", "-f", "-", input=manifest, namespace=team)
    assert r.returncode == 0, f"the example workload not accepted: {r.stderr.strip()}"
    wait_for("the workload Deployment Available (its region shared)",
             when(k, f"/apis/apps/v1/namespaces/{team}/deployments/inference",
                  lambda d: condition(d, "Available") == "True"), 120)
    shared_s = time.monotonic() - t0
    [pod] = pods(k, team, "app=inference")
    assert ready(pod) and restarts(pod) == 0, f"workload pod: {pod['status']}"

    # The agent recorded who shared it as the kernel says: the pod's UID from the process's cgroup.
    region = rel.agent.call("GET", "/v1/regions/weights", token=rel.token)
    assert region.status == 200, f"GET /v1/regions/weights: {region}"
    by = region.json().get("importedBy", {})
    assert by.get("podUID") == pod["metadata"]["uid"], \
        f"region weights importedBy {by}, want the pod's UID {pod['metadata']['uid']}"

    data = os.urandom(nbytes)
    src = n.dir / "agent-data" / team / "weights.bin"
    src.write_bytes(data)
    t1 = time.monotonic()
    r = k.kubectl("apply", "-f", "-", input=pod_targets_job(team, NODE, f"{team}/weights.bin"), namespace=team)
    assert r.returncode == 0, f"the pod-targets example not accepted: {r.stderr.strip()}"
    done = job_end(k, team, "pod-targets")
    assert done["status"]["phase"] == "Succeeded", f"pod-targets: {done['status']}"
    job_s = time.monotonic() - t1
    picked = [t.get("pod") for t in done["status"].get("targets", [])]
    assert picked == [pod["metadata"]["name"]], f"targets picked {picked}, want the workload's pod"

    # A process of the pod reads the region through the import socket: the source's bytes.
    r = k.kubectl("exec", pod["metadata"]["name"], "--", "python", "-c", WORKLOAD_DIGEST, namespace=team, timeout=60)
    assert r.returncode == 0, f"kubectl exec: {r.stderr.strip()[-400:]}"
    assert r.stdout.split() == [hashlib.sha256(data).hexdigest(), str(nbytes)], \
        f"the pod's region holds {r.stdout.strip()}, want the source's sha256 and size"
    report(f"example workload Ready with its region shared through the SDK in {shared_s:.1f} s; the pod-targets "
           f"job filled it ({nbytes} bytes, read back intact in the pod) in {job_s:.1f} s")


def read_line(proc: subprocess.Popen, timeout: float) -> str:
    """PROC's next line of output, or "" when none came within TIMEOUT."""
    ready_fds, _, _ = select.select([proc.stdout], [], [], timeout)
    return proc.stdout.readline().strip() if ready_fds else ""


def host_mount_of(path: str) -> str:
    """The mount of this mount namespace holding the same filesystem as PATH (a container's /dev/shm: the pod
    sandbox's tmpfs that containerd mounted). A mount reached through another namespace (/proc/PID/root/...)
    cannot be bound here: `mount --bind` then binds the directory beneath it."""
    dev = os.stat(path).st_dev
    with open("/proc/self/mountinfo") as f:
        for mnt in (ln.split()[4] for ln in f):
            try:
                if os.stat(mnt).st_dev == dev:
                    return mnt
            except OSError:
                continue
    pytest.fail(f"no mount here holds {path}", pytrace=False)


def test_liveness_probe_restarts_an_agent_whose_rail_is_wedged(cluster, release, build, report):
    k, rel = cluster.kube, release
    peer = build.dir / "bin/conduit-test-peer"
    assert peer.exists(), f"no {peer}: build conduit-test-peer"
    agent = agent_pod(k)
    assert restarts(agent) == 0, f"the agent restarted before the wedge: {agent['status']['containerStatuses']}"
    pid = container_pid(agent, "conduit-agent")
    assert rel.agent.call("GET", "/healthz").status == 200
    r = rel.agent.call("POST", "/v1/regions", {"name": "wedge-src", "bytes": 1 << 20}, token=rel.token)
    assert r.status == 201, f"POST /v1/regions: {r}"

    # The target: a peer process with the agent's view of shm: its pod's /dev/shm (bound in a mount namespace of
    # the peer's own) and its PID namespace, where the agent names and judges shm endpoints by pid.
    argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c", 'mount --bind "$0" /dev/shm && exec "$@"',
            host_mount_of(f"/proc/{pid}/root/dev/shm"), "nsenter", f"--target={pid}", "--pid", "--",
            os.fspath(peer), "--provider", "shm", "--bytes", str(1 << 20), "--rails", "1", "--register-rails", ""]
    proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        key = read_line(proc, 30)
        assert key.startswith("{"), f"the peer printed no key: {key!r} {proc.stderr.read() if proc.poll() else ''}"
        proc.stdin.write("hold-shm-lock\n")
        proc.stdin.flush()
        held = read_line(proc, 10)
        if held != "held":
            pytest.skip(f"cannot take shm's lock in the peer (libfabric's shm is not 1.17's): {held}")
        # Killed holding the lock, as a crashed peer would be (nsenter's child is the peer).
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 1, f"nsenter's children: {children}"
        os.kill(int(children[0]), signal.SIGKILL)
        proc.wait(10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        for f in (proc.stdin, proc.stdout, proc.stderr):
            f.close()
    t0 = time.monotonic()
    sent = rel.agent.call("POST", "/v1/transfers?waitSeconds=20",
                          {"source": {"region": "wedge-src"}, "targets": [{"grant": json.loads(key)}]},
                          token=rel.token)
    assert sent.status == 200 and sent.json().get("state") == "Failed", f"the transfer to the wedged peer: {sent}"
    try:
        health = rel.agent.call("GET", "/healthz", timeout=5)
    except OSError as e:  # the kubelet may already be stopping it
        health = e
    # Unless the kubelet was quicker, /healthz says why, as the probe reads it.
    if restarts(agent_pod(k)) == 0:
        assert getattr(health, "status", 0) == 503 and b"wedged" in health.body, \
            f"/healthz: {health}; the transfer: {sent}"

    back = wait_for("the agent restarted by its liveness probe and Ready again",
                    lambda: (lambda p: p if restarts(p) >= 1 and ready(p) else None)(agent_pod(k)), 90)
    restart_s = time.monotonic() - t0
    assert back["metadata"]["uid"] == rel.facts["agent_uid"] and restarts(back) == 1, \
        f"agent pod {back['metadata']['uid']} restarts {restarts(back)}: want the same pod, 1"
    events = k.get(f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name={back['metadata']['name']}")
    probe = [e["message"] for e in events.get("items", []) if e.get("reason") == "Unhealthy"]
    assert any("Liveness probe failed" in m and "503" in m for m in probe), f"the kubelet's Unhealthy events: {probe}"
    others = {p["metadata"]["name"]: restarts(p) for ns in (NS, "team-a") for p in pods(k, ns)
              if p["metadata"]["uid"] != back["metadata"]["uid"]}
    assert others and not any(others.values()), f"restarts of the other pods: {others}"
    assert rel.agent.call("GET", "/healthz").status == 200
    # The restarted agent took the node certificate its emptyDir kept, and asked for no other.
    assert openssl("x509", "-in", node_certificate(cluster, back), "-noout", "-serial") == rel.facts["serial"]
    assert len(agent_csrs(k)) == rel.facts["csrs"], "the restarted agent asked for a new certificate"
    report(f"wedged shm rail: /healthz 503, restarted by the liveness probe and Ready in {restart_s:.1f} s "
           f"(restarts 1; {len(others)} other pods 0), same node certificate")


def test_upgrade_keeps_the_node_certificate_then_uninstall_leaves_nothing(cluster, release, report):
    k, n, rel = cluster.kube, cluster.node, release
    before = agent_pod(k)
    [old] = pods(k, NS, "app.kubernetes.io/component=controller")
    t0 = time.monotonic()
    # A change of the controller's pod template alone: its pod is replaced, the agents' is not.
    r = rel.helm("upgrade", RELEASE, os.fspath(CHART), "-n", NS, "-f", os.fspath(rel.values),
                 "--set", "controller.podAnnotations.upgraded=yes", "--wait", "--timeout", "120s")
    assert r.returncode == 0, f"helm upgrade: {(r.stdout + r.stderr).strip()[-400:]}"
    upgrade_s = time.monotonic() - t0
    [new] = wait_for("the upgraded controller's pod alone", lambda: (lambda ps: ps if len(ps) == 1 and ready(ps[0])
                     and ps[0]["metadata"]["uid"] != old["metadata"]["uid"] else None)(
                         pods(k, NS, "app.kubernetes.io/component=controller")), 60)
    after = agent_pod(k)
    assert (after["metadata"]["uid"], restarts(after)) == (before["metadata"]["uid"], restarts(before)), \
        "helm upgrade replaced or restarted the agent"
    assert openssl("x509", "-in", node_certificate(cluster, after), "-noout", "-serial") == rel.facts["serial"], \
        "the agent's node certificate changed over the upgrade"
    assert len(agent_csrs(k)) == rel.facts["csrs"], "a new CSR was sent over the upgrade"
    # The new controller reaches the agent, and the agent (as its own peer) is let in with that certificate.
    done = copy_job(k, "team-a", "copy-after-upgrade", "ckpt.bin", "ckpt-copy-2.bin")
    assert done["status"]["phase"] == "Succeeded", \
        f"TransferJob after the upgrade: {done['status']}; the agent's log: {agent_log(k)}"
    src = n.dir / "agent-data/team-a/ckpt.bin"
    assert src.with_name("ckpt-copy-2.bin").read_bytes() == src.read_bytes()

    # ---- uninstall
    manifest = rel.helm("get", "manifest", RELEASE, "-n", NS)
    assert manifest.returncode == 0, f"helm get manifest: {manifest.stderr.strip()}"
    (cluster.work / "manifest.yaml").write_text(manifest.stdout)
    t1 = time.monotonic()
    r = rel.helm("uninstall", RELEASE, "-n", NS, "--wait", "--timeout", "90s")
    assert r.returncode == 0, f"helm uninstall: {(r.stdout + r.stderr).strip()[-400:]}"
    left = k.kubectl("get", "-f", os.fspath(cluster.work / "manifest.yaml"), "--ignore-not-found", "-o", "name",
                     namespace=NS)
    assert not (left.stdout + left.stderr).strip(), f"objects left after helm uninstall: {left.stdout + left.stderr}"
    assert rel.helm("status", RELEASE, "-n", NS).returncode != 0, "helm still knows the release"
    wait_for("the release's pods gone", lambda: k.get(f"/api/v1/namespaces/{NS}/pods").get("items") == [], 90)

    # On the node: no running container, no ready sandbox, no process of the release.
    crictl = [cluster.tools["CRICTL"], "--config", os.fspath(n.dir / "crictl.yaml"), "--runtime-endpoint",
              f"unix://{n.env['CONTAINERD_ADDRESS']}"]

    def on_node():
        c = subprocess.run([*crictl, "ps", "-q", "--label", f"io.kubernetes.pod.namespace={NS}"],
                           capture_output=True, text=True, timeout=30)
        s = subprocess.run([*crictl, "pods", "-q", "--state", "ready", "--namespace", NS],
                           capture_output=True, text=True, timeout=30)
        assert c.returncode == 0 and s.returncode == 0, f"crictl: {c.stderr.strip()} {s.stderr.strip()}"
        procs = [e.name for e in os.scandir("/proc") if e.name.isdigit() and _comm(e.name) in
                 ("conduit-agent", "conduit-control") and n.env["CGROUP_ROOT"] in _cgroup(e.name)]
        return (c.stdout.split(), s.stdout.split(), procs)

    deadline = time.monotonic() + 60
    while any(left_on_node := on_node()) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not any(left_on_node), f"on the node after uninstall (containers, sandboxes, processes): {left_on_node}"
    sockets = list((n.dir / "agent-run").iterdir())
    assert not sockets, f"left in the import socket's host directory: {sockets}"
    report(f"helm upgrade (controller replaced) in {upgrade_s:.1f} s kept the node certificate {rel.facts['serial']}; "
           f"helm uninstall: no object, pod, container or process of the release in {time.monotonic() - t1:.1f} s")


def _comm(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def _cgroup(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cgroup").read_text()
    except OSError:
        return ""


def test_stop_leaves_nothing_behind(cluster, report):
    n = cluster.node
    running = n.leftovers()
    for what in ("process", "mount", "bridge", "cgroup"):
        assert any(x.startswith(what) for x in running), f"leftovers() does not see the running node's {what}es"
    took = n.stop()
    left = n.leftovers()
    assert not left, f"left behind by kube-node.sh stop: {'; '.join(left)}"
    report(f"node stopped in {took:.1f} s, nothing left (processes, mounts, netns, bridge, cgroups)")

