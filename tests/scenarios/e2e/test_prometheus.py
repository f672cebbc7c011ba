"""The dashboards and alerts against a real Prometheus (formerly tests/e2e/prometheus_test.sh).

Debian's `prometheus` scrapes two real conduit-agents and a real conduit-controller in local mode, with
metrics/alerts.yaml loaded as a rule file. One TransferJob succeeds (256 MiB, crc32c-verified) and one fails
(its target node's agent is down); then, through Prometheus's HTTP API: every dashboard variable resolves,
every panel query parses and returns data, every alert rule loads and evaluates, ConduitTransferFailures
fires (hold times cut to 0s), and a misspelt query is caught. node-b reads its NICs' counters from a frozen
tree, so a last job it runs is judged NotCarried and ConduitTransferPathMismatch fires (docs/path.md). Last, docs/observability.md and
metrics/metric_names.txt are checked against what the binaries expose (scripts/check-observability.sh).

One stack (agents, Prometheus, controller) serves the module; the tests run in file order, the failed job
being a fixture of its own so that the checks of the quiet state come before it.
"""

import json
import re
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
import requests
from e2e.util import free_port, ok
from harness import AgentPool, ProcessSet, new_token, random_file
from harness.controller import Controller

REPO = Path(__file__).resolve().parents[3]
DASHBOARDS = sorted((REPO / "metrics/dashboards").glob("*.json"))
ALERTS = REPO / "metrics/alerts.yaml"
# The README's main job (scripts/run-main.sh runs the same file).
CHECKPOINT_JOB = (REPO / "scripts/lib/checkpoint-job.yaml").read_text()
# node-c is in --agents, but no agent listens on its port: the pre-flight holds this job Pending for it
# (docs/reliability.md) until its deadline, 5 s, and it ends Failed, PeerUnreachable.
UNREACHABLE_JOB = """apiVersion: conduit.dev/v1alpha1
kind: TransferJob
metadata:
  name: unreachable
spec:
  source:
    node: node-a
    file: small.bin
  targets:
    - node: node-c
      region: landing
      create:
        bytes: 1048576
  backoffLimit: 0
  activeDeadlineSeconds: 5
"""


# Run by node-b, whose counters are a frozen tree: its transfer's bytes never show on lo.
UNMOVED_JOB = """apiVersion: conduit.dev/v1alpha1
kind: TransferJob
metadata:
  name: unmoved
spec:
  source:
    node: node-b
    file: unmoved.bin
  targets:
    - node: node-a
      region: unmoved
      create:
        bytes: 1048576
  transport:
    type: tcp
"""


def tool(name):
    path = shutil.which(name)
    if path is None:
        pytest.fail(f"{name} is not installed (scripts/install-deps.sh)", pytrace=False)
    return path



class Prometheus:
    """Prometheus's HTTP API, and the checks the bash suite made with curl and jq."""

    def __init__(self, url):
        self.url = url

    def query(self, expr):
        """The API's JSON answer (or {"status": "error", "error": why} when it gives none)."""
        try:
            return requests.get(f"{self.url}/api/v1/query", params={"query": expr}, timeout=10).json()
        except (requests.RequestException, ValueError) as e:
            return {"status": "error", "errorType": "request", "error": str(e)}

    def check(self, expr):
        """(True, "N series, first V") when EXPR parses and returns at least one series with a number in it;
        else (False, why)."""
        out = self.query(expr)
        if out.get("status") != "success":
            return False, f"{out.get('errorType')}: {out.get('error')}"
        result = out.get("data", {}).get("result") or []
        if not result:
            return False, "no data"
        values = [r["value"][1] for r in result if isinstance(r, dict) and isinstance(r.get("value"), list)]
        if not [v for v in values if v != "NaN"]:
            return False, "only NaN"
        return True, f"{len(result)} series, first {values[0] if values else '?'}"

    def wait(self, expr, seconds):
        """Until EXPR returns data, at most SECONDS."""
        for _ in range(int(seconds * 2)):
            if self.check(expr)[0]:
                return True
            time.sleep(0.5)
        return False

    def alert_state(self, name):
        alerts = requests.get(f"{self.url}/api/v1/alerts", timeout=10).json()["data"]["alerts"]
        return next((a["state"] for a in alerts if a["labels"].get("alertname") == name), "inactive")

    def alert_rules(self):
        groups = requests.get(f"{self.url}/api/v1/rules", params={"type": "alert"}, timeout=10).json()["data"]
        return [r for g in groups["groups"] for r in g["rules"] if r.get("type") == "alerting"]

    def label_values(self, label, selector):
        r = requests.get(f"{self.url}/api/v1/label/{label}/values", params={"match[]": selector}, timeout=10)
        return r.json().get("data") or []

    def up(self):
        return [{"job": r["metric"].get("job"), "instance": r["metric"].get("instance"), "up": r["value"][1]}
                for r in self.query("up").get("data", {}).get("result", [])]


