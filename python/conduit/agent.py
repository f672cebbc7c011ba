"""One conduit-agent's REST API (agent/openapi.yaml): regions, checksums, grants, transfers.

    agent = Agent("http://node-a:7070", token_file="/etc/conduit/token")
    agent.create_region("scratch", 1 << 20)
    crcs = agent.checksum("scratch")

Defaults come from the environment: ``CONDUIT_AGENT_URL`` (else the CLI's ``CONDUIT_AGENT``, else
http://127.0.0.1:7070), ``CONDUIT_TOKEN`` or ``CONDUIT_TOKEN_FILE``, ``CONDUIT_IMPORT_SOCKET``, and for an
https agent ``CONDUIT_CA_CERT`` (the CA that signed its certificate; else the system's) and
``CONDUIT_TLS_SERVER_NAME`` (the name its certificate carries, checked instead of the address; the chart's
agents share one certificate naming their Service), and ``CONDUIT_CLIENT_CERT`` / ``CONDUIT_CLIENT_KEY``
(a certificate naming ``conduit:operator`` that the agent takes instead of the token; docs/security.md).
"""

from __future__ import annotations

import base64
import math
import os
import random
import time
import warnings
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from . import acks as acks_api
from . import buffers, cuda, versions
from .acks import Ack, Acks
from .buffers import SharedBuffer
from .client import Client
from .errors import InvalidArgument, NotFound, TensorMismatch, TooManyRequests
from .manifest import Manifest, plan_subset
from .reshard_plan import ReshardPlan
from .transfers import Transfer, TransferStatus
from .values import Grant, Region, Target, check_id, check_name
from .versions import Update


_STRATEGIES = {"PointToPoint": "fanout", "Fanout": "fanout", "Chain": "chain"}


def _strategy(strategy: str, targets: int) -> str:
    """The wire's word for a TransferJob's spelling of STRATEGY; the old wire words warn."""
    if strategy in ("fanout", "chain"):
        warnings.warn(f'strategy="{strategy}" is spelled "{strategy.capitalize()}" now, as in a TransferJob',
                      DeprecationWarning, stacklevel=3)
        return strategy
    if strategy not in _STRATEGIES:
        raise InvalidArgument(f"strategy must be PointToPoint, Fanout or Chain, not {strategy!r}", "InvalidArgument")
    if strategy == "PointToPoint" and targets != 1:
        raise InvalidArgument(f"strategy PointToPoint takes one target, not {targets}", "InvalidArgument")
    return _STRATEGIES[strategy]


def _verify(verify: str | bool) -> str:
    """ "crc32c" or "none", as in a TransferJob; a bool (the old spelling) warns."""
    if isinstance(verify, bool):
        warnings.warn(f'verify={verify} is spelled verify="{"crc32c" if verify else "none"}" now, as in a '
                      "TransferJob", DeprecationWarning, stacklevel=3)
        return "crc32c" if verify else "none"
    if verify not in ("crc32c", "none"):
        raise InvalidArgument(f'verify must be "crc32c" or "none", not {verify!r}', "InvalidArgument")
    return verify


def _pack_ops(source_offsets: Any, target_offsets: Any, lengths: Any) -> bytes:
    """A scatter's op table as ``opsPacked`` wants it: little-endian uint64 triples, checked first."""
    try:
        src = np.asarray(source_offsets)
        dst = np.asarray(target_offsets)
        n = np.broadcast_to(np.asarray(lengths), src.shape)
    except ValueError as e:
        raise InvalidArgument(f"scatter: lengths do not match the offsets: {e}", "InvalidArgument") from e
    for name, a in (("source_offsets", src), ("target_offsets", dst), ("lengths", n)):
        if a.ndim != 1 or a.size == 0 or not np.issubdtype(a.dtype, np.integer):
            raise InvalidArgument(f"scatter: {name} must be a non-empty 1-D sequence of integers, got shape "
                                  f"{a.shape} of {a.dtype}", "InvalidArgument")
        if np.any(a < 0):
            raise InvalidArgument(f"scatter: {name}[{int(np.argmax(a < 0))}] is negative", "InvalidArgument")
    if dst.shape != src.shape:
        raise InvalidArgument(f"scatter: {src.size} source offsets but {dst.size} target offsets",
                              "InvalidArgument")
    return np.stack([src, dst, n], axis=1).astype("<u8").tobytes()


