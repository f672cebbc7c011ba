"""Bounded waiting and wall-clock seconds: every wait in a scenario has a limit and says what it waited for.

    job = wait_for(lambda: jobs.finished("weights"), 60, "the job finishing")
    t0 = now(); ...; print(f"recovery {since(t0):.2f} s")
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def now() -> float:
    """Wall-clock seconds (for recovery times; comparable with the agents' own timestamps)."""
    return time.time()


def since(t0: float) -> float:
    return time.time() - t0


def wait_for(check: Callable[[], T], timeout: float, what: str, *, interval: float = 0.1,
             detail: Callable[[], object] | None = None) -> T:
    """Call CHECK every INTERVAL s until it returns something truthy (returned), at most TIMEOUT s.

    Raises AssertionError "WHAT: not within TIMEOUT s" (plus DETAIL(), e.g. the state last seen) otherwise.
    An exception from CHECK counts as "not yet" (an agent restarting, a file being replaced)."""
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while True:
        try:
            value = check()
            if value:
                return value
        except Exception as e:  # noqa: BLE001 -- "not yet"; the last one is reported
            last_error = e
        if time.monotonic() > deadline:
            extra = ""
            if detail is not None:
                extra = f"; last seen: {detail()}"
            elif last_error is not None:
                extra = f"; last error: {last_error!r}"
            raise AssertionError(f"{what}: not within {timeout:g} s{extra}")
        time.sleep(interval)
