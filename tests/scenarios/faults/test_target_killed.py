"""Fault: one target of a Fanout is SIGKILLed mid-transfer and never comes back (its node is gone).

A Fanout TransferJob moves a 256 MiB region on node-a into new regions on node-b and node-c, verified crc32c,
at most 64 MiB/s per target, backoffLimit 1, activeDeadlineSeconds 20. Both targets are in flight at once; at 25% of node-b's bytes node-b is killed.
Expected: node-c is neither stopped nor held back: its bytes keep landing and its target Succeeds in the same
agent transfer. The retry finds node-b not answering and waits for it Pending (the pre-flight: no attempt of
the backoffLimit spent) until the deadline; the job ends Failed at activeDeadlineSeconds, with the reason naming
the unreachable peer and saying that node-c has every byte; node-c keeps the region the job created for it,
byte-identical to the source, and holds no grant; the source node-a runs no transfer and its region has no users left (no
registration leaked: it can be deleted at once); every agent still alive answers /healthz.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from harness import AgentPool, LocalController, MiB, now, random_file, transfer_job, wait_for


# The job's deadline: long enough for the first attempt to end (node-c's 256 MiB at 64 MiB/s, node-b's failure
# noticed: about 5 s from startTime) and the retry to be seen waiting Pending; the rest of it is waited out. It
# was 60 s, 40 s of that waiting for nothing.
DEADLINE_S = 20


def parse_time(value: str | datetime) -> datetime:
    """A status time: RFC 3339 text ("2026-01-02T03:04:05.678Z"), or as the job file's YAML reader gives it."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(value.replace("Z", "+00:00"))


def test_target_killed_for_good_the_other_target_lands_and_nothing_is_left(
        agents: AgentPool, local_controller: Callable[..., LocalController], work: Path,
        report: Callable[[str], None]) -> None:
    a, b, c = (agents.start(n, "--memory-cap", "1GiB") for n in ("node-a", "node-b", "node-c"))
    source = random_file(work / "node-a" / "weights.bin", 256)
    r = a.post("/v1/regions", {"name": "weights", "file": "weights.bin", "mode": "load"})
    assert r.get("name") == "weights", f"loading the source region: {r}"
    ctl = local_controller()
    ctl.apply(transfer_job("weights", {
        "source": {"node": "node-a", "region": "weights"},
        "targets": [{"node": "node-b", "region": "weights", "create": {"bytes": 256 * MiB}},
                    {"node": "node-c", "region": "weights", "create": {"bytes": 256 * MiB}}],
        "strategy": "Fanout",
        "transport": {"type": "tcp"},
        "verify": "crc32c",
        "backoffLimit": 1,
        "activeDeadlineSeconds": DEADLINE_S,
        "maxBytesPerSecond": 64 * MiB,
    }))

    def both_moving() -> bool:
        t = a.newest_transfer()
        targets = t.get("targets") or []
        return t.get("state") == "Running" and len(targets) == 2 and \
            all(int(x.get("bytesDone") or 0) >= 64 * MiB for x in targets)

    wait_for(both_moving, 30, "both targets past 64 MiB at once")
    at_kill = [int(x.get("bytesDone") or 0) for x in a.newest_transfer().get("targets") or []]
    t_fault = now()
    b.kill()
    wait_for(lambda: a.newest_transfer().get("state") in ("Failed", "Cancelled"), 60,
             "the source agent's transfer ending")
    t_noticed = now()
    first = a.newest_transfer()
    states = [x.get("state") for x in first.get("targets") or []]
    assert states == ["Failed", "Succeeded"], \
        f"target states in the source's transfer: {states}, want node-b Failed and node-c Succeeded: {first}"
    assert "1 of 2 targets failed" in (first.get("message") or ""), f"transfer message: {first.get('message')}"

    wait_for(lambda: ctl.phase("weights") == "Pending", 30, "the retry waiting Pending for node-b")
    waiting = ctl.condition_text("weights", "Running")
    assert waiting.startswith('False PeerUnreachable: waiting for node "node-b"'), waiting
    wait_for(lambda: ctl.finished("weights"), DEADLINE_S + 10, "the job finishing")
    t_done = now()
    phase = ctl.phase("weights")
    failed = ctl.condition_text("weights", "Failed")
    assert phase == "Failed", f"job {phase}, not Failed"
    assert "PeerUnreachable" in failed, f"the Failed condition does not name PeerUnreachable: {failed}"
    assert "targets with every byte: node-c/weights; failed: node-b/weights" in failed, \
        f"the Failed condition does not say which target landed: {failed}"
    took = t_done - t_fault
    # activeDeadlineSeconds counts from startTime, before the kill; the status says when it ended.
    ran = ctl.status("weights")
    lasted = (parse_time(ran["completionTime"]) - parse_time(ran["startTime"])).total_seconds()
    assert DEADLINE_S <= lasted < DEADLINE_S + 2, \
        f"Failed {lasted:.2f} s after startTime, not at activeDeadlineSeconds {DEADLINE_S}"
    assert int(ran.get("retries") or 0) == 1, f"waiting for node-b spent attempts: retries {ran.get('retries')}"
    targets = ctl.status("weights").get("targets") or []
    assert [t.get("state") for t in targets] == ["Failed", "Succeeded"], f"status.targets: {targets}"

    # What is left on the live nodes: node-c's region with the source's bytes, and nothing held.
    c.save_and_compare("weights", source)
    left_c = [{"id": g.get("id"), "region": g.get("region")} for g in c.grants()]
    assert left_c == [], f"grants left on node-c: {left_c}"
    left_a = [{"id": g.get("id"), "region": g.get("region")} for g in a.grants()]
    assert left_a == [], f"grants left on node-a: {left_a}"
    users = a.get("/v1/regions/weights").get("users")
    assert users == 0, f"the source region on node-a still has {users} users"
    active = a.metric("conduit_agent_active_transfers")
    assert active == 0, f"node-a reports {active:g} active transfers"
    for agent in (a, c):
        assert agent.healthy(), f"{agent.node} unhealthy"
    deleted = a.status_code("DELETE", "/v1/regions/weights")
    assert deleted == 204, f"deleting the source region on node-a: HTTP {deleted} (a registration leaked?)"

    report(f"node-b killed with the targets at {at_kill} bytes; source transfer {first.get('state')} "
           f"{first.get('reason')} after {t_noticed - t_fault:.2f} s, targets {states}; job Failed: {failed}")
    report("node-c: region byte-identical to the source, 0 grants; node-a: 0 grants, region users 0, "
           "0 active transfers, region deletable")
    report(f"held Pending for node-b ({waiting}); kill -> Failed {took:.2f} s, startTime -> Failed "
           f"{lasted:.2f} s (activeDeadlineSeconds {DEADLINE_S})")
