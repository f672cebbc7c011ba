"""torchft's ``CheckpointTransport`` over Conduit: a replica that restarts heals by pulling a healthy peer's
state_dict through its own node agent, crc32c-verified as it lands.

    from conduit import Agent
    from conduit.integrations.torchft import ConduitTransport

    transport = ConduitTransport(Agent(), timedelta(seconds=60))      # this node's agent (and import socket)
    manager = Manager(pg=pg, ..., checkpoint_transport=transport)

How a heal goes (docs/integrations.md has the whole of it):

- ``send_checkpoint(dst_ranks, step, state_dict)``, on the healthy replica: the state_dict is flattened with
  torch's pytree; its tensor leaves are copied into one arena (a region of this process's memory on this
  node's agent, kept from one send to the next while its size holds), laid out as named tensors whose names
  are the leaves' paths (``['user']['default']['fc.weight']``); everything else (ints, floats, strings, the
  tree's structure, each DTensor's mesh and placements) goes as JSON in the arena's manifest metadata. Then a
  **read grant** on the arena, for this step only, and a one-byte *ticket* region ``<prefix>-s<step>`` whose
  manifest carries the grant's key: its appearance (made with its manifest in one call) says "step N may be
  pulled now".
- ``recv_checkpoint(src_rank, metadata, step)``, on the restarted replica: ``metadata`` names the sender's
  agent and prefix; the receiver waits for that step's ticket (a long-poll on the sender's agent), reads the
  arena's manifest, checks it against its own state_dict when it was given one (``state_dict=``: each of its
  tensors must be the sender's, same path, dtype and shape, else :class:`~conduit.TensorMismatch` naming the
  tensor before a byte moves), allocates an arena of its own on its node's agent and has **its own agent
  pull** the sender's arena through the grant (a transfer with ``op: read`` and ``verify: crc32c``), then rebuilds the state_dict:
  tensors on the device the caller's state_dict uses (else the sender's device where this process has it,
  else the CPU); CPU tensors are views of the landed arena, no copy.
- ``disallow_checkpoint()``: the grant is revoked (its key stops working at once, a pull in flight fails)
  and the ticket deleted: a late receiver waits and then gets a TimeoutError that says what the sender
  serves, never older or torn bytes. ``shutdown()`` also frees the arena.

Why a pull through a read grant, and not a push: torchft's receiver asks (it knows when it is ready and how
long it may wait), and the sender only says what may be read and for how long. With ``Agent.pull`` the
receiver's agent runs the transfer into memory this process allocated (no second copy on its side), the grant
is the owner's to give for one step and to revoke, and verification is the transfer's own (each slice's
crc32c against the sender's checksum of it). A push would need the sender to learn of each receiver's region
and grant first, a round trip torchft has no channel for; ``Agent.scatter(op="read")`` would pull too, but
unverified.

What a process needs: an ``Agent`` of its node with its import socket (``CONDUIT_IMPORT_SOCKET``), and
credentials the peers' agents take for reading a region's manifest (the operator token or a ``conduit:operator``
certificate: docs/security.md); the bytes themselves move between the agents, under the grant.
"""

from __future__ import annotations

import itertools
import json
import logging
import math
import sys
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any, TypeVar

import torch
from torch.utils import _pytree as pytree
from torchft.checkpointing.transport import CheckpointTransport

from .. import tensors as _tensors
from ..agent import Agent
from ..buffers import SharedBuffer
from ..errors import ConduitError, NotFound, TensorMismatch, TransferFailed
from ..manifest import Manifest
from ..values import Grant

__all__ = ["CheckpointUnavailable", "ConduitTransport"]

T = TypeVar("T")
logger = logging.getLogger(__name__)

_FORMAT = "conduit-torchft/1"
_STEP, _LEAVES, _TREE = "torchft.step", "torchft.leaves", "torchft.treespec"
_KEY, _ARENA, _DST = "torchft.grant", "torchft.arena", "torchft.dst_ranks"
#: Transfer failures that mean the sender took its grant back (disallow_checkpoint, a newer step).
_WITHDRAWN = ("AccessLost", "RemoteAccessDenied", "Forbidden", "NotFound")


