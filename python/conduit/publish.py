"""A model published to readers on other nodes: one arena, pushed whole, applied in place, acknowledged.

    # the trainer, on node-a
    pub = publish(agent_a, "policy", model)                 # one arena (a memfd), one registration, the manifest
    for step in ...:
        train(model)
        pub.push([agent_b])                                 # copy in (nothing, once adopted), one transfer per node
        pub.wait_acks(readers=2, timeout=60)                # both inference processes applied it

    # each inference process, on node-b
    sub = subscribe(agent_b, "policy")                      # waits for the region, maps the node's one copy
    while True:
        upd = sub.wait_update()                             # the next version and the manifest it came with
        sub.apply(upd, engine_model)                        # in place, every dtype and shape checked first
        sub.ack(upd)

The publisher's arena is a region of its own agent (``Agent.allocate``: this process's memory, registered once,
whatever the number of tensors) holding the tensors as :func:`conduit._tensors.layout` lays them out, so its
manifest is a .safetensors header. ``adopt(module)`` makes the module's parameters views of the arena: pushes
then copy nothing in. A push writes the whole arena to region NAME on each node's agent (made there the first
time, ``shareable``, with the manifest) in one Fanout transfer; each target's new version comes with the
manifest (docs/tensors.md). Every reader on a node maps that one region (``Agent.open_shared``, read-only):
one copy per node, not per process.

Readers apply from the node's copy while the next push could land in it: a publisher that waits for the acks
of version K before pushing K+1 (as above) never tears a reader's apply. Readers that cannot be waited for
take a :class:`~conduit.versions.DoubleBuffer` instead.

A reader may skip its copy: ``sub.adopt(upd, engine_model)`` makes the model's tensors views of the node's
copy (read-only), so every later version lands in them with no copy per reader and ``apply`` only checks.
Pushes then land while the model may be reading: adopt where the loop already sequences weight syncs with
generation (the engines paused for the push, as NCCL-based syncs require too).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import tensors as _tensors
from .errors import Conflict, InvalidArgument, NotFound
from .manifest import Manifest
from .values import Target

if TYPE_CHECKING:
    from .acks import Acks
    from .agent import Agent
    from .buffers import SharedBuffer

__all__ = ["Publisher", "Subscriber", "Published", "publish", "subscribe"]


def _framework_of(state: Any) -> str:
    """"torch" when STATE (a module or state_dict) holds torch tensors, else "numpy"."""
    named = _tensors._named(state, "state_dict")
    return "torch" if any(_tensors._is_torch(x) for x in named.values()) else "numpy"


class Publisher:
    """A state_dict (numpy or torch, or a torch module) published as region NAME of AGENT; see the module's
    docstring. ``close()`` (or leaving a ``with`` block) deletes the arena; the nodes' copies stay."""

    def __init__(self, agent: Agent, name: str, state_dict: Any, *, metadata: Mapping[str, str] | None = None,
                 prefault: bool = True) -> None:
        self.agent = agent
        self.name = name
        self._source = state_dict
        self._framework = _framework_of(state_dict)
        self.manifest, nbytes = _tensors.layout(state_dict, metadata=metadata)
        # Nothing to move still makes a region (a model of empty tensors): the agent takes at least one byte.
        # The region carries its manifest from its first moment: a subscriber that waits for it never finds it
        # without one.
        self.buffer: SharedBuffer = agent.allocate(name, max(1, nbytes), prefault=prefault, manifest=self.manifest)
        try:
            _tensors.pack(state_dict, self.buffer, self.manifest)
        except BaseException:
            self.buffer.close()
            raise
        self._arena = _tensors.views(self.buffer, self.manifest, self._framework)
        self._versions: dict[str, tuple[Agent, int]] = {}  # by target agent's URL: the version last pushed

    def __repr__(self) -> str:
        return (f"Publisher({self.name!r} on {self.agent.url}, {len(self.manifest.tensors)} tensors, "
                f"{self.manifest.data_bytes} bytes)")

    def set_metadata(self, metadata: Mapping[str, str]) -> None:
        """Replace the manifest's metadata (a step number, a checkpoint id): the next push carries it to every
        node with the bytes, so a reader's ``Published.manifest.metadata`` says what it got."""
        manifest = Manifest(self.manifest.tensors, dict(metadata))
        manifest.check()
        self.agent.set_manifest(self.name, manifest)
        self.manifest = manifest

    def views(self) -> dict[str, Any]:
        """The arena's tensors by name (torch tensors for a torch state_dict, else numpy), none a copy."""
        return dict(self._arena)

    def adopt(self, module: Any) -> None:
        """Make MODULE's parameters and buffers (a torch module; the one published) views of the arena, so a
        push copies nothing in: an optimizer stepping them writes the arena. Each keeps its values; take it
        before making the optimizer (which holds the parameters, not their storage, so either order works)."""
        nn = getattr(sys.modules.get("torch"), "nn", None)
        if nn is None or not isinstance(module, nn.Module):
            raise TypeError(f"adopt takes a torch.nn.Module, not {type(module).__name__}: numpy arrays cannot be "
                            "moved; write into views() instead")
        named = _tensors._named(module, "module")
        missing = sorted(set(named) ^ set(self._arena))
        if missing:
            raise ValueError(f"nothing adopted: the module is not the one published ({', '.join(missing[:10])} in "
                             "one and not the other)")
        self.update(module)
        _tensors.adopt(self._arena, module)  # the same Parameter objects, their storage now the arena's

    def update(self, state_dict: Any = None) -> int:
        """Copy STATE_DICT (default: the one published) into the arena, each tensor that is not already the
        arena's own (adopted): checked first, nothing written on a mismatch (ValueError naming the tensor).
        Returns the bytes copied."""
        named = _tensors._named(self._source if state_dict is None else state_dict, "state_dict")
        moved = {n: x for n, x in named.items()
                 if n not in self._arena or _tensors._address(x) != _tensors._address(self._arena[n]) or
                 (_tensors._is_torch(x) and x.device.type != "cpu")}
        if not moved:
            return 0
        if len(moved) == len(named):
            _tensors.pack(named, self.buffer, self.manifest)
        else:
            _tensors.apply(moved, self._arena)  # the same checks, on what is not in place
        return sum(t.length for t in self.manifest.tensors if t.name in moved)

    def push(self, targets: Iterable[Agent], *, verify: str = "crc32c", update: bool = True,
             timeout: float | None = 300.0) -> dict[str, int]:
        """Write the arena (after ``update()`` unless UPDATE is False) to region NAME on each target agent, all
        at once (one Fanout transfer): made there the first time (``shareable``, with the manifest), else
        checked to be the arena's size. Returns each target's new version by its URL, which readers ack."""
        agents = list(targets)
        if not agents:
            raise InvalidArgument("push needs at least one target agent", "InvalidArgument")
        if update:
            self.update()
        for a in agents:
            self._target_region(a)
        transfer = self.agent.transfer(self.name, [Target(a, self.name) for a in agents], verify=verify,
                                       strategy="Fanout", writer=f"{self.agent.node_name or self.agent.url}/"
                                                                 f"{self.name}")
        transfer.wait(timeout=timeout)
        versions: dict[str, int] = {}
        for a in agents:
            v = a.version(self.name).version
            self._versions[a.url] = (a, v)
            versions[a.url] = v
        return versions

    def _target_region(self, agent: Agent) -> None:
        want = self.buffer.nbytes
        try:
            have = agent.region(self.name).bytes
        except NotFound:
            try:
                agent.create_region(self.name, want, manifest=self.manifest, shareable=True)
                return
            except Conflict:  # made meanwhile by another push: looked at below
                have = agent.region(self.name).bytes
        if have != want:
            raise Conflict(f"region {self.name} on {agent.url} is {have} bytes, the arena {want}: delete it "
                           "(its readers remap a new one) or publish under another name", "Conflict")

    def wait_acks(self, readers: int, timeout: float | None = 60.0) -> dict[str, Acks]:
        """Once READERS readers on each node pushed to acked the version last pushed there: their acks by
        node URL. TimeoutError naming the node, who acked and how many are missing."""
        deadline = None if timeout is None else time.monotonic() + timeout
        out: dict[str, Acks] = {}
        for url, (a, version) in self._versions.items():
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            out[url] = a.wait_acks(self.name, version, readers, timeout=left)
        return out

    def close(self) -> None:
        """Delete the arena (the nodes' copies stay: their readers may still be applying)."""
        self.buffer.close()

    def __enter__(self) -> Publisher:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass(frozen=True)
