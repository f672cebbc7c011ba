"""A trainer broadcasting new weights each step to three inference processes, in local mode.

The trainer (this process) keeps its weights in a shared buffer on the first agent (``node-a``): it writes
them in place through a numpy view, and each step applies a Chain TransferJob that moves them to region
``weights`` on the three other agents (node-a -> node-b -> node-c -> node-d, each hop forwarding what landed
on it). Three inference processes, one per receiving agent, block in ``wait_version`` on their region; when a
step's bytes have landed (and been verified) there, each checks the region's CRC32C against the trainer's and
reports the time from publish to ready.

Needs four conduit-agents (the first with its import socket on this machine) and conduit-controller in local
mode on JOBS_DIR for them. ``run_weights_broadcast.sh`` beside this file starts all of that on loopback and
runs this; by hand:

    python weights_broadcast.py --agents node-a=http://127.0.0.1:7070,node-b=...,node-c=...,node-d=... \\
        --jobs-dir /tmp/jobs --token-file /tmp/token --import-socket /tmp/node-a.sock --steps 5 --mib 64

The trainer waits for every reader to have checked step k before publishing step k+1 (readers read the region
the next step overwrites); a reader that must not hold the trainer back uses a DoubleBuffer instead
(docs/python.md).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import queue
import sys
import time
from typing import Any

import numpy as np

import datetime

from conduit import Agent, ConduitError, JobTarget, LocalJobs, Target, TransferJob

REGION = "weights"


def parse_agents(text: str) -> list[tuple[str, str]]:
    pairs = [item.split("=", 1) for item in text.split(",") if item]
    if len(pairs) != 4 or any(len(p) != 2 for p in pairs):
        raise SystemExit("--agents wants four NODE=URL pairs: the trainer's agent first, then three receivers")
    return [(p[0], p[1]) for p in pairs]


def inference(node: str, url: str, token_file: str, steps: int, published: Any, results: Any) -> None:
    """One inference process: wait for each new version of its region, check it, report."""
    agent = Agent(url, token_file=token_file)
    seen = 0
    try:
        while seen < steps:
            update = agent.wait_version(REGION, after=seen, timeout=120)
            ready = time.time()
            # The region is fresh and each step is one job: version k holds step k.
            step, expected, published_at = published.get(timeout=60)
            if update.version != step:
                results.put((node, step, False, 0.0, f"version {update.version}, expected {step}"))
                return
            ok = agent.checksum(REGION) == expected
            results.put((node, step, ok, ready - published_at, update.updated_by))
            seen = update.version
    except (ConduitError, TimeoutError, queue.Empty) as e:
        results.put((node, seen + 1, False, 0.0, f"{type(e).__name__}: {e}"))


def wire_seconds(trainer: Agent, receiver: Agent, nbytes: int) -> float:
    """The bytes' time on the wire alone, measured now: a plain transfer of the trainer's region to a scratch
    region on the first receiver (no verify, no job), from the agent's startedAt to its finishedAt; the best
    of three, so the first one's page faults in the new region do not count."""
    receiver.create_region("wire-probe", nbytes)
    try:
        best = float("inf")
        for _ in range(3):
            status = trainer.transfer(REGION, [Target(receiver, "wire-probe")], verify="none").wait(timeout=300)
            at = {k: datetime.datetime.fromisoformat(str(status.raw[k]).replace("Z", "+00:00")).timestamp()
                  for k in ("startedAt", "finishedAt")}
            best = min(best, at["finishedAt"] - at["startedAt"])
        return best
    finally:
        receiver.delete_region("wire-probe")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--agents", required=True, help="node-a=URL,node-b=URL,node-c=URL,node-d=URL (trainer first)")
    ap.add_argument("--jobs-dir", required=True, help="the local-mode controller's --local-dir")
    ap.add_argument("--token-file", required=True, help="the agents' bearer token file")
    ap.add_argument("--import-socket", required=True, help="the first agent's --import-socket")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--mib", type=int, default=64, help="size of the weights in MiB")
    args = ap.parse_args()

    (trainer_node, trainer_url), *receivers = parse_agents(args.agents)
    nbytes = args.mib << 20
    trainer = Agent(trainer_url, token_file=args.token_file, import_socket=args.import_socket)
    receiver_agents = [Agent(url, token_file=args.token_file) for _, url in receivers]
    jobs = LocalJobs(args.jobs_dir)

    ctx = mp.get_context("spawn")  # children make their own HTTP sessions; nothing inherited
    results: Any = ctx.Queue()
    feeds: list[Any] = [ctx.Queue() for _ in receivers]
    for a in receiver_agents:
        a.create_region(REGION, nbytes)  # fresh: version 0
    readers = [ctx.Process(target=inference, args=(node, url, args.token_file, args.steps, feed, results))
               for (node, url), feed in zip(receivers, feeds, strict=True)]
    failed = False
    try:
        with trainer.allocate(REGION, nbytes) as buf:
            weights = buf.numpy(np.float32)
            for r in readers:
                r.start()
            rng = np.random.default_rng(0)
            print(f"trainer on {trainer_node}: {args.mib} MiB of weights, Chain to "
                  f"{' -> '.join(n for n, _ in receivers)}, {args.steps} steps")
            weights[:] = 1.0
            wire = wire_seconds(trainer, receiver_agents[0], nbytes)
            print(f"wire alone (one plain transfer of the same bytes, this run): {wire * 1000:.0f} ms")
            slowest: list[float] = []
            ratios: list[float] = []
            for step in range(1, args.steps + 1):
                weights[:] = rng.standard_normal(weights.size, dtype=np.float32)  # in place: no copy to send
                expected = trainer.checksum(REGION)
                published_at = time.time()
                for feed in feeds:
                    feed.put((step, expected, published_at))
                job = TransferJob(f"weights-step-{step}", source_node=trainer_node, source_region=REGION,
                                  targets=[JobTarget(node, REGION) for node, _ in receivers], strategy="Chain",
                                  verify="crc32c", transport="tcp")
                name = jobs.apply(job)
                status = jobs.wait(name, timeout=300)
                jobs.delete(name)
                job_wire = float((status.get("stages") or {}).get("wireSeconds") or 0)
                # Every reader reports this step before the next overwrites its region.
                step_seconds = 0.0
                for _ in receivers:
                    node, got, ok, seconds, detail = results.get(timeout=120)
                    failed |= not ok
                    step_seconds = max(step_seconds, seconds)
                    print(f"step {got} {node}: {'CRC32C ok' if ok else 'MISMATCH'}, publish -> ready "
                          f"{seconds * 1000:.0f} ms ({detail})")
                slowest.append(step_seconds)
                ratios.append(step_seconds / job_wire if job_wire > 0 else float("nan"))
                print(f"step {step}: every receiver ready {step_seconds * 1000:.0f} ms after publish: "
                      f"{ratios[-1]:.2f}x the job's own wire time ({job_wire * 1000:.0f} ms), "
                      f"{step_seconds / wire:.2f}x one plain transfer's")
                if failed:
                    break
            if slowest and not failed:
                ordered = sorted(slowest)
                by_ratio = sorted(ratios)
                print(f"publish -> all ready: median {ordered[len(ordered) // 2] * 1000:.0f} ms "
                      f"[{ordered[0] * 1000:.0f}, {ordered[-1] * 1000:.0f}]; "
                      f"{by_ratio[len(by_ratio) // 2]:.2f}x [{by_ratio[0]:.2f}, {by_ratio[-1]:.2f}] the job's wire "
                      f"time; {ordered[len(ordered) // 2] / wire:.2f}x one plain transfer ({wire * 1000:.0f} ms), "
                      "which on one machine the three hops share the CPUs against")
    finally:
        for r in readers:
            r.join(timeout=10)
            if r.is_alive():
                r.terminate()
        for a in receiver_agents:
            try:
                a.delete_region(REGION)
            except ConduitError as e:
                print(f"cleanup: {e}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
