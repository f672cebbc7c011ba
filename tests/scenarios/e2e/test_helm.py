"""The Helm chart (helm/conduit) with the real helm 3 and kubectl of scripts/kube-tools.sh (formerly
tests/e2e/helm_test.sh):

  1. the chart's copies of crds/ and metrics/ files are in sync (scripts/sync-chart-files.sh --check);
  2. `helm lint --strict` and `helm template` with the defaults and with every values file in
     tests/scenarios/e2e/helm-values/ (every switch flipped, monitoring on, RDMA device plugin);
  3. values.schema.json rejects each helm-values/bad-*.yaml with the message its `# expect:` names;
  4. against a real kube-apiserver: every rendering, the CRD hook Job included, passes a server-side dry run;
     `helm install` with monitoring on (stand-in monitoring.coreos.com CRDs from fixtures/) puts every object in
     the apiserver with the settings the chart promises; the controller's and the CRD hook's RBAC allow exactly
     what their code and command need (kubectl auth can-i, then the real conduit-controller and the hook's own
     kubectl command run with those ServiceAccounts' tokens); `helm upgrade` makes revision 2 with the change
     visible and the agent token kept; `helm uninstall` removes every object.

No kubelet or controller-manager runs: pods never start and Jobs never run, so the install turns the CRD hook
Job off (Helm would wait for it to complete) and the test runs the hook's command itself.
CONDUIT_HELM_CHART tests another copy of the chart (to see it fail).
"""

import base64
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests
from e2e.util import free_port, last, ok
from harness.kube import KubeEnv, KubeToolsMissing, kube_tools

REPO = Path(__file__).resolve().parents[3]
CHART = Path(os.environ.get("CONDUIT_HELM_CHART", REPO / "helm/conduit"))
VALUES = REPO / "tests/scenarios/e2e/helm-values"
FIXTURES = REPO / "tests/scenarios/e2e/fixtures"
GOOD = ["default"] + sorted(p.stem for p in VALUES.glob("*.yaml") if not p.name.startswith("bad-"))
BAD = sorted(VALUES.glob("bad-*.yaml"))
NS, REL = "conduit-system", "conduit"


@pytest.fixture(scope="module")
def tools():
    try:
        t = kube_tools(REPO)
    except KubeToolsMissing as e:
        pytest.fail(f"kube tools not built: run scripts/kube-tools.sh ({e})", pytrace=False)
    assert os.access(t.get("HELM", ""), os.X_OK), f"no helm at {t.get('HELM')}"
    assert (CHART / "templates").is_dir(), f"no chart at {CHART}"
    return t


@pytest.fixture(scope="module")
def work():
    d = Path(tempfile.mkdtemp(prefix="conduit-helm-test."))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def helm(tools, work):
    """helm ARGS (never raising), its config, cache and release-less state in WORK, not the user's home."""
    env = {**os.environ, "HELM_CONFIG_HOME": str(work / "helm/config"), "HELM_CACHE_HOME": str(work / "helm/cache"),
           "HELM_DATA_HOME": str(work / "helm/data")}

    def run(*args, timeout=300):
        return subprocess.run([tools["HELM"], *map(str, args)], capture_output=True, text=True, env=env,
                              timeout=timeout)

    return run


def vflag(v):
    return [] if v == "default" else ["-f", VALUES / f"{v}.yaml"]


@pytest.fixture(scope="module")
def renderings(helm, work):
    """{values name: rendered YAML} with --include-crds, for each good values file (lint and render are
    checked by test_lint_and_template; a failed one is missing here)."""
    out = {}
    for v in GOOD:
        r = helm("template", "conduit", CHART, "-n", "conduit-render", "--include-crds", *vflag(v))
        if r.returncode == 0:
            (work / f"render-{v}.yaml").write_text(r.stdout)
            out[v] = r.stdout
    return out


def test_chart_copies_in_sync():
    r = subprocess.run([REPO / "scripts/sync-chart-files.sh", "--check"], capture_output=True, text=True,
                       env={**os.environ, "CONDUIT_CHART_DIR": str(CHART)})
    why = next((ln for ln in (r.stdout + r.stderr).splitlines() if re.search("differs|missing|stale|no source", ln)),
               last(r.stdout + r.stderr))
    assert r.returncode == 0, f"chart files out of sync: {why} — run scripts/sync-chart-files.sh"


