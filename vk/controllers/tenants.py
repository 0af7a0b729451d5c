"""The provider's Tenants: one per consumer, in the tenant namespace kept for it (Liqo's
`authentication.liqo.io` Tenant). A finalizer holds each one; deleting it ends the peering on
this side, whoever asks (the consumer with its control-plane identity, as `vkctl unpeer
out-of-band` does, or an administrator here): everything vk made for that consumer goes, then
the tenant namespace.

The teardown, one step per pass, each waiting for the one before:
1. the consumer's control-plane identity loses every right but reading its Tenant, so it
   cannot replicate anything again meanwhile, and can still see the teardown go on;
2. its replicated ResourceSlices and NamespaceMaps are deleted: their controllers remove the
   CSRs and Quotas, and the twin namespaces (with what runs there);
3. what those controllers would have removed and has not gone (twin namespaces, Quotas, CSRs,
   the control-plane identity's request) is removed here;
4. this cluster's ForeignCluster of the consumer goes, and the tenant namespace (the
   identity's Role and RoleBinding with it); unless this cluster consumes from that cluster in
   turn: that peering lives in the same namespace, which then loses only the identity's RBAC
   and its consumer mark;
5. the finalizer goes.

A Tenant's `spec.tenantCondition` is the provider's say (`vkctl cordon|drain|uncordon
tenant`): Cordoned and Drained cordon its Quotas and deny new resources (the ResourceSlice
controller); Drained also deletes every ShadowPod in its twin namespaces, here, until none is
left.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from vk.api.authentication import ResourceSlice, Tenant, TenantCondition
from vk.api.constants import (
    CONSUMER_TENANT_LABEL,
    CONTROL_PLANE_ROLE,
    REMOTE_CLUSTER_ID_LABEL,
    REPLICATED_LABEL,
    RESOURCE_SLICE_NAME_LABEL,
    control_plane_request_name,
    control_plane_secret_name,
    control_plane_user,
    tenant_namespace,
)
from vk.api.core import ForeignCluster
from vk.api.meta import KubeObject
from vk.api.offloading import NamespaceMap, Quota, ShadowPod
from vk.controllers.csr import CSR_API
from vk.controllers.provider_namespacemaps import (
    TWINS_BY_TENANT,
    tenant_of_twin,
    twin_namespaces_of,
)
from vk.controllers.provider_resourceslices import tenant_condition
from vk.controllers.replication import FINALIZER as REPLICATION_FINALIZER
from vk.kube.client import JSON, KubeClient, NotFound, resource_path
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.events import WARNING, EventRecorder
from vk.kube.informer import Informer, object_key, shared_informer, split_key

log = structlog.get_logger("vk.controllers.tenants")

FINALIZER = "tenant.liqo.io/finalizer"
RETRY = 2.0
DRAINED_RECHECK = 30.0
RBAC_API = "rbac.authorization.k8s.io/v1"


def tenant_consumer(tenant: Mapping[str, Any]) -> str | None:
    """The consumer a Tenant stands for, when it sits in that consumer's tenant namespace; None
    for one anywhere else (it stands for nothing vk made, so its deletion removes nothing)."""
    consumer = (tenant.get("spec") or {}).get("clusterID")
    if not consumer or tenant["metadata"].get("namespace") != tenant_namespace(consumer):
        return None
    return str(consumer)


def forge_control_plane_rbac(consumer_id: str, *, revoked: bool = False) -> list[JSON]:
    """The control-plane identity's rights on the provider, in the consumer's tenant namespace:
    its replicated ResourceSlices and NamespaceMaps, reading (never writing) their status, and
    reading or deleting its own Tenant (how it ends the peering). Once `revoked` (the Tenant is
    being deleted), only reading its Tenant, to follow the teardown."""
    namespace = tenant_namespace(consumer_id)
    own_tenant: JSON = {
        "apiGroups": [Tenant.GROUP],
        "resources": [Tenant.PLURAL],
        "resourceNames": [consumer_id],
        "verbs": ["get"] if revoked else ["get", "delete"],
    }
    replication: list[JSON] = [
        {
            "apiGroups": [ResourceSlice.GROUP],
            "resources": [ResourceSlice.PLURAL],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": [NamespaceMap.GROUP],
            "resources": [NamespaceMap.PLURAL],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"],
        },
        {
            "apiGroups": [ResourceSlice.GROUP],
            "resources": [f"{ResourceSlice.PLURAL}/status"],
            "verbs": ["get"],
        },
        {
            "apiGroups": [NamespaceMap.GROUP],
            "resources": [f"{NamespaceMap.PLURAL}/status"],
            "verbs": ["get"],
        },
    ]
    return [
        {
            "apiVersion": RBAC_API,
            "kind": "Role",
            "metadata": {"name": CONTROL_PLANE_ROLE, "namespace": namespace},
            "rules": [own_tenant] if revoked else [*replication, own_tenant],
        },
        {
            "apiVersion": RBAC_API,
            "kind": "RoleBinding",
            "metadata": {"name": CONTROL_PLANE_ROLE, "namespace": namespace},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": CONTROL_PLANE_ROLE,
            },
            "subjects": [
                {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "User",
                    "name": control_plane_user(consumer_id),
                }
            ],
        },
    ]


def in_namespace(objects: Iterable[JSON], namespace: str) -> list[JSON]:
    return [obj for obj in objects if obj["metadata"].get("namespace") == namespace]


def deleting(obj: Mapping[str, Any]) -> bool:
    return bool(obj["metadata"].get("deletionTimestamp"))


class Tenants(Reconciler):
    """Keys are the Tenants' `namespace/name`."""

    name = "tenants"

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.tenants = shared_informer(client, Tenant.group_version(), Tenant.PLURAL)
        self.replicated: dict[type[KubeObject], Informer] = {
            kind: shared_informer(
                client, kind.group_version(), kind.PLURAL, label_selector=f"{REPLICATED_LABEL}=true"
            )
            for kind in (ResourceSlice, NamespaceMap)
        }
        # Tenant namespaces and twin namespaces alike carry the other cluster's ID.
        self.namespaces = shared_informer(
            client, "v1", "namespaces", label_selector=REMOTE_CLUSTER_ID_LABEL
        )
        self.namespaces.store.add_indexers({TWINS_BY_TENANT: tenant_of_twin})
        self.events = EventRecorder(client, "tenant-controller")
        self.controller = Controller(self, workers=2)
        self._misplaced: set[str] = set()

    def _enqueue_tenants_of(self, _: str, obj: JSON, __: JSON | None) -> None:
        """Something made for a consumer changed: its Tenants may be waiting for it."""
        consumer = (obj["metadata"].get("labels") or {}).get(REMOTE_CLUSTER_ID_LABEL)
        if not consumer:
            return
        for tenant in in_namespace(self.tenants.store.objects(), tenant_namespace(consumer)):
            self.controller.enqueue(object_key(tenant))

    async def run(self) -> None:
        self.tenants.add_handler(lambda _, obj, __: self.controller.enqueue(object_key(obj)))
        for informer in (*self.replicated.values(), self.namespaces):
            informer.add_handler(self._enqueue_tenants_of)
        await run_with_informers(
            self.controller, self.tenants, *self.replicated.values(), self.namespaces
        )

    async def reconcile(self, key: str) -> Result:
        tenant = self.tenants.store.get(key)
        if tenant is None:
            self._misplaced.discard(key)
            return Result()
        namespace, name = split_key(key)
        assert namespace is not None
        path = resource_path(Tenant.group_version(), Tenant.PLURAL, namespace=namespace, name=name)
        consumer = tenant_consumer(tenant)
        if not deleting(tenant):
            if consumer is None:
                await self._report_misplaced(key, tenant)
                return Result()
            if await self.client.set_finalizer(path, tenant, FINALIZER, present=True):
                return Result()  # its event brings us back
            if (tenant.get("status") or {}).get("tenantNamespace") != namespace:
                await self.client.merge_patch(
                    f"{path}/status", {"status": {"tenantNamespace": namespace}}
                )
            if tenant_condition(tenant) is TenantCondition.DRAINED:
                # Looked at again while drained: a ShadowPod admitted just before the cordon
                # reached the webhook goes too.
                remaining = await self._drain(namespace)
                return Result(requeue_after=RETRY if remaining else DRAINED_RECHECK)
            return Result()
        if FINALIZER not in (tenant["metadata"].get("finalizers") or []):
            return Result()
        if consumer is not None:
            waiting_for = await self._tear_down(consumer, namespace)
            if waiting_for:
                log.info("tenant teardown waiting", tenant=key, waiting_for=waiting_for)
                return Result(requeue_after=RETRY)
        with contextlib.suppress(NotFound):  # a second look from a cache behind: gone already
            await self.client.set_finalizer(path, tenant, FINALIZER, present=False)
            log.info("tenant removed", tenant=key)
        return Result()

    async def _drain(self, namespace: str) -> int:
        """Deletes the ShadowPods of a drained tenant (their Pods go with them, with the grace
        period they ask for); how many are still there. Its Quotas, cordoned, admit none
        again; one admitted just before the cordon reached the webhook goes on the next pass."""
        remaining = 0
        for twin in twin_namespaces_of(self.namespaces.store, namespace):
            twin_name = twin["metadata"]["name"]
            for shadow in await self._list(
                resource_path(ShadowPod.group_version(), ShadowPod.PLURAL, namespace=twin_name)
            ):
                remaining += 1
                if not deleting(shadow):
                    await self._delete(self._object_path(ShadowPod, shadow))
        if remaining:
            log.info("draining tenant", namespace=namespace, shadow_pods=remaining)
        return remaining

    async def _report_misplaced(self, key: str, tenant: JSON) -> None:
        if key in self._misplaced:
            return
        self._misplaced.add(key)
        await self.events.record(
            tenant,
            WARNING,
            "TenantMisplaced",
            "a Tenant stands for the consumer in spec.clusterID and lives in its tenant "
            "namespace (liqo-tenant-<clusterID>): vk ignores this one",
        )

    async def _tear_down(self, consumer: str, namespace: str) -> str | None:
        """One pass of the teardown; what it still waits for, or None when only the finalizer
        is left."""
        await self._revoke(consumer, namespace)

        replicated = [
            (kind, obj)
            for kind, informer in self.replicated.items()
            for obj in in_namespace(informer.store.objects(), namespace)
        ]
        for kind, obj in replicated:
            path = self._object_path(kind, obj)
            if not deleting(obj):
                await self._delete(path)
            elif REPLICATION_FINALIZER in (obj["metadata"].get("finalizers") or []):
                # The consumer's finalizer, should a copy carry it: the consumer is gone.
                await self.client.set_finalizer(path, obj, REPLICATION_FINALIZER, present=False)
        if replicated:
            return f"{len(replicated)} ResourceSlice(s) and NamespaceMap(s) of {consumer}"

        twins = twin_namespaces_of(self.namespaces.store, namespace)
        for twin in twins:
            if not deleting(twin):
                await self._delete(resource_path("v1", "namespaces", name=twin["metadata"]["name"]))
        if twins:
            return "twin namespaces " + ", ".join(t["metadata"]["name"] for t in twins)

        quotas = [
            quota
            for quota in await self._list(
                resource_path(Quota.group_version(), Quota.PLURAL, namespace=namespace)
            )
            if RESOURCE_SLICE_NAME_LABEL in (quota["metadata"].get("labels") or {})
        ]
        for quota in quotas:
            if not deleting(quota):
                await self._delete(self._object_path(Quota, quota))
        if quotas:
            return "Quotas " + ", ".join(q["metadata"]["name"] for q in quotas)

        requests = await self._list(
            resource_path(CSR_API, "certificatesigningrequests"),
            {"labelSelector": f"{REMOTE_CLUSTER_ID_LABEL}={consumer},{RESOURCE_SLICE_NAME_LABEL}"},
        )
        for name in [r["metadata"]["name"] for r in requests] + [
            control_plane_request_name(consumer)
        ]:
            await self._delete(resource_path(CSR_API, "certificatesigningrequests", name=name))

        tenant_ns = self.namespaces.store.get(namespace)
        if await self._consumes_from(consumer, namespace):
            for plural in ("rolebindings", "roles"):
                await self._delete(self._rbac_path(namespace, plural))
            labels = ((tenant_ns or {}).get("metadata") or {}).get("labels") or {}
            if CONSUMER_TENANT_LABEL in labels:
                await self.client.merge_patch(
                    resource_path("v1", "namespaces", name=namespace),
                    {"metadata": {"labels": {CONSUMER_TENANT_LABEL: None}}},
                )
            return None
        await self._delete_foreign_cluster(consumer)
        if tenant_ns is not None and not deleting(tenant_ns):
            # With the control-plane RBAC; terminating, it waits for this Tenant's finalizer,
            # removed next.
            await self._delete(resource_path("v1", "namespaces", name=namespace))
        return None

    async def _revoke(self, consumer: str, namespace: str) -> None:
        """Narrows the control-plane identity's Role to reading its Tenant; a Role already
        removed stays so."""
        role, _ = forge_control_plane_rbac(consumer, revoked=True)
        path = self._rbac_path(namespace, "roles")
        try:
            current = await self.client.get(path)
        except NotFound:
            return
        if current.get("rules") != role["rules"]:
            await self.client.apply(path, role)

    async def _delete_foreign_cluster(self, cluster_id: str) -> None:
        """This cluster's ForeignCluster of `cluster_id`, if vk made it."""
        path = resource_path(ForeignCluster.group_version(), ForeignCluster.PLURAL, name=cluster_id)
        try:
            foreign_cluster = await self.client.get(path)
        except NotFound:
            return
        if (foreign_cluster["metadata"].get("labels") or {}).get(
            REMOTE_CLUSTER_ID_LABEL
        ) == cluster_id:
            await self._delete(path)

    async def _consumes_from(self, cluster_id: str, namespace: str) -> bool:
        """This cluster's own peering with `cluster_id` as its provider lives in `namespace`
        too (its control-plane identity there)."""
        try:
            await self.client.get(
                resource_path(
                    "v1", "secrets", namespace=namespace, name=control_plane_secret_name(cluster_id)
                )
            )
        except NotFound:
            return False
        return True

    async def _list(self, path: str, params: dict[str, str] | None = None) -> list[JSON]:
        items, _ = await self.client.list_all(path, params)
        return items

    async def _delete(self, path: str) -> None:
        with contextlib.suppress(NotFound):
            await self.client.delete(path)

    @staticmethod
    def _rbac_path(namespace: str, plural: str) -> str:
        return resource_path(RBAC_API, plural, namespace=namespace, name=CONTROL_PLANE_ROLE)

    @staticmethod
    def _object_path(kind: type[KubeObject], obj: JSON) -> str:
        metadata = obj["metadata"]
        return resource_path(
            kind.group_version(),
            kind.PLURAL,
            namespace=metadata["namespace"],
            name=metadata["name"],
        )
