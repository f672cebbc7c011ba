"""Fixtures shared by the fault scenarios: real conduit-agents and conduit-controller (local mode), >= 256 MiB
moved with crc32c, one fault injected mid-transfer, the documented outcome checked (docs/reliability.md).

"Mid-transfer" is made deterministic with maxBytesPerSecond 64 MiB/s and by waiting until the source
agent's transfer has moved at least 64 MiB before the fault.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from harness import Agent, AgentPool, LocalController, random_file

#: Each data-plane scenario's bound (the bash suite's FAULTS_SCENARIO_TIMEOUT default).
SCENARIO_TIMEOUT_S = 180


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Called with every collected item, other suites' too: only this folder's get the bound.
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SCENARIO_TIMEOUT_S))


@pytest.fixture
def two_nodes(agents: AgentPool, local_controller: Callable[..., LocalController],
              work: Path) -> Callable[..., tuple[Agent, Agent, LocalController]]:
    """Factory: ``a, b, ctl = two_nodes("--memory-cap", "1GiB")``: agents node-a and node-b (each with the
    arguments), 256 MiB of random bytes as node-a's weights.bin, and the controller: where most scenarios
    start."""

    def setup(*args: str) -> tuple[Agent, Agent, LocalController]:
        a = agents.start("node-a", *args)
        b = agents.start("node-b", *args)
        random_file(work / "node-a" / "weights.bin", 256)
        return a, b, local_controller()

    return setup
