"""What a cluster user sees of the DRA driver conduit.dev (docs/dra.md): its ResourceSlices match the node's
devices, kube-scheduler allocates a claim for a GPU and a NIC on one PCIe root (for every GPU of a p5-like node),
a claim that cannot be met leaves its pod Pending with the scheduler's reason, the slices follow devices coming
and going, and a node's driver cannot write another node's slices."""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from dra.cluster import NAMESPACE, REPO, Cluster, foreign_slice
from harness.wait import wait_for

ROOT = "resource.kubernetes.io/pcieRoot"
EXAMPLE = REPO / "helm/conduit/examples/dra-gpu-nic-claim.yaml"


def example_template() -> dict:
    """The chart's example ResourceClaimTemplate, as a user would apply it."""
    return next(d for d in yaml.safe_load_all(EXAMPLE.read_text()) if d["kind"] == "ResourceClaimTemplate")


def published(c: Cluster, node: str, count: int) -> dict[str, dict]:
    return wait_for(lambda: (d := c.devices(node)) and len(d) == count and d, 20,
                    f"{count} devices of {node} published", detail=lambda: sorted(c.devices(node)))


def pod(name: str, node: str, template: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                     "resourceClaims": [{"name": "gpu-nic", "resourceClaimTemplateName": template}],
                     "containers": [{"name": "c", "image": "localhost/none:0",
                                     "resources": {"claims": [{"name": "gpu-nic"}]}}]}}


def pods_path() -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/pods"


def allocation(c: Cluster, name: str) -> dict[str, str]:
    """{request name: device name} of pod NAME's claim, once the scheduler bound the pod and allocated it."""
    def done() -> dict[str, str] | None:
        p = c.ok("GET", f"{pods_path()}/{name}")
        statuses = p.get("status", {}).get("resourceClaimStatuses", [])
        if not p["spec"].get("nodeName") or not statuses:
            return None
        claim = c.ok("GET", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/"
                            f"{statuses[0]['resourceClaimName']}")
        results = claim.get("status", {}).get("allocation", {}).get("devices", {}).get("results", [])
        assert all(r["driver"] == "conduit.dev" and r["pool"] == p["spec"]["nodeName"] for r in results), results
        reserved = [r["name"] for r in claim["status"].get("reservedFor", [])]
        return {r["request"]: r["device"] for r in results} if name in reserved else None
    return wait_for(done, 30, f"pod {name} scheduled with its claim allocated",
                    detail=lambda: c.ok("GET", f"{pods_path()}/{name}").get("status"))


def delete_pods(c: Cluster, *names: str) -> None:
    for n in names:
        c.api("DELETE", f"{pods_path()}/{n}?gracePeriodSeconds=0")


