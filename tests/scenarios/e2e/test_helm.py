"""The Helm chart (helm/conduit) with the real helm 3 and kubectl of scripts/kube-tools.sh (formerly
tests/e2e/helm_test.sh):

  1. the chart's copies of crds/ and metrics/ files are in sync (scripts/sync-chart-files.sh --check);
  2. `helm lint --strict` and `helm template` with the defaults and with every values file in
     tests/scenarios/e2e/helm-values/ (every switch flipped, monitoring on, RDMA device plugin);
  3. values.schema.json rejects each helm-values/bad-*.yaml with the message its `# expect:` names;
  4. against a real kube-apiserver: every rendering, the CRD hook Job included, passes a server-side dry run;
     `helm install` with monitoring on (stand-in monitoring.coreos.com CRDs from fixtures/) puts every object in
     the apiserver with the settings the chart promises; the controller's, the agents' and the CRD hook's RBAC
     allow exactly what their code and command need (kubectl auth can-i and SubjectAccessReviews, then the
     hook's own kubectl command run with its ServiceAccount's token); TLS is on by default: the generated Secret
     holds a CA and a certificate naming the agent Service; identities are on by default: the controller's
     client certificate (CN conduit:controller) signed by the same CA, the agent signer a CA of its own;
     `helm upgrade` makes revision 2 with the change visible and the agent token, TLS Secret, client
     certificate and signer kept (and made anew together when the server name changes); a given TLS Secret
     without ca.crt, or a given client certificate without its key, is refused; `helm uninstall` removes every
     object.

What the objects do when the chart runs (the agent's CSR with its pod's token, HTTPS and who each certificate
lets in, the controller leading and reaching the agent, the example workload, the liveness probe, upgrade and
uninstall on a node) is tests/scenarios/node/test_node.py, on a real kubelet. Here no kubelet or
controller-manager runs: pods never start and Jobs never run, so the install turns the CRD hook Job off (Helm
would wait for it to complete) and the test runs the hook's command itself.
CONDUIT_HELM_CHART tests another copy of the chart (to see it fail).
"""

