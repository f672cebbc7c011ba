"""Region versions: knowing when new bytes have landed, and a double buffer built on them.

Every region has a version: 0 when made, one more each time a transfer that wrote it through a grant (with a
``grantId``) has landed and verified every byte, with who wrote (the grant's ``writer``) and when. A failed
or cancelled transfer leaves it as it was. The agent long-polls it:
``GET /v1/regions/{name}/version?after=K&timeoutSeconds=T`` answers at once when the version is past K, else
when it gets past K or after T seconds (T <= 60) with the current one.

    upd = agent.wait_version("weights", after=seen, timeout=120)   # blocks until a newer write landed
    seen = upd.version
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from . import acks
from .errors import ConduitError, NotFound, TooManyRequests
from .values import Target, check_name, parse_time

if TYPE_CHECKING:
    from .agent import Agent
    from .buffers import SharedBuffer

#: Each long poll asks the agent to hold the request at most this long (it allows up to 60 s); a client-side
#: timeout ends the wait between polls.
LONG_POLL_S = 30
#: Added to the HTTP timeout of a long poll: the agent answers after timeoutSeconds, plus its own latency.
_SLACK_S = 15.0
#: The same slack, for the SDK's other long polls (Agent.wait_region).
LONG_POLL_SLACK_S = _SLACK_S


@dataclass(frozen=True)
class Update:
    """A region's version: who wrote it last and when (``updated_at`` None while the version is 0)."""

    region: str
    version: int
    updated_by: str
    updated_at: datetime | None

    @classmethod
    def from_json(cls, j: dict[str, Any]) -> Update:
        return cls(region=str(j.get("region", "")), version=int(j.get("version") or 0),
                   updated_by=str(j.get("updatedBy") or ""), updated_at=parse_time(j.get("updatedAt")))


def _poll(agent: Agent, region: str, after: int, wait_s: int) -> Update:
    try:
        j = agent.request("GET", f"/v1/regions/{check_name(region)}/version",
                          params={"after": after, "timeoutSeconds": wait_s}, timeout=wait_s + _SLACK_S)
    except NotFound as e:
        if e.reason == "RouteNotFound":
            raise NotFound(f"{agent.url} has no region versions (GET /v1/regions/{{name}}/version): an agent "
                           f"older than this SDK ({e.message})", e.reason, e.status, agent.url) from e
        raise
    return Update.from_json(j)


def current_version(agent: Agent, region: str) -> Update:
    """REGION's version now, without waiting."""
    return _poll(agent, region, 0, 0)