class Published:
    """One version of a published model as a reader sees it: the node's copy and the manifest that came with
    the version. ``tensors()`` are views of the node's one copy (read-only), not a snapshot."""

    region: str
    version: int
    updated_by: str
    updated_at: datetime | None
    manifest: Manifest
    buffer: SharedBuffer

    def tensors(self, framework: str = "numpy") -> dict[str, Any]:
        """``{name: view}`` of the tensors ("numpy" or "torch"), none a copy."""
        return _tensors.views(self.buffer, self.manifest, framework)


class Subscriber:
    """A reader of region NAME on its node's AGENT (see the module's docstring): waits for the region (up to
    TIMEOUT s), then maps the node's one copy read-only. ``close()`` unmaps it; the region stays."""

    def __init__(self, agent: Agent, name: str, *, timeout: float = 60.0, reader: str | None = None) -> None:
        self.agent = agent
        self.name = name
        self.reader = reader or f"{socket.gethostname()}/{os.getpid()}"
        agent.wait_region(name, timeout)
        self.buffer: SharedBuffer = agent.open_shared(name)
        self.seen = 0
        self._adopted: dict[str, tuple[int, int]] = {}  # adopted tensors' (offset, length) in the region

    def __repr__(self) -> str:
        return f"Subscriber({self.name!r} on {self.agent.url}, seen version {self.seen})"

    def wait_update(self, timeout: float | None = None) -> Published:
        """The region's next version past the last one returned (the first: past 0), with its manifest;
        TimeoutError after TIMEOUT s."""
        upd = self.agent.wait_version(self.name, after=self.seen, timeout=timeout)
        manifest = self.agent.manifest(self.name)  # set with that version (or a newer one, never an older)
        if manifest.data_bytes > self.buffer.nbytes:
            raise InvalidArgument(f"region {self.name}'s manifest needs {manifest.data_bytes} bytes; the mapping "
                                  f"has {self.buffer.nbytes}: the region was made again, subscribe again",
                                  "InvalidArgument")
        self.seen = upd.version
        return Published(self.name, upd.version, upd.updated_by, upd.updated_at, manifest, self.buffer)

    def apply(self, update: Published, state_dict: Any, tensors: str | Iterable[str] | None = None) -> list[str]:
        """UPDATE's tensors into STATE_DICT (a torch module or a state_dict of numpy arrays or torch tensors) in
        place (``conduit._tensors.apply``): every selected dtype and shape checked first, nothing written on a
        mismatch (ValueError naming each tensor). TENSORS: names or globs of the update's, to apply only those.
        Tensors adopted (``adopt``) are the node's copy already: checked, not copied. Returns the names
        applied."""
        moved = [t.name for t in update.manifest.tensors
                 if t.name in self._adopted and self._adopted[t.name] != (t.offset, t.length)]
        if moved:
            raise ValueError(f"nothing applied: {', '.join(map(repr, moved[:10]))} moved in region {self.name} "
                             "since adopt(): adopt(update, model) again")
        return _tensors.apply(update.tensors(_framework_of(state_dict)), state_dict, tensors)

    def adopt(self, update: Published, module: Any, tensors: str | Iterable[str] | None = None) -> list[str]:
        """Make MODULE's parameters and buffers (a torch module) views of the node's copy, checked as ``apply``
        checks: no copy per reader, now or on any later version, which lands in them as it lands on the
        node; ``apply`` then only checks. Two things follow, said in docs/tensors.md: the views are
        read-only (a write to them faults), and a push lands while the module may be reading, so take it
        where pushes are sequenced with the engine (a weight sync between steps, generation paused: the
        publisher waits for every reader's ack of "ready" before pushing), else ``apply`` into the module's
        own memory or use a DoubleBuffer. Returns the names adopted."""
        names = _tensors.adopt(update.tensors("torch"), module, tensors)
        chosen = set(names)
        self._adopted.update({t.name: (t.offset, t.length) for t in update.manifest.tensors if t.name in chosen})
        return names

    def ack(self, update: Published) -> Acks:
        """Tell the agent this reader applied UPDATE (what the publisher's ``wait_acks`` waits for)."""
        return self.agent.ack(self.name, update.version, self.reader)

    def close(self) -> None:
        self.buffer.close()

    def __enter__(self) -> Subscriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def publish(agent: Agent, name: str, state_dict: Any, **kwargs: Any) -> Publisher:
    """A :class:`Publisher` of STATE_DICT as region NAME of AGENT."""
    return Publisher(agent, name, state_dict, **kwargs)


def subscribe(agent: Agent, name: str, **kwargs: Any) -> Subscriber:
    """A :class:`Subscriber` of region NAME on AGENT (this node's)."""
    return Subscriber(agent, name, **kwargs)