class Stack:
    def __init__(self, work, agents, prom, controller, ctl_port, jobs):
        self.work = work
        self.agents = agents
        self.prom = prom
        self.controller = controller
        self.ctl_port = ctl_port
        self.jobs = jobs

    def job_text(self, name):
        p = self.jobs / f"{name}.yaml"
        return p.read_text() if p.exists() else ""

    def phase(self, name):
        m = re.search(r"^  phase: *(.*)$", self.job_text(name), re.M)
        return m.group(1).strip().strip("\"'") if m else ""

    def wait_phase(self, name):
        """Until job NAME is Succeeded or Failed (2 minutes at most, or until the controller exits)."""
        for _ in range(240):
            if self.phase(name) in ("Succeeded", "Failed") or not self.controller.running():
                return
            time.sleep(0.5)

    def controller_log(self, lines=2):
        return " ".join(self.controller.log_text().splitlines()[-lines:])


def test_alert_rules_file():
    r = subprocess.run([tool("promtool"), "check", "rules", ALERTS], capture_output=True, text=True)
    out = r.stdout + r.stderr
    assert r.returncode == 0, f"promtool check rules: {' '.join(out.split())}"
    found = re.search(r"[0-9]* rules found", out)
    ok(f"promtool check rules metrics/alerts.yaml: {found.group(0) if found else ''}")


def test_dashboards_exist():
    assert DASHBOARDS, "no dashboards in metrics/dashboards"


def ds(o):
    d = o.get("datasource") or {}
    return isinstance(d, dict) and d.get("uid") == "${datasource}" and d.get("type") == "prometheus"


@pytest.mark.parametrize("dash", DASHBOARDS, ids=[d.name for d in DASHBOARDS])
def test_dashboard_shape(dash):
    # Grafana's shape: a prometheus datasource variable that every panel and target uses, and the
    # namespace/node/transport variables.
    try:
        d = json.loads(dash.read_text())
    except ValueError as e:
        pytest.fail(f"{dash.name}: not valid JSON: {e}", pytrace=False)
    variables = d.get("templating", {}).get("list", [])
    why = []
    if not d.get("schemaVersion", 0) >= 36:
        why.append(f"schemaVersion {d.get('schemaVersion')}")
    if not any(v.get("name") == "datasource" and v.get("type") == "datasource" and v.get("query") == "prometheus"
               for v in variables):
        why.append("no prometheus datasource variable")
    for name in ("namespace", "node", "transport"):
        if not any(v.get("name") == name and v.get("type") == "query" and ds(v) for v in variables):
            why.append(f"no query variable {name}")
    for p in d.get("panels", []):
        if not ds(p):
            why.append(f"panel {p.get('title')} does not use ${{datasource}}")
        for t in p.get("targets", []):
            if not ds(t):
                why.append(f"a target of {p.get('title')} does not use ${{datasource}}")
    if not [t for p in d.get("panels", []) for t in p.get("targets", [])]:
        why.append("no targets")
    assert not why, f"{dash.name}: {'; '.join(why)}"


