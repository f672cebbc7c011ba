"""Placements and reshard plans from the SDK (docs/reshard.md): a manifest's placements read, refused and
written as the agent's are (the .safetensors header byte for byte as the agent saves it), and
``Agent.plan_reshard`` against a real agent: TP4 columns to TP2 rows, every target byte checked against the
whole tensor sliced the target's way after the plan's ops are applied with numpy, the second call from the
agent's cache, a refusal naming the tensor and range."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from harness import AgentPool

import conduit
from conduit import Manifest, Placement, TensorSpec


def placed(name: str, dtype: str, shape: list[int], offset: int, length: int, global_shape: list[int],
           start: list[int]) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape, "offset": offset, "length": length,
            "placement": {"globalShape": global_shape, "start": start}}


def test_placements_read_and_refuse_as_the_agent_does() -> None:
    # The cases of tests/api/manifest_test.cpp (Placement.*), with the agent's messages.
    body = {"tensors": [placed("w", "F32", [2, 3], 0, 24, [6, 3], [2, 0]),
                        {"name": "norm", "dtype": "BF16", "shape": [4], "offset": 24, "length": 8}],
            "metadata": {}}
    m = Manifest.from_json(body, 32)
    assert m.tensors[0].placement == Placement((6, 3), (2, 0))
    assert m.tensors[0].global_shape == (6, 3) and m.tensors[0].start == (2, 0)
    assert m.tensors[1].placement is None and m.tensors[1].global_shape == (4,) and m.tensors[1].start == (0,)
    assert m.to_json() == body and Manifest.from_json(json.loads(json.dumps(m.to_json()))) == m
    cases = [
        (placed("w", "F32", [2, 3], 0, 24, [6], [2, 0]),
         "tensors[0] (w): placement: globalShape [6] and start [2,0] must have as many dimensions as shape [2,3]"),
        (placed("w", "F32", [2, 3], 0, 24, [6, 3], [5, 0]),
         "tensors[0] (w): placement: start [5,0] + shape [2,3] passes globalShape [6,3] in dimension 0"),
        (placed("w", "F32", [2, 3], 0, 24, [6, 2], [0, 0]), "in dimension 1"),
        (placed("p", "F4", [2], 0, 1, [4], [2]),
         "tensors[0] (p): placement: a F4 tensor is placed only whole (its elements share bytes)"),
        (placed("w", "F64", [1, 1], 0, 8, [1 << 40, 1 << 40], [0, 0]),
         "placement: globalShape: shape overflows 64 bits"),
        ({**placed("w", "F32", [1], 0, 4, [1], [0]), "placement": {"globalShape": [1], "start": [0], "mesh": 1}},
         "tensors[0].placement.mesh: unknown field"),
        ({**placed("w", "F32", [1], 0, 4, [1], [0]), "placement": {"globalShape": [1]}},
         "tensors[0].placement.start: is required"),
        (placed("w", "F32", [1], 0, 4, [2], [-1]),
         "tensors[0].placement.start: each dimension must be an integer in [0, 2^63)"),
        ({**placed("w", "F32", [1], 0, 4, [1], [0]), "placement": []}, "tensors[0].placement: must be an object"),
    ]
    for tensor, says in cases:
        with pytest.raises(ValueError) as e:
            Manifest.from_json({"tensors": [tensor]}, 64)
        assert says in str(e.value), f"{tensor}: {e.value}"
    assert Manifest.from_json({"tensors": [placed("p", "F4", [2], 0, 1, [2], [0])]}, 1)
    with pytest.raises(ValueError, match="metadata.conduit.placement: the key is reserved"):
        Manifest.from_json({"tensors": [], "metadata": {"conduit.placement": "{}"}})


def test_the_safetensors_header_carries_placements_as_the_agent_writes_it(
        nodes: Callable[..., list[conduit.Agent]], agents: AgentPool) -> None:
    m = Manifest((TensorSpec("w", "F32", (2, 3), 0, 24, Placement((6, 3), (2, 0))),
                  TensorSpec("norm", "BF16", (4,), 24, 8)), {"format": "pt"})
    header = m.safetensors_header()
    doc = json.loads(header)
    assert doc["__metadata__"]["conduit.placement"] == '{"w":{"globalShape":[6,3],"start":[2,0]}}'
    assert doc["w"]["shape"] == [2, 3], "the file's shape is the slice's"

    (a,) = nodes("node-a")
    a.create_region("shard", m.data_bytes, manifest=m)
    a.save_region("shard", "shard.safetensors")
    saved = (agents["node-a"].data_dir / "shard.safetensors").read_bytes()
    size = int.from_bytes(saved[:8], "little")
    assert saved[8:8 + size] == header, "the agent's header, byte for byte"
    # Loaded back, the region's manifest has the placements again, and the key is not in its metadata.
    a.load_region("again", "shard.safetensors")
    assert a.manifest("again") == m


def column_shards(name: str, dtype: str, rows: int, cols: int, ranks: int) -> list[Manifest]:
    size = conduit.manifest.DTYPES[dtype].bits // 8
    width = cols // ranks
    return [Manifest((TensorSpec(name, dtype, (rows, width), 0, rows * width * size,
                                 Placement((rows, cols), (0, r * width))),)) for r in range(ranks)]


def row_shards(name: str, dtype: str, rows: int, cols: int, ranks: int) -> list[Manifest]:
    size = conduit.manifest.DTYPES[dtype].bits // 8
    height = rows // ranks
    return [Manifest((TensorSpec(name, dtype, (height, cols), 0, height * cols * size,
                                 Placement((rows, cols), (r * height, 0))),)) for r in range(ranks)]


def test_plan_reshard_moves_every_byte_and_comes_from_the_cache_the_second_time(
        nodes: Callable[..., list[conduit.Agent]]) -> None:
    (a,) = nodes("node-a")
    whole = np.random.default_rng(3).standard_normal((8, 12)).astype(np.float32)
    sources = column_shards("model.layers.0.mlp.down_proj.weight", "F32", 8, 12, 4)   # TP4 by columns
    targets = row_shards("model.layers.0.mlp.down_proj.weight", "F32", 8, 12, 2)      # TP2 by rows

    plan = a.plan_reshard(sources, targets, rates=([1e9] * 4, [None, None]))
    assert not plan.cached and len(plan.fingerprint) == 64
    assert plan.source_bytes == (96,) * 4 and plan.target_bytes == (192, 192)
    assert plan.busiest == conduit.reshard_plan.ReshardLink("target", 0, 192)
    assert plan.lower_bound_seconds == pytest.approx(96 / 1e9)
    # Applied with numpy: each source region its columns of the whole, each target region written by the ops.
    regions = [np.ascontiguousarray(whole[:, r * 3:(r + 1) * 3]).view(np.uint8).reshape(-1) for r in range(4)]
    landed = [np.zeros(4 * 12 * 4, dtype=np.uint8) for _ in range(2)]
    for b in plan.batches:
        assert b.ops == len(b.ops_list()) == len(b.ops_array())
        # A source's 3 columns of a target's 4 rows: one strided op of a run per row.
        assert b.ops_list() == [(0 if b.target == 0 else 4 * 3 * 4, b.source * 3 * 4, 3 * 4, 4, 3 * 4, 12 * 4)]
        assert b.runs == len(b.runs_array()) == 4
        for s, t, n in b.runs_array().tolist():
            landed[b.target][t:t + n] = regions[b.source][s:s + n]
    for r in range(2):
        assert np.array_equal(landed[r].view(np.float32).reshape(4, 12), whole[r * 4:(r + 1) * 4]), r

    again = a.plan_reshard(sources, targets, rates=([1e9] * 4, [None, None]))
    assert again.cached and again.batches == plan.batches and again.fingerprint == plan.fingerprint
    assert not a.plan_reshard(sources, targets).cached, "other rates, another plan"


def test_plan_reshard_refuses_naming_the_tensor_and_the_range(nodes: Callable[..., list[conduit.Agent]]) -> None:
    (a,) = nodes("node-a")
    sources = column_shards("w", "BF16", 8, 16, 4)[:2]          # columns [0, 8) only
    with pytest.raises(conduit.InvalidArgument, match=r'tensor "w" of targets\[0\]: \[0:4, 8:16\] is held by no '
                                                      r"source"):
        a.plan_reshard(sources, row_shards("w", "BF16", 8, 16, 2))
    with pytest.raises(conduit.InvalidArgument, match=r'tensor "w" is BF16 \[8,16\] in sources\[0\] but F32 \[8,16\] '
                                                      r"in targets\[0\]"):
        a.plan_reshard(sources, row_shards("w", "F32", 8, 16, 2))
    with pytest.raises(ValueError, match="rates: 1 sources rates for 2 sources"):
        a.plan_reshard(sources, row_shards("w", "BF16", 8, 16, 2), rates=([1.0], []))
