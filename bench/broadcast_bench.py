#!/usr/bin/env python3
"""One source to four targets over links of a fixed rate: PointToPoint, Fanout and Chain (docs/broadcast.md).

Five nodes in network namespaces on one bridge (tests/scenarios/harness, as the e2e and fault suites), every
node's egress (its namespace-side veth) shaped with `tc tbf` to the same rate, so the links and not the two
CPUs are what a strategy has to share. node-a holds SIZE bytes in a region; each round, interleaved, for
verify none and crc32c:
  T        PointToPoint node-a -> node-b
  Fanout   node-a -> node-b..node-e, every target at once: node-a's link carries 4 copies, ~4 T
  Chain    node-a -> node-b -> ... -> node-e, each hop forwarding what landed: ~T plus the pipeline's fill
Each job's time is status.startTime -> completionTime (target regions created, grants taken, bytes moved and
verified); every target region is compared with the source's CRC32C per MiB after each job.
Prints medians with [min, max] and the ratios to T of the same round (the issue's targets: Chain within
1.25 T, Fanout about 4 T).

Usage (root, for the namespaces): $(scripts/python-env.sh)/bin/python bench/broadcast_bench.py \
          [--build build] [--size 256MiB] [--rate 1gbit] [--rounds 3]
Prints figures, asserts only that the bytes arrived.
"""

from __future__ import annotations

import argparse
import datetime
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "scenarios"))

from harness import AgentPool, Build, LocalController, MiB, Network, ProcessSet, new_token, random_file, \
    transfer_job, wait_for  # noqa: E402

TARGETS = ["node-b", "node-c", "node-d", "node-e"]


def size_arg(text: str) -> int:
    m = re.fullmatch(r"(\d+)(KiB|MiB|GiB)?", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text}: a size such as 256MiB")
    return int(m.group(1)) * {None: 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[m.group(2)]


def seconds(status: dict[str, Any]) -> float:
    def at(key: str) -> float:
        value = status[key]  # YAML reads an RFC 3339 time as a datetime already
        if isinstance(value, str):
            value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
        return float(value.timestamp())
    return at("completionTime") - at("startTime")


def median_range(values: list[float], unit: str = "") -> str:
    return f"{statistics.median(values):.2f}{unit} [{min(values):.2f}, {max(values):.2f}]"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=str(ROOT / "build"))
    p.add_argument("--size", type=size_arg, default=256 * MiB)
    p.add_argument("--rate", default="1gbit", help="every node's egress rate, as tc writes it (1gbit, 500mbit)")
    p.add_argument("--rounds", type=int, default=3)
    args = p.parse_args()
    build = Build(Path(args.build).resolve())
    cap = f"{(args.size * 6) // MiB + 256}MiB"

    with tempfile.TemporaryDirectory(prefix="conduit-broadcast-") as tmp, ProcessSet() as procs, \
            Network(["node-a", *TARGETS]) as net:
        work = Path(tmp)
        token = work / "token"
        new_token(token)
        net.shape_egress(args.rate)
        pool = AgentPool(build, work, token, procs, network=net, log_level="warn")
        a = pool.start("node-a", "--memory-cap", cap)
        targets = {n: pool.start(n, "--memory-cap", cap) for n in TARGETS}
        random_file(a.data_dir / "src.bin", size=args.size)
        a.post("/v1/regions", {"name": "src", "file": "src.bin", "mode": "load"})
        want = a.get(f"/v1/regions/src/checksum?offset=0&length={args.size}")["crc32c"]
        ctl = LocalController.launch(build, work, pool, procs)

        def run(name: str, strategy: str, hops: list[str], verify: str) -> float:
            ctl.apply(transfer_job(name, {
                "source": {"node": "node-a", "region": "src"},
                "targets": [{"node": n, "region": name, "create": {"bytes": args.size}} for n in hops],
                "strategy": strategy, "transport": {"type": "tcp"}, "verify": verify, "backoffLimit": 0}))
            wait_for(lambda: ctl.finished(name), 600, f"job {name}")
            status = ctl.status(name)
            if ctl.phase(name) != "Succeeded":
                raise SystemExit(f"{name}: {ctl.phase(name)}: {ctl.condition_text(name, 'Failed')}")
            for n in hops:
                got = targets[n].get(f"/v1/regions/{name}/checksum?offset=0&length={args.size}")["crc32c"]
                if got != want:
                    raise SystemExit(f"{name}: {n}'s region differs from the source")
                targets[n].call("DELETE", f"/v1/regions/{name}")
            (ctl.jobs_dir / f"{name}.yaml").unlink()
            return seconds(status)

        shapes = [("T", "PointToPoint", TARGETS[:1]), ("Fanout", "Fanout", TARGETS), ("Chain", "Chain", TARGETS)]
        times: dict[tuple[str, str], list[float]] = {}
        ratios: dict[tuple[str, str], list[float]] = {}
        for r in range(args.rounds):
            for verify in ("none", "crc32c"):
                got = {label: run(f"{label.lower()}-{verify[:4]}-{r}", strategy, hops, verify)
                       for label, strategy, hops in shapes}
                for label, t in got.items():
                    times.setdefault((label, verify), []).append(t)
                    ratios.setdefault((label, verify), []).append(t / got["T"])
                print(f"round {r + 1} verify {verify}: " + ", ".join(f"{k} {v:.2f} s" for k, v in got.items()),
                      flush=True)
                time.sleep(0.5)

        gb = args.size / 1e9
        print(f"\n{args.size // MiB} MiB from node-a to {len(TARGETS)} targets, every node's egress shaped to "
              f"{args.rate} (tc tbf), tcp, {args.rounds} rounds interleaved; medians [min, max]")
        print(f"{'job':<8} {'verify':<7} {'seconds':<22} {'GB/s per target':<22} ratio to T")
        for (label, verify), t in sorted(times.items(), key=lambda kv: (kv[0][1] != "none", kv[0][0] != "T")):
            per = [gb / x for x in t]
            print(f"{label:<8} {verify:<7} {median_range(t):<22} {median_range(per):<22} "
                  f"{median_range(ratios[(label, verify)])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
