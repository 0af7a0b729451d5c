"""Peering a consumer with a provider, as `vkctl peer` does it with both clusters' kubeconfigs:
the tenant namespace on each side, the consumer's Tenant on the provider, and the consumer's
control-plane identity there (signed by the provider's CSR API for
`kubernetes.io/kube-apiserver-client`, bound by RBAC to the provider's tenant namespace only,
kept by the consumer as a kubeconfig Secret). Then, by default, one ResourceSlice named after
the provider: the controllers do the rest. `vkctl unpeer` undoes it (vk/cli/peer.py).

The object builders are pure; `establish_control_plane` does the talking.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import time
from collections.abc import Mapping
from typing import Any

import yaml

from vk.api.authentication import ResourceSlice, Tenant
from vk.api.constants import (
    CONSUMER_TENANT_LABEL,
    CREATE_VIRTUAL_NODE_ANNOTATION,
    IDENTITY_CONTROL_PLANE,
    IDENTITY_TYPE_LABEL,
    PEER_CLUSTER_UID_ANNOTATION,
    REMOTE_CLUSTER_ID_LABEL,
    REMOTE_ID_LABEL,
    REPLICATION_LABEL,
    TENANT_NAMESPACE_LABEL,
    control_plane_request_name,
    control_plane_secret_name,
    control_plane_user,
    tenant_namespace,
)
from vk.controllers.csr import CSR_API, forge_approval
from vk.controllers.provider_resourceslices import CLIENT_SIGNER
from vk.controllers.tenants import forge_control_plane_rbac
from vk.kube.client import JSON, AlreadyExists, KubeClient, NotFound, object_path, resource_path
from vk.kube.pki import forge_client_csr, forge_kubeconfig, new_private_key, private_key_pem

CERTIFICATE_SECONDS = 365 * 24 * 3600


class PeeringError(RuntimeError):
    """Peering cannot go on; the message says why and what to do."""


def forge_tenant_namespace(other_cluster_id: str, other_cluster_uid: str) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": tenant_namespace(other_cluster_id),
            "labels": {TENANT_NAMESPACE_LABEL: "true", REMOTE_CLUSTER_ID_LABEL: other_cluster_id},
            "annotations": {PEER_CLUSTER_UID_ANNOTATION: other_cluster_uid},
        },
    }


async def cluster_uid(client: KubeClient) -> str:
    """A cluster's fingerprint: the UID of its kube-system namespace."""
    namespace = await client.get(resource_path("v1", "namespaces", name="kube-system"))
    return str(namespace["metadata"]["uid"])


def another_cluster(
    tenant_namespace_obj: Mapping[str, Any], other_cluster_id: str, other_cluster_uid: str
) -> str | None:
    """Why the tenant namespace kept for `other_cluster_id` is not for the cluster reached now,
    whose fingerprint is `other_cluster_uid`; None when it is (or was peered before vk pinned
    peers: it is taken as this one then). A cluster that claims a peer's ID would otherwise
    take its peering over: as a provider, the consumer's pods and Secrets meant for the peer;
    as a consumer, the peer's identity on the provider."""
    metadata = tenant_namespace_obj.get("metadata") or {}
    pinned = (metadata.get("annotations") or {}).get(PEER_CLUSTER_UID_ANNOTATION)
    if pinned is None or pinned == other_cluster_uid:
        return None
    return (
        f"cluster {other_cluster_id} was peered as the cluster whose kube-system namespace has "
        f"UID {pinned}; the cluster reached now claims its ID, and its UID is "
        f"{other_cluster_uid}: it is another cluster. If {other_cluster_id} was rebuilt, end "
        f"the old peering first (`vkctl unpeer`), or, once sure, remove the annotation "
        f"{PEER_CLUSTER_UID_ANNOTATION} from the namespace {metadata.get('name')}"
    )


def forge_tenant(consumer_id: str) -> JSON:
    """The provider's Tenant of a consumer: in the tenant namespace kept for it, named after
    it (Liqo's); deleting it ends the peering on the provider's side."""
    return {
        "apiVersion": Tenant.group_version(),
        "kind": Tenant.KIND,
        "metadata": {
            "name": consumer_id,
            "namespace": tenant_namespace(consumer_id),
            "labels": {REMOTE_CLUSTER_ID_LABEL: consumer_id},
        },
        # tenantCondition defaults to Active; left out, so that peering again keeps what the
        # provider's administrator made it (Cordoned, Drained).
        "spec": {"clusterID": consumer_id},
    }


def forge_control_plane_secret(provider_id: str, kubeconfig: Mapping[str, Any]) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": control_plane_secret_name(provider_id),
            "namespace": tenant_namespace(provider_id),
            "labels": {
                IDENTITY_TYPE_LABEL: IDENTITY_CONTROL_PLANE,
                REMOTE_CLUSTER_ID_LABEL: provider_id,
            },
        },
        "type": "Opaque",
        "data": {
            "kubeconfig": base64.b64encode(
                yaml.safe_dump(dict(kubeconfig), sort_keys=False).encode()
            ).decode()
        },
    }


def forge_resource_slice(
    name: str,
    provider_id: str,
    *,
    slice_class: str = "default",
    resources: Mapping[str, str] | None = None,
    create_virtual_node: bool = True,
) -> JSON:
    """A ResourceSlice as `liqoctl create resourceslice` writes it (the reference page's YAML)."""
    metadata: JSON = {
        "name": name,
        "namespace": tenant_namespace(provider_id),
        "labels": {
            REMOTE_CLUSTER_ID_LABEL: provider_id,
            REMOTE_ID_LABEL: provider_id,
            REPLICATION_LABEL: "true",
        },
    }
    if create_virtual_node:
        metadata["annotations"] = {CREATE_VIRTUAL_NODE_ANNOTATION: "true"}
    spec: JSON = {"class": slice_class, "providerClusterID": provider_id}
    if resources:
        spec["resources"] = dict(resources)
    return {
        "apiVersion": ResourceSlice.group_version(),
        "kind": ResourceSlice.KIND,
        "metadata": metadata,
        "spec": spec,
    }


