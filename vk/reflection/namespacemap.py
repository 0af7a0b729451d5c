"""Which local namespaces are offloaded to this provider, and under which remote names: the
entries of the provider's NamespaceMap that the provider has Accepted (its twin namespace
exists). Reflection works only there."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

ACCEPTED = "Accepted"


def accepted_mappings(namespace_maps: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """local namespace -> remote namespace, for every Accepted entry of `namespace_maps`."""
    mappings: dict[str, str] = {}
    for namespace_map in namespace_maps:
        current = (namespace_map.get("status") or {}).get("currentMapping") or {}
        for local, entry in current.items():
            if isinstance(entry, Mapping) and entry.get("phase") == ACCEPTED:
                remote = entry.get("remoteNamespace")
                if isinstance(remote, str) and remote:
                    mappings[local] = remote
    return mappings
