"""The import socket belongs to one agent: a client whose socket is another agent's than the one at its URL is
refused before anything is made on either (issue 32, item 7: it imported on B and then deleted A's region
of that name)."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from harness import AgentPool

import conduit
from conduit.buffers import send_import


def test_another_agents_socket_is_refused_before_anything_is_made(nodes: Callable[..., list[conduit.Agent]],
                                                                  agents: AgentPool) -> None:
    a, b = nodes("node-a", "node-b")
    a.create_region("victim", 4096)
    with a.allocate("filler", 4096) as src:  # the victim's bytes, written through a transfer
        src.numpy()[:] = 0x5A
        a.transfer("filler", [conduit.Target(a, "victim")]).wait(timeout=30)
    crc = a.checksum("victim")
    mixed = conduit.Agent(a.url, token_file=agents.token_file, import_socket=b.import_socket)
    with pytest.raises(conduit.AgentMismatch) as e:
        mixed.allocate("victim", 4096).close()
    assert isinstance(e.value, conduit.InvalidArgument) and e.value.reason == "AgentMismatch", e.value
    assert "node-b" in e.value.message and str(b.import_socket) in e.value.message, e.value
    assert a.url in str(e.value), e.value
    assert [r.name for r in b.regions()] == [], "something was imported on the socket's agent"
    assert [r.name for r in a.regions()] == ["victim"] and a.checksum("victim") == crc, "A's victim was touched"


def test_both_ends_say_the_same_instance(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    said = send_import(str(a.import_socket), {"identify": True})["agent"]
    assert said["instance"] == a.node()["instance"] and said["instance"] != b.node()["instance"], said
    with pytest.raises(conduit.InvalidArgument, match="comes alone"):
        send_import(str(a.import_socket), {"identify": True, "name": "x"})
    with a.allocate("mine", 4096) as buf:
        assert buf.region is not None and buf.region.name == "mine"


def test_close_leaves_a_region_made_anew_under_its_name(nodes: Callable[..., list[conduit.Agent]]) -> None:
    (a,) = nodes("node-a")
    buf = a.allocate("reused", 4096)
    a.delete_region("reused")  # someone else's doing
    a.create_region("reused", 8192)
    buf.close()
    assert a.region("reused").bytes == 8192, "close deleted a region it did not import"
