"""One spelling for a transfer's strategy and verify in Agent.transfer and TransferJob (the old ones warn),
a transfer on the transport the caller names, a prefaulted buffer, and a shaped torch view of a buffer."""

from __future__ import annotations

import warnings
from collections.abc import Callable

import numpy as np
import pytest

import conduit
from conduit import Target


def test_strategy_and_verify_are_spelled_as_in_a_transfer_job(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b, c = nodes("node-a", "node-b", "node-c")
    with a.allocate("src", 1 << 20, prefault=True) as src, b.allocate("dst", 1 << 20) as d1, \
            c.allocate("dst", 1 << 20) as d2:
        src.numpy()[:] = np.arange(1 << 20, dtype=np.uint64).astype(np.uint8)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # the new spellings warn about nothing
            status = a.transfer("src", [Target(b, "dst"), Target(c, "dst")], strategy="Chain",
                                verify="crc32c").wait(timeout=30)
            assert status.raw["verified"]
            a.transfer("src", [Target(b, "dst")], strategy="PointToPoint", verify="none").wait(timeout=30)
        assert np.array_equal(d1.numpy(), src.numpy()) and np.array_equal(d2.numpy(), src.numpy())
        with pytest.warns(DeprecationWarning, match='spelled "Fanout"'):
            a.transfer("src", [Target(b, "dst")], strategy="fanout").wait(timeout=30)
        with pytest.warns(DeprecationWarning, match='verify="none"'):
            a.transfer("src", [Target(b, "dst")], verify=False).wait(timeout=30)
        with pytest.raises(conduit.InvalidArgument, match="PointToPoint takes one target"):
            a.transfer("src", [Target(b, "dst"), Target(c, "dst")], strategy="PointToPoint")
        with pytest.raises(conduit.InvalidArgument, match="strategy must be"):
            a.transfer("src", [Target(b, "dst")], strategy="Broadcast")
        with pytest.raises(conduit.InvalidArgument, match='verify must be "crc32c" or "none"'):
            a.transfer("src", [Target(b, "dst")], verify="md5")
        assert not b.grants() and not c.grants(), "a refused transfer leaves no grant behind"


def test_a_transfer_runs_on_the_provider_named(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b", args=("--memory-cap", "1GiB", "--providers", "tcp,shm"))
    with a.allocate("src", 1 << 20) as src, b.allocate("dst", 1 << 20) as dst:
        src.numpy()[:] = 7
        for provider in ("shm", "tcp"):
            dst.numpy()[:] = 0
            status = a.transfer("src", [Target(b, "dst")], provider=provider).wait(timeout=30)
            assert status.raw["verified"] and int(dst.numpy().sum()) == 7 * (1 << 20), provider
        with pytest.raises(conduit.ConduitError, match="efa"):
            a.transfer("src", [Target(b, "dst")], provider="efa")


def test_a_shaped_torch_view_is_zero_copy(nodes: Callable[..., list[conduit.Agent]]) -> None:
    torch = pytest.importorskip("torch", reason="torch is installed by the suite (tests/scenarios/requirements.txt)")
    (a,) = nodes("node-a")
    with a.allocate("buf", 4096) as buf:
        view = buf.torch(torch.float32, (8, 16))
        assert view.shape == (8, 16) and view.dtype == torch.float32
        view[1, 2] = 3.5
        assert buf.numpy(np.float32, (8, 16))[1, 2] == 3.5, "a copy, not a view"
        with pytest.raises(ValueError, match="needs 8192 bytes"):
            buf.torch(torch.float64, (32, 32))
        del view


def test_wait_region_returns_once_the_region_is_made(nodes: Callable[..., list[conduit.Agent]]) -> None:
    import threading
    import time

    (a,) = nodes("node-a")
    maker = threading.Timer(0.3, lambda: a.create_region("late", 4096))
    t0 = time.monotonic()
    maker.start()
    try:
        region = a.wait_region("late", timeout=10)
    finally:
        maker.join()
    assert region.name == "late" and region.bytes == 4096
    assert time.monotonic() - t0 < 2, "waited long past the region's making"
    with pytest.raises(TimeoutError, match="did not appear"):
        a.wait_region("never", timeout=0.2)
