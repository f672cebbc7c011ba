"""Rendezvous kept by the agent: a receiver's wait_region answers as soon as another process makes the region,
readers in processes of their own ack the version they applied, and the publisher's wait_acks returns once
enough did, or says who acked and how many are missing."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from harness import AgentPool, MiB

import conduit
from conduit import Target

PYTHON_DIR = Path(__file__).resolve().parents[3] / "python"


def spawn(agent: conduit.Agent, agents: AgentPool, script: str) -> subprocess.Popen[str]:
    """A second Python process running SCRIPT with ``agent``, a client of the same agent, in scope."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), os.environ.get("PYTHONPATH", "")])}
    prelude = ("import sys, time, conduit\n"
               f"agent = conduit.Agent({agent.url!r}, token_file={str(agents.token_file)!r})\n")
    return subprocess.Popen([sys.executable, "-c", prelude + script], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finished(p: subprocess.Popen[str]) -> str:
    out, err = p.communicate(timeout=60)
    assert p.returncode == 0, err
    return out.strip()


def test_wait_region_returns_when_another_process_makes_it(nodes: Callable[..., list[conduit.Agent]],
                                                           agents: AgentPool) -> None:
    (b,) = nodes("node-b")
    maker = spawn(b, agents, "time.sleep(1.0)\nagent.create_region('late', 4096)\n")
    t0 = time.monotonic()
    region = b.wait_region("late", timeout=20)
    waited = time.monotonic() - t0
    finished(maker)
    assert region.name == "late" and region.bytes == 4096
    assert waited < 4, f"waited {waited:.1f} s for a region made after about 1 s"

    t0 = time.monotonic()
    with pytest.raises(TimeoutError, match="region never"):
        b.wait_region("never", timeout=1)
    assert 0.9 <= time.monotonic() - t0 < 5


def test_readers_ack_the_version_they_applied_and_the_publisher_waits_for_them(
        nodes: Callable[..., list[conduit.Agent]], agents: AgentPool) -> None:
    a, b = nodes("node-a", "node-b")
    b.create_region("weights", MiB)
    # Each reader waits for new weights, "applies" them, and acks as "<host>/<pid>" (the default reader).
    readers = [spawn(b, agents, "u = agent.wait_version('weights', after=0, timeout=30)\n"
                        "agent.ack('weights', u.version)\nprint(u.version)\n") for _ in range(2)]
    with a.allocate("weights", MiB) as buf:
        buf.numpy()[:] = 7
        a.transfer("weights", [Target(b, "weights")]).wait(timeout=30)
    acked = b.wait_acks("weights", version=1, readers=2, timeout=30)
    assert [finished(r) for r in readers] == ["1", "1"]
    host = socket.gethostname()
    assert sorted(a.reader for a in acked) == sorted(f"{host}/{r.pid}" for r in readers)
    assert all(a.version == 1 and a.at is not None for a in acked)
    assert b.acks("weights", version=1).done

    with pytest.raises(conduit.Conflict, match="past its current version 1"):
        b.ack("weights", 2, reader="too-early")
    assert len(b.acks("weights").readers) == 2, "a refused ack changes nothing"


def test_wait_acks_times_out_naming_who_acked_and_how_many_are_missing(
        nodes: Callable[..., list[conduit.Agent]]) -> None:
    (b,) = nodes("node-b")
    b.create_region("weights", 4096)
    b.ack("weights", 0, reader="rank-0")
    t0 = time.monotonic()
    with pytest.raises(TimeoutError) as e:
        b.wait_acks("weights", version=0, readers=3, timeout=1)
    assert time.monotonic() - t0 < 5
    assert "1 of 3 readers" in str(e.value) and "2 missing" in str(e.value) and "rank-0" in str(e.value), e.value
    with pytest.raises(conduit.NotFound):
        b.wait_acks("nope", version=0, readers=1, timeout=1)


def test_a_double_buffers_readers_ack_the_half_they_read(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    db = conduit.DoubleBuffer(b, "w")
    db.create(4096)
    with a.allocate("src", 4096) as buf:
        buf.numpy()[:] = 1
        a.transfer("src", [db.next_target()]).wait(timeout=30)
    slot = db.wait(after=0, timeout=10)
    db.ack(slot, reader="reader-1")
    assert [x.reader for x in db.wait_acks(slot, readers=1, timeout=5)] == ["reader-1"]
