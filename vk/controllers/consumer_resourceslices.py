"""The consumer's side of a ResourceSlice: the identity it asks for and what it gets.

For each of our slices: fill in the two cluster IDs, make a private key (kept in the slice's
kubeconfig Secret, never sent anywhere) and put its CSR in `spec.csr`; once the provider has
signed it (the status comes back by replication), write the kubeconfig the virtual kubelet
uses, and, when the slice asks for one, the VirtualNode: named like the slice, owned by it (so
deleting the slice deletes it, and one deleted by hand while the slice stands is made again, as
Liqo's is), with the granted resources as its quota and the provider's node labels.

The slice's status is the provider's word, and a provider is not trusted: its API server URL
must be https; its resources must be ones a Node can offer, in quantities Kubernetes keeps and
the scheduler can count (a CRD-valid `1e30000000` is refused before any arithmetic); its node
labels must be labels (at most `MAX_PROVIDER_NODE_LABELS`), and cannot set what vk sets or
Kubernetes reserves for nodes (`liqo.io/`, `kubernetes.io/`, `k8s.io/` keys and their
subdomains, but Liqo's `topology.liqo.io/` and Kubernetes' topology region and zone), nor
change a label the consumer's own administrator put on the VirtualNode (provider labels steer
which namespaces, and so which Secrets, a cluster selector sends there). What is refused is
said in a Warning Event on the ResourceSlice. The virtual kubelet checks again what it makes
of the VirtualNode (vk/node/forge.py): the labels of the VirtualNode never override its own nor
the administrator's nodeExtraLabels.
"""

from __future__ import annotations

import base64
import contextlib
import re
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

import structlog
import yaml

from vk.api.authentication import ResourceSlice
from vk.api.constants import (
    CONTROLLER_MANAGER,
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
from vk.kube.client import (
    FIELD_MANAGER,
    JSON,
    AlreadyExists,
    AppliedObjects,
    KubeClient,
    NotFound,
    resource_path,
)
from vk.kube.controller import Controller, Reconciler, Result, TerminalError, run_with_informers
from vk.kube.events import NORMAL, WARNING, EventRecorder
from vk.kube.informer import DELETED, object_key, shared_informer, split_key
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
from vk.node.forge import (
    BASE_LABEL_KEYS,
    keys_set_by_others,
    resource_problem,
    shown,
    valid_labels,
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


# Label domains no provider may set on a consumer's node: vk's own, and what Kubernetes keeps
# for nodes (the kubelet's, the node roles, NodeRestriction's), but the topology it lets
# kubelets report, and Liqo's own topology domain, where providers' cluster labels go
# (`liqoctl install --cluster-labels topology.liqo.io/region=...`).
RESERVED_LABEL_DOMAINS = ("liqo.io", "kubernetes.io", "k8s.io")
PROVIDER_SETTABLE_LABELS = ("topology.kubernetes.io/region", "topology.kubernetes.io/zone")
PROVIDER_SETTABLE_DOMAINS = ("topology.liqo.io",)
# A provider's node labels are its cluster labels, a handful; they all land on a Node the
# consumer's scheduler and selectors read. As many as the classes it may offer.
MAX_PROVIDER_NODE_LABELS = 64
# Resources a provider may offer: cpu, memory, pods, storage, huge pages and a few devices.
MAX_OFFERED_RESOURCES = 64


def is_reserved_label(key: str) -> bool:
    """Whether `key` is a label a provider may not put on a consumer's virtual node."""
    if key in PROVIDER_SETTABLE_LABELS:
        return False
    if key in BASE_LABEL_KEYS:
        return True
    domain = key.partition("/")[0] if "/" in key else ""
    if domain in PROVIDER_SETTABLE_DOMAINS:
        return False
    return any(
        domain == reserved or domain.endswith(f".{reserved}") for reserved in RESERVED_LABEL_DOMAINS
    )


def labels_set_by_others(virtual_node: Mapping[str, Any] | None) -> set[str]:
    """The keys of `spec.labels` of the VirtualNode that a field manager other than vk owns:
    the consumer's administrator's, which no provider label changes."""
    return keys_set_by_others(virtual_node or {}, ("spec", "labels"), FIELD_MANAGER)


# The classes a provider offers, by status field and the field naming each; they reach the
# VirtualNode and the virtual kubelet's arguments, so each must be a class name and no more.
OFFERED_CLASSES = {
    "storageClasses": "storageClassName",
    "ingressClasses": "ingressClassName",
    "loadBalancerClasses": "loadBalancerClassName",
}
MAX_OFFERED_CLASSES = 64
# Object names (DNS subdomains) and load-balancer classes (label-style, with a prefix).
CLASS_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_./]{0,251}[A-Za-z0-9])?")


