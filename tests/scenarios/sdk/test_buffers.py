"""Shared buffers: memory of the test process that is a region of a real agent, moved byte for byte and
shared without a copy in either direction."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from harness import AgentPool, MiB

import conduit
from conduit import Target


def random_bytes(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8)


@pytest.mark.parametrize("size", [1, 4095, MiB + 7])
def test_odd_sizes_arrive_byte_identical(nodes: Callable[..., list[conduit.Agent]], agents: AgentPool,
                                         size: int, report: Callable[[str], None]) -> None:
    a, b = nodes("node-a", "node-b")
    data = random_bytes(size, size)
    with a.allocate("src", size) as buf:
        assert buf.region is not None and buf.region.bytes == size and buf.region.source == "imported"
        buf.numpy()[:] = data
        b.create_region("dst", size)
        status = a.transfer("src", [Target(b, "dst")]).wait(timeout=30)
        assert status.state == "Succeeded" and status.bytes_done == size, status
        assert status.raw.get("verified") is True, status.raw

        # CRC32C per 4 KiB slice: a difference anywhere shows in its own slice.
        assert b.checksum("dst", slice=4096) == a.checksum("src", slice=4096)
        b.save_region("dst", "dst.bin")
        saved = (Path(agents["node-b"].data_dir) / "dst.bin").read_bytes()
        assert saved == data.tobytes(), f"node-b's bytes differ from the buffer's ({len(saved)} vs {size})"
        assert b.grants() == [], "the transfer's grant on node-b was not revoked after it ended"
    report(f"{size} bytes from a shared buffer on node-a == node-b's region (CRC32C per 4 KiB and saved bytes)")


def test_zero_copy_both_ways(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    n = 64 * 1024
    with a.allocate("shared", n) as buf:
        view = buf.numpy()
        before = a.checksum("shared", slice=4096)

        # A write through the view is what the agent reads: slice 3 (bytes 12288..16383) changes, only it.
        view[3 * 4096 + 17] ^= 0xFF
        after = a.checksum("shared", slice=4096)
        assert [i for i, (x, y) in enumerate(zip(before, after, strict=True)) if x != y] == [3]
        view[3 * 4096 + 17] ^= 0xFF
        assert a.checksum("shared", slice=4096) == before

        # Typed views share the same pages.
        buf.numpy(np.float32, (4, 16))[1, 0] = 1.0
        assert view[64:68].tobytes() == np.float32(1.0).tobytes()

        # Into the buffer: a transfer from node-b shows up in the view made before it, with no read.
        pattern = random_bytes(n, 7)
        with b.allocate("src", n) as src:
            src.numpy()[:] = pattern
            b.transfer("src", [Target(a, "shared")]).wait(timeout=30)
        assert np.array_equal(view, pattern), "the transfer into the shared buffer is not in its numpy view"


def test_close_deletes_the_region_and_views_stay_usable(nodes: Callable[..., list[conduit.Agent]]) -> None:
    (a,) = nodes("node-a")
    buf = a.allocate("temp", 8192)
    view = buf.numpy()
    view[:] = 5
    buf.close()
    assert buf.closed
    with pytest.raises(conduit.NotFound):
        a.region("temp")
    # The pages stay mapped while a view uses them (no crash, no reuse under the view).
    view[0] = 6
    assert int(view.sum()) == 5 * 8191 + 6
    buf.close()  # idempotent
    with pytest.raises(ValueError, match="closed"):
        buf.numpy()
    # The name is free again.
    with a.allocate("temp", 4096) as again:
        assert a.region("temp").bytes == 4096
        assert not again.closed


def test_allocate_with_a_manifest_names_the_tensors_from_the_start(nodes: Callable[..., list[conduit.Agent]]) -> None:
    (a,) = nodes("node-a")
    manifest = conduit.Manifest([conduit.TensorSpec("w", "F32", (4, 4), 0, 64),
                                 conduit.TensorSpec("b", "BF16", (4,), 64, 8)], {"step": "3"})
    with a.allocate("named", 72, manifest=manifest) as buf:
        assert buf.manifest == manifest
        assert a.manifest("named") == manifest, "the agent's region holds it, not only this process"
    # A manifest that does not fit the bytes is refused naming the tensor, and no region is left behind.
    lying = conduit.Manifest([conduit.TensorSpec("w", "F32", (4, 4), 0, 64)], {})
    with pytest.raises(conduit.InvalidArgument, match=r"tensors\[0\] \(w\).*outside the 32-byte region"):
        a.allocate("short", 32, manifest=lying)
    with pytest.raises(conduit.NotFound):
        a.region("short")


def test_torch_view_is_zero_copy(nodes: Callable[..., list[conduit.Agent]]) -> None:
    torch = pytest.importorskip("torch", reason="torch is not installed: SharedBuffer.torch() is tested where it is")
    (a,) = nodes("node-a")
    with a.allocate("t", 4096) as buf:
        t = buf.torch(torch.float32)
        assert t.numel() == 1024
        before = a.checksum("t")
        t[10] = 3.5
        assert buf.numpy(np.float32)[10] == 3.5
        assert a.checksum("t") != before


def test_torch_missing_says_so(nodes: Callable[..., list[conduit.Agent]], monkeypatch: pytest.MonkeyPatch) -> None:
    (a,) = nodes("node-a")
    monkeypatch.setitem(sys.modules, "torch", None)  # as if torch were not installed
    with a.allocate("t", 4096) as buf:
        with pytest.raises(ImportError, match="needs PyTorch"):
            buf.torch()
