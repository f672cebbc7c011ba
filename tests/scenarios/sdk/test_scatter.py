"""KV-cache blocks from Python: a block table held in numpy arrays moves in one call over a long-lived grant,
every block landing where its offsets say, and a bad table is refused before anything is sent."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from harness import MiB

import conduit

BLOCK = 16 * 1024
REGION = 8 * MiB


def test_a_block_table_moves_both_ways_byte_exact(nodes: Callable[..., list[conduit.Agent]],
                                                  report: Callable[[str], None]) -> None:
    a, b = nodes("node-a", "node-b")
    rng = np.random.default_rng(3)
    with a.allocate("kv", REGION) as src, b.allocate("kv", REGION) as dst:
        src.numpy()[:] = rng.integers(0, 256, REGION, dtype=np.uint8)
        slots = REGION // BLOCK
        # 300 blocks from random slots of node-a's pool into other random slots of node-b's.
        src_blocks = rng.permutation(slots)[:300]
        dst_blocks = rng.permutation(slots)[:300]
        grant = b.grant("kv", "write", ttl_seconds=3600)
        s = a.scatter("kv", grant, src_blocks * BLOCK, dst_blocks * BLOCK, BLOCK)
        assert s.state == "Succeeded" and s.bytes_done == 300 * BLOCK, s
        mine, theirs = src.numpy().reshape(slots, BLOCK), dst.numpy().reshape(slots, BLOCK)
        assert np.array_equal(theirs[dst_blocks], mine[src_blocks]), "a block landed elsewhere than its offsets"
        untouched = np.setdiff1d(np.arange(slots), dst_blocks)
        assert not theirs[untouched].any(), "bytes landed outside the blocks the table named"

        # Read (pull) 200 of them back into free slots of node-a, through a read grant.
        back = rng.permutation(np.setdiff1d(np.arange(slots), src_blocks))[:200]
        read = b.grant("kv", "read", ttl_seconds=3600)
        s = a.scatter("kv", read, back * BLOCK, dst_blocks[:200] * BLOCK, BLOCK, op="read")
        assert s.state == "Succeeded", s
        assert np.array_equal(mine[back], mine[src_blocks[:200]]), "a pulled block landed elsewhere"
        assert {grant.id, read.id} <= {g.id for g in b.grants()}, "the long-lived grants did not outlive the calls"
        assert not s.verified

        # Verified: both ends' CRC32C of the blocks compared once they landed, written and read.
        more = rng.permutation(np.setdiff1d(np.arange(slots), dst_blocks))[:100]
        s = a.scatter("kv", grant, src_blocks[:100] * BLOCK, more * BLOCK, BLOCK, verify="crc32c")
        assert s.state == "Succeeded" and s.verified, s
        assert np.array_equal(theirs[more], mine[src_blocks[:100]])
        s = a.scatter("kv", read, back[:50] * BLOCK, more[:50] * BLOCK, BLOCK, op="read", verify="crc32c")
        assert s.verified, s
        with pytest.raises(conduit.InvalidArgument, match='verify must be "crc32c" or "none"'):
            a.scatter("kv", grant, [0], [0], BLOCK, verify="md5")
        b.revoke(grant.id)
        b.revoke(read.id)
    report("300 x 16 KiB blocks at random slots written node-a -> node-b, 200 read back, byte-exact; "
           "100 written and 50 read back verified")


def test_a_bad_block_table_is_refused_naming_the_op(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    with a.allocate("kv", REGION) as src, b.allocate("kv", REGION) as dst:
        src.numpy()[:] = 7
        grant = b.grant("kv", "write", ttl_seconds=600)
        with pytest.raises(conduit.InvalidArgument, match=r"ops\[1\] overlaps ops\[0\] in the target"):
            a.scatter("kv", grant, [0, BLOCK], [0, 100], BLOCK)
        with pytest.raises(conduit.InvalidArgument, match=r"ops\[2\]: target"):
            a.scatter("kv", grant, [0, BLOCK, 2 * BLOCK], [0, BLOCK, REGION], BLOCK)
        with pytest.raises(conduit.InvalidArgument, match="source_offsets\\[1\\] is negative"):
            a.scatter("kv", grant, [0, -BLOCK], [0, BLOCK], BLOCK)
        with pytest.raises(conduit.InvalidArgument, match="2 source offsets but 3 target offsets"):
            a.scatter("kv", grant, [0, BLOCK], [0, BLOCK, 2 * BLOCK], BLOCK)
        with pytest.raises(conduit.InvalidArgument, match="must be a non-empty 1-D sequence of integers"):
            a.scatter("kv", grant, [0.5], [0], BLOCK)
        assert not dst.numpy().any(), "a refused table sent bytes"
        b.revoke(grant.id)
        with pytest.raises(conduit.ConduitError):
            a.scatter("kv", grant, [0], [0], BLOCK)
        assert not dst.numpy().any(), "a write through a revoked grant landed"