def test_app_version_is_project_version():
    m = re.search(r"^project\(conduit VERSION ([0-9.]*)", (REPO / "CMakeLists.txt").read_text(), re.M)
    assert m, "no project(conduit VERSION ...) in CMakeLists.txt"
    a = re.search(r'^appVersion: *"?([^"\n]*)"?$', (CHART / "Chart.yaml").read_text(), re.M)
    app = a.group(1) if a else ""
    assert app == m.group(1), f"Chart.yaml appVersion '{app}' is not the project version '{m.group(1)}' (CMakeLists.txt)"


def test_values_files_present():
    assert len(GOOD) >= 3, f"expected values files in {VALUES}"
    assert len(BAD) >= 4, f"only {len(BAD)} bad values files in {VALUES} (want at least 4)"


@pytest.mark.parametrize("v", GOOD)
def test_lint_and_template(helm, v):
    r = helm("lint", "--strict", CHART, *vflag(v))
    problems = [ln for ln in (r.stdout + r.stderr).splitlines() if re.search(r"\[(ERROR|WARNING)\]|Error", ln)]
    assert r.returncode == 0, f"helm lint --strict ({v}): {' '.join(problems[:2])}"
    r = helm("template", "conduit", CHART, "-n", "conduit-render", "--include-crds", *vflag(v))
    assert r.returncode == 0, f"helm template ({v}): {last(r.stderr, 2)}"
    ok(f"helm lint --strict and helm template with {v} values ({len(re.findall('^kind: ', r.stdout, re.M))} objects)")


def test_switches_change_the_rendering(renderings):
    # Spot checks; the apiserver checks the rest.
    for v in ("default", "flipped", "rdma-device-plugin"):
        assert v in renderings, f"helm template ({v}) failed"
    default, flipped = renderings["default"], renderings["flipped"]
    assert re.search("^kind: Job$", default, re.M), "default rendering has no CRD hook Job"
    assert not re.search("^kind: Job$", flipped, re.M), "crds.upgradeJob.enabled=false still renders the hook Job"
    assert "hostNetwork: true" not in flipped, "agent.hostNetwork=false still renders hostNetwork"
    assert not re.search("^kind: ServiceMonitor$", default, re.M), "ServiceMonitor rendered though off by default"
    assert not re.search("^kind: ClusterRole$", flipped, re.M), "rbac.create=false still renders ClusterRoles"
    assert "path: /dev/infiniband" not in flipped, "agent.rdma.enabled=false still mounts /dev/infiniband"
    assert "- --stripe-all-rails" in flipped, "agent.stripeAllRails=true does not pass --stripe-all-rails"
    assert "- --import-socket=/run/conduit/agent.sock" in default and "path: /run/conduit" in default, \
        "agent.importSocket does not put the socket in its own host directory"
    assert "--import-socket" not in flipped, "agent.importSocket.enabled=false still passes --import-socket"
    assert 'rdma/rdma_shared_device_a: "1"' in renderings["rdma-device-plugin"], \
        "agent.rdma.resourceName is not requested"


@pytest.mark.parametrize("bad", BAD, ids=[b.name for b in BAD])
def test_schema_rejects_bad_values(helm, bad):
    expect = next((ln[len("# expect: "):] for ln in bad.read_text().splitlines() if ln.startswith("# expect: ")), "")
    assert expect, f"{bad.name} has no '# expect:' line"
    r = helm("template", "conduit", CHART, "-f", bad)
    assert r.returncode != 0, f"{bad.name} was accepted; the schema should reject it with: {expect}"
    assert expect in r.stderr, f"{bad.name} rejected with another message: {last(r.stderr, 2)}"
    assert "values don't meet the specifications of the schema" in r.stderr, \
        f"{bad.name} rejected, but not by values.schema.json: {last(r.stderr, 2)}"



def test_install_rbac_upgrade_uninstall(helm, renderings, tools, work, build, processes):
    for v in GOOD:
        assert v in renderings, f"helm template ({v}) failed"
    t0 = time.monotonic()
    kube = KubeEnv(REPO, work / "env")
    try:
        ok(f"kube-apiserver ready in {time.monotonic() - t0:.0f} s")
        run_on_apiserver(helm, kube, tools, work, build, processes)
    finally:
        kube.stop()


