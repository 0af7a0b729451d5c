"""What differs between the playground's two kinds of cluster: every node simulated by kwok and
vk's components run as processes of this machine, or a real node (kubelet and containerd) beside
the kwok ones and vk's components run as pods there. vk is installed from its chart either way,
with the values of the mode. ClusterRuntime picks one.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import yaml

from vk.cli.chart import install_chart
from vk.kube.client import KubeClient, object_path
from vk.playground.binaries import Binaries, NodeBinaries
from vk.playground.cluster_objects import (
    audit_policy,
    local_processes_chart_values,
    playground_chart_values,
)
from vk.playground.commandlines import vk_controller_manager_args, vk_webhook_args
from vk.playground.images import NodeImages
from vk.playground.paths import ClusterPaths
from vk.playground.pki import ClusterPki, load_ca, write_private
from vk.playground.prometheus import prometheus_args, prometheus_config, prometheus_rbac
from vk.playground.realnode import (
    CONTAINERD_METRICS_PORT,
    KUBE_PROXY_HEALTHZ_PORT,
    KUBELET_HEALTHZ_PORT,
    NodeNetwork,
    cni_conflist,
    containerd_args,
    containerd_config,
    ensure_cgroup_parent,
    ensure_network,
    import_images,
    in_namespace,
    kube_proxy_args,
    kube_proxy_configuration,
    kubelet_args,
    kubelet_configuration,
    node_certificates,
    node_name,
)
from vk.playground.spec import ClusterSpec

# The real node's, in this order, and Prometheus, which scrapes vk's pods there; vk itself runs
# as pods of the node then, not as processes.
NODE_COMPONENTS = ("containerd", "kubelet", "kube-proxy", "prometheus")
# Those in the node's network namespace: their ports are not this machine's.
IN_NODE_NAMESPACE = NODE_COMPONENTS[:3]

CommandLines = dict[str, Callable[[], list[str]]]


@dataclass(frozen=True)
class RealNode:
    """What a cluster's real node is made of: built binaries and images, its network, and the
    Prometheus that scrapes vk's pods there."""

    binaries: NodeBinaries
    images: NodeImages
    network: NodeNetwork
    prometheus: Path


class Cluster(Protocol):
    """What a node runtime uses of its cluster (a ClusterRuntime)."""

    spec: ClusterSpec
    paths: ClusterPaths
    binaries: Binaries

    @property
    def server(self) -> str: ...

    def ports(self) -> dict[str, int]: ...

    async def ensure_component(self, component: str, *, restart: bool = False) -> bool: ...

    def write_kubeconfig(self, path: Path, ca: bytes, cert: Path, key: Path, user: str) -> None: ...

    async def apply_crds(self, client: KubeClient) -> None: ...


class NodeRuntime(ABC):
    """The steps of `ClusterRuntime.up` that depend on the cluster's nodes, in the order it
    calls them. An implementation starts what it adds with `cluster.ensure_component`, and
    names each component it starts in the lists it returns (they make `up`'s report)."""

    # The API server logs the requests of ServiceAccounts (the RBAC proof of vk's pods).
    audits_api_server = False

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster

    @abstractmethod
    def command_lines(self, ports: dict[str, int]) -> CommandLines:
        """The command lines of the components this runtime adds, by component."""

    @abstractmethod
    def write_files(self, pki: ClusterPki) -> None:
        """Its components' files, once the cluster's own are written."""

    @abstractmethod
    async def prepare(self) -> None:
        """What must exist before the API server starts."""

    @abstractmethod
    async def start_node(self, restart: bool) -> list[str]:
        """Its nodes' daemons, once the control plane runs."""

    @abstractmethod
    async def install(self, client: KubeClient) -> None:
        """What it applies before the cluster is awaited usable."""

    @abstractmethod
    def real_nodes(self) -> set[str]:
        """The names of the nodes besides kwok's that must be Ready."""

    def health_urls(self) -> dict[str, str]:
        """Where the components this runtime adds answer when healthy (over plain HTTP), by
        component; those it does not name are probed as the cluster's own."""
        return {}

    @abstractmethod
    async def start_vk(self, restart: bool) -> list[str]:
        """vk running in the cluster, once it is usable."""


