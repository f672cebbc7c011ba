"""Fixtures for the scenario suites (tests/scenarios/<suite>/test_*.py): real processes, nothing mocked.

    pytest tests/scenarios/faults --build-dir build          (tests/scenarios/run.sh sets up the venv first)

Options: ``--build-dir DIR`` (default $CONDUIT_BUILD_DIR, else <repo>/build): where bin/conduit-* are;
``--keep`` (or SCENARIOS_KEEP=1): keep each test's work directory (logs, job files) and print its path.

No process outlives its test: every child started through the harness runs in its own process group and dies
with the runner (PR_SET_PDEATHSIG); each test's processes are killed and reaped at its teardown; and every
process the run starts carries SCENARIOS_SESSION_TAG in its environment, so a test after which one is still
alive (however it was started: a subshell, a double fork, a daemon) FAILS at teardown, and the run fails if
any is alive at its end. Leftovers are killed either way.

A failed test prints the last lines of every *.log in its work directory (agents, controllers) under
"Captured stdout teardown".
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import uuid
from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree

from harness import netns as netns_mod  # noqa: E402
from harness.agents import AgentPool, BinaryMissing, Build, new_token  # noqa: E402
from harness.controller import LocalController  # noqa: E402
from harness.kube import KubeEnv, KubeToolsMissing  # noqa: E402
from harness.netns import Network  # noqa: E402
from harness.processes import (SESSION_TAG, ProcessSet, conduit_processes, kill_pids,  # noqa: E402
                               lingering_processes, long_lived, tagged_processes)

REPO = Path(__file__).resolve().parents[2]


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("conduit scenarios")
    g.addoption("--build-dir", default=os.environ.get("CONDUIT_BUILD_DIR", os.fspath(REPO / "build")),
                help="the build directory whose bin/ holds conduit-agent, conduit-controller (default: build)")
    g.addoption("--keep", action="store_true", default=os.environ.get("SCENARIOS_KEEP") == "1",
                help="keep each test's work directory (logs, job files)")


def pytest_configure(config: pytest.Config) -> None:
    tag = uuid.uuid4().hex
    os.environ[SESSION_TAG] = tag  # inherited by every process the run starts, however it is started
    config.stash[_tag_key] = tag
    config.stash[_conduit_at_start_key] = set(conduit_processes())


_tag_key = pytest.StashKey[str]()
_conduit_at_start_key = pytest.StashKey[set[int]]()


def _describe(procs: dict[int, str]) -> str:
    return "; ".join(f"pid {pid}: {cmd[:160]}" for pid, cmd in sorted(procs.items()))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Fail the run when a process it started is still alive (then kill it)."""
    tag = session.config.stash.get(_tag_key, None)
    if tag is None:
        return
    left = lingering_processes(tag)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if left:
        kill_pids(list(left))
        if reporter:
            reporter.write_line(f"FAILED: processes left running at the end of the run (killed now): "
                                f"{_describe(left)}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    # conduit-* processes that appeared during the run without our tag belong to someone else (another
    # run on this machine); they are named, not failed on.
    others = {p: c for p, c in conduit_processes().items()
              if p not in session.config.stash[_conduit_at_start_key] and p not in left}
    if others and reporter:
        reporter.write_line(f"note: conduit processes not started by this run: {_describe(others)}")


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, object, object]:
    rep = yield
    setattr(item, f"rep_{call.when}", rep)
    return rep


