"""Chain TransferJobs (docs/broadcast.md): the source writes the first hop, each hop forwards to the next what
landed on it, every hop in flight at once. Real agents and a local-mode controller.

First every shape: 2, 3 and 4 hops, verify none and crc32c, a file and a region source, hops that also save
to a file, at a size that is not a multiple of the chunk; every hop's region (and file) compared with the
source. Then the fault the strategy must
survive: the middle hop of three is SIGKILLed mid-transfer. Its successor is fed by its predecessor from the
bytes it already has (routed around, not restarted) and ends byte-identical in the same attempt; the dead
hop is reported Failed. Its agent then comes back (empty: its region is gone), and the job's retry sends to
it alone: the job ends Succeeded with all three hops byte-identical. Last, the same with the middle hop's
link cut (its agent alive behind it) instead of killed, in network namespaces.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from harness import Agent, AgentPool, LocalController, MiB, Network, assert_succeeded, now, random_file, \
    transfer_job, wait_for
from harness.agents import first_difference

SIZE = 40 * MiB + 12345  # not a multiple of the 1 MiB chunk
NODES = ["node-b", "node-c", "node-d", "node-e"]


def chain_job(name: str, hops: list[str], nbytes: int, source: dict[str, Any], save: bool = False,
              **spec: Any) -> dict[str, Any]:
    file = {"file": f"{name}.bin"} if save else {}
    return transfer_job(name, {
        "source": {"node": "node-a", **source},
        "targets": [{"node": n, "region": name, "create": {"bytes": nbytes}, **file} for n in hops],
        "strategy": "Chain", "transport": {"type": "tcp"}, **spec})


def last_hop_past(source: Agent, nbytes: int) -> bool:
    """The source's chain transfer of three hops Running, with its last hop past NBYTES."""
    t = source.newest_transfer()
    targets = t.get("targets") or []
    return t.get("state") == "Running" and len(targets) == 3 and int(targets[2].get("bytesDone") or 0) >= nbytes


def test_every_chain_arrives_byte_identical_on_every_hop(
        agents: AgentPool, local_controller: Callable[..., LocalController], work: Path,
        report: Callable[[str], None]) -> None:
    a = agents.start("node-a", "--memory-cap", "512MiB")
    hops: dict[str, Agent] = {n: agents.start(n, "--memory-cap", "512MiB") for n in NODES}
    src = random_file(work / "node-a" / "src.bin", size=SIZE)
    a.post("/v1/regions", {"name": "src", "file": "src.bin", "mode": "load"})
    ctl = local_controller()
    jobs: dict[str, list[str]] = {}
    for n in (2, 3, 4):
        for verify in ("none", "crc32c"):
            name = f"chain{n}-{verify.replace('32', '')}"
            # The listed order is the forwarding order: a different one per job.
            order = NODES[n - 1::-1] if verify == "none" else NODES[:n]
            source = {"file": "src.bin"} if n != 3 else {"region": "src"}
            # Two hops also save their region to a file as it lands.
            ctl.apply(chain_job(name, order, SIZE, source, save=n == 2, verify=verify, backoffLimit=1))
            jobs[name] = order
    for name, order in jobs.items():
        wait_for(lambda j=name: ctl.finished(j), 120, f"job {name} finishing")
        assert_succeeded(ctl, name, "job")
        states = [t.get("state") for t in ctl.status(name).get("targets") or []]
        assert states == ["Succeeded"] * len(order), f"{name}: hop states {states}"
        for node in order:
            hops[node].save_and_compare(name, src)
            if len(order) == 2:
                why = first_difference(src, work / node / f"{name}.bin")
                assert why is None, f"{name}: {node}'s saved file differs from the source: {why}"
        report(f"{name} ({' -> '.join(['node-a', *order])}): {ctl.status(name).get('throughput')}")


