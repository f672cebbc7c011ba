"""Fault: one byte of the target's memory is flipped after it was written and before it is verified.

The target region on node-b is memory a local process (tests/scenarios/faults/memfd_holder.py) shares with the agent
over its import socket, as a training process would; no test hook in the agent. A TransferJob moves a 256 MiB
file on node-a into it at 64 MiB/s with crc32c. The source agent verifies a target only after it has sent all
of it (agent/src/transfer_run.cpp: send, then verify), so a byte flipped at offset 16 MiB + 1 while the
transfer is still sending (at >= 128 MiB, in a segment finished long before) lands between the write and the
verify. Expected: the flip happened while the transfer was still sending; the source agent's transfer
Succeeded, verified, with slicesResent 1; the job Succeeded verified; the target bytes equal the file.
"""

from __future__ import annotations

import re
import subprocess
import sys
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
    after = a.newest_transfer()
    # Still sending after the flip: the verify, which starts once every byte is sent, had not begun.
    assert after.get("state") == "Running" and int(after.get("bytesDone") or 0) < SIZE, \
        ("the flip did not land while the transfer was still sending: "
         f"{({'state': after.get('state'), 'bytesDone': after.get('bytesDone')})}")
    transfer_id = after.get("id")

    wait_for(lambda: ctl.finished("weights"), 60, "the job finishing")
    t_done = now()
    assert_succeeded(ctl, "weights", "job")
    t = a.transfer(str(transfer_id))
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

    report(f"byte {at} flipped ({' '.join(flipped.split()[2:])}) at {before.get('bytesDone')} bytes sent; verify "
           f"found 1 mismatching slice, slicesResent={resent}, retries={t.get('retries')}; Succeeded verified; "
           "bytes == file")
    report(f"recovery: flip -> Succeeded {t_done - t_flip:.2f} s (the re-send and second verify are inside the "
           "transfer)")
