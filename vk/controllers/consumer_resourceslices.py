"""The consumer's side of a ResourceSlice: the identity it asks for and what it gets.

For each of our slices: fill in the two cluster IDs, make a private key (kept in the slice's
kubeconfig Secret, never sent anywhere) and put its CSR in `spec.csr`; once the provider has
signed it (the status comes back by replication), write the kubeconfig the virtual kubelet
uses, and, when the slice asks for one, the VirtualNode: named like the slice, owned by it (so
deleting the slice deletes it), with the granted resources as its quota and the provider's
node labels.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Mapping
from typing import Any

import structlog
import yaml

from vk.api.authentication import ResourceSlice
from vk.api.constants import (
    CREATE_VIRTUAL_NODE_ANNOTATION,
    IDENTITY_RESOURCE_SLICE,
    IDENTITY_TYPE_LABEL,
    REMOTE_CLUSTER_ID_LABEL,
    REPLICATION_LABEL,
    RESOURCE_SLICE_NAME_LABEL,
    kubeconfig_secret_name,
    resource_slice_user,
    tenant_group,
)
from vk.api.offloading import VirtualNode
from vk.controllers.provider_resourceslices import (
    ACCEPTED,
    AUTHENTICATION,
    RESOURCES,
    condition_status,
)
from vk.controllers.replication import provider_of
from vk.kube.client import JSON, AlreadyExists, AppliedObjects, KubeClient, resource_path
from vk.kube.controller import Controller, Reconciler, Result, TerminalError, run_with_informers
from vk.kube.informer import Informer, object_key, split_key
from vk.kube.pki import (
    certificate_matches_key,
    csr_matches_key,
    csr_subject,
    forge_client_csr,
    forge_kubeconfig,
    load_private_key,
    new_private_key,
    private_key_pem,
)

log = structlog.get_logger("vk.controllers.consumer_resourceslices")

KEY_FIELD = "tls.key"
KUBECONFIG_FIELD = "kubeconfig"


def owner_reference(resource_slice: Mapping[str, Any], *, controller: bool) -> JSON:
    return {
        "apiVersion": ResourceSlice.group_version(),
        "kind": ResourceSlice.KIND,
        "name": resource_slice["metadata"]["name"],
        "uid": resource_slice["metadata"]["uid"],
        "controller": controller,
        "blockOwnerDeletion": controller,
    }


def wants_virtual_node(resource_slice: Mapping[str, Any]) -> bool:
    value = (resource_slice["metadata"].get("annotations") or {}).get(
        CREATE_VIRTUAL_NODE_ANNOTATION, ""
    )
    return value.lower() not in ("", "false", "0")


def forge_virtual_node(resource_slice: Mapping[str, Any], provider: str) -> JSON:
    """The VirtualNode of an accepted slice: same name and namespace, owned by it."""
    metadata, status = resource_slice["metadata"], resource_slice.get("status") or {}
    spec: JSON = {
        "clusterID": provider,
        "createNode": True,
        "kubeconfigSecretRef": {"name": kubeconfig_secret_name(metadata["name"])},
        "labels": {REMOTE_CLUSTER_ID_LABEL: provider, **(status.get("nodeLabels") or {})},
        "resourceQuota": {"hard": dict(status.get("resources") or {})},
    }
    if status.get("storageClasses"):
        spec["storageClasses"] = status["storageClasses"]
    return {
        "apiVersion": VirtualNode.group_version(),
        "kind": VirtualNode.KIND,
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "labels": {
                REMOTE_CLUSTER_ID_LABEL: provider,
                RESOURCE_SLICE_NAME_LABEL: metadata["name"],
            },
            "ownerReferences": [owner_reference(resource_slice, controller=True)],
        },
        "spec": spec,
    }


def forge_identity_secret(resource_slice: Mapping[str, Any], provider: str, key_pem: bytes) -> JSON:
    metadata = resource_slice["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": kubeconfig_secret_name(metadata["name"]),
            "namespace": metadata["namespace"],
            "labels": {
                IDENTITY_TYPE_LABEL: IDENTITY_RESOURCE_SLICE,
                REMOTE_CLUSTER_ID_LABEL: provider,
                RESOURCE_SLICE_NAME_LABEL: metadata["name"],
            },
            "ownerReferences": [owner_reference(resource_slice, controller=True)],
        },
        "type": "Opaque",
        "data": {KEY_FIELD: base64.b64encode(key_pem).decode()},
    }


class ConsumerResourceSlices(Reconciler):
    name = "consumer-resourceslices"

    def __init__(self, client: KubeClient, consumer: str) -> None:
        self.client = client
        self.consumer = consumer
        self.slices = Informer(
            client,
            ResourceSlice.group_version(),
            ResourceSlice.PLURAL,
            label_selector=f"{REPLICATION_LABEL}=true",
        )
        self.secrets = Informer(
            client,
            "v1",
            "secrets",
            label_selector=f"{IDENTITY_TYPE_LABEL}={IDENTITY_RESOURCE_SLICE}",
        )
        self.controller = Controller(self, workers=2)
        self.applied = AppliedObjects(client)

    async def run(self) -> None:
        self.slices.add_handler(lambda _, obj, __: self.controller.enqueue(object_key(obj)))
        self.secrets.add_handler(self._on_secret)
        await run_with_informers(self.controller, self.slices, self.secrets)

    def _on_secret(self, _: str, secret: JSON, __: JSON | None) -> None:
        name = (secret["metadata"].get("labels") or {}).get(RESOURCE_SLICE_NAME_LABEL)
        if name:
            self.controller.enqueue(f"{secret['metadata']['namespace']}/{name}")

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        assert namespace is not None
        resource_slice = self.slices.store.get(key)
        if resource_slice is None or resource_slice["metadata"].get("deletionTimestamp"):
            return Result()
        provider = resource_slice.get("spec", {}).get("providerClusterID") or provider_of(
            resource_slice
        )
        if not provider:
            raise TerminalError(
                f"ResourceSlice {key} names no provider: set spec.providerClusterID or the "
                f"label {REMOTE_CLUSTER_ID_LABEL}"
            )
        slice_path = resource_path(
            ResourceSlice.group_version(), ResourceSlice.PLURAL, namespace=namespace, name=name
        )
        secret = self.secrets.store.get(f"{namespace}/{kubeconfig_secret_name(name)}")
        if secret is None or KEY_FIELD not in (secret.get("data") or {}):
            with contextlib.suppress(AlreadyExists):
                await self.client.create(
                    resource_path("v1", "secrets", namespace=namespace),
                    forge_identity_secret(
                        resource_slice, provider, private_key_pem(new_private_key())
                    ),
                )
            return Result()  # again once the informer has the Secret
        key_pem = base64.b64decode(secret["data"][KEY_FIELD])
        private_key = load_private_key(key_pem)
        spec = resource_slice.get("spec") or {}
        user, groups = resource_slice_user(self.consumer, name), (tenant_group(self.consumer),)
        csr = base64.b64decode(spec.get("csr") or "")
        current = csr and csr_matches_key(csr, private_key) and _subject(csr) == (user, groups)
        if (
            not current
            or spec.get("consumerClusterID") != self.consumer
            or spec.get("providerClusterID") != provider
        ):
            await self.client.merge_patch(
                slice_path,
                {
                    "spec": {
                        "consumerClusterID": self.consumer,
                        "providerClusterID": provider,
                        "csr": spec.get("csr")
                        if current
                        else base64.b64encode(forge_client_csr(private_key, user, groups)).decode(),
                    }
                },
            )
            return Result()
        params = (resource_slice.get("status") or {}).get("authParams") or {}
        signed = base64.b64decode(params.get("signedCRT") or "")
        if condition_status(resource_slice, AUTHENTICATION) == ACCEPTED and signed:
            if not certificate_matches_key(signed, private_key):
                return Result()  # signed for an earlier key: the provider signs the new one
            kubeconfig = yaml.safe_dump(
                forge_kubeconfig(
                    provider,
                    params.get("apiServer", ""),
                    base64.b64decode(params.get("ca") or ""),
                    signed,
                    key_pem,
                    user,
                ),
                sort_keys=False,
            ).encode()
            encoded = base64.b64encode(kubeconfig).decode()
            if (secret.get("data") or {}).get(KUBECONFIG_FIELD) != encoded:
                await self.client.merge_patch(
                    resource_path(
                        "v1", "secrets", namespace=namespace, name=secret["metadata"]["name"]
                    ),
                    {"data": {KUBECONFIG_FIELD: encoded}},
                )
        if (
            wants_virtual_node(resource_slice)
            and condition_status(resource_slice, AUTHENTICATION) == ACCEPTED
            and condition_status(resource_slice, RESOURCES) == ACCEPTED
            and (resource_slice.get("status") or {}).get("resources")
        ):
            virtual_node = forge_virtual_node(resource_slice, provider)
            await self.applied.apply(
                resource_path(
                    VirtualNode.group_version(), VirtualNode.PLURAL, namespace=namespace, name=name
                ),
                virtual_node,
            )
        return Result()


def _subject(csr: bytes) -> tuple[str, tuple[str, ...]] | None:
    try:
        return csr_subject(csr)
    except ValueError:
        return None
