"""Fault: the target node's link is cut (its veth set down) for longer than the agents' stall timeout, then
restored.

node-a and node-b are network namespaces on a bridge; the agents run with --stall-timeout-ms 3000. A
TransferJob moves a 256 MiB file on node-a into a new region on node-b at 64 MiB/s, verified crc32c,
backoffLimit 6. At 25% node-b's link goes down; it comes back once the source agent has failed the transfer
(and no sooner than 6 s). The source learns of the cut from whichever notices first: the wire (Stalled, no
bytes for the stall timeout) or the landing report of a segment it sent just before (PeerUnreachable, the
target agent did not answer). Expected: the source transfer Failed with one of those reasons, the controller
retried (Retrying event naming it), the job Succeeded verified, node-b's region equals the file, and no grant
is left on node-b afterwards.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from harness import (Agent, AgentPool, LocalController, MiB, Network, assert_retried, assert_succeeded,
                     assert_verified, file_job, now, retries, wait_for)

STALL_MS = 3000


def test_link_cut_past_stall_timeout_job_retries_and_succeeds(
        network: Callable[..., Network], agents: AgentPool,
        two_nodes: Callable[..., tuple[Agent, Agent, LocalController]], work: Path,
        report: Callable[[str], None]) -> None:
    net = network("node-a", "node-b")
    agents.network = net
    a, b, ctl = two_nodes("--memory-cap", "1GiB", "--stall-timeout-ms", str(STALL_MS))
    ctl.apply(file_job("weights", "weights.bin", "weights", 256 * MiB, backoffLimit=6,
                       maxBytesPerSecond=64 * MiB))

    wait_for(lambda: a.transfer_past(64 * MiB), 30, "the transfer reaching 64 MiB")
    first_id = str(a.newest_transfer().get("id"))
    t_cut = now()
    net.link_down("node-b")
    wait_for(lambda: a.transfer(first_id).get("state") == "Failed", 30,
             "the source agent failing the transfer while the link is down")
    t_stalled = now()
    first = a.transfer(first_id)
    why = str(first.get("reason"))
    assert why in ("Stalled", "PeerUnreachable"), \
        (f"the cut transfer ended {({k: first.get(k) for k in ('state', 'reason', 'message')})}, not Stalled or "
         "PeerUnreachable")
    while now() - t_cut < 6:
        time.sleep(0.1)
    net.link_up("node-b")
    t_restored = now()

    def moving_again() -> bool:
        t = a.newest_transfer()
        return t.get("id") != first_id and int(t.get("bytesDone") or 0) > 0

    wait_for(moving_again, 60, "a retried transfer moving bytes after the link is back")
    t_moving = now()
    wait_for(lambda: ctl.finished("weights"), 90, "the job finishing after the link is back")
    t_done = now()
    assert_succeeded(ctl, "weights", "job")
    assert_verified(ctl, "weights")
    assert_retried(ctl, "weights", why)
    n = retries(ctl, "weights")
    b.save_and_compare("weights", work / "node-a" / "weights.bin")
    left = [{"id": g.get("id"), "region": g.get("region"), "expiresAt": g.get("expiresAt")} for g in b.grants()]
    assert left == [], f"grants left on node-b after the job Succeeded: {left}"

    report(f"link down at {first.get('bytesDone')} bytes for {t_restored - t_cut:.2f} s; source transfer Failed "
           f"Stalled {t_stalled - t_cut:.2f} s after the cut (stall timeout {STALL_MS} ms); retries={n}; "
           "Succeeded verified, bytes == file")
    report(f"recovery: link back -> bytes moving {t_moving - t_restored:.2f} s, -> Succeeded "
           f"{t_done - t_restored:.2f} s (cut -> Succeeded {t_done - t_cut:.2f} s)")