def slice_status_problems(status: Mapping[str, Any]) -> list[str]:
    """What makes the provider's slice status unusable: an API server URL that is not https, a
    resource a Node cannot offer (`resource_problem`: no resource name, no quantity, or beyond
    what Kubernetes keeps or the scheduler counts) or too many of them, a class offered that is
    no class name (or too many of them)."""
    problems = []
    server = str(((status.get("authParams") or {}).get("apiServer")) or "")
    if server:
        parts = urlsplit(server)
        if parts.scheme != "https" or not parts.hostname:
            problems.append(f"authParams.apiServer {server[:200]!r} is not an https URL")
    resources = status.get("resources") or {}
    if len(resources) > MAX_OFFERED_RESOURCES:
        problems.append(f"resources offers {len(resources)}, more than {MAX_OFFERED_RESOURCES}")
    else:
        problems += [
            f"resources.{problem}"
            for name, value in resources.items()
            if (problem := resource_problem(name, value))
        ]
    for field, name_field in OFFERED_CLASSES.items():
        entries = status.get(field) or []
        if not isinstance(entries, list) or len(entries) > MAX_OFFERED_CLASSES:
            problems.append(f"{field} is not a list of at most {MAX_OFFERED_CLASSES} classes")
            continue
        for entry in entries:
            name = entry.get(name_field) if isinstance(entry, Mapping) else None
            if not isinstance(name, str) or not CLASS_NAME.fullmatch(name):
                problems.append(f"{field} names {str(name)[:64]!r}, not a class name")
    return problems


def trusted_node_labels(
    status: Mapping[str, Any], admins: set[str]
) -> tuple[dict[str, str], list[str]]:
    """The provider's node labels this cluster takes, and what it leaves out, why first: those
    the API server would refuse, reserved ones (`is_reserved_label`), those the consumer's
    administrator set (`admins`), and any beyond the first `MAX_PROVIDER_NODE_LABELS` (by
    key)."""
    offered = status.get("nodeLabels") or {}
    labels, invalid = valid_labels(offered if isinstance(offered, Mapping) else {})
    reserved = sorted(key for key in labels if is_reserved_label(key))
    taken = sorted(key for key in labels if key in admins and key not in reserved)
    kept = sorted(key for key in labels if key not in reserved and key not in taken)
    beyond = kept[MAX_PROVIDER_NODE_LABELS:]
    left_out = [
        f"{why}: {', '.join(keys)}"
        for why, keys in (
            ("not labels", invalid),
            ("reserved for vk and Kubernetes", reserved),
            ("set here by this cluster's administrator", taken),
            (
                f"beyond the {MAX_PROVIDER_NODE_LABELS} a virtual node takes",
                [*(shown(key) for key in beyond[:8]), *(["…"] if len(beyond) > 8 else [])],
            ),
        )
        if keys
    ]
    return {key: labels[key] for key in kept[:MAX_PROVIDER_NODE_LABELS]}, left_out


