"""A reshard plan as an agent answers it (POST /v1/reshard/plans, docs/reshard.md): per (source rank, target
rank) pair the scatter batches that fill the target's tensors from the source's, the bytes each rank's link
carries, the busiest link and the plan's lower bound.

    plan = agent.plan_reshard(trainer_manifests, inference_manifests)
    for b in plan.batches:
        ops = b.ops_array()        # (n, 6) uint64: source offset, target offset, length, count, strides
        runs = b.runs_array()      # (runs, 3) uint64: each op's runs, source offset, target offset, length

A piece of a tensor split by columns (on either side) is one strided op: COUNT runs of LENGTH bytes, run k at
source offset + k * source stride and target offset + k * target stride (docs/reshard.md); count 1 is one run.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

__all__ = ["MAX_SCATTER_RUNS", "ReshardBatch", "ReshardLink", "ReshardPlan", "pack_ops", "unpack_ops"]

#: The most runs one scatter list takes (kMaxScatterRuns in api/include/conduit/api/transfer.h).
MAX_SCATTER_RUNS = 1 << 18

#: opsPacked's v2 header (strided ops): "COPS" and the little-endian uint32 2.
_V2_HEADER = b"COPS\x02\x00\x00\x00"


def unpack_ops(ops_packed: str) -> Any:
    """``opsPacked`` (either layout) as a numpy (n, 6) uint64 array: source offset, target offset, length,
    count, source stride, target stride (v1 ops: count 1, strides 0)."""
    import numpy as np

    raw = base64.b64decode(ops_packed)
    if len(raw) % 24 == len(_V2_HEADER):
        if raw[:len(_V2_HEADER)] != _V2_HEADER:
            raise ValueError("opsPacked: 8 bytes past whole 24-byte ops, but not the v2 header")
        return np.frombuffer(raw[len(_V2_HEADER):], dtype="<u8").reshape(-1, 6).astype(np.uint64)
    v1 = np.frombuffer(raw, dtype="<u8").reshape(-1, 3)
    out = np.zeros((len(v1), 6), dtype=np.uint64)
    out[:, :3] = v1
    out[:, 3] = 1
    return out


def pack_ops(ops: Any) -> str:
    """The inverse of :func:`unpack_ops`: (n, 6) ops as ``opsPacked``, v1 when every count is 1 (what every
    agent reads), else v2."""
    import numpy as np

    a = np.ascontiguousarray(np.asarray(ops, dtype=np.uint64).reshape(-1, 6))
    if (a[:, 3] == 1).all():
        return base64.b64encode(a[:, :3].astype("<u8").tobytes()).decode("ascii")
    return base64.b64encode(_V2_HEADER + a.astype("<u8").tobytes()).decode("ascii")


@dataclass(frozen=True)
class ReshardBatch:
    """The ops between source rank SOURCE's region and target rank TARGET's (indices into the lists planned),
    BYTES in all, OPS of them making RUNS runs, packed as POST /v1/transfers's ``opsPacked`` takes them
    (OPS_PACKED, as sent)."""

    source: int
    target: int
    bytes: int
    ops: int
    ops_packed: str
    runs: int = 0

    def ops_list(self) -> list[tuple[int, int, int, int, int, int]]:
        """The ops as (source offset, target offset, length, count, source stride, target stride), offsets
        relative to the two regions."""
        return [tuple(int(v) for v in row) for row in self.ops_array()]  # type: ignore[misc]

    def ops_array(self) -> Any:
        """The ops as a numpy (n, 6) uint64 array (see :func:`unpack_ops`)."""
        return unpack_ops(self.ops_packed)

    def runs_array(self) -> Any:
        """Every op's runs in order as a numpy (runs, 3) uint64 array: source offset, target offset, length,
        as :meth:`conduit.Agent.scatter` takes its columns."""
        import numpy as np

        ops = self.ops_array()
        counts = ops[:, 3].astype(np.int64)
        which = np.repeat(np.arange(len(ops)), counts)
        k = (np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)).astype(np.uint64)
        out = np.empty((len(which), 3), dtype=np.uint64)
        out[:, 0] = ops[which, 0] + k * ops[which, 4]
        out[:, 1] = ops[which, 1] + k * ops[which, 5]
        out[:, 2] = ops[which, 2]
        return out


@dataclass(frozen=True)
class ReshardLink:
    """A rank's link: SIDE ("source" or "target"), its INDEX, and the BYTES the plan puts on it."""

    side: str
    index: int
    bytes: int


@dataclass(frozen=True)
class ReshardPlan:
    """A plan: BATCHES by source, then target; SOURCE_BYTES and TARGET_BYTES per rank; the BUSIEST link (the
    most bytes); LOWER_BOUND_SECONDS (the largest bytes / rate over the links whose rate was given, None when
    none was); FINGERPRINT (SHA-256 of the tensor tables and rates); CACHED (the agent had made it before)."""

    batches: tuple[ReshardBatch, ...]
    source_bytes: tuple[int, ...]
    target_bytes: tuple[int, ...]
    busiest: ReshardLink
    lower_bound_seconds: float | None
    fingerprint: str
    cached: bool

    @property
    def ops(self) -> int:
        return sum(b.ops for b in self.batches)

    @property
    def runs(self) -> int:
        return sum(b.runs for b in self.batches)

    @classmethod
    def from_json(cls, j: dict[str, Any]) -> ReshardPlan:
        busiest = j["busiest"]
        return cls(
            batches=tuple(ReshardBatch(b["source"], b["target"], b["bytes"], b["ops"], b["opsPacked"],
                                       b.get("runs", b["ops"]))
                          for b in j["batches"]),
            source_bytes=tuple(s["bytes"] for s in j["sources"]),
            target_bytes=tuple(t["bytes"] for t in j["targets"]),
            busiest=ReshardLink(busiest["side"], busiest["index"], busiest["bytes"]),
            lower_bound_seconds=j.get("lowerBoundSeconds"),
            fingerprint=j["fingerprint"],
            cached=bool(j["cached"]),
        )
