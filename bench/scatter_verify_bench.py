#!/usr/bin/env python3
"""A scatter batch of 256 MiB with verify none and with verify crc32c (docs/kv-cache.md, "Measured"), and the
same verify-none batch on the agents of another build, interleaved in one run: what the check costs, and
that verify none costs what it did before the check existed.

  none      POST /v1/transfers?waitSeconds with 4,096 ops of 64 KiB from random slots of node-a's region to
            random slots of node-b's, through a long-lived grant (Agent.scatter), verify none
  crc32c    the same batch with verify crc32c: both ends' sums of the ops' bytes compared once they landed
  base      the verify-none batch between two agents of --base-build (the code before the check), when given

Each kind runs once a round, in a rotating order; times are the caller's, submit to the answer that the batch
ended (one round trip), and the agent's (startedAt to finishedAt). Medians with [min, max]. Two pairs of
conduit-agents on loopback over tcp. Prints figures, asserts none. Needs the SDK (python/): run with the
suite's venv, e.g. `$(scripts/python-env.sh)/bin/python bench/scatter_verify_bench.py --base-build base/build`.

Usage: bench/scatter_verify_bench.py [--build build] [--base-build DIR] [--base-first] [--bytes 256MiB]
                                     [--block 64KiB] [--rounds 7]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)

import numpy as np  # noqa: E402

import conduit  # noqa: E402
from job_bench import Agents, median_range, parse_time, random_file, size_arg  # noqa: E402


class Pair:
    """node-a and node-b of BUILD: the source region loaded from FILE, the target region, a long-lived grant."""

    def __init__(self, build, work, file, nbytes):
        os.makedirs(work)
        self.agents = Agents(build, work, "64MiB")
        self.a = conduit.Agent(self.agents.urls["node-a"], token_file=self.agents.token)
        self.b = conduit.Agent(self.agents.urls["node-b"], token_file=self.agents.token)
        shutil.copy(file, os.path.join(work, "node-a", "src.bin"))
        self.a.load_region("src", "src.bin")
        self.b.create_region("dst", nbytes)
        self.grant = self.b.grant("dst", "write", ttl_seconds=3600)

    def scatter(self, src, dst, block, verify):
        t0 = time.perf_counter()
        s = self.a.scatter("src", self.grant, src, dst, block, verify=verify, timeout=120)
        wall = time.perf_counter() - t0
        assert s.state == "Succeeded" and s.verified == (verify == "crc32c"), s
        return wall, parse_time(s.raw["finishedAt"]) - parse_time(s.raw["startedAt"])

    def stop(self):
        self.agents.stop()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--build", default=os.path.join(ROOT, "build"))
    p.add_argument("--base-build", help="a build of the code before (its bin/conduit-agent) for the base column")
    p.add_argument("--bytes", type=size_arg, default=256 << 20)
    p.add_argument("--block", type=size_arg, default=64 << 10)
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--base-first", action="store_true", help="start the base pair before the other")
    args = p.parse_args()

    work = tempfile.mkdtemp(prefix="scatter-verify-bench-")
    pairs = {}
    try:
        file = os.path.join(work, "src.bin")
        random_file(file, args.bytes)
        # Which pair is made first is a flag: the first pair's memory can differ from the second's (pages
        # the kernel had at hand), which an A/A run (--base-build the same build) shows.
        if args.base_build and args.base_first:
            pairs["base"] = Pair(args.base_build, os.path.join(work, "base"), file, args.bytes)
        pairs["none"] = pairs["crc32c"] = Pair(args.build, os.path.join(work, "after"), file, args.bytes)
        if args.base_build and not args.base_first:
            pairs["base"] = Pair(args.base_build, os.path.join(work, "base"), file, args.bytes)
        slots = args.bytes // args.block
        rng = np.random.default_rng(1)
        src = rng.permutation(slots) * args.block
        dst = rng.permutation(slots) * args.block
        kinds = [k for k in ("base", "none", "crc32c") if k in pairs]
        for kind in kinds:  # warm: the source registration, the connections, the pages
            pairs[kind].scatter(src, dst, args.block, "crc32c" if kind == "crc32c" else "none")
        walls = {k: [] for k in kinds}
        agent = {k: [] for k in kinds}
        for r in range(args.rounds):
            for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
                wall, ran = pairs[kind].scatter(src, dst, args.block, "crc32c" if kind == "crc32c" else "none")
                walls[kind].append(wall)
                agent[kind].append(ran)
        gib = args.bytes / (1 << 30)
        print(f"{slots} ops of {args.block >> 10} KiB at random slots ({args.bytes >> 20} MiB), tcp loopback, "
              f"{args.rounds} rounds interleaved; seconds, median [min, max]:")
        for kind in kinds:
            print(f"  {kind:7s} caller {median_range(walls[kind])}  agent {median_range(agent[kind])}  "
                  f"({gib / sorted(walls[kind])[len(walls[kind]) // 2]:.2f} GiB/s)")
        if "base" in walls:
            ratios = [n / b for n, b in zip(walls["none"], walls["base"])]
            print(f"  none / base per round: {median_range(ratios)}")
        ratios = [c / n for c, n in zip(walls["crc32c"], walls["none"])]
        print(f"  crc32c / none per round: {median_range(ratios)}")
    finally:
        for pair in set(pairs.values()):
            pair.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