def forge_virtual_node(
    resource_slice: Mapping[str, Any], provider: str, node_labels: Mapping[str, str]
) -> JSON:
    """The VirtualNode of an accepted slice: same name and namespace, owned by it, with the
    provider's `node_labels` (those `trusted_node_labels` keeps)."""
    metadata, status = resource_slice["metadata"], resource_slice.get("status") or {}
    spec: JSON = {
        "clusterID": provider,
        "createNode": True,
        "kubeconfigSecretRef": {"name": kubeconfig_secret_name(metadata["name"])},
        "labels": {**node_labels, REMOTE_CLUSTER_ID_LABEL: provider},
        "resourceQuota": {"hard": dict(status.get("resources") or {})},
    }
    for field, name_field in OFFERED_CLASSES.items():
        if status.get(field):
            # Only the name and whether it is the default: nothing else of the provider's.
            spec[field] = [
                {
                    name_field: entry[name_field],
                    **({"default": True} if entry.get("default") else {}),
                }
                for entry in status[field]
            ]
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
        self.slices = shared_informer(
            client,
            ResourceSlice.group_version(),
            ResourceSlice.PLURAL,
            label_selector=f"{REPLICATION_LABEL}=true",
        )
        self.secrets = shared_informer(
            client,
            "v1",
            "secrets",
            label_selector=f"{IDENTITY_TYPE_LABEL}={IDENTITY_RESOURCE_SLICE}",
        )
        # The VirtualNodes controller's cache: a slice's VirtualNode deleted wakes the slice.
        self.virtual_nodes = shared_informer(
            client, VirtualNode.group_version(), VirtualNode.PLURAL
        )
        self.controller = Controller(self, workers=2)
        self.applied = AppliedObjects(client)
        self.events = EventRecorder(client, CONTROLLER_MANAGER)
        # What was said of each slice (by uid: a slice made again is told again), to say once.
        self._refused: dict[str, tuple[str, str]] = {}
        self._dropped: dict[str, tuple[str, tuple[str, ...]]] = {}

    async def run(self) -> None:
        self.slices.add_handler(lambda _, obj, __: self.controller.enqueue(object_key(obj)))
        self.secrets.add_handler(self._on_secret)
        self.virtual_nodes.add_handler(self._on_virtual_node)
        await run_with_informers(self.controller, self.slices, self.secrets, self.virtual_nodes)

    def _on_secret(self, _: str, secret: JSON, __: JSON | None) -> None:
        name = (secret["metadata"].get("labels") or {}).get(RESOURCE_SLICE_NAME_LABEL)
        if name:
            self.controller.enqueue(f"{secret['metadata']['namespace']}/{name}")

    def _on_virtual_node(self, event: str, virtual_node: JSON, _: JSON | None) -> None:
        name = (virtual_node["metadata"].get("labels") or {}).get(RESOURCE_SLICE_NAME_LABEL)
        if event == DELETED and name:
            self.controller.enqueue(f"{virtual_node['metadata']['namespace']}/{name}")

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
        status = resource_slice.get("status") or {}
        problems = slice_status_problems(status)
        if problems:
            message = (
                f"the status {provider} wrote on this ResourceSlice is refused: "
                f"{'; '.join(problems)}; nothing of it is used (no kubeconfig, no VirtualNode "
                "update) until the provider fixes it"
            )
            said = (resource_slice["metadata"].get("uid", ""), message)
            if self._refused.get(key) != said:
                self._refused[key] = said
                log.warning("resource slice status refused", slice=key, problems=problems)
                await self.events.record(resource_slice, WARNING, "UntrustedStatus", message)
            return Result()
        self._refused.pop(key, None)
        params = status.get("authParams") or {}
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
            path = resource_path(
                VirtualNode.group_version(), VirtualNode.PLURAL, namespace=namespace, name=name
            )
            try:
                existing: JSON | None = await self.client.get(path)
            except NotFound:
                existing = None
            labels, dropped = trusted_node_labels(status, labels_set_by_others(existing))
            told = (resource_slice["metadata"].get("uid", ""), tuple(dropped))
            if dropped and self._dropped.get(key) != told:
                self._dropped[key] = told
                await self.events.record(
                    resource_slice,
                    WARNING,
                    "NodeLabelsIgnored",
                    f"node labels of {provider} not put on virtual node {name}: "
                    f"{'; '.join(dropped)}",
                )
            if existing is None:
                # Never made, or deleted (by hand: it is the slice's, and goes with the slice):
                # what was applied before is not there.
                self.applied.forget(path)
            await self.applied.apply(path, forge_virtual_node(resource_slice, provider, labels))
            if existing is None:
                await self.events.record(
                    resource_slice,
                    NORMAL,
                    "VirtualNodeCreated",
                    f"VirtualNode {name} created for this ResourceSlice; it goes with the "
                    "ResourceSlice (to remove it, delete the ResourceSlice, or `vkctl unpeer`)",
                )
        return Result()


def _subject(csr: bytes) -> tuple[str, tuple[str, ...]] | None:
    try:
        return csr_subject(csr)
    except ValueError:
        return None
