"""A transfer running on an agent (POST /v1/transfers): its status, waiting for its end, cancelling it, and the
grants it was given, which the agents revoke when it ends (``releaseGrant``), waited for or not.

    with source.transfer("weights", [Target(b, "weights")]) as t:
        t.wait(timeout=60, progress=True)        # TransferFailed with the agent's reason when it fails
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import TYPE_CHECKING, Any, Protocol

from .errors import NotFound, TooManyRequests, TransferFailed

if TYPE_CHECKING:
    from .agent import Agent
    from .values import Grant

#: The states after which nothing changes any more.
ENDED = ("Succeeded", "Failed", "Cancelled")


@dataclass(frozen=True)
class TransferStatus:
    """GET /v1/transfers/{id}; ``raw`` has every field (per-target state, stages, times)."""

    id: str
    state: str
    bytes_total: int
    bytes_done: int
    throughput: float
    reason: str
    message: str
    raw: dict[str, Any] = field(repr=False, compare=False)

    @property
    def ended(self) -> bool:
        return self.state in ENDED

    @property
    def verified(self) -> bool:
        """The bytes' CRC32C matched at both ends (verify crc32c)."""
        return bool(self.raw.get("verified"))

    @classmethod
    def from_json(cls, j: Mapping[str, Any]) -> TransferStatus:
        return cls(id=str(j["id"]), state=str(j.get("state", "")), bytes_total=int(j.get("bytesTotal") or 0),
                   bytes_done=int(j.get("bytesDone") or 0),
                   throughput=float(j.get("throughputBytesPerSecond") or 0.0), reason=str(j.get("reason") or ""),
                   message=str(j.get("message") or ""), raw=dict(j))


class _Progress(Protocol):
    def show(self, s: TransferStatus) -> None: ...

    def close(self) -> None: ...


class _TqdmProgress:
    def __init__(self, tqdm_cls: Any, transfer_id: str) -> None:
        self.bar = tqdm_cls(desc=transfer_id, unit="B", unit_scale=True, unit_divisor=1024)
        self.done = 0

    def show(self, s: TransferStatus) -> None:
        if s.bytes_total and self.bar.total != s.bytes_total:
            self.bar.total = s.bytes_total
        self.bar.update(max(0, s.bytes_done - self.done))
        self.done = max(self.done, s.bytes_done)

    def close(self) -> None:
        self.bar.close()


class _LineProgress:
    """Without tqdm: one stderr line rewritten in place, at most twice a second."""

    def __init__(self, transfer_id: str) -> None:
        self.id = transfer_id
        self.last = 0.0
        self.shown = False

    def show(self, s: TransferStatus) -> None:
        now = time.monotonic()
        if now - self.last < 0.5 and not s.ended:
            return
        self.last = now
        pct = 100.0 * s.bytes_done / s.bytes_total if s.bytes_total else 0.0
        sys.stderr.write(f"\r{self.id}: {s.state} {pct:5.1f}% {s.bytes_done}/{s.bytes_total} B "
                         f"{s.throughput / 1e6:.1f} MB/s")
        sys.stderr.flush()
        self.shown = True

    def close(self) -> None:
        if self.shown:
            sys.stderr.write("\n")
            sys.stderr.flush()


def _progress(transfer_id: str) -> _Progress:
    try:
        from tqdm import tqdm
    except ImportError:
        return _LineProgress(transfer_id)
    return _TqdmProgress(tqdm, transfer_id)


