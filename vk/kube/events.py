"""Kubernetes Events: how vk tells a user about bad input or trouble, where they look for it
(`kubectl describe`, `kubectl get events`). A repeated event updates its count instead of
piling up new objects, as the kubelet's recorder does."""

from __future__ import annotations

import datetime
import hashlib
import time
from collections import OrderedDict
from typing import Any

import structlog

from vk.api.timestamps import kube_time
from vk.kube.client import ApiError, KubeClient, NotFound, resource_path

log = structlog.get_logger("vk.kube.events")

NORMAL, WARNING = "Normal", "Warning"
# An Event's message is cut to this length: many carry what the other cluster answered (its
# error messages, its conditions), which it may make as long as it likes.
MAX_EVENT_MESSAGE = 4096
# As client-go's recorder (its spam filter): of one report (one reason about one object), a
# burst of SPAM_BURST Events, then one per SPAM_REFILL_SECONDS; those past it are logged, not
# written. Many messages quote what the other cluster sent, and one that varies it at will
# would otherwise have vk write a new Event for each version. The last SPAM_KEYS reports are
# remembered.
SPAM_BURST = 25
SPAM_REFILL_SECONDS = 300.0
SPAM_KEYS = 4096


def object_reference(obj: dict[str, Any]) -> dict[str, Any]:
    metadata = obj.get("metadata", {})
    reference = {
        "apiVersion": obj.get("apiVersion"),
        "kind": obj.get("kind"),
        "name": metadata.get("name"),
        "namespace": metadata.get("namespace"),
        "uid": metadata.get("uid"),
        "resourceVersion": metadata.get("resourceVersion"),
    }
    return {k: v for k, v in reference.items() if v}


def forge_event(
    involved: dict[str, Any],
    event_type: str,
    reason: str,
    message: str,
    component: str,
    now: datetime.datetime,
) -> dict[str, Any]:
    """A core/v1 Event; its name is derived from what it reports, so the same report about the
    same object is one Event whose count grows."""
    if len(message) > MAX_EVENT_MESSAGE:
        message = message[: MAX_EVENT_MESSAGE - 1] + "…"
    reference = object_reference(involved)
    digest = hashlib.sha256(f"{reference.get('uid')}/{reason}/{message}".encode()).hexdigest()
    stamp = kube_time(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{reference.get('name')}.{digest[:16]}",
            "namespace": reference.get("namespace") or "default",
        },
        "involvedObject": reference,
        "type": event_type,
        "reason": reason,
        "message": message,
        "source": {"component": component},
        "reportingComponent": component,
        "firstTimestamp": stamp,
        "lastTimestamp": stamp,
        "count": 1,
    }


class SpamFilter:
    """A token bucket per key (SPAM_BURST, refilled by one every SPAM_REFILL_SECONDS), the
    least recently used forgotten past SPAM_KEYS."""

    def __init__(self) -> None:
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()  # tokens, at

    def allows(self, key: str, now: float) -> bool:
        tokens, at = self._buckets.pop(key, (float(SPAM_BURST), now))
        tokens = min(float(SPAM_BURST), tokens + (now - at) / SPAM_REFILL_SECONDS)
        allowed = tokens >= 1
        self._buckets[key] = (tokens - 1 if allowed else tokens, now)
        if len(self._buckets) > SPAM_KEYS:
            self._buckets.popitem(last=False)
        return allowed


class EventRecorder:
    def __init__(self, client: KubeClient, component: str) -> None:
        self.client = client
        self.component = component
        self._spam = SpamFilter()

    async def record(
        self, involved: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        """Best effort: failing to report must never stop the work being reported on."""
        event = forge_event(
            involved,
            event_type,
            reason,
            message,
            self.component,
            datetime.datetime.now(datetime.UTC),
        )
        namespace = event["metadata"]["namespace"]
        path = resource_path("v1", "events", namespace=namespace, name=event["metadata"]["name"])
        involved = event["involvedObject"]
        written = self._spam.allows(
            f"{involved.get('uid') or (namespace, involved.get('name'))}/{reason}",
            time.monotonic(),
        )
        log.info(
            "event" if written else "event not written: too many of it lately",
            reason=reason,
            message=message,
            object=involved.get("name"),
            type=event_type,
        )
        if not written:
            return
        try:
            try:
                current = await self.client.get(path)
            except NotFound:
                await self.client.create(resource_path("v1", "events", namespace=namespace), event)
                return
            await self.client.merge_patch(
                path,
                {
                    "count": int(current.get("count", 1)) + 1,
                    "lastTimestamp": event["lastTimestamp"],
                },
            )
        except (ApiError, OSError, TimeoutError) as error:
            log.warning("cannot record event", reason=reason, error=str(error))
