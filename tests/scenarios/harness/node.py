"""A real Kubernetes node (scripts/kube-node.sh) joined to a KubeEnv started with node=True, and this tree's
images on it (scripts/kube-images.sh).

    kube = KubeEnv(root, work / "env", node=True)
    node = KubeNode(root, work / "node", kube)      # containerd, kubelet, scheduler, controller-manager; Ready
    images = node.load_images(build.dir)            # {"AGENT_IMAGE": "localhost/conduit-agent:<key>", ...}
    node.stop()
    assert node.leftovers() == []                   # no process, mount, netns, bridge or cgroup of it is left

NodeUnavailable says why this machine cannot run one (not root, a tool missing, the script's own error).
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
import time
from pathlib import Path

from .kube import KubeEnv
from .processes import outlive_tests


class NodeUnavailable(RuntimeError):
    """The node could not start here; the message is the script's one line of why."""


def _why(stderr: str) -> str:
    lines = [ln for ln in stderr.splitlines() if "kube-node:" in ln or "kube-images:" in ln]
    return "\n".join(lines[-16:]) if lines else stderr.strip()[-800:]


def _env_text(text: str) -> dict[str, str]:
    """KEY=VALUE lines (a script's DIR/env or its output) as a dict."""
    return dict(ln.split("=", 1) for ln in text.splitlines() if "=" in ln)


