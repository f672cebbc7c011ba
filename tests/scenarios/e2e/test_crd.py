"""The CRDs against a real kube-apiserver with real kubectl (formerly tests/e2e/crd_test.sh): both CRDs are
accepted and Established, every valid example is created, every invalid example is rejected with the message
its `# expect:` line names, spec is immutable except suspend/ttlSecondsAfterFinished, and the printer columns
show what the controller writes to status.

One apiserver serves the whole module (a start costs seconds); each example is its own test case."""

import shutil
import tempfile
from pathlib import Path

import pytest
from harness.kube import KubeEnv, KubeToolsMissing

REPO = Path(__file__).resolve().parents[3]
# The shipped examples and the table of invalid TransferJobs (listed in docs/reliability.md).
SHIPPED = sorted((REPO / "crds/examples").glob("*.yaml"))
INVALID_TABLE = sorted((REPO / "tests/scenarios/hostile/transferjobs").glob("*.yaml"))
EXAMPLES = SHIPPED + INVALID_TABLE


def expected_rejection(path):
    """The message after the file's first `# expect: ` line, or None for a valid example."""
    for line in path.read_text().splitlines():
        if line.startswith("# expect: "):
            return line[len("# expect: "):]
    return None


@pytest.fixture(scope="module")
def kube_crds():
    """An apiserver with both CRDs applied; the apply's output (kubectl's warnings go to stderr) for the
    checks below. The `kubectl apply` is itself what is tested, so its failure fails every test here."""
    d = Path(tempfile.mkdtemp(prefix="conduit-crd-e2e."))
    try:
        try:
            env = KubeEnv(REPO, d / "env")
        except KubeToolsMissing as e:
            pytest.fail(f"kube tools not built: run scripts/kube-tools.sh ({e})", pytrace=False)
        try:
            r = env.kubectl("apply", "-f", str(REPO / "crds/transferjobs.conduit.dev.yaml"),
                            "-f", str(REPO / "crds/fabricnodes.conduit.dev.yaml"))
            applied = r.stdout + r.stderr
            w = env.kubectl("wait", "--for=condition=Established", "--timeout=30s", "crd/transferjobs.conduit.dev",
                            "crd/fabricnodes.conduit.dev")
            yield env, r.returncode == 0 and w.returncode == 0, applied
        finally:
            env.stop()
    finally:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def kc(kube_crds):
    env, established, applied = kube_crds
    assert established, f"CRDs: {' '.join(applied.strip().splitlines()[-2:])}"
    return env.kubectl


def test_crds_established(kube_crds):
    _, established, applied = kube_crds
    assert established, f"CRDs: {' '.join(applied.strip().splitlines()[-2:])}"


def test_crd_apply_without_warnings(kube_crds):
    _, _, applied = kube_crds
    warnings = [ln for ln in applied.splitlines() if "warning" in ln.lower()]
    assert not warnings, f"CRD apply warned: {' '.join(warnings)}"


def test_examples_found():
    # A moved folder would otherwise shrink the table below silently.
    assert SHIPPED, "no crds/examples/*.yaml"
    assert INVALID_TABLE, "no tests/scenarios/hostile/transferjobs/*.yaml"


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example(kc, path):
    expect = expected_rejection(path)
    r = kc("create", "-f", str(path))
    msg = (r.stdout + r.stderr).strip()
    if expect is None:
        assert r.returncode == 0, f"{path.name} rejected: {msg}"
    else:
        assert r.returncode != 0, f"{path.name} was accepted, expected rejection with: {expect}"
        assert expect in msg, f"{path.name} rejected with another message: {msg}"


@pytest.fixture
def job(kc):
    """The first TransferJob stored (the examples above made them; alone, this creates point-to-point)."""
    name = kc("get", "transferjobs", "-o", "jsonpath={.items[0].metadata.name}").stdout.strip()
    if not name:
        r = kc("create", "-f", str(REPO / "crds/examples/point-to-point.yaml"))
        assert r.returncode == 0, f"no TransferJob to test immutability on: {(r.stdout + r.stderr).strip()}"
        name = "point-to-point"
    return name


def test_spec_is_immutable_but_suspend(kc, job):
    r = kc("patch", "transferjob", job, "--type=merge", "-p", '{"spec":{"chunkBytes":2097152}}')
    msg = (r.stdout + r.stderr).strip()
    assert r.returncode != 0, f"chunkBytes of {job} changed"
    assert "immutable" in msg, f"chunkBytes change: {msg}"
    r = kc("patch", "transferjob", job, "--type=merge", "-p", '{"spec":{"suspend":true}}')
    assert r.returncode == 0, f"suspend change rejected: {(r.stdout + r.stderr).strip()}"


def test_printer_columns_show_status(kc, job):
    # What the controller writes to status, shown by the printer columns.
    kc("patch", "transferjob", job, "--subresource=status", "--type=merge",
       "-p", '{"status":{"phase":"Running","progress":"42%","throughput":"5.2 GB/s"}}')
    r = kc("get", "transferjob", job, "--no-headers")
    row = (r.stdout + r.stderr).strip()
    assert "Running" in row and "42%" in row and "5.2 GB/s" in row, f"printer columns show: {row}"
    print(f"ok - printer columns: {row}")
