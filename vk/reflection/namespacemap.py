"""Which local namespaces are offloaded to this provider, and under which remote names: the
entries of the provider's NamespaceMap that the provider has Accepted (its twin namespace
exists) and that this cluster asked for itself (its `spec.desiredMapping`, written by its own
NamespaceOffloading controller). Reflection works only there.

The status is the provider's word, and a provider is not trusted: one that reports a namespace
this cluster never offloaded (its `kube-system`, say) as Accepted would have its Secrets and
ConfigMaps reflected out. Such an entry grants nothing; the replicator drops it when it copies
the status home, with an Event and a metric.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

JSON = dict[str, Any]

ACCEPTED = "Accepted"


def _claimed(namespace_map: Mapping[str, Any]) -> dict[str, str]:
    """local namespace -> remote namespace, for each entry the provider reports Accepted."""
    claimed: dict[str, str] = {}
    current = (namespace_map.get("status") or {}).get("currentMapping") or {}
    for local, entry in current.items():
        if isinstance(entry, Mapping) and entry.get("phase") == ACCEPTED:
            remote = entry.get("remoteNamespace")
            if isinstance(remote, str) and remote:
                claimed[str(local)] = remote
    return claimed


def _desired(namespace_map: Mapping[str, Any]) -> Mapping[str, Any]:
    return (namespace_map.get("spec") or {}).get("desiredMapping") or {}


def untrusted_mappings(namespace_map: Mapping[str, Any]) -> dict[str, str]:
    """The entries the provider reports Accepted that this cluster did not ask for (a local
    namespace it did not map there, or not under that remote name)."""
    desired = _desired(namespace_map)
    return {
        local: remote
        for local, remote in _claimed(namespace_map).items()
        if desired.get(local) != remote
    }


def accepted_mappings(namespace_maps: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """local namespace -> remote namespace, for every entry of `namespace_maps` this cluster
    asked for and the provider Accepted."""
    mappings: dict[str, str] = {}
    for namespace_map in namespace_maps:
        desired = _desired(namespace_map)
        for local, remote in _claimed(namespace_map).items():
            if desired.get(local) == remote:
                mappings[local] = remote
    return mappings


def without_untrusted(namespace_map: Mapping[str, Any], status: Mapping[str, Any]) -> JSON:
    """`status` (the provider's) without the entries `untrusted_mappings` names, judged against
    `namespace_map`'s spec (this cluster's)."""
    untrusted = untrusted_mappings({"spec": namespace_map.get("spec") or {}, "status": status})
    current = dict(status.get("currentMapping") or {})
    for local in untrusted:
        current.pop(local, None)
    return {**status, "currentMapping": current} if "currentMapping" in status else dict(status)
