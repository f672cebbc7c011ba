#!/usr/bin/env python3
"""A model published to two readers on another node (conduit.publish) against one plain transfer of the same
bytes between the same agents, in the same run (docs/tensors.md, "Measured").

  publish   the trainer's push (its module adopted: nothing copied in) of the whole arena to node-b, and both
            reader processes there woken, applying every tensor in place into their own model (torch copy_)
            and acking; timed from the push to the publisher's wait_acks returning
  adopted   the same with readers whose models adopted the node's copy (Subscriber.adopt): woken, apply
            checks and copies nothing, ack (a second publisher of the same model, its own two readers)
  plain     Agent.transfer of a buffer of the same bytes from node-a to a region on node-b, waited for
  push      the push alone, of the publish time: until the bytes landed on node-b and its version is known
  regs      the registrations node-a's agent made (conduit_agent_registration_duration_seconds_count) for the
            arena, against one region per tensor (each its own registration), and the time each took

Models: N tensors of BYTES in all, float32, float16, bfloat16 and int8 in turn (--models 300:256MiB,500:1GiB).
Two conduit-agents on loopback over tcp; rounds interleaved (publish, plain, publish, ...); medians with
[min, max] and the ratio publish / plain per round. Prints figures, asserts none. Needs torch and the SDK
(python/): run with the suite's venv, e.g. `$(scripts/python-env.sh)/bin/python bench/publish_bench.py`.

Usage: bench/publish_bench.py [--build build] [--models 300:256MiB,500:1GiB] [--rounds 5]
"""
import argparse
import os
import re
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

import conduit  # noqa: E402
from conduit import Target  # noqa: E402
from conduit.publish import publish  # noqa: E402
from job_bench import Agents, median_range, size_arg  # noqa: E402

DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.int8)


class Holder(torch.nn.Module):
    def __init__(self, t):
        super().__init__()
        self.register_buffer("weight", t)


def model(tensors, nbytes, seed):
    """A module of TENSORS tensors ("layers.{i}.weight", 1-D) of about NBYTES in all, dtypes in turn, from
    SEED."""
    g = torch.Generator().manual_seed(seed)
    per = nbytes // tensors
    layers = []
    for i in range(tensors):
        dt = DTYPES[i % len(DTYPES)]
        n = per // torch.empty((), dtype=dt).element_size()
        layers.append(Holder(torch.randint(-100, 100, (n,), generator=g, dtype=torch.int16).to(dt)))
    net = torch.nn.Module()
    net.layers = torch.nn.ModuleList(layers)
    return net


READER = """
import sys, time, torch, conduit
sys.path.insert(0, {here!r})
from publish_bench import model
from conduit.publish import subscribe
agent = conduit.Agent(sys.argv[1], token_file=sys.argv[2], import_socket=sys.argv[3])
mine = model({tensors}, {nbytes}, seed=1)
adopt = sys.argv[4] == "adopt"
with subscribe(agent, sys.argv[5], timeout=120) as sub:
    print("ready", flush=True)
    for i in range({rounds}):
        upd = sub.wait_update(timeout=300)
        t0 = time.monotonic()
        if adopt and i == 0:
            sub.adopt(upd, mine)
        sub.apply(upd, mine)
        t1 = time.monotonic()
        sub.ack(upd)
        print(f"apply {{t1 - t0:.3f}} ack {{time.monotonic() - t1:.3f}} woke {{t0:.3f}}", file=sys.stderr, flush=True)
"""


def registrations(agents, node):
    text = agents.call(node, "GET", "/metrics")
    m = re.search(r"^conduit_agent_registration_duration_seconds_count (\S+)", text, re.M)
    return int(float(m.group(1))) if m else 0


