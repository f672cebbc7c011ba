"""Nodes as network namespaces on one machine (the former scripts/lib/netns.sh).

Each node is a namespace joined to a bridge in the root namespace by a veth pair, on a private /24
(10.231.X.0/24, X picked unused). Processes in the root namespace (the apiserver, the controller, the test)
reach every node at its address; nodes reach each other through the bridge. Nothing is routed beyond it.
Names carry a per-run tag, so concurrent runs do not collide.

    with Network(["node-a", "node-b"]) as net:
        net.argv("node-a", ["conduit-agent", ...])   # ["ip", "netns", "exec", NS, "conduit-agent", ...]
        net.link_down("node-b")                      # cuts node-b off (its root-side veth down)
        link = net.add_link("node-a", "node-b")      # a direct veth link between the two, besides the bridge
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from types import TracebackType


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    r = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {r.stderr.strip() or f'exit {r.returncode}'}")
    return r


def supported() -> bool:
    """True when this process may create network namespaces (root, and `ip netns` works)."""
    if os.geteuid() != 0 or shutil.which("ip") is None:
        return False
    probe = f"conduit-probe-{os.getpid()}"
    if _ip("netns", "add", probe, check=False).returncode != 0:
        return False
    _ip("netns", "del", probe, check=False)
    return True


@dataclass(frozen=True)
class Node:
    name: str
    addr: str  # the node's address on the bridge
    netns: str  # the namespace's name (`ip netns exec NETNS ...`)
    veth: str  # the root-side end of its veth pair: down cuts the node off; tc shapes traffic into it
    peer: str  # the namespace-side end


@dataclass(frozen=True)
class Link:
    """A direct veth link between two nodes' namespaces (its own /24): `a_dev` in node A holds `a_addr`,
    `b_dev` in node B holds `b_addr`. A rail bound to `a_addr` has `a_dev` as its NIC."""
    a: str
    b: str
    a_dev: str
    a_addr: str
    b_dev: str
    b_addr: str


class Network:
    """The nodes' namespaces, veths and the bridge; :meth:`down` (or leaving the ``with``) removes them all."""

    def __init__(self, nodes: Iterable[str]) -> None:
        self.tag = f"c{random.randint(1000, 9999)}"
        self.bridge = f"{self.tag}br"
        self.nodes: dict[str, Node] = {}
        self.links: list[Link] = []
        self._up(list(nodes))

    def __enter__(self) -> Network:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.down()

    def __getitem__(self, node: str) -> Node:
        return self.nodes[node]

    def addr(self, node: str) -> str:
        return self.nodes[node].addr

    def _free_subnet(self, prefix: str = "10.231") -> str:
        used = _ip("-o", "-4", "addr", "show").stdout
        for n in self.nodes.values():  # the links' subnets live inside the namespaces
            used += _ip("-n", n.netns, "-o", "-4", "addr", "show").stdout
        for _ in range(50):
            x = random.randint(20, 219)
            if f" {prefix}.{x}." not in used:
                return f"{prefix}.{x}"
        raise RuntimeError(f"netns: no free {prefix}.X.0/24")

    def add_link(self, a: str, b: str) -> Link:
        """A second path between nodes A and B besides the bridge: a veth pair with one end in each
        namespace, on a /24 of its own (10.232.X.1 in A, .2 in B). Removed with the namespaces."""
        i = len(self.links) + 1
        a_dev, b_dev = f"{self.tag}l{i}a", f"{self.tag}l{i}b"
        subnet = self._free_subnet("10.232")
        na, nb = self.nodes[a], self.nodes[b]
        _ip("link", "add", a_dev, "type", "veth", "peer", "name", b_dev)
        _ip("link", "set", a_dev, "netns", na.netns)
        _ip("link", "set", b_dev, "netns", nb.netns)
        _ip("-n", na.netns, "addr", "add", f"{subnet}.1/24", "dev", a_dev)
        _ip("-n", nb.netns, "addr", "add", f"{subnet}.2/24", "dev", b_dev)
        _ip("-n", na.netns, "link", "set", a_dev, "up")
        _ip("-n", nb.netns, "link", "set", b_dev, "up")
        link = Link(a, b, a_dev, f"{subnet}.1", b_dev, f"{subnet}.2")
        self.links.append(link)
        return link

    def _up(self, nodes: list[str]) -> None:
        subnet = self._free_subnet()
        try:
            _ip("link", "add", self.bridge, "type", "bridge")
            _ip("addr", "add", f"{subnet}.1/24", "dev", self.bridge)
            # STP stays off (the default), so bridge ports forward at once: no learning delay to wait out.
            _ip("link", "set", self.bridge, "up")
            for i, node in enumerate(nodes, start=11):
                ns, host, peer = f"conduit-{self.tag}-{node}", f"{self.tag}h{i}", f"{self.tag}p{i}"
                _ip("netns", "add", ns)
                self.nodes[node] = Node(node, f"{subnet}.{i}", ns, host, peer)
                _ip("link", "add", host, "type", "veth", "peer", "name", peer)
                _ip("link", "set", peer, "netns", ns)
                _ip("link", "set", host, "master", self.bridge)
                _ip("link", "set", host, "up")
                _ip("-n", ns, "link", "set", "lo", "up")
                _ip("-n", ns, "addr", "add", f"{subnet}.{i}/24", "dev", peer)
                _ip("-n", ns, "link", "set", peer, "up")
        except BaseException:
            self.down()
            raise

    def argv(self, node: str, argv: Sequence[str | os.PathLike[str]]) -> list[str]:
        """ARGV run inside NODE's namespace. `ip netns exec` execs it, so the started pid is ARGV's own."""
        return ["ip", "netns", "exec", self.nodes[node].netns, *(os.fspath(a) for a in argv)]

    def run(self, node: str, argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run a short command inside NODE's namespace and wait for it."""
        r = subprocess.run(self.argv(node, argv), capture_output=True, text=True, timeout=60)
        if check and r.returncode != 0:
            raise RuntimeError(f"{node}: {' '.join(argv)}: {r.stderr.strip() or f'exit {r.returncode}'}")
        return r

    def shape_egress(self, rate: str) -> None:
        """Every node's egress (its namespace-side veth) shaped to RATE, as tc writes it ("1gbit"), so the
        links and not the CPUs are what a bench's jobs share. tbf needs a bucket of at least one GSO packet
        (64 KiB); 1 MiB keeps the rate exact at 1 Gbit/s."""
        for node in self.nodes.values():
            self.run(node.name, ["tc", "qdisc", "add", "dev", node.peer, "root", "tbf", "rate", rate,
                                 "burst", "1mb", "latency", "50ms"])

    def link_down(self, node: str) -> None:
        """Cut NODE off from every other node and from the root namespace."""
        _ip("link", "set", self.nodes[node].veth, "down")

    def link_up(self, node: str) -> None:
        _ip("link", "set", self.nodes[node].veth, "up")

    def down(self) -> None:
        """Delete every namespace, veth and the bridge this network made (idempotent)."""
        for link in self.links:
            _ip("-n", self.nodes[link.a].netns, "link", "del", link.a_dev, check=False)
        self.links = []
        for n in self.nodes.values():
            _ip("link", "del", n.veth, check=False)
            _ip("netns", "del", n.netns, check=False)
        self.nodes = {}
        _ip("link", "del", self.bridge, check=False)


# ---- traffic shaping on a node's root-side veth (what goes INTO the node) ---------------------------------

def tc(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    """`tc ARGS...`; raises RuntimeError with tc's message when CHECK and it fails."""
    r = subprocess.run(["tc", *args], capture_output=True, text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError(f"tc {' '.join(args)}: {r.stderr.strip() or f'exit {r.returncode}'}")
    return r


def netem(dev: str, *spec: str) -> None:
    """`tc qdisc add dev DEV root netem SPEC...` (e.g. "loss", "1%", "delay", "5ms")."""
    tc("qdisc", "add", "dev", dev, "root", "netem", *spec)


def random_drop(dev: str, percent: float) -> None:
    """Drop PERCENT of DEV's egress packets at random without netem: a classic-BPF filter on a clsact
    qdisc (ld rand; drop when below PERCENT of 2^32: direct action TC_ACT_SHOT). For kernels built without
    CONFIG_NET_SCH_NETEM, which still have cls_bpf."""
    threshold = round(percent / 100 * 2**32)
    tc("qdisc", "add", "dev", dev, "clsact")
    tc("filter", "add", "dev", dev, "egress", "bpf", "da", "bytecode",
       f"4,32 0 0 4294963256,53 1 0 {threshold},6 0 0 2,6 0 0 4294967295")


def clear_shaping(dev: str) -> None:
    """Remove whatever netem / random_drop put on DEV."""
    tc("qdisc", "del", "dev", dev, "root", check=False)
    tc("qdisc", "del", "dev", dev, "clsact", check=False)


def dropped_packets(dev: str) -> int:
    """Packets DEV's qdiscs report dropped (`tc -s qdisc show`)."""
    total = 0
    words = tc("-s", "qdisc", "show", "dev", dev).stdout.replace(",", " ").replace("(", " ").split()
    for i, w in enumerate(words):
        if w == "dropped" and i + 1 < len(words) and words[i + 1].isdigit():
            total += int(words[i + 1])
    return total