@pytest.fixture(scope="module")
def stack(build):
    """Two agents, a Prometheus scraping them and the controller, then the controller with the checkpoint job
    Succeeded. What this fixture cannot bring up fails every test that needs it."""
    for t in ("prometheus", "promtool"):
        tool(t)
    work = Path(tempfile.mkdtemp(prefix="conduit-prometheus-e2e."))
    try:
        with ProcessSet() as procs:
            new_token(work / "token")
            pool = AgentPool(build, work, work / "token", procs, log_level="warn")
            # node-b reads its NICs' counters from a tree that never moves: a transfer it runs is judged
            # NotCarried (docs/path.md), which ConduitTransferPathMismatch must see. node-a reads /sys.
            for counter in ("tx_bytes", "rx_bytes"):
                frozen = work / "frozen-sysfs/class/net/lo/statistics" / counter
                frozen.parent.mkdir(parents=True, exist_ok=True)
                frozen.write_text("0\n")
            try:
                a = pool.start("node-a", "--memory-cap", "1GiB")
                b = pool.start("node-b", "--memory-cap", "1GiB", "--nic-counters-root", str(work / "frozen-sysfs"))
            except RuntimeError as e:
                pytest.fail(f"agents node-a and node-b did not start: {e}", pytrace=False)
            dead_port, ctl_port, prom_port = free_port(), free_port(), free_port()
            # The shipped rules with every hold time ("for:") cut to 0s: the expressions and labels are the
            # shipped ones, and an alert whose condition holds fires at its next evaluation instead of minutes later.
            (work / "alerts.yaml").write_text(re.sub(r"^([ \t]*)for: .*$", r"\1for: 0s", ALERTS.read_text(), flags=re.M))
            config = (REPO / "tests/scenarios/e2e/fixtures/prometheus.yml.in").read_text()
            for k, v in {"@ALERTS@": str(work / "alerts.yaml"), "@AGENT_A@": a.url.removeprefix("http://"),
                         "@AGENT_B@": b.url.removeprefix("http://"), "@CONTROLLER@": f"127.0.0.1:{ctl_port}"}.items():
                config = config.replace(k, v)
            (work / "prometheus.yml").write_text(config)
            prom_proc = procs.start(["prometheus", f"--config.file={work / 'prometheus.yml'}",
                                     f"--storage.tsdb.path={work / 'tsdb'}",
                                     f"--web.listen-address=127.0.0.1:{prom_port}", "--log.level=warn"],
                                    name="prometheus", stdout=work / "prometheus.log", stderr=work / "prometheus.log")
            prom = Prometheus(f"http://127.0.0.1:{prom_port}")

            def ready():
                try:
                    return requests.get(f"{prom.url}/-/ready", timeout=1).status_code == 200
                except requests.RequestException:
                    return False

            for _ in range(200):
                if ready() or not prom_proc.running():
                    break
                time.sleep(0.1)
            if not ready():
                tail = " ".join((work / "prometheus.log").read_text(errors="replace").splitlines()[-2:])
                pytest.fail(f"Prometheus did not start: {tail}", pytrace=False)
            version = subprocess.run(["prometheus", "--version"], capture_output=True, text=True)
            version = re.search(r"^prometheus, version (\S+)", version.stdout + version.stderr, re.M)
            ok(f"Prometheus {version.group(1) if version else '?'} ready on 127.0.0.1:{prom_port}")
            # Prometheus applies its targets a few seconds after it starts. The agents are scraped before the
            # jobs start, so every counter has a sample from before the transfer and rate() sees it move.
            if not prom.wait('count(up{job="conduit-agent"} == 1) == 2', 30):
                pytest.fail(f"Prometheus does not scrape the agents: {prom.up()}", pytrace=False)
            ok("Prometheus scrapes both agents")

            jobs = work / "jobs"
            jobs.mkdir()
            random_file(a.data_dir / "checkpoint.bin", 256)
            random_file(a.data_dir / "small.bin", 1)
            (jobs / "checkpoint.yaml").write_text(CHECKPOINT_JOB)
            controller = Controller(build, procs, [
                "--local-dir", str(jobs), "--agents",
                f"node-a={a.url},node-b={b.url},node-c=http://127.0.0.1:{dead_port}",
                "--agent-token-file", str(work / "token"), "--metrics-listen", f"127.0.0.1:{ctl_port}",
                "--log-level", "warn"], work / "controller.log", work / "controller.out").start()
            s = Stack(work, pool, prom, controller, ctl_port, jobs)
            s.wait_phase("checkpoint")
            if s.phase("checkpoint") != "Succeeded":
                pytest.fail(f"TransferJob checkpoint: phase '{s.phase('checkpoint')}', want Succeeded: "
                            f"{s.controller_log()}", pytrace=False)
            ok("TransferJob checkpoint Succeeded (256 MiB node-a -> node-b, crc32c)")
            yield s
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture(scope="module")
def failed_job(stack):
    """The unreachable job, Failed: after it the failure alerts fire."""
    (stack.jobs / "unreachable.yaml").write_text(UNREACHABLE_JOB)
    stack.wait_phase("unreachable")
    if stack.phase("unreachable") != "Failed":
        pytest.fail(f"TransferJob unreachable: phase '{stack.phase('unreachable')}', want Failed", pytrace=False)
    why = re.search(r"activeDeadlineSeconds[^\n]*", stack.job_text("unreachable"))
    ok(f"TransferJob unreachable Failed: {why.group(0)[:120] if why else ''}")
    return stack


