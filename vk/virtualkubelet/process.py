"""The virtual kubelet process: one per VirtualNode, wiring the node controller, the provider
connection and (with later issues) pod offloading, reflection and the kubelet API.

Replicas run active/passive: each campaigns for the Lease named after the node in the tenant
namespace and only the holder works. SIGTERM stops the work, releases the Lease so a standby
takes over at once, and exits 0; losing the Lease exits 1 (the Deployment restarts it), as
Liqo's virtual kubelet does.
"""

from __future__ import annotations

import asyncio
import json
import os
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

import structlog

from vk.api.constants import REMOTE_CLUSTER_ID_LABEL
from vk.api.offloading import NamespaceMap, VirtualNode
from vk.kube import daemon
from vk.kube.client import DEFAULT_REQUEST_TIMEOUT, ApiError, KubeClient
from vk.kube.events import EventRecorder
from vk.kube.informer import Informer, informer_scope, retry_informers_now
from vk.kube.kubeconfig import default_connection
from vk.kube.leaderelection import LeaderElector, run_while_leading
from vk.kube.observability import MetricsServer, configure_logging
from vk.kube.workqueue import TokenBucket
from vk.kubelet.auth import KubeletAuth
from vk.kubelet.probes import ProbeResults, probed_pod
from vk.kubelet.server import KubeletServer
from vk.kubelet.stats import OffloadedPod, ResourceUsage, declared_containers
from vk.node.controller import NodeController, NodeOptions
from vk.reflection.addresses import HomeNetwork
from vk.reflection.configuration.serviceaccounts import ServiceAccountTokenReflector
from vk.reflection.generic import ReflectorOptions
from vk.reflection.manager import ReflectionManager
from vk.reflection.offloading_patch import OffloadingPatchSource
from vk.reflection.resources import ReflectionSettings, build_reflectors
from vk.reflection.workload.pods import PodForging, PodReflector
from vk.virtualkubelet.provider import ProviderConnection

log = structlog.get_logger("vk.virtualkubelet")

FALLBACK_KUBELET_VERSION = "v1.25.0"  # Liqo's, when the home API server's cannot be read


@dataclass(frozen=True)
class VirtualKubeletOptions:
    node_name: str
    tenant_namespace: str
    foreign_cluster_id: str
    foreign_kubeconfig_secret_name: str
    home_cluster_id: str = ""
    node_ip: str = "127.0.0.1"
    listen_port: int = 10250
    metrics_address: str = ":5872"
    node_lease_duration: int = 40
    node_ping_interval: float = 10.0
    node_ping_timeout: float = 1.0
    node_extra_labels: dict[str, str] = field(default_factory=dict)
    node_extra_annotations: dict[str, str] = field(default_factory=dict)
    create_node: bool = True
    pod_reflection_workers: int = 10
    reflection: ReflectionSettings = field(default_factory=ReflectionSettings)
    # Where offloaded pods reach this cluster's API server (`--home-api-server-host/port`);
    # without it, their in-cluster clients reach the provider's, as vk does no networking.
    home_api_server_host: str = ""
    home_api_server_port: int = 443
    # The relay passes WebSocket upgrades as it passes SPDY ones, to an API server that serves
    # them: declaring it lets the consumer's API server proxy v5 and tunnelling untranslated.
    extend_websockets_to_kubelet: bool = True
    certificate_type: str = "kubelet"  # or self-signed
    home_kubeconfig: str | None = None
    pod_name: str = ""  # identity in the HA election
    pod_namespace: str = ""  # where the VirtualNode lives (default: the tenant namespace)
    virtual_node_name: str = ""  # default: the node name
    # Both elections (this node's replicas, and the one reflecting what namespaces share):
    # Liqo's --vk-lease-duration, --vk-lease-renew-interval and --vk-lease-retry-period.
    ha_lease_duration: int = 15
    ha_renew_deadline: float = 10.0
    ha_retry_period: float = 5.0
    # False (Liqo's --vk-lease-enabled=false): every virtual kubelet of the provider reflects
    # the shared objects, no Lease.
    shared_reflection_lease: bool = True
    # False (--disable-ip-reflection): offloaded pods are reported without their pod IPs.
    reflect_pod_ips: bool = True
    # Liqo's --client-qps and --client-max-burst: the requests a second each API client (home's,
    # the provider's) makes at most, in bursts of so many (0: no limit, vk's default).
    client_qps: float = 0.0
    client_max_burst: int = 100
    # Liqo's --client-timeout: the most one request of each API client takes, retries included
    # (vk's default where Liqo's 0 would mean none).
    client_timeout: float = DEFAULT_REQUEST_TIMEOUT
    # Liqo's flags given that mean nothing in vk: said once at start.
    ignored_flags: tuple[str, ...] = ()
    # Kept home besides what the VirtualNode's offloadingPatch says (a VkOptionsTemplate's).
    labels_not_reflected: tuple[str, ...] = ()
    annotations_not_reflected: tuple[str, ...] = ()
    log_level: str = "info"

    @property
    def identity(self) -> str:
        return self.pod_name or f"{socket.gethostname()}-{os.getpid()}"


