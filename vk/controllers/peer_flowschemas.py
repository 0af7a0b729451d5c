"""API Priority and Fairness for the other side of each peering: the requests a peer's
identities make to this cluster's API server wait in a priority level of their own.

Without it, the API server files a consumer's identities on a provider (client certificates,
no ServiceAccount) under `global-default`, the level of every person and tool outside the
cluster, each ResourceSlice identity a flow of its own; and a consumer's virtual kubelets under
`workload-low`, the level of every controller run as a ServiceAccount. A peer that floods (a
consumer with many ResourceSlices; a provider flipping its pods' readiness so the virtual
kubelet writes their statuses home) would take those levels' seats from the cluster's own users.

vk's chart gives peers the priority level `vk-peers` and two FlowSchemas into it, each telling
flows apart by user, so peers queue fairly among themselves and take from the cluster's own
levels only the seats those lend while idle:

- `vk-tenants` (provider): each Tenant's consumer: its control-plane user and the group of its
  ResourceSlice identities;
- `vk-virtual-kubelets` (consumer): each VirtualNode's virtual kubelet ServiceAccount.

The chart makes both without rules (a FlowSchema without rules matches nothing, and `helm
upgrade` leaves alone a field its templates never set); this controller writes their rules
from the Tenants and VirtualNodes, and nothing else of them. Its RBAC names these two and no
other FlowSchema, and it never creates one: a right to create FlowSchemas is one to exempt
anyone from Priority and Fairness.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import structlog

from vk.api.authentication import Tenant
from vk.api.constants import control_plane_user, tenant_group, virtual_kubelet_service_account
from vk.api.offloading import VirtualNode
from vk.controllers.tenants import tenant_consumer
from vk.kube.client import JSON, KubeClient, resource_path
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.informer import Informer, shared_informer

log = structlog.get_logger("vk.controllers.peer_flowschemas")

FLOWCONTROL_API = "flowcontrol.apiserver.k8s.io/v1"
PEERS_PRIORITY_LEVEL = "vk-peers"
TENANTS_FLOW_SCHEMA = "vk-tenants"
VIRTUAL_KUBELETS_FLOW_SCHEMA = "vk-virtual-kubelets"
# A FlowSchema the chart should have made and that is missing is looked for again this often
# (its informer's event brings the controller back sooner).
MISSING_RECHECK = 60.0


def tenant_subjects(tenants: Iterable[Mapping[str, Any]]) -> list[JSON]:
    """Who speaks for each consumer a Tenant here stands for: its control-plane user and the
    group of its ResourceSlice identities. Both names are vk's prefix and the cluster ID, so
    no Tenant can name any other user or group."""
    subjects: list[JSON] = []
    for consumer in sorted({c for tenant in tenants if (c := tenant_consumer(tenant))}):
        subjects.append({"kind": "User", "user": {"name": control_plane_user(consumer)}})
        subjects.append({"kind": "Group", "group": {"name": tenant_group(consumer)}})
    return subjects


def virtual_kubelet_subjects(virtual_nodes: Iterable[Mapping[str, Any]]) -> list[JSON]:
    """The ServiceAccount each VirtualNode's virtual kubelet runs as (in its namespace)."""
    accounts = sorted(
        (node["metadata"]["namespace"], virtual_kubelet_service_account(node["metadata"]["name"]))
        for node in virtual_nodes
    )
    return [
        {"kind": "ServiceAccount", "serviceAccount": {"namespace": namespace, "name": name}}
        for namespace, name in dict.fromkeys(accounts)
    ]


def forge_flow_schema_rules(subjects: list[JSON]) -> list[JSON]:
    """A FlowSchema's rules taking every request of `subjects`, whatever it asks for; none
    without subjects (a rule must name one)."""
    if not subjects:
        return []
    return [
        {
            "subjects": subjects,
            "resourceRules": [
                {
                    "verbs": ["*"],
                    "apiGroups": ["*"],
                    "resources": ["*"],
                    "clusterScope": True,
                    "namespaces": ["*"],
                }
            ],
            "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
        }
    ]


def flow_schema_path(name: str) -> str:
    return resource_path(FLOWCONTROL_API, "flowschemas", name=name)


class PeerFlowSchemas(Reconciler):
    """Keys are the two FlowSchemas' names."""

    name = "peer-flowschemas"

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.tenants = shared_informer(client, Tenant.group_version(), Tenant.PLURAL)
        self.virtual_nodes = shared_informer(
            client, VirtualNode.group_version(), VirtualNode.PLURAL
        )
        # Each FlowSchema read by its name alone: the RBAC grants these two and no other.
        self.flow_schemas = {
            name: shared_informer(
                client, FLOWCONTROL_API, "flowschemas", field_selector=f"metadata.name={name}"
            )
            for name in (TENANTS_FLOW_SCHEMA, VIRTUAL_KUBELETS_FLOW_SCHEMA)
        }
        self.subjects: dict[str, Callable[[], list[JSON]]] = {
            TENANTS_FLOW_SCHEMA: lambda: tenant_subjects(self.tenants.store.objects()),
            VIRTUAL_KUBELETS_FLOW_SCHEMA: lambda: virtual_kubelet_subjects(
                self.virtual_nodes.store.objects()
            ),
        }
        self.controller = Controller(self)
        self._missing: set[str] = set()

    async def run(self) -> None:
        def enqueuing(name: str) -> Callable[[str, JSON, JSON | None], None]:
            return lambda _, __, ___: self.controller.enqueue(name)

        self.tenants.add_handler(enqueuing(TENANTS_FLOW_SCHEMA))
        self.virtual_nodes.add_handler(enqueuing(VIRTUAL_KUBELETS_FLOW_SCHEMA))
        for name, informer in self.flow_schemas.items():
            informer.add_handler(enqueuing(name))
            # Looked at once the caches are whole, even if it is missing (no event then).
            self.controller.enqueue(name)
        informers: list[Informer] = [self.tenants, self.virtual_nodes, *self.flow_schemas.values()]
        await run_with_informers(self.controller, *informers)

    async def reconcile(self, key: str) -> Result:
        flow_schema = self.flow_schemas[key].store.get(key)
        if flow_schema is None:
            if key not in self._missing:
                self._missing.add(key)
                log.warning(
                    "FlowSchema missing: peers' requests wait with the cluster's own; "
                    "`helm upgrade` vk's chart to make it again",
                    flow_schema=key,
                )
            return Result(requeue_after=MISSING_RECHECK)
        self._missing.discard(key)
        subjects = self.subjects[key]()
        rules = forge_flow_schema_rules(subjects)
        if ((flow_schema.get("spec") or {}).get("rules") or []) == rules:
            return Result()
        # Rules alone, whole (a merge patch replaces a list): the rest is the chart's.
        await self.client.merge_patch(flow_schema_path(key), {"spec": {"rules": rules or None}})
        log.info("FlowSchema rules written", flow_schema=key, subjects=len(subjects))
        return Result()
