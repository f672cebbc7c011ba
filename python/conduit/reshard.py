"""A model moved from one sharded layout to another (docs/reshard.md): trainer ranks holding their shards as
regions with placed manifests, inference ranks holding theirs, and every target byte taken from a source that
holds it, over one-sided writes, verified, with one version for the whole target group.

    trainers = [(agent_a, "policy-r0"), (agent_b, "policy-r1"), ...]    # each region's manifest is placed
    engines = [(agent_c, "policy"), (agent_d, "policy")]
    with Resharder(trainers, engines) as r:
        for step in ...:
            train()
            r.run()                                   # every engine's region at version K, or none of them

What a step does:

1. Reads every region's manifest and has an agent plan it (``POST /v1/reshard/plans``: the one planner the
   controller uses too, cached there by the manifests' fingerprint, so a step with the same layouts plans
   nothing). A refusal (a dtype or global shape that differs, a target byte no source holds) raises
   :class:`~conduit.errors.TensorMismatch` naming the tensor and range, before a byte moves.
2. Checks the target regions are at one version K-1 (``Conflict`` naming them otherwise).
3. Runs every batch (one scatter transfer per (source rank, target rank) pair, into one write grant per target
   region kept for the Resharder's life) at once, each verified (crc32c of the ranges on both sides); a batch
   that fails is run again alone, RETRIES times.
4. Only when every batch of every target succeeded, commits each target region to version K (the commit
   route's ``version``): readers waiting for K (``wait_version``) never see a step half landed. A step that
   fails commits nothing: every target stays at K-1, and ``run()`` again sends only the batches that did not
   succeed (while the plan is the same).

Readers that read the target region while a step lands see bytes of both steps: apply after the version,
as with any in-place write (docs/tensors.md), or land in a DoubleBuffer's back half.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .errors import Conflict, ConduitError, InvalidArgument, TensorMismatch, TransferFailed, Unavailable
from .reshard_plan import MAX_SCATTER_RUNS, ReshardBatch, pack_ops
from .transfers import Transfer

if TYPE_CHECKING:
    from .agent import Agent
    from .manifest import Manifest
    from .reshard_plan import ReshardPlan
    from .values import Grant

__all__ = ["BatchResult", "Resharder", "ReshardFailed", "ReshardResult", "reshard"]

Endpoint = tuple["Agent", str]  # an agent and the name of a region on it


class ReshardFailed(TransferFailed):
    """A step did not land: some batches failed after their retries. No target region moved to the new
    version. ``failed`` lists (source rank, target rank, reason)."""

    def __init__(self, message: str, failed: list[tuple[int, int, str]]) -> None:
        super().__init__(message, "ReshardFailed")
        self.failed = failed


@dataclass(frozen=True)
class BatchResult:
    """One batch of a step: the ranks (indices into sources and targets), what it moved, how long its last
    attempt took, and how many attempts it needed (in the run() that landed it: a step resumed after a failure
    keeps the batches that landed before, as they were)."""

    source: int
    target: int
    bytes: int
    ops: int
    seconds: float
    attempts: int


@dataclass(frozen=True)
class ReshardResult:
    """A step that landed: the version every target region is at now, the step's wall time, the plan it ran."""

    version: int
    seconds: float
    plan: ReshardPlan
    batches: list[BatchResult]

    @property
    def against_lower_bound(self) -> float | None:
        """The step's time over the plan's lower bound (its busiest link's bytes over that link's rate),
        None where no rate was given."""
        lb = self.plan.lower_bound_seconds
        return self.seconds / lb if lb else None


#: What one POST /v1/transfers carries of a batch: ``opsPacked`` of at most this many bytes before base64
#: (640 KB after), inside the agents' default 1 MiB body (``--max-body-bytes``): 20,000 plain ops (24 bytes
#: each) or 10,000 strided ones (48), and never more than MAX_SCATTER_RUNS runs. A planned batch with more is
#: posted in parts, each verified.
PACKED_BYTES_PER_POST = 480_000


def _parts(b: ReshardBatch) -> list[str]:
    if len(b.ops_packed) * 3 // 4 <= PACKED_BYTES_PER_POST + 8 and b.runs <= MAX_SCATTER_RUNS:
        return [b.ops_packed]  # as planned (the 8: v2's header)
    ops = b.ops_array()
    per_op = 24 if bool((ops[:, 3] == 1).all()) else 48
    limit = PACKED_BYTES_PER_POST // per_op
    parts, start, runs = [], 0, 0
    for i, count in enumerate(ops[:, 3].tolist()):
        if i > start and (i - start == limit or runs + count > MAX_SCATTER_RUNS):
            parts.append(pack_ops(ops[start:i]))
            start, runs = i, 0
        runs += count
    parts.append(pack_ops(ops[start:]))
    return parts