def test_middle_hop_killed_is_routed_around_then_recovered(
        agents: AgentPool, local_controller: Callable[..., LocalController], work: Path,
        report: Callable[[str], None]) -> None:
    a = agents.start("node-a", "--memory-cap", "1GiB")
    b, c, d = (agents.start(n, "--memory-cap", "1GiB", "--stall-timeout-ms", "3000") for n in NODES[:3])
    src = random_file(work / "node-a" / "weights.bin", 256)
    ctl = local_controller()
    # 64 MiB/s on each hop: the chain is mid-way for seconds, whatever the machine.
    ctl.apply(chain_job("weights", NODES[:3], 256 * MiB, {"file": "weights.bin"}, verify="crc32c",
                        backoffLimit=3, maxBytesPerSecond=64 * MiB, activeDeadlineSeconds=120))

    wait_for(lambda: last_hop_past(a, 64 * MiB), 30, "the last hop past 64 MiB")
    at_kill = [int(x.get("bytesDone") or 0) for x in a.newest_transfer().get("targets") or []]
    t_kill = now()
    c.kill()
    wait_for(lambda: a.newest_transfer().get("state") in ("Failed", "Succeeded"), 60,
             "the source's chain transfer ending")
    first = a.newest_transfer()
    t_first = now()
    states = [x.get("state") for x in first.get("targets") or []]
    assert states == ["Succeeded", "Failed", "Succeeded"], \
        f"hop states after killing the middle hop: {states}, want node-c alone Failed: {first}"
    assert "routing around" in a.log_text(), "the source agent's log does not say it routed around node-c"
    # node-d was fed by node-b: the bytes it had stayed, and it holds the source's bytes now.
    d.save_and_compare("weights", src)
    report(f"node-c killed with the hops at {at_kill} bytes; attempt 1 ended {first.get('state')} after "
           f"{t_first - t_kill:.2f} s with hops {states}; node-d byte-identical (fed by node-b)")

    c.restart()
    wait_for(lambda: ctl.finished("weights"), 90, "the job finishing after node-c came back")
    assert_succeeded(ctl, "weights", "job")
    running = ctl.condition_text("weights", "Running")
    status = ctl.status("weights")
    assert int(status.get("retries") or 0) >= 1, status
    for agent in (b, c, d):
        agent.save_and_compare("weights", src)
    events = " | ".join(ctl.events("weights"))
    assert "2 landed in an earlier attempt" in events, f"the retry did not leave out the landed hops: {events}"
    report(f"node-c restarted: the retry sent to it alone; job Succeeded after {now() - t_kill:.2f} s, "
           f"all three hops byte-identical ({running})")


def test_middle_hop_link_cut_is_routed_around_then_recovered(
        network: Callable[..., Network], agents: AgentPool, local_controller: Callable[..., LocalController],
        work: Path, report: Callable[[str], None]) -> None:
    net = network("node-a", *NODES[:3])
    agents.network = net
    a = agents.start("node-a", "--memory-cap", "1GiB", "--stall-timeout-ms", "3000")
    b, c, d = (agents.start(n, "--memory-cap", "1GiB", "--stall-timeout-ms", "3000") for n in NODES[:3])
    src = random_file(work / "node-a" / "weights.bin", 256)
    ctl = local_controller()
    ctl.apply(chain_job("weights", NODES[:3], 256 * MiB, {"file": "weights.bin"}, verify="crc32c",
                        backoffLimit=6, maxBytesPerSecond=64 * MiB, activeDeadlineSeconds=150))

    wait_for(lambda: last_hop_past(a, 64 * MiB), 30, "the last hop past 64 MiB")
    first_id = str(a.newest_transfer().get("id"))
    t_cut = now()
    net.link_down("node-c")
    wait_for(lambda: a.transfer(first_id).get("state") in ("Failed", "Succeeded"), 60,
             "the source's chain transfer ending with node-c cut off")
    first = a.transfer(first_id)
    t_first = now()
    states = [x.get("state") for x in first.get("targets") or []]
    assert states == ["Succeeded", "Failed", "Succeeded"], \
        f"hop states with node-c's link cut: {states}, want node-c alone Failed: {first}"
    d.save_and_compare("weights", src)
    report(f"node-c's link cut at hop 3 past 64 MiB; attempt 1 ended {first.get('state')} after "
           f"{t_first - t_cut:.2f} s with hops {states}; node-d byte-identical (fed by node-b around node-c)")

    while now() - t_cut < 6:
        time.sleep(0.1)
    net.link_up("node-c")
    wait_for(lambda: ctl.finished("weights"), 120, "the job finishing after node-c's link is back")
    assert_succeeded(ctl, "weights", "job")
    for agent in (b, c, d):
        agent.save_and_compare("weights", src)
    report(f"link back after {now() - t_cut:.2f} s in all: the retry sent to node-c alone; job Succeeded, "
           "all three hops byte-identical")
