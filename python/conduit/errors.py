"""Exceptions: every refusal of an agent (HTTP 4xx/5xx, or an error line on the import socket) becomes a
:class:`ConduitError` carrying the agent's error code as ``reason``, the HTTP status as ``status``, the
agent's own words as ``message`` and which agent said it as ``agent`` (its URL, or its import socket).

    try:
        agent.create_region("weights", 1 << 30)
    except Conflict as e:          # AlreadyExists or Conflict (409)
        print(e.reason, e.status, e.message, e.agent)
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import requests


class ConduitError(Exception):
    """An agent (or the SDK on its behalf) refused or could not do something.

    ``reason``: the agent's error code (``InvalidArgument``, ``AlreadyExists``, ...) or, for a failed
    transfer or job, its failure reason (``PeerUnreachable``, ...). ``status``: the HTTP status, None when the
    answer came some other way (the import socket, a transfer's state). ``message``: the agent's message.
    ``agent``: the URL of the agent that answered (``"import socket <path>"`` for its socket), None when no
    agent did. ``str(e)`` is ``"reason (HTTP status from agent): message"``."""

    def __init__(self, message: str, reason: str = "", status: int | None = None,
                 agent: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.reason = reason
        self.status = status
        self.agent = agent

    def __str__(self) -> str:
        where = " ".join(w for w in (f"HTTP {self.status}" if self.status is not None else "",
                                     f"from {self.agent}" if self.agent else "") if w)
        head = f"{self.reason} ({where})" if where else self.reason
        return f"{head}: {self.message}" if head else self.message


class InvalidArgument(ConduitError):
    """400: a malformed request, a bad name, a value out of range."""


class TensorMismatch(InvalidArgument):
    """A transfer's ``tensors=`` do not fit (docs/tensors.md, "Subsets"): a name or glob matches no source
    tensor, or a selected tensor is missing in a target's manifest or has another dtype or shape there. The
    message names the tensor and the target; raised before any byte moves."""


class Unauthorized(ConduitError):
    """401: no token, or the wrong one."""


class AgentMismatch(InvalidArgument):
    """The import socket given belongs to another agent than the one at the URL (their instance ids differ):
    nothing was imported, since the region would be made on one agent and used or deleted on the other."""


class Forbidden(ConduitError):
    """403: the agent knows the caller (its client certificate) and does not let it do this, or the
    certificate names no Conduit identity (docs/security.md)."""


class NotFound(ConduitError):
    """404: no such region, grant, transfer or file (``NotFound``), or no such route (``RouteNotFound``:
    an agent older than this SDK)."""


class Conflict(ConduitError):
    """409: the name is taken (``AlreadyExists``) or the object is in use (``Conflict``)."""


class Unprocessable(ConduitError):
    """422: over the memory cap (``ResourceExhausted``) or not possible on this node (``Unsupported``)."""


class Unavailable(ConduitError):
    """503 (not ready, shutting down), or the agent (its HTTP port, its import socket) does not answer."""


class TooManyRequests(ConduitError):
    """429: the agent holds as many long polls as it allows (``ResourceExhausted``); ``retry_after``: the
    seconds its Retry-After header asks to wait (None without one)."""

    def __init__(self, message: str, reason: str = "", status: int | None = None,
                 retry_after: float | None = None, agent: str | None = None) -> None:
        super().__init__(message, reason, status, agent)
        self.retry_after = retry_after


class TransferFailed(ConduitError):
    """A transfer ended Failed or Cancelled, or a TransferJob Failed: ``reason`` is its failure reason
    (``PeerUnreachable``, ``ChecksumMismatch``, ``Cancelled``, a job condition's reason, ...), ``message``
    the agent's or controller's words, ``details`` the last status seen (a dict)."""

    def __init__(self, message: str, reason: str = "", details: dict[str, Any] | None = None,
                 agent: str | None = None) -> None:
        super().__init__(message, reason, agent=agent)
        self.details: dict[str, Any] = details or {}


_BY_CODE: dict[str, type[ConduitError]] = {
    "InvalidArgument": InvalidArgument,
    "MalformedJson": InvalidArgument,
    "Unauthorized": Unauthorized,
    "Forbidden": Forbidden,
    "NotFound": NotFound,
    "RouteNotFound": NotFound,
    "AlreadyExists": Conflict,
    "Conflict": Conflict,
    "ResourceExhausted": Unprocessable,
    "Unsupported": Unprocessable,
    "Unavailable": Unavailable,
    "AgentMismatch": AgentMismatch,
}

_BY_STATUS: dict[int, type[ConduitError]] = {400: InvalidArgument, 401: Unauthorized, 403: Forbidden,
                                             404: NotFound,
                                             409: Conflict, 422: Unprocessable, 503: Unavailable}


def error_for(code: str, message: str, status: int | None = None, agent: str | None = None) -> ConduitError:
    """The exception for an agent's error ``{"code", "message"}`` (the class by code, else by status), said
    by AGENT."""
    if status == 429:  # its code (ResourceExhausted) is also the 422 of a full memory cap: not the same thing
        return TooManyRequests(message, code, status, agent=agent)
    cls = _BY_CODE.get(code) or (_BY_STATUS.get(status) if status is not None else None) or ConduitError
    return cls(message, code, status, agent)


def error_from_response(r: requests.Response, agent: str | None = None) -> ConduitError:
    """The exception for an agent's 4xx/5xx answer ``{"error": {"code", "message"}}``; a body that is not
    one (a proxy's page) still gives the status and the start of the text. AGENT: its URL (default: the
    request's scheme, host and port)."""
    if agent is None:
        parts = urlsplit(r.url)
        agent = f"{parts.scheme}://{parts.netloc}"
    try:
        err = r.json()["error"]
        e = error_for(str(err.get("code", "")), str(err.get("message", "")), r.status_code, agent)
    except (ValueError, KeyError, TypeError, AttributeError):
        text = r.text.strip()[:200] or r.reason or "no body"
        e = error_for("", f"{r.request.method} {r.url}: {text}", r.status_code, agent)
    if isinstance(e, TooManyRequests):
        try:
            e.retry_after = float(r.headers["Retry-After"])
        except (KeyError, ValueError):
            pass
    return e
