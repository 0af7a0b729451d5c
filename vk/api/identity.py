"""This cluster's identity: its cluster ID and cluster labels, kept in a ConfigMap.

vk's chart writes it (its values `clusterID` and `clusterLabels`); every component reads it at
start. Parsing is pure here, so a malformed ConfigMap is reported with one clear error wherever
it is read.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from vk.api.constants import (
    CLUSTER_ID_KEY,
    CLUSTER_IDENTITY_CONFIGMAP,
    CLUSTER_LABELS_KEY,
    VK_NAMESPACE,
)
from vk.api.core import InvalidClusterID, validate_cluster_id
from vk.api.labels import is_label_value, is_qualified_name


class InvalidClusterIdentity(ValueError):
    """The cluster identity (or the ConfigMap holding it) is malformed."""


@dataclass(frozen=True)
class ClusterIdentity:
    """Who this cluster is to its peers."""

    cluster_id: str
    labels: dict[str, str] = field(default_factory=dict, hash=False)
    """Cluster labels, suggested to consumers as virtual node labels."""


def _label_problem(key: str, value: str) -> str | None:
    prefix, slash, name = key.rpartition("/")
    if slash and not is_qualified_name(f"{prefix}/name"):
        return f"label key {key!r} has an invalid prefix (must be a DNS subdomain)"
    if not is_qualified_name(name):
        return f"label key {key!r} is not a valid label name"
    if not is_label_value(value):
        return f"label value {value!r} of {key!r} is not a valid label value"
    return None


def _validated(cluster_id: Any, labels: Any) -> ClusterIdentity:
    if not isinstance(cluster_id, str):
        raise InvalidClusterIdentity(f"cluster ID must be a string, not {cluster_id!r}")
    try:
        validate_cluster_id(cluster_id)
    except InvalidClusterID as error:
        raise InvalidClusterIdentity(str(error)) from error
    if not isinstance(labels, Mapping):
        raise InvalidClusterIdentity(f"cluster labels must be an object, not {labels!r}")
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise InvalidClusterIdentity(
                f"cluster label {key!r}: {value!r} is not a string-to-string pair"
            )
        problem = _label_problem(key, value)
        if problem:
            raise InvalidClusterIdentity(f"cluster labels: {problem}")
    return ClusterIdentity(cluster_id=cluster_id, labels=dict(labels))


def parse_cluster_identity(configmap: Mapping[str, Any]) -> ClusterIdentity:
    """Read the identity from the ConfigMap as the API returns it; raise InvalidClusterIdentity."""
    where = f"ConfigMap {VK_NAMESPACE}/{CLUSTER_IDENTITY_CONFIGMAP}"
    data = configmap.get("data") if isinstance(configmap, Mapping) else None
    if not isinstance(data, Mapping):
        raise InvalidClusterIdentity(f"{where} has no data")
    if CLUSTER_ID_KEY not in data:
        raise InvalidClusterIdentity(f"{where} has no {CLUSTER_ID_KEY!r} key")
    raw_labels = data.get(CLUSTER_LABELS_KEY) or "{}"
    try:
        labels = json.loads(raw_labels)
    except (TypeError, ValueError) as error:
        raise InvalidClusterIdentity(
            f"{where}: {CLUSTER_LABELS_KEY!r} is not valid JSON ({error})"
        ) from error
    try:
        return _validated(data[CLUSTER_ID_KEY], labels)
    except InvalidClusterIdentity as error:
        raise InvalidClusterIdentity(f"{where}: {error}") from error