def test_promtool_check_config(stack):
    r = subprocess.run([tool("promtool"), "check", "config", stack.work / "prometheus.yml"],
                       capture_output=True, text=True)
    assert r.returncode == 0, f"promtool check config: {' '.join((r.stdout + r.stderr).split())}"


def test_three_targets_up(stack):
    assert stack.prom.wait('count(up{job=~"conduit-agent|conduit-controller"} == 1) == 3', 10), \
        f"Prometheus does not scrape all 3 targets: {stack.prom.up()}"


def test_succeeded_transfer_seen_and_alert_quiet(stack):
    prom = stack.prom
    assert prom.wait('sum(conduit_agent_transfers_total{node="node-a", result="succeeded"}) >= 1', 20), \
        "Prometheus does not see the succeeded transfer within 20 s"
    ok("Prometheus sees node-a's succeeded transfer")
    # The source agent counts what it wrote: 256 MiB, plus any slices the verification sent again.
    wrote = 'sum(conduit_agent_transfer_bytes_total{node="node-a", direction="write"})'
    seen = prom.wait(f"{wrote} >= 268435456", 5)
    # With only a successful job behind it, the failure alert stays quiet (two rule evaluations after the scrape).
    time.sleep(2)
    state = prom.alert_state("ConduitTransferFailures")
    series = [{"node": r["metric"].get("node"), "direction": r["metric"].get("direction"), "v": r["value"][1]}
              for r in prom.query("conduit_agent_transfer_bytes_total").get("data", {}).get("result", [])]
    assert seen, f"conduit_agent_transfer_bytes_total of node-a is below 256 MiB: {series}"
    ok(f"Prometheus counts the 256 MiB node-a wrote ({prom.check(wrote)[1]})")
    assert state == "inactive", f"ConduitTransferFailures is {state} after only a successful job, want inactive"
    # node-a judged the checkpoint's path from its own counters (lo): Matched, and the path alert is quiet.
    assert prom.wait('sum(conduit_agent_transfer_paths_total{node="node-a", verdict="Matched"}) >= 1', 5), \
        f"node-a's checkpoint transfer was not judged Matched: {stack.job_text('checkpoint')}"
    assert re.search(r"^  path:\n(    .*\n)*?    verdict: Matched$", stack.job_text("checkpoint"), re.M), \
        f"TransferJob checkpoint's status.path is not Matched: {stack.job_text('checkpoint')}"
    state = prom.alert_state("ConduitTransferPathMismatch")
    assert state == "inactive", f"ConduitTransferPathMismatch is {state} after a Matched transfer, want inactive"