def wait_version(agent: Agent, region: str, after: int = 0, timeout: float | None = None) -> Update:
    """REGION's version once it is past AFTER: at once when it already is (a waiter that starts after the
    write still sees it), else when a write lands. Long polls of at most LONG_POLL_S each (an agent that holds
    too many already answers 429: asked again after its Retry-After); TimeoutError after TIMEOUT s, rounded up
    to whole seconds (None: wait as long as it takes). NotFound when the region does not exist (or is deleted)."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        # Whole seconds (the agent's unit), rounded up: a wait may outlast TIMEOUT by under a second, but
        # never turns into a loop of short polls that costs CPU while nothing lands.
        wait_s = LONG_POLL_S if left is None else max(1, min(LONG_POLL_S, math.ceil(left)))
        try:
            u = _poll(agent, region, after, wait_s)
        except TooManyRequests as e:
            # The agent holds as many waits as it allows: come back when it says (jittered, so the waiters
            # turned away together do not return together).
            now, pause = "busy (429)", (e.retry_after or 1.0) * random.uniform(0.5, 1.0)
        else:
            if u.version > after:
                return u
            now = f"still at version {u.version}"
            pause = 0.0
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"region {region} on {agent.url} {now} (waiting for more than {after}) after "
                                   f"{timeout:g} s")
            pause = min(pause, left)
        if pause > 0:
            time.sleep(pause)


@dataclass(frozen=True)
class Slot:
    """One half of a :class:`DoubleBuffer`: its region, index (0 or 1), its place in the writer's sequence
    (0: never written; 1, 2, 3, ... in the order the writes landed) and its version."""

    region: str
    index: int
    sequence: int
    update: Update


class DoubleBuffer:
    """Two regions ``<name>-0`` and ``<name>-1`` on the receiving AGENT, so that a reader always has one whole
    version to read while a writer fills the other.

    The protocol (one writer, one write at a time; any number of readers; nothing but versions shared):

    - Both regions start fresh (version 0). The writer writes to ``next_target()``: ``<name>-0`` first, then
      always the half that is *not* the newest. A write counts when it landed whole (the region's version went
      up); a failed write leaves the version alone, and the writer writes the same half again. So the halves
      alternate and their versions tell the order of the writes: the k-th write of half i is write number
      ``2k - 1 + i`` (its ``sequence``). A version pair that does not fit (another writer was there) raises.
    - A reader waits for a write newer than the one it has (``wait(after=seen)``), reads the newest half
      (``latest()``), and then asks ``still_valid(slot)``: true when the other half has not landed a newer
      write since, so the writer cannot have started overwriting the half just read (it only moves on to it
      after that write). When false, the read may be torn: read ``latest()`` again.

    Versions only change when a transfer lands, so a reader never sees a half that is being written as the
    newest. With several receiving agents written by the same jobs (a Chain), each has its own DoubleBuffer;
    their halves move in lockstep."""

    def __init__(self, agent: Agent, name: str) -> None:
        self.agent = agent
        self.name = name
        self.regions = (check_name(f"{name}-0"), check_name(f"{name}-1"))

    def __repr__(self) -> str:
        return f"DoubleBuffer({self.name!r} on {self.agent.url})"

    # ---- the regions
    def create(self, nbytes: int, memory: str = "host") -> None:
        """Both halves as agent-owned regions of NBYTES each."""
        self.agent.create_region(self.regions[0], nbytes, memory)
        try:
            self.agent.create_region(self.regions[1], nbytes, memory)
        except BaseException:
            self.agent.delete_region(self.regions[0])
            raise

    def allocate(self, nbytes: int) -> tuple[SharedBuffer, SharedBuffer]:
        """Both halves as shared buffers of this process (a reader on the agent's machine reads what lands
        through their numpy views, without a copy)."""
        first = self.agent.allocate(self.regions[0], nbytes)
        try:
            return first, self.agent.allocate(self.regions[1], nbytes)
        except BaseException:
            first.close()
            raise

    def delete(self) -> None:
        """Delete both regions (those that exist)."""
        for r in self.regions:
            try:
                self.agent.delete_region(r)
            except NotFound:
                pass

    # ---- the protocol
    def slots(self) -> tuple[Slot, Slot]:
        """Both halves as they are now, in region order."""
        u0, u1 = (current_version(self.agent, r) for r in self.regions)
        # Alternating from half 0: v0 == v1 (half 1 wrote last, or nothing yet) or v0 == v1 + 1.
        if u0.version not in (u1.version, u1.version + 1):
            raise ConduitError(f"{self.regions[0]} at version {u0.version} and {self.regions[1]} at "
                               f"{u1.version} on {self.agent.url} do not follow the double-buffer protocol "
                               "(writes alternating from -0): another writer, or regions not fresh",
                               "Conflict")
        return (Slot(self.regions[0], 0, 2 * u0.version - 1 if u0.version else 0, u0),
                Slot(self.regions[1], 1, 2 * u1.version if u1.version else 0, u1))

    def latest(self) -> Slot | None:
        """The half holding the newest whole write; None before the first one landed."""
        newest = max(self.slots(), key=lambda s: s.sequence)
        return newest if newest.sequence > 0 else None

    def next_target(self, agent: Agent | None = None) -> Target:
        """Where the writer writes next: the half that is not the newest (``<name>-0`` at first). AGENT
        overrides the Target's agent (the same regions on another agent written by the same job)."""
        newest = self.latest()
        index = 0 if newest is None else 1 - newest.index
        return Target(agent or self.agent, self.regions[index])

    def wait(self, after: int = 0, timeout: float | None = None) -> Slot:
        """The newest half once a write with a sequence past AFTER has landed (at once when one has);
        TimeoutError after TIMEOUT s."""
        # Write number after + 1 lands in half `after % 2` as that half's version (after + 2 - i) // 2.
        index = after % 2
        wait_version(self.agent, self.regions[index], (after + 2 - index) // 2 - 1, timeout)
        newest = self.latest()
        if newest is None or newest.sequence <= after:  # the regions were replaced meanwhile
            raise ConduitError(f"double buffer {self.name} on {self.agent.url} went back to write "
                               f"{newest.sequence if newest else 0} (had {after})", "Conflict")
        return newest

    def ack(self, slot: Slot, reader: str | None = None) -> None:
        """Says READER (default ``"<hostname>/<pid>"``) applied SLOT (from ``wait()`` or ``latest()``): the
        writer's ``wait_acks`` counts it."""
        acks.ack(self.agent, slot.region, slot.update.version, reader)

    def wait_acks(self, slot: Slot, readers: int, timeout: float | None = None) -> list[acks.Ack]:
        """The readers that acked SLOT's write (or a later write of its half) once at least READERS did: a
        writer that waits before writing the other half next time knows they all moved on from it.
        TimeoutError naming who acked and how many are missing after TIMEOUT s."""
        return acks.wait_acks(self.agent, slot.region, slot.update.version, readers, timeout)

    def still_valid(self, slot: Slot) -> bool:
        """True when SLOT (read from ``latest()``) cannot have been overwritten since: the other half has not
        landed the next write yet."""
        other = current_version(self.agent, self.regions[1 - slot.index])
        other_sequence = 2 * other.version - 1 + (1 - slot.index) if other.version else 0
        return other_sequence < slot.sequence + 1
