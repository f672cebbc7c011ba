"""A .safetensors file written by the real `safetensors` package, loaded by a real agent as a region whose
manifest is the file's header, and saved back by the agent as a file `safetensors.safe_open` reads bit for
bit (docs/tensors.md)."""

from __future__ import annotations

from pathlib import Path

import pytest
from harness import AgentPool

import conduit
from conduit import Manifest


def tensors_of_every_kind():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch", reason="torch is installed by the suite (tests/scenarios/requirements.txt)")
    g = torch.Generator().manual_seed(7)
    return {
        "model.embed_tokens.weight": torch.randn(64, 32, generator=g).to(torch.bfloat16),
        "model.layers.0.self_attn.q_proj.weight": torch.randn(32, 32, generator=g).to(torch.float16),
        "model.layers.0.mlp.down_proj.weight": torch.randn(16, 32, generator=g),
        "model.layers.0.mlp.scales": torch.randint(-128, 127, (48,), dtype=torch.int8, generator=g),
        "step": torch.tensor(1234, dtype=torch.int64),
        "empty": torch.zeros(0, 4),
    }


def test_a_safetensors_file_loads_as_a_region_and_saves_back_bit_for_bit(agents: AgentPool) -> None:
    from safetensors import safe_open
    from safetensors.torch import save_file
    import torch

    tensors = tensors_of_every_kind()
    h = agents.start("node-a", "--memory-cap", "256MiB")
    a = conduit.Agent(h.url, token_file=h.pool.token_file)
    save_file(tensors, str(h.data_dir / "model.safetensors"), metadata={"format": "pt"})

    region = a.load_region("model", "model.safetensors")
    manifest = a.manifest("model")
    assert region.raw["tensors"] == len(tensors)
    with safe_open(str(h.data_dir / "model.safetensors"), framework="pt") as f:
        assert f.metadata() == manifest.metadata
        for name in f.keys():
            spec = manifest.find(name)
            assert spec is not None, name
            sliced = f.get_slice(name)
            assert spec.dtype == sliced.get_dtype(), name
            assert list(spec.shape) == list(sliced.get_shape()), name
    assert region.bytes == manifest.data_bytes, "the region is the file's data section, nothing else"

    saved = a.save_region("model", "out/model.safetensors")
    assert saved["bytes"] == (h.data_dir / "out/model.safetensors").stat().st_size
    with safe_open(str(h.data_dir / "out/model.safetensors"), framework="pt") as f:
        assert set(f.keys()) == set(tensors)
        for name, t in tensors.items():
            got = f.get_tensor(name)
            assert got.dtype == t.dtype and got.shape == t.shape, name
            assert torch.equal(got.reshape(-1).view(torch.uint8), t.reshape(-1).view(torch.uint8)), \
                f"{name} differs"  # bit for bit: bf16 and f16 compared as their bytes


def test_a_lying_manifest_is_refused_naming_the_tensor_and_a_malformed_file_makes_no_region(
        agents: AgentPool, tmp_path: Path) -> None:
    h = agents.start("node-a", "--memory-cap", "256MiB")
    a = conduit.Agent(h.url, token_file=h.pool.token_file)
    m = Manifest.from_json({"tensors": [{"name": "w", "dtype": "F32", "shape": [4], "offset": 0, "length": 16}]})
    a.create_region("weights", 64, manifest=m)
    assert a.manifest("weights") == m
    lying = {"tensors": [{"name": "w", "dtype": "F32", "shape": [4], "offset": 0, "length": 16},
                         {"name": "v", "dtype": "F32", "shape": [4], "offset": 8, "length": 16}]}
    with pytest.raises(conduit.InvalidArgument, match=r"tensors\[1\] \(v\): starts at 8"):
        a.request("PUT", "/v1/regions/weights/manifest", lying)
    assert a.manifest("weights") == m, "nothing changed"

    (h.data_dir / "bad.safetensors").write_bytes((64).to_bytes(8, "little") + b"{}")
    with pytest.raises(conduit.InvalidArgument, match="past the end"):
        a.load_region("bad", "bad.safetensors")
    with pytest.raises(conduit.NotFound):
        a.region("bad")
