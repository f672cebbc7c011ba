"""Small helpers the e2e scenarios share: the "ok - ..." progress line, a free port, an output's last lines, and a
fabric on the real apiserver (agents in network namespaces, their EndpointSlice, the controller discovering them)."""

import random
import socket

from harness.kube import agent_endpointslice


def ok(what):
    """One passed check, as the bash suites printed it (shown with pytest -s)."""
    print(f"ok - {what}", flush=True)


def last(text, n=1):
    """The last N lines of TEXT on one line, for one-line failure messages."""
    return " ".join(text.strip().splitlines()[-n:])


def free_port(low=20000, span=12000):
    """A port nothing listens on in [LOW, LOW + SPAN). The default range is below the kernel's ephemeral range
    (32768-60999), so no outgoing connection or port-0 listener takes it between now and its use; racy as any
    picked port: a lost race fails the start that uses it, visibly."""
    for _ in range(100):
        p = low + random.randrange(span)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", p))
            except OSError:
                continue
        return p
    raise RuntimeError("no free port")


LINK_RATE = "10Gbit"


def start_fabric(k, net, agents, processes, build, work, namespace, nodes, port):
    """An agent per node of NET on PORT, the agent Service's EndpointSlice in NAMESPACE listing them, and the
    controller in Kubernetes mode watching NAMESPACE and discovering them. Returns reachable(node): the
    Reachable condition's status ("True", "False", "") of the node's FabricNode."""
    agents.network = net
    for n in nodes:
        # A stated link rate, as an operator gives it (agent.linkRate): FabricNodes report it and Reshard
        # jobs' plans have a lower bound.
        agents.start(n, "--memory-cap", "1GiB", "--log-level", "warn", "--link-rate", LINK_RATE, port=port)
    r = k.kubectl("apply", "-f", "-", input=agent_endpointslice(port, {n: net.addr(n) for n in nodes}))
    assert r.returncode == 0, f"Service/EndpointSlice rejected: {r.stderr.strip()}"
    processes.start(
        [build.controller, "--kubeconfig", k.kubeconfig, "--namespace", namespace, "--agent-service",
         "conduit-agent", "--agent-service-namespace", namespace, "--agent-token-file", agents.token_file,
         "--log-level", "info"], name="controller", stdout=work / "controller.out", stderr=work / "controller.log")

    def reachable(node):
        status = k.get(f"/apis/conduit.dev/v1alpha1/fabricnodes/{node}").get("status") or {}
        return next((c.get("status") for c in status.get("conditions") or [] if c.get("type") == "Reachable"), "")

    return reachable
