"""The provider's Events about offloaded pods and reflected objects, copied to the consumer so
that `kubectl describe` at home tells why a pod does not start or a claim does not bind
(Liqo's `reflection/event`, reference §3.8). Events go remote → local only.

Pure: no I/O. Objects are the API's own JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vk.api.constants import ALLOW_REFLECTION_ANNOTATION, SKIP_REFLECTION_ANNOTATION
from vk.api.jsondata import as_mapping, is_integer
from vk.reflection.forge.configuration import local_configmap_name
from vk.reflection.forge.meta import JSON, ownership_labels

# The kinds of the objects vk puts in a provider (the provider's Pods stand for local pods):
# only Events about those have a local object to be about.
REFLECTED_EVENT_KINDS = frozenset(
    {"Pod", "ConfigMap", "Secret", "Service", "Ingress", "PersistentVolumeClaim"}
)

# The API group of each reflected kind: a `Service` of another group (Knative's) is not ours.
_KIND_GROUPS = {kind: "" for kind in REFLECTED_EVENT_KINDS} | {"Ingress": "networking.k8s.io"}

# What changes as the provider's Event repeats.
_UPDATED_FIELDS = ("count", "lastTimestamp", "message", "type")

# What of a provider's Event is copied home, at most: the provider writes it, and a consumer
# keeps and copies no more of it than an Event of the events.k8s.io API may hold (its note is
# at most 1 KiB; its reason and the reporting component 128 characters).
MAX_MESSAGE_CHARS = 1024
MAX_SHORT_FIELD_CHARS = 128
MAX_REFERENCE_CHARS = 512  # a name, a UID, a field path (`spec.containers{app}`): longer, none

# The fields of a provider's Event that the Event reflector reads: all a cache keeps of one.
_READ_FIELDS = (
    "involvedObject",
    "source",
    "reportingComponent",
    "reportingController",
    "series",
    "eventTime",
    "firstTimestamp",
    "lastTimestamp",
    "count",
    "type",
    "reason",
    "message",
)
_READ_METADATA = ("name", "namespace", "uid", "resourceVersion")
_READ_ANNOTATIONS = (SKIP_REFLECTION_ANNOTATION, ALLOW_REFLECTION_ANNOTATION)
_READ_INVOLVED = ("apiVersion", "kind", "name", "uid", "fieldPath")


def involved_remote_name(remote_event: Mapping[str, Any]) -> str | None:
    """The name of the provider's object a provider Event is about, if it is of a kind vk
    reflects (of that kind's API group); None if it is about no such object."""
    involved = remote_event.get("involvedObject") or {}
    kind = involved.get("kind")
    if kind not in REFLECTED_EVENT_KINDS:
        return None
    api_version = involved.get("apiVersion")
    # An absent apiVersion is the core group's, as kubectl reads it.
    group = api_version.rpartition("/")[0] if isinstance(api_version, str) else ""
    if group != _KIND_GROUPS[kind]:
        return None
    name = involved.get("name")
    return name if isinstance(name, str) and name else None


def involved_local_name(remote_event: Mapping[str, Any], local_cluster_id: str) -> str | None:
    """The name of the local object a provider Event is about, or None if it is about no
    object vk reflects. Only the ConfigMap of the consumer's CA has another name remotely."""
    name = involved_remote_name(remote_event)
    if name is None:
        return None
    kind = remote_event["involvedObject"]["kind"]
    return local_configmap_name(name, local_cluster_id) if kind == "ConfigMap" else name


def involved_object_key(remote_event: Mapping[str, Any]) -> str:
    """`Kind/name` of the object a provider Event is about (an index of the Events cached)."""
    involved = remote_event.get("involvedObject") or {}
    return f"{involved.get('kind')}/{involved.get('name')}"


def remote_event_as_read(remote_event: JSON) -> JSON:
    """What a cache keeps of a provider's Event: the fields the Event reflector reads, each
    text no longer than an Event may be copied home with. A provider writes these Events as
    it likes: a message of a megabyte is kept, and copied home, as its first KiB."""
    metadata = remote_event.get("metadata") or {}
    kept_metadata = {key: metadata[key] for key in _READ_METADATA if key in metadata}
    annotations = metadata.get("annotations") or {}
    if reflection := {
        key: annotations[key][:MAX_SHORT_FIELD_CHARS]
        for key in _READ_ANNOTATIONS
        if isinstance(annotations.get(key), str)
    }:
        kept_metadata["annotations"] = reflection
    kept: JSON = {"metadata": kept_metadata}
    for field in _READ_FIELDS:
        if field in remote_event:
            kept[field] = remote_event[field]
    involved = as_mapping(remote_event.get("involvedObject"))
    kept["involvedObject"] = {
        key: involved[key]
        for key in _READ_INVOLVED
        if isinstance(involved.get(key), str) and len(involved[key]) <= MAX_REFERENCE_CHARS
    }
    for field, limit in (
        ("message", MAX_MESSAGE_CHARS),
        ("reason", MAX_SHORT_FIELD_CHARS),
        ("type", MAX_SHORT_FIELD_CHARS),
        ("reportingComponent", MAX_SHORT_FIELD_CHARS),
        ("reportingController", MAX_SHORT_FIELD_CHARS),
    ):
        if isinstance(kept.get(field), str):
            kept[field] = kept[field][:limit]
        else:
            kept.pop(field, None)
    for field in ("eventTime", "firstTimestamp", "lastTimestamp"):
        if not _is_time(kept.get(field)):
            kept.pop(field, None)
    if not is_integer(kept.get("count")):
        kept.pop("count", None)
    if "series" in kept:
        series = as_mapping(kept["series"])
        kept["series"] = {
            key: value
            for key, value in series.items()
            if (key == "count" and is_integer(value))
            or (key == "lastObservedTime" and _is_time(value))
        }
    if "source" in kept:
        source = as_mapping(kept["source"])
        kept["source"] = {
            key: value[:MAX_SHORT_FIELD_CHARS]
            for key, value in source.items()
            if key in ("component", "host") and isinstance(value, str)
        }
    return kept


def forge_local_event(
    remote_event: Mapping[str, Any],
    *,
    local_namespace: str,
    local_involved: Mapping[str, Any],
    local_cluster_id: str,
    remote_cluster_id: str,
) -> JSON:
    """The core/v1 Event to create at home for `remote_event`, about `local_involved` (the
    local object it names). Its source says it comes from the provider.

    Events of the events.k8s.io API (the scheduler's) carry `eventTime`, and then core/v1
    validation demands the reporting controller, instance and action too; the home cluster
    needs none of them, so the copy is an Event of the older kind, timed to the second."""
    local_metadata = local_involved.get("metadata") or {}
    involved = {
        "apiVersion": local_involved.get("apiVersion"),
        "kind": local_involved.get("kind"),
        "name": local_metadata.get("name"),
        "namespace": local_metadata.get("namespace"),
        "uid": local_metadata.get("uid"),
    }
    involved = {k: v for k, v in involved.items() if v is not None}
    if field_path := (remote_event.get("involvedObject") or {}).get("fieldPath"):
        involved["fieldPath"] = field_path

    remote_source = remote_event.get("source") or {}
    component = (
        remote_source.get("component")
        or remote_event.get("reportingComponent")
        or remote_event.get("reportingController")
        or ""
    )
    source: JSON = {"component": f"{component} (remote)".strip()}
    if host := remote_source.get("host"):
        source["host"] = host

    series = remote_event.get("series") or {}
    event_time = _to_seconds(remote_event.get("eventTime"))
    first = remote_event.get("firstTimestamp") or event_time or remote_event.get("lastTimestamp")
    last = remote_event.get("lastTimestamp") or _to_seconds(series.get("lastObservedTime")) or first

    event: JSON = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": remote_event["metadata"]["name"],
            "namespace": local_namespace,
            "labels": ownership_labels(local_cluster_id, remote_cluster_id),
        },
        "involvedObject": involved,
        "source": source,
        # An Event of the events.k8s.io API that repeats counts in its series.
        "count": remote_event.get("count") or series.get("count") or 1,
    }
    for field in ("type", "reason", "message"):
        if field in remote_event:
            event[field] = remote_event[field]
    if first:
        event["firstTimestamp"] = first
    if last:
        event["lastTimestamp"] = last
    return event


def _is_time(value: Any) -> bool:
    """A time as the API writes one (`2026-11-27T06:00:00Z`, or with microseconds)."""
    return isinstance(value, str) and len(value) <= 40


def event_needs_update(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether the local Event must be rewritten: the provider's one repeated (count, last
    time, a new message), or the local one's labels were changed."""
    if any(desired.get(field) != current.get(field) for field in _UPDATED_FIELDS):
        return True
    return _labels(desired) != _labels(current)


def _labels(obj: Mapping[str, Any]) -> dict[str, str]:
    labels: dict[str, str] = (obj.get("metadata") or {}).get("labels") or {}
    return labels


def _to_seconds(micro_time: str | None) -> str | None:
    """A MicroTime (`2026-11-22T13:00:00.123456Z`) as a Time (`2026-11-22T13:00:00Z`)."""
    if not micro_time or "." not in micro_time:
        return micro_time or None
    head, _, fraction = micro_time.partition(".")
    return head + fraction.lstrip("0123456789")
