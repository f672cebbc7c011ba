"""A reshard plan as an agent answers it (POST /v1/reshard/plans, docs/reshard.md): per (source rank, target
rank) pair the scatter batches that fill the target's tensors from the source's, the bytes each rank's link
carries, the busiest link and the plan's lower bound.

    plan = agent.plan_reshard(trainer_manifests, inference_manifests)
    for b in plan.batches:
        ops = b.ops_array()        # (n, 3) uint64: source offset, target offset, length
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

__all__ = ["ReshardBatch", "ReshardLink", "ReshardPlan"]


@dataclass(frozen=True)
class ReshardBatch:
    """The ops between source rank SOURCE's region and target rank TARGET's (indices into the lists planned),
    BYTES in all, OPS of them, packed as POST /v1/transfers's ``opsPacked`` takes them (OPS_PACKED, as sent)."""

    source: int
    target: int
    bytes: int
    ops: int
    ops_packed: str

    def ops_list(self) -> list[tuple[int, int, int]]:
        """The ops as (source offset, target offset, length), offsets relative to the two regions."""
        raw = base64.b64decode(self.ops_packed)
        words = [int.from_bytes(raw[i:i + 8], "little") for i in range(0, len(raw), 8)]
        return [(words[i], words[i + 1], words[i + 2]) for i in range(0, len(words), 3)]

    def ops_array(self) -> Any:
        """The ops as a numpy (n, 3) uint64 array, as :meth:`conduit.Agent.scatter` takes its columns."""
        import numpy as np

        return np.frombuffer(base64.b64decode(self.ops_packed), dtype="<u8").reshape(-1, 3)


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

    @classmethod
    def from_json(cls, j: dict[str, Any]) -> ReshardPlan:
        busiest = j["busiest"]
        return cls(
            batches=tuple(ReshardBatch(b["source"], b["target"], b["bytes"], b["ops"], b["opsPacked"])
                          for b in j["batches"]),
            source_bytes=tuple(s["bytes"] for s in j["sources"]),
            target_bytes=tuple(t["bytes"] for t in j["targets"]),
            busiest=ReshardLink(busiest["side"], busiest["index"], busiest["bytes"]),
            lower_bound_seconds=j.get("lowerBoundSeconds"),
            fingerprint=j["fingerprint"],
            cached=bool(j["cached"]),
        )
