"""The virtual kubelet process: one per VirtualNode, wiring the node controller, the provider
connection and (with later issues) pod offloading, reflection and the kubelet API.

Replicas run active/passive: each campaigns for the Lease named after the node in the tenant
namespace and only the holder works. SIGTERM stops the work, releases the Lease so a standby
takes over at once, and exits 0; losing the Lease exits 1 (the Deployment restarts it), as
Liqo's virtual kubelet does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

import structlog

from vk.api.offloading import VirtualNode
from vk.kube.client import ApiError, KubeClient
from vk.kube.events import EventRecorder
from vk.kube.informer import Informer
from vk.kube.kubeconfig import default_connection
from vk.kube.leaderelection import LeaderElector
from vk.kube.observability import MetricsServer, configure_logging
from vk.kubelet.auth import KubeletAuth
from vk.kubelet.server import KubeletServer
from vk.node.controller import NodeController, NodeOptions
from vk.reflection.workload.pods import PodReflector
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
    # The relay passes WebSocket upgrades as it passes SPDY ones, to an API server that serves
    # them: declaring it lets the consumer's API server proxy v5 and tunnelling untranslated.
    extend_websockets_to_kubelet: bool = True
    certificate_type: str = "kubelet"  # or self-signed
    home_kubeconfig: str | None = None
    pod_name: str = ""  # identity in the HA election
    pod_namespace: str = ""  # where the VirtualNode lives (default: the tenant namespace)
    virtual_node_name: str = ""  # default: the node name
    ha_lease_duration: int = 15
    ha_renew_deadline: float = 10.0
    ha_retry_period: float = 5.0
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


class VirtualKubelet:
    def __init__(self, options: VirtualKubeletOptions) -> None:
        self.options = options
        self.home = KubeClient(default_connection(options.home_kubeconfig), name="home")
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
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        background = [
            asyncio.create_task(self.metrics.run(), name="metrics"),
            asyncio.create_task(self.elector.run(), name="leader-election"),
        ]
        log.info(
            "waiting for the lease",
            lease=f"{self.options.tenant_namespace}/{self.options.node_name}",
            identity=self.options.identity,
        )
        exit_code = 0
        work: asyncio.Task[None] | None = None
        try:
            if await _first(self.elector.is_leader.wait(), stop.wait()) == 0:
                log.info("leading: starting work")
                work = asyncio.create_task(self._work(), name="work")
                outcome = await _first(stop.wait(), self.elector.lost.wait(), work)
                if outcome == 1:
                    log.error("lost the lease: exiting so that a fresh replica takes over")
                    exit_code = 1
                elif outcome == 2:
                    work.result()  # a crash in the work surfaces here
        finally:
            for task in [*([work] if work else []), *background]:
                task.cancel()
            await asyncio.gather(*background, *([work] if work else []), return_exceptions=True)
            await self.elector.release()
            await self.home.close()
            log.info("stopped", exit_code=exit_code)
        return exit_code

    async def _work(self) -> None:
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
        provider = ProviderConnection(
            self.home,
            namespace=options.tenant_namespace,
            secret_name=options.foreign_kubeconfig_secret_name,
        )
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
        )
        provider.on_change(node.trigger)
        pods = PodReflector(
            self.home,
            provider,
            node_name=options.node_name,
            node_ip=options.node_ip,
            home_cluster_id=options.home_cluster_id,
            remote_cluster_id=options.foreign_cluster_id,
            tenant_namespace=options.tenant_namespace,
            workers=options.pod_reflection_workers,
            events=EventRecorder(self.home, "virtual-kubelet"),
        )
        kubelet = KubeletServer(
            node_name=options.node_name,
            address=options.node_ip,
            port=options.listen_port,
            auth=KubeletAuth(self.home, options.node_name),
            remote_namespace=pods.remote_namespace_of,
            pods=pods.bound_pods,
            provider=lambda: provider.connection,
            certificate_type=options.certificate_type,
        )
        runnables = [virtual_nodes.run(), provider.run(), kubelet.run()]
        if options.pod_reflection_workers > 0:
            runnables.append(pods.run())
        if options.create_node:
            runnables.append(node.run())
        self.working.set()
        await asyncio.gather(*runnables)


async def _first(*awaitables: Coroutine[Any, Any, Any] | asyncio.Task[Any]) -> int:
    """Waits for the first of `awaitables` to finish; returns its index, cancels the others
    (tasks passed in are left running)."""
    tasks = [a if isinstance(a, asyncio.Task) else asyncio.ensure_future(a) for a in awaitables]
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task, given in zip(tasks, awaitables, strict=True):
        if task not in done and not isinstance(given, asyncio.Task):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return next(i for i, task in enumerate(tasks) if task in done)


def run_virtual_kubelet(options: VirtualKubeletOptions) -> int:
    configure_logging(options.log_level, node=options.node_name)
    return asyncio.run(VirtualKubelet(options).run())