class KubeNode:
    """containerd + kubelet + kube-scheduler + kube-controller-manager in DIR, joined to KUBE."""

    DAEMONS = ("containerd", "kubelet", "kube-scheduler", "kube-controller-manager")

    def __init__(self, root: Path, dir: Path, kube: KubeEnv, name: str = "conduit-node", *,
                 long_lived: bool = False) -> None:
        """LONG_LIVED: a module fixture's node, whose processes outlive a test."""
        if os.geteuid() != 0:
            raise NodeUnavailable("a node needs root (containerd, cgroups, network namespaces)")
        self.root, self.dir, self.kube, self.name, self.long_lived = root, dir, kube, name, long_lived
        self._started = False
        self.start()

    def _script(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run([os.fspath(self.root / "scripts/kube-node.sh"), *args], capture_output=True,
                              text=True, timeout=timeout)

    def start(self) -> None:
        self._started = True  # whatever half started, stop() stops
        r = self._script("start", os.fspath(self.dir), os.fspath(self.kube.dir), self.name)
        if r.returncode != 0:
            raise NodeUnavailable(f"kube-node start: {_why(r.stderr)}")
        self.adopt()

    def stop(self) -> float:
        """Stop it (idempotent); the seconds it took."""
        t = time.monotonic()
        if self._started:
            r = self._script("stop", os.fspath(self.dir), timeout=180)
            if r.returncode != 0:
                raise RuntimeError(f"kube-node stop: {_why(r.stderr)}")
            self._started = False
        return time.monotonic() - t

    # ---- what it wrote
    @property
    def env(self) -> dict[str, str]:
        """DIR/env: NODE_NAME, NODE_IP, POD_SUBNET, BRIDGE, CGROUP_ROOT, CONTAINERD_ADDRESS, *_MS timings."""
        p = self.dir / "env"
        return _env_text(p.read_text()) if p.exists() else {}

    def ms(self, key: str) -> int:
        return int(self.env.get(key, "0"))

    # ---- images
    def import_images(self, *archives: str) -> float:
        """Import ARCHIVES into the node's containerd; the seconds it took."""
        t = time.monotonic()
        r = self._script("import", os.fspath(self.dir), *archives)
        if r.returncode != 0:
            raise RuntimeError(f"kube-node import: {_why(r.stderr)}")
        return time.monotonic() - t

    def load_images(self, build_dir: Path) -> dict[str, str]:
        """The agent's and controller's images from BUILD_DIR/bin and the workload image (the SDK), built or
        taken from the cache, imported into the node: {"AGENT_IMAGE", "CONTROLLER_IMAGE", "WORKLOAD_IMAGE", ...,
        "build_s", "import_s"}."""
        t = time.monotonic()
        r = subprocess.run([os.fspath(self.root / "scripts/kube-images.sh"), os.fspath(build_dir)],
                           capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            raise NodeUnavailable(f"kube-images: {_why(r.stderr)}")
        images = _env_text(r.stdout)
        build_s = time.monotonic() - t
        import_s = self.import_images(images["AGENT_ARCHIVE"], images["CONTROLLER_ARCHIVE"], images["WORKLOAD_ARCHIVE"])
        return {**images, "build_s": f"{build_s:.2f}", "import_s": f"{import_s:.2f}"}

    # ---- processes
    def pids(self) -> list[int]:
        """The node's daemons and the containerd shims its pods run under."""
        out = []
        for d in self.DAEMONS:
            try:
                out.append(int((self.dir / f"{d}.pid").read_text().strip()))
            except (OSError, ValueError):
                pass
        return out + self.shims()

    def shims(self) -> list[int]:
        """containerd shims of this node's containerd (they name its socket)."""
        sock = self.env.get("CONTAINERD_ADDRESS", os.fspath(self.dir / "containerd/containerd.sock"))
        return [pid for pid, cmd in _processes().items() if f"-address {sock} " in f"{cmd} "]

    def adopt(self) -> None:
        """Mark the node's processes (shims started by pods of the last test too, and the runc a shim is running
        just now for an exec or a stop) as the fixture's."""
        if self.long_lived:
            ours = set(self.pids())
            parents = _parents()
            outlive_tests(*ours, *(pid for pid in parents if parents[pid] in ours))

    # ---- what a stop must have removed
    def leftovers(self) -> list[str]:
        """Everything of this node still on the machine: processes naming DIR, mounts beneath DIR, network
        namespaces holding an address of its pod subnet, its bridge, its cgroups, CNI's cached results for its
        network, a device-plugin socket no kubelet listens on."""
        env = self.env
        d = os.fspath(self.dir)
        # The scheduler and controller-manager name the apiserver's kubeconfig, the others DIR.
        theirs = f"--kubeconfig={self.kube.kubeconfig} "
        left = [f"process {pid}: {cmd[:120]}" for pid, cmd in _processes().items()
                if d + "/" in cmd or (theirs in f"{cmd} " and "kube-apiserver" not in cmd.split(" ")[0])]
        with open("/proc/self/mountinfo") as f:
            left += [f"mount {m}" for m in (ln.split()[4] for ln in f) if m.startswith(d + "/")]
        subnet = ipaddress.ip_network(env["POD_SUBNET"]) if env.get("POD_SUBNET") else None
        netns = Path("/run/netns")
        for ns in sorted(netns.iterdir()) if netns.is_dir() and subnet else []:
            r = subprocess.run(["ip", "-n", ns.name, "-4", "-o", "addr", "show"], capture_output=True, text=True,
                               timeout=10)
            addrs = [w.split("/")[0] for ln in r.stdout.splitlines() for w in ln.split()[3:4]]
            if any(ipaddress.ip_address(a) in subnet for a in addrs):
                left.append(f"network namespace {ns.name} ({', '.join(addrs)})")
        if env.get("BRIDGE") and Path(f"/sys/class/net/{env['BRIDGE']}").exists():
            left.append(f"bridge {env['BRIDGE']}")
        if env.get("CNI_NETWORK"):
            left += [f"CNI result {p}" for p in Path("/var/lib/cni/results").glob(f"{env['CNI_NETWORK']}-*")]
        dp = "/var/lib/kubelet/device-plugins/kubelet.sock"
        if os.path.exists(dp) and not subprocess.run(["ss", "-Hxl", f"src {dp}"], capture_output=True, text=True,
                                                     timeout=10).stdout.strip():
            left.append(f"socket {dp} (no kubelet listens)")
        if env.get("CGROUP_ROOT"):
            for h in Path("/sys/fs/cgroup").iterdir():
                if (h / env["CGROUP_ROOT"].lstrip("/")).exists():
                    left.append(f"cgroup {h}{env['CGROUP_ROOT']}")
        return left


def _parents() -> dict[int, int]:
    """{pid: its parent's pid} of every process."""
    found: dict[int, int] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/stat") as f:
                    found[int(entry.name)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
    return found


def _processes() -> dict[int, str]:
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    found[int(entry.name)] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                continue
    return found
