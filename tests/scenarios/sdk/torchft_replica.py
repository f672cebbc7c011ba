"""One torchft replica group (one rank, gloo, on the CPU) training a small model with a real Manager whose
checkpoint transport is ConduitTransport; test_torchft.py starts two, kills one and restarts it.

    python torchft_replica.py AGENT_URL TOKEN_FILE IMPORT_SOCKET LIGHTHOUSE REPLICA SEED STEPS OUT [DIE_AT]

Prints "step N" after each step; writes OUT (JSON: the step reached, the parameters, the steps it healed to).
DIE_AT: SIGKILL itself once at that step (a crash mid-training at a known point: steps take milliseconds, so
a kill from outside would land anywhere, or after the end).
"""

from __future__ import annotations

import json
import os
import signal
import sys
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn, optim
from torchft import DistributedDataParallel, Manager, ProcessGroupGloo
from torchft.optim import OptimizerWrapper

import conduit
from conduit.integrations.torchft import ConduitTransport


def main() -> None:
    url, token_file, socket, lighthouse, replica, seed, steps, out = sys.argv[1:9]
    die_at = int(sys.argv[9]) if len(sys.argv) > 9 else -1
    agent = conduit.Agent(url, token_file=token_file, import_socket=socket)
    torch.manual_seed(int(seed))
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 2))
    inner = optim.Adam(model.parameters(), lr=0.01)
    healed: list[int] = []

    def state_dict() -> dict[str, object]:
        return {"model": model.state_dict(), "optim": inner.state_dict()}

    def load_state_dict(sd: dict[str, dict[str, object]]) -> None:
        model.load_state_dict(sd["model"])
        inner.load_state_dict(sd["optim"])
        healed.append(manager.current_step())

    # What this replica needs from a heal, checked before anything moves: the model's tensors (a fresh
    # optimizer has no state yet, so the sender's optimizer tensors are extra, which is fine).
    transport: ConduitTransport[dict[str, object]] = ConduitTransport(
        agent, timedelta(seconds=20), peers=lambda u: conduit.Agent(u, token_file=token_file),
        state_dict=lambda: {"user": {"default": {"model": model.state_dict()}}})
    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    manager = Manager(pg=ProcessGroupGloo(timeout=timedelta(seconds=10)), load_state_dict=load_state_dict,
                      state_dict=state_dict, min_replica_size=2, replica_id=f"replica_{replica}",
                      store_addr="localhost", store_port=store.port, rank=0, world_size=1,
                      lighthouse_addr=lighthouse, timeout=timedelta(seconds=20),
                      quorum_timeout=timedelta(seconds=40), checkpoint_transport=transport)
    ddp = DistributedDataParallel(manager, model)
    opt = OptimizerWrapper(manager, inner)
    gen = torch.Generator().manual_seed(100 + int(replica))
    while manager.current_step() < int(steps):
        x, y = torch.rand(16, 4, generator=gen), torch.rand(16, 2, generator=gen)
        opt.zero_grad()
        ((ddp(x) - y) ** 2).mean().backward()
        opt.step()
        print(f"step {manager.current_step()}", flush=True)
        if manager.current_step() == die_at:
            os.kill(os.getpid(), signal.SIGKILL)
    with open(out, "w") as f:
        json.dump({"step": manager.current_step(), "healed": healed, "healed_to": max(healed, default=-1),
                   "params": {k: v.tolist() for k, v in model.state_dict().items()}}, f)
    manager.shutdown(wait=False)


if __name__ == "__main__":
    main()