class Transfer:
    """A transfer started by :meth:`conduit.Agent.transfer`: ``id`` on ``agent`` (the source's), and the
    write grants it was given on the targets' agents.

    The agents revoke the grants when the transfer ends, whether anyone waits or not; this side revokes them
    too (quietly: they are mostly gone) when it sees the end (``wait``, ``cancel``) and when a ``with`` block
    around it ends, whatever the path, in case the source agent could not reach a target's. Leaving the block
    normally waits for the end; an exception in it cancels the transfer first."""

    def __init__(self, agent: Agent, transfer_id: str, grants: Sequence[tuple[Agent, Grant]] = ()) -> None:
        self.agent = agent
        self.id = transfer_id
        self.grants = list(grants)
        self._last: TransferStatus | None = None

    def __repr__(self) -> str:
        state = self._last.state if self._last else "?"
        return f"Transfer({self.id!r} on {self.agent.url}, {state})"

    def status(self, wait_s: int = 0) -> TransferStatus:
        """The transfer's state and progress now; with WAIT_S (at most 60), as soon as it ended or after WAIT_S
        seconds, whichever comes first (the agent answers the end the moment it happens: nothing polls)."""
        path = f"/v1/transfers/{self.id}" + (f"?waitSeconds={wait_s}" if wait_s > 0 else "")
        self._last = TransferStatus.from_json(self.agent.request("GET", path))
        return self._last

    def wait(self, timeout: float | None = None, progress: bool = False) -> TransferStatus:
        """Wait until the transfer ended (long-polls of the agent, which answers at the end; a progress bar
        asks once a second); its final status when Succeeded. Raises :class:`TransferFailed`
        (the agent's reason and message) when it Failed or was Cancelled, or when the agent no longer knows
        it (reason ``TransferLost``: the agent restarted), and ``TimeoutError`` after TIMEOUT s (the transfer
        goes on; its grants stay). PROGRESS shows a tqdm bar (a plain stderr line without tqdm)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        bar = _progress(self.id) if progress else None
        interval = 0.01
        try:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                wait_s = 1 if bar is not None else 30 if left is None else max(0, min(30, math.floor(left)))
                try:
                    s = self.status(wait_s)
                except TooManyRequests:
                    wait_s = 0  # the agent holds as many waits as it allows: look without waiting
                    s = self.status()
                except NotFound as e:
                    self.close()
                    raise TransferFailed(f"transfer {self.id} is gone from {self.agent.url} ({e.message}): the "
                                         "agent restarted or forgot it", "TransferLost",
                                         agent=self.agent.url) from e
                if bar is not None:
                    bar.show(s)
                if s.ended:
                    self.close()
                    if s.state != "Succeeded":
                        raise TransferFailed(s.message or f"transfer {self.id} {s.state}", s.reason or s.state,
                                             s.raw, self.agent.url)
                    return s
                if deadline is not None and time.monotonic() >= deadline:
                    raise TimeoutError(f"transfer {self.id} still {s.state} after {timeout:g} s "
                                       f"({s.bytes_done}/{s.bytes_total} bytes)")
                if wait_s == 0:
                    # A look that did not wait (under a second left, or turned away): short sleeps, growing.
                    time.sleep(interval if deadline is None else max(0.0, min(interval, deadline - time.monotonic())))
                    interval = min(interval * 2, 0.2)
        finally:
            if bar is not None:
                bar.close()

    def cancel(self, timeout: float = 30.0) -> TransferStatus:
        """Cancel (DELETE /v1/transfers/{id}), wait up to TIMEOUT s for it to end, revoke its grants; its
        last status (a transfer that had already ended stays as it ended)."""
        try:
            s = TransferStatus.from_json(self.agent.request("DELETE", f"/v1/transfers/{self.id}"))
            deadline = time.monotonic() + timeout
            while not s.ended and time.monotonic() < deadline:
                time.sleep(0.05)
                s = self.status()
            return s
        finally:
            self.close()

    def close(self) -> None:
        """Revoke the grants this transfer was given (idempotent; a grant already gone is fine)."""
        grants, self.grants = self.grants, []
        for agent, g in grants:
            agent._revoke_quietly(g.id)

    def __enter__(self) -> Transfer:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        try:
            if exc is not None:
                if self._last is None or not self._last.ended:
                    try:
                        self.cancel()
                    except Exception:  # noqa: BLE001 -- the exception in the block is what the caller sees
                        pass
            elif self._last is None or not self._last.ended:
                self.wait()
        finally:
            self.close()
