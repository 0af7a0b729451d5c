"""Status conditions as Kubernetes keeps them: a condition's `lastTransitionTime` moves only
when its status does, so it tells since when things have been as they are."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from vk.api.timestamps import kube_time
from vk.kube.client import JSON


def forge_condition(
    previous: Mapping[str, Any] | None,
    kind: str,
    status: str,
    message: str,
    now: datetime.datetime,
    *,
    reason: str | None = None,
) -> JSON:
    """The condition `kind` as it is now, given the one it replaces (None: none before)."""
    since = kube_time(now)
    if previous and previous.get("status") == status and previous.get("lastTransitionTime"):
        since = previous["lastTransitionTime"]
    condition: JSON = {
        "type": kind,
        "status": status,
        "message": message,
        "lastTransitionTime": since,
    }
    if reason is not None:
        condition["reason"] = reason
    return condition
