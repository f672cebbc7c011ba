"""torchft's CheckpointTransport over Conduit (conduit.integrations.torchft), with the real torchft package and real
agents: torchft's own three-rank recovery test (all ranks recovering, some, a receive that times out, a send whose
receiver is gone) passed by ConduitTransport with each rank on its own node; a late receiver after
disallow_checkpoint told so, not given stale bytes; a state_dict of another structure refused naming the tensor,
nothing pulled; and a real torchft Manager (lighthouse, gloo, two replica groups as processes) whose replica is
SIGKILLed at step 3, restarted, and heals through Conduit to its peer's parameters."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import unittest
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from harness import AgentPool
from torchft.checkpointing.transport_test import assertStateDictEqual, make_state_dict, run_multi_recovery_test

import conduit
from conduit.integrations.torchft import CheckpointUnavailable, ConduitTransport

HERE = Path(__file__).resolve().parent
PYTHON_DIR = HERE.parents[2] / "python"
SECONDS = timedelta(seconds=10)


def transports(agents: list[conduit.Agent], pool: AgentPool, **kwargs: object) -> list[ConduitTransport[dict]]:
    peers = (lambda url: conduit.Agent(url, token_file=pool.token_file))
    return [ConduitTransport(a, SECONDS, peers=peers, **kwargs) for a in agents]  # type: ignore[arg-type]


@pytest.fixture
def gloo() -> object:
    """A one-rank gloo group, as torchft's transport tests run under (their DTensor's mesh needs one)."""
    dist.init_process_group(backend="gloo", rank=0, world_size=1, store=dist.HashStore())
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def test_torchfts_own_three_rank_recovery_test_passes(nodes: Callable[..., list[conduit.Agent]],
                                                       agents: AgentPool) -> None:
    # run_multi_recovery_test is torchft's (torchft/checkpointing/transport_test.py), run as its HTTPTransport
    # and PGTransport tests run it: rank 0 sends step 1 to ranks 1 and 2, then step 2 to rank 2; rank 2's
    # receive of step 3 (never sent) must time out in 10 ms; rank 2 then sends to rank 0, which never receives.
    cluster = nodes("node-a", "node-b", "node-c")
    made = transports(cluster, agents)
    run_multi_recovery_test(unittest.TestCase(), lambda rank, world: made[rank], device=torch.device("cpu"))
    for a in cluster:
        assert [r.name for r in a.regions()] == [], f"{a.url} still holds regions after shutdown"
        assert a.grants() == [], f"{a.url} still holds grants after shutdown"
    # Pulls: the receivers' agents ran them (node-a, the sender, ran none), each verified as it landed.
    pulls = [t for a in cluster[1:] for t in a.transfers()]
    assert cluster[0].transfers() == [] and len(pulls) == 3, pulls
    assert all(t["state"] == "Succeeded" and t.get("verified") is True for t in pulls), pulls


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_torchfts_own_recovery_test_with_cuda_tensors(nodes: Callable[..., list[conduit.Agent]],
                                                      agents: AgentPool) -> None:
    made = transports(nodes("node-a", "node-b", "node-c"), agents)
    run_multi_recovery_test(unittest.TestCase(), lambda rank, world: made[rank], device=torch.device("cuda"))


def test_a_late_receiver_is_told_the_step_is_withdrawn_not_given_stale_bytes(
        nodes: Callable[..., list[conduit.Agent]], agents: AgentPool, gloo: object) -> None:
    a, b = nodes("node-a", "node-b")
    sender, receiver = transports([a, b], agents)
    state = make_state_dict(torch.device("cpu"))
    try:
        sender.send_checkpoint([1], step=7, state_dict=state, timeout=SECONDS)
        got = receiver.recv_checkpoint(0, sender.metadata(), step=7, timeout=SECONDS)
        assertStateDictEqual(unittest.TestCase(), got, state)

        with pytest.raises(CheckpointUnavailable, match="serves the checkpoint of step 7, past step 6"):
            receiver.recv_checkpoint(0, sender.metadata(), step=6, timeout=SECONDS)
        with pytest.raises(TimeoutError, match=r"timed out after 0.3 s: .*it serves step 7"):
            receiver.recv_checkpoint(0, sender.metadata(), step=8, timeout=timedelta(seconds=0.3))

        sender.disallow_checkpoint()
        assert a.grants() == [], "disallow_checkpoint left the read grant"
        start = time.monotonic()
        with pytest.raises(TimeoutError, match=r"timed out after 0.5 s: .*serves nothing"):
            receiver.recv_checkpoint(0, sender.metadata(), step=7, timeout=timedelta(seconds=0.5))
        assert time.monotonic() - start < 2.0, "the timeout was not kept"

        # The arena is kept for the next send (and now holds step 9): nothing of step 7 is served from it.
        state["int"] = 99
        sender.send_checkpoint([1], step=9, state_dict=state, timeout=SECONDS)
        assert receiver.recv_checkpoint(0, sender.metadata(), step=9, timeout=SECONDS)["int"] == 99
    finally:
        sender.shutdown()
        receiver.shutdown()


def test_another_structure_is_refused_naming_the_tensor_before_anything_moves(
        nodes: Callable[..., list[conduit.Agent]], agents: AgentPool) -> None:
    a, b = nodes("node-a", "node-b")
    trainer = {"model": {"fc.weight": torch.rand(4, 3), "fc.bias": torch.rand(4)}, "step": 3}
    mine = {"model": {"fc.weight": torch.rand(4, 2), "fc.bias": torch.rand(4), "head.weight": torch.rand(2)},
            "step": 0}
    sender, receiver = transports([a, b], agents, state_dict=lambda: mine)
    try:
        sender.send_checkpoint([1], step=3, state_dict=trainer, timeout=SECONDS)
        with pytest.raises(conduit.TensorMismatch) as e:
            receiver.recv_checkpoint(0, sender.metadata(), step=3, timeout=SECONDS)
        text = str(e.value)
        assert "['model']['fc.weight']" in text and "shape [4, 3] sent, [4, 2] here" in text, text
        assert "['model']['head.weight']" in text and "not in the sender's" in text, text
        assert "fc.bias" not in text, text
        assert b.transfers() == [] and [r.name for r in b.regions()] == [], "something moved into node-b"

        # The same structure lands, on the devices of the receiver's own state_dict.
        mine["model"] = {k: torch.zeros_like(v) for k, v in trainer["model"].items()}
        got = receiver.recv_checkpoint(0, sender.metadata(), step=3, timeout=SECONDS)
        assert got["step"] == 3 and all(torch.equal(got["model"][k], v) for k, v in trainer["model"].items())
    finally:
        sender.shutdown()
        receiver.shutdown()


# --- A real torchft Manager: two replica groups, one killed and restarted, healed through Conduit -------------

REPLICA = HERE / "torchft_replica.py"


class Replica:
    """One replica group's process (torchft_replica.py), its output in a file (a pipe nobody drains while
    the test waits on the other replica would fill and stall it)."""

    def __init__(self, agent: conduit.Agent, pool: AgentPool, lighthouse: str, replica: int, seed: int, steps: int,
                 out: Path, log: Path, die_at: int = -1) -> None:
        env = dict(os.environ, PYTHONPATH=f"{PYTHON_DIR}{os.pathsep}{HERE}", PYTHONUNBUFFERED="1")
        self.log = log
        with open(log, "w") as f:
            self.proc = subprocess.Popen([sys.executable, str(REPLICA), agent.url, str(pool.token_file),
                                          str(agent.import_socket), lighthouse, str(replica), str(seed), str(steps),
                                          str(out), str(die_at)], stdout=f, stderr=subprocess.STDOUT, text=True, env=env)

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def finish(self, timeout: float = 60.0) -> None:
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        assert self.proc.returncode == 0, f"replica exited {self.proc.returncode}:\n{self.output()[-6000:]}"


@pytest.mark.timeout(120)
def test_a_killed_replica_heals_through_conduit_to_its_peers_parameters(
        nodes: Callable[..., list[conduit.Agent]], agents: AgentPool, tmp_path: Path) -> None:
    from torchft._torchft import LighthouseServer

    a, b = nodes("node-a", "node-b")
    lighthouse = LighthouseServer(bind="[::]:0", min_replicas=2, join_timeout_ms=100, heartbeat_timeout_ms=1000)
    steps = 8
    procs: list[Replica] = []
    try:
        address = lighthouse.address()
        procs.append(Replica(a, agents, address, 0, seed=1, steps=steps, out=tmp_path / "r0.json",
                             log=tmp_path / "r0.log"))
        procs.append(Replica(b, agents, address, 1, seed=2, steps=steps, out=tmp_path / "r1.json",
                             log=tmp_path / "r1.log", die_at=3))
        assert procs[1].proc.wait(timeout=60) == -signal.SIGKILL, procs[1].output()[-4000:]
        assert "step 3" in procs[1].output() and not (tmp_path / "r1.json").exists()
        # Restarted with other weights than anyone's: only a heal makes it its peer's again.
        procs.append(Replica(b, agents, address, 1, seed=3, steps=steps, out=tmp_path / "r1.json",
                             log=tmp_path / "r1b.log"))
        procs[2].finish()
        procs[0].finish()
    finally:
        for p in procs:
            if p.proc.poll() is None:
                p.proc.kill()
                p.proc.wait()
        lighthouse.shutdown()
    r0 = json.loads((tmp_path / "r0.json").read_text())
    r1 = json.loads((tmp_path / "r1.json").read_text())
    assert r0["step"] == r1["step"] == steps, (r0["step"], r1["step"])
    assert r1["healed"], f"the restarted replica did not heal:\n{procs[2].output()[-4000:]}"
    assert r1["healed_to"] >= 3, r1["healed_to"]
    assert r0["params"] == r1["params"], "the healed replica's parameters differ from its peer's"
    pulls = b.transfers()  # node-b's agent pulled each heal of replica 1 (its first start's and the restart's)
    assert pulls and all(t["state"] == "Succeeded" and t.get("verified") is True for t in pulls), pulls
