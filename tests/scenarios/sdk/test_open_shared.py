"""One copy per node: processes on a node open the region a transfer filled (``Agent.open_shared``) and map the
agent's own pages, read-only unless they ask, instead of each receiving a transfer of its own."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from harness import AgentPool, MiB

import conduit
from conduit import Target

PYTHON_SDK = Path(__file__).resolve().parents[3] / "python"

# An inference process: opens the region read-only, says what it sees, waits for a line on stdin, says again.
OPENER = r"""
import hashlib, sys
import conduit
url, token_file, sock, name = sys.argv[1:]
agent = conduit.Agent(url, token_file=token_file, import_socket=sock)
with agent.open_shared(name) as buf:
    view = buf.numpy()
    print(hashlib.sha256(view).hexdigest(), view.flags.writeable, buf.owner, flush=True)
    sys.stdin.readline()
    print(hashlib.sha256(view).hexdigest(), flush=True)
"""


def opener(agent: conduit.Agent, agents: AgentPool, name: str) -> subprocess.Popen[str]:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(PYTHON_SDK), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, "-c", OPENER, agent.url, str(agents.token_file),
                             str(agent.import_socket), name],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)


def said(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline().strip()
    assert line, f"the opener said nothing (exit {process.poll()})"
    return line


def test_two_processes_see_the_weights_one_transfer_landed(nodes: Callable[..., list[conduit.Agent]],
                                                           agents: AgentPool,
                                                           report: Callable[[str], None]) -> None:
    a, b = nodes("node-a", "node-b")
    size = 4 * MiB + 3
    data = np.random.default_rng(5).integers(0, 256, size, dtype=np.uint8)
    landing = b.create_region("weights", size, shareable=True)
    assert landing.shareable and landing.source == "allocated", landing.raw
    with a.allocate("src", size) as src:
        src.numpy()[:] = data
        status = a.transfer("src", [Target(b, "weights")]).wait(timeout=30)
        assert status.state == "Succeeded", status

    readers = [opener(b, agents, "weights") for _ in range(2)]
    try:
        first = [said(r).split() for r in readers]
        assert first == [[hashlib.sha256(data).hexdigest(), "False", "False"]] * 2, \
            "each opener sees the landed bytes through a read-only view, and does not own the region"

        # A writable opener's writes are what every other opener (and the agent) sees.
        with b.open_shared("weights", writable=True) as writer:
            assert writer.numpy().flags.writeable and not writer.owner
            writer.numpy()[:16] = 0xEE
        changed = data.copy()
        changed[:16] = 0xEE
        for r in readers:
            assert r.stdin is not None
            r.stdin.write("\n")
            r.stdin.flush()
        assert [said(r) for r in readers] == [hashlib.sha256(changed).hexdigest()] * 2
        assert [r.wait(timeout=10) for r in readers] == [0, 0]
    finally:
        for r in readers:
            if r.poll() is None:
                r.kill()
    # Closing the openers (and the writer) left the region, with its bytes, on the agent.
    assert b.region("weights").bytes == size
    with b.open_shared("weights") as again:
        assert bytes(again.memoryview()[:16]) == b"\xee" * 16
    report(f"2 processes mapped the {size} bytes a transfer landed; a writable opener's 16 bytes reached both")


def test_read_only_views_refuse_writes_and_a_manifest_comes_along(nodes: Callable[..., list[conduit.Agent]]
                                                                   ) -> None:
    (b,) = nodes("node-b")
    manifest = conduit.Manifest((conduit.TensorSpec("w", "F32", (4,), 0, 16),))
    b.create_region("named", 4096, shareable=True, manifest=manifest)
    with b.open_shared("named") as buf:
        assert buf.manifest == manifest and not buf.writable
        with pytest.raises(ValueError):
            buf.numpy()[0] = 1
        with pytest.raises(TypeError):
            buf.memoryview()[0] = 1
        torch = pytest.importorskip("torch")
        import warnings
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            t = buf.torch(torch.float32, 4)  # no warning about the read-only buffer
        assert t.shape == (4,)


def test_an_allocated_buffer_is_openable_and_unshareable_regions_are_refused(
        nodes: Callable[..., list[conduit.Agent]]) -> None:
    (b,) = nodes("node-b")
    with b.allocate("mine", 8192) as owned:
        owned.numpy()[:] = 7
        with b.open_shared("mine") as other:
            assert bytes(other.memoryview()[:4]) == b"\x07" * 4
        assert b.region("mine").shareable, "closing an opener left the allocating process's region"
    b.create_region("plain", 4096)
    with pytest.raises(conduit.InvalidArgument, match="not shareable: made without shareable:true"):
        b.open_shared("plain")
    with pytest.raises(conduit.NotFound):
        b.open_shared("nothing")
    with pytest.raises(conduit.InvalidArgument, match="shareable"):
        b.create_region("gpu", 4096, "cuda:0", shareable=True)
