"""ForeignClusters: one per peered cluster, whose status says what this cluster sees of the
peering, for `kubectl get foreignclusters` (the tutorial's columns).

Everything is derived from what is here: an outgoing peering (we consume) is our control-plane
identity Secret for that cluster and its virtual nodes; an incoming one (we provide) is the
tenant namespace kept for that consumer, with the consumer's Tenant there not being deleted
(once it is, the peering is ending: the Tenant controller removes the ForeignCluster, which
must not come back). vk provides no networking: that module is reported disabled, and its
column stays empty.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from vk.api.authentication import Tenant
from vk.api.constants import (
    CONSUMER_TENANT_LABEL,
    IDENTITY_CONTROL_PLANE,
    IDENTITY_TYPE_LABEL,
    REMOTE_CLUSTER_ID_LABEL,
    TENANT_NAMESPACE_LABEL,
    TYPE_LABEL,
    TYPE_VIRTUAL_NODE,
    control_plane_identity_provider,
    tenant_namespace,
)
from vk.api.core import ForeignCluster
from vk.kube.client import JSON, AlreadyExists, KubeClient, resource_path
from vk.kube.conditions import forge_condition
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.informer import shared_informer
from vk.kube.kubeconfig import InvalidKubeconfig, connection_from_secret

log = structlog.get_logger("vk.controllers.foreignclusters")

ESTABLISHED, NONE, PENDING, NOT_READY, ERROR = (
    "Established",
    "None",
    "Pending",
    "NotReady",
    "Error",
)


def forge_foreign_cluster_status(
    cluster_id: str,
    *,
    outgoing: bool,
    incoming: bool,
    virtual_nodes_ready: Iterable[bool],
    api_server_url: str | None,
    previous: Mapping[str, Any] | None,
    now: datetime.datetime,
    identity_problem: str | None = None,
) -> JSON:
    """The status of the ForeignCluster of `cluster_id`; transition times kept while a
    condition's status stays. `identity_problem`: why our control-plane identity's Secret
    cannot be used (it is there, so `outgoing`, but nothing is replicated with it)."""
    before = {
        c.get("type"): c
        for module in ((previous or {}).get("modules") or {}).values()
        for c in (module or {}).get("conditions") or []
    }

    def condition(kind: str, status: str, message: str) -> JSON:
        return forge_condition(before.get(kind), kind, status, message, now)

    ready = list(virtual_nodes_ready)
    if not ready:
        offloading = condition("OffloadingVirtualNodeStatus", NONE, "no virtual node")
    elif all(ready):
        offloading = condition(
            "OffloadingVirtualNodeStatus", ESTABLISHED, f"{len(ready)} virtual node(s) Ready"
        )
    else:
        offloading = condition(
            "OffloadingVirtualNodeStatus",
            NOT_READY,
            f"{ready.count(False)} of {len(ready)} virtual node(s) not Ready",
        )
    role = (
        "ConsumerAndProvider"
        if outgoing and incoming
        else "Provider"
        if outgoing
        else "Consumer"
        if incoming
        else "Unknown"
    )
    status: JSON = {
        "role": role,
        "modules": {
            "networking": {"enabled": False},
            "authentication": {
                "enabled": True,
                "conditions": [
                    condition(
                        "AuthIdentityControlPlaneStatus",
                        ERROR if identity_problem else ESTABLISHED if outgoing else NONE,
                        f"our control-plane identity on {cluster_id} cannot be used: "
                        f"{identity_problem}"
                        if identity_problem
                        else f"our control-plane identity on {cluster_id}"
                        if outgoing
                        else f"no identity of ours on {cluster_id}",
                    ),
                    condition(
                        "AuthTenantStatus",
                        ESTABLISHED if incoming else NONE,
                        f"{cluster_id} consumes resources here"
                        if incoming
                        else f"{cluster_id} consumes nothing here",
                    ),
                ],
            },
            "offloading": {"enabled": outgoing, "conditions": [offloading] if outgoing else []},
        },
        "tenantNamespace": {"local": tenant_namespace(cluster_id)},
    }
    if api_server_url:
        status["apiServerUrl"] = api_server_url
    return status


class ForeignClusters(Reconciler):
    """Keys are peered cluster IDs."""

    name = "foreignclusters"

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.foreign_clusters = shared_informer(
            client, ForeignCluster.group_version(), ForeignCluster.PLURAL
        )
        self.identities = shared_informer(
            client,
            "v1",
            "secrets",
            label_selector=f"{IDENTITY_TYPE_LABEL}={IDENTITY_CONTROL_PLANE}",
        )
        self.tenants = shared_informer(
            client, "v1", "namespaces", label_selector=f"{TENANT_NAMESPACE_LABEL}=true"
        )
        self.tenant_records = shared_informer(client, Tenant.group_version(), Tenant.PLURAL)
        self.nodes = shared_informer(
            client, "v1", "nodes", label_selector=f"{TYPE_LABEL}={TYPE_VIRTUAL_NODE}"
        )
        self.controller = Controller(self)
        self._identity_problems: dict[str, tuple[str, str | None]] = {}  # uid -> (version, why)

    def _enqueue_remote(self, _: str, obj: JSON, __: JSON | None) -> None:
        cluster_id = (obj["metadata"].get("labels") or {}).get(REMOTE_CLUSTER_ID_LABEL)
        if cluster_id:
            self.controller.enqueue(cluster_id)

    async def run(self) -> None:
        self.foreign_clusters.add_handler(
            lambda _, obj, __: self.controller.enqueue(obj["metadata"]["name"])
        )
        for informer in (self.identities, self.tenants, self.nodes):
            informer.add_handler(self._enqueue_remote)
        self.tenant_records.add_handler(self._enqueue_consumer)
        await run_with_informers(
            self.controller,
            self.foreign_clusters,
            self.identities,
            self.tenants,
            self.tenant_records,
            self.nodes,
        )

    def _enqueue_consumer(self, _: str, tenant: JSON, __: JSON | None) -> None:
        cluster_id = (tenant.get("spec") or {}).get("clusterID")
        if cluster_id:
            self.controller.enqueue(cluster_id)

    def _identity_problem(self, secret: JSON) -> str | None:
        """Why a control-plane kubeconfig Secret cannot be used (None: it can), read once per
        version of the Secret: the replication controller refuses the same Secret, and only
        logs it."""
        metadata = secret["metadata"]
        version = metadata.get("resourceVersion", "")
        known = self._identity_problems.get(metadata.get("uid", ""))
        if known is not None and known[0] == version:
            return known[1]
        try:
            connection_from_secret(secret, f"{metadata.get('namespace')}/{metadata.get('name')}")
            problem = None
        except InvalidKubeconfig as error:
            problem = str(error)
        self._identity_problems[metadata.get("uid", "")] = (version, problem)
        present = {s["metadata"].get("uid") for s in self.identities.store.objects()}
        for gone in set(self._identity_problems) - present:
            del self._identity_problems[gone]
        return problem

    async def reconcile(self, key: str) -> Result:
        cluster_id = key
        tenant = self.tenants.store.get(tenant_namespace(cluster_id))
        identity = next(
            (
                s
                for s in self.identities.store.objects()
                if control_plane_identity_provider(s) == cluster_id
            ),
            None,
        )
        outgoing = identity is not None
        incoming = (
            tenant is not None
            and not tenant["metadata"].get("deletionTimestamp")
            and (tenant["metadata"].get("labels") or {}).get(CONSUMER_TENANT_LABEL) == "true"
            and any(
                (record.get("spec") or {}).get("clusterID") == cluster_id
                and not record["metadata"].get("deletionTimestamp")
                for record in self.tenant_records.store.objects()
                if record["metadata"].get("namespace") == tenant_namespace(cluster_id)
            )
        )
        foreign_cluster = self.foreign_clusters.store.get(cluster_id)
        path = resource_path(ForeignCluster.group_version(), ForeignCluster.PLURAL, name=cluster_id)
        if not outgoing and not incoming:
            return Result()  # no peering (any more): `vkctl unpeer` removes the ForeignCluster
        if foreign_cluster is None:
            with contextlib.suppress(AlreadyExists):
                await self.client.create(
                    resource_path(ForeignCluster.group_version(), ForeignCluster.PLURAL),
                    {
                        "apiVersion": ForeignCluster.group_version(),
                        "kind": ForeignCluster.KIND,
                        "metadata": {
                            "name": cluster_id,
                            "labels": {REMOTE_CLUSTER_ID_LABEL: cluster_id},
                        },
                        "spec": {"clusterID": cluster_id},
                    },
                )
            return Result()  # its event brings us back for the status
        ready = [
            any(
                c.get("type") == "Ready" and c.get("status") == "True"
                for c in (node.get("status") or {}).get("conditions") or []
            )
            for node in self.nodes.store.objects()
            if (node["metadata"].get("labels") or {}).get(REMOTE_CLUSTER_ID_LABEL) == cluster_id
        ]
        status = forge_foreign_cluster_status(
            cluster_id,
            outgoing=outgoing,
            incoming=incoming,
            virtual_nodes_ready=ready,
            api_server_url=None,
            previous=foreign_cluster.get("status"),
            now=datetime.datetime.now(datetime.UTC),
            identity_problem=None if identity is None else self._identity_problem(identity),
        )
        if status != foreign_cluster.get("status"):
            await self.client.merge_patch(f"{path}/status", {"status": status})
        return Result()