async def sign_client_certificate(
    provider: KubeClient, name: str, csr_pem: bytes, *, within: float = 60.0
) -> bytes:
    """A client certificate for `csr_pem` from the provider's CSR API (approved by us, with the
    provider administrator's rights `vkctl peer` runs with); the request is removed after."""
    path = resource_path(CSR_API, "certificatesigningrequests", name=name)
    request = {
        "apiVersion": CSR_API,
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {
            "signerName": CLIENT_SIGNER,
            "request": base64.b64encode(csr_pem).decode(),
            "usages": ["digital signature", "client auth"],
            "expirationSeconds": CERTIFICATE_SECONDS,
        },
    }
    with contextlib.suppress(NotFound):
        await provider.delete(path)  # a request left by an interrupted peering
    created = await provider.create(resource_path(CSR_API, "certificatesigningrequests"), request)
    await provider.replace(
        f"{path}/approval",
        forge_approval(
            created,
            "VkPeering",
            "vkctl peer approved the consumer's control-plane identity",
            datetime.datetime.now(datetime.UTC),
        ),
    )
    deadline = time.monotonic() + within
    try:
        while True:
            certificate = ((await provider.get(path)).get("status") or {}).get("certificate")
            if certificate:
                return base64.b64decode(certificate)
            if time.monotonic() > deadline:
                raise PeeringError(
                    f"the provider approved the request {name} but did not sign it within "
                    f"{within:.0f}s: is its kube-controller-manager signing "
                    f"({CLIENT_SIGNER})?"
                )
            await asyncio.sleep(0.5)
    finally:
        with contextlib.suppress(NotFound):
            await provider.delete(path)


async def check_peers(
    consumer: KubeClient,
    provider: KubeClient,
    *,
    consumer_id: str,
    provider_id: str,
    consumer_uid: str,
    provider_uid: str,
) -> None:
    """Raises PeeringError when either side's tenant namespace for the other, if any, was kept
    for another cluster than the one reached now (`another_cluster`)."""
    for client, other, other_uid, which in (
        (consumer, provider_id, provider_uid, consumer_id),
        (provider, consumer_id, consumer_uid, provider_id),
    ):
        path = resource_path("v1", "namespaces", name=tenant_namespace(other))
        with contextlib.suppress(NotFound):
            if problem := another_cluster(await client.get(path), other, other_uid):
                raise PeeringError(f"on {which}: {problem}")


async def establish_control_plane(
    consumer: KubeClient,
    provider: KubeClient,
    *,
    consumer_id: str,
    provider_id: str,
    consumer_uid: str,
    provider_uid: str,
    provider_server: str,
    provider_ca: bytes,
) -> None:
    """Tenant namespaces on both sides, each naming the other cluster's fingerprint, the
    consumer's Tenant on the provider and its control-plane identity there; safe to run again,
    with the same two clusters only."""
    for client, other, other_uid, which in (
        (consumer, provider_id, provider_uid, consumer_id),
        (provider, consumer_id, consumer_uid, provider_id),
    ):
        namespace = forge_tenant_namespace(other, other_uid)
        try:
            await client.create(resource_path("v1", "namespaces"), namespace)
        except AlreadyExists:
            path = resource_path("v1", "namespaces", name=tenant_namespace(other))
            existing = await client.get(path)
            if existing["metadata"].get("deletionTimestamp"):
                raise PeeringError(
                    f"the namespace {tenant_namespace(other)} of {which} is still being deleted "
                    "(a peering being removed): wait until it is gone, then run `vkctl peer` "
                    "again"
                ) from None
            if problem := another_cluster(existing, other, other_uid):
                raise PeeringError(f"on {which}: {problem}") from None
            # Pinned now if it was peered before vk pinned peers.
            await client.merge_patch(path, {"metadata": namespace["metadata"]})
    # The provider's side is kept for a consumer (its ForeignCluster says Incoming); a patch,
    # since the same namespace may also be this cluster's side of a peering the other way.
    await provider.merge_patch(
        resource_path("v1", "namespaces", name=tenant_namespace(consumer_id)),
        {"metadata": {"labels": {CONSUMER_TENANT_LABEL: "true"}}},
    )
    tenant = forge_tenant(consumer_id)
    applied = await provider.apply(object_path(tenant), tenant)
    if applied["metadata"].get("deletionTimestamp"):
        raise PeeringError(
            f"the previous peering of {consumer_id} is still being removed on {provider_id} "
            f"(its Tenant {tenant_namespace(consumer_id)}/{consumer_id} is being deleted): "
            "wait until it is gone, then run `vkctl peer` again"
        )
    for obj in forge_control_plane_rbac(consumer_id):
        await provider.apply(object_path(obj), obj)
    key = new_private_key()
    user = control_plane_user(consumer_id)
    certificate = await sign_client_certificate(
        provider, control_plane_request_name(consumer_id), forge_client_csr(key, user, ())
    )
    kubeconfig = forge_kubeconfig(
        provider_id, provider_server, provider_ca, certificate, private_key_pem(key), user
    )
    secret = forge_control_plane_secret(provider_id, kubeconfig)
    await consumer.apply(object_path(secret), secret)
