"""Waiting for a real cluster to reach a state, with a deadline and a message that says what
did not happen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_until(
    condition: Callable[[], Any],
    what: str,
    timeout: float = 30.0,
    explain: Callable[[], str] | None = None,
) -> Any:
    """Polls `condition` until it returns something truthy, and returns that. On timeout,
    `explain` says what the cluster showed instead."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            shown = f"\n{explain()}" if explain else ""
            raise AssertionError(f"timed out after {timeout}s waiting for {what}{shown}")
        time.sleep(0.25)
