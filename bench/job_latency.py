#!/usr/bin/env python3
"""How soon a TransferJob's end is seen: local mode, two conduit-agents on loopback, one small region -> region
job per `conduit-controller --once-job` run.

For each job it prints nothing; at the end, per controller binary:
  seen     the time the job's file first showed `phase: Succeeded` (polled every millisecond) minus the
           agent's `finishedAt` for the job's transfer: how long after the bytes were done the user sees it
  exit     the time `--once-job` returned minus the time the file showed Succeeded: what a script waits on
           top of that
  wall     the whole `--once-job` run, from start to exit (apply -> done, for a script)
as p50, p90, min and max over every job, and the median of each round's p50 with its range. Binaries run
interleaved (one job each in turn), so a noisy neighbour hits all of them alike.

Usage: bench/job_latency.py [--build build] [--controller before=/tmp/controller-before]
                            [--controller after=build/bin/conduit-controller] [--jobs 10] [--rounds 3]
                            [--size 64MiB]
Standard library only; prints figures, asserts none.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from job_bench import Agents, parse_time, size_arg  # bench/, this script's own folder

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def summary(values):
    ms = [v * 1000 for v in values]
    return (f"p50 {percentile(ms, 0.5):7.1f}  p90 {percentile(ms, 0.9):7.1f}  "
            f"min {min(ms):7.1f}  max {max(ms):7.1f} ms")


class SucceededWatch:
    """Polls a job file every millisecond (stat, then a read when it changed) for `phase: Succeeded`."""

    def __init__(self, path):
        self.path, self.seen_at, self._stop = path, None, threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self):
        last = None
        while not self._stop.is_set() and self.seen_at is None:
            try:
                st = os.stat(self.path)
                stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
                if stamp != last:
                    last = stamp
                    with open(self.path) as f:
                        if re.search(r"^  phase: Succeeded$", f.read(), re.M):
                            self.seen_at = time.time()
            except FileNotFoundError:
                pass
            time.sleep(0.001)

    def stop(self):
        self._stop.set()
        self._thread.join()


def transfer_ids(agents):
    return {t["id"]: t for t in json.loads(agents.call("node-a", "GET", "/v1/transfers"))["items"]}


def run_job(controller, work, agents, name, size):
    jobs = os.path.join(work, "jobs")
    os.makedirs(jobs, exist_ok=True)
    path = os.path.join(jobs, name + ".yaml")
    spec = {"source": {"node": "node-a", "region": "src"},
            "targets": [{"node": "node-b", "region": name, "create": {"bytes": size}}],
            "transport": {"type": "tcp"}, "backoffLimit": 0}
    before = transfer_ids(agents)
    watch = SucceededWatch(path)
    flag = ",".join(f"{n}={u}" for n, u in agents.urls.items())
    started = time.time()
    with open(path, "w") as f:
        json.dump({"apiVersion": "conduit.dev/v1alpha1", "kind": "TransferJob", "metadata": {"name": name},
                   "spec": spec}, f)
    r = subprocess.run([controller, "--local-dir", jobs, "--agents", flag, "--agent-token-file", agents.token,
                        "--once-job", name, "--log-level", "warn"], capture_output=True, text=True, timeout=300)
    ended = time.time()
    watch.stop()
    if r.returncode != 0 or watch.seen_at is None:
        sys.exit(f"job {name} failed: {r.stdout.strip()} {r.stderr.strip()[-400:]}")
    new = [t for i, t in transfer_ids(agents).items() if i not in before and t.get("state") == "Succeeded"]
    if len(new) != 1:
        sys.exit(f"job {name}: want one new Succeeded transfer at node-a, found {len(new)}")
    finished = parse_time(new[0]["finishedAt"])
    # The job and its target region go, so the next job starts from the same state.
    os.unlink(path)
    agents.call("node-b", "DELETE", f"/v1/regions/{name}")
    return {"seen": watch.seen_at - finished, "exit": ended - watch.seen_at, "wall": ended - started}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--controller", action="append", metavar="LABEL=PATH",
                    help="a conduit-controller to measure, repeatable (default: the build's)")
    ap.add_argument("--jobs", type=int, default=10, help="jobs per controller per round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=size_arg, default=64 << 20, help="bytes per job (default 64MiB)")
    args = ap.parse_args()
    controllers = {}
    for item in args.controller or [f"build={os.path.join(args.build, 'bin', 'conduit-controller')}"]:
        label, _, path = item.partition("=")
        controllers[label] = path
    figures = {label: {"seen": [], "exit": [], "wall": []} for label in controllers}
    round_p50 = {label: {"seen": [], "exit": [], "wall": []} for label in controllers}
    with tempfile.TemporaryDirectory(prefix="conduit-latency-") as work:
        agents = Agents(args.build, work, "64MiB")
        try:
            agents.call("node-a", "POST", "/v1/regions", {"name": "src", "bytes": args.size})
            n = 0
            for _ in range(args.rounds):
                this_round = {label: {"seen": [], "exit": [], "wall": []} for label in controllers}
                for _ in range(args.jobs):
                    for label, path in controllers.items():
                        n += 1
                        got = run_job(path, work, agents, f"lat-{n}", args.size)
                        for key, value in got.items():
                            figures[label][key].append(value)
                            this_round[label][key].append(value)
                for label in controllers:
                    for key, values in this_round[label].items():
                        round_p50[label][key].append(statistics.median(values))
        finally:
            agents.stop()
    print(f"{args.rounds} rounds x {args.jobs} jobs of {args.size} bytes region -> region over tcp, "
          f"{os.cpu_count()} CPUs")
    for label in controllers:
        print(f"{label}:")
        for key in ("seen", "exit", "wall"):
            p50s = [v * 1000 for v in round_p50[label][key]]
            print(f"  {key:5} {summary(figures[label][key])}; round p50s median "
                  f"{statistics.median(p50s):.1f} [{min(p50s):.1f}, {max(p50s):.1f}] ms")


if __name__ == "__main__":
    main()
