"""The driver's kubelet side with the real kubelet v1.34 of scripts/kube-node.sh (docs/dra.md): it registers
as the kubelet's DRA plugin, a pod with the example claim (one GPU and one NIC on one PCIe root) is scheduled,
the kubelet has the driver prepare the claim (NodePrepareResources) and starts the pod, the claim's CDI spec
gives the container the NIC's verbs device and the environment naming it, and deleting the pod has the kubelet
unprepare the claim, removing the spec.

containerd 1.6 has no CDI support, so the devices are not injected into the container here: the test checks
what the driver hands the runtime (the spec, the CDI device ID the kubelet got) rather than the container's
/dev. Its own apiserver and node (the node's controller-manager would mark the Node objects of test_dra.py,
which have no kubelet, unreachable). Needs root, scripts/install-deps.sh --node, scripts/kube-tools.sh --node.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from dra.cluster import REPO
from harness.kube import KubeEnv, KubeToolsMissing
from harness.node import KubeNode, NodeUnavailable
from harness.processes import ProcessSet
from harness.wait import wait_for

NODE = "dra-node"
NS = "dra-kubelet"
ROOT = "resource.kubernetes.io/pcieRoot"


@dataclass
class Node:
    kube: KubeEnv
    node: KubeNode
    work: Path
    sysfs: Path
    bins: dict[str, str]
    pause_image: str


def _run(argv: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=1200, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def node(request: pytest.FixtureRequest) -> Iterator[Node]:
    r = _run([os.fspath(REPO / "scripts/dra-build.sh")])
    if r.returncode != 0:
        pytest.fail(f"scripts/dra-build.sh: {r.stderr.strip()[-800:]}", pytrace=False)
    bins = dict(ln.split("=", 1) for ln in r.stdout.splitlines() if "=" in ln)
    r = _run([os.fspath(REPO / "scripts/kube-images.sh"), "--pause"])
    if r.returncode != 0:
        pytest.fail(f"scripts/kube-images.sh --pause: {r.stderr.strip()[-400:]}", pytrace=False)
    pause = dict(ln.split("=", 1) for ln in r.stdout.splitlines() if "=" in ln)["PAUSE_IMAGE"]

    work = Path(tempfile.mkdtemp(prefix="conduit-dra-node."))
    kube = kn = None
    try:
        try:
            kube = KubeEnv(REPO, work / "env", long_lived=True, node=True)
            kn = KubeNode(REPO, work / "node", kube, NODE, long_lived=True)
        except (KubeToolsMissing, NodeUnavailable) as e:
            pytest.fail(f"{e} (scripts/kube-tools.sh --node, scripts/install-deps.sh --node)", pytrace=False)
        r = kube.kubectl("create", "namespace", NS)
        assert r.returncode == 0, r.stderr
        kube.namespace = NS
        helm_env = {**os.environ, **{f"HELM_{k}_HOME": os.fspath(work / "helm" / k.lower())
                                     for k in ("CONFIG", "CACHE", "DATA")}}
        r = _run([kube.tools["HELM"], "template", "conduit", os.fspath(REPO / "helm/conduit"), "-n", NS, "--set",
                  "dra.enabled=true,dra.gpus=true", "--show-only", "templates/dra-deviceclass.yaml"], env=helm_env)
        assert r.returncode == 0, r.stderr
        r = kube.kubectl("apply", "-f", "-", input=r.stdout)
        assert r.returncode == 0, r.stderr
        r = kube.kubectl("apply", "-f", "-", input=yaml.safe_dump(next(
            d for d in yaml.safe_load_all((REPO / "helm/conduit/examples/dra-gpu-nic-claim.yaml").read_text())
            if d["kind"] == "ResourceClaimTemplate")))
        assert r.returncode == 0, r.stderr

        sysfs = work / "sysfs"
        subprocess.run([bins["FAKE_SYSFS"], "--layout", "8gpu-8nic", os.fspath(sysfs)], check=True, timeout=30)
        yield Node(kube, kn, work, sysfs, bins, pause)
    finally:
        if kn:
            kn.stop()
        if kube:
            kube.stop()
        if request.config.getoption("--keep"):
            print(f"kept {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


def claim_prepared_and_unprepared(node: Node, cdi: Path, answers: Callable[[], list[str]]) -> tuple[float, float]:
    """The check both tests make of a registered driver: its slices, a pod with the example claim Running with
    the claim's CDI spec in CDI, and the spec gone after the pod. ANSWERS: the driver's log lines answering the
    kubelet's gRPC calls. Returns the seconds to Running and to the spec's removal."""
    k = node.kube
    t0 = time.monotonic()
    kubelet_log = node.node.dir / "kubelet.log"
    wait_for(lambda: any('driverName="conduit.dev"' in ln and "connected=true" in ln
                         for ln in kubelet_log.read_text().splitlines()), 60,
             "the kubelet connected to the driver's DRA service (its log)")

    def devices() -> dict[str, dict]:
        items = k.get(f"/apis/resource.k8s.io/v1/resourceslices?fieldSelector=spec.nodeName={NODE}").get("items", [])
        return {d["name"]: {a: next(iter(v.values())) for a, v in d.get("attributes", {}).items()}
                for s in items for d in s["spec"].get("devices", [])}
    devs = wait_for(lambda: (d := devices()) and len(d) == 16 and d, 30, "16 devices published for the node")

    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "trainer"},
           "spec": {"terminationGracePeriodSeconds": 1,
                    "resourceClaims": [{"name": "gpu-nic", "resourceClaimTemplateName": "gpu-nic-same-root"}],
                    "containers": [{"name": "c", "image": node.pause_image, "imagePullPolicy": "Never",
                                    "resources": {"claims": [{"name": "gpu-nic"}]}}]}}
    r = k.request("POST", f"/api/v1/namespaces/{NS}/pods", body=pod)
    assert r.status_code == 201, r.text

    def running() -> dict | None:
        p = k.get(f"/api/v1/namespaces/{NS}/pods/trainer")
        return p if p.get("status", {}).get("phase") == "Running" else None
    p = wait_for(running, 60, "the pod Running (its claim prepared by the driver)",
                 detail=lambda: k.get(f"/api/v1/namespaces/{NS}/pods/trainer").get("status"))
    started = time.monotonic() - t0
    claim_name = p["status"]["resourceClaimStatuses"][0]["resourceClaimName"]
    claim = k.get(f"/apis/resource.k8s.io/v1/namespaces/{NS}/resourceclaims/{claim_name}")
    results = {x["request"]: x["device"] for x in claim["status"]["allocation"]["devices"]["results"]}
    assert devs[results["gpu"]][ROOT] == devs[results["nic"]][ROOT], results
    nic = devs[results["nic"]]

    # The kubelet's gRPC call and the driver's answer to it: the claim's CDI device for both requests.
    cdi_id = f"conduit.dev/claim={claim['metadata']['uid']}"
    prepared = [ln for ln in answers() if "NodePrepareResources" in ln and "handling request succeeded" in ln]
    assert prepared and all(f"CDIDeviceIDs:[{cdi_id}]" in prepared[-1].split("DeviceName:")[j] for j in (1, 2)), \
        prepared[-1:] or "no NodePrepareResources answered"

    spec_file = cdi / f"conduit.dev-claim_{claim['metadata']['uid']}.json"
    edits = json.loads(spec_file.read_text())["devices"][0]["containerEdits"]
    assert f"CONDUIT_NICS={nic['rdmaDevice']}" in edits["env"], edits
    assert f"CONDUIT_IFNAMES={nic['ifName']}" in edits["env"], edits
    assert f"CONDUIT_GPUS={devs[results['gpu']]['pciBusID']}" in edits["env"], edits
    assert [d["path"] for d in edits["deviceNodes"]] == [f"/dev/infiniband/uverbs{nic['rail']}",
                                                        "/dev/infiniband/rdma_cm"]

    # Deleting the pod: the kubelet has the driver unprepare the claim, and the spec goes.
    t1 = time.monotonic()
    r = k.request("DELETE", f"/api/v1/namespaces/{NS}/pods/trainer")
    assert r.status_code == 200, r.text
    wait_for(lambda: not spec_file.exists(), 60, "the CDI spec removed after the pod's deletion")
    assert any("NodeUnprepareResources" in ln and "handling request succeeded" in ln for ln in answers())
    wait_for(lambda: k.request("GET", f"/api/v1/namespaces/{NS}/pods/trainer").status_code == 404, 30,
             "the pod gone")
    return started, time.monotonic() - t1


def test_the_driver_as_a_process_with_the_nodes_credential(node: Node, processes: ProcessSet, report) -> None:
    """The driver as a host process with the kubelet's own credential: the Node authorizer and NodeRestriction
    hold it to this node's slices and to the claims of this node's pods."""
    cdi, log = node.work / "cdi-process", node.work / "driver.log"
    driver = processes.start(
        [node.bins["DRA_DRIVER"], "--kubeconfig", node.node.dir / "kubelet.kubeconfig", "--node-name", NODE,
         "--sysfs-root", node.sysfs, "--gpus", "--kubelet-plugin", "--kubelet-dir", node.node.dir / "kubelet",
         "--cdi-dir", cdi, "--rescan-interval", "1s", "--v=6"], name="dra-driver", stderr=log)
    sock = node.node.dir / "kubelet/plugins_registry/conduit.dev-reg.sock"
    wait_for(sock.exists, 20, f"the driver's registration socket {sock}")
    started, unprepared = claim_prepared_and_unprepared(node, cdi, lambda: log.read_text().splitlines())
    driver.terminate()
    # The kubelet notices the driver gone (its registration socket removed) before the next test's driver.
    wait_for(lambda: not sock.exists(), 20, "the registration socket removed at the driver's exit")
    report(f"pod Running {started:.1f} s after the driver started; spec removed {unprepared:.1f} s after delete")


def test_the_charts_daemonset_on_the_node(node: Node, report) -> None:
    """The chart's DaemonSet (its image made by scripts/kube-images.sh --dra-driver) with the chart's service
    account, RBAC and policy: the pod's own token names the node, so the policy lets it publish this node's
    slices, and it serves the kubelet through the chart's hostPath volumes."""
    k = node.kube
    r = _run([os.fspath(REPO / "scripts/kube-images.sh"), "--dra-driver", node.bins["DRA_DRIVER"]])
    assert r.returncode == 0, r.stderr[-600:]
    img = dict(ln.split("=", 1) for ln in r.stdout.splitlines() if "=" in ln)
    node.node.import_images(img["DRA_DRIVER_ARCHIVE"])
    repo, tag = img["DRA_DRIVER_IMAGE"].rsplit(":", 1)
    host, port = k.url.removeprefix("https://").rsplit(":", 1)
    cdi = node.work / "cdi-daemonset"
    values = {"dra": {"enabled": True, "gpus": True, "rescanInterval": "1s", "sysfsRoot": os.fspath(node.sysfs),
                      "kubeletDir": os.fspath(node.node.dir / "kubelet"), "cdiDir": os.fspath(cdi),
                      "image": {"repository": repo, "tag": tag, "pullPolicy": "Never"}, "extraArgs": ["--v=6"],
                      # No kube-proxy here: the kubernetes Service's ClusterIP does not route (docs/test-node.md).
                      "extraEnv": [{"name": "KUBERNETES_SERVICE_HOST", "value": host},
                                   {"name": "KUBERNETES_SERVICE_PORT", "value": port}]}}
    vfile = node.work / "dra-values.yaml"
    vfile.write_text(yaml.safe_dump(values))
    helm_env = {**os.environ, **{f"HELM_{x}_HOME": os.fspath(node.work / "helm" / x.lower())
                                 for x in ("CONFIG", "CACHE", "DATA")}}
    r = _run([k.tools["HELM"], "template", "conduit", os.fspath(REPO / "helm/conduit"), "-n", NS, "-f",
              os.fspath(vfile), "--show-only", "templates/dra-rbac.yaml", "--show-only",
              "templates/dra-daemonset.yaml"], env=helm_env)
    assert r.returncode == 0, r.stderr
    rendered = r.stdout
    # The previous driver's slices go, so that the ones counted below are the DaemonSet pod's.
    sel = f"fieldSelector=spec.nodeName={NODE}"
    r = k.request("DELETE", f"/apis/resource.k8s.io/v1/resourceslices?{sel}")
    assert r.status_code == 200, r.text
    wait_for(lambda: not k.get(f"/apis/resource.k8s.io/v1/resourceslices?{sel}").get("items", [1]), 20,
             "the node's slices deleted")
    r = k.kubectl("apply", "-f", "-", input=rendered)
    assert r.returncode == 0, r.stderr
    try:
        def pod_running() -> str | None:
            pods = k.get(f"/api/v1/namespaces/{NS}/pods?labelSelector=app.kubernetes.io/component%3Ddra-driver")
            return next((p["metadata"]["name"] for p in pods.get("items", [])
                         if p.get("status", {}).get("phase") == "Running"), None)
        name = wait_for(pod_running, 60, "the driver's DaemonSet pod Running")

        def answers() -> list[str]:
            return k.kubectl("logs", name, timeout=30).stdout.splitlines()
        started, unprepared = claim_prepared_and_unprepared(node, cdi, answers)
        # It published the slices (none were left) with its own token, under the chart's policy.
        log = answers()
        assert any("Publishing" in ln and "kubeletPlugin=true" in ln for ln in log)
        assert any('verb="POST"' in ln and "/resourceslices" in ln and 'status="201 Created"' in ln for ln in log)
        assert not any("/resourceslices" in ln and 'status="403' in ln for ln in log)
        report(f"DaemonSet pod: claim pod Running {started:.1f} s; spec removed {unprepared:.1f} s after delete")
    finally:
        k.kubectl("delete", "daemonset", "conduit-dra-driver", "--wait=true", "--timeout=60s")
        node.node.adopt()
