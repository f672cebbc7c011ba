"""The chart on the test node, as test_node.py drives it: the values that point it at this node's paths and
local images, helm with its state in the test's directory, the agents' HTTPS API as a user's client calls it
(the CA of the release's TLS Secret, the Service's name checked instead of the node address), and the
example workload of helm/conduit/examples with this tree's workload image.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import socket
import ssl
import subprocess
from pathlib import Path
from typing import Any

import yaml
from harness.kube import KubeEnv

REPO = Path(__file__).resolve().parents[3]
CHART = REPO / "helm/conduit"
WORKLOAD_EXAMPLE = CHART / "examples/workload-with-import-socket.yaml"
POD_TARGETS_EXAMPLE = REPO / "crds/examples/pod-targets.yaml"
RELEASE, NS = "conduit", "conduit-system"


def pulled_never(ref: str) -> str:
    """Chart values for the local image REF (repository:tag), never pulled."""
    repo, tag = ref.rsplit(":", 1)
    return f'{{repository: {repo}, tag: "{tag}", pullPolicy: Never}}'


def values(kube: KubeEnv, node_dir: Path, kubelet_root: str, images: dict[str, str], agent_port: int) -> str:
    """The chart's values for this node: its directories where the chart mounts host paths, no RDMA, the
    apiserver at the node's address (no kube-proxy routes the kubernetes Service, so pods read
    KUBERNETES_SERVICE_HOST/PORT), shm beside tcp (a rail the liveness test can wedge), a stall timeout and
    probes short enough for a test, the fabric endpoints bound to the node's address, and the CRD hook Job off
    (its image, registry.k8s.io/kubectl, no registry serves here).

    The bind address (agent.bindAddress: hostIP): left to libfabric, the tcp provider on a host network picks
    any interface's address, a bridge's before the node's own (seen: a bridge's 10.250.0.1 over a veth's
    192.0.2.9), so on this machine the agent took the bridge of another test run's node, and its transfers failed
    with EADDRNOTAVAIL ("Cannot assign requested address") once that run stopped."""
    host, port = kube.url.removeprefix("https://").rsplit(":", 1)
    env = f'[{{name: KUBERNETES_SERVICE_HOST, value: "{host}"}}, {{name: KUBERNETES_SERVICE_PORT, value: "{port}"}}]'
    return f"""crds: {{upgradeJob: {{enabled: false}}}}
agent:
  image: {pulled_never(images['AGENT_IMAGE'])}
  port: {agent_port}
  nodeSelector: {{feature.node.kubernetes.io/pci-15b3.present: null}}
  rdma: {{enabled: false}}
  providers: [auto, shm]
  stallTimeoutMs: 1000
  memoryCap: 256MiB
  regionPool: 64MiB
  dataDir: {node_dir}/agent-data
  importSocket: {{hostDir: {node_dir}/agent-run}}
  podResources: {{path: {kubelet_root}/pod-resources}}
  bindAddress: hostIP
  extraEnv: {env}
  readinessProbe: {{initialDelaySeconds: 0, periodSeconds: 1}}
  livenessProbe: {{initialDelaySeconds: 0, periodSeconds: 1, failureThreshold: 2}}
controller:
  image: {pulled_never(images['CONTROLLER_IMAGE'])}
  replicas: 1
  extraEnv: {env}
  readinessProbe: {{initialDelaySeconds: 0, periodSeconds: 1}}
"""


class Helm:
    """helm ARGS against KUBE, its config, cache and data under DIR (not the user's home)."""

    def __init__(self, binary: str, kube: KubeEnv, dir: Path) -> None:
        self.binary = binary
        self.env = {**os.environ, "HELM_CONFIG_HOME": f"{dir}/config", "HELM_CACHE_HOME": f"{dir}/cache",
                    "HELM_DATA_HOME": f"{dir}/data", "KUBECONFIG": os.fspath(kube.kubeconfig)}

    def __call__(self, *args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.binary, *args], capture_output=True, text=True, env=self.env, timeout=timeout)


def secret_data(kube: KubeEnv, ns: str, name: str) -> dict[str, bytes]:
    """The Secret's keys and decoded values ({} when there is none)."""
    got = kube.get(f"/api/v1/namespaces/{ns}/secrets/{name}")
    return {k: base64.b64decode(v) for k, v in (got.get("data") or {}).items()}