import base64
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from e2e.util import last, ok
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
    assert "hostPID: true" in default and "hostPID: true" not in flipped, "agent.hostPID does not switch hostPID"
    assert "--bind-address" not in default and "HOST_IP" not in default, "agent.bindAddress empty still binds"
    assert "- --bind-address=$(HOST_IP)" in flipped and "fieldPath: status.hostIP" in flipped, \
        "agent.bindAddress=hostIP does not bind to the pod's status.hostIP"
    assert not re.search("^kind: ServiceMonitor$", default, re.M), "ServiceMonitor rendered though off by default"
    assert not re.search("^kind: ClusterRole$", flipped, re.M), "rbac.create=false still renders ClusterRoles"
    assert "path: /dev/infiniband" not in flipped, "agent.rdma.enabled=false still mounts /dev/infiniband"
    assert "- --stripe-all-rails" in flipped, "agent.stripeAllRails=true does not pass --stripe-all-rails"
    assert "- --import-socket=/run/conduit/agent.sock" in default and "path: /run/conduit" in default, \
        "agent.importSocket does not put the socket in its own host directory"
    assert "--import-socket" not in flipped, "agent.importSocket.enabled=false still passes --import-socket"
    flag = re.compile(r"^\s*- --namespace-files$", re.M)
    assert flag.search(default) and not flag.search(flipped), \
        "agent.namespaceFiles does not switch --namespace-files"
    assert 'rdma/rdma_shared_device_a: "1"' in renderings["rdma-device-plugin"], \
        "agent.rdma.resourceName is not requested"
    # TLS: on by default with a generated Secret; off in flipped; a given Secret and server name in tls-cert-manager.
    generated = "# Source: conduit/templates/agent-tls-secret.yaml"
    for a in (generated, "- --tls-cert=/etc/conduit/tls/tls.crt", "- --peer-ca-file=/etc/conduit/tls/ca.crt",
              "- --peer-tls-server-name=conduit-agent", "- --agent-ca-file=/etc/conduit/agent-ca/ca.crt",
              "- --agent-tls-server-name=conduit-agent", "scheme: HTTPS", "targetPort: https"):
        assert a in default, f"TLS on by default, but the default rendering lacks: {a}"
    for a in (generated, "--tls-cert", "--peer-ca-file", "--agent-ca-file", "scheme: HTTPS", "scheme: https",
              "secretName: conduit-agent-tls"):
        assert a not in flipped, f"agent.tls.enabled=false still renders: {a}"
    assert "targetPort: http\n" in flipped, "agent.tls.enabled=false: the agent Service port is not named http"
    assert "tls-cert-manager" in renderings, "helm template (tls-cert-manager) failed"
    given = renderings["tls-cert-manager"]
    assert generated not in given, "agent.tls.existingSecret set, but the chart still generates a TLS Secret"
    for a in ("secretName: conduit-agent-tls-cm", "name: conduit-agent-tls-cm",
              "- --peer-tls-server-name=agents.conduit.example.com",
              "- --agent-tls-server-name=agents.conduit.example.com", "serverName: agents.conduit.example.com"):
        assert a in given, f"agent.tls.existingSecret/serverName: the rendering lacks: {a}"
    ok("TLS renderings: on by default (generated Secret, agent and controller flags, HTTPS probes, port https), "
       "off in flipped (port http, no flags), a given Secret and server name used everywhere")
    # Identities: on with TLS by default (client certificates generated, the controller calls with its own and
    # no token); off with TLS off and in tls-token-only (the token as before); given Secrets in tls-cert-manager.
    identity_flags = ("- --client-ca-file=/etc/conduit/tls/ca.crt",
                      "- --agent-client-cert=/etc/conduit/agent-client/tls.crt",
                      "- --agent-client-key=/etc/conduit/agent-client/tls.key")
    # One agents' certificate for every node (with the user's own certificates), or one per node (the default).
    shared_flags = ("- --peer-client-cert=/etc/conduit/client-tls/tls.crt",
                    "- --peer-client-key=/etc/conduit/client-tls/tls.key")
    per_node_flags = ("- --agent-client-ca-file=/etc/conduit/tls/agents-ca.crt",
                      "- --node-certificate=/var/run/conduit/identity/node.pem",
                      "- --agent-signer-cert=/etc/conduit/agent-signer/tls.crt",
                      "- --agent-signer-key=/etc/conduit/agent-signer/tls.key",
                      "- --agent-service-account=conduit-render/conduit-agent")
    for a in (*identity_flags, *per_node_flags, "name: conduit-controller-client-tls", "name: conduit-agent-signer",
              "agents-ca.crt: ", "resources: [certificatesigningrequests]", "resourceNames: [conduit.dev/agent]",
              "- --token-file=/etc/conduit/token/token"):
        assert a in default, f"identities on by default, but the default rendering lacks: {a}"
    for a in (*shared_flags, "name: conduit-agent-client-tls"):
        assert a not in default, f"per-node certificates by default, but the default rendering has: {a}"
    assert "--agent-token-file" not in default, "identities on, but the controller still gets the agents' token"
    assert "tls-token-only" in renderings, "helm template (tls-token-only) failed"
    token_only = renderings["tls-token-only"]
    for v, text in (("flipped", flipped), ("tls-token-only", token_only)):
        for a in (*identity_flags, *shared_flags, *per_node_flags, "client-tls", "--client-ca-file", "agent-signer",
                  "certificatesigningrequests"):
            assert a not in text, f"identities off ({v}), but the rendering has: {a}"
        assert "- --agent-token-file=/etc/conduit/token/token" in text, \
            f"identities off ({v}): the controller does not call with the token"
    assert "- --tls-cert=/etc/conduit/tls/tls.crt" in token_only, "tls-token-only turned TLS off"
    for a in (*identity_flags, *shared_flags, "secretName: conduit-agent-client-cm",
              "secretName: conduit-controller-client-cm"):
        assert a in given, f"agent.tls.clientCertificates.agentSecret/controllerSecret: the rendering lacks: {a}"
    for a in (*per_node_flags, "agent-signer", "certificatesigningrequests"):
        assert a not in given, f"agent.tls.existingSecret (the agents share agentSecret), but the rendering has: {a}"
    assert "name: conduit-agent-client-tls" not in given, \
        "agent.tls.existingSecret set, but the chart still generates client certificates"
    ok("identity renderings: on by default (the controller's generated client certificate and no token; each agent "
       "asks for its node's certificate, the controller signs with the agent signer, RBAC for CSRs), off in flipped "
       "and tls-token-only (token), given Secrets and one agents' certificate in tls-cert-manager")


def test_identities_with_a_given_certificate_need_the_client_secrets(helm):
    r = helm("template", "conduit", CHART, "--set", "agent.tls.existingSecret=conduit-agent-tls-cm")
    assert r.returncode != 0, "agent.tls.existingSecret without the client certificates' Secrets was accepted"
    assert "needs agent.tls.clientCertificates.agentSecret" in r.stderr, f"refused with: {last(r.stderr, 2)}"
    r = helm("template", "conduit", CHART, "--set", "agent.tls.existingSecret=conduit-agent-tls-cm",
             "--set", "agent.tls.clientCertificates.enabled=false")
    assert r.returncode == 0, f"agent.tls.existingSecret with identities off: {last(r.stderr, 2)}"
    r = helm("template", "conduit", CHART, "--set", "agent.tls.clientCertificates.controllerSecret=mine")
    assert r.returncode != 0 and "go with agent.tls.existingSecret" in r.stderr, \
        f"a client certificate Secret beside a generated CA: {r.returncode} {last(r.stderr, 2)}"
    ok("identities with agent.tls.existingSecret need agentSecret and controllerSecret (the message says so); "
       "those Secrets without existingSecret are refused (the chart's CA signs its own)")


