"""A transfer's grants end with it, whether anyone waits for it or not (issue 32, item 8): the source agent
revokes each target grant at its agent when the transfer ends (releaseGrant), so the target region can be
deleted at once, and a ``with`` block left by an exception leaves no region or grant behind."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from harness import MiB

import conduit
from conduit import Target


def eventually(check: Callable[[], bool], seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.02)
    return True


def ended(a: conduit.Agent, transfer_id: str) -> bool:
    return next(t for t in a.transfers() if t["id"] == transfer_id)["state"] in ("Succeeded", "Failed",
                                                                                   "Cancelled")


def test_a_transfer_nobody_waits_for_releases_its_grant(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    a.create_region("src", MiB)
    b.create_region("t1", MiB)
    t = a.transfer("src", [Target(b, "t1")])  # never waited for
    assert eventually(lambda: ended(a, t.id), 10)
    assert eventually(lambda: b.grants() == []), f"grants left on b: {b.grants()}"
    b.delete_region("t1")  # was 409 Conflict for the grant's 600 s ttl
    assert b.regions() == []


def test_a_failed_transfer_releases_its_grant_too(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    a.create_region("src", 8 * MiB)
    b.create_region("t1", 8 * MiB)
    t = a.transfer("src", [Target(b, "t1")], max_bytes_per_second=MiB, deadline_seconds=1)
    assert eventually(lambda: ended(a, t.id), 10)
    assert next(x for x in a.transfers() if x["id"] == t.id)["reason"] == "DeadlineExceeded"
    assert eventually(lambda: b.grants() == [])
    b.delete_region("t1")


def test_leaving_allocate_by_an_exception_leaves_nothing(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    with pytest.raises(RuntimeError, match="in the block"):
        with a.allocate("src", 2 * MiB) as src, b.allocate("dst", 2 * MiB):
            src.numpy()[:] = 1
            a.transfer("src", [Target(b, "dst")], max_bytes_per_second=8 * MiB)  # still running at the raise
            raise RuntimeError("in the block")
    assert a.regions() == [] and b.regions() == [], "a region was left"
    assert b.grants() == [], "a grant was left"


def test_a_scatter_grant_for_one_call_is_released(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    a.create_region("kv", 64 << 10)
    b.create_region("kv", 64 << 10)
    a.scatter("kv", b.grant("kv", "read"), [0, 4096], [8192, 0], 4096, op="read", release_grant=True)
    assert b.grants() == []
    # Refused by the agent: the grant goes too.
    with pytest.raises(conduit.InvalidArgument, match="overlaps"):
        a.scatter("kv", b.grant("kv", "write"), [0, 4096], [0, 100], 4096, release_grant=True)
    assert b.grants() == []
    b.delete_region("kv")
