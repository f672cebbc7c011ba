"""A four-node cluster on one machine, end to end (formerly tests/e2e/cluster_test.sh).

A real kube-apiserver, four conduit-agents each in its own network namespace (node-a..node-d, veth addresses
on a private bridge), the agent Service's EndpointSlice listing them as a kubelet-backed cluster would, and
the conduit-controller in Kubernetes mode discovering them from it. Then, with real kubectl, the shipped
examples run as a user runs them: point-to-point, fanout 1->3, file load and chain 1->3, all at once; the bytes each
target ends up with are saved by its agent and compared with the source files byte for byte. Last, a node's
link is cut and restored and its FabricNode follows, and the controller stops cleanly on SIGTERM.

The agents are started by the harness's ProcessSet (`ip netns exec` execs the agent, so the pid it keeps is
the agent's own): none survives the test, which the harness checks.
"""

import time

from e2e.util import ok
from harness import MiB, random_file, wait_for
from harness.kube import agent_endpointslice

NODES = ["node-a", "node-b", "node-c", "node-d"]
PORT = 7070
NAMESPACE = "conduit-e2e"


def same_bytes(a, b, length=None):
    """None when the first LENGTH bytes (all of both files when None) of A and B are equal, else how they
    differ, as cmp says it."""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        at = 0
        while length is None or at < length:
            want = 4 * MiB if length is None else min(4 * MiB, length - at)
            x, y = fa.read(want), fb.read(want)
            if x != y:
                for i, (p, q) in enumerate(zip(x, y)):
                    if p != q:
                        return f"{a} {b} differ: byte {at + i + 1}"
                return f"EOF on {a if len(x) < len(y) else b} after byte {at + min(len(x), len(y))}"
            if not x:
                return None
            at += len(x)
    return None


