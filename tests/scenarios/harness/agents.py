"""conduit-agent processes on this machine, and their REST API.

An :class:`AgentPool` starts agents (on loopback, or each in its node's network namespace), knows their URLs
and restarts one on the same port with the same arguments, as a DaemonSet pod restarts on its node. An
:class:`Agent` is one of them: its REST API through ``requests`` (the bearer token from the pool's token
file), /readyz, /healthz, /metrics, and the files it logs to.

    pool = AgentPool(build, work, token_file, procs)
    a = pool.start("node-a", "--memory-cap", "1GiB")
    a.post("/v1/regions", {"name": "x", "bytes": 1 << 20})

An agent started with ``--tls-cert`` serves HTTPS: its URL is https://..., and the pool's ``ca`` (a PEM file,
e.g. harness.tls.CA(...).cert) is what every request to it trusts.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests

from .netns import Network
from .processes import Process, ProcessSet

MiB = 1 << 20


class BinaryMissing(RuntimeError):
    """A conduit binary the scenario needs is not in the build directory."""


@dataclass(frozen=True)
class Build:
    """A build directory: its bin/ holds conduit-agent, conduit-controller, ..."""

    dir: Path

    @property
    def bin(self) -> Path:
        return self.dir / "bin"

    def path(self, name: str) -> Path:
        """bin/NAME; BinaryMissing when it is not there or not executable."""
        p = self.bin / name
        if not (p.is_file() and os.access(p, os.X_OK)):
            raise BinaryMissing(f"no {p}: build first")
        return p

    @property
    def agent(self) -> Path:
        return self.path("conduit-agent")

    @property
    def controller(self) -> Path:
        return self.path("conduit-controller")


def new_token(path: Path) -> str:
    """32 random bytes in hex, written to PATH (mode 0600) as the agents' token; returns it."""
    token = secrets.token_hex(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    return token


def random_file(path: Path, mib: int = 0, *, size: int | None = None, seed: str | None = None) -> Path:
    """MIB MiB (or SIZE bytes) of random but reproducible bytes at PATH, ~1 GB/s (the AES-CTR keystream of a
    key derived from SEED, default the file's name and size): no 256 MiB /dev/urandom wait."""
    size = mib * MiB if size is None else size
    key = seed if seed is not None else f"conduit-faults-{mib}-{path.name}"
    with open("/dev/zero", "rb") as zeros, open(path, "wb") as out:
        p = subprocess.Popen(["openssl", "enc", "-aes-128-ctr", "-nosalt", "-pass", f"pass:{key}", "-pbkdf2",
                              "-iter", "1"], stdin=zeros, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        assert p.stdout is not None
        left = size
        while left > 0:
            chunk = p.stdout.read(min(left, 8 * MiB))
            if not chunk:
                break
            out.write(chunk)
            left -= len(chunk)
        p.kill()
        p.wait()
    if path.stat().st_size != size:
        raise RuntimeError(f"could not write {size} bytes to {path}")
    return path


class Agent:
    """One conduit-agent started by an :class:`AgentPool`. ``url`` is set once it listens."""

    def __init__(self, pool: AgentPool, node: str, args: Sequence[str], host: str, port: int) -> None:
        self.pool = pool
        self.node = node
        self.args = list(args)
        self.host = host
        self.port = port
        self.url = ""
        self.data_dir = pool.work / node
        self.log = pool.work / f"{node}.log"  # stderr: the agent's logfmt log, across restarts
        self.out = pool.work / f"{node}.out"  # stdout: "listening HOST:PORT", rewritten at each start
        self.socket = pool.work / f"{node}.sock"  # the import socket
        self.process: Process | None = None

    def __repr__(self) -> str:
        return f"Agent({self.node!r}, {self.url or 'not listening'})"

    # ---- lifecycle
    def start(self, timeout: float = 15.0) -> Agent:
        """Start (or restart, on the port it had) and wait until it listens and /readyz answers 200."""
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.out.write_text("")
        # tcp unless the test names its own providers (an option given twice is an error to the agent).
        providers = [] if "--providers" in self.args else ["--providers", "tcp"]
        # The fabric binds to the node's address unless the test binds it elsewhere (a link of its own).
        bind = [] if "--bind-address" in self.args else ["--bind-address", self.host]
        argv: list[str] = [os.fspath(self.pool.build.agent), "--listen", f"{self.host}:{self.port}",
                           *providers, *bind,
                           "--token-file", os.fspath(self.pool.token_file), "--data-dir", os.fspath(self.data_dir),
                           "--import-socket", os.fspath(self.socket), *self.args]
        if "--log-level" not in self.args:
            argv += ["--log-level", self.pool.log_level]
        if self.pool.network is not None:
            argv = self.pool.network.argv(self.node, argv)
        self.process = self.pool.procs.start(argv, name=f"agent {self.node}", stdout=self.out, stderr=self.log,
                                             env={"NODE_NAME": self.node, **self.pool.env})
        deadline = time.monotonic() + timeout
        while True:
            for line in self.out.read_text(errors="replace").splitlines():
                if line.startswith("listening "):
                    address = line.split(" ", 1)[1].strip()
                    scheme = "https" if "--tls-cert" in self.args else "http"
                    self.url = f"{scheme}://{address}"
                    self.port = int(address.rsplit(":", 1)[1])
                    break
            if self.url and self._ready():
                return self
            if not self.process.running():
                raise RuntimeError(f"agent {self.node} did not start (exit {self.process.returncode}): "
                                   f"{self.log_tail(3)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"agent {self.node} not ready within {timeout:g} s: {self.log_tail(3)}")
            time.sleep(0.05)

    def _ready(self) -> bool:
        try:
            return requests.get(f"{self.url}/readyz", timeout=2, verify=self.pool.verify).status_code == 200
        except requests.RequestException:
            return False

    def kill(self) -> None:
        """SIGKILL (a crash, an OOM kill, a node gone): nothing it held survives."""
        if self.process:
            self.process.kill()

    def restart(self) -> Agent:
        """Start again on the same address with the same arguments (after kill)."""
        self.kill()
        return self.start()

    def stop(self, timeout: float = 15.0) -> int | None:
        """SIGTERM and wait for the clean exit; its exit status (None: it had to be killed)."""
        return self.process.terminate(timeout) if self.process else None

    def signal(self, sig: int = signal.SIGKILL) -> None:
        if self.process:
            self.process.signal(sig)

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def log_tail(self, lines: int = 15) -> str:
        return " ".join(self.log_text().splitlines()[-lines:])

    # ---- REST
    def request(self, method: str, path: str, body: Any = None, *, timeout: float = 30.0,
                auth: bool = True, headers: Mapping[str, str] | None = None) -> requests.Response:
        """The raw HTTP exchange (any status); requests' exceptions when the agent does not answer."""
        h = {"Content-Type": "application/json"}
        if auth:
            h["Authorization"] = f"Bearer {self.pool.token}"
        if headers:
            h.update(headers)
        return requests.request(method, f"{self.url}{path}", json=body, headers=h, timeout=timeout,
                                verify=self.pool.verify)

    def call(self, method: str, path: str, body: Any = None, *, timeout: float = 30.0) -> Any:
        """The JSON body of the answer, whatever its status ({} when there is none, or no answer)."""
        try:
            r = self.request(method, path, body, timeout=timeout)
            return r.json() if r.content else {}
        except (requests.RequestException, ValueError):
            return {}

    def get(self, path: str, **kw: Any) -> Any:
        return self.call("GET", path, **kw)

    def post(self, path: str, body: Any = None, **kw: Any) -> Any:
        return self.call("POST", path, body, **kw)

    def status_code(self, method: str, path: str, body: Any = None) -> int:
        """The HTTP status of METHOD PATH (0 when the agent does not answer)."""
        try:
            return self.request(method, path, body).status_code
        except requests.RequestException:
            return 0

    def healthy(self) -> bool:
        """/healthz answers {"status": "ok"}."""
        try:
            r = requests.get(f"{self.url}/healthz", timeout=5, verify=self.pool.verify)
            return bool(r.json().get("status") == "ok")
        except (requests.RequestException, ValueError):
            return False

    def metric(self, name: str) -> float:
        """The value of the unlabelled sample NAME on /metrics (0 when absent, as the bash helper had it)."""
        try:
            text = requests.get(f"{self.url}/metrics", timeout=10, verify=self.pool.verify).text
        except requests.RequestException:
            return 0.0
        for line in text.splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == name:
                return float(words[1])
        return 0.0

    # ---- transfers, grants, regions
    def transfers(self) -> list[dict[str, Any]]:
        """GET /v1/transfers (newest first); [] when the agent does not answer."""
        items = self.get("/v1/transfers").get("items")
        return items if isinstance(items, list) else []

    def newest_transfer(self) -> dict[str, Any]:
        """The agent's newest transfer, or {} when it has none or does not answer."""
        t = self.transfers()
        return t[0] if t else {}

    def transfer(self, transfer_id: str) -> dict[str, Any]:
        t = self.get(f"/v1/transfers/{transfer_id}")
        return t if isinstance(t, dict) else {}

    def transfer_past(self, nbytes: int) -> bool:
        """The newest transfer is Running and has moved at least NBYTES."""
        t = self.newest_transfer()
        return t.get("state") == "Running" and int(t.get("bytesDone") or 0) >= nbytes

    def grants(self) -> list[dict[str, Any]]:
        items = self.get("/v1/grants").get("items")
        return items if isinstance(items, list) else []

    def save_and_compare(self, region: str, source: Path) -> None:
        """Save REGION into the data dir through the API and assert its bytes equal SOURCE's (then remove
        the saved copy): the check that the target holds exactly the source's bytes."""
        name = f"saved-{region}.bin"
        out = self.post(f"/v1/regions/{region}/save", {"file": name})
        assert int(out.get("bytes") or 0) > 0, f"saving {region} on {self.node}: {out}"
        saved = self.data_dir / name
        try:
            where = first_difference(source, saved)
            assert where is None, f"region {region} on {self.node} differs from {source}: {where}"
        finally:
            saved.unlink(missing_ok=True)


def first_difference(a: Path, b: Path) -> str | None:
    """None when B starts with A's bytes (B may be longer: a region rounded up); else where they differ."""
    size = a.stat().st_size
    with open(a, "rb") as fa, open(b, "rb") as fb:
        at = 0
        while at < size:
            x = fa.read(4 * MiB)
            y = fb.read(len(x))
            if x != y:
                for i, (p, q) in enumerate(zip(x, y)):
                    if p != q:
                        return f"differ: byte {at + i + 1}"
                return f"EOF on {b} after byte {at + len(y)}"
            at += len(x)
    return None


class AgentPool:
    """The agents of one scenario: all in WORK (data dirs NODE/, logs NODE.log), one token, one ProcessSet.

    With ``network``, each agent runs in its node's namespace and listens on the node's address. With ``ca`` (a
    PEM file), requests to agents that serve HTTPS trust that CA; without it, the system's CAs (requests'
    default)."""

    def __init__(self, build: Build, work: Path, token_file: Path, procs: ProcessSet, *,
                 network: Network | None = None, log_level: str = "info",
                 env: Mapping[str, str] | None = None, ca: Path | None = None) -> None:
        self.build = build
        self.work = work
        self.token_file = token_file
        self.token = token_file.read_text().strip()
        self.procs = procs
        self.network = network
        self.log_level = os.environ.get("SCENARIOS_AGENT_LOG", log_level)
        self.env = dict(env or {})
        self.ca = ca
        # requests' verify: the CA's file, or True (the default: the system's CAs; unused over plain HTTP).
        self.verify: str | bool = os.fspath(ca) if ca is not None else True
        self.agents: dict[str, Agent] = {}

    def __getitem__(self, node: str) -> Agent:
        return self.agents[node]

    def __iter__(self) -> Any:
        return iter(self.agents.values())

    def start(self, node: str, *args: str, port: int = 0) -> Agent:
        """Start NODE's agent with ARGS (e.g. "--memory-cap", "1GiB") on a free PORT (or the one given)."""
        host = self.network.addr(node) if self.network else "127.0.0.1"
        agent = Agent(self, node, args, host, port)
        self.agents[node] = agent
        return agent.start()

    def agents_flag(self) -> str:
        """The controller's --agents value: node-a=URL,node-b=URL,... for every agent started."""
        return ",".join(f"{n}={a.url}" for n, a in self.agents.items())


def require_tools(*names: str) -> None:
    """RuntimeError naming the first of NAMES (programs on PATH) that is missing."""
    for n in names:
        if shutil.which(n) is None:
            raise RuntimeError(f"{n} is missing")
