"""What every reflected object shares: the ownership labels that say it is ours, the metadata
copied from the local object, the skip/allow policy, and the comparison that decides whether
the remote copy must be written (Liqo's `forge/meta.go` and `generic/namespaced.go`).

Pure: no I/O. Objects are the API's own JSON.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from vk.api.constants import (
    ALLOW_REFLECTION_ANNOTATION,
    DESTINATION_LABEL,
    NODENAME_LABEL,
    ORIGIN_LABEL,
    SERVICE_ACCOUNT_NAME_LABEL,
    SKIP_REFLECTION_ANNOTATION,
)

JSON = dict[str, Any]

# The prefix of the labels that mark an object as reflected by vk (ORIGIN_LABEL and the rest).
OWNERSHIP_PREFIX = ORIGIN_LABEL.split("/", 1)[0] + "/"


class ReflectionPolicy(enum.StrEnum):
    """Which local objects are reflected (`--<resource>-reflection-type`)."""

    DENY_LIST = "DenyList"  # all but those annotated liqo.io/skip-reflection
    ALLOW_LIST = "AllowList"  # only those annotated liqo.io/allow-reflection


def ownership_labels(
    local_cluster_id: str, remote_cluster_id: str, node_name: str | None = None
) -> dict[str, str]:
    """Liqo's labels marking a provider object as reflected by this consumer: origin is the
    consumer (home) cluster, destination the provider; pods and token Secrets also name the
    virtual node, so each virtual kubelet lists only its own."""
    labels = {ORIGIN_LABEL: local_cluster_id, DESTINATION_LABEL: remote_cluster_id}
    if node_name is not None:
        labels[NODENAME_LABEL] = node_name
    return labels


def is_owned_by_us(
    remote_obj: Mapping[str, Any], local_cluster_id: str, remote_cluster_id: str
) -> bool:
    """Whether a provider object was reflected by this consumer to this provider (Liqo's
    `IsReflected`: origin and destination match; the node name is not checked). vk never
    modifies or deletes a remote object for which this is false."""
    labels = (remote_obj.get("metadata") or {}).get("labels") or {}
    return bool(
        labels.get(ORIGIN_LABEL) == local_cluster_id
        and labels.get(DESTINATION_LABEL) == remote_cluster_id
    )


# What says whose a provider object is, and which reflector it is for: all a reflector reads of
# an object in a twin namespace that it did not write.
_FOREIGN_LABELS = (ORIGIN_LABEL, DESTINATION_LABEL, NODENAME_LABEL, SERVICE_ACCOUNT_NAME_LABEL)
_FOREIGN_METADATA = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")


@dataclass(frozen=True)
class RemoteObjectAsRead:
    """What a cache of a twin namespace keeps of each provider object (an informer's `keep`;
    equal for equal clusters, so one cache serves every reflector of a resource). One of ours
    is kept as its reflector reads it, to compare it with the local object: whole, but for what
    the provider writes there and no reflector reads or copies home (`ours_as_read`). Of
    another's, the reflector reads only whose it is (to leave it alone and say so), so no more
    is kept: a provider can fill its namespace with ConfigMaps and Secrets of a megabyte each,
    and a virtual kubelet holds a few hundred bytes of each."""

    local_cluster_id: str
    remote_cluster_id: str

    def __call__(self, remote_obj: JSON) -> JSON:
        if is_owned_by_us(remote_obj, self.local_cluster_id, self.remote_cluster_id):
            return ours_as_read(remote_obj)
        metadata = remote_obj.get("metadata") or {}
        kept = {key: metadata[key] for key in _FOREIGN_METADATA if key in metadata}
        labels = metadata.get("labels") or {}
        if whose := {key: labels[key] for key in _FOREIGN_LABELS if key in labels}:
            kept["labels"] = whose
        return {"metadata": kept}


# Finalizers and owner references others put on a copy of ours are kept, in the cache and in
# vk's writes of it, up to this many each: a few tools' (a backup's, a mesh's). More are the
# provider's doing, and leave with vk's next write.
MAX_OTHERS_REFERENCES = 16
_MAX_FINALIZER = 316  # a qualified name: a 253-character prefix and a 63-character name
_OWNER_REFERENCE_FIELDS = 6  # apiVersion, kind, name, uid, controller, blockOwnerDeletion
_MAX_OWNER_REFERENCE_FIELD = 316


def ours_as_read(remote_obj: JSON) -> JSON:
    """A copy of ours in a twin namespace, as its reflector reads it: without its status (the
    provider's, which no reflector copies home: a Service's load balancers, a claim's
    conditions), and with at most MAX_OTHERS_REFERENCES finalizers and owner references, each
    of the API's shape. Its labels and annotations are kept whole: any the local object does
    not have is drift, which vk's next write removes."""
    kept = {key: value for key, value in remote_obj.items() if key != "status"}
    metadata = remote_obj.get("metadata") or {}
    bounded: JSON = {}
    for key, valid in (("finalizers", _is_finalizer), ("ownerReferences", _is_owner_reference)):
        if key in metadata:
            values = metadata[key] if isinstance(metadata[key], list) else []
            bounded[key] = [value for value in values if valid(value)][:MAX_OTHERS_REFERENCES]
    if bounded:
        kept["metadata"] = {**metadata, **bounded}
    return kept


def _is_finalizer(value: Any) -> bool:
    return isinstance(value, str) and len(value) <= _MAX_FINALIZER


