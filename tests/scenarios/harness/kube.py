"""A real etcd + kube-apiserver for a scenario (scripts/kube-env.sh), kubectl, and the apiserver's REST API.

    with KubeEnv(root, work / "env") as kube:            # started; stopped on leaving
        kube.setup("conduit-faults")                      # the CRDs Established, the namespace created
        kube.kubectl("apply", "-f", "job.yaml")           # in that namespace, bounded to 20 s a request
        kube.get(f"/apis/conduit.dev/v1alpha1/namespaces/conduit-faults/transferjobs")

Tools: $KUBECTL, $KUBE_APISERVER, $ETCD when set, else what scripts/kube-tools.sh built (KubeToolsMissing
when it has not).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import requests

from .processes import outlive_tests


class KubeToolsMissing(RuntimeError):
    """kubectl / kube-apiserver / etcd are not built (scripts/kube-tools.sh)."""


def kube_tools(root: Path, node: bool = False) -> dict[str, str]:
    """{"KUBECTL": path, "KUBE_APISERVER": path, "ETCD": path, ...}: the environment's, else kube-tools.sh's;
    with NODE also a node's ("KUBELET", "CRICTL", ...)."""
    tools: dict[str, str] = {}
    r = subprocess.run([os.fspath(root / "scripts/kube-tools.sh"), *(["--node"] if node else []), "--print"],
                       capture_output=True, text=True, timeout=60)
    for line in r.stdout.splitlines():
        if "=" in line:
            k, v = line.split("=", 1)
            tools[k.strip()] = v.strip()
    for k in ("KUBECTL", "KUBE_APISERVER", "ETCD", "HELM"):
        if os.environ.get(k):
            tools[k] = os.environ[k]
    missing = [k for k in ("KUBECTL", "KUBE_APISERVER", "ETCD") if not os.access(tools.get(k, ""), os.X_OK)]
    if missing:
        raise KubeToolsMissing(f"no {', '.join(missing)} (run scripts/kube-tools.sh)")
    return tools


