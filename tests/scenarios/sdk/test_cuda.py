"""GPU memory as a region (Agent.share_cuda): what can be checked without a GPU (refusals, the missing driver
said as such), and, where a CUDA device, its driver and a CUDA array library are present, the import itself."""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import conduit


class FakeCudaArray:
    """An object claiming CUDA memory at an address that is not one: only for the refusals below."""

    def __init__(self, shape: tuple[int, ...], strides: tuple[int, ...] | None = None) -> None:
        self.__cuda_array_interface__ = {"data": (0x7F0000000000, False), "shape": shape, "typestr": "<f4",
                                         "strides": strides, "version": 3}


def cuda_driver_reason() -> str | None:
    """None when libcuda loads and cuInit finds a device; else why not."""
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        return f"no CUDA driver here (libcuda.so.1: {e})"
    rc = lib.cuInit(0)
    return None if rc == 0 else f"cuInit failed ({rc}): no usable CUDA device here"


def test_share_cuda_refuses_what_is_not_cuda_memory(nodes: Callable[..., list[conduit.Agent]]) -> None:
    (a,) = nodes("node-a")
    with pytest.raises(conduit.InvalidArgument, match="no __cuda_array_interface__"):
        a.share_cuda("host", np.zeros(16, np.float32))
    with pytest.raises(conduit.InvalidArgument, match="not contiguous"):
        a.share_cuda("strided", FakeCudaArray((4, 4), strides=(4, 16)))
    with pytest.raises(conduit.InvalidArgument, match="empty"):
        a.share_cuda("empty", FakeCudaArray((0,)))
    assert a.regions() == []


def test_share_cuda_without_a_driver_says_so(nodes: Callable[..., list[conduit.Agent]]) -> None:
    if cuda_driver_reason() is None:
        pytest.skip("this machine has a CUDA driver and device: test_share_cuda_on_a_gpu covers it")
    (a,) = nodes("node-a")
    with pytest.raises(conduit.Unprocessable) as e:
        a.share_cuda("gpu", FakeCudaArray((1024,)))
    assert e.value.reason == "Unsupported" and ("CUDA driver" in e.value.message or "cuInit" in e.value.message)
    assert a.regions() == []


def cuda_tensor(nbytes: int) -> Any:
    """A CUDA array of NBYTES random bytes from torch or CuPy, or skip saying which is missing."""
    data = np.random.default_rng(5).integers(0, 256, nbytes, dtype=np.uint8)
    try:
        import torch

        if torch.cuda.is_available():
            return torch.from_numpy(data).cuda(), data
    except ImportError:
        pass
    try:
        import cupy

        return cupy.asarray(data), data
    except ImportError:
        pytest.skip("no CUDA array library (torch with CUDA, or CuPy) to make device memory with")


def test_share_cuda_on_a_gpu(nodes: Callable[..., list[conduit.Agent]]) -> None:
    reason = cuda_driver_reason()
    if reason is not None:
        pytest.skip(f"{reason}: share_cuda's import is tested only on a GPU machine")
    (a,) = nodes("node-a")
    cuda = a.node().get("cuda") or {}
    if not cuda.get("devices"):
        pytest.skip(f"the agent cannot use CUDA: {cuda.get('reason') or 'built without CUDA'}")
    nbytes = 4 << 20  # large enough for its own allocation under PyTorch's caching allocator
    tensor, data = cuda_tensor(nbytes)
    region = a.share_cuda("gpu", tensor)
    try:
        assert region.bytes == nbytes and region.memory.startswith("cuda:"), region
        with a.allocate("host-copy", nbytes) as host:
            host.numpy()[:] = data
            assert a.checksum("gpu") == a.checksum("host-copy")
    finally:
        a.delete_region("gpu")
