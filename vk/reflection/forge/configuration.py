"""The ConfigMaps and Secrets vk copies into a provider, so that offloaded pods find the ones
they mount or read (Liqo's `forge/configmaps.go`, `secrets.go`, reference §3.6).

The data is copied as is; only the consumer's `kube-root-ca.crt` is renamed, since the provider
namespace has its own. Pure: no I/O. Objects are the API's own JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vk.api.constants import (
    ALLOW_REFLECTION_ANNOTATION,
    SERVICE_ACCOUNT_NAME_LABEL,
    SKIP_REFLECTION_ANNOTATION,
)
from vk.api.jsondata import json_copy
from vk.reflection.forge.meta import (
    JSON,
    ReflectionPolicy,
    exact_fields_differ,
    metadata_differs,
    reflected_metadata,
    should_reflect,
)
from vk.reflection.forge.pods import ROOT_CA_CONFIGMAP, remote_root_ca_configmap_name

# Secrets of this type hold a token the consumer's API server issued to a ServiceAccount (the
# legacy, long-lived kind): an offloaded pod gets its tokens through the ServiceAccount token
# reflection instead, so these are never copied.
SERVICE_ACCOUNT_TOKEN_SECRET_TYPE = "kubernetes.io/service-account-token"

# The API server's default for a Secret created without a type.
_DEFAULT_SECRET_TYPE = "Opaque"


# --- ConfigMaps ----------------------------------------------------------------------------


def remote_configmap_name(local_name: str, local_cluster_id: str) -> str:
    """The provider-side name of a local ConfigMap: its own, but for `kube-root-ca.crt`, which
    would collide with the provider's own CA."""
    if local_name == ROOT_CA_CONFIGMAP:
        return remote_root_ca_configmap_name(local_cluster_id)
    return local_name


def local_configmap_name(remote_name: str, local_cluster_id: str) -> str:
    """The local ConfigMap a provider-side one stands for (`remote_configmap_name`, inverted)."""
    if remote_name == remote_root_ca_configmap_name(local_cluster_id):
        return ROOT_CA_CONFIGMAP
    return remote_name


def should_reflect_configmap(local: Mapping[str, Any], policy: ReflectionPolicy) -> bool:
    """`should_reflect`, but the consumer's CA is reflected under either policy unless annotated
    not to be: offloaded pods need it to verify their home API server, and nobody annotates a
    ConfigMap that Kubernetes itself writes into every namespace."""
    if (local.get("metadata") or {}).get("name") != ROOT_CA_CONFIGMAP:
        return should_reflect(local, policy)
    annotations = (local.get("metadata") or {}).get("annotations") or {}
    skip = annotations.get(SKIP_REFLECTION_ANNOTATION)
    allow = annotations.get(ALLOW_REFLECTION_ANNOTATION)
    skipped = skip is not None and skip.lower() != "false"
    disallowed = allow is not None and allow.lower() == "false"
    return not (skipped or disallowed)


def forge_remote_configmap(
    local: Mapping[str, Any],
    *,
    remote_namespace: str,
    local_cluster_id: str,
    remote_cluster_id: str,
) -> JSON:
    """The ConfigMap to apply in the provider for `local`."""
    name = remote_configmap_name(local["metadata"]["name"], local_cluster_id)
    remote: JSON = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": reflected_metadata(
            local,
            name=name,
            namespace=remote_namespace,
            local_cluster_id=local_cluster_id,
            remote_cluster_id=remote_cluster_id,
        ),
    }
    for field in ("data", "binaryData", "immutable"):
        if field in local:
            remote[field] = json_copy(local[field])
    return remote


def configmap_needs_update(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether the remote ConfigMap must be rewritten: a key added to it by hand is drift."""
    return (
        metadata_differs(desired, current)
        or exact_fields_differ(desired, current, ("data", "binaryData"))
        # Absent is mutable, as the API server reads it.
        or bool(desired.get("immutable")) != bool(current.get("immutable"))
    )


# --- Secrets -------------------------------------------------------------------------------


def is_reflectable_secret(local: Mapping[str, Any]) -> bool:
    """Whether a local Secret may be copied to the provider at all (the policy aside)."""
    return local.get("type") != SERVICE_ACCOUNT_TOKEN_SECRET_TYPE


def is_token_secret(remote: Mapping[str, Any]) -> bool:
    """Whether a provider Secret holds an offloaded pod's ServiceAccount tokens: the token
    reflector writes those, and the Secret reflector, which has no local Secret for them, would
    otherwise delete them as orphans."""
    labels = (remote.get("metadata") or {}).get("labels") or {}
    return SERVICE_ACCOUNT_NAME_LABEL in labels


def forge_remote_secret(
    local: Mapping[str, Any],
    *,
    remote_namespace: str,
    local_cluster_id: str,
    remote_cluster_id: str,
) -> JSON:
    """The Secret to apply in the provider for `local` (one `is_reflectable_secret` accepts)."""
    remote: JSON = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": reflected_metadata(
            local,
            name=local["metadata"]["name"],
            namespace=remote_namespace,
            local_cluster_id=local_cluster_id,
            remote_cluster_id=remote_cluster_id,
        ),
    }
    for field in ("data", "type", "immutable"):
        if field in local:
            remote[field] = json_copy(local[field])
    return remote


def secret_needs_update(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether the remote Secret must be rewritten. A changed type is drift too, though the
    field is immutable: only recreating the Secret brings it in line."""
    return (
        metadata_differs(desired, current)
        or exact_fields_differ(desired, current, ("data",))
        or desired.get("type", _DEFAULT_SECRET_TYPE) != current.get("type", _DEFAULT_SECRET_TYPE)
        or bool(desired.get("immutable")) != bool(current.get("immutable"))
    )
