"""Agent.pull: the receiver's agent reads a range of another agent's region through a read grant its owner made
(``op: read``), verified crc32c as it lands; the owner revoking the grant refuses the next pull."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from harness import MiB

import conduit


def test_a_pull_through_the_owners_read_grant_lands_verified(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    with a.allocate("ckpt", 8 * MiB) as src, b.allocate("in", 4 * MiB) as dst:
        src.numpy()[:] = np.random.default_rng(5).integers(0, 256, 8 * MiB, dtype=np.uint8)
        grant = a.grant("ckpt", "read", offset=2 * MiB, length=4 * MiB)   # the owner gives [2, +4) MiB
        s = b.pull("in", a.url, "ckpt", grant.key, source_offset=2 * MiB).wait(timeout=30)
        assert s.state == "Succeeded" and s.raw["verified"] is True and s.bytes_done == 4 * MiB, s
        assert np.array_equal(dst.numpy(), src.numpy()[2 * MiB:6 * MiB])
        assert a.transfers() == [] and len(b.transfers()) == 1, "node-b's agent should have run the pull"
        a.revoke(grant.id)
        with pytest.raises(conduit.ConduitError):
            b.pull("in", a.url, "ckpt", grant.key, source_offset=2 * MiB).wait(timeout=30)
