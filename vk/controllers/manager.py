"""`vk controller-manager`: one process per cluster running vk's reconcilers, leader-elected,
with metrics and health. Every cluster may be a consumer and a provider at once, so it runs
both roles:

- consumer: replication of ResourceSlices and NamespaceMaps to the providers, the
  ResourceSlice identities and VirtualNodes, the virtual kubelets (through a launcher: a
  Deployment each, or a local process in the playground) and their serving-certificate
  approver, the ForeignClusters, and namespace offloading (which providers get which namespace);
- provider: the answer to what consumers replicate here: ResourceSlices (identity, resources,
  Quota), NamespaceMaps (twin namespaces, their Pod Security level, and the consumer's rights
  in them), ShadowPods (the Pods consumers ask for), the Quotas' ledgers (counted again) and
  Tenants (everything made for a
  consumer, removed when its Tenant is deleted).
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from vk.api.constants import (
    CLUSTER_IDENTITY_CONFIGMAP,
    CONTROLLER_MANAGER,
    DEFAULT_MAX_RESOURCE_SLICES,
    DEFAULT_SHADOW_ENDPOINTSLICE_WORKERS,
    DEFAULT_SHADOW_POD_WORKERS,
    DEFAULT_TENANT_POD_SECURITY,
    VK_NAMESPACE,
)
from vk.api.identity import ClusterIdentity, parse_cluster_identity
from vk.api.offloading import LimitsEnforcement
from vk.controllers.consumer_resourceslices import ConsumerResourceSlices
from vk.controllers.csr import ServingCSRApprover
from vk.controllers.foreignclusters import ForeignClusters
from vk.controllers.namespaceoffloading import NamespaceOffloadings
from vk.controllers.offloaded_pod_availability import OffloadedPodAvailability
from vk.controllers.peer_flowschemas import PeerFlowSchemas
from vk.controllers.provider_namespacemaps import (
    DEFAULT_MAX_TWIN_NAMESPACES,
    NEW_TWIN_INTERVAL_SECONDS,
    ProviderNamespaceMaps,
)
from vk.controllers.provider_node_failure import ProviderNodeFailure
from vk.controllers.provider_quotas import ProviderQuotaUsage
from vk.controllers.provider_resourceslices import (
    DEFAULT_RESOURCES,
    NEW_SLICE_INTERVAL_SECONDS,
    ProviderResourceSlices,
    ProviderSettings,
)
from vk.controllers.provider_shadowendpointslices import ProviderShadowEndpointSlices
from vk.controllers.provider_shadowpods import UNANSWERED_GRACE_SECONDS, ProviderShadowPods
from vk.controllers.replication import Replicator
from vk.controllers.tenants import Tenants
from vk.controllers.virtualnodes import Launcher, VirtualNodeReconciler
from vk.kube import daemon
from vk.kube.client import KubeClient, resource_path
from vk.kube.informer import informer_scope
from vk.kube.kubeconfig import default_connection
from vk.kube.leaderelection import LeaderElector, run_while_leading
from vk.kube.observability import MetricsServer, configure_logging

log = structlog.get_logger("vk.controllers.manager")


@dataclass(frozen=True)
class ManagerOptions:
    kubeconfig: str | None = None
    metrics_address: str = ":8082"
    namespace: str = VK_NAMESPACE
    # What consumers reach this cluster's API server at (default: this kubeconfig's server).
    api_server_url: str | None = None
    default_node_resources: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    default_limits_enforcement: LimitsEnforcement = LimitsEnforcement.NONE
    # The Pod Security Standard level of the twin namespaces of this provider's tenants.
    tenant_pod_security: str = DEFAULT_TENANT_POD_SECURITY
    # Namespace names (a trailing * matches any ending) no consumer may get, besides vk's.
    reserved_namespaces: tuple[str, ...] = ()
    # The core ResourceQuota of every twin namespace (None: the defaults; empty: none).
    tenant_namespace_quota: dict[str, str] | None = None
    # The twin namespaces one consumer may have (provider; its tenant namespace may say more).
    max_twin_namespaces: int = DEFAULT_MAX_TWIN_NAMESPACES
    # The ResourceSlices of one consumer answered (provider; its tenant namespace may say more).
    max_resource_slices: int = DEFAULT_MAX_RESOURCE_SLICES
    # How long a deleted slice's ShadowPods outlive its Quota (provider).
    deleted_slice_drain_grace: float = UNANSWERED_GRACE_SECONDS
    # After its count's worth at once, one new slice of a consumer answered per this (provider).
    new_resource_slice_interval: float = NEW_SLICE_INTERVAL_SECONDS
    # After its count's worth at once, one new twin namespace of a consumer per this (provider).
    new_twin_namespace_interval: float = NEW_TWIN_INTERVAL_SECONDS
    # How virtual kubelets run (None: no VirtualNode controller in this process).
    launcher: Callable[[KubeClient], Launcher] | None = None
    # The loadBalancerClasses offered to consumers (provider), the first the default.
    load_balancer_classes: tuple[str, ...] = ()
    # Terminating Pods of ShadowPods on a Node not Ready are deleted at once (provider).
    node_failure_controller: bool = False
    # The ShadowPods and ShadowEndpointSlices reconciled at once (provider).
    shadow_pod_workers: int = DEFAULT_SHADOW_POD_WORKERS
    shadow_endpointslice_workers: int = DEFAULT_SHADOW_ENDPOINTSLICE_WORKERS


async def read_identity(client: KubeClient, namespace: str) -> ClusterIdentity:
    configmap = await client.get(
        resource_path("v1", "configmaps", namespace=namespace, name=CLUSTER_IDENTITY_CONFIGMAP)
    )
    return parse_cluster_identity(configmap)


async def run_manager(options: ManagerOptions) -> int:
    connection = default_connection(options.kubeconfig)
    client = KubeClient(connection, name="home")
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    elector = LeaderElector(
        client, namespace=options.namespace, name=CONTROLLER_MANAGER, identity=identity
    )
    working = asyncio.Event()
    metrics = MetricsServer(options.metrics_address, ready=working.is_set)

    async def work() -> None:
        cluster = await read_identity(client, options.namespace)
        settings = ProviderSettings(
            cluster_id=cluster.cluster_id,
            cluster_labels=dict(cluster.labels),
            api_server_url=options.api_server_url or connection.server,
            ca_pem=connection.ca_pem or b"",
            default_resources=dict(options.default_node_resources),
            limits_enforcement=options.default_limits_enforcement,
            load_balancer_classes=options.load_balancer_classes,
            max_resource_slices=options.max_resource_slices,
            new_slice_interval=options.new_resource_slice_interval,
        )
        log.info("controllers starting", cluster_id=cluster.cluster_id)
        working.set()
        # One cache per watched scope for all the controllers of this term as leader.
        with informer_scope():
            quota_usage = ProviderQuotaUsage(client)
            reconcilers = [
                ServingCSRApprover(client).run(),
                Replicator(client, cluster.cluster_id).run(),
                ConsumerResourceSlices(client, cluster.cluster_id).run(),
                ProviderResourceSlices(client, settings).run(),
                ProviderNamespaceMaps(
                    client,
                    options.tenant_pod_security,
                    options.reserved_namespaces,
                    options.tenant_namespace_quota,
                    options.max_twin_namespaces,
                    options.new_twin_namespace_interval,
                ).run(),
                ProviderShadowPods(
                    client,
                    quota_usage.quotas,
                    workers=options.shadow_pod_workers,
                    unanswered_grace=options.deleted_slice_drain_grace,
                ).run(),
                ProviderShadowEndpointSlices(
                    client, workers=options.shadow_endpointslice_workers
                ).run(),
                quota_usage.run(),
                ForeignClusters(client).run(),
                Tenants(client).run(),
                PeerFlowSchemas(client).run(),
                NamespaceOffloadings(client, cluster.cluster_id, options.namespace).run(),
                OffloadedPodAvailability(client).run(),
            ]
            if options.node_failure_controller:
                reconcilers.append(ProviderNodeFailure(client).run())
            if options.launcher is not None:
                launcher = options.launcher(client)
                reconciler = VirtualNodeReconciler(client, cluster.cluster_id, launcher)
                reconcilers.append(reconciler.run())
            await asyncio.gather(*reconcilers)

    try:
        return await run_while_leading(elector, work, background=[metrics.run()])
    finally:
        await client.close()


def main(options: ManagerOptions) -> int:
    configure_logging("info", component="controller-manager")
    return daemon.run(run_manager(options))
