"""The playground: a set of real clusters on this machine, brought up, repaired, described and
torn down as one. Its whole state lives in one directory, so `down` can leave nothing behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from vk.cli.chart import default_cache_dir
from vk.cli.progress import Progress
from vk.controllers.local_processes import processes_with, read_pid, stop_processes
from vk.kube.kubeconfig import load_kubeconfig_file
from vk.playground.binaries import BinaryBuilder
from vk.playground.cluster import (
    COMPONENTS,
    ClusterRuntime,
    ComponentStatus,
    PlaygroundError,
    component_status,
)
from vk.playground.images import ImageBuilder
from vk.playground.node_runtimes import NODE_COMPONENTS, RealNode
from vk.playground.paths import ClusterPaths
from vk.playground.realnode import (
    HOST_ADDRESS,
    INOTIFY_INSTANCES_WANTED,
    NodeNetwork,
    RealNodeError,
    check_tools,
    ensure_inotify_instances,
    ensure_network,
    node_network,
    remove_node,
)
from vk.playground.spec import DEFAULT_CLUSTERS, ClusterSpec, cluster_spec, validate_clusters


def default_state_dir() -> Path:
    base = os.environ.get("VK_PLAYGROUND_DIR") or os.path.join(
        os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"),
        "vk",
        "playground",
    )
    return Path(base)


def pod_cidr(index: int) -> str:
    """A pod CIDR per cluster (10.244/16, 10.245/16, ...), so pod IPs tell where a pod runs."""
    return f"10.{244 + index}.0.0/16"


def env_var_name(cluster_name: str) -> str:
    return "KUBECONFIG_" + cluster_name.upper().replace("-", "_")


def env_exports(clusters: tuple[ClusterSpec, ...], kubeconfigs: dict[str, Path]) -> list[str]:
    """`export` lines as the tutorial has them: KUBECONFIG for the consumer (the entry point),
    KUBECONFIG_<NAME> for every cluster."""
    consumer = next((c for c in clusters if c.role == "consumer"), clusters[0])
    lines = [f'export KUBECONFIG="{kubeconfigs[consumer.name]}"']
    lines += [f'export {env_var_name(c.name)}="{kubeconfigs[c.name]}"' for c in clusters]
    return lines


@dataclass
class ClusterStatus:
    spec: ClusterSpec
    server: str | None
    kubeconfig: Path
    components: list[ComponentStatus]

    @property
    def running(self) -> bool:
        return all(c.running for c in self.components)


class Playground:
    def __init__(self, root: Path | None = None, progress: Progress | None = None) -> None:
        self.root = root or default_state_dir()
        self.progress = progress or Progress()
        self.state_file = self.root / "playground.json"

    def recorded_clusters(self) -> tuple[ClusterSpec, ...] | None:
        if not self.state_file.exists():
            return None
        document = json.loads(self.state_file.read_text())
        return tuple(cluster_spec(entry) for entry in document["clusters"])

    def clusters(self) -> tuple[ClusterSpec, ...]:
        recorded = self.recorded_clusters()
        if recorded is None:
            raise PlaygroundError("no playground here: run `vkctl playground up` first")
        return recorded

    def paths(self, name: str) -> ClusterPaths:
        return ClusterPaths(self.root / name)

    def node_networks(self, clusters: tuple[ClusterSpec, ...]) -> dict[str, NodeNetwork]:
        """The network of each cluster's real node, by cluster, numbered in the clusters'
        order."""
        with_nodes = [c.name for c in clusters if c.real_node]
        return {name: node_network(self.root, name, i) for i, name in enumerate(with_nodes)}

    def kubeconfig(self, name: str) -> Path:
        names = [c.name for c in self.clusters()]
        if name not in names:
            raise PlaygroundError(
                f"no cluster {name!r} in the playground (it has {', '.join(names)})"
            )
        return self.paths(name).kubeconfig

    def up(self, clusters: tuple[ClusterSpec, ...] | None = None) -> tuple[ClusterSpec, ...]:
        """Starts every cluster, or repairs what died in a running playground."""
        recorded = self.recorded_clusters()
        if clusters is not None and recorded is not None and clusters != recorded:
            raise PlaygroundError(
                f"a playground with clusters {', '.join(c.name for c in recorded)} exists in "
                f"{self.root}: run `vkctl playground down` first to start a different one"
            )
        wanted = validate_clusters(clusters or recorded or DEFAULT_CLUSTERS)
        builder = BinaryBuilder(default_cache_dir(), self.progress)
        binaries = builder.ensure_all()
        networks = self.node_networks(wanted)
        real_nodes: dict[str, RealNode] = {}
        if networks:
            try:
                check_tools()
                replaced = ensure_inotify_instances()
            except RealNodeError as error:
                raise PlaygroundError(str(error)) from error
            if replaced is not None:
                self.progress.info(
                    f"raised fs.inotify.max_user_instances from {replaced} to "
                    f"{INOTIFY_INSTANCES_WANTED}: every API server and kubelet here watches "
                    f"files as root, and a kubelet left without one exits"
                )
            node_binaries = builder.ensure_node()
            images = ImageBuilder(default_cache_dir(), self.progress).ensure(node_binaries.pause)
            prometheus = builder.ensure_prometheus()
            real_nodes = {
                name: RealNode(node_binaries, images, network, prometheus)
                for name, network in networks.items()
            }
        self.progress.info(f"binaries cached in {default_cache_dir()}")
        self.root.mkdir(parents=True, exist_ok=True)
        self.state_file.write_text(
            json.dumps({"clusters": [c.to_dict() for c in wanted]}, indent=2) + "\n"
        )
        try:
            # Before any API server starts: they all listen on the first node's host end.
            for network in networks.values():
                ensure_network(network)
        except RealNodeError as error:
            raise PlaygroundError(str(error)) from error
        runtimes = [
            ClusterRuntime(
                spec,
                self.root / spec.name,
                binaries,
                pod_cidr(index),
                # With a real node, every API server listens where the nodes' pods reach it.
                host_address=HOST_ADDRESS if real_nodes else None,
                node=real_nodes.get(spec.name),
            )
            for index, spec in enumerate(wanted)
        ]
        names = ", ".join(c.name for c in wanted)
        with self.progress.step(f"starting clusters {names}"):
            try:
                asyncio.run(self._up_all(runtimes))
            except RealNodeError as error:
                raise PlaygroundError(str(error)) from error
        return wanted

    async def _up_all(self, runtimes: list[ClusterRuntime]) -> None:
        await asyncio.gather(*(runtime.up(self.progress.info) for runtime in runtimes))

    def status(self) -> list[ClusterStatus]:
        statuses = []
        for spec in self.clusters():
            paths = self.paths(spec.name)
            server = None
            if paths.kubeconfig.exists():
                server = load_kubeconfig_file(paths.kubeconfig).server
            statuses.append(
                ClusterStatus(spec, server, paths.kubeconfig, component_status(spec, paths))
            )
        return statuses

    def env(self) -> list[str]:
        clusters = self.clusters()
        return env_exports(clusters, {c.name: self.paths(c.name).kubeconfig for c in clusters})

    def stop_component(self, cluster: str, component: str) -> None:
        """Stops one component of one cluster (as scaling its Deployment to zero would);
        `up` starts it again."""
        known = COMPONENTS + NODE_COMPONENTS
        if component not in known:
            raise PlaygroundError(f"no component {component}: one of {', '.join(known)}")
        paths = self.paths(cluster)
        pid = read_pid(paths.pid(component))
        if pid is not None:
            stop_processes([pid], marker=str(paths.root))

    def down(self) -> int:
        """Stops every process the playground started and removes its directory. Returns how
        many processes were stopped."""
        marker = str(self.root) + os.sep
        pids = processes_with(marker)
        # Everything is deleted next, so nothing needs a graceful exit: a short grace period.
        stop_processes(pids, marker=marker, grace=3.0)
        left = processes_with(marker)
        if left:
            raise PlaygroundError(f"processes {left} did not stop; kill them and run down again")
        # The real nodes' pods, mounts, cgroups and networks. A node's namespace is the first
        # thing `up` makes for it: if there is none, nothing of that node is ours to remove.
        for name, network in self.node_networks(self.recorded_clusters() or ()).items():
            if Path(network.namespace_path).exists():
                remove_node(network, self.paths(name).node.root)
        shutil.rmtree(self.root, ignore_errors=True)
        return len(pids)