@pytest.fixture(autouse=True)
def _no_process_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails the test when a process started during it is still alive after its fixtures are torn down."""
    tag = request.config.stash[_tag_key]
    before = set(tagged_processes(tag))
    yield
    left = lingering_processes(tag, exclude=before | long_lived())
    if left:
        kill_pids(list(left))
        pytest.fail(f"the test left processes running (killed now): {_describe(left)}", pytrace=False)


_report_key = pytest.StashKey[list[str]]()


@pytest.fixture
def report(request: pytest.FixtureRequest) -> Callable[[str], None]:
    """``report("recovery: kill -> Succeeded 7.1 s")``: a line for the run's closing "scenario results"
    section (shown whether or not output is captured): what a scenario measured."""

    def say(text: str) -> None:
        request.config.stash.setdefault(_report_key, []).append(f"ok - {request.node.name}: {text}")

    return say


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, exitstatus: int,
                            config: pytest.Config) -> None:
    lines = config.stash.get(_report_key, [])
    if lines:
        terminalreporter.section("scenario results")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    """The repository (scripts/, crds/, tests/)."""
    return REPO


@pytest.fixture(scope="session")
def build(request: pytest.FixtureRequest) -> Build:
    """The build directory (--build-dir): ``build.agent``, ``build.controller``, ``build.path("conduit-x")``."""
    b = Build(Path(request.config.getoption("--build-dir")).resolve())
    try:
        b.agent
        b.controller
    except BinaryMissing as e:
        pytest.fail(str(e), pytrace=False)
    return b


def _tails(work: Path, lines: int = 15) -> str:
    out = []
    for f in sorted(work.glob("*.log")):
        text = f.read_text(errors="replace").splitlines()[-lines:]
        out.append(f"--- {f.name}\n" + "\n".join(text))
    return "\n".join(out)


@pytest.fixture
def work(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A fresh work directory for the test (agents' data dirs and logs, job files); removed afterwards unless
    --keep. On a failure, the tails of its *.log files are printed."""
    name = request.node.name.replace("/", "_")[:60]
    d = Path(tempfile.mkdtemp(prefix=f"conduit-{name}.", dir=os.environ.get("TMPDIR")))
    yield d
    failed = any(getattr(getattr(request.node, f"rep_{w}", None), "failed", False) for w in ("setup", "call"))
    if failed:
        print(_tails(d))
    if request.config.getoption("--keep"):
        print(f"kept {d}")
    else:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def processes() -> Iterator[ProcessSet]:
    """A ProcessSet: ``processes.start(argv, name=..., stdout=path, stderr=path)``; all killed and reaped at
    teardown."""
    with ProcessSet() as p:
        yield p


@pytest.fixture
def token_file(work: Path) -> Path:
    """WORK/token: a fresh random bearer token (hex) for the agents; ``token_file.read_text().strip()``."""
    p = work / "token"
    new_token(p)
    return p


@pytest.fixture
def network() -> Iterator[Callable[..., Network]]:
    """Factory: ``net = network("node-a", "node-b")`` makes the nodes' namespaces on a bridge (harness.netns);
    fails the test where namespaces cannot be made (not root, no ``ip netns``): these scenarios are the
    suite's, not optional hardware, so a machine that cannot run them must not pass them. Removed at teardown."""
    made: list[Network] = []

    def make(*nodes: str) -> Network:
        if not netns_mod.supported():
            pytest.fail("cannot create network namespaces here (needs root and a working 'ip netns')")
        made.append(Network(nodes))
        return made[-1]

    yield make
    for n in made:
        n.down()


@pytest.fixture
def agents(build: Build, work: Path, token_file: Path, processes: ProcessSet) -> AgentPool:
    """The test's conduit-agents (harness.agents.AgentPool): ``agents.start("node-a", "--memory-cap", "1GiB")``
    returns an Agent (``.url``, ``.get/.post/.call``, ``.kill()``, ``.restart()``, ``.newest_transfer()``);
    ``agents["node-a"]``. To run them in network namespaces set ``agents.network = network("node-a", ...)``
    before the first start."""
    return AgentPool(build, work, token_file, processes)


@pytest.fixture
def local_controller(build: Build, work: Path, agents: AgentPool,
                     processes: ProcessSet) -> Callable[..., LocalController]:
    """Factory: ``ctl = local_controller(*extra_args)`` starts conduit-controller in local mode on WORK/jobs for
    every agent started so far; ``ctl.apply(file_job(...))``, ``ctl.phase(name)``, ``ctl.events(name)``."""

    def start(*extra: str) -> LocalController:
        return LocalController.launch(build, work, agents, processes, extra)

    return start


@pytest.fixture
def kube(repo_root: Path, work: Path) -> Iterator[Callable[[str], KubeEnv]]:
    """Factory: ``k = kube("my-namespace")`` starts etcd + kube-apiserver in WORK/env (scripts/kube-env.sh),
    applies the CRDs and creates the namespace (harness.kube.KubeEnv: ``k.kubectl(...)``, ``k.get(path)``,
    ``k.kubeconfig``); fails the test when the kube tools are not built (scripts/kube-tools.sh), never skips it.
    Stopped at teardown."""
    envs: list[KubeEnv] = []

    def start(namespace: str) -> KubeEnv:
        try:
            env = KubeEnv(repo_root, work / "env")
        except KubeToolsMissing as e:
            pytest.fail(f"{e} (build them with scripts/kube-tools.sh)")
        envs.append(env)
        env.setup(namespace)
        return env

    yield start
    for e in envs:
        e.stop()
