"""Hostile input against a real conduit-agent (formerly tests/hostile/rest_test.sh): tcp provider, loopback,
a token, a 64 MiB memory cap, a data directory in a temp dir. One agent serves the whole module, in order:

  - schemathesis (pinned, tests/hostile/requirements.txt) drives every operation of agent/openapi.yaml with a
    fixed seed: first invalid requests only, which must all be refused with a 4xx and leave the agent's
    state exactly as it was (regions, grants, transfers, memory used, the data directory's files); then
    valid and invalid ones mixed, at least 5,000 cases, with zero 5xx and every documented answer matching
    its schema;
  - oversized bodies (100 MiB by Content-Length, chunked, without a length; JSON nested 10^6 deep);
  - file names that leave the data directory (.., absolute paths, symbolic links) for load and save;
  - transfers to random remote keys (addresses of every size, unknown providers, extreme ranges);
  - 200 clients that send their headers a byte a second, 1,000 that send nothing, 1,000 connections at once;
  - after each, the agent still runs and answers /healthz.

CONDUIT_HOSTILE_CASES (default 5000) and CONDUIT_HOSTILE_SEED (default 20240611) size and seed the run.
"""

import difflib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests
from harness import AgentPool, ProcessSet, new_token
from hostile import clients as hostile

REPO = Path(__file__).resolve().parents[3]
CASES = int(os.environ.get("CONDUIT_HOSTILE_CASES", "5000"))
SEED = os.environ.get("CONDUIT_HOSTILE_SEED", "20240611")
STARTED = time.monotonic()