class KubeEnv:
    """etcd + kube-apiserver in DIR (data, certs, logs, pids), started by scripts/kube-env.sh."""

    def __init__(self, root: Path, dir: Path, *, long_lived: bool = False, node: bool = False) -> None:
        """LONG_LIVED: a module/session fixture's env, whose processes (after a restart too) outlive a test.
        NODE: for a real node (harness.node.KubeNode): the apiserver on the node's address, ServiceAccount
        admission on (scripts/kube-env.sh, CONDUIT_KUBE_NODE=1)."""
        self.long_lived = long_lived
        self.node = node
        self.root = root
        self.dir = dir
        self.tools = kube_tools(root)
        self.kubectl_path = self.tools["KUBECTL"]
        self.namespace = "default"
        self._started = False
        try:
            self.start()
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> KubeEnv:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # ---- lifecycle
    def start(self) -> None:
        """Start both (again, on the same DIR: etcd's data and the ports are kept while free)."""
        env = {**os.environ, "KUBE_APISERVER": self.tools["KUBE_APISERVER"], "ETCD": self.tools["ETCD"],
               "CONDUIT_KUBE_NODE": "1" if self.node else "0"}
        r = subprocess.run([os.fspath(self.root / "scripts/kube-env.sh"), "start", os.fspath(self.dir)],
                           capture_output=True, text=True, env=env, timeout=300)
        self._started = True  # whatever half started is stopped by stop()
        if r.returncode != 0:
            why = next((ln for ln in r.stderr.splitlines() if "kube-env:" in ln), r.stderr.strip()[-500:])
            raise RuntimeError(f"kube-env start: {why}")
        if self.long_lived:
            outlive_tests(self.pid("etcd"), self.pid("kube-apiserver"))

    def stop(self) -> None:
        """Stop both and wait for them to exit (idempotent)."""
        if self._started:
            r = subprocess.run([os.fspath(self.root / "scripts/kube-env.sh"), "stop", os.fspath(self.dir)],
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0:
                raise RuntimeError(f"kube-env stop: {r.stderr.strip()}")
            self._started = False

    def pid(self, name: str) -> int:
        """The pid of "kube-apiserver" or "etcd"."""
        return int((self.dir / f"{name}.pid").read_text().strip())

    # ---- connection details
    @property
    def kubeconfig(self) -> Path:
        return self.dir / "kubeconfig"

    def env_file(self) -> dict[str, str]:
        """DIR/env: ETCD_URL, KUBE_APISERVER_URL, KUBECONFIG."""
        out: dict[str, str] = {}
        for line in (self.dir / "env").read_text().splitlines():
            if "=" in line:
                k, v = line.split("=", 1)
                out[k] = v
        return out

    @property
    def url(self) -> str:
        return self.env_file()["KUBE_APISERVER_URL"]

    @property
    def token(self) -> str:
        return (self.dir / "token").read_text().strip()

    @property
    def ca(self) -> Path:
        return self.dir / "certs" / "apiserver.crt"

    # ---- clients
    def setup(self, namespace: str, crds: Sequence[str] = ("transferjobs", "fabricnodes")) -> None:
        """Apply the repository's CRDs, wait for them to be Established, create NAMESPACE and use it."""
        self.namespace = namespace
        files = [a for c in crds for a in ("-f", os.fspath(self.root / f"crds/{c}.conduit.dev.yaml"))]
        for argv in (["apply", *files],
                     ["wait", "--for=condition=Established", "--timeout=30s", *(f"crd/{c}.conduit.dev" for c in crds)],
                     ["create", "namespace", namespace]):
            r = self.kubectl(*argv)
            if r.returncode != 0:
                raise RuntimeError(f"CRDs or namespace not accepted: kubectl {argv[0]}: {r.stderr.strip()}")

    def kubectl(self, *args: str, input: str | None = None, namespace: str | None = None,
                timeout: float = 60) -> subprocess.CompletedProcess[str]:
        """kubectl ARGS in the namespace (setup's, or NAMESPACE), each request bounded to 20 s; not checked."""
        argv = [self.kubectl_path, "--kubeconfig", os.fspath(self.kubeconfig), "--request-timeout=20s",
                "-n", namespace or self.namespace, *args]
        return subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout)

    def request(self, method: str, path: str, *, body: Any = None, timeout: float = 5.0,
                headers: Mapping[str, str] | None = None, **kw: Any) -> requests.Response:
        """The apiserver's REST API directly (a poll costs a few ms instead of a kubectl start)."""
        h = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        return requests.request(method, f"{self.url}{path}", json=body, headers=h, verify=os.fspath(self.ca),
                                timeout=timeout, **kw)

    def get(self, path: str, timeout: float = 5.0) -> Any:
        """GET PATH's JSON ({} when the apiserver does not answer or answers no JSON)."""
        try:
            return self.request("GET", path, timeout=timeout).json()
        except (requests.RequestException, ValueError):
            return {}

    def watch_argv(self, path: str, timeout_seconds: int = 1800) -> list[str]:
        """A curl command that streams PATH?watch=1 to stdout: start it with a ProcessSet, stdout to a file."""
        return ["curl", "-sN", "--cacert", os.fspath(self.ca), "-H", f"Authorization: Bearer {self.token}",
                f"{self.url}{path}?watch=1&timeoutSeconds={timeout_seconds}"]


def agent_endpointslice(port: int, addrs: Mapping[str, str], service: str = "conduit-agent") -> str:
    """YAML of the headless agent Service and the EndpointSlice listing each node's agent at ADDRS[node]:PORT,
    as the endpointslice controller writes it for the agent DaemonSet."""
    endpoints = "".join(f'  - {{addresses: ["{a}"], nodeName: {n}, conditions: {{ready: true}}}}\n'
                        for n, a in addrs.items())
    return f"""apiVersion: v1
kind: Service
metadata: {{name: {service}}}
spec:
  clusterIP: None
  ports: [{{name: http, port: {port}}}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: {service}-x1
  labels: {{kubernetes.io/service-name: {service}}}
addressType: IPv4
ports: [{{name: http, port: {port}, protocol: TCP}}]
endpoints:
{endpoints}"""