@pytest.mark.parametrize("bad", BAD, ids=[b.name for b in BAD])
def test_schema_rejects_bad_values(helm, bad):
    expect = next((ln[len("# expect: "):] for ln in bad.read_text().splitlines() if ln.startswith("# expect: ")), "")
    assert expect, f"{bad.name} has no '# expect:' line"
    r = helm("template", "conduit", CHART, "-f", bad)
    assert r.returncode != 0, f"{bad.name} was accepted; the schema should reject it with: {expect}"
    assert expect in r.stderr, f"{bad.name} rejected with another message: {last(r.stderr, 2)}"
    assert "values don't meet the specifications of the schema" in r.stderr, \
        f"{bad.name} rejected, but not by values.schema.json: {last(r.stderr, 2)}"



def test_install_rbac_upgrade_uninstall(helm, renderings, tools, work):
    for v in GOOD:
        assert v in renderings, f"helm template ({v}) failed"
    t0 = time.monotonic()
    kube = KubeEnv(REPO, work / "env")
    try:
        ok(f"kube-apiserver ready in {time.monotonic() - t0:.0f} s")
        run_on_apiserver(helm, kube, tools, work)
    finally:
        kube.stop()


def run_on_apiserver(helm, kube, tools, work):
    def kc(*args, input=None):
        # As a user's kubectl: the kubeconfig's namespace unless -n says otherwise (KubeEnv.kubectl always
        # passes one, which kubectl then enforces on every object of a multi-namespace rendering).
        return subprocess.run([tools["KUBECTL"], "--kubeconfig", kube.kubeconfig, "--request-timeout=20s",
                               *map(str, args)], input=input, capture_output=True, text=True, timeout=120)

    def kc_ok(*args, what, input=None):
        r = kc(*args, input=input)
        assert r.returncode == 0, f"{what}: {last(r.stdout + r.stderr, 2)}"
        return r.stdout

    def jp(obj, path):
        r = kc("get", obj, "-n", NS, "-o", f"jsonpath={path}")
        return (r.stdout if r.returncode == 0 else r.stdout + r.stderr).strip()

    def items(obj, path):
        """The list at PATH (e.g. a container's args), one item each."""
        return jp(obj, f'{{range {path}[*]}}{{@}}{{"\\n"}}{{end}}').splitlines()

    def flag(args, name):
        return next((a.split("=", 1)[1] for a in args if a.startswith(f"{name}=")), "")

    def secret_data(name):
        """The Secret's keys and decoded values."""
        got = json.loads(kc_ok("get", "secret", name, "-n", NS, "-o", "json", what=f"get secret {name}"))
        return {k: base64.b64decode(v) for k, v in (got.get("data") or {}).items()}

    def openssl(*args):
        r = subprocess.run(["openssl", *map(str, args)], capture_output=True, text=True, timeout=30)
        return (r.stdout + r.stderr).strip()

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
    assert f"CN conduit:controller,\n   Secret {REL}-controller-client-tls" in install_out, \
        "helm install's NOTES do not say the controller calls with its client certificate"
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
    assert jp(ds, pod + ".hostPID}") == "true", "agent not hostPID (it could not tell which pod shared a region)"
    # Per-node certificates (the default): the pod's token, for the CSR of its node's certificate alone (RBAC below).
    assert jp(ds, pod + ".automountServiceAccountToken}") == "true", "agent does not mount its pod's token"
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
    ok("agent DaemonSet: hostNetwork, IPC_LOCK, its pod token (for its CSR), system-node-critical, NODE_NAME, probes, mounts, "
       "NFD nodeSelector, GPU toleration, flags")
    spec = ".spec.template.spec"
    agent_args = items(ds, spec + ".containers[0].args")
    tls_dir = jp(ds, pod + '.containers[0].volumeMounts[?(@.name=="tls")].mountPath}')
    assert tls_dir.startswith("/"), f"agent does not mount the TLS Secret: {tls_dir}"
    assert jp(ds, pod + '.containers[0].volumeMounts[?(@.name=="tls")].readOnly}') == "true", "TLS mount not read-only"
    tls_volume = jp(ds, pod + '.volumes[?(@.name=="tls")].secret.secretName}')
    assert tls_volume == f"{REL}-agent-tls", f"agent TLS volume's Secret: '{tls_volume}'"
    for f, want in (("--tls-cert", f"{tls_dir}/tls.crt"), ("--tls-key", f"{tls_dir}/tls.key"),
                    ("--peer-ca-file", f"{tls_dir}/ca.crt"), ("--peer-tls-server-name", f"{REL}-agent")):
        assert flag(agent_args, f) == want, f"agent {f}='{flag(agent_args, f)}', want {want}: {' '.join(agent_args)}"
    probes = jp(ds, pod + ".containers[0].readinessProbe.httpGet.scheme} " + pod
                + ".containers[0].livenessProbe.httpGet.scheme} " + pod + ".containers[0].readinessProbe.httpGet.port} "
                + pod + ".containers[0].ports[0].name}")
    assert probes == "HTTPS HTTPS https https", f"agent probe schemes, probe port, container port name: {probes}"
    ok(f"agent DaemonSet TLS: Secret {REL}-agent-tls read-only at {tls_dir}, --tls-cert/--tls-key/--peer-ca-file "
       f"from it, --peer-tls-server-name={REL}-agent, HTTPS probes on port https")
    # Identities, on by default: the agents name callers by certificates signed by the CA, and each asks for its
    # node's own certificate (kept in memory), believing the agent signer's certificates for one node's agent alone.
    client_dir = jp(ds, pod + '.containers[0].volumeMounts[?(@.name=="identity")].mountPath}')
    assert client_dir.startswith("/"), f"agent does not mount a folder for its node certificate: {client_dir}"
    assert jp(ds, pod + '.volumes[?(@.name=="identity")].emptyDir.medium}') == "Memory", \
        "the node certificate's key is not kept in memory"
    agent_secrets = jp(ds, pod + ".volumes[*].secret.secretName}").split()
    assert f"{REL}-agent-signer" not in agent_secrets and f"{REL}-agent-client-tls" not in agent_secrets, \
        f"the agents mount a Secret they must not hold: {agent_secrets}"
    for f, want in (("--client-ca-file", f"{tls_dir}/ca.crt"), ("--agent-client-ca-file", f"{tls_dir}/agents-ca.crt"),
                    ("--node-certificate", f"{client_dir}/node.pem"), ("--token-file", "/etc/conduit/token/token")):
        assert flag(agent_args, f) == want, f"agent {f}='{flag(agent_args, f)}', want {want}: {' '.join(agent_args)}"
    assert not flag(agent_args, "--peer-client-cert"), "per-node certificates, but the agents share one"
    ok(f"agent DaemonSet identities: --client-ca-file is the CA, --agent-client-ca-file the agent signer's, "
       f"--node-certificate in memory at {client_dir}; no shared agents' certificate; --token-file stays for operators")

    dep = f"deployment/{REL}-controller"
    assert jp(dep, "{.spec.replicas}") == "2", f"controller replicas: {jp(dep, '{.spec.replicas}')}"
    args = jp(dep, pod + ".containers[0].args}")
    for a in ("--leader-elect", f"--agent-service={REL}-agent", "--metrics-listen=0.0.0.0:8080"):
        assert a in args, f"controller args lack {a}: {args}"
    sc = jp(dep, pod + ".containers[0].securityContext}")
    for s in ('"runAsNonRoot":true', '"readOnlyRootFilesystem":true', '"drop":["ALL"]', '"type":"RuntimeDefault"',
              '"allowPrivilegeEscalation":false'):
        assert s in sc, f"controller securityContext lacks {s}: {sc}"
    assert jp(f"pdb/{REL}-controller", "{.spec.minAvailable}") == "1", "controller PodDisruptionBudget minAvailable"
    ok("controller Deployment: 2 replicas, leader election, agent Service, non-root read-only no-caps seccomp, "
       "PDB minAvailable 1")
    ctl_args = items(dep, spec + ".containers[0].args")
    ca_dir = jp(dep, pod + '.containers[0].volumeMounts[?(@.name=="agent-ca")].mountPath}')
    assert ca_dir.startswith("/"), f"controller does not mount the agents' CA: {ca_dir}"
    assert jp(dep, pod + '.volumes[?(@.name=="agent-ca")].secret.secretName}') == f"{REL}-agent-tls", \
        "controller's CA volume is not the TLS Secret"
    ca_items = jp(dep, pod + '.volumes[?(@.name=="agent-ca")].secret.items[*].key}')
    assert ca_items == "ca.crt", f"controller mounts more of the TLS Secret than ca.crt: '{ca_items}'"
    for f, want in (("--agent-ca-file", f"{ca_dir}/ca.crt"), ("--agent-tls-server-name", f"{REL}-agent")):
        assert flag(ctl_args, f) == want, f"controller {f}='{flag(ctl_args, f)}', want {want}: {' '.join(ctl_args)}"
    ok(f"controller Deployment TLS: only ca.crt of {REL}-agent-tls at {ca_dir}, --agent-ca-file, "
       f"--agent-tls-server-name={REL}-agent")
    # Identities: the controller presents its own certificate; it neither gets nor mounts the operators' token.
    ctl_client_dir = jp(dep, pod + '.containers[0].volumeMounts[?(@.name=="agent-client")].mountPath}')
    assert ctl_client_dir.startswith("/"), f"controller does not mount its client certificate: {ctl_client_dir}"
    assert jp(dep, pod + '.volumes[?(@.name=="agent-client")].secret.secretName}') \
        == f"{REL}-controller-client-tls", "controller's client certificate volume is not its own Secret"
    for f, want in (("--agent-client-cert", f"{ctl_client_dir}/tls.crt"),
                    ("--agent-client-key", f"{ctl_client_dir}/tls.key")):
        assert flag(ctl_args, f) == want, f"controller {f}='{flag(ctl_args, f)}', want {want}: {' '.join(ctl_args)}"
    assert not any(a.startswith("--agent-token-file") for a in ctl_args), \
        f"identities on, but the controller still gets the token: {' '.join(ctl_args)}"
    secrets = jp(dep, pod + ".volumes[*].secret.secretName}").split()
    assert f"{REL}-agent-token" not in secrets and f"{REL}-agent-client-tls" not in secrets, \
        f"the controller mounts a Secret it does not need: {secrets}"
    signer_dir = jp(dep, pod + '.containers[0].volumeMounts[?(@.name=="agent-signer")].mountPath}')
    assert jp(dep, pod + '.volumes[?(@.name=="agent-signer")].secret.secretName}') == f"{REL}-agent-signer", \
        "the controller does not mount the agent signer"
    for f, want in (("--agent-signer-cert", f"{signer_dir}/tls.crt"), ("--agent-signer-key", f"{signer_dir}/tls.key"),
                    ("--agent-service-account", f"{NS}/{REL}-agent")):
        assert flag(ctl_args, f) == want, f"controller {f}='{flag(ctl_args, f)}', want {want}: {' '.join(ctl_args)}"
    ok(f"controller Deployment identities: --agent-client-cert/-key from {REL}-controller-client-tls at "
       f"{ctl_client_dir}; the agent signer from {REL}-agent-signer at {signer_dir} for {NS}/{REL}-agent; no token "
       f"flag, no token volume, not the agents' client key")

    assert jp(f"service/{REL}-agent", "{.spec.clusterIP} {.spec.ports[0].name} {.spec.ports[0].targetPort}") \
        == "None https https", "agent Service not headless with port https (TLS on by default)"
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
    e = "{.spec.endpoints[0]"
    sm = jp(f"servicemonitor/{REL}-agent", f"{e}.port}} {e}.scheme}} {e}.tlsConfig.serverName}} "
                                           f"{e}.tlsConfig.ca.secret.name}} {e}.tlsConfig.ca.secret.key}}")
    assert sm == f"https https {REL}-agent {REL}-agent-tls ca.crt", \
        f"agent ServiceMonitor: port, scheme, serverName, CA Secret and key: {sm}"
    ok(f"headless agent Service (port https), generated 48-char token, {got_dash} dashboard ConfigMaps, "
       f"PrometheusRule with {len(want_alerts)} alerts, 2 ServiceMonitors (agents scraped over https with the CA)")

    # The TLS Secret the chart generated: a CA, and a certificate it signed that names the agent Service.
    tls_secret = f"secret/{REL}-agent-tls"
    assert jp(tls_secret, "{.type}") == "kubernetes.io/tls", f"TLS Secret type: {jp(tls_secret, '{.type}')}"

    def tls_data():
        return {k: base64.b64decode(jp(tls_secret, "{.data.%s}" % k.replace(".", "\\."))) for k in
                ("tls.crt", "tls.key", "ca.crt", "agents-ca.crt")}

    pem = tls_data()
    (work / "tls").mkdir()
    for k, v in pem.items():
        (work / "tls" / k).write_bytes(v)
    crt, key, ca, agents_ca = (work / "tls" / k for k in ("tls.crt", "tls.key", "ca.crt", "agents-ca.crt"))
    text = openssl("x509", "-in", crt, "-noout", "-text")
    sans = re.findall(r"DNS:([^,\s]+)", text)
    for name in (f"{REL}-agent", f"{REL}-agent.{NS}.svc"):
        assert name in sans, f"the agents' certificate does not name {name}: SANs {sans or text[-200:]}"
    assert "CA:TRUE" in openssl("x509", "-in", ca, "-noout", "-text"), "ca.crt is not a CA certificate"
    verified = openssl("verify", "-CAfile", ca, crt)
    assert verified == f"{crt}: OK", f"ca.crt did not sign tls.crt: {verified}"
    assert openssl("x509", "-in", crt, "-noout", "-pubkey") == openssl("pkey", "-in", key, "-pubout"), \
        "tls.key is not the certificate's key"
    assert "will not expire" in openssl("x509", "-in", crt, "-noout", "-checkend", 365 * 86400), \
        "the generated certificate expires within a year"
    ok(f"TLS Secret {REL}-agent-tls (kubernetes.io/tls): a CA, and a certificate it signed with its key, valid over "
       f"a year, naming {', '.join(sans)}")

    # The client certificates the chart generated: each in its own Secret, signed by the same CA, naming its
    # identity by CN, usable as a TLS client certificate.
    clients = {}
    for who, cn in (("controller", "conduit:controller"),):
        data = secret_data(f"{REL}-{who}-client-tls")
        assert sorted(data) == ["ca.crt", "tls.crt", "tls.key"], f"{REL}-{who}-client-tls keys: {sorted(data)}"
        assert data["ca.crt"] == pem["ca.crt"], f"{REL}-{who}-client-tls's ca.crt is not the agents' CA"
        folder = work / f"{who}-client"
        folder.mkdir()
        for k, v in data.items():
            (folder / k).write_bytes(v)
        c, k = folder / "tls.crt", folder / "tls.key"
        text = openssl("x509", "-in", c, "-noout", "-subject", "-ext", "extendedKeyUsage")
        assert re.search(rf"subject=\s*CN\s*=\s*{cn}\s*$", text, re.M), f"{who} client certificate: {text}"
        assert "TLS Web Client Authentication" in text, f"{who} client certificate lacks clientAuth: {text}"
        assert openssl("verify", "-CAfile", ca, "-purpose", "sslclient", c) == f"{c}: OK", \
            f"the agents' CA did not sign the {who} client certificate for client use"
        assert openssl("x509", "-in", c, "-noout", "-pubkey") == openssl("pkey", "-in", k, "-pubout"), \
            f"{REL}-{who}-client-tls: tls.key is not the certificate's key"
        assert jp(f"secret/{REL}-{who}-client-tls", "{.metadata.annotations.conduit\\.dev/identity}") == cn
        clients[who] = (c, k)
    assert kc("get", "secret", f"{REL}-agent-client-tls", "-n", NS).returncode != 0, \
        "per-node certificates, but the chart made a shared agents' certificate"
    # The agent signer: a CA of its own (not the install's), its key in a Secret only the controller mounts, its
    # certificate given to the agents as agents-ca.crt.
    signer = secret_data(f"{REL}-agent-signer")
    assert sorted(signer) == ["tls.crt", "tls.key"], f"{REL}-agent-signer keys: {sorted(signer)}"
    assert signer["tls.crt"] == pem["agents-ca.crt"], "agents-ca.crt is not the agent signer's certificate"
    assert pem["agents-ca.crt"] != pem["ca.crt"], "the agent signer is the install's CA"
    (work / "signer").mkdir()
    for k, v in signer.items():
        (work / "signer" / k).write_bytes(v)
    assert "CA:TRUE" in openssl("x509", "-in", work / "signer/tls.crt", "-noout", "-text"), "the signer is no CA"
    assert openssl("x509", "-in", work / "signer/tls.crt", "-noout", "-pubkey") == \
        openssl("pkey", "-in", work / "signer/tls.key", "-pubout"), "the signer's key is not its certificate's"
    ok(f"client certificate {REL}-controller-client-tls (CN conduit:controller): clientAuth, signed by the agents' CA, "
       f"with its key; no shared agents' certificate; the agent signer {REL}-agent-signer, a CA of its own whose "
       f"certificate the agents get as agents-ca.crt")

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
        "list pods -n team-a",
        # The agent signer (per-node certificates, the default).
        "get certificatesigningrequests.certificates.k8s.io", "list certificatesigningrequests.certificates.k8s.io",
        "watch certificatesigningrequests.certificates.k8s.io",
        "update certificatesigningrequests.certificates.k8s.io --subresource=approval",
        "update certificatesigningrequests.certificates.k8s.io --subresource=status",
    ]
    denied = [
        "create transferjobs.conduit.dev -n team-a", "update transferjobs.conduit.dev -n team-a",
        "update transferjobs.conduit.dev --subresource=status -n team-a",
        "list fabricnodes.conduit.dev", "delete fabricnodes.conduit.dev",
        "list endpointslices.discovery.k8s.io -n team-a", f"get secrets -n {NS}", "get pods -n team-a",
        "watch pods -n team-a", "patch pods -n team-a",
        f"update leases.coordination.k8s.io/other-lease -n {NS}",
        "get leases.coordination.k8s.io/conduit-controller -n team-a",
        f"delete leases.coordination.k8s.io/conduit-controller -n {NS}", "patch customresourcedefinitions",
        "create certificatesigningrequests.certificates.k8s.io", "delete certificatesigningrequests.certificates.k8s.io",
    ]
    for c in allowed:
        assert can(sa, c), f"the controller's RBAC does not allow: {c}"
    for c in denied:
        assert not can(sa, c), f"the controller's RBAC allows more than it uses: {c}"
    def may_sign(who, verb, signer_name):
        """Whether WHO may VERB (approve, sign) for the CSR signer SIGNER_NAME: a SubjectAccessReview, since
        signers are no resource kubectl can-i knows."""
        review = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                  "spec": {"user": who, "groups": ["system:serviceaccounts", f"system:serviceaccounts:{NS}"],
                           "resourceAttributes": {"group": "certificates.k8s.io", "resource": "signers",
                                                  "name": signer_name, "verb": verb}}}
        out = kc_ok("create", "-o", "json", "-f", "-", what="SubjectAccessReview", input=json.dumps(review))
        return json.loads(out).get("status", {}).get("allowed", False)

    for verb in ("approve", "sign"):
        assert may_sign(sa, verb, "conduit.dev/agent"), f"the controller may not {verb} for conduit.dev/agent"
        assert not may_sign(sa, verb, "kubernetes.io/kube-apiserver-client"), \
            f"the controller may {verb} for kubernetes.io/kube-apiserver-client"
    ok(f"controller RBAC allows the {len(allowed)} requests its code makes and denies {len(denied)} it does not; "
       f"it approves and signs for conduit.dev/agent alone")
    asa = f"system:serviceaccount:{NS}:{REL}-agent"
    for c in ("create certificatesigningrequests.certificates.k8s.io",
              "get certificatesigningrequests.certificates.k8s.io"):
        assert can(asa, c), f"the agent's ServiceAccount may not {c} (its node certificate)"
    for c in (f"get secrets -n {NS}", "list transferjobs.conduit.dev -A", "get fabricnodes.conduit.dev",
              f"list pods -n {NS}", "list certificatesigningrequests.certificates.k8s.io",
              "update certificatesigningrequests.certificates.k8s.io --subresource=approval",
              "update certificatesigningrequests.certificates.k8s.io --subresource=status"):
        assert not can(asa, c), f"the agent's ServiceAccount may: {c}"
    for verb in ("approve", "sign"):
        assert not may_sign(asa, verb, "conduit.dev/agent"), f"the agent's ServiceAccount may {verb} its own CSR"
    ok("agent ServiceAccount may create and read CSRs (its node certificate) and nothing else: no approve, no sign")

    # What a real agent and controller do with these objects (the controller leading with its ServiceAccount's
    # token and never refused, the agent's CSR sent with its pod's bound token and signed by the controller,
    # HTTPS under the Service's name, who each certificate lets in, the FabricNode Reachable, the example
    # workload and pod-selector job) is checked with the chart running on a real node: tests/scenarios/node.

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
    changed = [k for k, v in tls_data().items() if v != pem[k]]
    assert not changed, f"helm upgrade changed the generated TLS Secret's {', '.join(changed)}"
    for who, (c, k) in clients.items():
        data = secret_data(f"{REL}-{who}-client-tls")
        assert data["tls.crt"] == c.read_bytes() and data["tls.key"] == k.read_bytes(), \
            f"helm upgrade changed the {who}'s client certificate"
    assert secret_data(f"{REL}-agent-signer") == signer, "helm upgrade changed the agent signer"
    ok("helm upgrade: revision 2 deployed, controller replicas 3, agent token, TLS Secret (CA, certificate, key), "
       "the controller's client certificate and the agent signer kept")

    # The Secret says which names its certificate was made for (annotation conduit.dev/tls-names): the same values
    # keep the pair, a server name it does not carry makes a new one (server dry runs, which run `lookup`).
    def upgraded_secrets(*extra):
        """{name: data} of the Secrets the chart makes, as an upgrade with EXTRA values would write them."""
        r = helm("upgrade", REL, CHART, "-n", NS, "--dry-run=server", "-o", "json", "-f", VALUES / "monitoring.yaml",
                 "--set", "controller.replicas=3", *extra, "--kubeconfig", kube.kubeconfig)
        assert r.returncode == 0, f"helm upgrade --dry-run=server {' '.join(extra)}: {last(r.stderr, 2)}"
        return {d["metadata"]["name"]: {k: base64.b64decode(v) for k, v in d["data"].items()}
                for d in yaml.safe_load_all(json.loads(r.stdout)["manifest"]) if d and d["kind"] == "Secret"}

    def upgraded_tls(*extra):
        secrets = upgraded_secrets(*extra)
        assert f"{REL}-agent-tls" in secrets, f"no {REL}-agent-tls Secret in the upgrade's manifest"
        return secrets[f"{REL}-agent-tls"]

    same = upgraded_secrets()
    assert same[f"{REL}-agent-tls"] == pem, "an upgrade with the same values would make a new TLS pair"
    for who, (c, _) in clients.items():
        assert same[f"{REL}-{who}-client-tls"]["tls.crt"] == c.read_bytes(), \
            f"an upgrade with the same values would make a new {who} client certificate"
    assert same[f"{REL}-agent-signer"] == signer, "an upgrade with the same values would make a new agent signer"
    renamed_all = upgraded_secrets("--set", "agent.tls.serverName=agents.conduit.example.com")
    renamed = renamed_all[f"{REL}-agent-tls"]
    assert renamed["tls.crt"] != pem["tls.crt"] and renamed["ca.crt"] != pem["ca.crt"], \
        "agent.tls.serverName changed to a name the certificate lacks, but the upgrade keeps the old pair"
    (work / "renamed.crt").write_bytes(renamed["tls.crt"])
    assert "DNS:agents.conduit.example.com" in openssl("x509", "-in", work / "renamed.crt", "-noout", "-text"), \
        "the new certificate does not name the new agent.tls.serverName"
    (work / "renamed-ca.crt").write_bytes(renamed["ca.crt"])
    for who, (c, _) in clients.items():
        new = renamed_all[f"{REL}-{who}-client-tls"]
        assert new["tls.crt"] != c.read_bytes() and new["ca.crt"] == renamed["ca.crt"], \
            f"a new CA, but the {who} client certificate was not signed anew by it"
        (work / f"renamed-{who}.crt").write_bytes(new["tls.crt"])
        assert openssl("verify", "-CAfile", work / "renamed-ca.crt", work / f"renamed-{who}.crt").endswith(": OK"), \
            f"the new {who} client certificate is not signed by the new CA"
    new_signer = renamed_all[f"{REL}-agent-signer"]
    assert new_signer["tls.crt"] != signer["tls.crt"] and renamed["agents-ca.crt"] == new_signer["tls.crt"], \
        "a new CA, but the agent signer was not made anew with it (or agents-ca.crt is not the new signer's)"
    off = upgraded_secrets("--set", "agent.tls.clientCertificates.enabled=false")
    kept = {k: v for k, v in (off.get(f"{REL}-agent-tls") or {}).items()}
    assert {k: pem[k] for k in ("tls.crt", "tls.key", "ca.crt")} == kept and \
        not any("client" in n or "signer" in n for n in off), \
        f"identities turned off: want the TLS pair kept and no client certificates or signer, got {sorted(off)}"
    ok("TLS pair, client certificate and agent signer kept by an upgrade with the same names, made anew together "
       "(one new CA, one new signer) when agent.tls.serverName changes; identities off keeps the pair and drops the "
       "client certificate and the signer")

    # A given TLS Secret that lacks ca.crt (an ACME issuer's, say) is refused at install, naming the key.
    kc_ok("create", "secret", "generic", "incomplete-tls", "-n", NS, f"--from-file=tls.crt={crt}",
          f"--from-file=tls.key={key}", what="create a TLS Secret without ca.crt")
    r = helm("install", "conduit-other", CHART, "-n", NS, "--dry-run=server", "-f", VALUES / "monitoring.yaml",
             "--set", "agent.tls.existingSecret=incomplete-tls", "--kubeconfig", kube.kubeconfig)
    assert r.returncode != 0, "helm install with agent.tls.existingSecret lacking ca.crt was accepted"
    assert 'has no key "ca.crt"' in r.stderr, f"refused with another message: {last(r.stderr, 2)}"
    # With identities, each given client certificate Secret needs tls.crt and tls.key.
    kc_ok("create", "secret", "generic", "given-tls", "-n", NS, f"--from-file=tls.crt={crt}",
          f"--from-file=tls.key={key}", f"--from-file=ca.crt={ca}", what="create a complete TLS Secret")
    r = helm("install", "conduit-other", CHART, "-n", NS, "--dry-run=server", "-f", VALUES / "monitoring.yaml",
             "--set", "agent.tls.existingSecret=given-tls", "--set", "agent.tls.clientCertificates.agentSecret=given-tls",
             "--set", "agent.tls.clientCertificates.controllerSecret=incomplete-tls", "--kubeconfig", kube.kubeconfig)
    assert r.returncode == 0, f"helm install with given TLS and client Secrets: {last(r.stderr, 2)}"
    kc_ok("create", "secret", "generic", "cert-only", "-n", NS, f"--from-file=tls.crt={crt}",
          what="create a client certificate Secret without tls.key")
    r = helm("install", "conduit-other", CHART, "-n", NS, "--dry-run=server", "-f", VALUES / "monitoring.yaml",
             "--set", "agent.tls.existingSecret=given-tls", "--set", "agent.tls.clientCertificates.agentSecret=given-tls",
             "--set", "agent.tls.clientCertificates.controllerSecret=cert-only", "--kubeconfig", kube.kubeconfig)
    assert r.returncode != 0, "helm install with a controller client Secret lacking tls.key was accepted"
    assert 'controllerSecret "cert-only" has no key "tls.key"' in r.stderr, \
        f"refused with another message: {last(r.stderr, 2)}"
    kc_ok("delete", "secret", "incomplete-tls", "given-tls", "cert-only", "-n", NS, what="delete the given Secrets")
    ok("agent.tls.existingSecret without ca.crt, or a given client certificate Secret without tls.key: the install "
       "is refused, naming the missing key")

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
