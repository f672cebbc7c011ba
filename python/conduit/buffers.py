"""Zero-copy regions: memory of this process that the agent maps as a named region.

The agent's import socket (``--import-socket``, agent/src/import_socket.h) takes one line of JSON
``{"name", "bytes"}`` with a memfd attached (SCM_RIGHTS) and answers one line ``{"ok": true, "region": {...}}``
or ``{"error": {"code", "message"}}``. Both sides then map the same pages: what this process writes through
:meth:`SharedBuffer.numpy` is what the agent sends, and what a transfer writes into the region is what this
process reads, with no copy on either side. Before anything is imported, ``{"identify": true}`` asks the
socket which agent it belongs to: a socket of another agent than the one at the URL is refused
(:class:`~conduit.errors.AgentMismatch`), since the region would be made on one and deleted on the other.

A second process on the node maps a region the agent already holds with :func:`open_shared`
(``{"open": "<region>", "writable": false}``; the agent answers with the region's memfd attached): every
inference process sees the weights one transfer landed, read-only unless it asks otherwise.

    with agent.allocate("weights", 1 << 30) as buf:
        w = buf.numpy(np.float32)          # a view of the shared pages
        w[:] = model_weights               # the agent sees it at once
        agent.transfer("weights", [Target(b, "weights")]).wait()
"""

from __future__ import annotations

import json
import math
import mmap
import os
import socket
import time
import warnings
from collections.abc import Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from .errors import AgentMismatch, Conflict, InvalidArgument, NotFound, Unavailable, error_for
from .manifest import Manifest
from .values import Region

if TYPE_CHECKING:
    from .agent import Agent

#: How long to wait for the agent's answer on the import socket (it maps and registers the memory first).
REPLY_TIMEOUT_S = 30.0
#: The agent's answer to an open line carries the region's manifest, which may name thousands of tensors.
_MAX_REPLY = 4 << 20


def send_import(socket_path: str, request: Mapping[str, Any], fd: int | None = None) -> dict[str, Any]:
    """Send one import REQUEST (with FD attached, when given) on the agent's unix socket; the agent's answer
    (``{"ok": true, "region": {...}}``). Raises the agent's error as a ConduitError, Unavailable when the
    socket cannot be reached or answers nothing valid."""
    body, received = exchange(socket_path, request, fd)
    for extra in received:
        os.close(extra)
    return body


def exchange(socket_path: str, request: Mapping[str, Any],
             fd: int | None = None) -> tuple[dict[str, Any], list[int]]:
    """:func:`send_import`, also giving back the fds the agent attached to its answer (the caller closes
    them): one for an open line, none otherwise. On an error none is left open."""
    line = (json.dumps(dict(request), separators=(",", ":")) + "\n").encode()
    received: list[int] = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(REPLY_TIMEOUT_S)
        try:
            s.connect(socket_path)
        except OSError as e:
            raise Unavailable(f"cannot connect to the agent's import socket {socket_path}: {e.strerror or e}",
                              "Unavailable") from e
        try:
            # The fd rides on the first bytes; whatever a short send left follows as plain bytes.
            sent = socket.send_fds(s, [line], [fd]) if fd is not None else s.send(line)
            if sent < len(line):
                s.sendall(line[sent:])
            reply = b""
            while b"\n" not in reply and len(reply) <= _MAX_REPLY:
                # The fd rides on the answer's first bytes (SCM_RIGHTS), as on the request's.
                chunk, fds, _, _ = socket.recv_fds(s, 64 * 1024, 4)
                received.extend(fds)
                if not chunk:
                    break
                reply += chunk
        except OSError as e:
            for extra in received:
                os.close(extra)
            raise Unavailable(f"talking to the agent's import socket {socket_path}: {e}", "Unavailable") from e
    try:
        body = json.loads(reply.split(b"\n", 1)[0])
    except ValueError:
        body = None
    if isinstance(body, dict) and body.get("ok") is True:
        return body, received
    for extra in received:
        os.close(extra)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        err = body["error"]
        raise error_for(str(err.get("code", "")), str(err.get("message", "")),
                        agent=f"import socket {socket_path}")
    raise Unavailable(f"the agent's import socket {socket_path} sent no valid reply: {reply[:200]!r}",
                      "Unavailable")


def import_socket_of(agent: Agent) -> str:
    if not agent.import_socket:
        raise InvalidArgument(f"no import socket for {agent.url}: pass Agent(import_socket=...) or set "
                              "CONDUIT_IMPORT_SOCKET (the agent's --import-socket, on this machine)",
                              "InvalidArgument")
    return agent.import_socket


