"""Named tensors (conduit.tensors, conduit.manifest): a state_dict laid out in one buffer, packed once, seen as
zero-copy views and applied to a model in place; a manifest that reads and refuses as the agent's does; and a
layout that is what safetensors writes, proved by opening our buffer with safetensors itself."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import conduit
from conduit import Manifest, Target, TensorSpec
from conduit.tensors import adopt, apply, layout, pack, views

PYTHON_DIR = Path(__file__).resolve().parents[3] / "python"


def importorskip_torch() -> Any:
    return pytest.importorskip("torch", reason="torch is not installed (tests/scenarios/requirements.txt pins it)")


def numpy_state() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {
        "model.embed.weight": rng.standard_normal((7, 5)).astype(np.float32),
        "model.norm.weight": rng.standard_normal(9).astype(np.float16),
        "model.scale": np.array(2.5, dtype=np.float64),                   # 0-d
        "model.mask": rng.integers(0, 2, 11).astype(bool),
        "model.q": rng.integers(-128, 128, (3, 3), dtype=np.int8),
        "model.ids": rng.integers(0, 1 << 40, 5, dtype=np.int64),
        "model.none": np.zeros((0, 4), dtype=np.float32),                 # empty
        "model.transposed": rng.standard_normal((4, 6)).astype(np.float32).T,   # not contiguous
    }


def spec(m: Manifest, name: str) -> TensorSpec:
    found = m.find(name)
    assert found is not None, f"{name} is not in the manifest"
    return found


def assert_back_to_back_and_aligned(m: Manifest, nbytes: int) -> None:
    end = 0
    for t in m.tensors:
        assert t.offset == end, f"{t.name} starts at {t.offset}, the tensor before it ends at {end}"
        assert t.offset % max(1, conduit.manifest.DTYPES[t.dtype].bits // 8) == 0, f"{t.name} is not aligned"
        end = t.offset + t.length
    assert end == nbytes == m.data_bytes


def test_numpy_state_dict_round_trips_through_one_buffer() -> None:
    state = numpy_state()
    m, nbytes = layout(state, metadata={"format": "np"})
    assert_back_to_back_and_aligned(m, nbytes)
    assert [t.dtype for t in m.tensors] == ["I64", "F64", "F32", "F32", "F32", "F16", "I8", "BOOL"], \
        "widest dtype first, then by name"
    assert m.find("model.scale") == TensorSpec("model.scale", "F64", (), 40, 8)
    assert m.find("model.none") == TensorSpec("model.none", "F32", (0, 4), 188, 0)

    buf = bytearray(nbytes)
    pack(state, buf, m)
    got = views(buf, m)
    assert list(got) == [t.name for t in m.tensors]
    raw = np.frombuffer(buf, dtype=np.uint8)
    for name, x in state.items():
        v = got[name]
        assert v.dtype == x.dtype and v.shape == x.shape and np.array_equal(v, x), name
        assert v.size == 0 or np.shares_memory(v, raw), f"{name}'s view is a copy"
    got["model.q"][0, 0] = 99  # a write through a view is a write of the buffer
    assert np.frombuffer(buf, np.int8)[spec(m, "model.q").offset] == 99

    # Into arrays of another dict, in place.
    target = {k: np.zeros_like(x, order="C") for k, x in state.items()}
    where = {k: x.__array_interface__["data"][0] for k, x in target.items()}
    assert apply(got, target) == list(got)
    for name, x in target.items():
        assert x.__array_interface__["data"][0] == where[name], f"{name} was replaced, not written"
        assert np.array_equal(x, got[name]), name


def test_torch_tensors_of_each_dtype_round_trip() -> None:
    torch = importorskip_torch()
    g = torch.Generator().manual_seed(3)
    state = {
        "bf16": torch.randn(5, 3, generator=g).to(torch.bfloat16),
        "f16": torch.randn(7, generator=g).to(torch.float16),
        "f32": torch.randn(2, 2, 2, generator=g),
        "i8": torch.randint(-128, 128, (13,), dtype=torch.int8, generator=g),
        "f8": torch.randn(6, generator=g).to(torch.float8_e4m3fn),
        "zero_d": torch.tensor(1.5, dtype=torch.bfloat16),
        "empty": torch.zeros(3, 0, dtype=torch.float16),
        "flag": torch.tensor([True, False, True]),
    }
    m, nbytes = layout(state)
    assert_back_to_back_and_aligned(m, nbytes)
    assert {t.name: t.dtype for t in m.tensors} == {"bf16": "BF16", "f16": "F16", "f32": "F32", "i8": "I8",
                                                  "f8": "F8_E4M3", "zero_d": "BF16", "empty": "F16",
                                                  "flag": "BOOL"}
    arena = np.empty(nbytes, np.uint8)
    for buffer in (torch.empty(nbytes, dtype=torch.uint8), bytearray(nbytes), arena):
        pack(state, buffer, m)
        got = views(buffer, m, "torch")
        for name, x in state.items():
            assert same_bits(got[name], x), f"{name} in a {type(buffer).__name__}"
    # numpy has no bfloat16 or float8: its views hold the raw bits.
    raw = views(arena, m, "numpy")
    assert raw["bf16"].dtype == np.uint16 and raw["bf16"].shape == (5, 3)
    assert raw["f8"].dtype == np.uint8 and raw["zero_d"].shape == ()
    assert np.array_equal(raw["bf16"], state["bf16"].view(torch.int16).numpy().view(np.uint16))
    assert raw["f16"].dtype == np.float16 and np.array_equal(raw["f16"], state["f16"].numpy())
    # And a numpy array packed as BF16 is taken as its bits: the same bytes again.
    again = bytearray(nbytes)
    pack({**state, "bf16": raw["bf16"].copy()}, again, m)
    assert bytes(again) == arena.tobytes()


def same_bits(a: Any, b: Any) -> bool:
    """Same dtype, shape and bytes (torch.equal has no float8 on the CPU, and NaN != NaN)."""
    u8 = importorskip_torch().uint8
    return bool(a.dtype == b.dtype and a.shape == b.shape and a.reshape(-1).view(u8).equal(b.reshape(-1).view(u8)))


def model(seed: int) -> Any:
    """300 parameters of three dtypes (149 Linear layers and a LayerNorm), a 0-d buffer and an empty one."""
    torch = importorskip_torch()
    torch.manual_seed(seed)
    m = torch.nn.Module()
    m.layers = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(149))
    m.norm = torch.nn.LayerNorm(8)
    for i, layer in enumerate(m.layers):
        layer.to((torch.float32, torch.bfloat16, torch.float16)[i % 3])
    m.register_buffer("step", torch.tensor(seed, dtype=torch.int64))
    m.register_buffer("codebook", torch.zeros(0, 8, dtype=torch.int8))
    return m


def test_a_300_parameter_module_is_applied_in_place(report: Callable[[str], None]) -> None:
    torch = importorskip_torch()
    trained, replica = model(1), model(2)
    assert len(list(replica.parameters())) == 300
    m, nbytes = layout(trained)
    arena = bytearray(nbytes)
    pack(trained, arena, m)

    params = dict(replica.named_parameters())
    ptrs = {n: t.data_ptr() for n, t in replica.state_dict(keep_vars=True).items()}
    applied = apply(views(arena, m, "torch"), replica)
    assert len(applied) == 302, "every parameter and buffer"
    after = replica.state_dict(keep_vars=True)
    for name, t in trained.state_dict().items():
        assert after[name].data_ptr() == ptrs[name], f"{name} was replaced, not written in place"
        assert torch.equal(after[name], t), f"{name} differs from the trained model's"
    for name, p in replica.named_parameters():
        assert p is params[name] and p.requires_grad, f"{name} is not the same Parameter"
    report(f"300 parameters ({nbytes} bytes, bf16/f16/f32) applied in place: same data_ptr, torch.equal")


def test_an_adopted_module_holds_the_buffer_and_apply_then_copies_nothing() -> None:
    torch = importorskip_torch()
    trained, replica = model(1), model(2)
    m, nbytes = layout(trained)
    arena = bytearray(nbytes)
    pack(trained, arena, m)
    params = dict(replica.named_parameters())
    other = torch.nn.Linear(3, 3)
    with pytest.raises(ValueError, match=r"nothing adopted: .*not in the state_dict"):
        adopt(views(arena, m, "torch"), other)
    with pytest.raises(TypeError, match="torch.nn.Module"):
        adopt(views(arena, m, "torch"), {})  # a state_dict's tensors cannot be rebound
    assert len(adopt(views(arena, m, "torch"), replica)) == 302
    base = views(arena, m, "torch")
    for name, t in replica.state_dict(keep_vars=True).items():
        assert t.data_ptr() == base[name].data_ptr(), f"{name} is not a view of the buffer"
        assert torch.equal(t, trained.state_dict()[name])
    for name, p in replica.named_parameters():
        assert p is params[name], f"{name} is not the same Parameter"
    # What lands in the buffer is what the module holds; apply over it checks and copies nothing.
    pack(model(3), arena, m)
    assert apply(views(arena, m, "torch"), replica) and all(
        torch.equal(t, model(3).state_dict()[n]) for n, t in replica.state_dict().items())


def test_tensors_selects_a_subset_by_name_or_glob() -> None:
    torch = importorskip_torch()
    trained, replica = model(1), model(2)
    m, nbytes = layout(trained)
    arena = torch.empty(nbytes, dtype=torch.uint8)
    pack(trained, arena, m)
    before = {n: t.clone() for n, t in replica.state_dict().items()}
    applied = apply(views(arena, m, "torch"), replica, tensors=["layers.1?.weight", "norm.*", "step"])
    chosen = {"step", "norm.weight", "norm.bias", *(f"layers.{i}.weight" for i in range(10, 20))}
    assert applied == [t.name for t in m.tensors if t.name in chosen], "the selected names, in the update's order"
    for name, t in replica.state_dict().items():
        assert torch.equal(t, trained.state_dict()[name] if name in applied else before[name]), name
    with pytest.raises(ValueError, match=r"'lm_head\.\*' select no tensor"):
        apply(views(arena, m, "torch"), replica, tensors="lm_head.*")


def test_a_mismatch_applies_nothing_and_names_the_tensor() -> None:
    torch = importorskip_torch()
    trained, replica = model(1), model(2)
    m, nbytes = layout(trained)
    arena = bytearray(nbytes)
    pack(trained, arena, m)
    replica.layers[7] = torch.nn.Linear(8, 9).to(torch.bfloat16)        # another shape (bf16, as layer 7 is)
    replica.layers[10] = torch.nn.Linear(8, 8).to(torch.float32)        # another dtype (layer 10 is bf16)
    before = {n: t.clone() for n, t in replica.state_dict().items()}
    with pytest.raises(ValueError) as e:
        apply(views(arena, m, "torch"), replica)
    text = str(e.value)
    assert text.startswith("nothing applied: 4 tensors do not match"), text
    assert "'layers.7.weight': shape [8, 8] in the update, [9, 8] in the state_dict" in text, text
    assert "'layers.10.bias': dtype torch.bfloat16 (BF16) in the update, torch.float32 (F32)" in text, text
    for name, t in replica.state_dict().items():
        assert torch.equal(t, before[name]), f"{name} was written although the apply was refused"

    # A name the model lacks; numpy's raw bits for a bf16 model.
    with pytest.raises(ValueError, match=r"'extra': not in the state_dict"):
        apply({**views(arena, m, "torch"), "extra": torch.zeros(1)}, model(3))
    with pytest.raises(ValueError, match=r"'layers.1.bias': dtype uint16 \(U16\).*raw bits"):
        apply(views(arena, m, "numpy"), model(3))

    # pack checks the same way and writes nothing.
    blank = bytearray(nbytes)
    with pytest.raises(ValueError, match=r"'layers.7.weight': shape \[9, 8\], the manifest's \[8, 8\]"):
        pack(replica, blank, m)
    assert blank == bytearray(nbytes)
    with pytest.raises(ValueError, match=r"'step': in the manifest, not in the state_dict"):
        pack({k: v for k, v in trained.state_dict().items() if k != "step"}, blank, m)
    last = [t for t in m.tensors if t.length][-1]
    with pytest.raises(ValueError, match=rf"tensors\[\d+\] \({last.name}\): bytes \[{last.offset}, \+{last.length}\) "
                                         rf"are outside the {nbytes - 1}-byte region"):
        views(bytearray(nbytes - 1), m, "torch")


def body(*tensors: dict[str, Any], metadata: dict[str, str] | None = None) -> dict[str, Any]:
    return {"tensors": list(tensors), **({"metadata": metadata} if metadata is not None else {})}


def tensor(name: str, dtype: str, shape: list[int], offset: int, length: int) -> dict[str, Any]:
    return {"name": name, "dtype": dtype, "shape": shape, "offset": offset, "length": length}


def test_the_manifest_reads_and_refuses_as_the_agent_does() -> None:
    # The cases of tests/api/manifest_test.cpp, so both ends agree.
    good = body(tensor("model.embed.weight", "F32", [2, 3], 0, 24), tensor("model.layers.0.norm", "BF16", [4], 24, 8),
                tensor("step", "I16", [], 32, 2), metadata={"format": "pt"})
    m = Manifest.from_json(good, 64)
    assert m.data_bytes == 34 and m.find("step") == TensorSpec("step", "I16", (), 32, 2)
    assert m.to_json() == good and Manifest.from_json(json.loads(json.dumps(m.to_json()))) == m
    cases = [
        ([tensor("a", "F32", [4], 0, 16), tensor("b", "F32", [4], 8, 16)], 64, "tensors[1] (b): starts at 8"),
        ([tensor("a", "F32", [4], 16, 16), tensor("b", "F32", [4], 0, 16)], 64, "tensors[1] (b)"),
        ([tensor("a", "F32", [8], 40, 32)], 64, "outside the 64-byte region"),
        ([tensor("a", "F16", [3], 0, 8)], 64, "is not what F16 [3] takes (6 bytes)"),
        ([tensor("a", "F17", [1], 0, 4)], 64, 'dtype "F17"'),
        ([tensor("a", "U8", [1], 0, 1), tensor("a", "U8", [1], 1, 1)], 64, "given twice"),
        ([tensor("__metadata__", "U8", [1], 0, 1)], 64, "reserved"),
        ([tensor("a", "F4", [3], 0, 1)], 64, "end mid-byte"),
        ([tensor("a", "F64", [1 << 40, 1 << 40], 0, 8)], 64, "overflows"),
        ([tensor("", "U8", [1], 0, 1)], 64, "tensors[0].name"),
        ([{**tensor("a", "U8", [1], 0, 1), "length": 1.0}], 64, "tensors[0].length: must be a non-negative integer"),
        ([{**tensor("a", "U8", [1], 0, 1), "stride": 1}], 64, "tensors[0].stride: unknown field"),
    ]
    for tensors, region, says in cases:
        with pytest.raises(ValueError) as e:
            Manifest.from_json(body(*tensors), region)
        assert says in str(e.value), f"{tensors}: {e.value}"
    with pytest.raises(ValueError, match="metadata.k: must be a string"):
        Manifest.from_json({"tensors": [], "metadata": {"k": 1}})
    ok = Manifest.from_json(body(tensor("none", "F32", [0, 7], 0, 0), tensor("packed", "F4", [6], 0, 3),
                                 tensor("flag", "BOOL", [1], 3, 1)), 4)
    assert [t.length for t in ok.tensors] == [0, 3, 1]
    assert conduit.manifest.dtype_bits("F6_E2M3") == 6 and conduit.manifest.dtype_bits("f32") is None
    with pytest.raises(ValueError, match="F4 packs elements into bytes"):
        views(bytearray(4), ok)


def safetensors_file(path: Path, header: bytes, data: bytes) -> Path:
    path.write_bytes(struct.pack("<Q", len(header)) + header + data)
    return path


def mixed_state() -> dict[str, Any]:
    torch = importorskip_torch()
    g = torch.Generator().manual_seed(11)
    return {
        "model.embed_tokens.weight": torch.randn(32, 16, generator=g).to(torch.bfloat16),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(16, 16, generator=g).to(torch.float16),
        "model.layers.0.mlp.up_proj.weight": torch.randn(24, 16, generator=g),
        "model.layers.0.mlp.up_proj.qweight": torch.randint(-128, 128, (24, 16), dtype=torch.int8, generator=g),
        "model.layers.0.input_layernorm.weight": torch.ones(16, dtype=torch.bfloat16),
        "model.rotary.inv_freq": torch.randn(8, generator=g, dtype=torch.float64),
        "model.position_ids": torch.arange(7, dtype=torch.int64),
        "model.temperature": torch.tensor(0.7),
        "model.unused": torch.zeros(0, 16, dtype=torch.float16),
        "model.mask": torch.tensor([True, False, True]),
    }


def test_the_layout_is_what_safetensors_save_file_writes(tmp_path: Path) -> None:
    importorskip_torch()
    safetensors_torch = pytest.importorskip("safetensors.torch")
    state = mixed_state()
    path = tmp_path / "model.safetensors"
    safetensors_torch.save_file(state, path)
    raw = path.read_bytes()
    (size,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + size])
    header.pop("__metadata__", None)
    theirs = {n: (h["dtype"], tuple(h["shape"]), tuple(h["data_offsets"])) for n, h in header.items()}

    m, nbytes = layout(state)
    ours = {t.name: (t.dtype, t.shape, (t.offset, t.offset + t.length)) for t in m.tensors}
    assert {n: v[:2] for n, v in ours.items()} == {n: v[:2] for n, v in theirs.items()}, "names, dtypes, shapes"
    # Our order is the serializer's own (dtype, widest first, then name), so the offsets agree too.
    assert ours == theirs
    assert nbytes == len(raw) - 8 - size


def test_a_packed_buffer_with_our_header_opens_in_safetensors(tmp_path: Path) -> None:
    safetensors = pytest.importorskip("safetensors")
    state = mixed_state()
    m, nbytes = layout(state, metadata={"format": "pt", "step": "1000"})
    arena = bytearray(nbytes)
    pack(state, arena, m)

    # The header written by hand from the manifest, as the format says: no help from the SDK.
    doc: dict[str, Any] = {"__metadata__": dict(m.metadata)}
    for t in m.tensors:
        doc[t.name] = {"dtype": t.dtype, "shape": list(t.shape), "data_offsets": [t.offset, t.offset + t.length]}
    text = json.dumps(doc).encode()
    text += b" " * (-len(text) % 8)
    for header, name in ((text, "by-hand.safetensors"), (m.safetensors_header(), "sdk.safetensors")):
        path = safetensors_file(tmp_path / name, header, bytes(arena))
        with safetensors.safe_open(os.fspath(path), framework="pt") as f:
            assert set(f.keys()) == set(state)
            assert f.metadata() == {"format": "pt", "step": "1000"}
            for n, x in state.items():
                got = f.get_tensor(n)
                assert same_bits(got, x), f"{n} read by safetensors from {name} differs"
    assert m.safetensors_header().startswith(b'{"__metadata__":{"format":"pt","step":"1000"},')
    assert len(m.safetensors_header()) % 8 == 0

    # Gaps (align) make a region that is not a file, and the header says where.
    wide, _ = layout(state, align=64)
    assert all(t.offset % 64 == 0 for t in wide.tensors)
    with pytest.raises(ValueError, match="after a gap from"):
        wide.safetensors_header()


def test_numpy_alone_never_imports_torch() -> None:
    script = """