class SimulatedNodes(NodeRuntime):
    """Every node is kwok's (started with the control plane); vk is installed from its chart
    with `localProcesses` values, its webhook and controller manager running as processes of
    this machine, unless the spec leaves vk out."""

    def command_lines(self, ports: dict[str, int]) -> CommandLines:
        paths = self.cluster.paths
        return {
            "vk-controller-manager": lambda: vk_controller_manager_args(paths, ports),
            "vk-webhook": lambda: vk_webhook_args(paths, ports),
        }

    def write_files(self, pki: ClusterPki) -> None:
        pass

    async def prepare(self) -> None:
        pass

    async def start_node(self, restart: bool) -> list[str]:
        return []

    async def install(self, client: KubeClient) -> None:
        """vk's CRDs, then its chart, before vk's processes start: they read the cluster's
        identity at start, and its RBAC authorizes them.

        The chart installs the webhook configurations too, before the webhook listens, as it
        does with a Deployment that is not ready yet: they fail closed, but only on pods of
        offloaded namespaces, ShadowPods and NamespaceOffloadings, which nothing makes before
        vk's processes run. The API server calls the webhook on loopback, trusting the cluster
        CA that issued its serving certificate."""
        if not self.cluster.spec.vk:
            return
        await self.cluster.apply_crds(client)
        paths = self.cluster.paths
        values = local_processes_chart_values(
            self.cluster.spec,
            f"https://127.0.0.1:{self.cluster.ports()['vk-webhook']}",
            self.cluster.ports()["vk-metrics-agent"],
            paths.pki.ca_crt.read_bytes(),
        )
        await asyncio.to_thread(
            install_chart,
            self.cluster.binaries.helm,
            values,
            [f"--kubeconfig={paths.kubeconfig}"],
        )

    def real_nodes(self) -> set[str]:
        return set()

    async def start_vk(self, restart: bool) -> list[str]:
        """vk's webhook and controller manager as processes."""
        if not self.cluster.spec.vk:
            return []
        started = []
        # Restarted with the API server too: their informers would otherwise back off as well.
        for component in ("vk-webhook", "vk-controller-manager"):
            if await self.cluster.ensure_component(component, restart=restart):
                started.append(component)
        return started