def test_failed_job_and_unreachable_node_seen(failed_job):
    prom = failed_job.prom
    assert prom.wait('max(conduit_controller_transferjobs{phase="Failed"}) >= 1', 20) and \
        prom.wait('max(conduit_controller_fabricnodes{reachable="false"}) >= 1', 20), \
        "Prometheus does not see the Failed TransferJob and the unreachable FabricNode within 20 s"


def subst(text, variables):
    """Grafana's built-ins as fixed durations ($__rate_interval 1m, so a rate still holds the transfer that
    ended seconds ago), then each dashboard variable as the value found for it."""
    text = text.replace("$__rate_interval", "1m").replace("$__interval", "15s").replace("$__range", "5m")
    for k, v in variables.items():
        text = re.sub(r"\$\{?" + re.escape(k) + r"\}?(?![A-Za-z0-9_])", lambda _m, v=v: v, text)
    return text


def regex_escape(value):
    """As Grafana escapes a value in a (v1|v2) regex."""
    return re.sub(r"([\]\[\\.*^$+?(){}|])", r"\\\1", value)


@pytest.mark.parametrize("dash", DASHBOARDS, ids=[d.name for d in DASHBOARDS])
def test_dashboard_queries_return_data(failed_job, dash):
    # Each variable becomes the values its label_values() query finds (a multi-value or All variable as a
    # (v1|v2) regex, as Grafana writes it; a single one as its first value: node-a, the source, whose segment
    # latencies exist); then every panel's every query must parse and return data.
    prom = failed_job.prom
    name = dash.stem
    d = json.loads(dash.read_text())
    failures = []
    variables = {}
    for v in [v for v in d.get("templating", {}).get("list", []) if v.get("type") == "query"]:
        q = v.get("query")
        q = q.get("query") if isinstance(q, dict) else q
        m = re.fullmatch(r"label_values\((.*),\s*([A-Za-z_][A-Za-z0-9_]*)\)", q or "")
        if not m:
            failures.append(f"{name}: variable {v['name']}: not a label_values(SELECTOR, LABEL) query: {q}")
            continue
        values = prom.label_values(m.group(2), subst(m.group(1), variables))
        if not values:
            failures.append(f"{name}: variable {v['name']} ({q}) has no values")
            value = "unresolved"
        elif v.get("multi") or v.get("includeAll"):
            value = "(" + "|".join(regex_escape(x) for x in values) + ")"
            ok(f"{name}: variable ${v['name']} = {value}")
        else:
            value = values[0]
            ok(f"{name}: variable ${v['name']} = {value} (first of {len(values)})")
        variables[v["name"]] = value
    for p in d.get("panels", []):
        for t in p.get("targets", []):
            title, expr = f"{p.get('title')} [{t.get('refId')}]", subst(t.get("expr", ""), variables)
            if "$" in expr:
                failures.append(f"{name} / {title}: unresolved variable in: {expr}")
                continue
            good, why = prom.check(expr)
            if good:
                ok(f"{name} / {title}: {why}: {expr}")
            else:
                failures.append(f"{name} / {title}: {why}: {expr}")
    assert not failures, "\n".join(failures)


def test_broken_queries_are_caught(stack):
    # The check must be able to fail: a misspelt metric and a syntax error are both caught.
    good, why = stack.prom.check("sum(rate(conduit_agent_transfer_byte_total[1m]))")
    assert not good, "a misspelt metric returned data"
    ok(f"a misspelt metric in a query is caught: {why}")
    good, why = stack.prom.check("sum(rate(conduit_agent_transfer_bytes_total[1m])")
    assert not good, "a broken query parsed"
    ok(f"a query that does not parse is caught: {why}")


