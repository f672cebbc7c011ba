"""Pods as sources and targets (issue 18): a TransferJob names pods by a label selector instead of nodes.

A real kube-apiserver, one agent per node in its own network namespace (tcp), the agent Service's EndpointSlice
and the controller in Kubernetes mode. A "pod" is what the kubelet would make of one: a Pod object in the job's
namespace bound to its node, a process in its container's cgroup (kubepods/besteffort/pod<UID>/<container ID>,
as the cgroupfs driver names it) that shares a region with its node's agent over the import socket (the agent
records the pod's UID and the container's ID as the region's importedBy), and the Pod's status as the kubelet
reports it (Running, podIP, Ready, the container's ID).

1. Three Ready pods app=infer (node-b, node-c, node-d), one that is not Ready (node-a) and one not scheduled: a
   Fanout job into ``{podSelector: app=infer, region: weights, container: main}`` lands the source in the three
   Ready pods' memory, byte for byte, and leaves the not-Ready pod's alone; status.targets names the three pods in name
   order, status.pods the two left out and why.
2. A selector that matches no Ready pod holds the job Pending (Running=False, NoReadyPods, naming the selector
   and namespace) without spending an attempt; a matching pod that turns Ready starts it within seconds.
3. A region on a selected pod's node that the pod did not share (made through the agent's API, or shared by
   another pod) fails the job with RegionNotOwnedByPod, writing nothing; a pod's region named by node and region
   instead of a podSelector fails it with RegionOwnedByPod.
4. A source podSelector: the one Ready trainer pod's shared memory is the source; node-b's region ends up
   byte-identical.
"""

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from e2e.util import ok, start_fabric
from harness import MiB, random_file, wait_for
from harness.agents import first_difference

PORT = 7070
NAMESPACE = "conduit-pods"
JOBS = f"/apis/conduit.dev/v1alpha1/namespaces/{NAMESPACE}/transferjobs"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
SIZE = 24 * MiB + 12345  # not a multiple of the 1 MiB chunk
UNTOUCHED = 0xEE  # what a target pod's buffer holds until a transfer writes it
REPO = Path(__file__).resolve().parents[3]

# The workload in a pod: joins the pod's cgroup first (as the container runtime puts a container's process
# there), shares a buffer with its node's agent through the SDK, then dumps the buffer to a file on request
# ("dump PATH" on stdin -> "dumped PATH" on stdout) until its stdin closes.
POD_PROGRAM = r'''
import argparse, os, sys
p = argparse.ArgumentParser()
for flag in ("--cgroup", "--url", "--token-file", "--socket", "--region", "--fill-from"):
    p.add_argument(flag)
p.add_argument("--bytes", type=int)
p.add_argument("--fill-byte", type=int, default=0)
a = p.parse_args()
with open(os.path.join(a.cgroup, "cgroup.procs"), "w") as f:
    f.write(str(os.getpid()))
import numpy as np
import conduit
agent = conduit.Agent(a.url, token_file=a.token_file, import_socket=a.socket)
buf = agent.allocate(a.region, a.bytes)
view = buf.numpy()
view[:] = np.fromfile(a.fill_from, np.uint8, count=a.bytes) if a.fill_from else a.fill_byte
print("shared", flush=True)
for line in sys.stdin:
    cmd, _, path = line.strip().partition(" ")
    if cmd == "dump":
        with open(path + ".tmp", "wb") as f:
            f.write(buf.memoryview())
        os.rename(path + ".tmp", path)
        print("dumped", path, flush=True)
'''


def cgroup_root():
    """A writable cgroup hierarchy to make pod cgroups in (cgroup v1 pids first, else cgroup2), or None."""
    for root in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup/unified"), Path("/sys/fs/cgroup")):
        if not (root / "cgroup.procs").exists():
            continue
        probe = root / f"conduit-probe-{os.getpid()}"
        try:
            probe.mkdir()
            probe.rmdir()
        except OSError:
            continue
        return root
    return None


class Pod:
    """A Pod object and, when it runs a workload, its process sharing REGION with its node's agent."""

    def __init__(self, name, node, uid, process=None, cgroup=None, region=None):
        self.name, self.node, self.uid = name, node, uid
        self.process, self.cgroup, self.region = process, cgroup, region
        self.container_id = None  # the runtime's ID of its container "main", once its workload runs

    def dump(self, path, timeout=30):
        """The pod's buffer, written by the pod itself to PATH: what its workload sees in its memory."""
        path.unlink(missing_ok=True)
        done = f"dumped {path}\n"
        before = self.process.read_stdout().count(done)
        self.process.stdin.write(f"dump {path}\n".encode())
        self.process.stdin.flush()
        wait_for(lambda: self.process.read_stdout().count(done) > before or not self.process.running(), timeout,
                 f"pod {self.name} dumping its buffer")
        assert path.exists(), f"pod {self.name} did not dump its buffer: {self.process.read_stderr()[-500:]}"
        return path