def schemathesis_binary():
    """The pinned schemathesis: next to this Python (the venv of scripts/python-env.sh), else that venv."""
    here = Path(sys.executable).parent / "schemathesis"
    if here.exists():
        return here
    r = subprocess.run([REPO / "scripts/python-env.sh"], capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, f"the Python venv could not be made (scripts/python-env.sh): {r.stderr.strip()}"
    return Path(r.stdout.strip()) / "bin" / "schemathesis"


class Target:
    """The agent under attack, with what the checks need: URL, token, data dir, and where output goes."""

    def __init__(self, agent, work):
        self.agent = agent
        self.url = agent.url
        self.token = agent.pool.token
        self.data = agent.data_dir
        self.work = work

    def alive(self, when):
        """The agent process still runs and answers /healthz."""
        assert self.agent.process.running(), f"the agent died {when}: {self.agent.log_tail(3)}"
        try:
            status = requests.get(f"{self.url}/healthz", timeout=5).status_code
        except requests.RequestException as e:
            status = repr(e)
        assert status == 200, f"the agent does not answer /healthz {when} ({status})"

    def keep(self, path):
        """On a failure the whole output is kept where the one line of why says."""
        kept = Path(os.environ.get("TMPDIR", "/tmp")) / f"conduit-hostile-{path.name}"
        shutil.copy(path, kept)
        return kept

    def schemathesis(self, out_name, *args):
        """schemathesis with the shared options (the agent's token, bounded requests, no example database in the
        repository); (exit status, the output file)."""
        out = self.work / out_name
        with open(out, "wb") as f:
            try:
                rc = subprocess.run(
                    [schemathesis_binary(), "run", REPO / "agent/openapi.yaml", "--url", self.url,
                     "-H", f"Authorization: Bearer {self.token}", "--seed", SEED, "--request-timeout", "10",
                     "--generation-database", "none", "--no-color", "--suppress-health-check", "all", *args],
                    cwd=self.work, stdout=f, stderr=subprocess.STDOUT, timeout=600 + CASES // 10).returncode
            except subprocess.TimeoutExpired:
                rc = 124
        return rc, out


def cases_run(out):
    """The number of test cases schemathesis generated and sent, from the line after "Test cases:"."""
    lines = out.read_text(errors="replace").splitlines()
    n = None
    for i, line in enumerate(lines[:-1]):
        m = re.match(r" *([0-9]+) generated", lines[i + 1]) if "Test cases:" in line else None
        if m:
            n = int(m.group(1))
    return n


@pytest.fixture(scope="module")
def target(build):
    work = Path(tempfile.mkdtemp(prefix="conduit-hostile."))
    try:
        with ProcessSet() as procs:
            new_token(work / "token")
            pool = AgentPool(build, work, work / "token", procs)
            try:
                # Long-polls answer within a second (schemathesis checks every answer comes within 5 s).
                agent = pool.start("hostile", "--memory-cap", "64MiB", "--log-level", "warn",
                                   "--long-poll-max-seconds", "1")
            except RuntimeError as e:
                pytest.fail(f"the agent did not start: {e}", pytrace=False)
            yield Target(agent, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)


# schemathesis alone may take its own bound (600 s + 1 s per 10 cases), plus what the test does around it.
SCHEMATHESIS_TIMEOUT = pytest.mark.timeout(700 + CASES // 10)


@SCHEMATHESIS_TIMEOUT
def test_invalid_requests_refused_and_change_nothing(target):
    # 1. Only invalid requests: every one refused with a 4xx, and nothing about the agent changes.
    print(hostile.cmd_fixtures(target.url, target.token))
    before = hostile.cmd_snapshot(target.url, target.token, target.data)
    t0 = time.monotonic()
    # No stateful phase here: it chains valid requests (list the grants, then revoke one) on purpose.
    rc, out = target.schemathesis("negative.out", "--mode", "negative", "--phases", "examples,coverage,fuzzing",
                                  "--max-examples", "100", "--checks", "not_a_server_error,negative_data_rejection")
    n = cases_run(out)
    assert rc == 0, f"schemathesis (invalid only) failed, see {target.keep(out)}"
    print(f"ok - schemathesis: {n or '?'} invalid requests, every one refused with a 4xx "
          f"({time.monotonic() - t0:.0f}s)")
    target.alive("after invalid requests")
    after = hostile.cmd_snapshot(target.url, target.token, target.data)
    if before != after:
        diff = target.work / "state.diff"
        diff.write_text("".join(difflib.unified_diff(before.splitlines(True), after.splitlines(True),
                                                     "before", "after")))
        pytest.fail(f"refused requests changed the agent's state, see {target.keep(diff)}", pytrace=False)
    print(f"ok - state unchanged by refused requests ({before.count(chr(34) + 'name' + chr(34))} regions, "
          f"grants, transfers, memory, files)")


@SCHEMATHESIS_TIMEOUT
def test_schemathesis_mixed_no_5xx_and_schemas_match(target):
    # 2. Valid and invalid requests mixed: no 5xx, documented answers match their schemas.
    t0 = time.monotonic()
    rc, out = target.schemathesis("all.out", "--mode", "all", "--max-examples", str(CASES // 10),
                                  "--checks", "not_a_server_error,response_schema_conformance,"
                                  "content_type_conformance", "--max-response-time", "5")
    n = cases_run(out)
    assert rc == 0, f"schemathesis failed, see {target.keep(out)}"
    assert (n or 0) >= CASES, f"schemathesis ran only {n or 0} cases, fewer than {CASES}"
    print(f"ok - schemathesis: {n} cases, zero 5xx, answers match agent/openapi.yaml ({time.monotonic() - t0:.0f}s)")
    target.alive("after schemathesis")


def test_huge_bodies(target):
    # 3. Bodies no one should send.
    print("ok - huge bodies:", hostile.cmd_bigbody(target.url, target.token))
    target.alive("after huge bodies")


def test_path_traversal(target):
    # 4. File names that leave the data directory.
    print("ok - path traversal:", hostile.cmd_traversal(target.url, target.token, os.fspath(target.data)))
    target.alive("after path traversal")


def test_random_remote_keys(target):
    # 5. Transfers whose grant keys point nowhere (random addresses, providers, ranges).
    print("ok - random remote keys:", hostile.cmd_keys(target.url, target.token, 40))
    target.alive("after random remote keys")


def test_slow_and_idle_clients(target):
    # 6. Slow and idle clients, several times the agent's 64 request threads: 200 sending their headers a byte
    # a second are each cut by the 10 s request deadline, 1,000 sending nothing by the 5 s keep-alive timeout,
    # and /healthz answers within 2 s all along (the agent holds waiting connections without a thread).
    failures = []
    for what, run in (("slowloris", lambda: hostile.cmd_slowloris(target.url, 200, 14, 2, 13)),
                      ("idle connections", lambda: hostile.cmd_idle(target.url, 1000, 8, 2))):
        try:
            print(f"ok - {what}:", run())
        except hostile.HostileFailure as e:
            failures.append(f"{what}: {e}")
    target.alive("after slow and idle clients")
    assert not failures, "; ".join(failures)


def test_flood(target):
    # 7. 1,000 connections at once, each asking for the region list.
    print("ok - flood:", hostile.cmd_flood(target.url, target.token, 1000, 0.99))
    target.alive("after 1,000 connections")


def test_agent_still_running_after_everything(target):
    assert target.agent.process.running(), f"the agent died: {target.agent.log_tail(3)}"
    print(f"ok - agent still running after everything ({time.monotonic() - STARTED:.0f}s in all)")
