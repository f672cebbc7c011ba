"""Resharding N -> M with the SDK (conduit.reshard, docs/reshard.md) between real agents: trainer ranks' shards
as regions with placed manifests, inference ranks' regions in another layout, every target byte compared with
the whole tensors sliced the target's way (numpy references), one version for the whole target group, refusals
before a byte moves, and a step resumed after a source agent was lost."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

import conduit
from conduit.placement import Replicate, Shard, placed, shard_state_dict
from conduit.reshard import Resharder, ReshardFailed, reshard
from conduit.tensors import layout, pack, views

torch = pytest.importorskip("torch")


def model(seed: int, layers: int = 2) -> dict[str, Any]:
    """Whole tensors of a small transformer-ish model: bf16 matrices (one with prime dims), f32 norms, an i8
    table, a 0-d scale and a 1-d bias."""
    g = torch.Generator().manual_seed(seed)
    out: dict[str, Any] = {}
    for i in range(layers):
        p = f"layers.{i}."
        out[p + "attn.qkv.weight"] = torch.randn(48, 16, generator=g).to(torch.bfloat16)
        out[p + "attn.out.weight"] = torch.randn(16, 32, generator=g).to(torch.bfloat16)
        out[p + "mlp.up.weight"] = torch.randn(7, 13, generator=g)  # prime dims, uneven shards
        out[p + "mlp.down.bias"] = torch.randn(13, generator=g)
        out[p + "norm.weight"] = torch.randn(16, generator=g)
        out[p + "scale"] = torch.randn((), generator=g)
    out["embed.table"] = torch.randint(-100, 100, (10, 8), generator=g, dtype=torch.int8)
    return out


Layout = Callable[[str, Any], Sequence[Any]]  # (name, tensor) -> one placement per mesh dimension


def tp(dim_of: Callable[[str, Any], int | None]) -> Layout:
    """A tensor-parallel layout: Shard(dim_of(...)) where it says a dim, else Replicate()."""
    def placements(name: str, t: Any) -> list[Any]:
        d = dim_of(name, t)
        return [Replicate() if d is None or t.dim() == 0 else Shard(d)]
    return placements


ROWS = tp(lambda n, t: 0 if t.dim() >= 1 else None)
COLUMNS = tp(lambda n, t: 1 if t.dim() == 2 else (0 if t.dim() == 1 else None))


def make_ranks(agents: Sequence[conduit.Agent], prefix: str, state: dict[str, Any], mesh: Sequence[int],
               layout_of: Layout, *, fill: bool, keep: list[Any], names: Callable[[str], bool] = lambda n: True,
               ) -> list[tuple[conduit.Agent, str]]:
    """One region per rank of MESH (row-major coordinates), rank i on AGENTS[i % len], holding STATE's tensors
    (those NAMES selects) laid out by LAYOUT_OF: filled with the shards (FILL) or zero."""
    coords = list(np.ndindex(*mesh))
    out = []
    for rank, coordinate in enumerate(coords):
        chosen = {n: t for n, t in state.items() if names(n)}
        local, where = shard_state_dict(chosen, mesh, lambda n: layout_of(n, chosen[n]), coordinate)
        m, nbytes = layout(local)
        m = placed(m, where)
        agent = agents[rank % len(agents)]
        name = f"{prefix}{rank}"
        buf = agent.allocate(name, max(nbytes, 1))
        keep.append(buf)
        if fill:
            pack(local, buf, m)
        agent.set_manifest(name, m)
        out.append((agent, name))
    return out


def check_targets(targets: Sequence[tuple[conduit.Agent, str]], state: dict[str, Any], mesh: Sequence[int],
                  layout_of: Layout, keep: Sequence[Any]) -> int:
    """Every target tensor equals the whole tensor sliced the target's way; returns the bytes compared."""
    compared = 0
    buffers = {b.name: b for b in keep}
    for (agent, name), coordinate in zip(targets, np.ndindex(*mesh), strict=True):
        m = agent.manifest(name)
        got = views(buffers[name], m, "torch")
        local, _ = shard_state_dict(state, mesh, lambda n: layout_of(n, state[n]), coordinate)
        for t in m.tensors:
            assert torch.equal(got[t.name], local[t.name]), f"{name}: {t.name} differs from the reference"
            compared += t.length
    return compared