class Cluster:
    """The apiserver, the nodes' agents, the controller, and the pods of one test (removed by the fixture)."""

    def __init__(self, kube, net, agents, processes, work, cgroups):
        self.k, self.net, self.agents, self.processes, self.work = kube, net, agents, processes, work
        self.cgroups = cgroups  # the cgroup hierarchy pods are made in
        self.pods = {}
        self.program = work / "pod.py"
        self.program.write_text(POD_PROGRAM)

    # ---- pods
    def pod(self, name, node, labels, *, region=None, nbytes=SIZE, fill_byte=UNTOUCHED, fill_from=None,
            ready=True):
        """Pod NAME on NODE (None: not scheduled) with LABELS; with REGION, its process shares NBYTES as REGION
        (filled with FILL_BYTE, or FILL_FROM's bytes) before the pod is reported Running and READY."""
        body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels},
                "spec": {"containers": [{"name": "main", "image": "registry.invalid/infer:1"}]}}
        if node:
            body["spec"]["nodeName"] = node
        r = self.k.request("POST", PODS, body=body)
        assert r.status_code == 201, f"creating pod {name}: {r.status_code} {r.text[:300]}"
        pod = self.pods[name] = Pod(name, node, r.json()["metadata"]["uid"])
        if region:
            self._run_workload(pod, region, nbytes, fill_byte, fill_from)
        if node:
            self.set_ready(name, ready)
        return pod

    def _run_workload(self, pod, region, nbytes, fill_byte, fill_from):
        # The container's cgroup under its pod's, named by its runtime ID, as the kubelet's cgroupfs driver does.
        pod.container_id = uuid.uuid4().hex + uuid.uuid4().hex
        pod.cgroup = self.cgroups / "kubepods" / "besteffort" / f"pod{pod.uid}" / pod.container_id
        pod.cgroup.mkdir(parents=True)
        pod.region = region
        agent = self.agents[pod.node]
        argv = [sys.executable, self.program, "--cgroup", pod.cgroup, "--url", agent.url,
                "--token-file", self.agents.token_file, "--socket", agent.socket, "--region", region,
                "--bytes", str(nbytes), "--fill-byte", str(fill_byte)]
        if fill_from:
            argv += ["--fill-from", fill_from]
        pod.process = self.processes.start(argv, name=f"pod {pod.name}", stdin=subprocess.PIPE,
                                           stdout=self.work / f"pod-{pod.name}.out",
                                           stderr=self.work / f"pod-{pod.name}.log",
                                           env={"PYTHONPATH": os.fspath(REPO / "python")})
        wait_for(lambda: "shared" in pod.process.read_stdout() or not pod.process.running(), 30,
                 f"pod {pod.name} sharing {region}")
        assert pod.process.running(), f"pod {pod.name}'s workload exited: {pod.process.read_stderr()[-800:]}"
        # What the kubelet's placement gives the agent to go on: the process's cgroup and the region's owner.
        cgroup = Path(f"/proc/{pod.process.pid}/cgroup").read_text()
        assert f"/kubepods/besteffort/pod{pod.uid}" in cgroup, f"pod {pod.name} not in its cgroup: {cgroup}"
        owner = agent.get(f"/v1/regions/{region}").get("importedBy") or {}
        assert (owner.get("podUID"), owner.get("containerID"), owner.get("pid")) == \
            (pod.uid, pod.container_id, pod.process.pid), \
            f"{region} on {pod.node}: importedBy {owner}, want pod {pod.uid} container {pod.container_id}"

    def set_ready(self, name, ready):
        """The Pod's status as the kubelet reports a running container (Ready or not) on its node."""
        ip = self.net.addr(self.pods[name].node)
        flag = "True" if ready else "False"
        started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        status = {"phase": "Running", "hostIP": ip, "podIP": ip, "podIPs": [{"ip": ip}],
                  "conditions": [{"type": "PodScheduled", "status": "True"},
                                 {"type": "Initialized", "status": "True"},
                                 {"type": "ContainersReady", "status": flag},
                                 {"type": "Ready", "status": flag}],
                  "containerStatuses": [{"name": "main", "image": "registry.invalid/infer:1", "imageID": "",
                                         "ready": ready, "started": True, "restartCount": 0,
                                         "state": {"running": {"startedAt": started}}}]}
        if self.pods[name].container_id:
            status["containerStatuses"][0]["containerID"] = f"containerd://{self.pods[name].container_id}"
        r = self.k.request("PATCH", f"{PODS}/{name}/status", body={"status": status},
                           headers={"Content-Type": "application/merge-patch+json"})
        assert r.status_code == 200, f"pod {name} status: {r.status_code} {r.text[:300]}"

    def close(self):
        """Stop the pods' processes, then remove their cgroups (a cgroup goes only once it is empty)."""
        for pod in self.pods.values():
            if pod.process:
                pod.process.kill()
        for pod in self.pods.values():
            for d in (pod.cgroup, pod.cgroup.parent) if pod.cgroup else ():
                for _ in range(50):
                    try:
                        d.rmdir()
                        break
                    except FileNotFoundError:
                        break
                    except OSError:
                        time.sleep(0.1)
        for d in (self.cgroups / "kubepods" / "besteffort", self.cgroups / "kubepods"):
            try:
                d.rmdir()  # only when no other pod (another run's, a real kubelet's) is in it
            except OSError:
                pass

    # ---- jobs
    def apply(self, name, **spec):
        job = {"apiVersion": "conduit.dev/v1alpha1", "kind": "TransferJob", "metadata": {"name": name},
               "spec": {"verify": "crc32c", **spec}}
        r = self.k.kubectl("apply", "-f", "-", input=json.dumps(job))
        assert r.returncode == 0, f"kubectl apply {name}: {r.stderr.strip()}"

    def status(self, name):
        return self.k.get(f"{JOBS}/{name}").get("status") or {}

    def condition(self, name, type_):
        return next((c for c in self.status(name).get("conditions") or [] if c.get("type") == type_), {})

    def finish(self, name, timeout=60):
        """The job's status once it Succeeded or Failed."""
        wait_for(lambda: self.status(name).get("phase") in ("Succeeded", "Failed"), timeout, f"job {name} finishing",
                 interval=0.2, detail=lambda: self.status(name))
        return self.status(name)

    def pods_status(self, name):
        """status.pods by pod name."""
        return {p.get("name"): p for p in self.status(name).get("pods") or []}


