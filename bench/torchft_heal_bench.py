#!/usr/bin/env python3
"""torchft heal time through Conduit (conduit.integrations.torchft.ConduitTransport) against torchft's own
HTTPTransport (what a torchft Manager uses by default), in the same run, on the same state_dict.

  heal      send_checkpoint on the healthy side, then recv_checkpoint on the healing side, until the received
            state_dict is whole (CPU tensors); the sum of the two, as a Manager pays them back to back
  send      send_checkpoint alone (Conduit: copied into the arena, a read grant, the ticket; HTTP: the tensors
            handed to its server thread, nothing serialised yet)
  recv      recv_checkpoint alone (Conduit: the ticket looked up, the receiver's agent pulling the arena,
            crc32c-verified as it lands; HTTP: torch.save streamed over loopback HTTP into torch.load)
  pull      Agent.pull of the same bytes between the same agents, region to region: Conduit's floor

A state_dict of about BYTES (--size, default 256MiB): a model's tensors (float32 and bfloat16, TENSORS of them)
and an int and a float beside them, as torchft's Manager sends it ({"user": ..., "torchft": ...}). Two
conduit-agents on loopback over tcp (node-a sends, node-b receives), both transports in this process; rounds
interleaved (conduit, http, pull, conduit, ...), the first of each dropped as warm-up; every received
state_dict compared with the sent one, outside the timings. Medians with [min, max]. Prints figures, asserts
none but correctness. Run with the suite's venv (torch, torchft):
`$(scripts/python-env.sh)/bin/python bench/torchft_heal_bench.py --build build`.

Usage: bench/torchft_heal_bench.py [--build build] [--size 256MiB] [--tensors 200] [--rounds 5]
"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from datetime import timedelta

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402
from torchft.checkpointing.http_transport import HTTPTransport  # noqa: E402

import conduit  # noqa: E402
from conduit.integrations.torchft import ConduitTransport  # noqa: E402
from job_bench import Agents, median_range, size_arg  # noqa: E402

TIMEOUT = timedelta(seconds=120)


def state_dict(nbytes, tensors):
    """{"user": {"default": {"model": {...}}}, "torchft": {...}}: TENSORS tensors of about NBYTES in all."""
    g = torch.Generator().manual_seed(7)
    per = nbytes // tensors
    model = {}
    for i in range(tensors):
        dt = torch.float32 if i % 2 == 0 else torch.bfloat16
        n = per // torch.empty((), dtype=dt).element_size()
        model[f"layers.{i}.weight"] = torch.rand(n, generator=g).to(dt)
    return {"user": {"default": {"model": model, "lr": 3e-4}}, "torchft": {"step": 100, "batches_committed": 400}}


def same(got, want):
    a, b = got["user"]["default"]["model"], want["user"]["default"]["model"]
    return (a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in b)
            and got["torchft"] == want["torchft"] and got["user"]["default"]["lr"] == want["user"]["default"]["lr"])


def heal(sender, receiver, sd, step):
    t0 = time.perf_counter()
    sender.send_checkpoint([1], step, sd, TIMEOUT)
    t1 = time.perf_counter()
    got = receiver.recv_checkpoint(0, sender.metadata(), step, TIMEOUT)
    t2 = time.perf_counter()
    sender.disallow_checkpoint()
    assert same(got, sd), f"step {step}: the received state_dict differs"
    return t1 - t0, t2 - t1


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--size", type=size_arg, default=size_arg("256MiB"))
    ap.add_argument("--tensors", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="conduit-torchft-bench.")
    agents = Agents(args.build, work, pipeline="256MiB")
    try:
        a, b = (conduit.Agent(agents.urls[n], token_file=agents.token, import_socket=os.path.join(work, n + ".sock"))
                for n in ("node-a", "node-b"))
        peers = (lambda url: conduit.Agent(url, token_file=agents.token))
        c_send, c_recv = ConduitTransport(a, TIMEOUT, peers=peers), ConduitTransport(b, TIMEOUT, peers=peers)
        h_send, h_recv = HTTPTransport(TIMEOUT, num_chunks=0), HTTPTransport(TIMEOUT, num_chunks=0)
        sd = state_dict(args.size, args.tensors)
        nbytes = sum(t.numel() * t.element_size() for t in sd["user"]["default"]["model"].values())
        src, dst = a.allocate("bench-src", nbytes, prefault=True), b.allocate("bench-dst", nbytes, prefault=True)
        src.numpy()[:] = 7
        figures = {k: [] for k in ("conduit send", "conduit recv", "conduit heal", "http send", "http recv",
                                   "http heal", "pull")}
        for r in range(args.rounds + 1):
            s, v = heal(c_send, c_recv, sd, 2 * r)
            keep = r > 0
            if keep:
                figures["conduit send"].append(s), figures["conduit recv"].append(v), figures["conduit heal"].append(s + v)
            s, v = heal(h_send, h_recv, sd, 2 * r + 1)
            if keep:
                figures["http send"].append(s), figures["http recv"].append(v), figures["http heal"].append(s + v)
            g = a.grant("bench-src", "read")
            t0 = time.perf_counter()
            b.pull("bench-dst", a.url, "bench-src", g.key).wait(timeout=120)
            if keep:
                figures["pull"].append(time.perf_counter() - t0)
            a.revoke(g.id)
        ratio = [c / h for c, h in zip(figures["conduit heal"], figures["http heal"], strict=True)]
        print(f"state_dict: {args.tensors} tensors, {nbytes / (1 << 20):.0f} MiB; {args.rounds} rounds after a "
              "warm-up; seconds, median [min, max]")
        for k, v in figures.items():
            gbps = nbytes / statistics.median(v) / 1e9
            print(f"  {k:13s} {median_range(v)}   ({gbps:.2f} GB/s)")
        print(f"  conduit heal / http heal per round: {median_range(ratio)}")
        for t in (c_send, c_recv):
            t.shutdown()
        for t in (h_send, h_recv):
            t.shutdown()
        src.close(), dst.close()
    finally:
        agents.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
