"""Fault: a target agent is SIGKILLed mid-transfer and never comes back (its node is gone).

A Fanout TransferJob moves a 256 MiB region on node-a into new regions on node-b and node-c at 64 MiB/s per
target, verified crc32c, activeDeadlineSeconds 60. The agent writes the targets one after another; at 25% of
node-b's bytes node-b is killed. Expected: the job ends Failed within the deadline, with the reason naming the
unreachable peer; the live target node-c holds no grant and no region the job created; the source node-a runs
no transfer and its region has no users left (no registration leaked: it can be deleted at once); every agent
still alive answers /healthz.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from harness import AgentPool, LocalController, MiB, now, random_file, transfer_job, wait_for


def test_target_killed_for_good_job_fails_and_nothing_is_left(
        agents: AgentPool, local_controller: Callable[..., LocalController], work: Path,
        report: Callable[[str], None]) -> None:
    a, b, c = (agents.start(n, "--memory-cap", "1GiB") for n in ("node-a", "node-b", "node-c"))
    random_file(work / "node-a" / "weights.bin", 256)
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
        "activeDeadlineSeconds": 60,
        "maxBytesPerSecond": 64 * MiB,
    }))

    wait_for(lambda: a.transfer_past(64 * MiB), 30, "the transfer reaching 64 MiB")
    assert len(c.grants()) >= 1, "node-c holds no grant while the job runs"
    t_fault = now()
    b.kill()
    wait_for(lambda: a.newest_transfer().get("state") in ("Failed", "Cancelled"), 60,
             "the source agent noticing the dead target")
    t_noticed = now()
    first = a.newest_transfer()
    wait_for(lambda: ctl.finished("weights"), 70, "the job finishing")
    t_done = now()
    phase = ctl.phase("weights")
    failed = ctl.condition_text("weights", "Failed")
    assert phase == "Failed", f"job {phase}, not Failed"
    assert "PeerUnreachable" in failed, f"the Failed condition does not name PeerUnreachable: {failed}"
    took = t_done - t_fault
    assert took < 60, f"Failed after {took:.2f} s, beyond activeDeadlineSeconds 60"

    # What is left on the live nodes.
    left_c = [{"id": g.get("id"), "region": g.get("region")} for g in c.grants()]
    assert left_c == [], f"grants left on node-c: {left_c}"
    left_a = [{"id": g.get("id"), "region": g.get("region")} for g in a.grants()]
    assert left_a == [], f"grants left on node-a: {left_a}"
    region_c = c.status_code("GET", "/v1/regions/weights")
    assert region_c == 404, f"the region the job created on node-c is still there (GET: {region_c})"
    users = a.get("/v1/regions/weights").get("users")
    assert users == 0, f"the source region on node-a still has {users} users"
    active = a.metric("conduit_agent_active_transfers")
    assert active == 0, f"node-a reports {active:g} active transfers"
    for agent in (a, c):
        assert agent.healthy(), f"{agent.node} unhealthy"
    deleted = a.status_code("DELETE", "/v1/regions/weights")
    assert deleted == 204, f"deleting the source region on node-a: HTTP {deleted} (a registration leaked?)"

    report(f"node-b killed at {first.get('bytesDone')} bytes; source transfer {first.get('state')} "
           f"{first.get('reason')} after {t_noticed - t_fault:.2f} s; job Failed: {failed}")
    report("node-c: 0 grants, created region deleted; node-a: 0 grants, region users 0, 0 active transfers, "
           "region deletable")
    report(f"recovery: kill -> Failed {took:.2f} s (activeDeadlineSeconds 60)")
