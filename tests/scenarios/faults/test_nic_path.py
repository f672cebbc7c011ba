"""Proof of path (docs/path.md): the source agent judges from the NICs' own counters which NIC carried a
transfer's bytes.

node-a and node-b are network namespaces on the harness's bridge (their REST and the controller's traffic)
with two direct veth links between them besides it, link1 and link2, each on a /24 of its own. Both agents
bind their tcp rails to link1's addresses. Three small TransferJobs (16 MiB file, crc32c) from node-a:

1. as routed: the bytes cross link1, and node-a's transfer and the job's status.path say Matched, link1's
   veth Carried with its tx delta at least the planned bytes;
2. steered: a host route in node-a sends node-b's link1 address through link2's veth (the rail is still
   bound to link1's address), and the path is Misrouted, naming link1's veth (NotCarried) and link2's
   (Unplanned, its tx delta at least the planned bytes);
3. node-a restarted reading its counters under an empty directory (--nic-counters-root): Unreadable, the
   reason naming the counter file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import AgentPool, LocalController, MiB, Network, file_job, random_file, wait_for

SIZE = 16 * MiB


def run_job(ctl: LocalController, name: str) -> dict[str, Any]:
    ctl.apply(file_job(name, "weights.bin", name, SIZE))
    wait_for(lambda: ctl.finished(name), 30, f"job {name} finishing")
    assert ctl.phase(name) == "Succeeded", ctl.condition_text(name, "Failed")
    path = ctl.status(name).get("path")
    assert isinstance(path, dict), f"job {name} has no status.path: {ctl.status(name)}"
    return path


def nic(path: dict[str, Any], name: str) -> dict[str, Any]:
    for n in path.get("nics") or []:
        if n.get("nic") == name:
            return dict(n)
    raise AssertionError(f"status.path names no NIC {name}: {path}")


def test_path_matched_on_the_rail_veth_misrouted_when_steered_unreadable_said(
        network: Callable[..., Network], agents: AgentPool,
        local_controller: Callable[..., LocalController], work: Path,
        report: Callable[[str], None]) -> None:
    net = network("node-a", "node-b")
    agents.network = net
    link1 = net.add_link("node-a", "node-b")
    link2 = net.add_link("node-a", "node-b")
    a = agents.start("node-a", "--bind-address", link1.a_addr)
    agents.start("node-b", "--bind-address", link1.b_addr)
    random_file(work / "node-a" / "weights.bin", size=SIZE)
    ctl = local_controller()

    # 1. As routed: link1 carries the bytes.
    path = run_job(ctl, "routed")
    assert path["verdict"] == "Matched", path
    assert path["counted"] == "tx", path
    rail = nic(path, link1.a_dev)
    assert rail["verdict"] == "Carried" and rail["planned"], rail
    assert rail["plannedBytes"] >= SIZE, rail
    assert rail["counterDelta"]["txBytes"] >= rail["plannedBytes"] * 0.99, rail
    transfer = a.newest_transfer()
    assert transfer.get("path", {}).get("verdict") == "Matched", transfer.get("path")
    report(f"routed: Matched, {link1.a_dev} planned {rail['plannedBytes']} B, tx delta "
           f"{rail['counterDelta']['txBytes']} B ({rail['counterDelta']['txBytes'] / rail['plannedBytes']:.3f}x)")

    # 2. Steered: node-b's link1 address routed through link2's veth; node-b takes it on either link.
    net.run("node-a", ["ip", "route", "add", f"{link1.b_addr}/32", "dev", link2.a_dev])
    for scope in ("all", link2.b_dev):
        net.run("node-b", ["sysctl", "-qw", f"net.ipv4.conf.{scope}.rp_filter=0"])
    path = run_job(ctl, "steered")
    assert path["verdict"] == "Misrouted", path
    planned, moved = nic(path, link1.a_dev), nic(path, link2.a_dev)
    assert planned["verdict"] == "NotCarried" and planned["planned"], planned
    assert moved["verdict"] == "Unplanned" and not moved["planned"], moved
    assert moved["counterDelta"]["txBytes"] >= planned["plannedBytes"] * 0.99, moved
    assert link1.a_dev in path["message"] and link2.a_dev in path["message"], path["message"]
    report(f"steered: Misrouted; {link1.a_dev} tx {planned['counterDelta']['txBytes']} B of "
           f"{planned['plannedBytes']} planned, {link2.a_dev} tx {moved['counterDelta']['txBytes']} B")

    # 3. Counters that cannot be read are said, not taken as zero.
    empty = work / "no-sysfs"
    empty.mkdir()
    a.args += ["--nic-counters-root", str(empty)]
    a.restart()
    path = run_job(ctl, "unreadable")
    assert path["verdict"] == "Unreadable", path
    rail = nic(path, link1.a_dev)
    assert rail["verdict"] == "Unreadable" and "counterDelta" not in rail, rail
    assert f"{link1.a_dev}/statistics/tx_bytes" in rail["message"], rail
    report(f"unreadable: {rail['message']}")

    # The agent's own metrics say the same per NIC.
    assert a.metric('conduit_agent_transfer_paths_total{verdict="Unreadable"}') == 1
    assert a.metric(f'conduit_agent_nic_path_mismatches_total{{nic="{link1.a_dev}",verdict="Unreadable"}}') == 1