def run_model(agents, tensors, nbytes, rounds, work):
    a = conduit.Agent(agents.urls["node-a"], token_file=agents.token, import_socket=os.path.join(work, "node-a.sock"))
    b = conduit.Agent(agents.urls["node-b"], token_file=agents.token)
    name = f"m{tensors}"
    state = model(tensors, nbytes, seed=0)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(ROOT, "python"), HERE]))
    script = READER.format(here=HERE, tensors=tensors, nbytes=nbytes, rounds=rounds)
    readers = []
    before = registrations(agents, "node-a")
    t0 = time.monotonic()
    pub = publish(a, name, state)
    pub.adopt(state)  # the trainer's tensors are the arena's: a push copies nothing in
    publish_s = time.monotonic() - t0
    pub_a = None
    try:
        pub.push([b])  # makes the region on node-b (first push), version 1
        arena_regs = registrations(agents, "node-a") - before
        # A second publisher of a model equal to the first, for the readers that adopt.
        adopted_state = model(tensors, nbytes, seed=0)
        pub_a = publish(a, name + "-a", adopted_state)
        pub_a.adopt(adopted_state)
        pub_a.push([b])
        sock = os.path.join(work, "node-b.sock")
        readers = [subprocess.Popen([sys.executable, "-c", script, b.url, agents.token, sock, mode, region],
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for mode, region in [("copy", name)] * 2 + [("adopt", name + "-a")] * 2]
        for r in readers:
            if r.stdout.readline().strip() != "ready":
                sys.exit(f"a reader did not start: {r.stderr.read()}")
        # The readers' first update is version 1, pushed above: taken and acked before the rounds start.
        pub.wait_acks(readers=2, timeout=120)
        pub_a.wait_acks(readers=2, timeout=120)
        with a.allocate(name + "-plain", pub.buffer.nbytes) as plain:
            plain.numpy()[:] = 1
            b.create_region(name + "-plain", pub.buffer.nbytes)
            pubs, adopts, pushes, plains = [], [], [], []
            for _ in range(rounds - 1):
                t0 = time.monotonic()
                pub.push([b])
                pushes.append(time.monotonic() - t0)
                pub.wait_acks(readers=2, timeout=300)
                pubs.append(time.monotonic() - t0)
                t0 = time.monotonic()
                pub_a.push([b])
                pub_a.wait_acks(readers=2, timeout=300)
                adopts.append(time.monotonic() - t0)
                t0 = time.monotonic()
                a.transfer(name + "-plain", [Target(b, name + "-plain")]).wait(timeout=300)
                plains.append(time.monotonic() - t0)
            b.delete_region(name + "-plain")
        for r in readers:
            _, err = r.communicate(timeout=300)
            if r.returncode != 0:
                sys.exit(f"a reader failed: {err}")
            if os.environ.get("PUBLISH_BENCH_READERS"):
                print(err, file=sys.stderr)
    finally:
        for r in readers:
            r.kill()
        pub.close()
        if pub_a is not None:
            pub_a.close()
        for n in (name, name + "-a"):
            try:
                b.delete_region(n)
            except conduit.ConduitError:
                pass
    ratios = [p / q for p, q in zip(pubs, plains, strict=True)]
    mib = pub.buffer.nbytes / (1 << 20)
    print(f"{tensors} tensors, {mib:.0f} MiB: publish->2 readers applied+acked {median_range(pubs)} s, "
          f"plain transfer {median_range(plains)} s, ratio {median_range(ratios)} ({len(pubs)} rounds)")
    print(f"  of which the push (landed on node-b, version known) {median_range(pushes)} s, ratio to plain "
          f"{median_range([p / q for p, q in zip(pushes, plains, strict=True)])}; the rest is the readers' wake, "
          "apply (a copy each) and ack")
    print(f"  readers adopted (no copy): publish->2 readers applied+acked {median_range(adopts)} s, ratio to plain "
          f"{median_range([p / q for p, q in zip(adopts, plains, strict=True)])}")
    # One region per tensor, as without an arena: a registration each.
    before = registrations(agents, "node-a")
    t0 = time.monotonic()
    bufs = []
    try:
        # Each region registered as a transfer's source would be: here by a read grant on it.
        for i, t in enumerate(state.state_dict().values()):
            bufs.append(a.allocate(f"{name}-t{i}", max(1, t.numel() * t.element_size())))
            a.revoke(a.grant(bufs[-1].name, "read").id)
        per_tensor_s = time.monotonic() - t0
    finally:
        for buf in bufs:
            buf.close()
    per_tensor_regs = registrations(agents, "node-a") - before
    print(f"  registrations on node-a: arena {arena_regs} (publish {publish_s:.3f} s); one region per tensor "
          f"{per_tensor_regs} ({len(bufs)} regions made in {per_tensor_s:.3f} s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="300:256MiB,500:1GiB")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="conduit-publish-bench.")
    agents = Agents(args.build, work, pipeline="256MiB")
    try:
        for spec in args.models.split(","):
            n, size = spec.split(":")
            run_model(agents, int(n), size_arg(size), args.rounds + 1, work)
    finally:
        agents.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