class CheckpointUnavailable(ConduitError):
    """The sender does not serve the step asked for (it serves another one, or withdrew it during the pull)."""

    def __init__(self, message: str, agent: str | None = None) -> None:
        super().__init__(message, "CheckpointUnavailable", agent=agent)


def _dtensor_type() -> type | None:
    # A DTensor exists only once its module was imported: asking never imports it (which takes most of a second).
    module = sys.modules.get("torch.distributed.tensor")
    return getattr(module, "DTensor", None)


# --- The state_dict as named tensors and JSON ------------------------------------------------------------------

def _placements_json(placements: Any, name: str) -> list[dict[str, Any]]:
    from torch.distributed.tensor import Partial, Replicate, Shard
    out: list[dict[str, Any]] = []
    for p in placements:
        if type(p) is Shard:
            out.append({"shard": p.dim})
        elif type(p) is Replicate:
            out.append({"replicate": True})
        elif type(p) is Partial:
            out.append({"partial": p.reduce_op})
        else:
            raise TypeError(f"state_dict leaf {name}: DTensor placement {p!r} is not Shard, Replicate or Partial, "
                            "which ConduitTransport carries")
    return out


def _placements(described: list[dict[str, Any]]) -> list[Any]:
    from torch.distributed.tensor import Partial, Replicate, Shard
    return [Shard(p["shard"]) if "shard" in p else Partial(p["partial"]) if "partial" in p else Replicate()
            for p in described]


def flatten(state_dict: Any) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """STATE_DICT as what goes on the wire: its tensors by leaf path (a DTensor's local shard), each leaf
    described (a tensor's name, device and DTensor spec, or a JSON value) and the tree's structure as JSON.
    TypeError naming the leaf for anything else (an object that is neither)."""
    dtensor = _dtensor_type()
    leaves, spec = pytree.tree_flatten_with_path(state_dict)
    tensors: dict[str, Any] = {}
    described: list[dict[str, Any]] = []
    for path, leaf in leaves:
        name = pytree.keystr(path) or "<root>"
        if dtensor is not None and isinstance(leaf, dtensor):
            mesh = leaf.device_mesh
            local = leaf.to_local()
            tensors[name] = local.detach()
            described.append({"tensor": name, "device": str(local.device), "grad": leaf.requires_grad,
                              "dtensor": {"device_type": mesh.device_type, "mesh": mesh.mesh.tolist(),
                                          "dim_names": list(mesh.mesh_dim_names or []) or None,
                                          "placements": _placements_json(leaf.placements, name),
                                          "shape": list(leaf.shape), "stride": list(leaf.stride())}})
        elif isinstance(leaf, torch.Tensor):
            tensors[name] = leaf.detach()
            described.append({"tensor": name, "device": str(leaf.device), "grad": leaf.requires_grad})
        elif leaf is None or isinstance(leaf, (bool, int, float, str)):
            described.append({"value": leaf})
        else:
            raise TypeError(f"state_dict leaf {name} is a {type(leaf).__name__}: ConduitTransport carries tensors, "
                            "DTensors and JSON values (int, float, str, bool, None)")
    try:
        tree = pytree.treespec_dumps(spec)
    except Exception as e:  # noqa: BLE001 -- torch says which node type it cannot write
        raise TypeError(f"the state_dict's structure cannot be written as JSON: {e}") from e
    return tensors, described, tree


def _local_device(sent_on: str) -> torch.device:
    """Where a tensor the sender held on SENT_ON goes here when the caller said nothing: that device's type
    where this process has one (its current device), else the CPU."""
    kind = torch.device(sent_on).type
    if kind != "cpu" and torch.accelerator.is_available():
        here = torch.accelerator.current_accelerator()
        if here is not None and here.type == kind:
            return torch.device(kind, torch.accelerator.current_device_index())
    return torch.device("cpu")


