"""The agent's objects as this side holds them (a region, a grant, a transfer's target) and the checks of the
names and ids that go into its URLs.

    r = Region.from_json(agent.request("GET", f"/v1/regions/{check_name('weights')}"))
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from .errors import InvalidArgument

if TYPE_CHECKING:
    from .agent import Agent

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ID = re.compile(r"^[A-Za-z0-9._:-]{1,128}$")


def check_name(name: str, what: str = "region") -> str:
    """NAME when it is a DNS-1123 label (what the agent accepts), else InvalidArgument. Checked here too so
    that a name never changes the URL it is put into ("a/b" would address another route)."""
    if not isinstance(name, str) or len(name) > 63 or not _NAME.match(name):
        raise InvalidArgument(f"{what} name {name!r} is not a DNS-1123 label (1-63 characters of a-z, 0-9 and "
                              "'-', starting and ending with a letter or digit)", "InvalidArgument")
    return name


def check_id(value: str, what: str) -> str:
    """VALUE when it is an id the agent could have made (a grant's, a transfer's), else InvalidArgument."""
    if not isinstance(value, str) or not _ID.match(value):
        raise InvalidArgument(f"{what} {value!r} is not a valid id", "InvalidArgument")
    return value


def parse_time(value: Any) -> datetime | None:
    """An RFC 3339 timestamp of the agent ("2026-12-04T05:19:38.123Z"), or None when absent or empty."""
    if not value:
        return None
    return datetime.fromisoformat(str(value))


@dataclass(frozen=True)
class Region:
    """A named memory region on an agent (GET /v1/regions/{name}); ``raw`` has every field the agent sent."""

    name: str
    bytes: int
    memory: str
    source: str
    users: int
    version: int
    updated_by: str
    updated_at: datetime | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    #: Backed by a memfd that processes on the agent's node may map (Agent.open_shared).
    shareable: bool = False

    @classmethod
    def from_json(cls, j: Mapping[str, Any]) -> Region:
        return cls(name=str(j["name"]), bytes=int(j["bytes"]), memory=str(j.get("memory", "host")),
                   source=str(j.get("source", "")), users=int(j.get("users") or 0),
                   version=int(j.get("version") or 0), updated_by=str(j.get("updatedBy") or ""),
                   updated_at=parse_time(j.get("updatedAt")), raw=dict(j), shareable=j.get("shareable") is True)


@dataclass(frozen=True)
class Grant:
    """Remote access to a range of a region (POST /v1/regions/{name}/grants): ``key`` is the RemoteKey a
    writer needs, ``id`` what revokes it, ``agent`` the agent that made it."""

    id: str
    region: str
    offset: int
    length: int
    access: str
    key: dict[str, Any]
    expires_at: datetime | None
    raw: dict[str, Any] = field(repr=False, compare=False)
    agent: Agent | None = field(default=None, repr=False, compare=False)

    @classmethod
    def from_json(cls, j: Mapping[str, Any], agent: Agent | None = None) -> Grant:
        return cls(id=str(j["id"]), region=str(j.get("region", "")), offset=int(j.get("offset") or 0),
                   length=int(j.get("length") or 0), access=str(j.get("access", "")), key=dict(j["key"]),
                   expires_at=parse_time(j.get("expiresAt")), raw=dict(j), agent=agent)


@dataclass(frozen=True)
class Target:
    """Where a transfer writes: REGION on AGENT. ``url`` is how the *source* agent reaches the target's agent
    when that differs from the address this process uses (a port-forward, another network)."""

    agent: Agent
    region: str
    url: str | None = None
