"""python/examples/weights_broadcast.py, run as a user runs it: four real agents, the local-mode controller, the
trainer and its three inference processes; every step must land verified on every receiver."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from harness import AgentPool, LocalController

REPO = Path(__file__).resolve().parents[3]


def test_weights_broadcast_example(agents: AgentPool, local_controller: Callable[..., LocalController],
                                   report: Callable[[str], None]) -> None:
    for node in ("node-a", "node-b", "node-c", "node-d"):
        agents.start(node, "--memory-cap", "256MiB")
    ctl = local_controller()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(REPO / "python/examples/weights_broadcast.py"),
                        "--agents", agents.agents_flag(), "--jobs-dir", str(ctl.jobs_dir),
                        "--token-file", str(agents.token_file), "--import-socket", str(agents["node-a"].socket),
                        "--steps", "3", "--mib", "8"], capture_output=True, text=True, timeout=50, env=env)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    lines = re.findall(r"^step (\d) (node-[bcd]): CRC32C ok, publish -> ready (\d+) ms", r.stdout, re.M)
    assert sorted((s, n) for s, n, _ in lines) == [(str(s), n) for s in (1, 2, 3) for n in ("node-b", "node-c",
                                                                                            "node-d")], r.stdout
    # The receivers' regions are deleted at the end, and no job file is left.
    for node in ("node-b", "node-c", "node-d"):
        assert agents[node].get("/v1/regions").get("items") == [], node
    assert list(ctl.jobs_dir.glob("*.yaml")) == []
    worst = max(int(ms) for _, _, ms in lines)
    report(f"3 steps x 3 receivers verified; slowest publish -> ready {worst} ms")


def test_publish_model_example(agents: AgentPool, report: Callable[[str], None]) -> None:
    """python/examples/publish_model.py: a trainer's torch model pushed each step to two inference processes on
    node-b, applied in place, equal to what was sent, acknowledged before the next step."""
    for node in ("node-a", "node-b"):
        agents.start(node, "--memory-cap", "256MiB")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO / "python"), os.environ.get("PYTHONPATH", "")])}
    r = subprocess.run([sys.executable, str(REPO / "python/examples/publish_model.py"),
                        "--agents", f"{agents['node-a'].url},{agents['node-b'].url}",
                        "--import-sockets", f"{agents['node-a'].socket},{agents['node-b'].socket}",
                        "--token-file", str(agents.token_file), "--steps", "3", "--width", "256"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr}"
    applied = re.findall(r"^step (\d) \S+: 24 tensors applied in place=True equal=True", r.stdout, re.M)
    assert sorted(applied) == ["1", "1", "2", "2", "3", "3"], r.stdout
    pushes = [int(ms) for ms in re.findall(r"^step \d: push -> both applied and acked (\d+) ms", r.stdout, re.M)]
    assert len(pushes) == 3, r.stdout
    assert agents["node-b"].get("/v1/regions").get("items") == [], "the example deletes node-b's copy at the end"
    report(f"3 steps x 2 readers applied in place; slowest push -> acked {max(pushes)} ms")
