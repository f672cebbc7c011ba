"""Bad input: each refusal is a ConduitError subclass with the agent's code, status and message, and leaves
every agent as it was (no region, grant or transfer more or less)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from harness import AgentPool, MiB

import conduit
from conduit import Target
from conduit.buffers import send_import


def state(*agents: conduit.Agent) -> list[Any]:
    """What a refused request must not change: each agent's regions (name, size, users), grants, transfers."""
    return [([(r.name, r.bytes, r.users, r.version) for r in a.regions()], [g.id for g in a.grants()],
             [t["id"] for t in a.transfers()]) for a in agents]


def test_a_taken_name_is_refused(nodes: Callable[..., list[conduit.Agent]]) -> None:
    (a,) = nodes("node-a")
    a.create_region("taken", 4096)
    before = state(a)
    with pytest.raises(conduit.Conflict) as e:  # through the import socket
        a.allocate("taken", 8192)
    assert e.value.reason == "AlreadyExists" and "taken" in e.value.message, e.value
    with pytest.raises(conduit.Conflict) as e:  # through REST
        a.create_region("taken", 8192)
    assert e.value.reason == "AlreadyExists" and e.value.status == 409, e.value
    assert str(e.value).startswith(f"AlreadyExists (HTTP 409 from {a.url}): ")
    assert state(a) == before
    assert a.region("taken").source == "allocated"


