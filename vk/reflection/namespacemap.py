"""Which local namespaces are offloaded to this provider, and under which remote names: the
entries of the provider's NamespaceMap that the provider has Accepted (its twin namespace
exists) and that this cluster asked for itself (its `spec.desiredMapping`, written by its own
NamespaceOffloading controller). Reflection works only there.

The status is the provider's word, and a provider is not trusted: one that reports a namespace
this cluster never offloaded (its `kube-system`, say) as Accepted would have its Secrets and
ConfigMaps reflected out. Such an entry grants nothing; the replicator drops it when it copies
the status home, with an Event and a metric.

A provider answers a change of the spec some time after it: an entry this cluster has just taken
out of its spec (a namespace unoffloaded) stays Accepted there until the provider has removed its
twin. That is no lie, and the status copied home (this cluster's own record of the provider's
word it trusted) keeps it until the provider stops reporting it; it grants nothing either, as
reflection reads only what the spec asks for.
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


def untrusted_mappings(
    namespace_map: Mapping[str, Any], status: Mapping[str, Any]
) -> dict[str, str]:
    """The entries `status` (the provider's) reports Accepted that this cluster did not ask for
    (a local namespace it did not map there, or not under that remote name): neither in
    `namespace_map`'s spec (this cluster's) nor trusted in its status before (an entry asked for
    until just now, the provider not done removing it)."""
    desired = _desired(namespace_map)
    trusted_before = _claimed(namespace_map)
    return {
        local: remote
        for local, remote in _claimed({"status": status}).items()
        if remote not in (desired.get(local), trusted_before.get(local))
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
    `namespace_map` (this cluster's)."""
    untrusted = untrusted_mappings(namespace_map, status)
    current = dict(status.get("currentMapping") or {})
    for local in untrusted:
        current.pop(local, None)
    return {**status, "currentMapping": current} if "currentMapping" in status else dict(status)