class RealNodeRuntime(NodeRuntime):
    """A real node beside kwok's: containerd, the kubelet and kube-proxy in the node's network
    namespace, vk from its chart as pods there, and Prometheus scraping them."""

    audits_api_server = True

    def __init__(self, cluster: Cluster, node: RealNode) -> None:
        super().__init__(cluster)
        self.node = node

    def command_lines(self, ports: dict[str, int]) -> CommandLines:
        node, paths, spec = self.node, self.cluster.paths, self.cluster.spec
        return {
            "containerd": lambda: in_namespace(node.network, containerd_args(paths.node)),
            "kubelet": lambda: in_namespace(
                node.network,
                kubelet_args(
                    node.binaries,
                    paths.node,
                    node.network,
                    spec.name,
                    reserved_for_vk=spec.nodes > 0,
                ),
            ),
            "kube-proxy": lambda: in_namespace(
                node.network, kube_proxy_args(node.binaries, paths.node)
            ),
            "prometheus": lambda: prometheus_args(
                node.prometheus, paths.prometheus_config, paths.prometheus_data, ports["prometheus"]
            ),
        }

    def write_files(self, pki: ClusterPki) -> None:
        cluster_paths, name = self.cluster.paths, self.cluster.spec.name
        paths, network = cluster_paths.node, self.node.network
        ca = pki.ca_crt.read_bytes()
        for directory in (paths.cni_config_dir, paths.cni_data_dir, paths.pod_logs):
            directory.mkdir(parents=True, exist_ok=True)
        paths.pki("").mkdir(parents=True, exist_ok=True)
        if not paths.pki("kube-proxy.crt").exists():
            ca_cert, ca_key = load_ca(pki.root, "ca")
            now = datetime.datetime.now(datetime.UTC)
            issued_now = node_certificates(ca_cert, ca_key, name, network.node_address, now)
            for stem, issued in issued_now.items():
                write_private(paths.pki(f"{stem}.key"), issued.key_pem)
                write_private(paths.pki(f"{stem}.crt"), issued.cert_pem)
        for kubeconfig, stem, user in (
            (paths.kubelet_kubeconfig, "kubelet-client", f"system:node:{node_name(name)}"),
            (paths.kube_proxy_kubeconfig, "kube-proxy", "system:kube-proxy"),
        ):
            self.cluster.write_kubeconfig(
                kubeconfig, ca, paths.pki(f"{stem}.crt"), paths.pki(f"{stem}.key"), user
            )
        paths.containerd_config.parent.mkdir(parents=True, exist_ok=True)
        paths.containerd_config.write_text(
            containerd_config(paths, network, self.node.images.pause_image)
        )
        (paths.cni_config_dir / "10-vk-playground.conflist").write_text(
            json.dumps(cni_conflist(paths, network), indent=2) + "\n"
        )
        paths.kubelet_config.write_text(
            yaml.safe_dump(kubelet_configuration(paths, network, pki.ca_crt), sort_keys=False)
        )
        paths.kube_proxy_config.write_text(
            yaml.safe_dump(kube_proxy_configuration(paths, network, name), sort_keys=False)
        )
        cluster_paths.audit_policy.write_text(yaml.safe_dump(audit_policy(), sort_keys=False))
        cluster_paths.prometheus_config.parent.mkdir(parents=True, exist_ok=True)
        config = prometheus_config(
            self.cluster.server, pki.ca_crt, pki.path("prometheus.crt"), pki.path("prometheus.key")
        )
        cluster_paths.prometheus_config.write_text(yaml.safe_dump(config, sort_keys=False))

    async def prepare(self) -> None:
        # Before the API server (the playground makes every node's network before any API
        # server starts, as they all listen on the first node's host end: this repairs).
        await asyncio.to_thread(ensure_network, self.node.network)
        await asyncio.to_thread(ensure_cgroup_parent, self.node.network)

    async def start_node(self, restart: bool) -> list[str]:
        """containerd with the images imported, then the kubelet and kube-proxy."""
        started = []
        if await self.cluster.ensure_component("containerd", restart=restart):
            started.append("containerd")
        await asyncio.to_thread(import_images, self.cluster.paths.node, self.node.images)
        for component in IN_NODE_NAMESPACE[1:]:
            if await self.cluster.ensure_component(component, restart=restart):
                started.append(component)
        return started

    async def install(self, client: KubeClient) -> None:
        """vk's CRDs (the chart installs the rest) and Prometheus' RBAC."""
        await self.cluster.apply_crds(client)
        for document in prometheus_rbac():
            await client.apply(object_path(document), document)

    def real_nodes(self) -> set[str]:
        return {node_name(self.cluster.spec.name)}

    def health_urls(self) -> dict[str, str]:
        address = self.node.network.node_address
        return {
            "containerd": f"http://{address}:{CONTAINERD_METRICS_PORT}/v1/metrics",
            "kubelet": f"http://{address}:{KUBELET_HEALTHZ_PORT}/healthz",
            "kube-proxy": f"http://{address}:{KUBE_PROXY_HEALTHZ_PORT}/livez",
        }

    async def start_vk(self, restart: bool) -> list[str]:
        """vk from its chart, as `vkctl install` installs it, waiting for its pods; then
        Prometheus, which scrapes them."""
        started = []
        image = self.node.images.vk_image
        values = playground_chart_values(self.cluster.spec, image, self.cluster.server)
        await asyncio.to_thread(
            install_chart,
            self.cluster.binaries.helm,
            values,
            [f"--kubeconfig={self.cluster.paths.kubeconfig}"],
        )
        if await self.cluster.ensure_component("prometheus", restart=restart):
            started.append("prometheus")
        started.append(f"vk from its chart ({image})")
        return started