def test_a_wrong_token_is_unauthorized(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    b.create_region("dst", 4096)
    before = state(a, b)
    wrong_a = conduit.Agent(a.url, token="not-the-token", import_socket=a.import_socket)
    wrong_b = conduit.Agent(b.url, token="not-the-token")
    with pytest.raises(conduit.Unauthorized) as e:
        wrong_a.regions()
    assert e.value.status == 401 and e.value.reason == "Unauthorized" and e.value.message, e.value
    with a.allocate("src", 4096):
        # The target's agent refuses the grant: no transfer is started, nothing is left on either side.
        with pytest.raises(conduit.Unauthorized):
            a.transfer("src", [Target(wrong_b, "dst")])
        # The source's agent refuses the transfer after the grant was taken: the grant is revoked again.
        with pytest.raises(conduit.Unauthorized):
            wrong_a.transfer("src", [Target(b, "dst")], length=4096, writer="test")
        assert state(b) == before[1:]
        assert a.transfers() == []


def test_invalid_names_and_sizes(nodes: Callable[..., list[conduit.Agent]]) -> None:
    (a,) = nodes("node-a")
    before = state(a)
    # The agent judges buffer names (through its import socket) and says what a name may be.
    for name in ("Bad_Name", "-x", "x" * 64, ""):
        with pytest.raises(conduit.InvalidArgument) as e:
            a.allocate(name, 4096)
        assert e.value.reason == "InvalidArgument" and "DNS-1123" in e.value.message, e.value
    # Region names never reach a URL unchecked ("a/b" would be another route).
    for name in ("a/b", "UPPER", "..", "x" * 64):
        with pytest.raises(conduit.InvalidArgument, match="DNS-1123"):
            a.region(name)
    for nbytes in (0, -1):
        with pytest.raises(conduit.InvalidArgument, match="at least 1 byte"):
            a.allocate("zero", nbytes)
    with pytest.raises(conduit.InvalidArgument) as e:
        a.create_region("zero", 0)
    assert e.value.status == 400 and "bytes" in e.value.message, e.value
    # A request the agent's socket cannot parse: its own words come back.
    with pytest.raises(conduit.InvalidArgument, match="exactly one fd"):
        send_import(str(a.import_socket), {"name": "nofd", "bytes": 4096})
    with pytest.raises(conduit.InvalidArgument, match="unknown field"):
        send_import(str(a.import_socket), {"name": "x", "bytes": 1, "colour": "red"})
    assert state(a) == before


def test_no_import_socket_and_no_agent(work: Any) -> None:
    nowhere = conduit.Agent("http://127.0.0.1:9", token="t", import_socket=str(work / "none.sock"))
    with pytest.raises(conduit.Unavailable, match="did not answer"):
        nowhere.regions()
    with pytest.raises(conduit.Unavailable, match="import socket"):
        nowhere.allocate("x", 4096)
    with pytest.raises(conduit.InvalidArgument, match="CONDUIT_IMPORT_SOCKET"):
        conduit.Agent("http://127.0.0.1:9", token="t", import_socket="").allocate("x", 4096)


def test_transfer_to_a_missing_region(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    b.create_region("dst", 4096)
    crc = b.checksum("dst")
    with a.allocate("src", 4096) as buf:
        buf.numpy()[:] = 9
        before = state(a, b)
        # The first target's grant is taken, the second's refused: the first is revoked, nothing starts.
        with pytest.raises(conduit.NotFound) as e:
            a.transfer("src", [Target(b, "dst"), Target(b, "missing")])
        assert e.value.status == 404 and "missing" in e.value.message, e.value
        with pytest.raises(conduit.NotFound, match="nope"):
            a.transfer("nope", [Target(b, "dst")])
        # A target smaller than the source: its agent refuses the grant's range.
        b.create_region("small", 1024)
        with pytest.raises(conduit.InvalidArgument) as refused:
            a.transfer("src", [Target(b, "small")])
        assert refused.value.status == 400, refused.value
        b.delete_region("small")
        assert state(a, b) == before
        assert b.checksum("dst") == crc


def test_a_failed_transfer_raises_its_reason_and_revokes(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    b.create_region("dst", 8 * MiB)
    with a.allocate("src", 8 * MiB) as buf:
        buf.numpy()[:] = 1
        # 8 MiB at 1 MiB/s cannot make a 1 s deadline.
        t = a.transfer("src", [Target(b, "dst")], max_bytes_per_second=MiB, deadline_seconds=1)
        assert len(b.grants()) == 1
        with pytest.raises(conduit.TransferFailed) as e:
            t.wait(timeout=30)
        assert e.value.reason == "DeadlineExceeded" and e.value.message, e.value
        assert e.value.details.get("state") == "Failed"
        assert b.grants() == [], "the failed transfer's grant was not revoked"


def test_leaving_a_with_block_by_an_exception_cancels(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    b.create_region("dst", 8 * MiB)
    with a.allocate("src", 8 * MiB) as buf:
        buf.numpy()[:] = 3
        with pytest.raises(KeyboardInterrupt):
            with a.transfer("src", [Target(b, "dst")], max_bytes_per_second=MiB) as t:
                raise KeyboardInterrupt
        s = t.status()
        assert s.state == "Cancelled" and s.reason == "Cancelled", s
        assert b.grants() == []
        # Wait/progress on a Cancelled transfer says so.
        with pytest.raises(conduit.TransferFailed) as e:
            t.wait(timeout=5, progress=True)
        assert e.value.reason == "Cancelled"


def test_timeout_leaves_the_transfer_running(nodes: Callable[..., list[conduit.Agent]],
                                             agents: AgentPool) -> None:
    a, b = nodes("node-a", "node-b")
    b.create_region("dst", 4 * MiB)
    with a.allocate("src", 4 * MiB):
        t = a.transfer("src", [Target(b, "dst")], max_bytes_per_second=MiB)
        with pytest.raises(TimeoutError, match="still Running"):
            t.wait(timeout=0.5)
        assert len(b.grants()) == 1, "a wait that timed out must not revoke a running transfer's grant"
        assert t.cancel().state == "Cancelled"
        assert b.grants() == []


def test_errors_name_the_agent_they_came_from(nodes: Callable[..., list[conduit.Agent]]) -> None:
    a, b = nodes("node-a", "node-b")
    with pytest.raises(conduit.NotFound) as e:
        b.region("absent")
    assert e.value.agent == b.url and f"from {b.url}" in str(e.value), e.value
    with pytest.raises(conduit.NotFound) as e:  # the target's agent refuses the grant
        a.transfer("absent", [Target(b, "absent")], length=4096)
    assert e.value.agent == b.url, e.value
    with pytest.raises(conduit.Conflict) as e:  # the import socket's refusal names the socket
        a.create_region("taken", 4096)
        a.allocate("taken", 4096)
    assert e.value.agent == f"import socket {a.import_socket}", e.value
    with pytest.raises(conduit.Unavailable) as e:
        conduit.Agent("http://127.0.0.1:9", token="t").regions()
    assert e.value.agent == "http://127.0.0.1:9", e.value


def test_a_missing_token_file_is_unauthorized(nodes: Callable[..., list[conduit.Agent]], work: Any) -> None:
    (a,) = nodes("node-a")
    missing = work / "no-such-token"
    with pytest.raises(conduit.Unauthorized) as e:
        conduit.Agent(a.url, token_file=missing).regions()
    assert str(missing) in e.value.message and e.value.reason == "Unauthorized", e.value
    unreadable = work / "token-dir"
    unreadable.mkdir()
    with pytest.raises(conduit.Unauthorized, match="token-dir"):
        conduit.Agent(a.url, token_file=unreadable).regions()


def test_kube_jobs_configuration_errors_are_conduit_errors(work: Any) -> None:
    pytest.importorskip("kubernetes")
    with pytest.raises(conduit.InvalidArgument) as e:
        conduit.KubeJobs("ml", kubeconfig=work / "no-kubeconfig")
    assert e.value.reason == "InvalidKubeconfig" and "no-kubeconfig" in e.value.message, e.value
    config = work / "kubeconfig"
    config.write_text("apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]"
                      "\nusers: [{name: u, user: {token: x}}]\ncontexts: [{name: good, context: {cluster: c, user: u}}]"
                      "\ncurrent-context: good\n")
    with pytest.raises(conduit.InvalidArgument, match="context bad"):
        conduit.KubeJobs("ml", kubeconfig=config, context="bad")
    assert conduit.KubeJobs("ml", kubeconfig=config, context="good").namespace == "ml"
