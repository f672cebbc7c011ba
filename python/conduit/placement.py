"""Where a rank's shard sits in the whole tensor, in DTensor's terms (docs/reshard.md, "Placement").

A manifest's tensor may carry a :class:`~conduit.manifest.Placement`: the global shape and where this rank's
slice starts (its extent is the tensor's own shape). This module makes them the way torch's DTensor does, from
a device mesh's shape, one placement per mesh dimension and this rank's coordinate in the mesh:

    mesh = (2, 2)                                   # 2 x 2 ranks: e.g. data parallel x tensor parallel
    box(global_shape=(4096, 1024), mesh=mesh, placements=[Replicate(), Shard(0)], coordinate=(1, 1))
    # -> start (2048, 0), shape (2048, 1024)

``Shard(d)`` splits dim d as ``torch.chunk`` does: chunks of ceil(n / ranks), the last ones smaller or empty
(uneven shards as DTensor makes them); several mesh dims sharding one tensor dim split it in mesh order.
``Replicate()`` keeps it whole. ``shard_state_dict`` slices whole tensors into one rank's shards and their
placements; ``dtensor_state_dict`` reads both off torch ``DTensor``s.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .manifest import Manifest, Placement

__all__ = ["Replicate", "Shard", "box", "dtensor_state_dict", "placed", "shard_state_dict"]


@dataclass(frozen=True)
class Shard:
    """Split tensor dim ``dim`` across a mesh dimension's ranks (DTensor's ``Shard(dim)``)."""

    dim: int


@dataclass(frozen=True)
class Replicate:
    """Every rank of a mesh dimension holds the whole (DTensor's ``Replicate()``)."""


PlacementSpec = Shard | Replicate


def _chunk(size: int, ranks: int, rank: int) -> tuple[int, int]:
    """(offset, length) of RANK's piece of SIZE elements split as torch.chunk splits them."""
    full = -(-size // ranks) if size else 0
    start = min(size, full * rank)
    return start, max(0, min(size, start + full) - start)


def box(global_shape: Sequence[int], mesh: Sequence[int], placements: Sequence[PlacementSpec],
        coordinate: Sequence[int]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """This rank's (start, shape) in a tensor of GLOBAL_SHAPE laid out over MESH (its shape) by PLACEMENTS (one
    per mesh dimension) at COORDINATE (this rank's index along each mesh dimension). ValueError naming what
    does not fit."""
    if not (len(mesh) == len(placements) == len(coordinate)):
        raise ValueError(f"mesh {list(mesh)}, placements {list(placements)} and coordinate {list(coordinate)} "
                         "must have one entry per mesh dimension")
    start = [0] * len(global_shape)
    shape = [int(n) for n in global_shape]
    for i, (ranks, p, c) in enumerate(zip(mesh, placements, coordinate, strict=True)):
        if ranks < 1 or not 0 <= c < ranks:
            raise ValueError(f"mesh dimension {i}: coordinate {c} is not one of its {ranks} ranks")
        if isinstance(p, Replicate):
            continue
        if not isinstance(p, Shard):
            raise ValueError(f"placements[{i}]: {p!r} is neither Shard(dim) nor Replicate()")
        d = p.dim + len(global_shape) if p.dim < 0 else p.dim
        if not 0 <= d < len(global_shape):
            raise ValueError(f"placements[{i}]: Shard({p.dim}) of a {len(global_shape)}-d tensor")
        offset, length = _chunk(shape[d], ranks, c)
        start[d] += offset
        shape[d] = length
    return tuple(start), tuple(shape)


def _slice(x: Any, start: Sequence[int], shape: Sequence[int]) -> Any:
    index = tuple(slice(s, s + n) for s, n in zip(start, shape, strict=True))
    part = x[index]
    if "torch" in sys.modules and isinstance(part, sys.modules["torch"].Tensor):
        return part.contiguous()
    import numpy as np

    return np.ascontiguousarray(part)


def shard_state_dict(state_dict: Mapping[str, Any], mesh: Sequence[int],
                     placements: Sequence[PlacementSpec] | Mapping[str, Sequence[PlacementSpec]] |
                     Callable[[str], Sequence[PlacementSpec]],
                     coordinate: Sequence[int]) -> tuple[dict[str, Any], dict[str, Placement]]:
    """One rank's shards of STATE_DICT's whole tensors (numpy arrays or torch tensors; each a contiguous copy)
    and their placements. PLACEMENTS: one list for every tensor, a mapping by name, or a function of the name
    (a name missing from the mapping is replicated)."""
    local: dict[str, Any] = {}
    where: dict[str, Placement] = {}
    for name, x in state_dict.items():
        if callable(placements):
            ps = placements(name)
        elif isinstance(placements, Mapping):
            ps = placements.get(name, [Replicate()] * len(mesh))
        else:
            ps = placements
        start, shape = box(tuple(x.shape), mesh, ps, coordinate)
        local[name] = _slice(x, start, shape)
        where[name] = Placement(tuple(int(n) for n in x.shape), start)
    return local, where


def dtensor_state_dict(state_dict: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, Placement]]:
    """The local shards of a state_dict of torch ``DTensor``s (plain tensors are taken whole) and their
    placements, as DTensor computes them for this rank."""
    from torch.distributed.tensor import DTensor
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    local: dict[str, Any] = {}
    where: dict[str, Placement] = {}
    for name, t in state_dict.items():
        if isinstance(t, DTensor):
            shape, offset = compute_local_shape_and_global_offset(t.shape, t.device_mesh, t.placements)
            local[name] = t.to_local()
            if tuple(local[name].shape) != tuple(shape):
                raise ValueError(f"tensor {name!r}: its local shard is {list(local[name].shape)}, DTensor says "
                                 f"{list(shape)}")
            where[name] = Placement(tuple(int(n) for n in t.shape), tuple(int(o) for o in offset))
        else:
            local[name] = t
            where[name] = Placement(tuple(int(n) for n in t.shape), (0,) * t.dim())
    return local, where


def placed(manifest: Manifest, placements: Mapping[str, Placement]) -> Manifest:
    """MANIFEST with each named tensor's placement set (tensors not named keep theirs); ValueError naming a
    placement for a tensor the manifest lacks."""
    unknown = sorted(set(placements) - {t.name for t in manifest.tensors})
    if unknown:
        raise ValueError(f"placements for tensors the manifest does not hold: {', '.join(map(repr, unknown[:10]))}")
    tensors = [dataclasses.replace(t, placement=placements[t.name]) if t.name in placements else t
               for t in manifest.tensors]
    return dataclasses.replace(manifest, tensors=tensors)