import sys
sys.modules["torch"] = None  # as if torch were not installed
import numpy as np
from conduit.tensors import apply, layout, pack, views
state = {"w": np.arange(12, dtype=np.float32).reshape(3, 4), "b": np.array(7, dtype=np.int8)}
m, n = layout(state)
buf = bytearray(n)
pack(state, buf, m)
out = {"w": np.zeros((3, 4), np.float32), "b": np.zeros((), np.int8)}
apply(views(buf, m), out)
assert np.array_equal(out["w"], state["w"]) and out["b"] == 7
try:
    views(buf, m, "torch")
except ImportError as e:
    assert "need PyTorch" in str(e), e
else:
    raise AssertionError("torch views without torch")
print("ok")
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_views_over_shared_buffers_apply_what_a_transfer_moved(nodes: Callable[..., list[conduit.Agent]],
                                                                report: Callable[[str], None]) -> None:
    torch = importorskip_torch()
    a, b = nodes("node-a", "node-b")
    trained, replica = model(1), model(2)
    m, nbytes = layout(trained)
    with a.allocate("weights", nbytes) as src, b.allocate("weights", nbytes) as dst:
        pack(trained, src, m)
        a.transfer("weights", [Target(b, "weights")]).wait(timeout=30)
        received = views(dst, m, "torch")
        base = torch.frombuffer(dst.memoryview(), dtype=torch.uint8).data_ptr()
        assert received["layers.0.weight"].data_ptr() == base + spec(m, "layers.0.weight").offset, "a copy"
        apply(received, replica)
        del received  # before the buffers close: their pages stay mapped while a view uses them
    for name, t in trained.state_dict().items():
        assert torch.equal(replica.state_dict()[name], t), name
    report(f"a 300-parameter model packed into node-a's shared buffer, moved to node-b's ({nbytes} bytes), "
           "applied from views of it")