def test_alert_rules_load_and_evaluate(failed_job):
    prom = failed_job.prom
    want = len(re.findall(r"^\s*- alert:", ALERTS.read_text(), re.M))
    rules = []
    for _ in range(20):
        rules = prom.alert_rules()
        if len([r for r in rules if r.get("health") == "ok"]) == want:
            break
        time.sleep(0.5)
    assert len(rules) == want, f"Prometheus loaded {len(rules)} alert rules, metrics/alerts.yaml has {want}"
    failures = []
    for r in rules:
        out = prom.query(r["query"])
        if r.get("health") != "ok":
            failures.append(f"alert {r['name']}: health {r.get('health')}: {r.get('lastError') or ''}")
        elif out.get("status") != "success":
            failures.append(f"alert {r['name']}: expression does not evaluate: {out.get('error') or out}")
        else:
            ok(f"alert {r['name']}: health ok, expression evaluates ({len(out['data']['result'])} series now, "
               f"state {r.get('state')})")
    assert not failures, "\n".join(failures)


@pytest.mark.parametrize("alert", ["ConduitTransferFailures", "ConduitFabricNodeUnreachable"])
def test_alert_fires_after_failed_job(failed_job, alert):
    state = ""
    for _ in range(40):
        state = failed_job.prom.alert_state(alert)
        if state == "firing":
            break
        time.sleep(0.5)
    assert state == "firing", f"{alert} is {state} after the failed job, want firing"


@pytest.mark.parametrize("alert", ["ConduitControllerNoLeader", "ConduitTransferStalled",
                                   "ConduitStagedGpuFallback"])
def test_alert_inactive_when_nothing_of_its_kind(failed_job, alert):
    state = failed_job.prom.alert_state(alert)
    assert state == "inactive", f"{alert} is {state}, want inactive"


def test_docs_match_binaries(stack):
    # docs/observability.md and metrics/metric_names.txt against what the binaries expose.
    try:
        agent = requests.get(f"{stack.agents['node-a'].url}/metrics", timeout=5)
        ctl = requests.get(f"http://127.0.0.1:{stack.ctl_port}/metrics", timeout=5)
        agent.raise_for_status()
        ctl.raise_for_status()
    except requests.RequestException as e:
        pytest.fail(f"scraping the agent and the controller for the doc check failed: {e}", pytrace=False)
    (stack.work / "agent.txt").write_text(agent.text)
    (stack.work / "controller.txt").write_text(ctl.text)
    r = subprocess.run([REPO / "scripts/check-observability.sh", "--scraped", stack.work / "agent.txt",
                        stack.work / "controller.txt"], capture_output=True, text=True)
    out = (r.stdout + r.stderr).strip()
    assert r.returncode == 0, f"docs/observability.md or metrics/metric_names.txt does not match the binaries:\n{out}"
    ok(f"docs/observability.md matches the binaries ({out.splitlines()[-1] if out else ''})")


@pytest.fixture(scope="module")
def unmoved_job(stack):
    """A 1 MiB job run by node-b, whose counters never move (its frozen tree): judged NotCarried."""
    random_file(stack.agents["node-b"].data_dir / "unmoved.bin", 1)
    (stack.jobs / "unmoved.yaml").write_text(UNMOVED_JOB)
    stack.wait_phase("unmoved")
    if stack.phase("unmoved") != "Succeeded":
        pytest.fail(f"TransferJob unmoved: phase '{stack.phase('unmoved')}', want Succeeded", pytrace=False)
    return stack


def test_path_alert_fires_when_the_counters_did_not_move(unmoved_job):
    text = unmoved_job.job_text("unmoved")
    assert re.search(r"^  path:\n(    .*\n)*?    verdict: NotCarried$", text, re.M), \
        f"TransferJob unmoved's status.path is not NotCarried: {text}"
    state = ""
    for _ in range(40):
        state = unmoved_job.prom.alert_state("ConduitTransferPathMismatch")
        if state == "firing":
            break
        time.sleep(0.5)
    assert state == "firing", f"ConduitTransferPathMismatch is {state} after a NotCarried transfer, want firing"
    ok("ConduitTransferPathMismatch fires after node-b's transfer its counters did not see")