async def kubelet_version(home: KubeClient) -> str:
    """The home API server's version, reported as the node's kubelet version (as Liqo does)."""
    try:
        version: str = json.loads(await home.get_text("/version"))["gitVersion"]
        return version
    except (ApiError, OSError, TimeoutError, ValueError, KeyError):
        return FALLBACK_KUBELET_VERSION


def client_rate(options: VirtualKubeletOptions) -> TokenBucket | None:
    """A new budget for one API client, as client-go gives each client of a rest.Config
    with a QPS (Liqo's --client-qps); None without one."""
    if options.client_qps <= 0:
        return None
    return TokenBucket(options.client_qps, options.client_max_burst)


def provider_connection(options: VirtualKubeletOptions, home: KubeClient) -> ProviderConnection:
    """The provider's kubeconfig Secret, read through `home`, and the clients made of it, with
    this process's client rate and timeout."""
    return ProviderConnection(
        home,
        namespace=options.tenant_namespace,
        secret_name=options.foreign_kubeconfig_secret_name,
        rate=client_rate(options),
        timeout=options.client_timeout,
    )


class VirtualKubelet:
    def __init__(self, options: VirtualKubeletOptions) -> None:
        self.options = options
        self.home = KubeClient(
            default_connection(options.home_kubeconfig),
            name="home",
            rate=client_rate(options),
            timeout=options.client_timeout,
        )
        self.elector = LeaderElector(
            self.home,
            namespace=options.tenant_namespace,
            name=options.node_name,
            identity=options.identity,
            lease_duration=options.ha_lease_duration,
            renew_deadline=options.ha_renew_deadline,
            retry_period=options.ha_retry_period,
        )
        self.working = asyncio.Event()
        self.metrics = MetricsServer(options.metrics_address, ready=self.working.is_set)

    async def run(self) -> int:
        exit_code = 1
        try:
            exit_code = await run_while_leading(
                self.elector, self._work, background=[self.metrics.run()]
            )
        finally:
            await self.home.close()
            log.info("stopped", exit_code=exit_code)
        return exit_code

    async def _work(self) -> None:
        # One cache per watched scope for the whole virtual kubelet: reflectors that read the
        # same objects (the remote Secrets: the Secret and the token reflectors) share it.
        with informer_scope():
            await self._run_components()

    async def _run_components(self) -> None:
        options = self.options
        namespace = options.pod_namespace or options.tenant_namespace
        virtual_node_name = options.virtual_node_name or options.node_name
        virtual_nodes = Informer(
            self.home,
            VirtualNode.group_version(),
            VirtualNode.PLURAL,
            namespace=namespace,
            field_selector=f"metadata.name={virtual_node_name}",
        )
        offloading_patch = OffloadingPatchSource(virtual_nodes, f"{namespace}/{virtual_node_name}")
        provider = provider_connection(options, self.home)
        node = NodeController(
            self.home,
            NodeOptions(
                node_name=options.node_name,
                node_ip=options.node_ip,
                kubelet_port=options.listen_port,
                remote_cluster_id=options.foreign_cluster_id,
                kubelet_version=await kubelet_version(self.home),
                lease_duration=options.node_lease_duration,
                ping_interval=options.node_ping_interval,
                ping_timeout=options.node_ping_timeout,
                extra_labels=options.node_extra_labels,
                extra_annotations=options.node_extra_annotations,
                declared_features=("ExtendWebSocketsToKubelet",)
                if options.extend_websockets_to_kubelet
                else (),
            ),
            virtual_nodes=virtual_nodes,
            virtual_node_key=f"{namespace}/{virtual_node_name}",
            ping=provider.ping,
            events=EventRecorder(self.home, "virtual-kubelet"),
            identity_problem=lambda: provider.problem if provider.loaded.is_set() else None,
        )
        provider.on_change(node.trigger)
        namespace_maps = Informer(
            self.home,
            NamespaceMap.group_version(),
            NamespaceMap.PLURAL,
            namespace=options.tenant_namespace,
            label_selector=f"{REMOTE_CLUSTER_ID_LABEL}={options.foreign_cluster_id}",
        )
        reflection = ReflectionManager(
            self.home,
            provider,
            namespace_maps,
            tenant_namespace=options.tenant_namespace,
            identity=options.identity,
            lease_duration=options.ha_lease_duration,
            renew_deadline=options.ha_renew_deadline,
            retry_period=options.ha_retry_period,
            shared_lease=options.shared_reflection_lease,
        )
        settings = options.reflection
        pods = PodReflector(
            self.home,
            node_name=options.node_name,
            node_ip=options.node_ip,
            home_cluster_id=options.home_cluster_id,
            remote_cluster_id=options.foreign_cluster_id,
            mappings=lambda: reflection.mappings,
            mapped=reflection.mapped,
            workers=options.pod_reflection_workers,
            events=EventRecorder(self.home, "virtual-kubelet"),
            home_network=HomeNetwork(self.home),
            offloading_patch=offloading_patch.current,
            pod_forging=PodForging(
                service_account_tokens=settings.enable_apiserver_support
                and settings.workers_of("serviceaccount") > 0,
                root_ca_reflected=settings.workers_of("configmap") > 0,
                home_api_server=(options.home_api_server_host, options.home_api_server_port)
                if options.home_api_server_host
                else None,
                reflect_ips=options.reflect_pod_ips,
            ),
        )
        for reflector in build_reflectors(
            settings,
            ReflectorOptions(
                home=self.home,
                home_cluster_id=options.home_cluster_id,
                remote_cluster_id=options.foreign_cluster_id,
                node_name=options.node_name,
                events=EventRecorder(self.home, "vk-reflection"),
                leading=reflection.leading,
                workers=1,
                offloading_patch=offloading_patch.current,
            ),
            pods.local,
            pods.offloaded_pod,
        ):
            reflection.add(reflector)
            if isinstance(reflector, ServiceAccountTokenReflector):
                pods.await_tokens_from(reflector)
        if options.pod_reflection_workers > 0:
            reflection.add(pods)
        # Work that failed while the provider was away is retried as soon as it answers again,
        # whatever back-off it had reached.
        node.on_provider_back(lambda: retry_informers_now(provider.client))
        for running in reflection.reflectors:
            node.on_provider_back(running.retry_now)
            offloading_patch.on_change(running.resync)
        kubelet = KubeletServer(
            node_name=options.node_name,
            address=options.node_ip,
            port=options.listen_port,
            auth=KubeletAuth(self.home, options.node_name),
            remote_namespace=pods.remote_namespace_of,
            pods=pods.bound_pods,
            provider=lambda: provider.connection,
            usage=ResourceUsage(
                lambda: provider.client,
                lambda: [
                    OffloadedPod(
                        pod["metadata"]["namespace"],
                        pod["metadata"]["name"],
                        pod["metadata"]["uid"],
                        remote_namespace,
                        declared_containers(pod),
                    )
                    for pod, remote_namespace in pods.offloaded_pods()
                ],
            ),
            probes=ProbeResults(
                lambda: provider.client,
                lambda: [
                    probed_pod(
                        pod,
                        remote_namespace,
                        pods.remote_uid_of(remote_namespace, pod["metadata"]["name"]),
                    )
                    for pod, remote_namespace in pods.offloaded_pods()
                ],
            ),
            certificate_type=options.certificate_type,
        )
        runnables = [virtual_nodes.run(), provider.run(), kubelet.run(), namespace_maps.run()]
        # Nothing is offloaded before the VirtualNode is read: its offloadingPatch applies from
        # the first pod and object.
        if reflection.reflectors:
            runnables.append(_once_synced(virtual_nodes, reflection.run))
        if options.create_node:
            runnables.append(node.run())
        self.working.set()
        await asyncio.gather(*runnables)


async def _once_synced(informer: Informer, work: Callable[[], Awaitable[None]]) -> None:
    await informer.synced.wait()
    await work()


def run_virtual_kubelet(options: VirtualKubeletOptions) -> int:
    configure_logging(options.log_level, node=options.node_name)
    if options.ignored_flags:
        log.warning(
            "flags of Liqo's virtual kubelet that mean nothing in vk, ignored",
            flags=list(options.ignored_flags),
        )
    return daemon.run(VirtualKubelet(options).run())