def test_plan_subset_moves_the_named_tensors_and_refuses_as_the_agents_planner() -> None:
    # The cases of tests/api/tensor_subset_test.cpp, so the SDK and the controller plan alike.
    def t(name: str, dtype: str, shape: list[int], offset: int, length: int) -> dict[str, object]:
        return {"name": name, "dtype": dtype, "shape": shape, "offset": offset, "length": length}

    def m(*tensors: dict[str, object]) -> Manifest:
        return Manifest.from_json({"tensors": list(tensors)})

    src = m(t("model.layers.0.q.weight", "F32", [4], 0, 16), t("model.layers.0.k.weight", "F32", [4], 16, 16),
            t("model.layers.1.q.weight", "F32", [4], 32, 16), t("model.none", "F32", [0], 48, 0),
            t("lm_head.weight", "BF16", [8], 48, 16))
    plan = conduit.manifest.plan_subset
    assert plan(src, src, ["model.layers.0.*", "lm_head.weight"]) == [(0, 0, 32), (48, 48, 16)]
    moved = m(t("lm_head.weight", "BF16", [8], 0, 16), t("model.layers.0.k.weight", "F32", [4], 64, 16),
              t("model.layers.0.q.weight", "F32", [4], 80, 16))
    assert plan(src, moved, ["model.layers.0.?.weight", "lm_head.weight"]) == [(0, 80, 16), (16, 64, 16),
                                                                               (48, 0, 16)]
    assert plan(src, src, ["model.none", "model.layers.[1]*"]) == [(32, 32, 16)], "empty tensors match, move nothing"
    other = m(t("lm_head.weight", "F16", [8], 0, 16), t("model.layers.0.q.weight", "F32", [2, 2], 16, 16))
    for target, patterns, says in [
            (src, [], "name at least one tensor"),
            (src, ["lm_head.weight", "x.*"], 'tensors[1]: "x.*" matches no tensor in the source'),
            (other, ["model.layers.1.*"], '"model.layers.1.q.weight" is not in the target'),
            (other, ["lm_head.weight"], '"lm_head.weight" is BF16 [8] in the source but F16 [8] in the target'),
            (other, ["model.layers.0.q.weight"], "is F32 [4] in the source but F32 [2,2] in the target"),
            (src, ["model.none"], "nothing to move")]:
        with pytest.raises(ValueError) as e:
            plan(src, target, patterns)
        assert says in str(e.value), (patterns, str(e.value))