def case(nodes: Callable[..., list[conduit.Agent]], src_mesh: Sequence[int], src: Layout, dst_mesh: Sequence[int],
         dst: Layout, report: Callable[[str], None], what: str, **kw: Any) -> None:
    a, b = nodes("node-a", "node-b")
    state = model(0)
    keep: list[Any] = []
    try:
        sources = make_ranks([a], "src", state, src_mesh, src, fill=True, keep=keep, **kw)
        targets = make_ranks([b], "dst", state, dst_mesh, dst, fill=False, keep=keep)
        result = reshard(sources, targets, timeout=60)
        assert result.version == 1
        assert {agent.version(name).version for agent, name in targets} == {1}
        compared = check_targets(targets, state, dst_mesh, dst, keep)
        report(f"{what}: {len(result.plan.batches)} batches, {compared} target bytes equal to the reference")
    finally:
        for buf in keep:
            buf.close()


def test_tp4_rows_to_tp2_times_2_replicas(nodes: Callable[..., list[conduit.Agent]],
                                          report: Callable[[str], None]) -> None:
    case(nodes, (4,), ROWS, (2, 2), lambda n, t: [Replicate(), *ROWS(n, t)], report, "TP4 rows -> TP2 x 2")


def test_tp4_columns_to_tp2_rows(nodes: Callable[..., list[conduit.Agent]], report: Callable[[str], None]) -> None:
    case(nodes, (4,), COLUMNS, (2,), ROWS, report, "TP4 columns -> TP2 rows")


def test_fsdp_dim0_uneven_to_tp2_columns(nodes: Callable[..., list[conduit.Agent]],
                                         report: Callable[[str], None]) -> None:
    # 3 ranks: 7 rows shard 3/3/1, 13 as 5/5/3, 16 as 6/6/4, 10 as 4/4/2 (torch.chunk's uneven last shards).
    case(nodes, (3,), ROWS, (2,), COLUMNS, report, "FSDP dim-0 over 3 (uneven) -> TP2 columns")


def test_replicated_to_sharded(nodes: Callable[..., list[conduit.Agent]], report: Callable[[str], None]) -> None:
    case(nodes, (2,), lambda n, t: [Replicate()], (4,), COLUMNS, report, "2 whole replicas -> TP4 columns")


def test_pipeline_stages_to_tp2(nodes: Callable[..., list[conduit.Agent]], report: Callable[[str], None]) -> None:
    a, b = nodes("node-a", "node-b")
    state = model(1)
    keep: list[Any] = []
    try:
        whole = lambda n, t: [Replicate()]  # noqa: E731 -- each stage holds its layers whole
        stage0 = make_ranks([a], "pp0-", state, (1,), whole, fill=True, keep=keep,
                            names=lambda n: n.startswith("layers.0.") or n.startswith("embed"))
        stage1 = make_ranks([a], "pp1-", state, (1,), whole, fill=True, keep=keep,
                            names=lambda n: n.startswith("layers.1."))
        targets = make_ranks([b], "dst", state, (2,), ROWS, fill=False, keep=keep)
        result = reshard(stage0 + stage1, targets, timeout=60)
        assert {bt.source for bt in result.batches} == {0, 1}, "both stages send"
        compared = check_targets(targets, state, (2,), ROWS, keep)
        report(f"PP2 stages -> TP2 rows: {compared} target bytes equal to the reference")
    finally:
        for buf in keep:
            buf.close()


