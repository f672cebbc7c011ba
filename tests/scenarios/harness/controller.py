"""conduit-controller runs: local mode on a directory of TransferJob YAML files, or any other mode by argv.

Local mode (``--local-dir``) is the reconciler Kubernetes mode runs, with each job's status written back into
its file (atomically: a rename), so a scenario reads status with PyYAML and the controller's Events from its
log (``msg="event"`` lines).

    ctl = LocalController.start(build, work, pool, procs)
    ctl.apply(file_job("weights", "weights.bin", "weights", create_bytes=256 * MiB))
    wait_for(lambda: ctl.finished("weights"), 60, "the job finishing")
    assert ctl.phase("weights") == "Succeeded", ctl.condition_text("weights", "Failed")
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from .agents import AgentPool, Build
from .processes import Process, ProcessSet


def transfer_job(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    """A TransferJob object named NAME with SPEC."""
    return {"apiVersion": "conduit.dev/v1alpha1", "kind": "TransferJob", "metadata": {"name": name},
            "spec": spec}


def file_job(name: str, file: str, region: str, create_bytes: int | None = None, *,
             source: str = "node-a", target: str = "node-b", **spec: Any) -> dict[str, Any]:
    """The job moving SOURCE's FILE into REGION on TARGET (created with CREATE_BYTES unless None), over tcp,
    verified crc32c; SPEC adds fields (backoffLimit=6, maxBytesPerSecond=64 * MiB)."""
    t: dict[str, Any] = {"node": target, "region": region}
    if create_bytes is not None:
        t["create"] = {"bytes": create_bytes}
    return transfer_job(name, {"source": {"node": source, "file": file}, "targets": [t],
                               "transport": {"type": "tcp"}, "verify": "crc32c", **spec})


def condition(job: dict[str, Any], type_: str) -> dict[str, Any] | None:
    """JOB's status condition of TYPE (a metav1.Condition dict), or None."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("type") == type_:
            return dict(c)
    return None


def condition_text(job: dict[str, Any], type_: str) -> str:
    """"STATUS REASON: MESSAGE" of JOB's condition TYPE ("" when it has none): what kubectl describe shows."""
    c = condition(job, type_)
    return f"{c.get('status')} {c.get('reason')}: {c.get('message')}" if c else ""


class Controller:
    """One conduit-controller process (any mode): its log (stderr, appended across restarts) and stdout."""

    def __init__(self, build: Build, procs: ProcessSet, argv: Sequence[str], log: Path, out: Path) -> None:
        self.build = build
        self.procs = procs
        self.argv = list(argv)
        self.log = log
        self.out = out
        self.process: Process | None = None

    def start(self) -> Controller:
        self.process = self.procs.start([os.fspath(self.build.controller), *self.argv], name="controller",
                                        stdout=self.out, stderr=self.log)
        return self

    def kill(self) -> None:
        if self.process:
            self.process.kill()

    def pause(self) -> None:
        if self.process:
            self.process.pause()

    def resume(self) -> None:
        if self.process:
            self.process.resume()

    def terminate(self, timeout: float = 30.0) -> int | None:
        """SIGTERM and wait: the exit status (0 for a clean shutdown; None: it had to be killed)."""
        return self.process.terminate(timeout) if self.process else None

    def running(self) -> bool:
        return bool(self.process and self.process.running())

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


class LocalController(Controller):
    """``conduit-controller --local-dir WORK/jobs`` for the agents of a pool; the jobs' status from their files."""

    def __init__(self, build: Build, work: Path, pool: AgentPool, procs: ProcessSet,
                 extra: Sequence[str] = ()) -> None:
        self.jobs_dir = work / "jobs"
        self.jobs_dir.mkdir(parents=True, exist_ok=True)
        argv = ["--local-dir", os.fspath(self.jobs_dir), "--agents", pool.agents_flag(),
                "--agent-token-file", os.fspath(pool.token_file), "--log-level", "info", *extra]
        super().__init__(build, procs, argv, work / "controller.log", work / "controller.out")

    @classmethod
    def launch(cls, build: Build, work: Path, pool: AgentPool, procs: ProcessSet,
               extra: Sequence[str] = ()) -> LocalController:
        c = cls(build, work, pool, procs, extra)
        c.start()
        return c

    # ---- jobs
    def apply(self, job: dict[str, Any] | str, name: str | None = None) -> str:
        """Write a job (an object, or YAML text with NAME) as jobs/NAME.yaml, atomically; returns NAME."""
        if isinstance(job, dict):
            name = name or job["metadata"]["name"]
            text = yaml.safe_dump(job, sort_keys=False)
        else:
            text = job
        assert name, "a job given as text needs its name"
        tmp = self.jobs_dir / f".{name}.tmp"
        tmp.write_text(text)
        tmp.rename(self.jobs_dir / f"{name}.yaml")
        return name

    def job(self, name: str) -> dict[str, Any]:
        """The stored job (the controller rewrites it atomically); {} while it cannot be read."""
        try:
            with open(self.jobs_dir / f"{name}.yaml") as f:
                doc = yaml.safe_load(f)
        except (OSError, yaml.YAMLError):
            return {}
        return doc if isinstance(doc, dict) else {}

    def status(self, name: str) -> dict[str, Any]:
        return self.job(name).get("status") or {}

    def phase(self, name: str) -> str:
        return str(self.status(name).get("phase") or "")

    def finished(self, name: str) -> bool:
        """The job's phase is Succeeded or Failed."""
        return self.phase(name) in ("Succeeded", "Failed")

    def condition(self, name: str, type_: str) -> dict[str, Any] | None:
        return condition(self.job(name), type_)

    def condition_text(self, name: str, type_: str) -> str:
        return condition_text(self.job(name), type_)

    def events(self, name: str) -> list[str]:
        """The controller's Events for job NAME ("type=... reason=... message=..."), oldest first."""
        pattern = re.compile(rf"job=([^ ]*/)?{re.escape(name)} ")
        return [line[line.rindex("type="):] if "type=" in line else line
                for line in self.log_text().splitlines() if 'msg="event"' in line and pattern.search(line)]
