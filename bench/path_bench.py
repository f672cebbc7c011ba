#!/usr/bin/env python3
"""What the proof of path costs (docs/path.md): transfers between agents that judge each transfer's path from
their NICs' counters (on: --nic-counters-root /sys, the default) and agents that do not (off:
--nic-counters-root ""), the same build, interleaved in one run.

  big    a 512 MiB region written node-a -> node-b, verify none: throughput from the agent's startedAt to
         finishedAt (the data plane: a relaxed add where the run counts bytes, a few sysfs reads each end)
  small  64 KiB regions written node-a -> node-b, verify none, one after another: the caller's time per
         transfer, grant to end, the median of --count (where a fixed per-transfer cost shows most)

Each pair runs each kind once a round, the order alternating; medians with [min, max] and the on/off ratio
of medians. Two pairs of conduit-agents on loopback over tcp; the machine's noise (2 shared CPUs) is in
the ranges. Prints figures, asserts none but that every transfer succeeded and, with the proof on, was
judged Matched. Run with the suite's venv: `$(scripts/python-env.sh)/bin/python bench/path_bench.py`.

Usage: bench/path_bench.py [--build build] [--bytes 512MiB] [--small 64KiB] [--count 50] [--rounds 7]
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)

import conduit  # noqa: E402
from job_bench import Agents, median_range, parse_time, size_arg  # noqa: E402


class Pair:
    def __init__(self, build, work, extra, big, small):
        os.makedirs(work)
        self.agents = Agents(build, work, "64MiB", extra=extra)
        self.a = conduit.Agent(self.agents.urls["node-a"], token_file=self.agents.token)
        self.b = conduit.Agent(self.agents.urls["node-b"], token_file=self.agents.token)
        for agent, names in ((self.a, ("big-src", "small-src")), (self.b, ("big-dst", "small-dst"))):
            agent.create_region(names[0], big)
            agent.create_region(names[1], small)

    def big(self, proof):
        t = self.a.transfer("big-src", [conduit.Target(self.b, "big-dst")], verify="none").wait(timeout=300)
        self.check(t, proof)
        return (t.raw["bytesDone"] / (parse_time(t.raw["finishedAt"]) - parse_time(t.raw["startedAt"]))) / 1e9

    def small(self, proof, count):
        """The median of COUNT transfers' times, grant to end, in ms: one stray stall is not the round's figure."""
        times = []
        for _ in range(count):
            t0 = time.perf_counter()
            t = self.a.transfer("small-src", [conduit.Target(self.b, "small-dst")], verify="none").wait(timeout=60)
            times.append((time.perf_counter() - t0) * 1e3)
            self.check(t, proof)
        return statistics.median(times)

    @staticmethod
    def check(t, proof):
        assert t.state == "Succeeded", t.raw
        path = t.raw.get("path")
        if proof:
            assert path and path["verdict"] == "Matched", path
        else:
            assert path is None, path

    def stop(self):
        self.agents.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--bytes", type=size_arg, default=512 << 20)
    p.add_argument("--small", type=size_arg, default=64 << 10)
    p.add_argument("--count", type=int, default=50)
    p.add_argument("--rounds", type=int, default=7)
    args = p.parse_args()

    work = tempfile.mkdtemp(prefix="path-bench-")
    pairs = {}
    try:
        pairs["off"] = Pair(args.build, os.path.join(work, "off"), ["--nic-counters-root", ""], args.bytes,
                            args.small)
        pairs["on"] = Pair(args.build, os.path.join(work, "on"), [], args.bytes, args.small)
        big = {k: [] for k in pairs}
        small = {k: [] for k in pairs}
        for r in range(args.rounds):
            for kind in (("off", "on") if r % 2 == 0 else ("on", "off")):
                big[kind].append(pairs[kind].big(kind == "on"))
                small[kind].append(pairs[kind].small(kind == "on", args.count))
        print(f"path_bench: {args.rounds} rounds, tcp on loopback, medians [min, max]")
        for kind in ("off", "on"):
            print(f"  {kind:3}  big {args.bytes >> 20} MiB: {median_range(big[kind])} GB/s   "
                  f"small {args.small >> 10} KiB: {median_range(small[kind])} ms/transfer")
        print(f"  on/off: big throughput {statistics.median(big['on']) / statistics.median(big['off']):.3f}x, "
              f"small time per transfer {statistics.median(small['on']) / statistics.median(small['off']):.3f}x")
    finally:
        for pair in pairs.values():
            pair.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
