"""Fault: a target agent's memory cap is reached.

node-b runs with --memory-cap 384MiB. While a 256 MiB TransferJob into a new region on node-b runs (64 MiB/s,
crc32c), a second job asks node-b for a 512 MiB region (create.bytes over the whole cap) and a REST client asks
for another 256 MiB region (over what is left). Expected: the second job is Failed with reason
InsufficientMemory, without retrying what can never fit; the REST request gets 422 with a JSON error (code
ResourceExhausted) and changes nothing; node-b answers /healthz throughout; the first job Succeeded verified
with its bytes equal to the file; and once it is done a new transfer into node-b still works.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from harness import (AgentPool, LocalController, MiB, assert_succeeded, file_job, now, random_file, retries,
                     wait_for)


def test_over_cap_job_fails_insufficient_memory_and_agent_stays_healthy(
        agents: AgentPool, local_controller: Callable[..., LocalController], work: Path,
        report: Callable[[str], None]) -> None:
    a = agents.start("node-a", "--memory-cap", "1GiB")
    b = agents.start("node-b", "--memory-cap", "384MiB")
    random_file(work / "node-a" / "weights.bin", 256)
    ctl = local_controller()

    ctl.apply(file_job("weights", "weights.bin", "weights", 256 * MiB, maxBytesPerSecond=64 * MiB))
    wait_for(lambda: a.transfer_past(64 * MiB), 30, "the first transfer reaching 64 MiB")

    # Over the whole cap: can never fit.
    t_apply = now()
    ctl.apply(file_job("too-big", "weights.bin", "too-big", 512 * MiB, maxBytesPerSecond=64 * MiB))
    wait_for(lambda: ctl.finished("too-big"), 30, "the over-cap job finishing")
    t_failed = now()
    assert ctl.phase("too-big") == "Failed", f"the over-cap job is {ctl.phase('too-big')}"
    failed = ctl.condition_text("too-big", "Failed")
    assert re.match(r"True InsufficientMemory: ", failed), f"Failed condition: {failed}"
    too_big_retries = retries(ctl, "too-big")

    # Over what is left (256 of 384 MiB in use): the REST API's answer.
    r = b.request("POST", "/v1/regions", {"name": "more", "bytes": 256 * MiB})
    body = r.json() if r.content else {}
    assert r.status_code == 422, f"a region over the cap: HTTP {r.status_code} {r.text}"
    assert (body.get("error") or {}).get("code") == "ResourceExhausted", f"error body: {r.text}"
    assert b.status_code("GET", "/v1/regions/more") == 404, "the refused region exists"
    assert b.healthy(), "node-b does not answer /healthz after the refusals"

    wait_for(lambda: ctl.finished("weights"), 30, "the first job finishing")
    assert_succeeded(ctl, "weights", "the first job")
    assert "verified crc32c" in ctl.condition_text("weights", "Complete"), "first job not verified"
    b.save_and_compare("weights", work / "node-a" / "weights.bin")
    used = (b.get("/v1/node").get("memory") or {}).get("used")
    assert used == 256 * MiB, f"node-b memory.used {used}, not the one 256 MiB region"

    # Another transfer into node-b still works (into what is left of the cap: 128 MiB).
    random_file(work / "node-a" / "small.bin", 64)
    ctl.apply(file_job("after", "small.bin", "after", 64 * MiB))
    wait_for(lambda: ctl.finished("after"), 30, "the job after the refusals finishing")
    assert_succeeded(ctl, "after", "the job after the refusals")
    b.save_and_compare("after", work / "node-a" / "small.bin")
    assert b.healthy(), "node-b unhealthy at the end"

    report(f"create.bytes 512 MiB > cap 384 MiB: Failed in {t_failed - t_apply:.2f} s after apply, "
           f"retries={too_big_retries}: {failed}")
    report(f"POST /v1/regions 256 MiB with 256 of 384 MiB used: 422 {body['error']['code']}: "
           f"{body['error'].get('message')}")
    report("node-b healthy; the running 256 MiB job Succeeded verified (bytes == file); a later 64 MiB job "
           "Succeeded")