@pytest.fixture
def cluster(kube, network, agents, build, work, processes):
    """Factory: ``c = cluster("node-a", "node-b")``: the apiserver, an agent per node (in the EndpointSlice,
    Reachable in its FabricNode), the controller in Kubernetes mode; ``c.pod(...)`` makes pods. Skips where
    no cgroup hierarchy is writable (a pod's process could not be placed in its pod's cgroup)."""
    cgroups = cgroup_root()
    if cgroups is None:
        pytest.skip("no writable cgroup hierarchy (/sys/fs/cgroup/pids or a cgroup2 mount): a pod's process "
                    "cannot be placed in a kubepods/.../pod<UID> cgroup, so the agent cannot tell its pod")
    made = []

    def start(*nodes):
        k = kube(NAMESPACE)
        net = network(*nodes)
        reachable = start_fabric(k, net, agents, processes, build, work, NAMESPACE, nodes, PORT)
        c = Cluster(k, net, agents, processes, work, cgroups)
        made.append(c)
        wait_for(lambda: all(reachable(n) == "True" for n in nodes), 30, "every FabricNode Reachable=True",
                 interval=0.5)
        return c

    yield start
    for c in made:
        c.close()


def same_bytes(a, b):
    """None when files A and B hold the same bytes; else where they differ."""
    if a.stat().st_size != b.stat().st_size:
        return f"{b} has {b.stat().st_size} bytes, {a} {a.stat().st_size}"
    return first_difference(a, b)


