"""The SDK as an operator with a client certificate (docs/security.md, "Identities"): a real agent over HTTPS
that takes certificates signed by its --client-ca-file; the SDK given the operator's certificate works with no
token, an agent's certificate is refused what only operators may do, and nothing at all is refused with the
reason."""

from __future__ import annotations

from pathlib import Path

import pytest

import conduit
from harness import AgentPool
from harness.tls import CA


@pytest.fixture
def tls_agent(agents: AgentPool, work: Path) -> tuple[str, CA]:
    ca = CA(work / "tls")
    serving = ca.issue("node-a", ips=["127.0.0.1"])
    agents.ca = ca.cert
    agents.verify = str(ca.cert)
    a = agents.start("node-a", "--tls-cert", str(serving.cert), "--tls-key", str(serving.key),
                     "--client-ca-file", str(ca.cert), "--memory-cap", "1GiB")
    assert a.url.startswith("https://")
    return a.url, ca


def test_an_operator_certificate_needs_no_token(tls_agent: tuple[str, CA]) -> None:
    url, ca = tls_agent
    op = ca.issue("conduit:operator", client=True)
    agent = conduit.Agent(url, token="", ca_cert=ca.cert, client_cert=(op.cert, op.key))
    agent.create_region("weights", 1 << 20)
    assert [r.name for r in agent.regions()] == ["weights"]
    # A region of team-a that team-b's jobs may use too (docs/security.md, "Tenancy").
    shared = agent.create_region("kv", 1 << 20, namespace="team-a", shared_with=["team-b"])
    assert (shared.raw["namespace"], shared.raw["sharedWith"]) == ("team-a", ["team-b"])


def test_an_agents_certificate_may_not_manage_regions(tls_agent: tuple[str, CA]) -> None:
    url, ca = tls_agent
    peer = ca.issue("conduit:agent:node-b", client=True)
    agent = conduit.Agent(url, token="", ca_cert=ca.cert, client_cert=(peer.cert, peer.key))
    with pytest.raises(conduit.Forbidden) as refused:
        agent.create_region("weights", 1 << 20)
    assert refused.value.status == 403
    assert 'the agent of node "node-b" may not POST /v1/regions' in refused.value.message


def test_no_certificate_and_no_token_is_unauthorized(tls_agent: tuple[str, CA]) -> None:
    url, ca = tls_agent
    with pytest.raises(conduit.Unauthorized, match="missing bearer token"):
        conduit.Agent(url, token="", ca_cert=ca.cert).regions()