def test_four_node_cluster(kube, network, agents, build, work, processes, repo_root):
    k = kube(NAMESPACE)

    def kc(*args, **kw):
        return k.kubectl(*args, **kw)

    # ---- four nodes, one agent each, listening on its veth address
    net = network(*NODES)
    agents.network = net
    for n in NODES:
        (work / n / "checkpoints").mkdir(parents=True)
        agents.start(n, "--memory-cap", "2GiB", "--log-level", "warn", port=PORT)
    ok(f"4 agents in network namespaces at {' '.join(net.addr(n) for n in NODES)}")

    # ---- the agent Service and its EndpointSlice: what the endpointslice controller writes for a DaemonSet
    r = kc("apply", "-f", "-", input=agent_endpointslice(PORT, {n: net.addr(n) for n in NODES}))
    assert r.returncode == 0, f"Service/EndpointSlice rejected: {r.stderr.strip()}"

    controller = processes.start(
        [build.controller, "--kubeconfig", k.kubeconfig, "--namespace", NAMESPACE, "--agent-service",
         "conduit-agent", "--agent-service-namespace", NAMESPACE, "--agent-token-file", agents.token_file,
         "--log-level", "warn"], name="controller", stdout=work / "controller.out", stderr=work / "controller.log")

    def reachable(node):
        return kc("get", "fabricnode", node, "-o",
                  'jsonpath={.status.conditions[?(@.type=="Reachable")].status}').stdout.strip()

    def controller_log(lines=5):
        return " ".join((work / "controller.log").read_text(errors="replace").splitlines()[-lines:])

    wait_for(lambda: all(reachable(n) == "True" for n in NODES), 30,
             "every FabricNode Reachable=True", interval=0.5,
             detail=lambda: f"{' '.join(kc('get', 'fabricnodes').stdout.split())}; controller log: "
                            f"{controller_log()}")
    listed = kc("get", "fabricnodes")
    print(listed.stdout)
    rows = [ln for ln in kc("get", "fabricnodes", "--no-headers").stdout.splitlines() if ln.strip()]
    assert len(rows) == 4, f"kubectl get fabricnodes lists {len(rows)} nodes, not 4"
    ok("the controller found the 4 agents through the EndpointSlice: 4 FabricNodes Reachable")

    # ---- source data: random bytes in files, loaded into regions on node-a
    a_dir = work / "node-a"
    random_file(a_dir / "kv-cache.bin", 256)
    random_file(a_dir / "weights.bin", 256)
    # Smaller than the region the file-load example creates for it (256 MiB): "at least the size of the file".
    random_file(a_dir / "checkpoints" / "step-1000.bin", 200)
    for region in ("kv-cache", "weights"):
        created = agents["node-a"].post("/v1/regions", {"name": region, "file": f"{region}.bin", "mode": "load"},
                                        timeout=60)
        assert created.get("name") == region, f"loading region {region} on node-a: {created}"
    ok("source regions kv-cache and weights (256 MiB of random bytes each) loaded on node-a")

    # ---- the three examples, applied together as shipped
    jobs = ["point-to-point", "fanout", "file-load", "chain"]
    t0 = time.monotonic()
    r = kc("apply", *(a for j in jobs for a in ("-f", repo_root / "crds/examples" / f"{j}.yaml")))
    assert r.returncode == 0, f"kubectl apply of the examples: {(r.stderr or r.stdout).strip()}"
    # Progress while they run, as a user watching them sees it.
    progress = ""
    for _ in range(50):
        progress = kc("get", "transferjobs").stdout
        if "Running" in progress:
            break
        time.sleep(0.1)
    print(progress)
    for job in jobs:
        r = kc("wait", "--for=condition=Complete", f"transferjob/{job}", "--timeout=180s", timeout=200)
        status = kc("get", "transferjob", job, "-o", "jsonpath={.status}").stdout
        assert r.returncode == 0, f"{job} not Complete: {(r.stderr or r.stdout).strip()}; {status}"
    elapsed = time.monotonic() - t0
    done = kc("get", "transferjobs").stdout
    print(done)
    succeeded = [ln for ln in done.splitlines() if "Succeeded" in ln and "100%" in ln.split("Succeeded", 1)[1]]
    assert len(succeeded) == 4, f"kubectl get transferjobs does not show 4 jobs Succeeded at 100%:\n{done}"
    ok(f"point-to-point, fanout 1->3, file-load and chain 1->3 Complete in {elapsed:.1f} s; get shows Succeeded "
       "100%")
    wide = kc("get", "transferjob", "chain", "-o", "wide").stdout
    print(wide)
    assert "Chain" in wide and "100%,100%,100%" in wide, f"-o wide does not show each hop at 100%:\n{wide}"
    ok("kubectl get transferjob chain -o wide: Targets 100%,100%,100% (hop by hop)")

    for job in jobs:
        verified = kc("get", "transferjob", job, "-o",
                      "jsonpath={range .status.targets[*]}{.node}={.verified} {end}").stdout
        assert verified and "false" not in verified, f"{job} targets not all verified: '{verified}'"
    ok("every target reports verified=true (crc32c)")

    # ---- the bytes, from the targets' own memory: saved by their agents, compared with the source files
    def save(node, region):
        saved = agents[node].post(f"/v1/regions/{region}/save", {"file": f"saved-{region}.bin"}, timeout=60)
        path = work / node / f"saved-{region}.bin"
        assert path.exists() and path.stat().st_size > 0, f"saving {region} on {node}: {saved}"
        return path

    why = same_bytes(a_dir / "kv-cache.bin", save("node-b", "kv-cache"))
    assert why is None, f"point-to-point: node-b's bytes differ: {why}"
    for n in ("node-b", "node-c", "node-d"):
        why = same_bytes(a_dir / "weights.bin", save(n, "weights"))
        assert why is None, f"fanout: {n}'s bytes differ: {why}"
    why = same_bytes(a_dir / "checkpoints" / "step-1000.bin", save("node-b", "step-1000"), 200 * MiB)
    assert why is None, f"file-load: node-b's bytes differ from the file: {why}"
    for n in ("node-d", "node-c", "node-b"):
        why = same_bytes(a_dir / "weights.bin", save(n, "weights-chain"))
        assert why is None, f"chain: {n}'s bytes differ: {why}"
    ok("target bytes identical to the sources (cmp): node-b kv-cache, weights on node-b/c/d, step-1000 on node-b, "
       "weights-chain on node-d/c/b")
    forwarded = {n: agents[n].metric("conduit_agent_forwarded_bytes_total") for n in ("node-d", "node-c", "node-b")}
    assert forwarded["node-d"] >= 256 * MiB and forwarded["node-c"] >= 256 * MiB and forwarded["node-b"] == 0, \
        f"conduit_agent_forwarded_bytes_total per hop: {forwarded} (want node-d and node-c >= 256 MiB, node-b 0)"
    ok(f"bytes forwarded per hop (conduit_agent_forwarded_bytes_total): {forwarded}")

    for n in ("node-b", "node-c", "node-d"):
        grants = agents[n].get("/v1/grants").get("items")
        assert grants == [], f"{n} still holds {len(grants) if grants is not None else '?'} grants after every " \
                             f"job finished"
    ok("no grant left on any target after the jobs finished")

    # ---- a cut link: node-d's veth down, its FabricNode turns unreachable; up again, reachable again
    net.link_down("node-d")
    try:
        wait_for(lambda: reachable("node-d") == "False", 30, "node-d Reachable=False after its link was cut",
                 interval=0.5, detail=lambda: f"node-d still Reachable={reachable('node-d')}")
    finally:
        net.link_up("node-d")
    wait_for(lambda: reachable("node-d") == "True", 30, "node-d Reachable=True after its link came back",
             interval=0.5, detail=lambda: f"node-d Reachable={reachable('node-d')}")
    ok("node-d's link cut: FabricNode Reachable=False; restored: True again")

    rc = controller.terminate(timeout=30)
    assert rc == 0, f"the controller exited {rc} on SIGTERM (None: it had to be killed)"
    ok("controller stopped cleanly on SIGTERM")
