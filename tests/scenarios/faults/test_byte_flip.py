"""Fault: one byte of the target's memory is flipped after it landed and was verified.

The target region on node-b is memory a local process (tests/scenarios/faults/memfd_holder.py) shares with the agent
over its import socket, as a training process would; no test hook in the agent. A TransferJob moves a 256 MiB
file on node-a into it at 64 MiB/s with crc32c. Segments are verified as they land (docs/pipelines.md), so a
byte flipped at offset 16 MiB + 1 once the transfer is past 128 MiB lies in bytes already confirmed. Then the
source agent is killed and restarted: the job retries and resumes past 128 MiB, and with crc32c the resumed
transfer still reads, checksums and reports every byte below its resume point (sending none of them), so the
target names the one slice that now differs and only it is sent again. Expected: the retried transfer
Succeeded, verified, with slicesResent 1; the job Succeeded verified; the target bytes equal the file.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from harness import (Agent, LocalController, MiB, ProcessSet, assert_succeeded, assert_verified, file_job, now,
                     wait_for)

HOLDER = Path(__file__).resolve().parent / "memfd_holder.py"
SIZE = 256 * MiB


def test_flipped_byte_is_caught_by_verify_and_resent(
        two_nodes: Callable[..., tuple[Agent, Agent, LocalController]], processes: ProcessSet, work: Path,
        report: Callable[[str], None]) -> None:
    a, b, ctl = two_nodes("--memory-cap", "1GiB")
    out = work / "holder.out"
    holder = processes.start([sys.executable, HOLDER, b.socket, "weights", str(SIZE)], name="memfd holder",
                             stdout=out, stderr=work / "holder.log", stdin=subprocess.PIPE)
    assert holder.stdin is not None

    def say(command: str) -> None:
        assert holder.stdin is not None
        holder.stdin.write(f"{command}\n".encode())
        holder.stdin.flush()

    def holder_line(pattern: str) -> str:
        return next((ln for ln in out.read_text().splitlines() if re.match(pattern, ln)), "")

    wait_for(lambda: holder_line(r"imported weights"), 20, "the holder importing its memfd as region weights on node-b")
    assert b.get("/v1/regions/weights").get("source") == "imported", "region weights is not imported"
    ctl.apply(file_job("weights", "weights.bin", "weights", None, maxBytesPerSecond=64 * MiB))

    wait_for(lambda: a.transfer_past(128 * MiB), 30, "the transfer reaching 128 MiB")
    at = 16 * MiB + 1
    before = a.newest_transfer()
    t_flip = now()
    say(f"flip {at}")
    flipped = wait_for(lambda: holder_line(rf"flipped {at} "), 5, f"the holder flipping byte {at}")
    a.kill()
    time.sleep(0.5)
    a.start()

    wait_for(lambda: ctl.finished("weights"), 60, "the job finishing")
    t_done = now()
    assert_succeeded(ctl, "weights", "job")
    t = a.newest_transfer()  # the retry, on the restarted agent
    assert t.get("state") == "Succeeded" and t.get("verified") is True, \
        f"source transfer: {({k: t.get(k) for k in ('state', 'verified', 'reason', 'message')})}"
    resent = t.get("slicesResent")
    assert resent == 1, f"slicesResent {resent}, not 1: {t}"
    assert "re-sending mismatching slices" in a.log_text(), "the source agent did not log the re-send"
    assert_verified(ctl, "weights")
    say(f"peek {at}")
    wait_for(lambda: holder_line(rf"byte {at} "), 5, f"peeking at byte {at}")
    b.save_and_compare("weights", work / "node-a" / "weights.bin")
    holder.stdin.close()

    report(f"byte {at} flipped ({' '.join(flipped.split()[2:])}) at {before.get('bytesDone')} bytes sent, then "
           f"node-a killed; the resumed transfer checked the prefix and found 1 mismatching slice, "
           f"slicesResent={resent}; Succeeded verified; bytes == file")
    report(f"recovery: flip -> Succeeded {t_done - t_flip:.2f} s (kill, restart, backoff, resumed transfer)")