class Agent(Client):
    """A client of one conduit-agent. Every method raises a :class:`~conduit.errors.ConduitError` subclass
    with the agent's code and message when the agent refuses, and :class:`~conduit.errors.Unavailable` when it
    does not answer."""

    def __init__(self, url: str | None = None, token: str | None = None, token_file: str | os.PathLike[str] |
                 None = None, import_socket: str | os.PathLike[str] | None = None, *,
                 timeout: float = 30.0, ca_cert: str | os.PathLike[str] | None = None,
                 tls_server_name: str | None = None,
                 client_cert: tuple[str | os.PathLike[str], str | os.PathLike[str]] | None = None) -> None:
        super().__init__(url, token, token_file, timeout=timeout, ca_cert=ca_cert, tls_server_name=tls_server_name,
                         client_cert=client_cert)
        sock = import_socket if import_socket is not None else os.environ.get("CONDUIT_IMPORT_SOCKET")
        self.import_socket: str | None = os.fspath(sock) if sock else None
        self._node: str | None = None

    # ---- node
    def node(self) -> dict[str, Any]:
        """GET /v1/node: the node's name, fabric, GPUs, memory and checks."""
        return dict(self.request("GET", "/v1/node"))

    @property
    def node_name(self) -> str:
        """The agent's node name (asked once)."""
        if self._node is None:
            self._node = str(self.node().get("node", ""))
        return self._node

    # ---- regions
    def regions(self) -> list[Region]:
        return [Region.from_json(j) for j in self.request("GET", "/v1/regions").get("items", [])]

    def region(self, name: str) -> Region:
        return Region.from_json(self.request("GET", f"/v1/regions/{check_name(name)}"))

    def create_region(self, name: str, nbytes: int, memory: str = "host", *, namespace: str | None = None,
                      shared_with: Iterable[str] = (), manifest: Manifest | None = None,
                      shareable: bool = False) -> Region:
        """Allocate NBYTES of zeroed memory (``host`` or ``cuda:N``) as region NAME, owned by the agent.
        ``namespace``: only TransferJobs of that namespace, or of one in ``shared_with`` (``"*"``: all), may
        use it (docs/security.md, "Tenancy"); without one any job may. ``manifest``: the named tensors it
        will hold (docs/tensors.md), checked by the agent against NBYTES. ``shareable``: host memory in a
        memfd, which processes on this node map with :meth:`open_shared`."""
        body: dict[str, Any] = {"name": check_name(name), "bytes": nbytes, "memory": memory}
        if namespace is not None:
            body["namespace"] = namespace
        if shared_with:
            body["sharedWith"] = list(shared_with)
        if manifest is not None:
            body["manifest"] = manifest.to_json()
        if shareable:
            body["shareable"] = True
        return Region.from_json(self.request("POST", "/v1/regions", body))

    def manifest(self, name: str) -> Manifest:
        """The named tensors region NAME holds (NotFound when it names none)."""
        return Manifest.from_json(self.request("GET", f"/v1/regions/{check_name(name)}/manifest"))

    def set_manifest(self, name: str, manifest: Manifest) -> Manifest:
        """Set or replace region NAME's manifest; the agent checks it against the region's bytes and refuses
        a lying one (InvalidArgument naming the tensor), changing nothing."""
        return Manifest.from_json(self.request("PUT", f"/v1/regions/{check_name(name)}/manifest",
                                               manifest.to_json()))

    def load_region(self, name: str, file: str) -> Region:
        """A new host region NAME holding FILE (relative to the agent's data directory). A file named
        ``*.safetensors`` is read as one: the region holds its tensors and its header is the region's
        manifest (:meth:`manifest`)."""
        return Region.from_json(self.request("POST", "/v1/regions",
                                             {"name": check_name(name), "file": file, "mode": "load"}))

    def save_region(self, name: str, file: str) -> dict[str, Any]:
        """Write region NAME to FILE under the agent's data directory (temp file, fsync, rename). To a file
        named ``*.safetensors`` a region with a manifest is written as one (header, then its tensors)."""
        return dict(self.request("POST", f"/v1/regions/{check_name(name)}/save", {"file": file}, timeout=600))

    def delete_region(self, name: str) -> None:
        """Free region NAME (Conflict while a transfer or grant uses it)."""
        self.request("DELETE", f"/v1/regions/{check_name(name)}")

    def checksum(self, name: str, offset: int = 0, length: int = 0, slice: int = 1 << 20) -> list[int]:
        """CRC32C of each SLICE bytes of [OFFSET, +LENGTH) of region NAME (LENGTH 0: to its end)."""
        j = self.request("GET", f"/v1/regions/{check_name(name)}/checksum",
                         params={"offset": offset, "length": length, "slice": slice}, timeout=600)
        return [int(c) for c in j["crc32c"]]

    # ---- grants
    def grant(self, region: str, access: str = "write", offset: int = 0, length: int = 0,
              ttl_seconds: int = 600, writer: str | None = None, provider: str | None = None) -> Grant:
        """Register [OFFSET, +LENGTH) of REGION (LENGTH 0: to its end) for remote ACCESS (write or read) for
        TTL_SECONDS. WRITER names who writes through it (the region's ``updatedBy`` once a write lands)."""
        body: dict[str, Any] = {"access": access, "offset": offset, "ttlSeconds": ttl_seconds}
        if length:
            body["length"] = length
        if writer is not None:
            body["writer"] = writer
        if provider is not None:
            body["provider"] = provider  # the target agent's transport the key is for (default: its first)
        return Grant.from_json(self.request("POST", f"/v1/regions/{check_name(region)}/grants", body), self)

    def commit(self, grant: Grant | str, nbytes: int, *, version: int | None = None,
               manifest: Manifest | None = None) -> Update:
        """Say every byte written through GRANT (a write grant of this agent) landed: its region gets a new
        version, written by the grant's writer, with MANIFEST when given (checked against the region first).
        NBYTES is how far the write reached in the grant. Returns the region's update.

            b.commit(grant, grant.length, version=step)   # after every batch of this step landed

        A plain write grant (a scatter batch's, kept for many calls) commits each time it is asked; one that
        took landing reports commits what they reported, once. VERSION: the version the region must reach
        by this commit, refused with :class:`Conflict` naming the version it is at unless it is at
        VERSION - 1, nothing changed: an orchestrator moving several regions to step K together commits each
        with ``version=K`` only once every region has every byte (docs/tensors.md, "Versions"), and a
        retried commit is refused rather than counted twice. A read grant never commits (Conflict)."""
        grant_id = grant.id if isinstance(grant, Grant) else grant
        body: dict[str, Any] = {"bytes": int(nbytes)}
        if version is not None:
            body["version"] = int(version)
        if manifest is not None:
            body["manifest"] = manifest.to_json()
        j = self.request("POST", f"/v1/grants/{check_id(grant_id, 'grant id')}/commit", body, timeout=600)
        return Update.from_json(j.get("region") or {})

    def grants(self) -> list[Grant]:
        return [Grant.from_json(j, self) for j in self.request("GET", "/v1/grants").get("items", [])]

    def revoke(self, grant_id: str) -> None:
        """DELETE /v1/grants/{id}: the key stops working at once."""
        self.request("DELETE", f"/v1/grants/{check_id(grant_id, 'grant id')}")

    # ---- transfers
    def transfer(self, source_region: str, targets: Iterable[Target], *, verify: str | bool | None = None,
                 chunk_bytes: int | None = None, window: int | None = None, strategy: str = "Fanout",
                 deadline_seconds: int | None = None, max_bytes_per_second: int | None = None,
                 offset: int = 0, length: int = 0, writer: str | None = None,
                 grant_ttl_seconds: int = 600, provider: str | None = None,
                 tensors: Sequence[str] | None = None) -> Transfer:
        """Write [OFFSET, +LENGTH) of SOURCE_REGION (LENGTH 0: to its end) into each target's region, from
        its offset 0.

        For each target a write grant over the range is taken on the target's agent (WRITER, default
        ``"<this node>/<source_region>"``, names the writer there); then this agent is asked to run the
        transfer. ``strategy`` and ``verify`` are spelled as a TransferJob's: ``"PointToPoint"`` (one target),
        ``"Fanout"`` (every target at once) or ``"Chain"`` (each forwards to the next); ``verify="crc32c"``
        or ``"none"`` (the old ``"fanout"``/``"chain"`` and ``True``/``False`` still work, with a
        DeprecationWarning). ``provider`` picks the targets' transport (``"tcp"``, ``"shm"``, ``"efa"``, ...;
        default: each target agent's first). Returns a
        :class:`~conduit.transfers.Transfer`: ``wait()`` it (or use it as a context manager). The agents
        revoke the grants the moment it ends (``releaseGrant``), whether anyone waits for it or not, so the
        target regions can be deleted at once. When a grant or the start is refused, the grants already taken
        are revoked and the agent's error is raised: nothing is left behind.

        TENSORS (names or fnmatch globs of the source's manifest, docs/tensors.md "Subsets") moves only those
        tensors, as one scatter batch, into the same tensors of the one target region, whose manifest must
        hold each with the same dtype and shape: :class:`TensorMismatch` naming the tensor otherwise, before
        any byte moves. Verified like any transfer by default: once every tensor landed, one CRC32C of the
        moved bytes is compared at both ends (``verify="none"`` skips it); a mismatch fails the transfer
        (:class:`TransferFailed`, reason ``ChecksumMismatch``) and nothing is re-sent."""
        targets = list(targets)
        if not targets:
            raise InvalidArgument("a transfer needs at least one target", "InvalidArgument")
        if tensors is not None:
            return self._transfer_tensors(source_region, targets, list(tensors), verify, writer, grant_ttl_seconds,
                                          provider, window, offset, length, max_bytes_per_second)
        if verify is None:
            verify = "crc32c"
        wire_strategy = _strategy(strategy, len(targets))
        wire_verify = _verify(verify)
        check_name(source_region)
        if length == 0:
            # The grants need the length; asking first also says NotFound before any grant is taken.
            length = self.region(source_region).bytes - offset
            if length <= 0:
                raise InvalidArgument(f"offset {offset} is at or past the end of region {source_region}",
                                      "InvalidArgument")
        if writer is None:
            writer = f"{self.node_name or self.url}/{source_region}"
        grants: list[tuple[Agent, Grant]] = []
        try:
            for t in targets:
                g = t.agent.grant(t.region, "write", 0, length, grant_ttl_seconds, writer, provider)
                grants.append((t.agent, g))
            body: dict[str, Any] = {
                "source": {"region": source_region, "offset": offset, "length": length},
                "targets": [{"grant": g.key, "url": t.url or t.agent.url, "region": t.region, "grantId": g.id,
                             "releaseGrant": True}
                            for t, (_, g) in zip(targets, grants, strict=True)],
                "strategy": wire_strategy,
                "verify": wire_verify,
            }
            for key, value in (("chunkBytes", chunk_bytes), ("window", window),
                               ("deadlineSeconds", deadline_seconds), ("maxBytesPerSecond", max_bytes_per_second)):
                if value is not None:
                    body[key] = value
            status = self.request("POST", "/v1/transfers", body)
        except BaseException:
            for agent, g in grants:
                agent._revoke_quietly(g.id)
            raise
        return Transfer(self, str(status["id"]), grants)

    def scatter(self, source_region: str, grant: Grant, source_offsets: Any, target_offsets: Any,
                lengths: Any, *, op: str = "write", window: int | None = None,
                timeout: float | None = 30.0, release_grant: bool = False,
                target_url: str | None = None, verify: str = "none") -> TransferStatus:
        """Many ranges between SOURCE_REGION and GRANT's range in one request, one batch on the wire
        (docs/kv-cache.md): op i moves LENGTHS[i] bytes between SOURCE_OFFSETS[i] of the region and
        TARGET_OFFSETS[i] of the grant (``op="write"``: region -> grant; ``"read"``: grant -> region).

        Offsets and lengths are sequences or numpy arrays of non-negative integers, one per op (a single
        length is every op's); they go as ``opsPacked``, so a block table held in arrays is sent as it is.
        GRANT is a grant of the target's agent (``b.grant("kv", "write", ttl_seconds=86400)``, kept for many
        calls: nothing is registered per call). A grant made for this one call: RELEASE_GRANT, and the agents
        revoke it when the transfer ends, however it ends (TARGET_URL: how this agent reaches the grant's,
        when not at ``grant.agent.url``). ``verify="crc32c"``: once every op landed, one CRC32C of the ops'
        bytes in op order is compared at both ends (the grant's agent is asked for its sum: a round trip and
        a pass over the bytes on each side), ``status.verified`` then True; a mismatch raises
        :class:`TransferFailed` (reason ``ChecksumMismatch``, both sums named) and nothing is re-sent: retry
        the call. ``"none"`` (the default) costs neither. Returns the final status once it Succeeded; raises
        :class:`InvalidArgument` naming the op when the agent refuses the list (outside the region or the
        grant, two ops writing the same bytes), :class:`TransferFailed` when it failed, ``TimeoutError``
        after TIMEOUT s."""
        try:
            check_name(source_region)
            packed = _pack_ops(source_offsets, target_offsets, lengths)
            wire_verify = _verify(verify)
            target: dict[str, Any] = {"grant": grant.key}
            if release_grant or wire_verify != "none":
                url = target_url or (grant.agent.url if grant.agent is not None else "")
                if not url:
                    raise InvalidArgument("scatter: release_grant and verify need the grant's agent (a grant from "
                                          "Agent.grant, or target_url)", "InvalidArgument")
                target.update(url=url, grantId=grant.id)
                if release_grant:
                    target["releaseGrant"] = True
            body: dict[str, Any] = {"source": {"region": source_region}, "targets": [target], "op": op,
                                    "opsPacked": base64.b64encode(packed).decode("ascii")}
            if wire_verify != "none":
                body["verify"] = wire_verify
            if window is not None:
                body["window"] = window
            wait_s = 30 if timeout is None else max(0, min(30, math.floor(timeout)))
            j = self.request("POST", "/v1/transfers", body, params={"waitSeconds": wait_s}, timeout=wait_s + 30)
            s = TransferStatus.from_json(j)
            if s.ended and s.state == "Succeeded":
                return s
            # Failed at once, or still running after WAIT_S: the transfer's own wait raises or waits the rest.
            return Transfer(self, s.id).wait(timeout=None if timeout is None else max(0.0, timeout - wait_s))
        except TimeoutError:
            raise  # still running: the agents release the grant when it ends
        except BaseException:
            if release_grant and grant.agent is not None:
                grant.agent._revoke_quietly(grant.id)  # refused, or failed: ended, and nothing is left
            raise

    def pull(self, region: str, source_url: str, source_region: str, grant_key: Any, *, offset: int = 0,
             source_offset: int = 0, length: int = 0, verify: str = "crc32c", chunk_bytes: int | None = None,
             window: int | None = None, deadline_seconds: int | None = None) -> Transfer:
        """Read LENGTH bytes of SOURCE_REGION on the agent at SOURCE_URL, from SOURCE_OFFSET (where the grant's
        range starts), into REGION of this agent from OFFSET: this agent runs the transfer (``op: read``, as
        ``conduit transfer --pull``) through a read grant the source's owner made (GRANT_KEY: its
        ``Grant.key``, handed over by whoever owns it). LENGTH 0: to the end of REGION past OFFSET.
        ``verify="crc32c"`` checks every slice against the source agent's checksum of it. The grant stays the
        owner's to revoke: revoking it fails a pull in flight and refuses the next. Returns a
        :class:`~conduit.transfers.Transfer`: ``wait()`` it.

            b.pull("ckpt", a.url, "ckpt", grant.key).wait(timeout=60)
        """
        check_name(region)
        check_name(source_region)
        wire_verify = _verify(verify)
        if length == 0:
            length = self.region(region).bytes - offset
            if length <= 0:
                raise InvalidArgument(f"offset {offset} is at or past the end of region {region}", "InvalidArgument")
        body: dict[str, Any] = {
            "source": {"region": region, "offset": offset, "length": length},
            "targets": [{"grant": dict(grant_key), "url": source_url, "region": source_region,
                         "regionOffset": source_offset}],
            "op": "read",
            "verify": wire_verify,
        }
        for key, value in (("chunkBytes", chunk_bytes), ("window", window), ("deadlineSeconds", deadline_seconds)):
            if value is not None:
                body[key] = value
        status = self.request("POST", "/v1/transfers", body)
        return Transfer(self, str(status["id"]))

    def _transfer_tensors(self, source_region: str, targets: list[Target], tensors: list[str],
                          verify: str | bool | None, writer: str | None, grant_ttl_seconds: int,
                          provider: str | None, window: int | None, offset: int, length: int,
                          max_bytes_per_second: int | None) -> Transfer:
        # One scatter batch (docs/kv-cache.md) has an op list's rules: one target, its own ranges, verified
        # once it landed (not as it lands), not paced. Said here, in the caller's words, rather than by the agent.
        if len(targets) != 1:
            raise InvalidArgument("tensors= moves one scatter batch to one target: call transfer once per target",
                                  "InvalidArgument")
        wire_verify = "crc32c" if verify is None else _verify(verify)
        if offset or length or max_bytes_per_second:
            raise InvalidArgument("tensors= takes the tensors' own ranges, unpaced: leave out offset, length "
                                  "and max_bytes_per_second", "InvalidArgument")
        check_name(source_region)
        t = targets[0]
        # Both manifests first: every mismatch is raised before a grant is taken or a byte moves.
        source = self.manifest(source_region)
        try:
            ops = plan_subset(source, t.agent.manifest(t.region), tensors)
        except ValueError as e:
            raise TensorMismatch(f"target region {t.region} on {t.agent.url}: {e}", "TensorMismatch") from None
        reach = max(target + n for _, target, n in ops)
        g = t.agent.grant(t.region, "write", 0, reach, grant_ttl_seconds,
                          writer or f"{self.node_name or self.url}/{source_region}", provider)
        try:
            packed = _pack_ops([s for s, _, _ in ops], [d for _, d, _ in ops], [n for _, _, n in ops])
            body: dict[str, Any] = {
                "source": {"region": source_region},
                "targets": [{"grant": g.key, "url": t.url or t.agent.url, "grantId": g.id, "releaseGrant": True}],
                "opsPacked": base64.b64encode(packed).decode("ascii"),
                "verify": wire_verify,
            }
            if window is not None:
                body["window"] = window
            status = self.request("POST", "/v1/transfers", body)
        except BaseException:
            t.agent._revoke_quietly(g.id)
            raise
        return Transfer(self, str(status["id"]), [(t.agent, g)])

    def _revoke_quietly(self, grant_id: str) -> None:
        # Cleanup on a path that already raises or has ended: a grant gone already (expired, revoked, agent
        # restarted) or an agent that does not answer must not hide what happened.
        try:
            self.revoke(grant_id)
        except Exception:  # noqa: BLE001 -- the grant expires by itself (ttl) in the worst case
            pass

    def transfers(self) -> list[dict[str, Any]]:
        """GET /v1/transfers: recent transfers, newest first."""
        return list(self.request("GET", "/v1/transfers").get("items", []))

    # ---- reshard plans
    def plan_reshard(self, sources: Sequence[Manifest], targets: Sequence[Manifest],
                     rates: tuple[Sequence[float | None], Sequence[float | None]] | None = None) -> ReshardPlan:
        """POST /v1/reshard/plans (docs/reshard.md): the scatter batches that fill every tensor of TARGETS (the
        target ranks' manifests, each tensor's placement in the whole) from SOURCES (the source ranks'), per
        (source, target) pair, as this agent plans them; the same manifests again come from its cache
        (``cached``). RATES: (source rates, target rates) in bytes per second, one per rank, None or 0 for
        unknown; they choose among replicas and give ``lower_bound_seconds``. InvalidArgument naming the
        tensor for a mismatch or a piece no source holds; Unprocessable past the agent's bounds.

            plan = agent.plan_reshard([m0, m1, m2, m3], [t0, t1], rates=([12.5e9] * 4, [25e9] * 2))
        """
        source_rates, target_rates = rates if rates is not None else ((), ())
        for name, ranks, given in (("sources", sources, source_rates), ("targets", targets, target_rates)):
            if given and len(given) != len(ranks):
                raise ValueError(f"rates: {len(given)} {name} rates for {len(ranks)} {name}")

        def side(ranks: Sequence[Manifest], given: Sequence[float | None]) -> list[dict[str, Any]]:
            out: list[dict[str, Any]] = []
            for i, m in enumerate(ranks):
                entry: dict[str, Any] = {"manifest": m.to_json()}
                if given and given[i]:
                    entry["rate"] = given[i]
                out.append(entry)
            return out

        body = {"sources": side(sources, source_rates), "targets": side(targets, target_rates)}
        return ReshardPlan.from_json(self.request("POST", "/v1/reshard/plans", body))

    # ---- buffers, versions (in their own modules)
    def allocate(self, name: str, nbytes: int, *, prefault: bool = False,
                 manifest: Manifest | None = None) -> SharedBuffer:
        """NBYTES of shared memory of this process, imported by the agent as region NAME without a copy
        (:mod:`conduit.buffers`). ``prefault``: touch every page now, so the first transfer into it does not
        pay the page faults (the first step into fresh buffers ran 3x slower for them). ``manifest``: the
        region's named tensors from the start (the agent checks it against NBYTES)."""
        return buffers.allocate(self, name, nbytes, prefault=prefault, manifest=manifest)

    def open_shared(self, name: str, writable: bool = False) -> SharedBuffer:
        """Region NAME that the agent holds in shared memory (``create_region(..., shareable=True)``, or
        another process's :meth:`allocate`) mapped here without a copy, read-only unless WRITABLE
        (:func:`conduit.buffers.open_shared`). Closing it leaves the region::

            with agent.open_shared("weights") as buf:
                w = buf.numpy(np.float32)      # read-only view of the bytes the agent holds
        """
        return buffers.open_shared(self, check_name(name), writable=writable)

    def share_cuda(self, name: str, tensor: Any) -> Region:
        """Hand the agent GPU memory of this process (any object with ``__cuda_array_interface__``) as
        region NAME through a CUDA IPC handle (:mod:`conduit.cuda`)."""
        return cuda.share_cuda(self, name, tensor)

    def wait_region(self, name: str, timeout: float = 60.0) -> Region:
        """Region NAME once it exists on this agent (a receiver meeting the region a publisher makes): the agent
        holds each ask until the region is made (``GET /v1/regions/{name}?timeoutSeconds=``, at most 30 s an
        ask), so it answers as soon as it is; TimeoutError naming the region after TIMEOUT s. Other errors
        (Forbidden, an agent that does not answer) are raised at once."""
        check_name(name)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            # Whole seconds (the agent's unit), rounded up; 0 once the time is up: one last look.
            wait_s = 0 if left <= 0 else max(1, min(versions.LONG_POLL_S, math.ceil(left)))
            pause = 0.0
            try:
                return Region.from_json(self.request("GET", f"/v1/regions/{name}",
                                                     params={"timeoutSeconds": wait_s},
                                                     timeout=wait_s + versions.LONG_POLL_SLACK_S))
            except NotFound:
                pass
            except TooManyRequests as e:
                pause = (e.retry_after or 1.0) * random.uniform(0.5, 1.0)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"region {name} did not appear on {self.url} within {timeout:g} s") from None
            if pause > 0:
                time.sleep(min(pause, left))

    def wait_version(self, region: str, after: int = 0, timeout: float | None = None) -> Update:
        """The region's version once it is past AFTER (:mod:`conduit.versions`); TimeoutError after TIMEOUT s."""
        return versions.wait_version(self, region, after, timeout)

    def version(self, region: str) -> Update:
        """The region's current version, at once."""
        return versions.current_version(self, region)

    # ---- acknowledgements (conduit.acks)
    def ack(self, region: str, version: int, reader: str | None = None) -> Acks:
        """Says READER (default ``"<hostname>/<pid>"``) applied VERSION of REGION; Conflict when the region
        has not reached it."""
        return acks_api.ack(self, region, version, reader)

    def acks(self, region: str, version: int = 0) -> Acks:
        """REGION's acks now: each reader's latest version (``.applied()``: those at VERSION or later)."""
        return acks_api.acks(self, region, version)

    def wait_acks(self, region: str, version: int, readers: int, timeout: float | None = None) -> list[Ack]:
        """The readers that acked VERSION of REGION (or later) once at least READERS did; TimeoutError naming
        who acked and how many are missing after TIMEOUT s."""
        return acks_api.wait_acks(self, region, version, readers, timeout)