def test_pod_selector_targets_the_ready_pods_waits_for_one_and_refuses_regions_they_did_not_share(
        cluster, agents, work, report):
    c = cluster("node-a", "node-b", "node-c", "node-d")
    source = random_file(work / "node-a" / "checkpoint.bin", size=SIZE)
    loaded = agents["node-a"].post("/v1/regions", {"name": "checkpoint", "file": "checkpoint.bin", "mode": "load"})
    assert loaded.get("name") == "checkpoint" and int(loaded.get("bytes") or 0) == SIZE, loaded
    infer = {"app": "infer"}
    for name, node in (("infer-d", "node-d"), ("infer-b", "node-b"), ("infer-c", "node-c")):
        c.pod(name, node, infer, region="weights")
    c.pod("infer-a", "node-a", infer, region="weights", ready=False)  # running, its readiness probe failing
    c.pod("infer-unscheduled", None, infer)  # no node yet
    ok("pods: infer-b/c/d Ready, infer-a not Ready, infer-unscheduled without a node; each sharing pod's "
       "region has importedBy.podUID = its Pod's UID")

    # ---- 1. Fanout into the Ready pods' memory
    t0 = time.monotonic()
    c.apply("infer", source={"node": "node-a", "region": "checkpoint"}, strategy="Fanout",
            targets=[{"podSelector": {"matchLabels": infer}, "region": "weights", "container": "main"}])
    done = c.finish("infer")
    took = time.monotonic() - t0
    assert done.get("phase") == "Succeeded", f"the fanout to app=infer: {done}"
    targets = [(t.get("pod"), t.get("node"), t.get("region")) for t in done.get("targets") or []]
    assert targets == [("infer-b", "node-b", "weights"), ("infer-c", "node-c", "weights"),
                       ("infer-d", "node-d", "weights")], f"status.targets: {done.get('targets')}"
    for name in ("infer-b", "infer-c", "infer-d"):
        where = same_bytes(source, c.pods[name].dump(work / f"{name}.dump"))
        assert where is None, f"pod {name}'s buffer is not the source's: {where}"
    left = c.pods["infer-a"].dump(work / "infer-a.dump").read_bytes()
    assert left == bytes([UNTOUCHED]) * SIZE, "the not-Ready pod infer-a's buffer was written"
    pods = c.pods_status("infer")
    assert set(pods) == {"infer-a", "infer-b", "infer-c", "infer-d", "infer-unscheduled"}, f"status.pods in {done}"
    for name in ("infer-b", "infer-c", "infer-d"):
        p = pods[name]
        assert (p.get("uid"), p.get("node"), p.get("role"), p.get("state"), p.get("containerID")) == \
            (c.pods[name].uid, c.pods[name].node, "target", "Selected", c.pods[name].container_id), \
            f"status.pods {name}: {p}"
    for name in ("infer-a", "infer-unscheduled"):
        p = pods[name]
        assert (p.get("role"), p.get("state")) == ("target", "LeftOut") and p.get("message"), \
            f"status.pods {name}: {p}"
    assert "ready" in pods["infer-a"]["message"].lower(), f"infer-a left out for: {pods['infer-a']['message']}"
    ok(f"fanout to app=infer: Succeeded in {took:.1f} s, 3 pods' memory byte-identical; left out: "
       f"infer-a ({pods['infer-a']['message']}), infer-unscheduled ({pods['infer-unscheduled']['message']})")
    report(f"podSelector app=infer -> 3 Ready pods of 4 ({SIZE} bytes each, byte-identical) in {took:.1f} s")

    # ---- 2. No Ready pod yet: Pending, then running once one is Ready
    nobody = {"app": "nobody"}
    c.apply("late", source={"node": "node-a", "region": "checkpoint"},
            targets=[{"podSelector": {"matchLabels": nobody}, "region": "late"}], backoffLimit=0)
    wait_for(lambda: c.condition("late", "Running").get("reason") == "NoReadyPods", 20,
             "the job held with reason NoReadyPods", interval=0.2, detail=lambda: c.status("late"))
    time.sleep(3)  # several reconciles later: still waiting, no attempt spent
    held, running = c.status("late"), c.condition("late", "Running")
    assert held.get("phase") == "Pending", f"phase {held.get('phase')}, want Pending: {held}"
    assert running.get("status") == "False" and running.get("reason") == "NoReadyPods", running
    assert "app=nobody" in running.get("message", "") and NAMESPACE in running.get("message", ""), running
    assert int(held.get("retries") or 0) == 0, f"waiting spent an attempt: {held}"
    ok(f"no Ready pod: job Pending, Running=False NoReadyPods: {running.get('message')}")

    c.pod("nobody-d", "node-d", nobody, region="late", ready=False)
    time.sleep(1)
    assert c.status("late").get("phase") == "Pending", f"started on a pod that is not Ready: {c.status('late')}"
    c.set_ready("nobody-d", True)
    t_ready = time.monotonic()
    wait_for(lambda: c.status("late").get("phase") in ("Running", "Succeeded", "Failed"), 10,
             "the held job starting once nobody-d is Ready", interval=0.1, detail=lambda: c.status("late"))
    started = time.monotonic() - t_ready
    done = c.finish("late")
    assert done.get("phase") == "Succeeded", f"the job held for app=nobody: {done}"
    assert [t.get("pod") for t in done.get("targets") or []] == ["nobody-d"], done.get("targets")
    where = same_bytes(source, c.pods["nobody-d"].dump(work / "nobody-d.dump"))
    assert where is None, f"pod nobody-d's buffer is not the source's: {where}"
    assert started < 3, f"the job started {started:.1f} s after its pod turned Ready (want about a second)"
    ok(f"nobody-d Ready: job running {started:.2f} s later, Succeeded, byte-identical")
    report(f"no Ready pod: Pending NoReadyPods; pod Ready -> job running {started:.2f} s, Succeeded")

    # ---- 3. The region on the pod's node is not the pod's
    c.pod("owner-c", "node-c", {"app": "owner"}, region="own", nbytes=MiB)
    made = agents["node-c"].post("/v1/regions", {"name": "kv", "bytes": SIZE})
    assert made.get("name") == "kv", f"creating kv on node-c: {made}"
    weights_version = agents["node-c"].get("/v1/regions/weights").get("version")
    for job, region, holder in (("not-owned", "kv", "the agent's API"), ("other-pods", "weights", "infer-c")):
        c.apply(job, source={"node": "node-a", "region": "checkpoint"}, backoffLimit=0,
                targets=[{"podSelector": {"matchLabels": {"app": "owner"}}, "region": region}])
        done = c.finish(job, timeout=20)
        failed = c.condition(job, "Failed")
        assert done.get("phase") == "Failed" and failed.get("reason") == "RegionNotOwnedByPod", \
            f"{region} on owner-c's node, made by {holder}: {done}"
        assert "owner-c" in failed.get("message", ""), f"the message does not name the pod: {failed}"
        ok(f"{region} made by {holder}: Failed RegionNotOwnedByPod: {failed.get('message')}")
    # infer-c's region named by node and region, not through a podSelector: no job claims a pod's memory so.
    c.apply("by-node", source={"node": "node-a", "region": "checkpoint"}, backoffLimit=0,
            targets=[{"node": "node-c", "region": "weights"}])
    done = c.finish("by-node", timeout=20)
    failed = c.condition("by-node", "Failed")
    assert done.get("phase") == "Failed" and failed.get("reason") == "RegionOwnedByPod", \
        f"infer-c's weights named by node and region: {done}"
    assert c.pods["infer-c"].uid in failed.get("message", ""), f"the message does not name the pod: {failed}"
    ok(f"infer-c's weights named by node: Failed RegionOwnedByPod: {failed.get('message')}")
    assert agents["node-c"].get("/v1/regions/kv").get("version") == 0, "kv on node-c was written"
    assert agents["node-c"].get("/v1/regions/weights").get("version") == weights_version, \
        "infer-c's weights were written by a job for owner-c"
    report("a region on the pod's node that the pod did not share: Failed RegionNotOwnedByPod, nothing written")


