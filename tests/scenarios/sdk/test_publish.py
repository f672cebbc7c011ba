"""A model published to readers on another node (conduit.publish): a torch module of 450 tensors (~256 MiB,
float32, float16, bfloat16, int8) published on node-a and applied on node-b, in place, by two processes sharing
the node's one copy (one reader copying into its model, the other's model adopting the node's copy), with the
publisher waiting for both acks; a reader whose model differs applies nothing and
is told which tensor; numpy state_dicts alike, without torch."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from harness import AgentPool

import conduit
from conduit.publish import publish, subscribe

HERE = Path(__file__).resolve().parent
PYTHON_DIR = HERE.parents[2] / "python"
sys.path.insert(0, str(HERE))  # publish_model.py, which the reader processes import too

READER = """
import sys, torch, conduit
from conduit.publish import subscribe
from publish_model import Model, same
agent = conduit.Agent(sys.argv[1], token_file=sys.argv[2], import_socket=sys.argv[3])
adopt = sys.argv[4] == "adopt"
model = Model(seed=1)                                   # initialised unlike the publisher's
ptrs = {n: t.data_ptr() for n, t in model.state_dict().items()}
with subscribe(agent, "policy", timeout=60) as sub:
    for step in (1, 2):
        upd = sub.wait_update(timeout=60)
        if adopt and step == 1:                         # the model's tensors become views of the node's copy
            assert len(sub.adopt(upd, model)) == 450
            ptrs = {n: t.data_ptr() for n, t in model.state_dict().items()}
            base = upd.tensors("torch")[upd.manifest.tensors[0].name].data_ptr()
            assert all(base <= p < base + sub.buffer.nbytes for p in ptrs.values()), "not the node's copy"
        applied = sub.apply(upd, model)
        want = Model(seed=step * 10)                    # what the publisher trained to at this step
        assert not same(model, want), f"step {step}: differ: {same(model, want)[:5]}"
        assert {n: t.data_ptr() for n, t in model.state_dict().items()} == ptrs, "not in place"
        sub.ack(upd)
        print(step, upd.version, len(applied), sub.buffer.nbytes, flush=True)
"""


def reader(agent: conduit.Agent, agents: AgentPool, mode: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(PYTHON_DIR), str(HERE), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-c", READER, agent.url, str(agents.token_file), str(agent.import_socket), mode],
                            env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_a_torch_model_reaches_two_readers_on_another_node_in_place_with_acks(
        nodes: Callable[..., list[conduit.Agent]], agents: AgentPool) -> None:
    torch = pytest.importorskip("torch")
    from publish_model import Model

    a, b = nodes("node-a", "node-b")
    readers = [reader(b, agents, mode) for mode in ("copy", "adopt")]  # one copies, one adopts the node's copy
    try:
        model = Model(seed=0)
        with publish(a, "policy", model) as pub:
            assert len(pub.manifest.tensors) == 450
            pub.adopt(model)  # the module's tensors are the arena's: pushes copy nothing in
            for step in (1, 2):
                with torch.no_grad():  # "training": the values the readers rebuild from seed step * 10
                    for p, q in zip(model.state_dict().values(), Model(seed=step * 10).state_dict().values(),
                                    strict=True):
                        p.copy_(q)
                versions = pub.push([b])
                acked = pub.wait_acks(readers=2, timeout=60)[b.url]
                assert sorted(x.version for x in acked) == [versions[b.url]] * 2
            assert pub.update() == 0, "an adopted module copies nothing in"
        outs = [r.communicate(timeout=120) for r in readers]
        for r, (out, err) in zip(readers, outs, strict=True):
            assert r.returncode == 0, err
            lines = [line.split() for line in out.splitlines()]
            assert [(s, n) for s, _, n, _ in lines] == [("1", "450"), ("2", "450")], out
        # One copy on node-b: the region the push made, mapped by both readers (no region per reader).
        regions = [r.name for r in b.regions()]
        assert regions == ["policy"], regions
        assert len(b.manifest("policy").tensors) == 450
    finally:
        for r in readers:
            r.kill()
            r.wait()


def test_a_reader_whose_model_differs_applies_nothing_and_is_told_which_tensor(
        nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    rng = np.random.default_rng(0)
    state = {"embed.weight": rng.standard_normal((64, 32)).astype(np.float32),
             "head.bias": np.arange(16, dtype=np.int8)}
    with publish(a, "small", state) as pub:
        pub.push([b])
        with subscribe(b, "small", timeout=10) as sub:
            upd = sub.wait_update(timeout=10)
            mine = {"embed.weight": np.zeros((64, 32), np.float32), "head.bias": np.zeros(32, np.int8)}
            with pytest.raises(ValueError, match=r"nothing applied.*'head.bias': shape \[16\] in the update, "
                                                 r"\[32\] in the state_dict"):
                sub.apply(upd, mine)
            assert not mine["embed.weight"].any(), "nothing applied, not even the tensors that match"
            assert sub.apply(upd, mine, tensors="embed.*") == ["embed.weight"]
            np.testing.assert_array_equal(mine["embed.weight"], state["embed.weight"])
            view = upd.tensors()["embed.weight"]
            with pytest.raises(ValueError, match="read-only"):
                view[0, 0] = 1  # the node's one copy: readers cannot write it