def run_on_apiserver(helm, kube, tools, work, build, processes):
    def kc(*args, input=None):
        # As a user's kubectl: the kubeconfig's namespace unless -n says otherwise (KubeEnv.kubectl always
        # passes one, which kubectl then enforces on every object of a multi-namespace rendering).
        return subprocess.run([tools["KUBECTL"], "--kubeconfig", kube.kubeconfig, "--request-timeout=20s",
                               *map(str, args)], input=input, capture_output=True, text=True, timeout=120)

    def kc_ok(*args, what):
        r = kc(*args)
        assert r.returncode == 0, f"{what}: {last(r.stdout + r.stderr, 2)}"
        return r.stdout

    def jp(obj, path):
        r = kc("get", obj, "-n", NS, "-o", f"jsonpath={path}")
        return (r.stdout if r.returncode == 0 else r.stdout + r.stderr).strip()

    kc_ok("apply", "-f", FIXTURES / "monitoring-coreos-crds.yaml", what="monitoring.coreos.com stand-in CRDs")
    kc_ok("wait", "--for=condition=Established", "--timeout=30s", "crd/servicemonitors.monitoring.coreos.com",
          "crd/prometheusrules.monitoring.coreos.com", what="monitoring.coreos.com stand-in CRDs not Established")
    ok("stand-in ServiceMonitor and PrometheusRule CRDs Established")

    # Every rendering (the chart's CRDs, the hook Job and its RBAC included) through the apiserver's validation
    # and admission, without storing anything. The namespaces must exist; the monitoring kinds need the CRDs above.
    for n in ("conduit-render", "monitoring"):
        kc_ok("create", "namespace", n, what=f"create namespace {n}")
    for v in GOOD:
        r = kc("apply", "--dry-run=server", "-f", work / f"render-{v}.yaml")
        out = r.stdout + r.stderr
        errors = [ln for ln in out.splitlines() if re.search("error|invalid|denied", ln, re.I)]
        assert r.returncode == 0, f"server-side dry run of the {v} rendering: {' '.join(errors[:2])}"
        warned = [ln for ln in out.splitlines() if "warning" in ln.lower()]
        assert not warned, f"server-side dry run of {v} warned: {warned[0]}"
        ok(f"server-side dry run of the {v} rendering: {len([ln for ln in out.splitlines() if ln])} objects valid, "
           f"no warnings")

    # ---- install
    t0 = time.monotonic()
    r = helm("install", REL, CHART, "-n", NS, "--create-namespace", "-f", VALUES / "monitoring.yaml", "--timeout", "2m",
             "--kubeconfig", kube.kubeconfig)
    assert r.returncode == 0, f"helm install: {last(r.stdout + r.stderr, 2)}"
    install_out = r.stdout + r.stderr

    def helm_status():
        s = helm("status", REL, "-n", NS, "--kubeconfig", kube.kubeconfig)
        m = re.search(r"^STATUS: (.*)$", s.stdout, re.M)
        return m.group(1) if m else ""

    assert helm_status() == "deployed", f"helm status after install: '{helm_status()}'"
    assert "kubectl get fabricnodes" in install_out, "helm install printed no NOTES with next steps"
    ok(f"helm install: STATUS deployed in {time.monotonic() - t0:.0f} s, NOTES say what to run next")

    kc_ok("wait", "--for=condition=Established", "--timeout=30s", "crd/transferjobs.conduit.dev",
          "crd/fabricnodes.conduit.dev", what="the chart's CRDs are not Established")
    ok("helm installed the chart's crds/: TransferJob and FabricNode CRDs Established")

    # Every object of the release is in the apiserver.
    r = helm("get", "manifest", REL, "-n", NS, "--kubeconfig", kube.kubeconfig)
    assert r.returncode == 0, f"helm get manifest: {last(r.stderr)}"
    (work / "manifest-1.yaml").write_text(r.stdout)
    want = len(re.findall("^kind: ", r.stdout, re.M))
    objects = kc_ok("get", "-f", work / "manifest-1.yaml", "-o", "name",
                    what="kubectl get of the release's objects").split()
    assert len(objects) == want, f"the release has {want} objects, the apiserver returned {len(objects)}"
    for kind in ("daemonset", "deployment", "service", "secret", "serviceaccount", "clusterrole", "clusterrolebinding",
                 "role", "rolebinding", "poddisruptionbudget", "configmap", "servicemonitor", "prometheusrule"):
        assert any(o.startswith(f"{kind}.") or o.startswith(f"{kind}/") for o in objects), \
            f"no {kind} among the installed objects: {' '.join(objects)}"
    kinds = {}
    for o in objects:
        k = re.split(r"[/.]", o, maxsplit=1)[0]
        kinds[k] = kinds.get(k, 0) + 1
    ok(f"all {want} objects stored: {', '.join(f'{n} {k}' for k, n in sorted(kinds.items()))}")

    # What the chart promises, read back from the stored objects.
    ds = f"daemonset/{REL}-agent"
    pod = "{.spec.template.spec"
    assert jp(ds, pod + ".hostNetwork}") == "true", "agent not hostNetwork"
    assert jp(ds, pod + ".automountServiceAccountToken}") == "false", "agent mounts an API token"
    assert jp(ds, pod + ".priorityClassName}") == "system-node-critical", "agent priorityClassName"
    assert jp(ds, pod + ".containers[0].securityContext.capabilities.add}") == '["IPC_LOCK"]', \
        f"agent capabilities: {jp(ds, pod + '.containers[0].securityContext.capabilities}')}"
    assert jp(ds, pod + '.containers[0].env[?(@.name=="NODE_NAME")].valueFrom.fieldRef.fieldPath}') == "spec.nodeName", \
        "agent NODE_NAME is not the downward API's spec.nodeName"
    assert jp(ds, pod + ".containers[0].readinessProbe.httpGet.path} "
              + pod + ".containers[0].livenessProbe.httpGet.path}") == "/readyz /healthz", "agent probes"
    assert jp(ds, pod + '.volumes[?(@.name=="infiniband")].hostPath.path}') == "/dev/infiniband", \
        "agent does not mount /dev/infiniband"
    assert jp(ds, pod + '.volumes[?(@.name=="pod-resources")].hostPath.path}') == "/var/lib/kubelet/pod-resources", \
        "agent does not mount the pod-resources socket directory"
    assert jp(ds, pod + r".nodeSelector.feature\.node\.kubernetes\.io/pci-15b3\.present}") == "true", \
        f"agent nodeSelector: {jp(ds, pod + '.nodeSelector}')}"
    assert jp(ds, pod + '.tolerations[?(@.key=="nvidia.com/gpu")].effect}') == "NoSchedule", \
        "agent does not tolerate nvidia.com/gpu"
    args = jp(ds, pod + ".containers[0].args}")
    for a in ("--listen=0.0.0.0:7070", "--token-file=", "--providers=", "--data-dir=", "--memory-cap=",
              "--log-format=json"):
        assert a in args, f"agent args lack {a}: {args}"
    ok("agent DaemonSet: hostNetwork, IPC_LOCK, no API token, system-node-critical, NODE_NAME, probes, mounts, "
       "NFD nodeSelector, GPU toleration, flags")

    dep = f"deployment/{REL}-controller"
    assert jp(dep, "{.spec.replicas}") == "2", f"controller replicas: {jp(dep, '{.spec.replicas}')}"
    args = jp(dep, pod + ".containers[0].args}")
    for a in ("--leader-elect", f"--agent-service={REL}-agent", "--agent-token-file=", "--metrics-listen=0.0.0.0:8080"):
        assert a in args, f"controller args lack {a}: {args}"
    sc = jp(dep, pod + ".containers[0].securityContext}")
    for s in ('"runAsNonRoot":true', '"readOnlyRootFilesystem":true', '"drop":["ALL"]', '"type":"RuntimeDefault"',
              '"allowPrivilegeEscalation":false'):
        assert s in sc, f"controller securityContext lacks {s}: {sc}"
    assert jp(f"pdb/{REL}-controller", "{.spec.minAvailable}") == "1", "controller PodDisruptionBudget minAvailable"
    ok("controller Deployment: 2 replicas, leader election, agent Service, non-root read-only no-caps seccomp, "
       "PDB minAvailable 1")

    assert jp(f"service/{REL}-agent", "{.spec.clusterIP} {.spec.ports[0].name}") == "None http", \
        "agent Service not headless with port http"
    token = base64.b64decode(jp(f"secret/{REL}-agent-token", "{.data.token}")).decode()
    assert len(token) == 48, f"generated agent token has {len(token)} characters, want 48"
    want_dash = len(list((CHART / "files/dashboards").glob("*.json")))
    got_dash = len(kc("get", "configmap", "-n", NS, "-l", "grafana_dashboard=1", "-o", "name").stdout.split())
    assert got_dash == want_dash, f"{got_dash} dashboard ConfigMaps labelled grafana_dashboard=1, want {want_dash}"
    want_alerts = sorted(re.findall(r"^ *- alert: *(.*)$", (CHART / "files/alerts.yaml").read_text(), re.M))
    got_alerts = sorted(kc("get", "prometheusrule", REL, "-n", NS, "-o",
                           'jsonpath={range .spec.groups[*].rules[*]}{.alert}{"\\n"}{end}').stdout.split())
    assert want_alerts, f"no alerts in {CHART}/files/alerts.yaml"
    assert got_alerts == [a.strip() for a in want_alerts], \
        f"PrometheusRule alerts '{' '.join(got_alerts)}', files/alerts.yaml has '{' '.join(want_alerts)}'"
    monitors = kc("get", "servicemonitor", "-n", NS, "-o", "name").stdout.split()
    assert len(monitors) == 2, "want 2 ServiceMonitors"
    ok(f"headless agent Service (port http), generated 48-char token, {got_dash} dashboard ConfigMaps, "
       f"PrometheusRule with {len(want_alerts)} alerts, 2 ServiceMonitors")

    # ---- RBAC: what the controller's code calls is allowed, nothing else
    sa = f"system:serviceaccount:{NS}:{REL}-controller"

    def can(who, request):
        return kc("auth", "can-i", f"--as={who}", *request.split()).returncode == 0

    allowed = [
        "get transferjobs.conduit.dev -A", "list transferjobs.conduit.dev -A", "watch transferjobs.conduit.dev -A",
        "patch transferjobs.conduit.dev -n team-a", "delete transferjobs.conduit.dev -n team-a",
        "patch transferjobs.conduit.dev --subresource=status -n team-a",
        "get fabricnodes.conduit.dev", "create fabricnodes.conduit.dev", "patch fabricnodes.conduit.dev",
        "patch fabricnodes.conduit.dev --subresource=status",
        "create events -n team-a", "patch events -n team-a",
        f"list endpointslices.discovery.k8s.io -n {NS}", f"watch endpointslices.discovery.k8s.io -n {NS}",
        f"create leases.coordination.k8s.io -n {NS}",
        f"get leases.coordination.k8s.io/conduit-controller -n {NS}",
        f"update leases.coordination.k8s.io/conduit-controller -n {NS}",
    ]
    denied = [
        "create transferjobs.conduit.dev -n team-a", "update transferjobs.conduit.dev -n team-a",
        "update transferjobs.conduit.dev --subresource=status -n team-a",
        "list fabricnodes.conduit.dev", "delete fabricnodes.conduit.dev",
        "list endpointslices.discovery.k8s.io -n team-a", f"get secrets -n {NS}", "list pods -A",
        f"update leases.coordination.k8s.io/other-lease -n {NS}",
        "get leases.coordination.k8s.io/conduit-controller -n team-a",
        f"delete leases.coordination.k8s.io/conduit-controller -n {NS}", "patch customresourcedefinitions",
    ]
    for c in allowed:
        assert can(sa, c), f"the controller's RBAC does not allow: {c}"
    for c in denied:
        assert not can(sa, c), f"the controller's RBAC allows more than it uses: {c}"
    ok(f"controller RBAC allows the {len(allowed)} requests its code makes and denies {len(denied)} it does not")
    asa = f"system:serviceaccount:{NS}:{REL}-agent"
    for c in (f"get secrets -n {NS}", "list transferjobs.conduit.dev -A", "get fabricnodes.conduit.dev",
              f"list pods -n {NS}"):
        assert not can(asa, c), f"the agent's ServiceAccount may: {c}"
    ok("agent ServiceAccount has no API permissions")

    # The real controller with its ServiceAccount's token: it must lead, sync and reconcile a TransferJob with no
    # 403. (Tokens come from the TokenRequest API, which the apiserver serves without a controller-manager.)
    sa_token = kc_ok("create", "token", f"{REL}-controller", "-n", NS, "--duration=1h",
                     what="kubectl create token").strip()
    (work / "controller.kubeconfig").write_text(kc_ok("config", "view", "--raw", "--minify", what="kubectl config view"))
    r = subprocess.run([tools["KUBECTL"], "--kubeconfig", work / "controller.kubeconfig", "config", "set-credentials",
                        "conduit-admin", f"--token={sa_token}"], capture_output=True, text=True)
    assert r.returncode == 0, f"kubeconfig for the controller's ServiceAccount: {r.stderr.strip()}"
    kc_ok("create", "namespace", "team-a", what="create namespace team-a")
    kc_ok("apply", "-n", "team-a", "-f", REPO / "crds/examples/point-to-point.yaml",
          what="apply the point-to-point example")
    (work / "agent-token").write_text(token)
    port = free_port(20000, 40000)
    controller = processes.start(
        [build.controller, "--kubeconfig", work / "controller.kubeconfig", "--leader-elect",
         "--leader-election-namespace", NS, "--agent-service", f"{REL}-agent", "--agent-service-namespace", NS,
         "--agent-token-file", work / "agent-token", "--metrics-listen", f"127.0.0.1:{port}"],
        name="controller", stdout=work / "controller.log", stderr=work / "controller.log")

    def controller_log(n=2):
        return last((work / "controller.log").read_text(errors="replace"), n)

    holder = phase = fin = ready = ""
    for _ in range(300):
        assert controller.running(), f"conduit-controller exited: {controller_log()}"
        holder = jp("lease/conduit-controller", "{.spec.holderIdentity}")
        phase = kc("get", "transferjob", "point-to-point", "-n", "team-a", "-o", "jsonpath={.status.phase}").stdout
        fin = kc("get", "transferjob", "point-to-point", "-n", "team-a", "-o",
                 "jsonpath={.metadata.finalizers}").stdout
        try:
            ready = requests.get(f"http://127.0.0.1:{port}/readyz", timeout=2).text.strip()
        except requests.RequestException:
            ready = ""
        if holder and phase and fin and ready == "ok":
            break
        time.sleep(0.1)
    else:
        pytest.fail(f"controller with its ServiceAccount: lease holder '{holder}', job phase '{phase}', finalizers "
                    f"'{fin}', readyz '{ready}' after 30 s: {controller_log()}", pytrace=False)
    nevents = len(kc("get", "events", "-n", "team-a", "--field-selector", "involvedObject.name=point-to-point",
                     "-o", "name").stdout.split())
    refused = [ln for ln in (work / "controller.log").read_text(errors="replace").splitlines()
               if re.search("403|forbidden", ln, re.I)]
    assert not refused, f"the controller was refused with its RBAC: {refused[0]}"
    controller.terminate()
    ok(f"real conduit-controller with its ServiceAccount token: leads ({holder}), ready, job {phase} with finalizer, "
       f"{nevents} events, no 403")

    # The CRD hook's objects, stored for real (the Job just sits there: no Job controller), then the Job's own
    # kubectl arguments run with its ServiceAccount's token against the CRDs helm installed: the upgrade path.
    r = helm("template", REL, CHART, "-n", NS, "--show-only", "templates/crd-upgrade-job.yaml")
    assert r.returncode == 0, f"render the CRD hook: {last(r.stdout + r.stderr)}"
    (work / "hook.yaml").write_text(r.stdout)
    kc_ok("apply", "-n", NS, "-f", work / "hook.yaml", what="apply the CRD hook objects")
    (work / "crds").mkdir()
    keys = kc("get", "configmap", f"{REL}-crds", "-n", NS, "-o",
              "go-template={{range $k, $v := .data}}{{$k}} {{end}}").stdout.split()
    for f in keys:
        text = kc("get", "configmap", f"{REL}-crds", "-n", NS, "-o", f'go-template={{{{index .data "{f}"}}}}').stdout
        (work / "crds" / f).write_text(text)
        # go-template prints the value without the newline that the |- block dropped: put it back.
        if not text.endswith("\n"):
            text += "\n"
        assert text == (CHART / "crds" / f).read_text(), f"hook ConfigMap's {f} differs from the chart's crds/{f}"
    hook_args = kc("get", "job", f"{REL}-crds", "-n", NS, "-o",
                   'jsonpath={range .spec.template.spec.containers[0].args[*]}{@}{"\\n"}{end}').stdout.splitlines()
    assert hook_args and hook_args[0] == "apply", f"hook Job args: {' '.join(hook_args)}"
    hook_args = [a.replace("=/crds/", f"={work}/crds/") for a in hook_args]
    hook_token = kc_ok("create", "token", f"{REL}-crds", "-n", NS, "--duration=10m",
                       what=f"token for {REL}-crds").strip()
    r = subprocess.run([tools["KUBECTL"], "--kubeconfig", kube.kubeconfig, "--request-timeout=20s",
                        f"--token={hook_token}", *hook_args], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"the hook's kubectl {' '.join(hook_args)} as {REL}-crds: {last(r.stdout + r.stderr, 2)}"
    assert "serverside-applied" in r.stdout + r.stderr, f"hook apply said: {last(r.stdout + r.stderr, 2)}"
    hsa = f"system:serviceaccount:{NS}:{REL}-crds"
    assert not can(hsa, "patch customresourcedefinitions/servicemonitors.monitoring.coreos.com"), \
        "the CRD hook may patch CRDs other than Conduit's"
    assert not can(hsa, "delete customresourcedefinitions/transferjobs.conduit.dev"), "the CRD hook may delete CRDs"
    kc_ok("delete", "-n", NS, "-f", work / "hook.yaml", what="delete the CRD hook objects")
    ok("CRD hook: ConfigMap holds the chart's crds/, its Job's kubectl apply runs with its own ServiceAccount "
       "(only Conduit CRDs, no delete)")

    # ---- upgrade
    r = helm("upgrade", REL, CHART, "-n", NS, "-f", VALUES / "monitoring.yaml", "--set", "controller.replicas=3",
             "--timeout", "2m", "--kubeconfig", kube.kubeconfig)
    assert r.returncode == 0, f"helm upgrade: {last(r.stdout + r.stderr, 2)}"
    history = helm("history", REL, "-n", NS, "-o", "yaml", "--kubeconfig", kube.kubeconfig).stdout
    revs = sorted(int(x) for x in re.findall(r"^  revision: (\d+)$", history, re.M))
    assert revs and revs[-1] == 2, f"revision after upgrade: '{revs[-1] if revs else ''}'"
    assert helm_status() == "deployed", f"helm status after upgrade: '{helm_status()}'"
    assert jp(dep, "{.spec.replicas}") == "3", f"controller replicas after upgrade: {jp(dep, '{.spec.replicas}')}"
    token2 = base64.b64decode(jp(f"secret/{REL}-agent-token", "{.data.token}")).decode()
    assert token2 == token, "helm upgrade changed the generated agent token"
    ok("helm upgrade: revision 2 deployed, controller replicas 3, agent token kept")

    # ---- uninstall
    r = helm("get", "manifest", REL, "-n", NS, "--kubeconfig", kube.kubeconfig)
    assert r.returncode == 0, "helm get manifest (revision 2)"
    (work / "manifest-2.yaml").write_text(r.stdout)
    r = helm("uninstall", REL, "-n", NS, "--wait", "--timeout", "2m", "--kubeconfig", kube.kubeconfig)
    assert r.returncode == 0, f"helm uninstall: {last(r.stdout + r.stderr, 2)}"
    left = kc("get", "-f", work / "manifest-2.yaml", "--ignore-not-found", "-o", "name")
    assert not (left.stdout + left.stderr).strip(), \
        f"objects left after helm uninstall: {' '.join((left.stdout + left.stderr).split())}"
    assert helm("status", REL, "-n", NS, "--kubeconfig", kube.kubeconfig).returncode != 0, \
        f"helm still knows release {REL} after uninstall"
    # Helm never deletes crds/ (that would delete every TransferJob): they stay until the user removes them.
    assert kc("get", "crd", "transferjobs.conduit.dev").returncode == 0, "helm uninstall deleted the CRDs"
    gone = len(re.findall("^kind: ", (work / "manifest-2.yaml").read_text(), re.M))
    ok(f"helm uninstall: all {gone} objects gone, release gone, CRDs kept")
