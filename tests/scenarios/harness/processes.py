"""Child processes that cannot outlive the test that started them.

Every process started through a :class:`ProcessSet` runs in its own process group (so a signal reaches
whatever it forked too) with ``PR_SET_PDEATHSIG=SIGKILL`` (so it dies with the test runner even if the
runner is killed), and :meth:`ProcessSet.stop_all` kills and reaps each group. The runner also exports
:data:`SESSION_TAG` into its own environment, which every descendant inherits however it was started;
:func:`tagged_processes` finds those still alive by scanning /proc, which is how the suite fails a test (and
the whole run) that leaves one behind, even one started through a subshell or a double fork.

    with ProcessSet() as procs:
        agent = procs.start(["conduit-agent", "--listen", "127.0.0.1:0"], name="node-a", stdout=work / "a.out")
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO, Any

#: The environment variable whose value marks this test run's processes (not CONDUIT_*: the agent reads those).
SESSION_TAG = "SCENARIOS_SESSION_TAG"

#: Pids a wider-scoped fixture (module, session) owns: the per-test leak check leaves them to its teardown.
_long_lived: set[int] = set()


def outlive_tests(*pids: int) -> None:
    """Mark PIDS as owned by a module- or session-scoped fixture: not a leak when a test ends (the run's
    final check still fails on any left at its end)."""
    _long_lived.update(pids)


def long_lived() -> set[int]:
    return set(_long_lived)


_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def _child_setup() -> None:
    # Runs in the child between fork and exec. The death signal survives exec (it is cleared only for
    # set-uid programs), so `ip netns exec ... conduit-agent` keeps it too.
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Process:
    """One started child: its own process group, its output in files. Use :meth:`ProcessSet.start`."""

    def __init__(self, name: str, argv: Sequence[str], popen: subprocess.Popen[bytes],
                 stdout: Path | None, stderr: Path | None) -> None:
        self.name = name
        self.argv = list(argv)
        self.popen = popen
        self.stdout_path = stdout
        self.stderr_path = stderr

    def __repr__(self) -> str:
        return f"Process({self.name!r}, pid={self.pid}, running={self.running()})"

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def stdin(self) -> IO[bytes] | None:
        return self.popen.stdin

    @property
    def returncode(self) -> int | None:
        return self.popen.poll()

    def running(self) -> bool:
        """True until the process exited (a stopped process is still running)."""
        return self.popen.poll() is None

    def signal(self, sig: int) -> None:
        """Send SIG to the process's whole group; a no-op once it has been reaped and its group is empty."""
        try:
            os.killpg(self.pid, sig)
        except ProcessLookupError:
            pass

    def pause(self) -> None:
        """SIGSTOP (a process frozen, as a node under memory pressure or a debugger would)."""
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def kill(self) -> None:
        """SIGKILL the group (after SIGCONT, so a stopped one dies too) and reap the process."""
        self.signal(signal.SIGCONT)
        self.signal(signal.SIGKILL)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:  # in an uninterruptible sleep: reaped by stop_all's retry
            pass

    def terminate(self, timeout: float = 10.0) -> int | None:
        """SIGTERM and wait up to TIMEOUT s for a clean exit; SIGKILL after that. Returns the exit status
        of the clean exit (negative: the signal that ended it), None when it had to be killed."""
        self.signal(signal.SIGCONT)
        if self.running():
            try:
                self.popen.send_signal(signal.SIGTERM)
            except ProcessLookupError:
                pass
        try:
            rc = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return None
        self.signal(signal.SIGKILL)  # whatever it forked and left in its group
        return rc

    def wait(self, timeout: float | None = None) -> int:
        return self.popen.wait(timeout=timeout)

    def read_stdout(self) -> str:
        return self.stdout_path.read_text(errors="replace") if self.stdout_path and self.stdout_path.exists() else ""

    def read_stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace") if self.stderr_path and self.stderr_path.exists() else ""


