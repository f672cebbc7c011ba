"""A trainer publishing a torch model each step to two inference processes on another node, which apply it in
place and acknowledge it (conduit.publish; docs/tensors.md).

The trainer (this process) publishes its model on the first agent (``node-a``) as one arena and adopts it, so
its parameters are views of the arena and each step's push copies nothing in. Each step it changes the weights
("training"), pushes the arena to region ``policy`` on the second agent (``node-b``) and waits until both
inference processes there acked that version. The two inference processes (multiprocessing) subscribe to
``policy`` on node-b, sharing the node's one copy, apply each update into their own model in place (the
parameters keep their storage, as CUDA graphs need) and check every tensor against what the trainer sent.

Needs two conduit-agents with import sockets on this machine. ``run_publish_model.sh`` beside this file starts
them on loopback and runs this; by hand:

    python publish_model.py --agents http://127.0.0.1:7070,http://127.0.0.1:7071 --token-file /tmp/token \\
        --import-sockets /tmp/node-a.sock,/tmp/node-b.sock --steps 5 --width 512
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import sys
import time

import torch

from conduit import Agent
from conduit.publish import publish, subscribe

REGION = "policy"


def make_model(width: int, seed: int) -> torch.nn.Module:
    """An 8-block MLP in bfloat16 and float32 with an int8 buffer: mixed dtypes, as real checkpoints are."""
    torch.manual_seed(seed)
    blocks = []
    for i in range(8):
        block = torch.nn.Linear(width, width).to(torch.bfloat16 if i % 2 else torch.float32)
        block.register_buffer("mask", (torch.arange(width) % (i + 2) == 0).to(torch.int8))
        blocks.append(block)
    return torch.nn.Sequential(*blocks)


def step_weights(model: torch.nn.Module, step: int) -> None:
    """What a training step would do: new values everywhere, reproducible from STEP."""
    g = torch.Generator().manual_seed(1000 + step)
    with torch.no_grad():
        for t in model.state_dict().values():
            t.copy_(torch.randint(-8, 8, t.shape, generator=g).to(t.dtype))


def reader(url: str, token_file: str, sock: str, width: int, steps: int, out: mp.Queue) -> None:
    agent = Agent(url, token_file=token_file, import_socket=sock)
    model = make_model(width, seed=99)  # initialised unlike the trainer's
    ptrs = [t.data_ptr() for t in model.state_dict().values()]
    want = make_model(width, seed=0)
    with subscribe(agent, REGION, timeout=60) as sub:
        for _ in range(steps):
            upd = sub.wait_update(timeout=60)
            t0 = time.monotonic()
            names = sub.apply(upd, model)
            applied_ms = (time.monotonic() - t0) * 1e3
            step = int(upd.manifest.metadata["step"])
            step_weights(want, step)
            same = all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), want.state_dict().values()))
            in_place = ptrs == [t.data_ptr() for t in model.state_dict().values()]
            sub.ack(upd)
            out.put((sub.reader, step, len(names), same, in_place, applied_ms))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", required=True, help="URL of node-a's agent (the trainer's), then node-b's")
    ap.add_argument("--import-sockets", required=True, help="the two agents' --import-socket, in that order")
    ap.add_argument("--token-file", required=True)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--width", type=int, default=512)
    args = ap.parse_args()
    url_a, url_b = args.agents.split(",")
    sock_a, sock_b = args.import_sockets.split(",")
    a = Agent(url_a, token_file=args.token_file, import_socket=sock_a)
    b = Agent(url_b, token_file=args.token_file, import_socket=sock_b)

    model = make_model(args.width, seed=0)
    ctx = mp.get_context("spawn")
    out: mp.Queue = ctx.Queue()
    readers = [ctx.Process(target=reader, args=(url_b, args.token_file, sock_b, args.width, args.steps, out))
               for _ in range(2)]
    ok = True
    with publish(a, REGION, model, metadata={"step": "0"}) as pub:
        pub.adopt(model)
        print(f"published {len(pub.manifest.tensors)} tensors, {pub.manifest.data_bytes} bytes, as {REGION} on "
              f"{a.url}")
        for r in readers:
            r.start()
        for step in range(1, args.steps + 1):
            step_weights(model, step)
            # The step goes in the manifest's metadata: it travels with the write, so readers know what they got.
            pub.set_metadata({"step": str(step)})
            t0 = time.monotonic()
            pub.push([b])
            pub.wait_acks(readers=2, timeout=60)
            ms = (time.monotonic() - t0) * 1e3
            for _ in readers:
                who, got, n, same, in_place, applied_ms = out.get(timeout=60)
                ok = ok and got == step and same and in_place
                print(f"step {step} {who}: {n} tensors applied in place={in_place} equal={same} "
                      f"({applied_ms:.0f} ms)")
            print(f"step {step}: push -> both applied and acked {ms:.0f} ms")
        for r in readers:
            r.join(timeout=60)
            ok = ok and r.exitcode == 0
    b.delete_region(REGION)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
