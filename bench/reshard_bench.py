#!/usr/bin/env python3
"""Resharding TP4 -> TP2 x 2 over links of a fixed rate, against its lower bound and against what users do
without resharding (docs/reshard.md, "Measured").

Eight nodes in network namespaces on one bridge (tests/scenarios/harness), every node's egress shaped with
`tc tbf` to RATE: four trainer ranks (tr0..tr3) holding a model's TP4 shards (half its matrices split on dim 0,
half on dim 1, norms replicated), four inference ranks (in0..in3) holding the TP2 layout twice (mesh 2 x 2:
replicas x TP2). Each round, interleaved:
  reshard   conduit.reshard.Resharder.run(): the plan's batches, every pair at once, verified (crc32c), one
            version for the four targets; against the plan's lower bound (the busiest link's bytes / RATE)
  gather    what users do without it: every trainer rank's region gathered on tr0 (one scatter op each), the
            whole model Chained to the four inference nodes (verified), then each inference rank slicing its
            TP2 shards out of the whole locally (the slowest node's copy counted: each node slices its own)
Every target byte is compared with the whole tensors sliced the target's way after every run (not timed).
Prints medians [min, max] and ratios per round; asserts only that the bytes arrived.

Usage (root, for the namespaces): $(scripts/python-env.sh)/bin/python bench/reshard_bench.py \
          [--build build] [--size 512MiB] [--tensors 256] [--rate 1gbit] [--rounds 3] [--rows-only]
          [--windows 64,256]
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "scenarios"))
sys.path.insert(0, str(ROOT / "python"))

import conduit  # noqa: E402
from conduit import Target  # noqa: E402
from conduit.placement import Replicate, Shard, box, placed, shard_state_dict  # noqa: E402
from conduit.reshard import Resharder  # noqa: E402
from conduit.tensors import layout, pack, views  # noqa: E402
from broadcast_bench import size_arg  # noqa: E402  (bench/, the script's own folder)
from harness import AgentPool, Build, MiB, Network, ProcessSet, new_token  # noqa: E402

TRAINERS = [f"tr{i}" for i in range(4)]
ENGINES = [f"in{i}" for i in range(4)]


def rate_bytes(text: str) -> float:
    m = re.fullmatch(r"(\d+)(k|m|g)bit", text)
    if not m:
        raise argparse.ArgumentTypeError(f"{text}: a rate as tc writes it (1gbit, 500mbit)")
    return int(m.group(1)) * {"k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] / 8


def median_range(values: list[float], digits: int = 2) -> str:
    return f"{statistics.median(values):.{digits}f} [{min(values):.{digits}f}, {max(values):.{digits}f}]"


def make_model(size: int, tensors: int) -> dict[str, np.ndarray]:
    """TENSORS f16 matrices of about SIZE bytes in all (square-ish, rows a multiple of 4) plus a norm each
    16 of them; filled from a fixed seed."""
    rng = np.random.default_rng(0)
    per = size // tensors // 2  # f16 elements per matrix
    cols = 1 << int(np.log2(np.sqrt(per)))
    rows = per // cols // 4 * 4
    out: dict[str, np.ndarray] = {}
    for i in range(tensors):
        out[f"layers.{i}.weight"] = rng.integers(-1000, 1000, (rows, cols), dtype=np.int16).astype(np.float16)
        if i % 16 == 0:
            out[f"layers.{i}.norm"] = rng.standard_normal(cols).astype(np.float32)
    return out


ROWS_ONLY = False  # --rows-only: every matrix split on dim 0 (runs as long as a shard), no column splits


def trainer_layout(name: str, x: np.ndarray) -> list[Any]:
    if x.ndim == 1:
        return [Replicate()]
    if ROWS_ONLY:
        return [Shard(0)]
    return [Shard(0 if int(name.split(".")[1]) % 2 == 0 else 1)]  # column- and row-parallel layers in turn


def engine_layout(name: str, x: np.ndarray) -> list[Any]:
    return [Replicate(), *trainer_layout(name, x)]  # mesh (2, 2): replicas x TP2


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default=str(ROOT / "build"))
    p.add_argument("--size", type=size_arg, default=512 * MiB)
    p.add_argument("--tensors", type=int, default=256)
    p.add_argument("--rate", default="1gbit", help="every node's egress rate, as tc writes it (1gbit, 500mbit)")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows-only", action="store_true", help="split every matrix on dim 0 (no column splits)")
    p.add_argument("--windows", default="",
                   help="also run the reshard with these windows (comma-separated), interleaved, against the "
                        "default")
    args = p.parse_args()
    global ROWS_ONLY
    ROWS_ONLY = args.rows_only
    build = Build(Path(args.build).resolve())
    rate = rate_bytes(args.rate)
    model = make_model(args.size, args.tensors)
    total = sum(x.nbytes for x in model.values())
    cap = f"{(total * 3) // MiB + 256}MiB"

    with tempfile.TemporaryDirectory(prefix="conduit-reshard-") as tmp, ProcessSet() as procs, \
            Network(TRAINERS + ENGINES) as net:
        work = Path(tmp)
        token = work / "token"
        new_token(token)
        net.shape_egress(args.rate)
        pool = AgentPool(build, work, token, procs, network=net, log_level="warn")
        agents = {n: pool.start(n, "--memory-cap", cap) for n in TRAINERS + ENGINES}
        sdk = {n: conduit.Agent(a.url, token_file=token, import_socket=a.socket) for n, a in agents.items()}
        keep: list[Any] = []
        try:
            # Trainer ranks: their TP4 shards in this process's memory, shared with their node's agent.
            shards: list[dict[str, np.ndarray]] = []
            sources = []
            for r, n in enumerate(TRAINERS):
                local, where = shard_state_dict(model, (4,), lambda k: trainer_layout(k, model[k]), (r,))
                m, nbytes = layout(local)
                m = placed(m, where)
                buf = sdk[n].allocate("policy", nbytes)
                keep.append(buf)
                pack(local, buf, m)
                sdk[n].set_manifest("policy", m)
                shards.append(local)
                sources.append((sdk[n], "policy"))
            whole_bytes = sum(b.nbytes for b in keep)  # the four ranks' regions back to back
            # Inference ranks: the TP2 layout, twice; regions the agents make, shareable for the local slicing.
            want: list[dict[str, np.ndarray]] = []
            targets = []
            for i, n in enumerate(ENGINES):
                coordinate = (i // 2, i % 2)
                local, where = shard_state_dict(model, (2, 2), lambda k: engine_layout(k, model[k]), coordinate)
                m, nbytes = layout(local)
                sdk[n].create_region("policy", nbytes, manifest=placed(m, where), shareable=True)
                sdk[n].create_region("whole", whole_bytes, shareable=True)
                want.append(local)
                targets.append((sdk[n], "policy"))
            sdk["tr0"].create_region("whole", whole_bytes)

            def check(label: str) -> None:
                for (agent, region), local in zip(targets, want, strict=True):
                    with agent.open_shared(region) as buf:
                        got = views(buf, agent.manifest(region))
                        for k, x in local.items():
                            if not np.array_equal(got[k].view(np.uint8), x.view(np.uint8)):
                                raise SystemExit(f"{label}: {agent.url} {k} differs from the reference")

            def clear() -> None:
                for agent, region in targets:
                    with agent.open_shared(region, writable=True) as buf:
                        buf.numpy()[:] = 0

            def gather() -> tuple[float, float, float, float]:
                t0 = time.monotonic()
                offsets = np.cumsum([0] + [b.nbytes for b in keep[:-1]])
                grant = sdk["tr0"].grant("whole", "write", ttl_seconds=600)
                try:
                    import concurrent.futures as cf
                    with cf.ThreadPoolExecutor(4) as ex:
                        list(ex.map(lambda r: sdk[TRAINERS[r]].scatter("policy", grant, [0], [int(offsets[r])],
                                                                       [keep[r].nbytes], timeout=600), range(4)))
                finally:
                    sdk["tr0"].revoke(grant.id)
                t1 = time.monotonic()
                sdk["tr0"].transfer("whole", [Target(sdk[n], "whole") for n in ENGINES], strategy="Chain",
                                    verify="crc32c").wait(timeout=600)
                t2 = time.monotonic()
                slowest = 0.0
                rank_views = []
                for r in range(4):
                    m = sdk[TRAINERS[r]].manifest("policy")
                    rank_views.append((m, int(offsets[r])))
                for i, n in enumerate(ENGINES):
                    s0 = time.monotonic()
                    with sdk[n].open_shared("whole") as whole, sdk[n].open_shared("policy", writable=True) as dst:
                        raw = whole.numpy()
                        parts = [views(raw[off:off + m.data_bytes], m) for m, off in rank_views]
                        out = views(dst, sdk[n].manifest("policy"))
                        coordinate = (i // 2, i % 2)
                        for k, x in model.items():
                            # What a careful user writes: each trainer piece's overlap with this rank's box,
                            # copied straight into place (no whole tensor assembled).
                            ts, tshape = box(x.shape, (2, 2), engine_layout(k, x), coordinate)
                            for r, part in enumerate(parts):
                                ps, pshape = box(x.shape, (4,), trainer_layout(k, x), (r,))
                                lo = [max(a, b) for a, b in zip(ps, ts, strict=True)]
                                hi = [min(a + n, b + m) for a, n, b, m in zip(ps, pshape, ts, tshape, strict=True)]
                                if all(a < b for a, b in zip(lo, hi, strict=True)):
                                    out[k][tuple(slice(a - t, b - t) for a, b, t in zip(lo, hi, ts, strict=True))] = \
                                        part[k][tuple(slice(a - q, b - q) for a, b, q in zip(lo, hi, ps, strict=True))]
                                    if x.ndim == 1:
                                        break  # replicated: one piece holds it all
                    slowest = max(slowest, time.monotonic() - s0)
                return t2 + slowest - t0, t1 - t0, t2 - t1, slowest

            results: dict[str, list[float]] = {}
            windows = [int(w) for w in args.windows.split(",") if w]
            others = [Resharder(sources, targets, rates=([rate] * 4, [None] * 4), window=w) for w in windows]
            with Resharder(sources, targets, rates=([rate] * 4, [None] * 4)) as r:
                for round_ in range(args.rounds):
                    for w, other in zip(windows, others, strict=True):
                        clear()
                        res_w = other.run(timeout=600)
                        check(f"reshard window {w}")
                        lb_w = res_w.plan.lower_bound_seconds or float("nan")
                        results.setdefault(f"reshard window {w}", []).append(res_w.seconds)
                        results.setdefault(f"  window {w} vs bound", []).append(res_w.seconds / lb_w)
                    clear()
                    res = r.run(timeout=600)
                    check("reshard")
                    clear()
                    g, g_gather, g_chain, g_slice = gather()
                    check("gather")
                    lb = res.plan.lower_bound_seconds or float("nan")
                    for key, v in (("reshard", res.seconds), ("lower bound", lb), ("vs bound", res.seconds / lb),
                                   ("gather+chain+slice", g), ("  gather", g_gather), ("  chain", g_chain),
                                   ("  slice (slowest)", g_slice), ("gather / reshard", g / res.seconds)):
                        results.setdefault(key, []).append(v)
                    print(f"round {round_ + 1}: reshard {res.seconds:.2f} s (bound {lb:.2f} s, plan cached "
                          f"{res.plan.cached}), gather+chain+slice {g:.2f} s", flush=True)
                plan = res.plan
            for other in others:
                other.close()
            print(f"\n{total / MiB:.0f} MiB in {len(model)} tensors, TP4 (4 nodes) -> TP2 x 2 (4 nodes), every "
                  f"node's egress {args.rate} (tc tbf), tcp, {args.rounds} rounds interleaved; medians [min, max]")
            print(f"plan: {len(plan.batches)} batches, {plan.ops} ops, {plan.runs} byte runs, busiest link "
                  f"{plan.busiest}, lower bound {plan.lower_bound_seconds:.2f} s")
            for key, v in results.items():
                print(f"  {key:<20} {median_range(v)}")
        finally:
            for buf in keep:
                buf.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
