"""Region versions through the SDK: one more per transfer that landed whole, none for one that failed, long-poll
waiters that see an update whether they started before or after it, and the double buffer built on them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from harness import AgentPool, MiB, wait_for

import conduit
from conduit import DoubleBuffer, Target, Update
from conduit.values import parse_time


def fill(buf: conduit.SharedBuffer, seed: int) -> np.ndarray:
    data = np.random.default_rng(seed).integers(0, 256, buf.nbytes, dtype=np.uint8)
    buf.numpy()[:] = data
    return data


def test_each_landed_transfer_bumps_the_version_once(nodes: Callable[..., list[conduit.Agent]],
                                                      report: Callable[[str], None]) -> None:
    a, b = nodes("node-a", "node-b")
    r = b.create_region("dst", MiB + 3)
    assert (r.version, r.updated_by, r.updated_at) == (0, "", None)
    assert b.version("dst").version == 0
    seen: list[Update] = []
    with a.allocate("src", MiB + 3) as buf:
        for step in range(1, 4):
            fill(buf, step)
            a.transfer("src", [Target(b, "dst")], writer=f"trainer-step-{step}").wait(timeout=30)
            u = b.version("dst")
            assert u.version == step, f"after {step} transfers the version is {u.version}"
            assert u.updated_by == f"trainer-step-{step}" and u.updated_at is not None, u
            region = b.region("dst")
            assert (region.version, region.updated_by, region.updated_at) == (u.version, u.updated_by,
                                                                              u.updated_at)
            if seen:
                assert u.updated_at >= seen[-1].updated_at  # type: ignore[operator]
            seen.append(u)
        # The default writer names the source: "<node>/<region>".
        a.transfer("src", [Target(b, "dst")]).wait(timeout=30)
        assert b.version("dst").updated_by == "node-a/src"
    report(f"versions {[u.version for u in seen]} by {[u.updated_by for u in seen]}")


def test_a_chain_bumps_every_hop_once(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b, c, d = nodes("node-a", "node-b", "node-c", "node-d")
    size = 2 * MiB + 1
    hops = [b, c, d]
    for hop in hops:
        hop.create_region("w", size)
    with a.allocate("w", size) as buf:
        for step in (1, 2):
            fill(buf, 10 + step)
            a.transfer("w", [Target(h, "w") for h in hops], strategy="Chain", writer="chain").wait(timeout=30)
            for hop in hops:
                u = hop.version("w")
                assert (u.version, u.updated_by) == (step, "chain"), (hop, u)
                assert hop.checksum("w", slice=65536) == a.checksum("w", slice=65536), hop
    assert all(h.grants() == [] for h in hops), "a hop's grant was left"


def test_a_failed_transfer_does_not_bump(nodes: Callable[..., list[conduit.Agent]], agents: AgentPool) -> None:
    a, b = nodes("node-a", "node-b")
    b.create_region("dst", 8 * MiB)
    # Not in a with block: the buffer's agent is killed below, and its region goes with it.
    buf = a.allocate("src", 8 * MiB)
    fill(buf, 1)
    a.transfer("src", [Target(b, "dst")]).wait(timeout=30)
    assert b.version("dst").version == 1

    # Ends Failed (DeadlineExceeded) with bytes landed: no new version.
    fill(buf, 2)
    t = a.transfer("src", [Target(b, "dst")], max_bytes_per_second=2 * MiB, deadline_seconds=1)
    with pytest.raises(conduit.TransferFailed, match="DeadlineExceeded"):
        t.wait(timeout=30)
    assert b.version("dst").version == 1

    # The source agent killed mid-transfer: what landed is never a version.
    t = a.transfer("src", [Target(b, "dst")], max_bytes_per_second=2 * MiB)
    wait_for(lambda: t.status().bytes_done >= MiB, 10, "1 MiB on its way")
    agents["node-a"].kill()
    time.sleep(1.0)
    assert b.version("dst").version == 1
    with pytest.raises(conduit.Unavailable):
        t.wait(timeout=5)
    t.close()  # revokes the grant on node-b (the transfer is gone with its agent)
    assert b.grants() == []
    assert b.version("dst").version == 1
    with pytest.raises(TimeoutError):
        b.wait_version("dst", after=1, timeout=1)
    with pytest.raises(conduit.Unavailable):
        buf.close()  # the agent is gone: says so, and the buffer stays open here
    assert not buf.closed


def test_a_waiter_that_starts_after_the_update_sees_it(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    b.create_region("dst", 4096)
    with a.allocate("src", 4096) as buf:
        fill(buf, 3)
        a.transfer("src", [Target(b, "dst")]).wait(timeout=30)
    t0 = time.monotonic()
    u = b.wait_version("dst", after=0, timeout=10)
    assert u.version == 1 and time.monotonic() - t0 < 1.0, "an update already there must be answered at once"
    with pytest.raises(TimeoutError, match="version 1"):
        b.wait_version("dst", after=1, timeout=1.5)
    assert time.monotonic() - t0 < 5
    with pytest.raises(conduit.NotFound):
        b.wait_version("absent", timeout=1)


def test_a_blocked_waiter_wakes_when_a_transfer_lands(nodes: Callable[..., list[conduit.Agent]],
                                                      report: Callable[[str], None]) -> None:
    a, b = nodes("node-a", "node-b")
    b.create_region("dst", 2 * MiB)
    woke = threading.Event()

    def waiter() -> tuple[Update, float]:
        u = b.wait_version("dst", after=0, timeout=30)
        woke.set()
        return u, time.time()

    with a.allocate("src", 2 * MiB) as buf, ThreadPoolExecutor(1) as pool:
        fill(buf, 4)
        waiting = pool.submit(waiter)
        assert not woke.wait(1.0), "wait_version returned before anything landed"
        status = a.transfer("src", [Target(b, "dst")]).wait(timeout=30)
        u, woke_at = waiting.result(timeout=10)
        assert u.version == 1 and u.updated_by == "node-a/src", u
        assert b.checksum("dst") == a.checksum("src")
    finished = parse_time(status.raw["finishedAt"])
    assert finished is not None
    latency = woke_at - finished.timestamp()
    assert latency < 1.0, f"the waiter woke {latency:.2f} s after the transfer finished"
    report(f"blocked waiter woke {latency * 1000:+.0f} ms from the transfer's finishedAt")


def test_more_waiters_than_the_agent_holds_all_wake(nodes: Callable[..., list[conduit.Agent]],
                                                    report: Callable[[str], None]) -> None:
    a, b = nodes("node-a", "node-b")
    b.create_region("dst", 4096)
    # More than the agent holds at once (32; it answers 429 to the rest): those are asked again later.
    waiters = 40
    with a.allocate("src", 4096) as buf, ThreadPoolExecutor(waiters) as pool:
        fill(buf, 5)
        waiting = [pool.submit(b.wait_version, "dst", 0, 30) for _ in range(waiters)]
        time.sleep(1.5)
        assert not any(w.done() for w in waiting), [w.exception() for w in waiting if w.done()]
        # The agent is full: some of the waiters are being turned away, and wait on.
        with pytest.raises(conduit.TooManyRequests) as busy:
            b.request("GET", "/v1/regions/dst/version", params={"after": 0, "timeoutSeconds": 1})
        assert busy.value.status == 429 and busy.value.retry_after is not None, busy.value
        t0 = time.monotonic()
        a.transfer("src", [Target(b, "dst")]).wait(timeout=30)
        versions = [w.result(timeout=20).version for w in waiting]
        took = time.monotonic() - t0
    assert versions == [1] * waiters
    report(f"{waiters} waiters (the agent held some, turned the rest away with 429) all woke within {took:.2f} s")


def test_double_buffer(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    n = 64 * 1024
    db = DoubleBuffer(b, "weights")
    halves = db.allocate(n)  # the reader's own memory on node-b
    try:
        assert db.latest() is None
        assert db.next_target().region == "weights-0"
        with a.allocate("src", n) as src:
            written: list[np.ndarray] = []
            for step in range(1, 5):
                target = db.next_target()
                assert target.region == f"weights-{(step - 1) % 2}" and target.agent is b
                written.append(fill(src, step))
                a.transfer("src", [target]).wait(timeout=30)
                slot = db.wait(after=step - 1, timeout=5)
                assert (slot.region, slot.sequence) == (target.region, step), slot
                # The reader reads the newest half in place, and it is whole.
                assert np.array_equal(halves[slot.index].numpy(), written[-1])
                assert db.still_valid(slot)
                if step > 1:
                    prev = db.slots()[1 - slot.index]
                    assert prev.sequence == step - 1
                    # The previous half may be overwritten next: a reader still on it must re-read.
                    assert not db.still_valid(prev)
            # A failed write to the next half changes nothing a reader sees.
            t = a.transfer("src", [db.next_target()], max_bytes_per_second=4096, deadline_seconds=1)
            with pytest.raises(conduit.TransferFailed):
                t.wait(timeout=30)
            assert db.latest().sequence == 4  # type: ignore[union-attr]
            with pytest.raises(TimeoutError):
                db.wait(after=4, timeout=1)
    finally:
        for h in halves:
            h.close()


def test_a_waiter_uses_no_cpu_while_nothing_lands(nodes: Callable[..., list[conduit.Agent]],
                                                  report: Callable[[str], None]) -> None:
    (b,) = nodes("node-b")
    b.create_region("idle", MiB)
    with pytest.raises(TimeoutError):  # warm: the session's first requests cost CPU of their own
        b.wait_version("idle", after=0, timeout=1)
    # The baseline, in the same run: this thread blocked 3 s in one long poll made directly. Some machines
    # charge a thread blocked on a TCP socket a few ms of CPU per second (measured: 7-20 ms/s on a
    # Firecracker VM), so a fixed bound says more about the machine than about the SDK.
    t0 = time.thread_time()
    b.request("GET", "/v1/regions/idle/version", params={"after": 0, "timeoutSeconds": 3}, timeout=18)
    baseline = time.thread_time() - t0
    # The waiting thread's own CPU time over 3 s (thread time: the harness's other threads do not count), and
    # how many requests it made: one long poll, not a loop of short ones (which the request count catches
    # exactly; the CPU bound catches a spin, which would cost about the whole 3 s).
    calls = []
    request = b.request

    def counted(*args, **kwargs):
        calls.append(args[1] if len(args) > 1 else kwargs.get("path"))
        return request(*args, **kwargs)

    b.request = counted  # type: ignore[method-assign]
    t0 = time.thread_time()
    try:
        with pytest.raises(TimeoutError):
            b.wait_version("idle", after=0, timeout=3)
    finally:
        del b.request
    used = time.thread_time() - t0
    assert len(calls) == 1, f"waiting 3 s for a version made {len(calls)} requests: {calls}"
    assert used < 2 * baseline + 0.01, \
        f"waiting 3 s for a version used {used * 1000:.1f} ms of CPU; one long poll alone: {baseline * 1000:.1f} ms"
    report(f"3 s in wait_version with nothing landing: 1 request, {used * 1000:.1f} ms of CPU "
           f"(one bare long poll: {baseline * 1000:.1f} ms)")


def test_commit_moves_a_group_of_regions_to_one_version(nodes: Callable[..., list[conduit.Agent]]) -> None:
    """Two target regions written by scatter batches through long-lived grants, each committed with
    ``version=K`` only once both landed: each wakes its waiter at K with the grant's writer, a commit to a
    version the region cannot reach next is a Conflict naming the one it is at, and a read grant never
    commits."""
    a, b, c = nodes("node-a", "node-b", "node-c")
    with a.allocate("src", MiB) as buf:
        fill(buf, 7)
        for t in (b, c):
            t.create_region("kv", MiB)
        grants = [(t, t.grant("kv", "write", ttl_seconds=600, writer="reshard/step")) for t in (b, c)]
        for step in (1, 2):
            for t, g in grants:
                s = a.scatter("src", g, [0, 4096 * step], [8192, 0], 4096, verify="crc32c")
                assert s.verified
            assert [t.version("kv").version for t, _ in grants] == [step - 1] * 2, "a batch alone moves nothing"
            with ThreadPoolExecutor(2) as pool:
                waiters = [pool.submit(t.wait_version, "kv", step - 1, 30) for t, _ in grants]
                time.sleep(0.2)
                updates = [t.commit(g, 12288, version=step) for t, g in grants]
                woke = [w.result() for w in waiters]
            assert [(u.version, u.updated_by) for u in updates] == [(step, "reshard/step")] * 2, updates
            assert [u.version for u in woke] == [step] * 2

        t, g = grants[0]
        with pytest.raises(conduit.Conflict, match='region "kv" is at version 2: a commit to version 2 needs it at '
                                                   'version 1'):
            t.commit(g, 12288, version=2)
        read = t.grant("kv", "read", ttl_seconds=60)
        with pytest.raises(conduit.Conflict, match="read grant"):
            t.commit(read, 4096)
        t.revoke(read.id)
        assert t.version("kv").version == 2, "a refused commit changed the version"
        for t, g in grants:
            t.revoke(g.id)
