"""docs/python.md's examples, run as written: each fenced python block is read from the file (so it cannot
drift from what is tested) and executed against real agents, in the names the docs take as given (``a``,
``b``, ``np``, the block's data), with the docs' placeholder addresses replaced by the test's. A block under
a heading this file has no setup for fails: a new example needs its setup here."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from harness import AgentPool, MiB

import conduit

DOCS = Path(__file__).resolve().parents[3] / "docs" / "python.md"


@dataclass(frozen=True)
class Block:
    heading: str
    line: int  # of the opening fence
    code: str


def blocks() -> list[Block]:
    found, heading, code, start = [], "", None, 0
    for i, line in enumerate(DOCS.read_text().splitlines(), 1):
        if code is None and line.startswith("#"):
            heading = line.lstrip("#").strip()
        elif code is None and line.strip() == "```python":
            code, start = [], i
        elif code is not None and line.strip() == "```":
            found.append(Block(heading, start, "\n".join(code) + "\n"))
            code = None
        elif code is not None:
            code.append(line)
    return found


class Docs:
    """What a block runs with: its names, and the placeholder strings it has in place of real addresses."""

    def __init__(self, request: pytest.FixtureRequest, nodes: Callable[..., list[conduit.Agent]],
                 agents: AgentPool) -> None:
        self.request = request
        self.nodes = nodes
        self.agents = agents
        self.names: dict[str, Any] = {"np": np, **{n: getattr(conduit, n) for n in conduit.__all__}}
        self.replace: dict[str, str] = {}

    def run(self, block: Block) -> dict[str, Any]:
        code = block.code
        for old, new in self.replace.items():
            code = code.replace(old, new)
        exec(compile(code, f"{DOCS}:{block.line}", "exec"), self.names)  # noqa: S102 -- the docs' own code
        return self.names


def errors(d: Docs) -> None:
    d.nodes("node-a")
    d.replace = {"http://127.0.0.1:7070": d.agents["node-a"].url, "/etc/conduit/token": str(d.agents.token_file)}


def regions(d: Docs) -> None:
    (a,) = d.nodes("node-a")
    ckpt = d.agents["node-a"].data_dir / "checkpoints"
    ckpt.mkdir(parents=True, exist_ok=True)
    (ckpt / "step-1000.bin").write_bytes(os.urandom(MiB))
    d.names["a"] = a


def transfers(d: Docs) -> None:
    a, b, c = d.nodes("node-a", "node-b", "node-c")
    for agent in (a, b, c):
        agent.create_region("w", 1 << 20)
    d.names.update(a=a, b=b, c=c)


BLOCK = 16 << 10


def scatter(d: Docs) -> None:
    a, b = d.nodes("node-a", "node-b")
    a.create_region("kv", 64 * BLOCK)
    b.create_region("kv", 64 * BLOCK)
    rng = np.random.default_rng(3)
    dst = rng.permutation(64)[:20]
    d.names.update(a=a, b=b, BLOCK=BLOCK, src_blocks=np.arange(20), dst_blocks=dst, back=np.arange(20, 40))


def shared_buffers(d: Docs) -> None:
    a, b = d.nodes("node-a", "node-b")
    nbytes = 4 * MiB
    d.names.update(a=a, b=b, nbytes=nbytes, new_weights=np.arange(nbytes // 4, dtype=np.float32))


def open_shared(d: Docs) -> None:
    a, b = d.nodes("node-a", "node-b")
    nbytes = MiB
    a.create_region("weights", nbytes)
    d.names.update(a=a, b=b, nbytes=nbytes)


def gpu(d: Docs) -> None:
    try:
        import torch
    except ImportError:
        pytest.skip("no torch: the GPU example runs only where torch with CUDA is")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device for torch: the GPU example runs only on a GPU machine")
    (a,) = d.nodes("node-a")
    if not a.node().get("cuda", {}).get("devices"):
        pytest.skip("the agent cannot use CUDA")
    d.names.update(a=a, tensor=torch.ones(MiB // 4, device="cuda"))


def named_tensors(d: Docs) -> None:
    try:
        import torch
    except ImportError:
        pytest.skip("no torch: the named tensors example moves a torch model")
    a, b = d.nodes("node-a", "node-b")

    def model(seed: int) -> Any:
        torch.manual_seed(seed)
        return torch.nn.ModuleDict({"layers": torch.nn.ModuleList(
            torch.nn.Linear(64, 64).to(dtype) for dtype in (torch.float32, torch.bfloat16, torch.float16))})

    d.names.update(a=a, b=b, model=model(1), replica=model(2))


def publishing(d: Docs) -> None:
    try:
        import torch
    except ImportError:
        pytest.skip("no torch: the publishing example moves a torch model")
    a, b = d.nodes("node-a", "node-b")

    def model(seed: int) -> Any:
        torch.manual_seed(seed)
        return torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.Linear(64, 64).to(torch.bfloat16))

    d.names.update(a=a, b=b, model=model(1), engine_model=model(2))


def versions(d: Docs) -> None:
    a, b = d.nodes("node-a", "node-b")
    a.create_region("weights", MiB)
    b.create_region("weights", MiB)
    a.transfer("weights", [conduit.Target(b, "weights")]).wait(timeout=30)
    d.names.update(a=a, b=b, seen=0)


def double_buffer(d: Docs) -> None:
    a, b = d.nodes("node-a", "node-b")
    nbytes = MiB
    a.create_region("weights", nbytes)
    d.names.update(a=a, b=b, nbytes=nbytes, seen=0)


def jobs(d: Docs) -> None:
    a, b, c = d.nodes("node-a", "node-b", "node-c")
    n = 3 * MiB
    a.create_region("weights", n)
    b.create_region("weights", n)
    ctl = d.request.getfixturevalue("local_controller")()
    d.names.update(a=a, b=b, c=c, n=n)
    d.replace = {"/path/to/jobs": str(ctl.jobs_dir)}


def kube_jobs(d: Docs) -> None:
    """The TransferJobs example first (it makes ``job``), then through a kube-apiserver and its controller."""
    jobs(d)
    d.run(next(b for b in blocks() if b.heading == "TransferJobs"))
    # The two sections are alternatives: the job that ran locally made node-c's target, which the same job
    # through the apiserver makes again (create_bytes), so it goes first.
    d.names["c"].delete_region("weights")
    k = d.request.getfixturevalue("kube")("ml")
    build = d.request.getfixturevalue("build")
    work = d.request.getfixturevalue("work")
    argv = [os.fspath(build.controller), "--kubeconfig", os.fspath(k.kubeconfig), "--namespace", "ml",
            "--agents", d.agents.agents_flag(), "--agent-token-file", os.fspath(d.agents.token_file)]
    controller = d.request.getfixturevalue("processes").start(
        argv, name="controller", stdout=work / "kube-controller.out", stderr=work / "kube-controller.log")
    # Before the apiserver stops (the kube fixture's teardown, which runs after this finalizer).
    d.request.addfinalizer(lambda: controller.terminate(timeout=30))
    d.replace["/path/to/kubeconfig"] = str(k.kubeconfig)


SETUP: dict[str, Callable[[Docs], None]] = {
    "Errors": errors,
    "Agent: regions, checksums, grants": regions,
    "Transfers": transfers,
    "KV-cache blocks (scatter-gather)": scatter,
    "Shared buffers (zero copy)": shared_buffers,
    "One copy per node: open_shared": open_shared,
    "GPU memory": gpu,
    "Named tensors": named_tensors,
    "Publishing a model": publishing,
    "Region versions": versions,
    "Committing a grant to a version": versions,
    "DoubleBuffer": double_buffer,
    "Acknowledgements": versions,
    "TransferJobs": jobs,
    "Through a Kubernetes API server": kube_jobs,
}


def no_grants_left(*agents: conduit.Agent) -> None:
    """The example left no grant behind (the agents release a transfer's grants as it ends)."""
    deadline = time.monotonic() + 2
    while any(a.grants() for a in agents) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [g.id for a in agents for g in a.grants()] == [], "the example left a grant"


@pytest.mark.timeout(120)
@pytest.mark.parametrize("block", blocks(), ids=lambda b: re.sub(r"\W+", "-", b.heading).strip("-").lower())
def test_docs_example_runs(block: Block, request: pytest.FixtureRequest,
                           nodes: Callable[..., list[conduit.Agent]], agents: AgentPool) -> None:
    setup = SETUP.get(block.heading)
    assert setup is not None, f"docs/python.md:{block.line}: no setup for section {block.heading!r} in {__file__}"
    d = Docs(request, nodes, agents)
    setup(d)
    names = d.run(block)
    clients = [v for v in names.values() if isinstance(v, conduit.Agent)]
    no_grants_left(*clients)
    if block.heading == "Shared buffers (zero copy)":
        assert names["a"].regions() == [], "the shared buffer's region was left"
        sent = d.agents.work / "new_weights.bin"
        sent.write_bytes(names["new_weights"].tobytes())
        agents["node-b"].save_and_compare("weights", sent)
    if block.heading == "One copy per node: open_shared":
        assert not names["w"].flags.writeable and names["params"] is None
        assert names["b"].region("weights").shareable, "closing the opener left the region"
    if block.heading == "Named tensors":
        import torch
        replica = names["replica"].state_dict()
        for name, t in names["model"].state_dict().items():
            assert torch.equal(replica[name], t), f"{name} was not applied"
    if block.heading == "Publishing a model":
        import torch
        engine = names["engine_model"].state_dict()
        for name, t in names["model"].state_dict().items():
            assert torch.equal(engine[name], t), f"{name} was not applied"
        assert names["upd"].manifest.metadata == {"step": "1"}
        names["sub"].close()
        names["pub"].close()

def test_every_section_with_an_example_is_tested() -> None:
    assert {b.heading for b in blocks()} <= set(SETUP), "docs/python.md has an example this file does not run"
