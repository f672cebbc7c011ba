"""`tensors=` and a TransferJob's `tensors:` move only the named tensors, into the same tensors of the target,
between real agents (and a real local-mode controller); a target whose manifest does not match is refused
naming the tensor before a byte moves (docs/tensors.md, "Subsets"). Verified by default (crc32c)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
from harness import LocalController

import conduit
from conduit import JobTarget, LocalJobs, Manifest, Target, TensorMismatch, TransferJob

KiB = 1024
SIZE = 16 * KiB


def model(head_dtype: str = "F32") -> Manifest:
    """Layer 0 (two 4 KiB tensors), layer 1, the head: back to back from 0."""
    tensors = [("model.layers.0.q.weight", "F32"), ("model.layers.0.k.weight", "F32"),
               ("model.layers.1.q.weight", "F32"), ("lm_head.weight", head_dtype)]
    return Manifest.from_json({"tensors": [
        {"name": name, "dtype": dtype, "shape": [1024 if dtype == "F32" else 2048], "offset": i * 4 * KiB,
         "length": 4 * KiB} for i, (name, dtype) in enumerate(tensors)]})


def fill(agent: conduit.Agent, name: str, seed: int, manifest: Manifest) -> tuple[conduit.SharedBuffer, np.ndarray]:
    buf = agent.allocate(name, SIZE)
    buf.numpy()[:] = np.random.default_rng(seed).integers(0, 256, SIZE, dtype=np.uint8)
    agent.set_manifest(name, manifest)
    return buf, buf.numpy().copy()


def test_only_the_named_tensors_change_in_the_target(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    src, src_bytes = fill(a, "model", 1, model())
    dst, before = fill(b, "model", 2, model())
    with src, dst:
        s = a.transfer("model", [Target(b, "model")], tensors=["model.layers.0.*", "lm_head.weight"]).wait(timeout=30)
        assert s.verified, "a subset is verified by default (crc32c)"
        after = dst.numpy()
        moved = np.r_[0:8 * KiB, 12 * KiB:16 * KiB]
        assert np.array_equal(after[moved], src_bytes[moved]), "the named tensors landed"
        assert np.array_equal(after[8 * KiB:12 * KiB], before[8 * KiB:12 * KiB]), "layer 1 kept its bytes"
        src.numpy()[8 * KiB:12 * KiB] = 0
        s = a.transfer("model", [Target(b, "model")], tensors=["model.layers.1.*"], verify="none").wait(timeout=30)
        assert not s.verified
        assert not dst.numpy()[8 * KiB:12 * KiB].any(), "layer 1 landed unverified"


def test_a_mismatching_target_is_refused_naming_the_tensor(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    src, _ = fill(a, "model", 1, model())
    dst, before = fill(b, "model", 2, model(head_dtype="F16"))
    with src, dst:
        with pytest.raises(TensorMismatch, match=r'"lm_head.weight" is F32 \[1024\] in the source but F16 \[2048\]'):
            a.transfer("model", [Target(b, "model")], tensors=["lm_head.weight"])
        with pytest.raises(TensorMismatch, match=r'"model.layers.9.\*" matches no tensor'):
            a.transfer("model", [Target(b, "model")], tensors=["model.layers.9.*"])
        assert np.array_equal(dst.numpy(), before), "not a byte moved"


def test_a_jobs_tensors_move_only_those_and_a_mismatch_fails_it(
        nodes: Callable[..., list[conduit.Agent]], local_controller: Callable[..., LocalController]) -> None:
    a, b = nodes("node-a", "node-b")
    jobs = LocalJobs(local_controller().jobs_dir)
    src, src_bytes = fill(a, "model", 1, model())
    dst, before = fill(b, "model", 2, model())
    odd, odd_before = fill(b, "odd", 3, model(head_dtype="F16"))
    with src, dst, odd:
        version = b.version("model").version
        # verify left out: crc32c, the CRD's default.
        jobs.apply(TransferJob("subset", source_node="node-a", source_region="model",
                               targets=[JobTarget("node-b", "model")], transport="tcp",
                               tensors=["model.layers.1.*"]))
        status = jobs.wait("subset", timeout=30)
        assert status["phase"] == "Succeeded", status
        assert status["bytesTotal"] == 4 * KiB, "the subset's bytes"
        assert b.version("model").version == version + 1, "readers waiting on the region see one new version"
        after = dst.numpy()
        assert np.array_equal(after[8 * KiB:12 * KiB], src_bytes[8 * KiB:12 * KiB])
        assert np.array_equal(np.r_[after[:8 * KiB], after[12 * KiB:]], np.r_[before[:8 * KiB], before[12 * KiB:]])

        jobs.apply(TransferJob("mismatch", source_node="node-a", source_region="model",
                               targets=[JobTarget("node-b", "odd")], transport="tcp", verify="none",
                               tensors=["model.layers.1.*", "lm_head.weight"]))
        with pytest.raises(conduit.TransferFailed) as failed:
            jobs.wait("mismatch", timeout=30)
        assert failed.value.reason == "TensorMismatch"
        assert '"lm_head.weight" is F32 [1024] in the source but F16 [2048] in the target' in failed.value.message
        assert np.array_equal(odd.numpy(), odd_before), "the target is unchanged"
