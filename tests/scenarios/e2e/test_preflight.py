"""Pre-flight: before each attempt the controller reads the FabricNodes of the job's nodes (docs/reliability.md).

A real kube-apiserver, agents node-a and node-b each in its own network namespace (tcp only: no RDMA here),
the agent Service's EndpointSlice listing both, and the controller in Kubernetes mode discovering them. Then:

1. node-b's agent is down and its FabricNode says Reachable=False: a job into node-b stays Pending, its Running
   condition False with reason PeerUnreachable naming node-b, spending no attempt (backoffLimit 0, retries 0);
   the agent comes back on its address and the job runs and Succeeds, byte-identical.
2. ``transport: efa`` where the FabricNodes say RDMAReady=False and only tcp is served: Failed at once with
   TransportUnavailable naming the nodes, nothing created on node-b; the same job with ``allowFallback: true``
   runs over tcp, ``status.targets[0].transport`` says so and a Warning Event TransportFallback says why.
"""

import json
import time

from e2e.util import ok, start_fabric
from harness import MiB, random_file, wait_for

NODES = ["node-a", "node-b"]
PORT = 7070
NAMESPACE = "conduit-preflight"


def test_preflight_holds_for_a_node_that_does_not_answer_and_fails_a_transport_it_cannot_serve(
        kube, network, agents, build, work, processes, report):
    k = kube(NAMESPACE)
    net = network(*NODES)
    reachable = start_fabric(k, net, agents, processes, build, work, NAMESPACE, NODES, PORT)

    def status(name):
        return k.get(f"/apis/conduit.dev/v1alpha1/namespaces/{NAMESPACE}/transferjobs/{name}").get("status") or {}

    def condition(name, type_):
        return next((c for c in status(name).get("conditions") or [] if c.get("type") == type_), {})

    def apply(name, **spec):
        job = {"apiVersion": "conduit.dev/v1alpha1", "kind": "TransferJob", "metadata": {"name": name},
               "spec": {"source": {"node": "node-a", "region": "weights"},
                        "targets": [{"node": "node-b", "region": name, "create": {"bytes": 64 * MiB}}],
                        "verify": "crc32c", **spec}}
        r = k.kubectl("apply", "-f", "-", input=json.dumps(job))
        assert r.returncode == 0, f"kubectl apply {name}: {r.stderr.strip()}"

    wait_for(lambda: all(reachable(n) == "True" for n in NODES), 30, "both FabricNodes Reachable=True", interval=0.5)
    source = random_file(work / "node-a" / "weights.bin", 64)
    loaded = agents["node-a"].post("/v1/regions", {"name": "weights", "file": "weights.bin", "mode": "load"})
    assert loaded.get("name") == "weights", f"loading the source region: {loaded}"

    # ---- 1. node-b's agent down: the job waits Pending, naming it, and runs once it is back
    b = agents["node-b"]
    b.kill()
    wait_for(lambda: reachable("node-b") == "False", 30, "node-b Reachable=False after its agent was killed",
             interval=0.5)
    apply("held", backoffLimit=0)
    wait_for(lambda: condition("held", "Running").get("reason") == "PeerUnreachable", 20,
             "the job held with reason PeerUnreachable", interval=0.2, detail=lambda: status("held"))
    time.sleep(3)  # several pre-flights later: still waiting, no attempt spent
    held = status("held")
    running = condition("held", "Running")
    assert held.get("phase") == "Pending", f"phase {held.get('phase')}, want Pending: {held}"
    assert running.get("status") == "False" and 'waiting for node "node-b"' in running.get("message", ""), running
    assert int(held.get("retries") or 0) == 0, f"waiting spent an attempt: {held}"
    ok(f"node-b down: job Pending, Running=False PeerUnreachable: {running.get('message')}")

    b.start()
    t_back = time.monotonic()
    wait_for(lambda: status("held").get("phase") in ("Running", "Succeeded", "Failed"), 15,
             "the held job starting once node-b answers", interval=0.1, detail=lambda: status("held"))
    started = time.monotonic() - t_back
    wait_for(lambda: status("held").get("phase") in ("Succeeded", "Failed"), 60, "the held job finishing",
             interval=0.2, detail=lambda: status("held"))
    done = status("held")
    assert done.get("phase") == "Succeeded", f"the held job: {done}"
    assert int(done.get("retries") or 0) == 0, f"retries {done.get('retries')}, want 0"
    b.save_and_compare("held", source)
    assert started < 5, f"the job started {started:.1f} s after node-b came back (discovery alone: up to 5 s)"
    ok(f"node-b back: job Running {started:.2f} s later, Succeeded with 0 retries, byte-identical")
    report(f"held Pending while node-b was down; agent back -> job running {started:.2f} s, Succeeded, 0 retries")

    # ---- 2. efa where no node serves it: Failed at once, unless allowFallback
    t0 = time.monotonic()
    apply("efa", transport={"type": "efa"})
    wait_for(lambda: status("efa").get("phase") == "Failed", 15, "the efa job Failed", interval=0.1,
             detail=lambda: status("efa"))
    took = time.monotonic() - t0
    failed = condition("efa", "Failed")
    message = failed.get("message", "")
    assert failed.get("reason") == "TransportUnavailable", failed
    assert 'node "node-b" cannot serve transport efa: RDMAReady is False' in message, message
    assert "its agent offers tcp" in message and "allowFallback" in message, message
    assert int(status("efa").get("retries") or 0) == 0, status("efa")
    assert b.status_code("GET", "/v1/regions/efa") == 404, "the efa job created its target region on node-b"
    ok(f"transport efa: Failed TransportUnavailable {took:.2f} s after apply: {message}")

    apply("efa-fallback", transport={"type": "efa", "allowFallback": True})
    wait_for(lambda: status("efa-fallback").get("phase") in ("Succeeded", "Failed"), 60,
             "the efa job with allowFallback finishing", interval=0.2, detail=lambda: status("efa-fallback"))
    fell_back = status("efa-fallback")
    assert fell_back.get("phase") == "Succeeded", fell_back
    assert [t.get("transport") for t in fell_back.get("targets") or []] == ["tcp"], fell_back.get("targets")
    events = wait_for(lambda: k.kubectl("get", "events", "--field-selector", "reason=TransportFallback",
                                        "-o", "jsonpath={.items[*].message}").stdout, 10, "a TransportFallback event")
    assert "transport tcp instead of efa (allowFallback)" in events, events
    b.save_and_compare("efa-fallback", source)
    ok("transport efa with allowFallback: Succeeded over tcp (status.targets[0].transport tcp)")
    report(f"efa without RDMA: Failed TransportUnavailable {took:.2f} s after apply; with allowFallback ran over tcp")
