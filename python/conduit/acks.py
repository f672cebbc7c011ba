"""Acknowledgements kept by the agent: readers say which version of a region they applied, a publisher waits
until enough of them did.

``POST /v1/regions/{name}/acks`` records ``{reader, version}`` (a version the region has reached; a reader's
later ack replaces its earlier; at most 1024 readers per region, dropped with the region).
``GET /v1/regions/{name}/acks?version=K&readers=N&timeoutSeconds=T`` answers every reader's latest ack and
``done`` (at least N readers acked a version >= K), long-polling up to T s (T <= 60) while not done.

    agent.ack("weights", upd.version)                          # a reader, after applying the new weights
    agent.wait_acks("weights", version=3, readers=2, timeout=60)  # the publisher, before writing again
"""

from __future__ import annotations

import math
import os
import random
import socket
import time
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .errors import NotFound, TooManyRequests
from .values import check_name, parse_time

if TYPE_CHECKING:
    from .agent import Agent

#: Each long poll asks the agent to hold the request at most this long (it allows up to 60 s).
LONG_POLL_S = 30
#: Added to the HTTP timeout of a long poll: the agent answers after timeoutSeconds, plus its own latency.
_SLACK_S = 15.0
#: The most readers an agent keeps per region (and so the most a wait can ask for).
MAX_READERS = 1024


@dataclass(frozen=True)
class Ack:
    """One reader's latest ack: the version it applied, and when it said so."""

    reader: str
    version: int
    at: datetime | None

    @classmethod
    def from_json(cls, j: dict[str, Any]) -> Ack:
        return cls(reader=str(j.get("reader", "")), version=int(j.get("version") or 0), at=parse_time(j.get("at")))


@dataclass(frozen=True)
class Acks:
    """A region's acks as the agent keeps them; ``done``: at least the asked number of readers acked a version
    >= ``version``."""

    region: str
    version: int
    readers: list[Ack]
    done: bool

    @classmethod
    def from_json(cls, j: dict[str, Any]) -> Acks:
        return cls(region=str(j.get("region", "")), version=int(j.get("version") or 0),
                   readers=[Ack.from_json(r) for r in j.get("readers") or []], done=bool(j.get("done")))

    def applied(self, version: int | None = None) -> list[Ack]:
        """The readers that acked VERSION (default: this answer's) or a later one."""
        at_least = self.version if version is None else version
        return [a for a in self.readers if a.version >= at_least]


def default_reader() -> str:
    """``<hostname>/<pid>``: one reader per process."""
    return f"{socket.gethostname()}/{os.getpid()}"


def _older_agent(agent: Agent, e: NotFound) -> NotFound:
    return NotFound(f"{agent.url} keeps no acks (/v1/regions/{{name}}/acks): an agent older than this SDK "
                    f"({e.message})", e.reason, e.status, agent.url)


def ack(agent: Agent, region: str, version: int, reader: str | None = None) -> Acks:
    """Says READER (default ``default_reader()``) applied VERSION of REGION. Conflict when the region has not
    reached that version; NotFound when it does not exist."""
    body = {"reader": reader if reader is not None else default_reader(), "version": int(version)}
    try:
        return Acks.from_json(agent.request("POST", f"/v1/regions/{check_name(region)}/acks", body))
    except NotFound as e:
        if e.reason == "RouteNotFound":
            raise _older_agent(agent, e) from e
        raise


def _poll(agent: Agent, region: str, version: int, readers: int, wait_s: int) -> Acks:
    try:
        j = agent.request("GET", f"/v1/regions/{check_name(region)}/acks",
                          params={"version": version, "readers": readers, "timeoutSeconds": wait_s},
                          timeout=wait_s + _SLACK_S)
    except NotFound as e:
        if e.reason == "RouteNotFound":
            raise _older_agent(agent, e) from e
        raise
    return Acks.from_json(j)


def acks(agent: Agent, region: str, version: int = 0, readers: int = 1) -> Acks:
    """REGION's acks now, without waiting; ``done`` says whether READERS readers acked VERSION or later."""
    return _poll(agent, region, version, readers, 0)


def wait_acks(agent: Agent, region: str, version: int, readers: int, timeout: float | None = None) -> list[Ack]:
    """The readers that acked VERSION of REGION (or later) once at least READERS of them did: at once when they
    have, else as each ack comes. Long polls of at most LONG_POLL_S each (a 429 is asked again after its
    Retry-After); TimeoutError after TIMEOUT s naming who acked and how many are missing (None: as long as it
    takes). NotFound when the region does not exist (or is deleted)."""
    if not 0 <= readers <= MAX_READERS:
        raise ValueError(f"readers must be from 0 to {MAX_READERS} (the most an agent keeps per region), "
                         f"not {readers}")
    deadline = None if timeout is None else time.monotonic() + timeout
    seen: Acks | None = None
    while True:
        left = None if deadline is None else deadline - time.monotonic()
        # Whole seconds (the agent's unit), rounded up, as versions.wait_version.
        wait_s = LONG_POLL_S if left is None else max(1, min(LONG_POLL_S, math.ceil(left)))
        pause = 0.0
        try:
            seen = _poll(agent, region, version, readers, wait_s)
        except TooManyRequests as e:
            pause = (e.retry_after or 1.0) * random.uniform(0.5, 1.0)
        else:
            if seen.done:
                return seen.applied()
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                applied = seen.applied() if seen is not None else []
                who = ", ".join(a.reader for a in applied) or "none"
                raise TimeoutError(f"region {region} on {agent.url}: {len(applied)} of {readers} readers acked "
                                   f"version {version} after {timeout:g} s ({readers - len(applied)} missing; "
                                   f"acked: {who})")
            pause = min(pause, left)
        if pause > 0:
            time.sleep(pause)
