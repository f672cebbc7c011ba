"""Smoke test of the end-to-end Kubernetes environment (formerly tests/e2e/kube_smoke.sh): scripts/kube-env.sh
starts a real etcd + kube-apiserver in a temp dir, kubectl talks to it, kube-env.sh stops it.

This drives scripts/kube-env.sh itself (it is what is tested), not the harness's KubeEnv."""

import json
import os
import subprocess
import time

import pytest
from e2e.util import ok
from harness.kube import KubeToolsMissing, kube_tools


def alive(pid):
    """Whether PID still runs: a zombie (it exited; init, its parent since the start script ended, has not
    reaped it yet) does not."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def test_kube_env_smoke(repo_root, work):
    try:
        tools = kube_tools(repo_root)
    except KubeToolsMissing as e:
        pytest.fail(f"kube tools not built: run scripts/kube-tools.sh ({e})", pytrace=False)
    kubectl = tools["KUBECTL"]
    assert os.access(kubectl, os.X_OK), f"no kubectl at {kubectl}"
    env_dir = work / "env"
    kube_env = os.fspath(repo_root / "scripts/kube-env.sh")
    env = {**os.environ, "KUBE_APISERVER": tools["KUBE_APISERVER"], "ETCD": tools["ETCD"]}
    stopped = False
    try:
        # 1. start
        t0 = time.monotonic()
        r = subprocess.run([kube_env, "start", env_dir], capture_output=True, text=True, env=env, timeout=300)
        why = next((ln for ln in r.stderr.splitlines() if "kube-env:" in ln), r.stderr.strip()[-300:])
        assert r.returncode == 0, f"kube-env start: {why}"
        assert r.stdout.strip() == f"export KUBECONFIG={env_dir}/kubeconfig", \
            f"kube-env start printed '{r.stdout.strip()}', not the kubeconfig export"
        kubeconfig = env_dir / "kubeconfig"

        def kc(*args, **kw):
            return subprocess.run([kubectl, "--kubeconfig", kubeconfig, "--request-timeout=20s", *args],
                                  capture_output=True, text=True, timeout=60, **kw)

        etcd_version = subprocess.run([tools["ETCD"], "--version"], capture_output=True, text=True).stdout
        etcd_version = next((ln.split(": ", 1)[1] for ln in etcd_version.splitlines()
                             if ln.startswith("etcd Version: ")), "?")
        try:
            server = json.loads(kc("version", "-o", "json").stdout)["serverVersion"]["gitVersion"]
        except (ValueError, KeyError):
            server = "?"
        ok(f"etcd {etcd_version} + kube-apiserver {server} ready in {time.monotonic() - t0:.0f} s")

        # 2. readyz through kubectl (TLS verified against the CA in the kubeconfig, token auth)
        r = kc("get", "--raw", "/readyz")
        assert r.returncode == 0, f"kubectl get --raw /readyz: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
        assert r.stdout.strip() == "ok", f"kubectl get --raw /readyz answered '{r.stdout.strip()}'"
        ok("kubectl get --raw /readyz = ok")

        # 3. discovery
        r = kc("api-resources")
        assert r.returncode == 0, f"kubectl api-resources: {(r.stderr or r.stdout).strip().splitlines()[-1:]}"
        lines = r.stdout.splitlines()
        print("\n".join(lines[:10]))
        names = {ln.split()[0] for ln in lines[1:] if ln.split()}
        assert "namespaces" in names, "kubectl api-resources lists no namespaces"
        assert "customresourcedefinitions" in names, "kubectl api-resources lists no customresourcedefinitions"
        ok(f"kubectl api-resources ({len(lines) - 1} resources)")

        # 4. who am I: the static token's user is in system:masters
        r = kc("auth", "can-i", "*", "*", "--all-namespaces")
        assert r.returncode == 0, f"kubectl auth can-i '*' '*': {(r.stdout + r.stderr).strip()}"
        assert r.stdout.strip() == "yes", f"conduit-admin cannot do everything: '{r.stdout.strip()}'"
        ok("conduit-admin may do everything (system:masters)")

        # 5. namespace create
        ns = f"conduit-smoke-{os.getpid()}"
        r = kc("create", "namespace", ns)
        assert r.returncode == 0, f"kubectl create namespace: {(r.stdout + r.stderr).strip()}"
        r = kc("get", "namespace", ns, "-o", "jsonpath={.status.phase}")
        assert r.returncode == 0, f"kubectl get namespace: {(r.stdout + r.stderr).strip()}"
        assert r.stdout == "Active", f"namespace {ns} phase '{r.stdout}', not Active"
        ok(f"namespace {ns} created (Active)")

        # 6. namespace delete. No controller-manager runs, so nothing removes the namespace's "kubernetes"
        # finalizer: the namespace stays Terminating until the finalize subresource clears it, as the namespace
        # controller would.
        r = kc("delete", "namespace", ns, "--wait=false")
        assert r.returncode == 0, f"kubectl delete namespace: {(r.stdout + r.stderr).strip()}"
        r = kc("get", "namespace", ns, "-o", "jsonpath={.status.phase}")
        assert r.returncode == 0, f"kubectl get namespace: {(r.stdout + r.stderr).strip()}"
        assert r.stdout == "Terminating", f"deleted namespace {ns} phase '{r.stdout}', not Terminating"
        body = json.dumps({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns},
                           "spec": {"finalizers": []}})
        r = kc("replace", "--raw", f"/api/v1/namespaces/{ns}/finalize", "-f", "-", input=body)
        assert r.returncode == 0, f"finalize namespace: {(r.stdout + r.stderr).strip()}"
        gone = False
        for _ in range(100):
            r = kc("get", "namespace", ns)
            if r.returncode == 0:
                time.sleep(0.1)
                continue
            out = r.stdout + r.stderr
            assert "NotFound" in out or "not found" in out, f"kubectl get namespace after delete: {out.strip()}"
            gone = True
            break
        assert gone, f"namespace {ns} still exists 10 s after it was finalized"
        ok(f"namespace {ns} deleted")

        # 7. stop: both processes exit
        pids = []
        for name in ("etcd", "kube-apiserver"):
            try:
                pids.append(int((env_dir / f"{name}.pid").read_text().strip()))
            except (OSError, ValueError):
                pass
        r = subprocess.run([kube_env, "stop", env_dir], capture_output=True, text=True, timeout=120)
        stopped = True
        assert r.returncode == 0, f"kube-env stop: {(r.stdout + r.stderr).strip()}"
        for p in pids:
            assert not alive(p), f"pid {p} still runs after kube-env stop"
        assert pids, f"no pids recorded in {env_dir}"
        ok("kube-env stop stopped etcd and kube-apiserver")
    finally:
        if not stopped:
            subprocess.run([kube_env, "stop", env_dir], capture_output=True, timeout=120)