def checked_import_socket(agent: Agent) -> str:
    """AGENT's import socket, once it said the instance id that AGENT's GET /v1/node says; else AgentMismatch,
    before anything is created on either agent."""
    path = import_socket_of(agent)
    there = send_import(path, {"identify": True}).get("agent") or {}
    here = agent.node()
    if not here.get("instance") or there.get("instance") != here.get("instance"):
        raise AgentMismatch(f"the import socket {path} belongs to agent {there.get('node') or '?'} (instance "
                            f"{there.get('instance') or '?'}), not to the agent at {agent.url} "
                            f"({here.get('node') or '?'}, instance {here.get('instance') or '?'}): pass the "
                            "socket of the agent at that URL", "AgentMismatch", agent=agent.url)
    return path


class SharedBuffer:
    """NBYTES of this process's memory that is also region NAME on AGENT (see the module's docstring).

    ``close()`` (or leaving a ``with`` block, however it is left) unmaps it here and, when this buffer made the
    region (``owner``: :func:`allocate`), deletes the region on the agent; a buffer of :func:`open_shared`
    leaves the region to its maker. numpy or torch views made from it keep the pages mapped until they are
    gone too. ``writable`` False: mapped read-only (numpy views are read-only arrays); ``manifest``: the
    named tensors the region held when opened, or None."""

    def __init__(self, agent: Agent, name: str, nbytes: int, mm: mmap.mmap, region: Region | None, *,
                 owner: bool = True, writable: bool = True, manifest: Manifest | None = None) -> None:
        self.agent = agent
        self.name = name
        self.nbytes = nbytes
        self.region = region
        self.owner = owner
        self.writable = writable
        self.manifest = manifest
        self._mmap: mmap.mmap | None = mm

    def __repr__(self) -> str:
        state = "closed" if self._mmap is None else f"{self.nbytes} bytes"
        return f"SharedBuffer({self.name!r} on {self.agent.url}, {state})"

    @property
    def closed(self) -> bool:
        return self._mmap is None

    def _mm(self) -> mmap.mmap:
        if self._mmap is None:
            raise ValueError(f"shared buffer {self.name} is closed")
        return self._mmap

    def memoryview(self) -> memoryview:
        """The raw bytes (read-only when the buffer is)."""
        return memoryview(self._mm())

    def numpy(self, dtype: npt.DTypeLike = np.uint8, shape: int | tuple[int, ...] | None = None) -> np.ndarray:
        """A zero-copy numpy view of the buffer as DTYPE: 1-D over every whole element, or SHAPE (whose size
        may be less than the buffer's). Read-only (``flags.writeable`` False) when the buffer is."""
        dt = np.dtype(dtype)
        if shape is None:
            count = self.nbytes // dt.itemsize
            return np.frombuffer(self._mm(), dtype=dt, count=count)
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        count = int(np.prod(dims, dtype=np.int64))
        if count * dt.itemsize > self.nbytes:
            raise ValueError(f"shape {dims} of {dt} needs {count * dt.itemsize} bytes; the buffer has "
                             f"{self.nbytes}")
        return np.frombuffer(self._mm(), dtype=dt, count=count).reshape(dims)

    def torch(self, dtype: Any = None, shape: int | tuple[int, ...] | None = None) -> Any:
        """A zero-copy torch tensor (CPU) of the buffer as DTYPE (torch.uint8 when None), through
        ``torch.frombuffer``: 1-D over every whole element, or SHAPE (whose size may be less than the
        buffer's), as :meth:`numpy`. ImportError when torch is not installed.

        torch has no read-only tensors: the tensor of a read-only buffer must not be written (its pages are
        mapped without write access, so a write kills the process with SIGSEGV); copy it (``.clone()``) to
        change it, or open the buffer ``writable=True``."""
        try:
            import torch
        except ImportError as e:
            raise ImportError("SharedBuffer.torch() needs PyTorch (pip install torch); numpy() works without "
                              "it") from e
        dt = torch.uint8 if dtype is None else dtype
        itemsize = torch.empty((), dtype=dt).element_size()
        if shape is None:
            return self._frombuffer(torch, dt, self.nbytes // itemsize)
        dims = (shape,) if isinstance(shape, int) else tuple(shape)
        count = math.prod(dims)
        if count * itemsize > self.nbytes:
            raise ValueError(f"shape {dims} of {dt} needs {count * itemsize} bytes; the buffer has {self.nbytes}")
        if count == 0:
            return torch.empty(dims, dtype=dt)
        return self._frombuffer(torch, dt, count).reshape(dims)

    def _frombuffer(self, torch: Any, dt: Any, count: int) -> Any:
        if self.writable:
            return torch.frombuffer(self._mm(), dtype=dt, count=count)
        # torch.frombuffer warns on every read-only buffer that writing the tensor is undefined; the buffer's
        # read-only state is the caller's choice (open_shared), and torch() documents the rule instead.
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given buffer is not writable", category=UserWarning)
            return torch.frombuffer(self._mm(), dtype=dt, count=count)

    def close(self, timeout: float = 30.0) -> None:
        """Delete the region this buffer imported (only when it is the ``owner``), then unmap it here.
        Idempotent. A region already gone is fine, and one of that name that is not this buffer's (made anew
        since) is left alone. While a transfer or grant uses the region, the delete is tried again until they
        ended (a transfer's grants go with it) for up to TIMEOUT s, then Conflict, and nothing changes."""
        if self._mmap is None:
            return
        deadline = time.monotonic() + timeout
        pause = 0.01
        while self.owner and self._still_mine():
            try:
                self.agent.delete_region(self.name)
                break
            except NotFound:
                break
            except Conflict:
                if time.monotonic() >= deadline:
                    raise
                time.sleep(pause)
                pause = min(pause * 2, 0.2)
        mm, self._mmap = self._mmap, None
        try:
            mm.close()
        except BufferError:
            # numpy/torch views still use the pages: they stay mapped until the last view is freed.
            pass

    def _still_mine(self) -> bool:
        # The agent deletes by name: look first that the name still holds the region imported here (when
        # made, by whom), so a region made anew under it is never deleted for this one.
        try:
            now = self.agent.region(self.name)
        except NotFound:
            return False
        if self.region is None:
            return True
        return all(now.raw.get(k) == self.region.raw.get(k) for k in ("createdAt", "importedBy", "bytes"))

    def __enter__(self) -> SharedBuffer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


def allocate(agent: Agent, name: str, nbytes: int, *, prefault: bool = False,
             manifest: Manifest | None = None) -> SharedBuffer:
    """A memfd of NBYTES, mapped here and imported by AGENT as region NAME (:class:`SharedBuffer`). Raises the
    agent's refusal (AlreadyExists, InvalidArgument, ResourceExhausted, ...) with nothing left behind.
    PREFAULT: every page written once here first (they are zero already), so neither this process nor the
    agent's transport takes a fault per page on the first write into it. MANIFEST: the region's named
    tensors from its first moment (a reader that waits for the region never sees it without them); checked
    by the agent, whose refusal names the tensor."""
    path = checked_import_socket(agent)
    # The name is the agent's to judge (its message says what a name may be); a refused one leaves nothing.
    if not isinstance(nbytes, int) or nbytes < 1:
        raise InvalidArgument(f"a shared buffer needs at least 1 byte, not {nbytes!r}", "InvalidArgument")
    if manifest is not None and not isinstance(manifest, Manifest):
        raise InvalidArgument(f"manifest must be a conduit.Manifest, not {type(manifest).__name__}",
                              "InvalidArgument")
    request: dict[str, Any] = {"name": name, "bytes": nbytes}
    if manifest is not None:
        request["manifest"] = manifest.to_json()
    # MFD_ALLOW_SEALING lets the agent seal the size (F_SEAL_SHRINK): a memfd truncated under its mapping
    # would SIGBUS the agent.
    fd = os.memfd_create(f"conduit:{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.ftruncate(fd, nbytes)
        mm = mmap.mmap(fd, nbytes, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        if prefault:
            view = memoryview(mm)
            view[::mmap.PAGESIZE] = bytes(len(range(0, nbytes, mmap.PAGESIZE)))
            view.release()
        try:
            answer = send_import(path, request, fd)
        except BaseException:
            mm.close()
            raise
    finally:
        os.close(fd)  # the mapping here and the agent's own fd keep the memory
    region = Region.from_json(answer["region"]) if isinstance(answer.get("region"), dict) else None
    return SharedBuffer(agent, name, nbytes, mm, region, manifest=manifest)



def open_shared(agent: Agent, name: str, *, writable: bool = False) -> SharedBuffer:
    """Region NAME that AGENT holds in shared memory (made with ``shareable=True``, or by another process's
    :func:`allocate`), mapped into this process without a copy: read-only unless WRITABLE. Its ``close()``
    unmaps it and leaves the region. Raises the agent's refusal: NotFound, InvalidArgument (the region is
    not shareable), Forbidden (another pod's region)."""
    path = checked_import_socket(agent)
    if not isinstance(writable, bool):
        raise InvalidArgument(f"writable must be True or False, not {writable!r}", "InvalidArgument")
    answer, fds = exchange(path, {"open": name, "writable": writable})
    if len(fds) != 1:
        for extra in fds:
            os.close(extra)
        raise Unavailable(f"the agent's import socket {path} answered the open of {name} with {len(fds)} fds, "
                          "not one", "Unavailable")
    try:
        region = Region.from_json(answer["region"])
        prot = mmap.PROT_READ | (mmap.PROT_WRITE if writable else 0)
        mm = mmap.mmap(fds[0], region.bytes, mmap.MAP_SHARED, prot)
    finally:
        os.close(fds[0])  # the mapping keeps the memory
    manifest = Manifest.from_json(answer["manifest"]) if isinstance(answer.get("manifest"), dict) else None
    return SharedBuffer(agent, name, region.bytes, mm, region, owner=False, writable=writable,
                        manifest=manifest)