class Answer:
    def __init__(self, status: int, body: bytes) -> None:
        self.status, self.body = status, body

    def json(self) -> Any:
        return json.loads(self.body or b"{}")

    def __repr__(self) -> str:
        return f"{self.status} {self.body[:300]!r}"


class AgentHttps:
    """An agent of the release at https://ADDRESS:PORT, its certificate checked against CA and the name
    SERVER_NAME, as the controller and the SDK call it (--agent-tls-server-name, CONDUIT_TLS_SERVER_NAME)."""

    def __init__(self, address: str, port: int, ca: Path, server_name: str) -> None:
        self.address, self.port, self.ca, self.server_name = address, port, ca, server_name

    def call(self, method: str, path: str, body: Any = None, *, token: str = "", cert: tuple[Path, Path] | None = None,
             name: str | None = None, timeout: float = 30) -> Answer:
        ctx = ssl.create_default_context(cafile=os.fspath(self.ca))
        if cert:
            ctx.load_cert_chain(*map(os.fspath, cert))
        raw = socket.create_connection((self.address, self.port), timeout=timeout)
        try:
            tls = ctx.wrap_socket(raw, server_hostname=name or self.server_name)
        except BaseException:
            raw.close()
            raise
        conn = http.client.HTTPConnection(self.address, self.port, timeout=timeout)
        conn.sock = tls
        try:
            headers = {"Content-Type": "application/json"} if body is not None else {}
            if token:
                headers["Authorization"] = f"Bearer {token}"
            conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
            r = conn.getresponse()
            return Answer(r.status, r.read())
        finally:
            conn.close()


# The example's "python -m my_server": share the weights region through the SDK, then answer the readiness
# probe (docs/pods.md: Ready means "can receive") and hold the region until the pod is stopped. An HTTP probe,
# not an exec one: each exec is a runc process that the suite would see come and go.
WORKLOAD_PROGRAM = """
import http.server, os, signal, sys
import conduit
buf = conduit.Agent().allocate("weights", int(os.environ["WEIGHTS_BYTES"]))
print("shared", buf, flush=True)
class Ready(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.end_headers()
    def log_message(self, *args):
        pass
signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
http.server.HTTPServer(("", 8080), Ready).serve_forever()
"""

# What a second process of the pod reads of the region, through the import socket (read-only, no copy).
WORKLOAD_DIGEST = """
import hashlib, numpy, conduit
with conduit.Agent().open_shared("weights") as buf:
    print(hashlib.sha256(buf.numpy(numpy.uint8)).hexdigest(), buf.nbytes)
"""


def workload(image: str, ns: str, agent_port: int, socket_dir: Path, nbytes: int) -> str:
    """helm/conduit/examples/workload-with-import-socket.yaml as a user adapts it: their image and program,
    the agent's port and socket directory of this install, one replica (two on one node would both share a
    region named weights: docs/pods.md), a readiness probe on the region shared. The rest (the security
    context, mounts, the SDK's environment) as the example has it."""
    dep = yaml.safe_load(WORKLOAD_EXAMPLE.read_text())
    dep["metadata"]["namespace"] = ns
    spec = dep["spec"]
    spec["replicas"] = 1
    pod = spec["template"]["spec"]
    pod["terminationGracePeriodSeconds"] = 5
    c = pod["containers"][0]
    c["image"], c["imagePullPolicy"] = image, "Never"
    c["command"] = ["python", "-c", WORKLOAD_PROGRAM]
    for e in c["env"]:
        if e["name"] == "CONDUIT_AGENT_URL":
            assert e["value"].endswith(":7070"), f"the example's agent URL changed: {e['value']}"
            e["value"] = e["value"].removesuffix(":7070") + f":{agent_port}"
    c["env"].append({"name": "WEIGHTS_BYTES", "value": str(nbytes)})
    c["readinessProbe"] = {"httpGet": {"path": "/", "port": 8080}, "periodSeconds": 1}
    for v in pod["volumes"]:
        if v["name"] == "conduit-socket":
            assert v["hostPath"]["path"] == "/run/conduit", f"the example's socket directory changed: {v}"
            v["hostPath"]["path"] = os.fspath(socket_dir)
    return yaml.safe_dump(dep)


def pod_targets_job(ns: str, node: str, file: str) -> str:
    """crds/examples/pod-targets.yaml with this node and file as its source."""
    job = yaml.safe_load(POD_TARGETS_EXAMPLE.read_text())
    job["metadata"]["namespace"] = ns
    job["spec"]["source"] = {"node": node, "file": file}
    return yaml.safe_dump(job)