def _endpoints(what: str, given: Iterable[Endpoint]) -> list[Endpoint]:
    out = list(given)
    if not out:
        raise InvalidArgument(f"reshard needs at least one {what} (an agent and a region on it)", "InvalidArgument")
    seen: set[tuple[str, str]] = set()
    for agent, region in out:
        key = (agent.url, region)
        if key in seen:
            raise InvalidArgument(f"{what} region {region} on {agent.url} is given twice", "InvalidArgument")
        seen.add(key)
    return out


class Resharder:
    """Moves SOURCES' shards into TARGETS' layout, step after step (see the module's docstring). SOURCES and
    TARGETS are (agent, region) pairs whose regions hold manifests with placements (a tensor without one is
    the whole tensor: a replica). PLANNER: the agent that plans (default: the first source's). RATES: each
    rank's link rate in bytes/s, ``(source rates, target rates)`` (None: unknown), as ``Agent.plan_reshard``
    takes them: they choose among replicas and give the plan's lower bound.
    WRITER names the writer in the targets' ``updatedBy``. WINDOW: the RMA operations each batch keeps in
    flight (the agent's default, 16, when None). ``close()`` revokes the grants."""

    def __init__(self, sources: Iterable[Endpoint], targets: Iterable[Endpoint], *, planner: Agent | None = None,
                 rates: tuple[Sequence[float | None], Sequence[float | None]] | None = None,
                 verify: str = "crc32c", retries: int = 1,
                 writer: str = "reshard", grant_ttl_seconds: int = 86400, window: int | None = None) -> None:
        if verify not in ("crc32c", "none"):
            raise InvalidArgument(f"verify must be \"crc32c\" or \"none\", not {verify!r}", "InvalidArgument")
        if retries < 0:
            raise InvalidArgument("retries must be 0 or more", "InvalidArgument")
        self.sources = _endpoints("source", sources)
        self.targets = _endpoints("target", targets)
        self.planner = planner or self.sources[0][0]
        self.rates = rates
        self.verify = verify
        self.retries = retries
        self.writer = writer
        self.grant_ttl_seconds = grant_ttl_seconds
        self.window = window
        self._grants: dict[int, Grant] = {}
        # The step under way: the version it lands as, its plan's fingerprint, and the batches done.
        self._pending: tuple[int, str] | None = None
        self._done: dict[int, BatchResult] = {}
        self._landed = False  # every batch of the pending step landed; its commits may not all have
        self._manifests: dict[tuple[str, int], Manifest] = {}  # each rank's manifest as last read

    def __repr__(self) -> str:
        return f"Resharder({len(self.sources)} sources -> {len(self.targets)} targets)"

    def _manifest(self, side: str, i: int, endpoint: Endpoint) -> Manifest:
        agent, region = endpoint
        try:
            m = agent.manifest(region)
        except (Unavailable, OSError):
            # A source agent gone mid-run: its manifest as last read keeps the plan (and the batches that
            # landed) the same, and its own batches fail to start, which run() reports; never a target's.
            if side == "source" and (side, i) in self._manifests:
                return self._manifests[(side, i)]
            raise
        self._manifests[(side, i)] = m
        return m

    def plan(self) -> ReshardPlan:
        """The plan for the regions' manifests as they are now (cached by the planning agent)."""
        sources = [self._manifest("source", i, e) for i, e in enumerate(self.sources)]
        targets = [self._manifest("target", i, e) for i, e in enumerate(self.targets)]
        try:
            return self.planner.plan_reshard(sources, targets, rates=self.rates)
        except InvalidArgument as e:
            raise TensorMismatch(str(e.args[0] if e.args else e), "TensorMismatch") from None

    def _version(self) -> int:
        versions = [agent.version(region).version for agent, region in self.targets]
        if len(set(versions)) != 1:
            shown = ", ".join(f"{region} on {agent.url}: {v}" for (agent, region), v in
                              zip(self.targets, versions, strict=True))
            raise Conflict(f"the target regions are at different versions ({shown}): a reshard moves them "
                           "together from one version; make them again or commit the stragglers", "Conflict")
        return versions[0]

    def _grant(self, t: int) -> Grant:
        if t not in self._grants:
            agent, region = self.targets[t]
            self._grants[t] = agent.grant(region, "write", 0, 0, self.grant_ttl_seconds, self.writer)
        return self._grants[t]

    def _start(self, plan: ReshardPlan, i: int) -> list[Transfer]:
        b = plan.batches[i]
        agent, region = self.sources[b.source]
        target_agent, _ = self.targets[b.target]
        g = self._grant(b.target)
        started = []
        for packed in _parts(b):
            body: dict[str, Any] = {
                "source": {"region": region},
                "targets": [{"grant": g.key, "url": target_agent.url, "grantId": g.id}],
                "opsPacked": packed,
                "verify": self.verify,
            }
            if self.window is not None:
                body["window"] = self.window
            status = agent.request("POST", "/v1/transfers", body)
            started.append(Transfer(agent, str(status["id"])))
        return started

    def run(self, timeout: float = 300.0) -> ReshardResult:
        """One step (see the module's docstring): returns once every target region is at the new version;
        raises :class:`ReshardFailed` (nothing committed), ``TensorMismatch`` or ``Conflict`` (nothing moved)."""
        t0 = time.monotonic()
        deadline = t0 + timeout
        plan = self.plan()
        if self._pending is not None and self._landed and self._pending[1] == plan.fingerprint:
            return self._commit(plan, t0)  # landed last time, some commits did not answer: finish them
        version = self._version() + 1
        if self._pending != (version, plan.fingerprint):
            self._pending, self._done, self._landed = (version, plan.fingerprint), {}, False
        left = [i for i in range(len(plan.batches)) if i not in self._done]
        attempts = dict.fromkeys(left, 0)
        failed: dict[int, str] = {}
        for _ in range(self.retries + 1):
            running: dict[int, tuple[list[Transfer], float]] = {}
            for i in left:
                attempts[i] += 1
                try:
                    running[i] = (self._start(plan, i), time.monotonic())
                except ConduitError as e:
                    failed[i] = str(e)
                except OSError as e:  # the source agent does not answer
                    failed[i] = f"source agent unreachable: {e}"
            for i, (transfers, started) in running.items():
                try:
                    for transfer in transfers:
                        transfer.wait(timeout=max(0.0, deadline - time.monotonic()))
                except (ConduitError, OSError) as e:
                    failed[i] = str(e)
                    continue
                b = plan.batches[i]
                self._done[i] = BatchResult(b.source, b.target, b.bytes, b.ops, time.monotonic() - started,
                                            attempts[i])
                failed.pop(i, None)
            left = [i for i in left if i not in self._done]
            if not left or time.monotonic() >= deadline:
                break
        if left:
            bad = [(plan.batches[i].source, plan.batches[i].target, failed.get(i, "timed out")) for i in left]
            shown = "; ".join(f"source {s} -> target {t}: {why}" for s, t, why in bad[:5])
            raise ReshardFailed(f"{len(left)} of {len(plan.batches)} batches did not land ({shown}); no target "
                                f"moved to version {version}: run() again sends only those", bad)
        self._landed = True
        return self._commit(plan, t0)

    def _commit(self, plan: ReshardPlan, t0: float) -> ReshardResult:
        # Every byte of every target landed: now, and only now, each target moves to the new version. A
        # target already there (a commit of an earlier run() that answered late) is left as it is.
        assert self._pending is not None
        version = self._pending[0]
        for t, (agent, region) in enumerate(self.targets):
            if agent.version(region).version == version:
                continue
            agent.commit(self._grant(t), plan.target_bytes[t], version=version)
        done = [self._done[i] for i in range(len(plan.batches))]
        self._pending, self._done, self._landed = None, {}, False
        return ReshardResult(version, time.monotonic() - t0, plan, done)

    def close(self) -> None:
        """Revoke the targets' grants (the regions stay)."""
        for t, g in self._grants.items():
            self.targets[t][0]._revoke_quietly(g.id)
        self._grants.clear()

    def __enter__(self) -> Resharder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reshard(sources: Iterable[Endpoint], targets: Iterable[Endpoint], *, timeout: float = 300.0,
            **kwargs: Any) -> ReshardResult:
    """One step of a :class:`Resharder` (its grants revoked after)."""
    with Resharder(sources, targets, **kwargs) as r:
        return r.run(timeout=timeout)