class ProcessSet:
    """The processes one fixture (or test) started; :meth:`stop_all` kills and reaps every one of them.

    ``stdout``/``stderr`` are files (appended to, so a restarted process keeps its earlier log) or None for
    /dev/null; ``stdin`` is DEVNULL unless ``stdin=subprocess.PIPE``. ``env`` is added to the runner's
    environment.
    """

    def __init__(self, *, long_lived: bool = False) -> None:
        self._procs: list[Process] = []
        self._long_lived = long_lived  # a module/session fixture's: see outlive_tests

    def __enter__(self) -> ProcessSet:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop_all()

    def __iter__(self) -> Any:
        return iter(list(self._procs))

    def start(self, argv: Sequence[str | os.PathLike[str]], *, name: str | None = None,
              stdout: Path | None = None, stderr: Path | None = None, env: Mapping[str, str] | None = None,
              cwd: Path | None = None, stdin: int | None = subprocess.DEVNULL) -> Process:
        args = [os.fspath(a) for a in argv]
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        out: IO[bytes] | int = open(stdout, "ab") if stdout else subprocess.DEVNULL
        err: IO[bytes] | int = open(stderr, "ab") if stderr else subprocess.DEVNULL
        try:
            popen = subprocess.Popen(args, stdin=stdin, stdout=out, stderr=err, env=full_env, cwd=cwd,
                                     start_new_session=True, preexec_fn=_child_setup)
        finally:
            for f in (out, err):
                if not isinstance(f, int):
                    f.close()
        proc = Process(name or Path(args[0]).name, args, popen, stdout, stderr)
        self._procs.append(proc)
        if self._long_lived:
            outlive_tests(proc.pid)
        return proc

    def stop_all(self) -> None:
        """Kill every process this set started (and its group), then reap them all."""
        for p in self._procs:
            p.signal(signal.SIGCONT)
            p.signal(signal.SIGKILL)
        deadline = time.monotonic() + 15
        for p in self._procs:
            try:
                p.popen.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            if p.popen.stdin:
                try:
                    p.popen.stdin.close()
                except OSError:
                    pass
        self._procs.clear()


def tagged_processes(tag: str, *, exclude: set[int] | None = None) -> dict[int, str]:
    """Live (not zombie) processes whose environment holds SESSION_TAG=TAG, as {pid: command line};
    the calling process and EXCLUDE left out."""
    needle = f"{SESSION_TAG}={tag}".encode()
    me = os.getpid()
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        if pid == me or (exclude and pid in exclude):
            continue
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle not in f.read().split(b"\0"):
                    continue
            with open(f"/proc/{pid}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
            if state in (b"Z", b"X"):
                continue
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                found[pid] = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return found


def lingering_processes(tag: str, *, exclude: set[int] | None = None, settle: float = 0.3) -> dict[int, str]:
    """tagged_processes, looked at a few times over SETTLE s: one scan of /proc can miss a process that a
    parent exiting at that moment has just forked (a shell backgrounding a daemon)."""
    found: dict[int, str] = {}
    for _ in range(3):
        found.update(tagged_processes(tag, exclude=exclude))
        time.sleep(settle / 3)
    alive = tagged_processes(tag, exclude=exclude)
    return {p: alive.get(p, c) for p, c in {**found, **alive}.items() if p in alive}


def conduit_processes() -> dict[int, str]:
    """Every live process whose executable is named conduit-* (any run's), as {pid: command line}."""
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if argv and os.path.basename(argv[0]).startswith(b"conduit-") and state not in (b"Z", b"X"):
            found[int(entry.name)] = b" ".join(argv).decode(errors="replace").strip()
    return found


def kill_pids(pids: Sequence[int]) -> None:
    """SIGKILL PIDS (leaked processes), by pidfd where the kernel has it so a reused pid is never hit."""
    for pid in pids:
        try:
            fd = os.pidfd_open(pid)
        except (ProcessLookupError, OSError):
            continue
        try:
            signal.pidfd_send_signal(fd, signal.SIGKILL)
        except ProcessLookupError:
            pass
        finally:
            os.close(fd)
