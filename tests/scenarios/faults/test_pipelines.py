"""Pipelined jobs (docs/pipelines.md) end to end: real agents and a local-mode controller.

Every job shape a user writes, with verify none and crc32c, at a size that is not a multiple of the chunk,
compared byte for byte with ``cmp``: region -> region, file -> region, file -> region saved to a file, and
file -> file (no region: the target holds only its ring, --pipeline-bytes). Then the failures retrying cannot
fix: the target's disk filling mid-save (a 24 MiB tmpfs under its data directory) fails the job at once with
NoSpaceLeft and leaves no file under the final name; a source file that shrinks mid-job fails it with
SourceFileChanged.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from harness import Agent, LocalController, MiB, assert_succeeded, random_file, transfer_job, wait_for

SIZE = 40 * MiB + 12345  # not a multiple of the 1 MiB chunk


def cmp(a: Path, b: Path) -> None:
    r = subprocess.run(["cmp", str(a), str(b)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, f"{a} and {b} differ: {r.stdout.strip()} {r.stderr.strip()}"


def no_temporaries(d: Path) -> list[str]:
    return [str(p) for p in d.rglob("*") if ".tmp-" in p.name]


def job(name: str, source: dict[str, Any], target: dict[str, Any], verify: str, **spec: Any) -> dict[str, Any]:
    return transfer_job(name, {"source": {"node": "node-a", **source}, "targets": [{"node": "node-b", **target}],
                               "transport": {"type": "tcp"}, "verify": verify, "backoffLimit": 1, **spec})


@pytest.fixture
def pipeline(agents: Any, local_controller: Callable[..., LocalController],
             work: Path) -> tuple[Agent, Agent, LocalController]:
    a = agents.start("node-a", "--memory-cap", "512MiB")
    b = agents.start("node-b", "--memory-cap", "512MiB", "--pipeline-bytes", "8MiB")
    random_file(work / "node-a" / "src.bin", size=SIZE)
    return a, b, local_controller()


@pytest.mark.parametrize("verify", ["none", "crc32c"])
def test_every_job_shape_arrives_byte_identical(pipeline: tuple[Agent, Agent, LocalController], work: Path,
                                                verify: str, report: Callable[[str], None]) -> None:
    a, b, ctl = pipeline
    src = work / "node-a" / "src.bin"
    a.post("/v1/regions", {"name": "src", "file": "src.bin", "mode": "load"})
    shapes = {
        "r2r": ({"region": "src"}, {"region": "r2r", "create": {"bytes": SIZE}}),
        "f2r": ({"file": "src.bin"}, {"region": "f2r", "create": {"bytes": SIZE}}),
        "f2rs": ({"file": "src.bin"}, {"region": "f2rs", "create": {"bytes": SIZE}, "file": "out/f2rs.bin"}),
        "f2f": ({"file": "src.bin"}, {"file": "out/f2f.bin"}),
    }
    for name, (source, target) in shapes.items():
        ctl.apply(job(f"{name}-{verify.replace('32', '')}", source, target, verify))
    for name in shapes:
        j = f"{name}-{verify.replace('32', '')}"
        wait_for(lambda j=j: ctl.finished(j), 90, f"job {j} finishing")
        assert_succeeded(ctl, j, "job")
        status = ctl.status(j)
        assert status.get("slowestStage"), f"{j}: no slowestStage in {status}"
        report(f"{j}: {status.get('throughput')}, slowest {status.get('slowestStage')}")
    # Regions: saved through the API and compared; files: compared where they landed.
    b.save_and_compare("r2r", src)
    b.save_and_compare("f2r", src)
    b.save_and_compare("f2rs", src)
    cmp(src, work / "node-b" / "out" / "f2rs.bin")
    cmp(src, work / "node-b" / "out" / "f2f.bin")
    assert no_temporaries(work / "node-b") == []
    regions = {r["name"] for r in b.get("/v1/regions").get("items", [])}
    assert regions == {"r2r", "f2r", "f2rs"}, f"a file target left a region behind: {regions}"


def test_a_full_disk_fails_the_job_at_once_and_leaves_no_file(
        pipeline: tuple[Agent, Agent, LocalController], work: Path, report: Callable[[str], None]) -> None:
    a, b, ctl = pipeline
    full = work / "node-b" / "small"
    full.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(full)], check=True)
    try:
        ctl.apply(job("full", {"file": "src.bin"}, {"file": "small/copy.bin"}, "crc32c", backoffLimit=3))
        wait_for(lambda: ctl.finished("full"), 60, "the job on a full disk finishing")
        assert ctl.phase("full") == "Failed", ctl.status("full")
        failed = ctl.condition("full", "Failed") or {}
        assert failed.get("reason") == "NoSpaceLeft", failed
        assert "No space left on device" in str(failed.get("message")), failed
        assert int(ctl.status("full").get("retries") or 0) == 0, "a full disk was retried"
        assert not (full / "copy.bin").exists(), "a partial file appeared under the final name"
        wait_for(lambda: no_temporaries(full) == [], 10, "the temporary file being removed")
        report(f"Failed at once: {failed.get('reason')}: {failed.get('message')}")
    finally:
        subprocess.run(["umount", "-l", str(full)], check=False)


def test_a_source_file_that_shrinks_fails_the_job(pipeline: tuple[Agent, Agent, LocalController],
                                                  work: Path) -> None:
    a, b, ctl = pipeline
    ctl.apply(job("shrink", {"file": "src.bin"}, {"file": "copy.bin"}, "crc32c", maxBytesPerSecond=8 * MiB))
    wait_for(lambda: a.transfer_past(4 * MiB), 30, "the job's transfer moving")
    (work / "node-a" / "src.bin").write_bytes(b"shorter now")
    wait_for(lambda: ctl.finished("shrink"), 60, "the job finishing")
    assert ctl.phase("shrink") == "Failed", ctl.status("shrink")
    failed = ctl.condition("shrink", "Failed") or {}
    assert failed.get("reason") == "SourceFileChanged", failed
    assert not (work / "node-b" / "copy.bin").exists()


def test_fanout_every_target_in_flight_at_once_arrives_byte_identical(
        agents: Any, local_controller: Callable[..., LocalController], work: Path,
        report: Callable[[str], None]) -> None:
    """Fanout to 2, 3 and 4 targets, verify none and crc32c, regions and file targets (rings) mixed, from a file
    and from a region: every target compared with cmp. One 4-target job at 16 MiB/s per target is watched on
    the source agent until every target is part-way at the same moment: the targets are in flight at once,
    not one after another."""
    nodes = ["node-b", "node-c", "node-d", "node-e"]
    a = agents.start("node-a", "--memory-cap", "512MiB")
    targets = {n: agents.start(n, "--memory-cap", "512MiB", "--pipeline-bytes", "8MiB") for n in nodes}
    src = random_file(work / "node-a" / "src.bin", size=SIZE)
    a.post("/v1/regions", {"name": "src", "file": "src.bin", "mode": "load"})
    ctl = local_controller()

    def fanout(name: str, n: int, verify: str, source: dict[str, Any], **spec: Any) -> None:
        # Even targets into new regions, odd ones straight into files.
        ts = [{"node": node, "region": name, "create": {"bytes": SIZE}} if i % 2 == 0 else
              {"node": node, "file": f"out/{name}.bin"} for i, node in enumerate(nodes[:n])]
        ctl.apply(transfer_job(name, {"source": {"node": "node-a", **source}, "targets": ts, "strategy": "Fanout",
                                      "transport": {"type": "tcp"}, "verify": verify, "backoffLimit": 1, **spec}))

    fanout("watched", 4, "crc32c", {"region": "src"}, maxBytesPerSecond=16 * MiB)

    def all_part_way() -> list[int] | None:
        t = a.newest_transfer()
        done = [int(x.get("bytesDone") or 0) for x in t.get("targets") or []]
        return done if len(done) == 4 and all(0 < d < SIZE for d in done) else None

    seen = wait_for(all_part_way, 30, "all 4 targets part-way at the same moment",
                    interval=0.05, detail=lambda: a.newest_transfer().get("targets"))
    jobs = ["watched"]
    for n in (2, 3, 4):
        for verify in ("none", "crc32c"):
            name = f"fan{n}-{verify.replace('32', '')}"
            fanout(name, n, verify, {"file": "src.bin"} if n != 3 else {"region": "src"})
            jobs.append(name)
    for j in jobs:
        wait_for(lambda j=j: ctl.finished(j), 120, f"job {j} finishing")
        assert_succeeded(ctl, j, "job")
        states = [t.get("state") for t in ctl.status(j).get("targets") or []]
        assert set(states) == {"Succeeded"}, f"{j}: target states {states}"
    for j in jobs:
        n = len(ctl.status(j).get("targets") or [])
        for i, node in enumerate(nodes[:n]):
            if i % 2 == 0:
                targets[node].save_and_compare(j, src)
            else:
                cmp(src, work / node / "out" / f"{j}.bin")
    report(f"the 4 targets of 'watched' at once, bytes done: {seen}")
    report(f"{len(jobs)} Fanout jobs (2, 3, 4 targets; none and crc32c; file and region sources) byte-identical")