def test_column_splits_move_as_strided_ops_posted_in_parts_and_land_as_numpy_says(
        nodes: Callable[..., list[conduit.Agent]], monkeypatch: pytest.MonkeyPatch,
        report: Callable[[str], None]) -> None:
    """TP4 by columns -> TP3 by columns (uneven), and a 3-d tensor split on its middle dimension 4 -> 3: every
    piece one strided op (a run per row), the batches posted an op at a time (the split the SDK makes of a
    batch past one body), every target byte what numpy slices out of the whole."""
    a, b = nodes("node-a", "node-b")
    rng = np.random.default_rng(35)
    whole = {"w": rng.standard_normal((9, 22)).astype(np.float32),
             "cube": rng.integers(-100, 100, (3, 10, 5), dtype=np.int8)}
    state = {n: torch.from_numpy(t) for n, t in whole.items()}
    split = lambda n, t: [Shard(1)]  # noqa: E731 -- columns of w, the middle dimension of cube
    module = importlib.import_module("conduit.reshard")
    monkeypatch.setattr(module, "PACKED_BYTES_PER_POST", 48)  # one strided op a POST
    keep: list[Any] = []
    try:
        sources = make_ranks([a], "col-src", state, (4,), split, fill=True, keep=keep)
        targets = make_ranks([b], "col-dst", state, (3,), split, fill=False, keep=keep)
        result = reshard(sources, targets, timeout=60)
        plan = result.plan
        assert plan.ops < plan.runs, "column pieces go as strided ops"
        assert all(op[3] > 1 for bt in plan.batches for op in bt.ops_list()), plan.batches
        assert any(bt.ops > 1 for bt in plan.batches)
        assert all(len(module._parts(bt)) == bt.ops for bt in plan.batches), "each op posted alone"
        buffers = {buf.name: buf for buf in keep}
        for agent, name in targets:
            m = agent.manifest(name)
            got = views(buffers[name], m, "numpy")
            for t in m.tensors:
                box = tuple(slice(s, s + n) for s, n in zip(t.start, t.shape, strict=True))
                assert np.array_equal(got[t.name], whole[t.name][box]), f"{name}: {t.name}"
        report(f"TP4 -> TP3 columns, 3-d middle dim: {plan.ops} strided ops, {plan.runs} runs, "
               f"{len(plan.batches)} batches")
    finally:
        for buf in keep:
            buf.close()


def test_a_model_of_500_tensors_steps_twice_with_one_version_for_the_group(
        nodes: Callable[..., list[conduit.Agent]], report: Callable[[str], None]) -> None:
    a, b, c = nodes("node-a", "node-b", "node-c")
    state = model(2, layers=84)  # 6 tensors a layer: 505 tensors
    assert len(state) >= 500
    keep: list[Any] = []
    try:
        sources = make_ranks([a, b], "src", state, (4,), COLUMNS, fill=True, keep=keep)
        targets = make_ranks([c], "dst", state, (2,), ROWS, fill=False, keep=keep)
        with Resharder(sources, targets) as r:
            first = r.run(timeout=60)
            assert first.plan.cached is False
            # Step 2: the trainers' new values, the same layout: the plan comes from the planner's cache.
            state2 = model(3, layers=84)
            for buf, (agent, name), coordinate in zip(keep[:4], sources, np.ndindex(4), strict=True):
                local, _ = shard_state_dict(state2, (4,), lambda n: COLUMNS(n, state2[n]), coordinate)
                pack(local, buf, agent.manifest(name))
            second = r.run(timeout=60)
        assert (first.version, second.version) == (1, 2)
        assert second.plan.cached and second.plan.fingerprint == first.plan.fingerprint
        assert {agent.version(name).version for agent, name in targets} == {2}
        compared = check_targets(targets, state2, (2,), ROWS, keep[4:])
        report(f"505 tensors TP4 columns (2 agents) -> TP2 rows: {len(second.plan.batches)} batches, "
               f"{compared} bytes equal; step 1 {first.seconds:.3f} s, step 2 (cached plan) {second.seconds:.3f} s")
    finally:
        for buf in keep:
            buf.close()