def _is_owner_reference(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and len(value) <= _OWNER_REFERENCE_FIELDS
        and all(
            isinstance(field, bool)
            or (isinstance(field, str) and len(field) <= _MAX_OWNER_REFERENCE_FIELD)
            for field in value.values()
        )
    )


def should_reflect(local_obj: Mapping[str, Any], policy: ReflectionPolicy) -> bool:
    """Liqo's `ShouldSkipReflection`, inverted. The value `false` undoes either annotation:
    `liqo.io/skip-reflection: "false"` reflects under DenyList, `liqo.io/allow-reflection:
    "false"` does not under AllowList."""
    annotations = (local_obj.get("metadata") or {}).get("annotations") or {}
    if policy is ReflectionPolicy.ALLOW_LIST:
        value = annotations.get(ALLOW_REFLECTION_ANNOTATION)
        return value is not None and value.lower() != "false"
    value = annotations.get(SKIP_REFLECTION_ANNOTATION)
    return value is None or value.lower() == "false"


def without_keys(mapping: Mapping[str, str], keys: Iterable[str]) -> dict[str, str]:
    """`mapping` less `keys` (labels or annotations not reflected)."""
    dropped = set(keys)
    return {k: v for k, v in mapping.items() if k not in dropped}


def without_not_reflected(remote_obj: Mapping[str, Any], patch: Mapping[str, Any]) -> JSON:
    """`remote_obj` (a forged remote copy) less the labels and annotations a VirtualNode's
    offloadingPatch keeps at home (`labelsNotReflected`, `annotationsNotReflected`), as Liqo
    filters every reflected object's metadata. The ownership labels stay whatever the patch
    names: without them the copy would no longer be ours."""
    labels_kept_home = set(patch.get("labelsNotReflected") or ()) - {
        ORIGIN_LABEL,
        DESTINATION_LABEL,
        NODENAME_LABEL,
    }
    annotations_kept_home = patch.get("annotationsNotReflected") or ()
    if not labels_kept_home and not annotations_kept_home:
        return dict(remote_obj)
    metadata = dict(remote_obj.get("metadata") or {})
    for key, kept_home in (("labels", labels_kept_home), ("annotations", annotations_kept_home)):
        if key in metadata:
            metadata[key] = without_keys(metadata[key] or {}, kept_home)
            if not metadata[key]:
                del metadata[key]
    return {**remote_obj, "metadata": metadata}


def reflected_metadata(
    local_obj: Mapping[str, Any],
    *,
    name: str,
    namespace: str,
    local_cluster_id: str,
    remote_cluster_id: str,
    labels_not_reflected: Iterable[str] = (),
    annotations_not_reflected: Iterable[str] = (),
    extra_labels: Mapping[str, str] | None = None,
) -> JSON:
    """The remote object's metadata: `name` in `namespace`, the local labels and annotations
    (less those not reflected), and the ownership labels, which win over local ones. A local
    label in the ownership labels' own prefix is never copied: vk tells its objects by those
    (which node's token Secret, which ServiceAccount's), and a tenant's Secret labelled so
    was taken for vk's own, or left on the provider for ever."""
    local = local_obj.get("metadata") or {}
    local_labels = local.get("labels") or {}
    labels = {
        **without_keys(
            local_labels,
            [*labels_not_reflected, *(k for k in local_labels if k.startswith(OWNERSHIP_PREFIX))],
        ),
        **(extra_labels or {}),
        **ownership_labels(local_cluster_id, remote_cluster_id),
    }
    metadata: JSON = {"name": name, "namespace": namespace, "labels": labels}
    annotations = without_keys(local.get("annotations") or {}, annotations_not_reflected)
    if annotations:
        metadata["annotations"] = annotations
    return metadata


def contains(desired: Any, current: Any) -> bool:
    """Whether `current` holds everything `desired` says: maps key by key (keys `desired` does
    not name are the server's defaults, e.g. a Service's clusterIP or a port's nodePort), lists
    item by item in order, anything else equal."""
    if isinstance(desired, Mapping):
        return isinstance(current, Mapping) and all(
            contains(value, current.get(key)) for key, value in desired.items()
        )
    if isinstance(desired, list):
        return (
            isinstance(current, list)
            and len(desired) == len(current)
            and all(contains(d, c) for d, c in zip(desired, current, strict=True))
        )
    return bool(desired == current)


def metadata_differs(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Labels and annotations are the local object's, exactly: one added by hand in the
    provider is drift, and is removed."""
    want = desired.get("metadata") or {}
    have = current.get("metadata") or {}
    return (want.get("labels") or {}) != (have.get("labels") or {}) or (
        want.get("annotations") or {}
    ) != (have.get("annotations") or {})


def fields_differ(
    desired: Mapping[str, Any], current: Mapping[str, Any], fields: Iterable[str]
) -> bool:
    """Whether any of `fields` differs: exactly for maps of data, by `contains` for the rest.
    A field `desired` lacks but `current` has is a difference (e.g. a selector removed)."""
    for field in fields:
        want, have = desired.get(field), current.get(field)
        if want is None:
            if have not in (None, {}, []):
                return True
        elif not contains(want, have):
            return True
    return False


def exact_fields_differ(
    desired: Mapping[str, Any], current: Mapping[str, Any], fields: Iterable[str]
) -> bool:
    """Whether any of `fields` (maps of data: a key added by hand is drift) differs."""
    return any((desired.get(f) or {}) != (current.get(f) or {}) for f in fields)