def _check_against(manifest: Manifest, mine: Mapping[str, Any], where: str) -> None:
    """TensorMismatch naming every tensor of MINE (the receiver's own, by leaf path) that MANIFEST lacks or
    holds with another dtype or shape. Tensors the sender has beyond MINE are fine (a fresh optimizer has no
    state yet, the sender's has): they land on the sender's device type."""
    problems: dict[str, list[str]] = {}
    sent = {t.name: t for t in manifest.tensors}
    for name, x in mine.items():
        t = sent.get(name)
        if t is None:
            problems[name] = ["in this replica's state_dict, not in the sender's"]
            continue
        d = _tensors._dtype_of(x)
        if d is None or d.name != t.dtype:
            problems.setdefault(name, []).append(f"dtype {t.dtype} sent, {x.dtype} here")
        if tuple(x.shape) != t.shape:
            problems.setdefault(name, []).append(f"shape {list(t.shape)} sent, {list(x.shape)} here")
    if problems:
        raise TensorMismatch(f"{where}: " + _tensors._nothing("received", problems), "TensorMismatch")


# --- The transport ---------------------------------------------------------------------------------------------

class ConduitTransport(CheckpointTransport[T]):
    """A torchft ``CheckpointTransport`` over Conduit (see the module's docstring).

    AGENT: this node's agent, with its import socket (the arenas are this process's memory). TIMEOUT: how long
    a grant lives when ``send_checkpoint`` gives none (torchft always does). PEERS: the client of a peer's
    agent at a URL found in ``metadata()`` (default ``Agent(url)``, which takes the token and TLS settings
    from the environment, as this process's own does). URL: how peers' agents reach this node's agent (default
    ``agent.url``). STATE_DICT: what this replica would send (a callable, as torchft's Manager takes):
    received checkpoints are checked against it and land on its tensors' devices. DEVICE: where received
    tensors go when STATE_DICT does not say. PREFAULT: touch the sending arena's pages once when it is made
    (it is kept from one send to the next), so no send pays the page faults.

        transport = ConduitTransport(Agent(), timedelta(seconds=60),
                                     state_dict=lambda: {"user": {"default": model.state_dict()}})
    """

    def __init__(self, agent: Agent, timeout: timedelta = timedelta(seconds=60), *,
                 peers: Callable[[str], Agent] | None = None, url: str | None = None,
                 state_dict: Callable[[], Any] | None = None, device: torch.device | str | None = None,
                 prefault: bool = True) -> None:
        self._agent = agent
        self._timeout = timeout
        self._peer_factory = peers or (lambda u: Agent(u))
        self._peers: dict[str, Agent] = {}
        self._url = url or agent.url
        self._template = state_dict
        self._device = torch.device(device) if device is not None else None
        self._prefault = prefault
        self._prefix = f"torchft-{uuid.uuid4().hex[:12]}"
        self._lock = threading.Lock()
        self._arena: SharedBuffer | None = None
        self._grant: Grant | None = None
        self._ticket: str | None = None
        self._received = itertools.count()

    def __repr__(self) -> str:
        serving = self._ticket or "nothing"
        return f"ConduitTransport({self._prefix} on {self._url}, serving {serving})"

    # ---- the sender

    def metadata(self) -> str:
        """Where a receiver pulls this replica's checkpoints from: this node's agent URL and this transport's
        region prefix, as JSON."""
        return json.dumps({"format": _FORMAT, "agent": self._url, "prefix": self._prefix})

    def send_checkpoint(self, dst_ranks: list[int], step: int, state_dict: T, timeout: timedelta) -> None:
        """Serve STATE_DICT as step STEP: packed into the arena (copied from the GPU where it is there), a read
        grant on it for TIMEOUT, and the step's ticket. Whatever was served before is withdrawn first. Returns
        once it may be pulled: the receivers pull on their own time."""
        tensors, described, tree = flatten(state_dict)
        meta = {_STEP: str(step), _LEAVES: json.dumps(described), _TREE: tree}
        manifest, nbytes = _tensors.layout(tensors, metadata=meta)
        ttl = max(1, math.ceil(timeout.total_seconds()))
        with self._lock:
            self._withdraw()
            arena = self._arena_of(max(1, nbytes))
            self._agent.set_manifest(arena.name, manifest)
            _tensors.pack(tensors, arena, manifest)
            grant = self._agent.grant(arena.name, "read", ttl_seconds=ttl)
            ticket = f"{self._prefix}-s{step}"
            try:
                self._agent.create_region(ticket, 1, manifest=Manifest((), {
                    _STEP: str(step), _KEY: json.dumps(grant.key), _ARENA: arena.name, _DST: json.dumps(dst_ranks)}))
            except BaseException:
                try:
                    self._agent.revoke(grant.id)
                except ConduitError:
                    pass  # the error that stopped the send is the one to see; the grant expires anyway
                raise
            self._grant, self._ticket = grant, ticket
        logger.info("serving step %d (%d tensors, %d bytes) as %s for ranks %s", step, len(tensors), nbytes,
                    ticket, dst_ranks)

    def _arena_of(self, nbytes: int) -> SharedBuffer:
        if self._arena is not None and self._arena.nbytes == nbytes:
            return self._arena
        if self._arena is not None:
            self._arena.close()
            self._arena = None
        self._arena = self._agent.allocate(f"{self._prefix}-arena", nbytes, prefault=self._prefault)
        return self._arena

    def disallow_checkpoint(self) -> None:
        """Stop serving at once: the grant revoked (a pull in flight fails), the ticket deleted. The arena
        stays for the next send; nothing reads it any more, so the caller may change its state_dict."""
        with self._lock:
            self._withdraw()

    def _withdraw(self) -> None:
        grant, ticket = self._grant, self._ticket
        self._grant = self._ticket = None
        if grant is not None:
            try:
                self._agent.revoke(grant.id)
            except NotFound:
                pass  # expired already: it allows nothing either way
        if ticket is not None:
            try:
                self._agent.delete_region(ticket)
            except NotFound:
                pass

    def shutdown(self, wait: bool = True) -> None:
        """Withdraw what is served and free the arena (its region on the agent with it)."""
        with self._lock:
            self._withdraw()
            arena, self._arena = self._arena, None
        if arena is not None:
            arena.close(timeout=30.0 if wait else 0.0)

    # ---- the receiver

    def _peer(self, url: str) -> Agent:
        if url not in self._peers:
            self._peers[url] = self._peer_factory(url)
        return self._peers[url]

    def recv_checkpoint(self, src_rank: int, metadata: str, step: int, timeout: timedelta) -> T:
        """Pull step STEP from the sender METADATA names into this node and rebuild its state_dict. Raises
        TimeoutError ("timed out ...") when it is not served, or not landed, within TIMEOUT;
        :class:`CheckpointUnavailable` when the sender serves a later step or withdrew this one mid-pull (an
        earlier one is waited past: the sender may not have reached STEP yet);
        :class:`~conduit.TensorMismatch` naming the tensors when it is not this replica's state_dict (given as
        ``state_dict=``), before anything moves; :class:`~conduit.TransferFailed` when the transfer fails
        otherwise (a checksum that does not match, a peer that does not answer)."""
        seconds = timeout.total_seconds()
        deadline = time.monotonic() + seconds
        try:
            where = json.loads(metadata)
            if not isinstance(where, dict) or where.get("format") != _FORMAT:
                raise ValueError(f"not {_FORMAT}")
            url, prefix = str(where["agent"]), str(where["prefix"])
        except (ValueError, KeyError) as e:
            raise ValueError(f"recv_checkpoint: metadata {metadata[:200]!r} is not a ConduitTransport's ({e}): "
                             "every replica must use ConduitTransport") from None
        sender = self._peer(url)
        try:
            ticket = self._await_ticket(sender, prefix, step, deadline, seconds)
            return self._pull(sender, ticket, step, deadline)
        except TimeoutError as e:
            raise TimeoutError(f"recv_checkpoint of step {step} from {url} (rank {src_rank}) timed out after "
                               f"{seconds:g} s: {e}") from None

    def _served(self, sender: Agent, prefix: str) -> list[int]:
        head = f"{prefix}-s"
        steps = []
        for r in sender.regions():
            if r.name.startswith(head):
                try:
                    steps.append(int(r.name[len(head):]))
                except ValueError:
                    pass
        return sorted(steps)

    def _await_ticket(self, sender: Agent, prefix: str, step: int, deadline: float, seconds: float) -> Manifest:
        name = f"{prefix}-s{step}"
        served = self._served(sender, prefix)
        if served and served[-1] > step:  # steps only grow: an older one is not coming back
            raise CheckpointUnavailable(f"{sender.url} serves the checkpoint of step {served[-1]}, past step {step}",
                                        agent=sender.url)
        while True:
            try:
                return sender.manifest(name)
            except NotFound:
                pass  # no ticket (or, for an instant, a ticket without its manifest: it comes with it)
            left = deadline - time.monotonic()
            if left <= 0:
                served = self._served(sender, prefix)
                now = f"it serves step {served[-1]}" if served else \
                    "it serves nothing (send_checkpoint not called for this step yet, or disallowed since)"
                raise TimeoutError(f"no checkpoint of step {step} on {sender.url} within {seconds:g} s: {now}")
            if left >= 1.0:
                try:
                    sender.wait_region(name, timeout=math.floor(left))  # the agent answers when it is made
                except TimeoutError:
                    pass
            else:
                time.sleep(min(left, 0.02))

    def _pull(self, sender: Agent, ticket: Manifest, step: int, deadline: float) -> Any:
        arena = ticket.metadata[_ARENA]
        key = json.loads(ticket.metadata[_KEY])
        manifest = sender.manifest(arena)
        if manifest.metadata.get(_STEP) != str(step):
            raise CheckpointUnavailable(f"step {step} was withdrawn from {sender.url} (its arena holds step "
                                        f"{manifest.metadata.get(_STEP)} now)", agent=sender.url)
        described = json.loads(manifest.metadata[_LEAVES])
        tree = pytree.treespec_loads(manifest.metadata[_TREE])
        mine: dict[str, Any] = {}
        if self._template is not None:
            mine, _, _ = flatten(self._template())
            _check_against(manifest, mine, f"step {step} from {sender.url}")
        nbytes = max(1, manifest.data_bytes)
        # Not prefaulted: the agent faults the pages in as the bytes land, which measured cheaper than a pass
        # over them first (bench/torchft_heal_bench.py: 256 MiB, 0.40 s against 0.63 s, with the fault pass).
        landed = self._agent.allocate(f"{self._prefix}-in{next(self._received)}", nbytes)
        try:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("no time left to pull it")
            if manifest.tensors:
                transfer = self._agent.pull(landed.name, sender.url, arena, key, length=nbytes,
                                            deadline_seconds=max(1, math.ceil(left)))
                try:
                    transfer.wait(timeout=left)
                except TimeoutError:
                    transfer.cancel()
                    raise
                except TransferFailed as e:
                    if e.reason in _WITHDRAWN or any(w in e.message for w in _WITHDRAWN):
                        raise CheckpointUnavailable(f"step {step} was withdrawn from {sender.url} during the pull "
                                                    f"(disallow_checkpoint): {e}", agent=sender.url) from e
                    raise
            views = _tensors.views(landed, manifest, "torch")
        finally:
            landed.close()  # the region goes; the views keep the pages mapped while they live
        return pytree.tree_unflatten([self._leaf(d, views, mine) for d in described], tree)

    def _leaf(self, d: Mapping[str, Any], views: Mapping[str, Any], mine: Mapping[str, Any]) -> Any:
        if "value" in d:
            return d["value"]
        name = d["tensor"]
        t = views[name]
        device = (mine[name].device if name in mine else self._device or _local_device(d["device"]))
        if device.type != "cpu":
            t = t.to(device)
        if d.get("grad"):
            t.requires_grad_(True)
        spec = d.get("dtensor")
        if spec is None:
            return t
        from torch.distributed.tensor import DeviceMesh, DTensor
        from torch.distributed.tensor._dtensor_spec import DTensorSpec, TensorMeta
        mesh = DeviceMesh(spec["device_type"], spec["mesh"],
                          mesh_dim_names=tuple(spec["dim_names"]) if spec["dim_names"] else None)
        # The shard as it was sent, whichever ranks the mesh holds (DTensor.from_local would make an empty
        # one on a rank outside it), with the sender's global shape and stride: what torch.load makes.
        meta = TensorMeta(torch.Size(spec["shape"]), tuple(spec["stride"]), t.dtype)
        return DTensor(t, DTensorSpec(mesh, tuple(_placements(spec["placements"])), tensor_meta=meta),
                       requires_grad=t.requires_grad)