def test_refusals_name_the_tensor_and_move_nothing(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    state = model(4)
    keep: list[Any] = []
    try:
        sources = make_ranks([a], "src", state, (2,), ROWS, fill=True, keep=keep)
        # A target whose norm is f16, not f32: refused naming it.
        wrong = {**state, "layers.0.norm.weight": state["layers.0.norm.weight"].to(torch.float16)}
        targets = make_ranks([b], "dtype", wrong, (2,), ROWS, fill=False, keep=keep)
        with pytest.raises(conduit.TensorMismatch, match=r"layers\.0\.norm\.weight"):
            reshard(sources, targets, timeout=30)
        # Another global shape.
        bigger = {**state, "embed.table": torch.zeros(12, 8, dtype=torch.int8)}
        targets = make_ranks([b], "shape", bigger, (2,), ROWS, fill=False, keep=keep)
        with pytest.raises(conduit.TensorMismatch, match=r"embed\.table"):
            reshard(sources, targets, timeout=30)
        # Incomplete coverage: only the first of the two source ranks.
        targets = make_ranks([b], "gap", state, (1,), lambda n, t: [Replicate()], fill=False, keep=keep)
        with pytest.raises(conduit.TensorMismatch, match=r"is held by no source"):
            reshard(sources[:1], targets, timeout=30)
        for agent, name in [(b, f"{p}{i}") for p in ("dtype", "shape") for i in range(2)] + [(b, "gap0")]:
            assert agent.version(name).version == 0, f"{name} moved"
            assert not any(views(next(x for x in keep if x.name == name), agent.manifest(name))[t].any()
                           for t in [x.name for x in agent.manifest(name).tensors]), f"{name} was written"
    finally:
        for buf in keep:
            buf.close()


def test_a_lost_source_agent_leaves_every_target_on_the_old_version_and_the_step_resumes(
        nodes: Callable[..., list[conduit.Agent]], agents: Any, report: Callable[[str], None]) -> None:
    a, b, c = nodes("node-a", "node-b", "node-c")
    state = model(5)
    keep: list[Any] = []
    try:
        sources = make_ranks([a, b], "src", state, (4,), ROWS, fill=True, keep=keep)
        targets = make_ranks([c], "dst", state, (2,), COLUMNS, fill=False, keep=keep)
        with Resharder(sources, targets, retries=1) as r:
            r.plan()  # planned while every source is there (by node-a's agent)
            lost = agents["node-b"]
            lost.kill()  # ranks 1 and 3: their batches cannot start
            with pytest.raises(ReshardFailed) as failed:
                r.run(timeout=30)
            assert {s for s, _, _ in failed.value.failed} == {1, 3}
            assert {agent.version(name).version for agent, name in targets} == {0}, "no target moved"
            # The agent back, its ranks' shards shared again: only the batches that did not land are sent.
            lost.restart()
            b2 = conduit.Agent(lost.url, token_file=agents.token_file, import_socket=lost.socket)
            for rank in (1, 3):
                buf = b2.allocate(f"src{rank}", keep[rank].nbytes)
                buf.numpy()[:] = keep[rank].numpy()  # this process still maps the lost region's memory
                keep.append(buf)
                b2.set_manifest(f"src{rank}", _manifest_of(rank, state))
            r.sources[1] = (b2, "src1")
            r.sources[3] = (b2, "src3")
            sent_from_a = len(a.transfers())
            result = r.run(timeout=30)
            assert len(a.transfers()) == sent_from_a, "node-a's batches, which landed, were sent again"
        assert result.version == 1
        compared = check_targets(targets, state, (2,), COLUMNS, keep)
        report(f"node-b lost mid-step: no target moved; after its restart only ranks 1 and 3 were sent; "
               f"{compared} bytes equal")
    finally:
        for buf in keep:
            buf.close()


def _manifest_of(rank: int, state: dict[str, Any]) -> conduit.Manifest:
    local, where = shard_state_dict(state, (4,), lambda n: ROWS(n, state[n]), (rank,))
    m, _ = layout(local)
    return placed(m, where)
