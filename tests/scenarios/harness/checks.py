"""Assertions on a local-mode job's outcome, each failing with what the user would see.

    assert_succeeded(ctl, "weights", "job")     # "job Failed: True BackoffLimitExceeded: ..." otherwise
    assert_verified(ctl, "weights")
    assert_retried(ctl, "weights", "Stalled")
"""

from __future__ import annotations

import re

from .controller import LocalController


def assert_succeeded(ctl: LocalController, name: str, what: str) -> None:
    """The job's phase is Succeeded; else "WHAT PHASE: its Failed condition"."""
    phase = ctl.phase(name)
    assert phase == "Succeeded", f"{what} {phase}: {ctl.condition_text(name, 'Failed')}"


def assert_verified(ctl: LocalController, name: str) -> None:
    """The job's Complete condition is True TransferSucceeded and says verified crc32c."""
    text = ctl.condition_text(name, "Complete")
    assert re.match(r"True TransferSucceeded: .*verified crc32c", text), \
        f"Complete condition does not say verified: {text}"


def assert_retried(ctl: LocalController, name: str, reason: str) -> None:
    """The controller logged a Retrying event for the job naming REASON."""
    events = ctl.events(name)
    assert any(re.search(rf"reason=Retrying.*{re.escape(reason)}", e) for e in events), \
        f"no Retrying event naming {reason}: {' '.join(events)}"


def retries(ctl: LocalController, name: str) -> int:
    """status.retries (0 when unset)."""
    return int(ctl.status(name).get("retries") or 0)