def apply_template(c: Cluster, t: dict) -> None:
    r = c.api("POST", f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaimtemplates", t)
    assert r.status_code in (201, 409), r.text


def test_slices_match_the_trees(cluster: Cluster, report) -> None:
    c = cluster
    t0 = time.monotonic()
    devs = published(c, "dra-8x8", 16)
    for i in range(8):
        gpu, nic = devs[f"gpu-{i}"], devs[f"nic-mlx5-{i}"]
        assert gpu[ROOT] == nic[ROOT], f"gpu-{i} on {gpu[ROOT]}, nic-mlx5-{i} on {nic[ROOT]}"
        assert (nic["type"], nic["linkGbps"], nic["transports"], nic["ifName"], nic["rail"]) == \
            ("nic", 400, "verbs,tcp", f"ibp{i}", i), nic
        assert (gpu["type"], gpu["rails"], gpu["numaNode"]) == ("gpu", str(i), i // 4), gpu
    assert len({devs[f"gpu-{i}"][ROOT] for i in range(8)}) == 8, "each GPU on a root of its own"

    devs = published(c, "dra-p5", 40)
    gpus = {n: a for n, a in devs.items() if a["type"] == "gpu"}
    efa = {n: a for n, a in devs.items() if a["type"] == "nic"}
    assert len(gpus) == 8 and len(efa) == 32
    assert all((a["transports"], a["efa"], a["verbs"], a["linkGbps"], "ifName" in a) == ("efa", True, False, 100, False)
               for a in efa.values()), efa
    for g, a in gpus.items():
        on_root = [n for n, e in efa.items() if e[ROOT] == a[ROOT]]
        assert len(on_root) == 4, f"{g} on {a[ROOT]}: EFA there {on_root}"

    # One pool per node, named for it, owned by its Node (deleted with it), nodeName set.
    for node in ("dra-8x8", "dra-p5"):
        uid = c.ok("GET", f"/api/v1/nodes/{node}")["metadata"]["uid"]
        for s in c.slices(node):
            assert s["spec"]["pool"]["name"] == node and s["spec"]["nodeName"] == node
            assert [(o["kind"], o["uid"]) for o in s["metadata"]["ownerReferences"]] == [("Node", uid)]
    report(f"both nodes' slices listed in {time.monotonic() - t0:.1f} s of the test")


def test_a_pod_gets_a_gpu_and_a_nic_on_one_root(cluster: Cluster) -> None:
    c = cluster
    devs = published(c, "dra-8x8", 16)
    apply_template(c, example_template())
    # The same claim with its GPU pinned to gpu-5: the first NIC the allocator would otherwise try is
    # nic-mlx5-0, so only the constraint brings it to nic-mlx5-5.
    pinned = example_template()
    pinned["metadata"]["name"] = "gpu5-nic-same-root"
    gpu_req = next(r for r in pinned["spec"]["spec"]["devices"]["requests"] if r["name"] == "gpu")
    gpu_req["exactly"]["selectors"] = [{"cel": {"expression": 'device.attributes["conduit.dev"].index == 5'}}]
    apply_template(c, pinned)
    c.ok("POST", pods_path(), pod("trainer-0", "dra-8x8", "gpu-nic-same-root"))
    c.ok("POST", pods_path(), pod("trainer-5", "dra-8x8", "gpu5-nic-same-root"))
    try:
        for name in ("trainer-0", "trainer-5"):
            got = allocation(c, name)
            assert set(got) == {"gpu", "nic"}
            gpu, nic = devs[got["gpu"]], devs[got["nic"]]
            assert gpu["type"] == "gpu" and nic["type"] == "nic"
            assert gpu[ROOT] == nic[ROOT], f"{name}: {got}: {gpu[ROOT]} and {nic[ROOT]}"
        assert allocation(c, "trainer-5") == {"gpu": "gpu-5", "nic": "nic-mlx5-5"}
    finally:
        delete_pods(c, "trainer-0", "trainer-5")


def test_filling_a_p5_node_gives_every_gpu_a_nic_on_its_root(cluster: Cluster, report) -> None:
    c = cluster
    devs = published(c, "dra-p5", 40)
    apply_template(c, example_template())
    names = [f"p5-{i}" for i in range(9)]
    t0 = time.monotonic()
    try:
        for n in names[:8]:
            c.ok("POST", pods_path(), pod(n, "dra-p5", "gpu-nic-same-root"))
        got = [allocation(c, n) for n in names[:8]]
        took = time.monotonic() - t0
        assert sorted(a["gpu"] for a in got) == [f"gpu-{i}" for i in range(8)], got
        assert len({a["nic"] for a in got}) == 8, got
        for a in got:
            assert devs[a["gpu"]][ROOT] == devs[a["nic"]][ROOT], a

        # A ninth: every GPU is taken, so its claim cannot be met; the scheduler says so on the pod.
        c.ok("POST", pods_path(), pod(names[8], "dra-p5", "gpu-nic-same-root"))

        def unschedulable() -> dict | None:
            p = c.ok("GET", f"{pods_path()}/{names[8]}")
            cond = next((x for x in p.get("status", {}).get("conditions", []) if x["type"] == "PodScheduled"), None)
            return cond if cond and cond["status"] == "False" and not p["spec"].get("nodeName") else None
        cond = wait_for(unschedulable, 30, "the ninth pod refused by the scheduler")
        assert cond["reason"] == "Unschedulable", cond
        assert "cannot allocate all claims" in cond["message"], cond["message"]
        report(f"8 GPU+NIC claims on the p5 node allocated in {took:.1f} s; the ninth: {cond['message']}")
    finally:
        delete_pods(c, *names)


def test_a_claim_that_cannot_be_met_stays_pending_with_the_reason(cluster: Cluster) -> None:
    c = cluster
    published(c, "dra-8x8", 16)
    t = example_template()
    t["metadata"]["name"] = "gpu-nic-800g"
    nic = next(r for r in t["spec"]["spec"]["devices"]["requests"] if r["name"] == "nic")
    nic["exactly"]["selectors"] = [{"cel": {"expression": 'device.attributes["conduit.dev"].linkGbps >= 800'}}]
    apply_template(c, t)
    c.ok("POST", pods_path(), pod("wants-800g", "dra-8x8", "gpu-nic-800g"))
    try:
        def reason() -> str | None:
            p = c.ok("GET", f"{pods_path()}/wants-800g")
            cond = next((x for x in p.get("status", {}).get("conditions", []) if x["type"] == "PodScheduled"), None)
            return cond["message"] if cond and cond["status"] == "False" else None
        msg = wait_for(reason, 30, "the scheduler's reason on the pod")
        assert "cannot allocate all claims" in msg, msg
        time.sleep(1)  # and it stays so: not bound a moment later either
        p = c.ok("GET", f"{pods_path()}/wants-800g")
        assert not p["spec"].get("nodeName") and p["status"]["phase"] == "Pending"
        events = c.ok("GET", f"/api/v1/namespaces/{NAMESPACE}/events?fieldSelector=involvedObject.name=wants-800g")
        assert any(e["reason"] == "FailedScheduling" for e in events["items"]), events["items"]
    finally:
        delete_pods(c, "wants-800g")


def test_slices_follow_devices_coming_and_going(cluster: Cluster, report) -> None:
    c = cluster
    published(c, "dra-8x8", 16)
    link = c.nodes["dra-8x8"].sysfs / "class/infiniband/mlx5_7"
    target = link.readlink()
    t0 = time.monotonic()
    link.unlink()  # the NIC is gone from the tree, as at a hot unplug
    try:
        devs = published(c, "dra-8x8", 15)
        gone = time.monotonic() - t0
        assert "nic-mlx5-7" not in devs
        assert devs["gpu-7"]["rails"] == "", devs["gpu-7"]
    finally:
        if not link.is_symlink():
            link.symlink_to(target)
    devs = published(c, "dra-8x8", 16)
    assert devs["nic-mlx5-7"][ROOT] == devs["gpu-7"][ROOT]
    report(f"a NIC removed from the tree left the slice in {gone:.1f} s (rescan every 0.3 s)")


def test_a_nodes_driver_writes_only_its_own_nodes_slices(cluster: Cluster) -> None:
    c = cluster
    published(c, "dra-p5", 40)
    a = c.nodes["dra-8x8"]
    path = "/apis/resource.k8s.io/v1/resourceslices"

    # Creating a slice for another node: refused, with the policy's message.
    r = c.api("POST", path, foreign_slice("dra-p5", "dra-p5-forged"), token=a.token)
    assert r.status_code == 403, r.text
    assert "dra-8x8 may write only that node's ResourceSlices" in r.json()["message"], r.json()["message"]

    # Deleting or rewriting the other node's published slice: refused too.
    theirs = c.slices("dra-p5")[0]
    r = c.api("DELETE", f"{path}/{theirs['metadata']['name']}", token=a.token)
    assert r.status_code == 403, r.text
    # (spec.nodeName itself is immutable: the apiserver's validation refuses moving a slice to another node.)
    theirs["spec"]["devices"].append({"name": "nic-forged"})
    r = c.api("PUT", f"{path}/{theirs['metadata']['name']}", theirs, token=a.token)
    assert r.status_code == 403, r.text
    assert len(c.devices("dra-p5")) == 40

    # Its own node's: allowed (the driver writes them the same way).
    r = c.api("POST", f"{path}?dryRun=All", foreign_slice("dra-8x8", "dra-8x8-extra"), token=a.token)
    assert r.status_code == 201, r.text

    # The same service account with a token that names no node (not bound to a pod): refused.
    tr = c.ok("POST", f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/conduit-dra-driver/token",
              {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}})
    r = c.api("POST", f"{path}?dryRun=All", foreign_slice("dra-8x8", "dra-8x8-extra"), token=tr["status"]["token"])
    assert r.status_code == 403 and "names no node" in r.json()["message"], r.text

    # And RBAC gives it nothing else: no listing claims (a kubelet plugin gets one by name), pods or nodes.
    for p in (f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims", f"{pods_path()}", "/api/v1/nodes"):
        assert c.api("GET", p, token=a.token).status_code == 403, p


def test_bad_input_is_a_clear_error(cluster: Cluster, tmp_path: Path) -> None:
    import subprocess
    d = cluster.bins["DRA_DRIVER"]
    r = subprocess.run([d, "--node-name", "x", "--sysfs-root", str(tmp_path / "absent"), "--kubeconfig",
                        str(cluster.kube.kubeconfig)], capture_output=True, text=True, timeout=20)
    assert r.returncode == 1 and "is not a sysfs tree" in r.stderr, r.stderr
    r = subprocess.run([d, "--sysfs-root", str(cluster.nodes["dra-p5"].sysfs)], capture_output=True, text=True,
                       timeout=20, env={"PATH": "/usr/bin:/bin"})
    assert r.returncode == 2 and "--node-name" in r.stderr, r.stderr
    r = subprocess.run([d, "--node-name", "x", "--kubeconfig", str(tmp_path / "none")], capture_output=True,
                       text=True, timeout=20)
    assert r.returncode == 1 and "--kubeconfig" in r.stderr, r.stderr


def test_a_nodes_own_credential_is_held_to_its_slices_by_the_apiserver(cluster: Cluster, tmp_path: Path) -> None:
    """The other way a driver can be held to its node (docs/dra.md): with the node's own credential (CN
    system:node:<name>, as the kubelet's), the Node authorizer and NodeRestriction admission of the apiserver
    v1.34 allow only slices whose spec.nodeName is that node, with no policy of the chart involved."""
    import subprocess

    import requests
    env = cluster.kube.dir
    key, crt = tmp_path / "node.key", tmp_path / "node.crt"
    req = subprocess.run(["openssl", "req", "-new", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
                          "-nodes", "-subj", "/O=system:nodes/CN=system:node:dra-8x8", "-keyout", str(key)],
                         capture_output=True, check=True, timeout=30).stdout
    subprocess.run(["openssl", "x509", "-req", "-CA", str(env / "client-ca.crt"), "-CAkey", str(env / "client-ca.key"),
                    "-CAcreateserial", "-days", "1", "-out", str(crt)], input=req, capture_output=True, check=True,
                   timeout=30)

    def post(node: str, dry: bool) -> requests.Response:
        url = f"{cluster.kube.url}/apis/resource.k8s.io/v1/resourceslices" + ("?dryRun=All" if dry else "")
        return requests.post(url, json=foreign_slice(node, f"{node}-by-cert"), cert=(str(crt), str(key)),
                             verify=str(cluster.kube.ca), timeout=10)

    r = post("dra-p5", dry=False)
    assert r.status_code == 403, r.text
    assert "same NodeName as the requesting node" in r.json()["message"], r.json()["message"]
    r = post("dra-8x8", dry=True)
    assert r.status_code == 201, r.text
