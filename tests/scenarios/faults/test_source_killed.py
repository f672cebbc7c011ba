"""Fault: the source agent is SIGKILLed mid-transfer and restarted (as a DaemonSet pod restarts on its node).

A TransferJob whose source is a file (source.file) moves 256 MiB from node-a into a new region on node-b at
64 MiB/s, verified crc32c. At 25% node-a is killed, then started again on the same port 1 s later. The
restarted agent has lost every region and transfer: the controller finds the transfer gone (TransferLost),
retries after its backoff, reloads the file and completes. Expected: the job Succeeded with >= 1 retry, its
condition and event say why, and node-b's region equals the file byte for byte.

Then the same kill with the controller stopped (SIGSTOP) meanwhile, and another client running transfers on
the restarted agent until it hands out the id the job had recorded (if ids repeat across restarts): the job
must still see its own transfer gone, retry and end with the right bytes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from harness import (Agent, LocalController, MiB, assert_retried, assert_succeeded, assert_verified, file_job,
                     now, retries, wait_for)
from harness.agents import first_difference


def test_source_killed_and_restarted_job_retries_and_succeeds(
        two_nodes: Callable[..., tuple[Agent, Agent, LocalController]], work: Path,
        report: Callable[[str], None]) -> None:
    a, b, ctl = two_nodes("--memory-cap", "1GiB")
    weights = work / "node-a" / "weights.bin"
    ctl.apply(file_job("weights", "weights.bin", "weights", 256 * MiB, backoffLimit=3,
                       maxBytesPerSecond=64 * MiB))

    wait_for(lambda: a.transfer_past(64 * MiB), 30, "the transfer reaching 64 MiB")
    before = a.newest_transfer()
    t_fault = now()
    a.kill()
    time.sleep(1)
    a.start()
    t_restarted = now()
    # The restarted agent's first transfer is the retry (its transfer list starts empty).
    wait_for(lambda: int(a.newest_transfer().get("bytesDone") or 0) > 0, 30,
             "the retried transfer moving bytes on the restarted node-a")
    t_moving = now()
    wait_for(lambda: ctl.finished("weights"), 60, "the job finishing after the restart")
    t_done = now()
    assert_succeeded(ctl, "weights", "job")
    n = retries(ctl, "weights")
    assert n >= 1, f"job Succeeded with retries={n}: the kill was not seen"
    assert_verified(ctl, "weights")
    assert_retried(ctl, "weights", "TransferLost")
    b.save_and_compare("weights", weights)
    report(f"killed at {before.get('bytesDone')} of 268435456 bytes; Retrying (TransferLost), retries={n}, "
           "Succeeded verified, target bytes == source file")
    report(f"recovery: kill -> agent back {t_restarted - t_fault:.2f} s (1 s down), -> bytes moving again "
           f"{t_moving - t_fault:.2f} s, -> Succeeded {t_done - t_fault:.2f} s")

    # ---- The same kill while the controller is away (stopped: a controller pod being rescheduled). Meanwhile
    # another client starts a transfer on the restarted node-a. When the controller is back, the transfer id
    # it recorded must not lead it to that other transfer: the job must see its own transfer gone and retry.
    ctl.apply(file_job("second", "weights.bin", "second", 256 * MiB, backoffLimit=3,
                       maxBytesPerSecond=64 * MiB))
    wait_for(lambda: a.transfer_past(64 * MiB), 30, "the second job's transfer reaching 64 MiB")
    recorded = a.newest_transfer().get("id")
    ctl.pause()
    a.kill()
    a.start()
    # Another user's small transfer on the restarted agent (node-a -> node-b), verified.
    (work / "node-a" / "other.bin").write_bytes(weights.read_bytes()[: 4 * MiB])
    a.post("/v1/regions", {"name": "other", "file": "other.bin", "mode": "load"})
    b.post("/v1/regions", {"name": "other", "bytes": 4 * MiB})
    grant = b.post("/v1/regions/other/grants", {"access": "write", "ttlSeconds": 60})
    body = {"source": {"region": "other"}, "verify": "crc32c",
            "targets": [{"grant": grant.get("key"), "url": b.url, "region": "other"}]}
    # As many as it takes the restarted agent to hand out the id the job recorded (agents that number
    # transfers from 1 at every start do), at most 4.
    other = ""
    for _ in range(4):
        other = str(a.post("/v1/transfers", body).get("id"))
        wait_for(lambda: a.transfer(other).get("state") == "Succeeded", 20,
                 f"the other client's transfer {other} finishing")
        if other == recorded:
            break
    ctl.resume()
    t_back = now()
    wait_for(lambda: ctl.finished("second"), 60, "the second job finishing")
    t_done = now()
    assert_succeeded(ctl, "second", "second job")
    n = retries(ctl, "second")
    if n < 1:
        b.post("/v1/regions/second/save", {"file": "second.bin"})
        raise AssertionError(
            f"the second job Succeeded without a retry: it took transfer {other} (another client's; the job "
            f"had recorded {recorded} before the restart) for its own; node-b's bytes vs the file: "
            f"{first_difference(weights, work / 'node-b' / 'second.bin')}")
    b.save_and_compare("second", weights)
    report(f"killed while the controller was stopped; another client's transfer on the restarted agent got id "
           f"{other} (the job had recorded {recorded}); the job retried (TransferLost) and Succeeded verified, "
           "bytes == file")
    report(f"recovery: controller back -> Succeeded {t_done - t_back:.2f} s")
