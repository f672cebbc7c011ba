"""Fixtures of the Python SDK's scenarios: the SDK (python/conduit, imported from the source tree: no install
step) against real conduit-agents started by the harness.

    def test_x(nodes):
        a, b = nodes("node-a", "node-b")      # conduit.Agent clients of two fresh agents
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "python"))

from harness import AgentPool  # noqa: E402
from harness.agents import Agent as HarnessAgent  # noqa: E402

import conduit  # noqa: E402

#: Every SDK scenario is small; one that takes longer than this is stuck.
SDK_TEST_TIMEOUT_S = 60


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(SDK_TEST_TIMEOUT_S))


def client(agent: HarnessAgent) -> conduit.Agent:
    """The SDK's client of a harness agent: its URL, the pool's token file, its import socket."""
    return conduit.Agent(agent.url, token_file=agent.pool.token_file, import_socket=agent.socket)


@pytest.fixture
def nodes(agents: AgentPool) -> Callable[..., list[conduit.Agent]]:
    """Factory: ``a, b = nodes("node-a", "node-b")`` starts an agent per name (1 GiB memory cap, or ARGS)
    and returns an SDK client of each."""

    def start(*names: str, args: tuple[str, ...] = ("--memory-cap", "1GiB")) -> list[conduit.Agent]:
        return [client(agents.start(n, *args)) for n in names]

    return start