def test_pod_selector_source_is_the_one_ready_pods_memory(cluster, agents, work, report):
    c = cluster("node-a", "node-b")
    size = 16 * MiB + 777
    data = random_file(work / "trainer.bin", size=size)
    trainer = {"app": "trainer"}
    c.pod("trainer-a", "node-a", trainer, region="src", nbytes=size, fill_from=data)
    c.pod("trainer-b", "node-b", trainer, region="src", nbytes=size, ready=False)  # a second, not Ready
    ok("pods: trainer-a Ready sharing src on node-a, trainer-b not Ready sharing src on node-b")

    t0 = time.monotonic()
    c.apply("from-trainer", source={"podSelector": {"matchLabels": trainer}, "region": "src"},
            targets=[{"node": "node-b", "region": "from-trainer", "create": {"bytes": size}}])
    done = c.finish("from-trainer")
    took = time.monotonic() - t0
    assert done.get("phase") == "Succeeded", f"the job from app=trainer: {done}"
    agents["node-b"].save_and_compare("from-trainer", data)
    pods = c.pods_status("from-trainer")
    a = pods.get("trainer-a") or {}
    assert (a.get("uid"), a.get("node"), a.get("role"), a.get("state")) == \
        (c.pods["trainer-a"].uid, "node-a", "source", "Selected"), f"status.pods in {done}"
    b = pods.get("trainer-b") or {}
    assert (b.get("role"), b.get("state")) == ("source", "LeftOut") and b.get("message"), f"status.pods in {done}"
    ok(f"source app=trainer: trainer-a's memory -> node-b, Succeeded in {took:.1f} s, byte-identical")
    report(f"source podSelector: the Ready trainer pod's {size} bytes -> node-b in {took:.1f} s, byte-identical")
