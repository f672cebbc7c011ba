#!/usr/bin/env python3
"""Loading a .safetensors file into a region against loading the same bytes as a raw file, and against
safetensors.torch.load_file, in one run (docs/tensors.md, "Measured").

  raw          POST /v1/regions {file: model.bin}: the data section alone, as any file loads
  safetensors  POST /v1/regions {file: model.safetensors}: the header read and checked, the data section
               loaded behind it (its offset is 8 + the header's size, rarely a multiple of 4 KiB)
  load_file    safetensors.torch.load_file(model.safetensors) in this process (torch tensors on the CPU,
               over its mmap of the file: pages are read when first touched)
  +clone       load_file, then each tensor cloned into memory of its own (every byte read and written once,
               as a region load does)

The file: TENSORS tensors (float32, float16, bfloat16, int8 in turn) of BYTES in all, written by
safetensors.torch.save_file. Page cache warm (the files were just written) or, with --cold, dropped before
each load. One conduit-agent on loopback; rounds interleaved; medians with [min, max] and the ratios to raw.
Prints figures, asserts none. Run with the suite's venv: `$(scripts/python-env.sh)/bin/python
bench/safetensors_bench.py`.

Usage: bench/safetensors_bench.py [--build build] [--size 1GiB] [--tensors 500] [--rounds 5] [--cold]
"""
import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402
from safetensors.torch import load_file, save_file  # noqa: E402

import conduit  # noqa: E402
from job_bench import Agents, median_range, size_arg  # noqa: E402

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int8)


def drop_caches():
    subprocess.run(["sync"], check=True)
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--size", type=size_arg, default=size_arg("1GiB"))
    ap.add_argument("--tensors", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--cold", action="store_true")
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="conduit-safetensors-bench.")
    # Room in the region pool for both loads' memory: a .safetensors region starts as far into its memory as
    # its data does past a 4 KiB block in the file (docs/tensors.md), so it takes up to a block more than the
    # raw one; with the default 2 GiB pool a 1 GiB pair of them evicted each other and one of the two paid
    # fresh page faults every round. Reloading one file, as a user does, finds its own block kept.
    agents = Agents(args.build, work, pipeline="256MiB", region_pool=f"{3 * args.size}")
    try:
        data = os.path.join(work, "node-a")
        per = args.size // args.tensors
        state = {}
        for i in range(args.tensors):
            dt = DTYPES[i % len(DTYPES)]
            state[f"model.layers.{i}.weight"] = torch.ones(per // torch.empty((), dtype=dt).element_size(), dtype=dt)
        save_file(state, os.path.join(data, "model.safetensors"))
        with open(os.path.join(data, "model.safetensors"), "rb") as f:
            header = int.from_bytes(f.read(8), "little")
            f.seek(8 + header)
            with open(os.path.join(data, "model.bin"), "wb") as out:
                shutil.copyfileobj(f, out, 16 << 20)
        del state
        a = conduit.Agent(agents.urls["node-a"], token_file=agents.token)
        nbytes = os.path.getsize(os.path.join(data, "model.bin"))
        print(f"{args.tensors} tensors, {nbytes / (1 << 20):.0f} MiB of data, header {header} bytes (data at "
              f"offset {8 + header}, {(8 + header) % 4096} past a 4 KiB boundary); page cache "
              f"{'dropped before each load' if args.cold else 'warm'}")
        times = {"raw": [], "safetensors": [], "load_file": [], "+clone": []}
        for r in range(args.rounds):
            # In turn first, and a pause after each delete: a load right after the other's region was deleted
            # waits for the agent's pool to finish zeroing that memory (agent/src/memory_pool.h), which
            # counted 0.1 s against whichever came second.
            order = (("raw", "model.bin"), ("safetensors", "model.safetensors"))
            for kind, file in order if r % 2 == 0 else order[::-1]:
                if args.cold:
                    drop_caches()
                t0 = time.monotonic()
                a.load_region("m", file)
                times[kind].append(time.monotonic() - t0)
                a.delete_region("m")
                time.sleep(1.0)
            if args.cold:
                drop_caches()
            t0 = time.monotonic()
            loaded = load_file(os.path.join(data, "model.safetensors"))
            times["load_file"].append(time.monotonic() - t0)
            del loaded
            if args.cold:
                drop_caches()
            t0 = time.monotonic()
            owned = {k: v.clone() for k, v in load_file(os.path.join(data, "model.safetensors")).items()}
            times["+clone"].append(time.monotonic() - t0)
            del owned
        raw = times["raw"]
        for kind, t in times.items():
            ratios = [x / r for x, r in zip(t, raw, strict=True)]
            print(f"  {kind:12s} {median_range(t)} s  {nbytes / statistics.median(t) / 1e9:.2f} GB/s  "
                  f"ratio to raw {median_range(ratios)}")
    finally:
        agents.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
