"""TransferJobs from Python: in local mode (LocalJobs: the controller's YAML directory) and through a real
kube-apiserver (KubeJobs: the official client), reconciled by a real conduit-controller between real agents."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from harness import AgentPool, Build, KubeEnv, LocalController, MiB, ProcessSet, wait_for

import conduit
from conduit import JobTarget, KubeJobs, LocalJobs, TransferJob

SIZE = 3 * MiB + 5


def weights_job(name: str, **kw: object) -> TransferJob:
    return TransferJob(name, source_node="node-a", source_region="weights",
                       targets=[JobTarget("node-b", "weights", create_bytes=SIZE)], transport="tcp",
                       verify="crc32c", **kw)  # type: ignore[arg-type]


def test_local_job_applied_and_waited(nodes: Callable[..., list[conduit.Agent]],
                                      local_controller: Callable[..., LocalController],
                                      report: Callable[[str], None]) -> None:
    a, b = nodes("node-a", "node-b")
    ctl = local_controller()
    jobs = LocalJobs(ctl.jobs_dir)
    with a.allocate("weights", SIZE) as buf:
        buf.numpy()[:] = np.random.default_rng(1).integers(0, 256, SIZE, dtype=np.uint8)
        name = jobs.apply(weights_job("weights"))
        assert name == "weights" and (ctl.jobs_dir / "weights.yaml").exists()
        assert not [p for p in os.listdir(ctl.jobs_dir) if p.endswith(".tmp")], "the temp file was left"
        status = jobs.wait(name, timeout=30)
        assert status["phase"] == "Succeeded" and status["bytesTransferred"] == SIZE, status
        assert all(t.get("verified") for t in status["targets"]), status
        assert b.checksum("weights", slice=4096) == a.checksum("weights", slice=4096)

        with pytest.raises(conduit.Conflict, match="exists"):
            jobs.apply(weights_job("weights"))

        # A job that cannot succeed: its target region does not exist and is not created.
        failing = TransferJob("failing", source_node="node-a", source_region="weights",
                              targets=[JobTarget("node-b", "absent")], backoff_limit=0)
        jobs.apply(failing)
        with pytest.raises(conduit.TransferFailed) as e:
            jobs.wait("failing", timeout=30)
        assert e.value.reason and "absent" in e.value.message, e.value
        assert e.value.details.get("phase") == "Failed"
        report(f"local job Succeeded ({SIZE} bytes, verified); failing job: {e.value}")

        jobs.delete("weights")
        with pytest.raises(conduit.NotFound):
            jobs.get("weights")
        with pytest.raises(conduit.NotFound):
            jobs.delete("weights")
    with pytest.raises(conduit.InvalidArgument, match="DNS-1123"):
        jobs.apply(weights_job("../escape"))


def test_kube_job_through_the_apiserver(nodes: Callable[..., list[conduit.Agent]], agents: AgentPool,
                                        kube: Callable[[str], KubeEnv], build: Build, work: Path,
                                        processes: ProcessSet, report: Callable[[str], None]) -> None:
    namespace = "conduit-sdk"
    t0 = time.monotonic()
    k = kube(namespace)
    started = time.monotonic() - t0
    a, b = nodes("node-a", "node-b")
    argv = [os.fspath(build.controller), "--kubeconfig", os.fspath(k.kubeconfig), "--namespace", namespace,
            "--agents", agents.agents_flag(), "--agent-token-file", os.fspath(agents.token_file)]
    controller = processes.start(argv, name="controller", stdout=work / "controller.out",
                                 stderr=work / "controller.log")
    try:
        check_kube_job(KubeJobs(namespace, kubeconfig=k.kubeconfig), a, b, report, started)
    finally:
        # Before the apiserver stops (the kube fixture's teardown): it would wait ~30 s on the controller's
        # watches otherwise.
        controller.terminate(timeout=30)


def check_kube_job(jobs: KubeJobs, a: conduit.Agent, b: conduit.Agent, report: Callable[[str], None],
                   started: float) -> None:
    with a.allocate("weights", SIZE) as buf:
        buf.numpy()[:] = np.random.default_rng(2).integers(0, 256, SIZE, dtype=np.uint8)
        t0 = time.monotonic()
        name = jobs.apply(weights_job("weights"))
        status = jobs.wait(name, timeout=40)
        took = time.monotonic() - t0
        assert status["phase"] == "Succeeded" and status["bytesTransferred"] == SIZE, status
        assert b.checksum("weights", slice=4096) == a.checksum("weights", slice=4096)
        assert jobs.status(name)["phase"] == "Succeeded"

        with pytest.raises(conduit.Conflict) as e:
            jobs.apply(weights_job("weights"))
        assert e.value.reason == "AlreadyExists" and e.value.status == 409, e.value
        # The apiserver's schema refuses a slice under 4 KiB, in its own words.
        with pytest.raises(conduit.InvalidArgument) as invalid:
            jobs.apply(weights_job("tiny-chunks", chunk_bytes=1024))
        assert invalid.value.status == 422 and "chunkBytes" in invalid.value.message, invalid.value

        jobs.delete(name)

        def gone() -> bool:  # the controller's finalizer goes first
            try:
                jobs.get(name)
            except conduit.NotFound:
                return True
            return False

        wait_for(gone, 15, "the deleted TransferJob gone from the apiserver")
    report(f"apiserver up in {started:.1f} s; TransferJob applied -> Succeeded in {took:.2f} s ({SIZE} bytes); "
           "Conflict and schema refusal raised")
