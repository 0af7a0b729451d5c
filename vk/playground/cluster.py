"""One playground cluster: etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kwok and
metrics-server, all real binaries on 127.0.0.1, in one directory of their own, and vk installed
in it from its chart, as on any cluster: CRDs, the cluster's identity, RBAC, policies and webhook
configurations; vk's controller manager and webhook are processes here, authenticating as the
chart's ServiceAccounts.

The runtime starts what is not running, waits for each component's health endpoint, and then
writes what a cluster needs to be used: its simulated nodes and vk's installation. Its paths
(paths.py), command lines (commandlines.py) and objects (cluster_objects.py) are pure and apart;
what a real node changes is in node_runtimes.py.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import ssl
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

import vk
from vk.api.crds import crd_manifests
from vk.cli.waiting import node_is_ready
from vk.controllers.local_processes import (
    free_port,
    is_running,
    log_tail,
    port_in_use,
    read_pid,
    start_daemon,
    stop_processes,
)
from vk.kube.client import KubeClient, NotFound, object_path, resource_path
from vk.kube.kubeconfig import load_kubeconfig_file
from vk.kube.pki import forge_kubeconfig
from vk.playground.binaries import Binaries
from vk.playground.cluster_objects import (
    KWOK_METRICS_FILES,
    KWOK_STAGE_FILES,
    OFFLOADED_JOB_POD_COMPLETE,
    admission_configuration,
    kwok_documents,
    kwok_node,
    metrics_server_objects,
    node_names,
    pod_log_lines,
    scheduler_configuration,
    webhook_client_kubeconfig,
)
from vk.playground.commandlines import (
    apiserver_args,
    controller_manager_args,
    etcd_args,
    kwok_args,
    metrics_server_args,
    scheduler_args,
)
from vk.playground.node_runtimes import (
    IN_NODE_NAMESPACE,
    NODE_COMPONENTS,
    NodeRuntime,
    RealNode,
    RealNodeRuntime,
    SimulatedNodes,
)
from vk.playground.paths import ClusterPaths
from vk.playground.pki import write_cluster_pki, write_private
from vk.playground.spec import ClusterSpec

COMPONENTS = (
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
    "kwok",
    "metrics-server",
    "vk-webhook",
    "vk-controller-manager",
)
# Started once the API server is up, side by side; vk's once it is installed.
DEPENDENT_COMPONENTS = COMPONENTS[2:-2]
VK_COMPONENTS = COMPONENTS[-2:]
PORT_NAMES = (
    "etcd",
    "etcd-peer",
    "apiserver",
    "controller-manager",
    "scheduler",
    "kwok",
    "metrics-server",
    "vk-webhook",
    "vk-metrics-agent",
    "vk-controller-manager",
    "prometheus",
)
STARTUP_TIMEOUT = 60.0


class PlaygroundError(RuntimeError):
    """Something in the playground failed; the message says what, and where its log is."""


def vk_source_digest() -> str:
    """What the vk processes run: a newer checkout restarts them on `up`."""
    digest = hashlib.sha256()
    package = Path(vk.__file__).parent
    for source in sorted(package.rglob("*.py")):
        digest.update(str(source.relative_to(package)).encode())
        digest.update(source.read_bytes())
    return digest.hexdigest()


def node_not_ready_reason(node: dict[str, Any] | None) -> str:
    """Why a node is not Ready, as its Ready condition says (for an error message)."""
    if node is None:
        return "not registered"
    for condition in node.get("status", {}).get("conditions", []):
        if condition.get("type") == "Ready":
            said = condition.get("message") or condition.get("reason") or ""
            return f"Ready={condition.get('status')}" + (f", {said}" if said else "")
    return "no Ready condition yet"


@dataclass
class ComponentStatus:
    name: str
    pid: int | None
    running: bool
    log: Path


def cluster_components(spec: ClusterSpec) -> tuple[str, ...]:
    """What runs for the cluster as processes: everything, or all but vk's own; with the real
    node, its components instead of vk's (vk runs as pods there)."""
    base = tuple(c for c in COMPONENTS if c not in VK_COMPONENTS)
    if spec.real_node:
        return base + NODE_COMPONENTS
    return COMPONENTS if spec.vk else base


def component_status(spec: ClusterSpec, paths: ClusterPaths) -> list[ComponentStatus]:
    statuses = []
    for name in cluster_components(spec):
        pid = read_pid(paths.pid(name))
        running = pid is not None and is_running(pid, str(paths.root))
        statuses.append(ComponentStatus(name, pid, running, paths.log(name)))
    return statuses


class ClusterRuntime:
    """Starts, repairs, checks and describes one cluster of the playground."""

    def __init__(
        self,
        spec: ClusterSpec,
        root: Path,
        binaries: Binaries,
        pod_cidr: str,
        *,
        host_address: str | None = None,
        node: RealNode | None = None,
    ) -> None:
        self.spec = spec
        self.paths = ClusterPaths(root)
        self.binaries = binaries
        self.pod_cidr = pod_cidr
        self.host_address = host_address
        self.marker = str(root)  # every command line names a file under root
        self.nodes: NodeRuntime = (
            SimulatedNodes(self) if node is None else RealNodeRuntime(self, node)
        )

    # -- state ---------------------------------------------------------------------------

    def ports(self) -> dict[str, int]:
        """The cluster's ports, chosen once; a port a newer vk needs is added to the file."""
        ports: dict[str, int] = {}
        if self.paths.ports_file.exists():
            ports = json.loads(self.paths.ports_file.read_text())
            if all(name in ports for name in PORT_NAMES):
                return ports
        for name in PORT_NAMES:
            if name not in ports:
                port = free_port()
                while port in ports.values():
                    port = free_port()
                ports[name] = port
        self.paths.root.mkdir(parents=True, exist_ok=True)
        self.paths.ports_file.write_text(json.dumps(ports, indent=2) + "\n")
        return ports

    @property
    def address(self) -> str:
        """Where the API server and metrics-server listen: loopback, or the real node's host."""
        return self.host_address or "127.0.0.1"

    @property
    def server(self) -> str:
        return f"https://{self.address}:{self.ports()['apiserver']}"

    # -- files -----------------------------------------------------------------------------

    def _write_files(self) -> None:
        pki = write_cluster_pki(self.paths.pki.root, self.spec.name)
        ca = pki.ca_crt.read_bytes()
        self.write_kubeconfig(
            self.paths.kubeconfig,
            ca,
            pki.path("admin.crt"),
            pki.path("admin.key"),
            f"{self.spec.name}-admin",
        )
        for component in (
            "kube-controller-manager",
            "kube-scheduler",
            "kwok",
            "metrics-server",
            "vk-controller-manager",
            "vk-webhook",
        ):
            self.write_kubeconfig(
                self.paths.component_kubeconfig(component),
                ca,
                pki.path(f"{component}.crt"),
                pki.path(f"{component}.key"),
                component,
            )
        webhook_kubeconfig = self.paths.component_kubeconfig("apiserver-webhook-client")
        write_private(
            webhook_kubeconfig,
            yaml.safe_dump(
                webhook_client_kubeconfig(
                    pki.path("apiserver-webhook-client.crt"),
                    pki.path("apiserver-webhook-client.key"),
                ),
                sort_keys=False,
            ).encode(),
        )
        self.paths.admission_config.write_text(
            yaml.safe_dump(admission_configuration(webhook_kubeconfig), sort_keys=False)
        )
        self.paths.scheduler_config.write_text(
            yaml.safe_dump(
                scheduler_configuration(
                    self.paths.component_kubeconfig("kube-scheduler"), self.spec.controller_qps
                ),
                sort_keys=False,
            )
        )
        kwok_dir = self.paths.kwok_dir
        (kwok_dir / "exec").mkdir(parents=True, exist_ok=True)
        (kwok_dir / "home").mkdir(parents=True, exist_ok=True)
        (kwok_dir / "pod.log").write_text(pod_log_lines(self.spec.name))
        self.paths.attach_log.touch()
        stages = [
            *(
                yaml.safe_load((self.binaries.kwok_stages / f).read_text())
                for f in KWOK_STAGE_FILES
            ),
            OFFLOADED_JOB_POD_COMPLETE,
        ]
        metrics = [
            yaml.safe_load((self.binaries.kwok_metrics / f).read_text()) for f in KWOK_METRICS_FILES
        ]
        (kwok_dir / "kwok.yaml").write_text(
            yaml.safe_dump_all(
                kwok_documents(self.spec.name, kwok_dir, stages, metrics), sort_keys=False
            )
        )
        self.nodes.write_files(pki)

    def write_kubeconfig(self, path: Path, ca: bytes, cert: Path, key: Path, user: str) -> None:
        document = forge_kubeconfig(
            self.spec.name, self.server, ca, cert.read_bytes(), key.read_bytes(), user
        )
        write_private(path, yaml.safe_dump(document, sort_keys=False).encode())

    # -- starting --------------------------------------------------------------------------

    def _args(self, component: str) -> list[str]:
        ports = self.ports()
        builders: dict[str, Callable[[], list[str]]] = {
            "etcd": lambda: etcd_args(self.binaries, self.paths, ports),
            "kube-apiserver": lambda: apiserver_args(
                self.binaries,
                self.paths,
                ports,
                self.host_address,
                audit=self.nodes.audits_api_server,
            ),
            "kube-controller-manager": lambda: controller_manager_args(
                self.binaries, self.paths, ports, self.spec.controller_qps
            ),
            "kube-scheduler": lambda: scheduler_args(self.binaries, self.paths, ports),
            "kwok": lambda: kwok_args(self.binaries, self.paths, ports, self.pod_cidr),
            "metrics-server": lambda: metrics_server_args(
                self.binaries, self.paths, ports, self.address
            ),
        }
        builders |= self.nodes.command_lines(ports)
        return builders[component]()

    def _health_probe(self, component: str) -> tuple[str, ssl.SSLContext | bool]:
        ports = self.ports()
        insecure = ssl.create_default_context()
        insecure.check_hostname = False
        insecure.verify_mode = ssl.CERT_NONE  # self-signed serving certs of kcm and scheduler
        probes: dict[str, tuple[str, ssl.SSLContext | bool]] = {
            "etcd": (f"http://127.0.0.1:{ports['etcd']}/health", False),
            "kube-apiserver": (
                f"{self.server}/readyz",
                load_kubeconfig_file(self.paths.kubeconfig).ssl_context(),
            ),
            "kube-controller-manager": (
                f"https://127.0.0.1:{ports['controller-manager']}/healthz",
                insecure,
            ),
            "kube-scheduler": (f"https://127.0.0.1:{ports['scheduler']}/healthz", insecure),
            "kwok": (f"https://127.0.0.1:{ports['kwok']}/healthz", insecure),
            # /readyz waits for a first scrape (15 s): alive is enough to go on.
            "metrics-server": (
                f"https://{self.address}:{ports['metrics-server']}/livez",
                insecure,
            ),
            "vk-controller-manager": (
                f"http://127.0.0.1:{ports['vk-controller-manager']}/healthz",
                False,
            ),
            "vk-webhook": (f"https://127.0.0.1:{ports['vk-webhook']}/readyz", insecure),
            **{name: (url, False) for name, url in self.nodes.health_urls().items()},
            "prometheus": (f"http://127.0.0.1:{ports['prometheus']}/-/ready", False),
        }
        return probes[component]

    def _port_of(self, component: str) -> int | None:
        """The component's port on this machine's loopback (None: the node's, in its namespace)."""
        if component in IN_NODE_NAMESPACE:
            return None
        key = {
            "kube-apiserver": "apiserver",
            "kube-controller-manager": "controller-manager",
            "kube-scheduler": "scheduler",
        }.get(component, component)
        return self.ports()[key]

    def _fingerprint(self, component: str, args: list[str]) -> str:
        """What the component runs with: its command line and the config file it reads."""
        digest = hashlib.sha256("\0".join(args).encode())
        config_files = {
            "kwok": self.paths.kwok_dir / "kwok.yaml",
            "kube-apiserver": self.paths.audit_policy,
            "containerd": self.paths.node.containerd_config,
            "kubelet": self.paths.node.kubelet_config,
            "kube-proxy": self.paths.node.kube_proxy_config,
            "prometheus": self.paths.prometheus_config,
        }
        config = config_files.get(component)
        if config is not None and config.exists():  # the audit policy: a real node's only
            digest.update(config.read_bytes())
        if component.startswith("vk-"):
            digest.update(vk_source_digest().encode())
        return digest.hexdigest()

    async def ensure_component(self, component: str, *, restart: bool = False) -> bool:
        """Starts `component` unless it runs with the current configuration (a newer vk may
        configure it differently: then it is restarted) and no `restart` is asked for; waits
        until healthy. True when it was started."""
        args = self._args(component)
        fingerprint = self._fingerprint(component, args)
        pid = read_pid(self.paths.pid(component))
        started = False
        running = pid is not None and is_running(pid, self.marker)
        fingerprint_file = self.paths.fingerprint(component)
        stale = not fingerprint_file.exists() or fingerprint_file.read_text() != fingerprint
        if pid is not None and running and (restart or stale):
            await asyncio.to_thread(stop_processes, [pid], marker=self.marker)
            running = False
        if pid is None or not running:
            port = self._port_of(component)
            # A process stopped (or dead) a moment ago may still hold its port: wait for it.
            if port is not None and not await _port_released(
                port, within=10.0 if pid is not None else 0.0
            ):
                raise PlaygroundError(
                    f"{self.spec.name}: port {port} for {component} is taken by another process; "
                    f"free it, or run `vkctl playground down` and `up` again to pick new ports"
                )
            env = None
            if component == "kwok":  # kwok writes its own state under $HOME
                env = {**os.environ, "HOME": str(self.paths.kwok_dir / "home")}
            if component.startswith("vk-"):
                env = {
                    **os.environ,
                    "KUBECONFIG": str(self.paths.component_kubeconfig(component)),
                    "POD_NAME": f"{component}-{self.spec.name}",
                }
            pid = start_daemon(
                args,
                log_path=self.paths.log(component),
                pid_path=self.paths.pid(component),
                cwd=self.paths.root,
                env=env,
            )
            fingerprint_file.write_text(fingerprint)
            started = True
        await self._wait_healthy(component, pid)
        return started

    async def _wait_healthy(self, component: str, pid: int) -> None:
        url, ssl_context = self._health_probe(component)
        deadline = time.monotonic() + STARTUP_TIMEOUT
        log = self.paths.log(component)
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=ssl_context),
            timeout=aiohttp.ClientTimeout(total=2),
        ) as session:
            while True:
                if not is_running(pid, self.marker):
                    raise PlaygroundError(
                        f"{self.spec.name}: {component} exited during start-up; its log: {log}\n"
                        f"{log_tail(log)}"
                    )
                try:
                    async with session.get(url) as response:
                        if response.status == 200:
                            return
                except (TimeoutError, aiohttp.ClientError, OSError):
                    pass
                if time.monotonic() > deadline:
                    raise PlaygroundError(
                        f"{self.spec.name}: {component} did not become healthy at {url} within "
                        f"{STARTUP_TIMEOUT:.0f}s; its log: {log}\n{log_tail(log)}"
                    )
                await asyncio.sleep(0.2)

    async def up(self, report: Callable[[str], None]) -> None:
        """Brings the cluster to a usable state: starts what does not run, then makes sure its
        nodes and identity exist. Safe to call on a running cluster."""
        self.ports()
        await self.nodes.prepare()
        self._write_files()
        started = []
        for component in ("etcd", "kube-apiserver"):
            if await self.ensure_component(component):
                started.append(component)
        async with KubeClient(load_kubeconfig_file(self.paths.kubeconfig)) as client:
            # Before metrics-server starts: it reads the authentication ConfigMap at start-up.
            for document in metrics_server_objects(
                self.ports()["metrics-server"],
                self.paths.pki.ca_crt.read_bytes(),
                self.host_address,
            ):
                await client.apply(object_path(document), document)
        rest = DEPENDENT_COMPONENTS
        # Clients of an API server that was down have backed their watches off (up to 30 s
        # in client-go): restarted with it, they are back at once (a new namespace gets its
        # ServiceAccount, a new pod its node) instead of after that back-off.
        restart = bool(started)
        results = await asyncio.gather(*(self.ensure_component(c, restart=restart) for c in rest))
        started += [c for c, was_started in zip(rest, results, strict=True) if was_started]
        started += await self.nodes.start_node(restart)
        async with KubeClient(load_kubeconfig_file(self.paths.kubeconfig)) as client:
            await self._ensure_objects(client)
            await self.nodes.install(client)
            await self._wait_usable(client)
        started += await self.nodes.start_vk(restart)
        what = f"started {', '.join(started)}" if started else "already running"
        report(f"{self.spec.name}: ready at {self.server} ({what})")

    async def _ensure_objects(self, client: KubeClient) -> None:
        for name in node_names(self.spec):
            await client.apply(
                resource_path("v1", "nodes", name=name), kwok_node(name, self.spec.node_capacity)
            )

    async def apply_crds(self, client: KubeClient) -> None:
        """vk's CRDs, Established before anything uses them (helm leaves CRDs alone on an
        upgrade: they are applied first, as the README says to upgrade)."""
        crds = crd_manifests()
        for crd in crds:
            await client.apply(object_path(crd), crd)

        async def established() -> bool:
            for crd in crds:
                current = await client.get(object_path(crd))
                conditions = (current.get("status") or {}).get("conditions") or []
                if not any(
                    c["type"] == "Established" and c["status"] == "True" for c in conditions
                ):
                    return False
            return True

        apiserver_log = self.paths.log("kube-apiserver")
        await _wait_for(established, f"{self.spec.name}: vk's CRDs", apiserver_log)

    async def _wait_usable(self, client: KubeClient) -> None:
        """Nodes Ready and the default ServiceAccount there: the cluster can run pods."""
        real_nodes = self.nodes.real_nodes()
        names = set(node_names(self.spec)) | real_nodes
        # What runs the nodes: a real node's kubelet can exit after its health check passed
        # (it starts cAdvisor later), and then its node is never Ready.
        agents = ["kwok", *(["kubelet"] if real_nodes else [])]
        waiting: list[str] = []

        async def nodes_ready() -> bool:
            for agent in agents:
                pid = read_pid(self.paths.pid(agent))
                if pid is None or not is_running(pid, self.marker):
                    log = self.paths.log(agent)
                    raise PlaygroundError(
                        f"{self.spec.name}: {agent} exited before its nodes were Ready; "
                        f"its log: {log}\n{log_tail(log)}"
                    )
            nodes = {
                n["metadata"]["name"]: n
                for n in (await client.get(resource_path("v1", "nodes")))["items"]
            }
            waiting[:] = [
                f"{name}: {node_not_ready_reason(nodes.get(name))}"
                for name in sorted(names)
                if name not in nodes or not node_is_ready(nodes[name])
            ]
            return not waiting

        async def default_service_account() -> bool:
            try:
                await client.get(
                    resource_path("v1", "serviceaccounts", namespace="default", name="default")
                )
                return True
            except NotFound:
                return False

        await _wait_for(
            nodes_ready,
            f"{self.spec.name}: nodes Ready",
            self.paths.log(agents[-1]),
            waiting_on=lambda: "; ".join(waiting),
        )
        await _wait_for(
            default_service_account,
            f"{self.spec.name}: the default ServiceAccount",
            self.paths.log("kube-controller-manager"),
        )


async def _port_released(port: int, within: float) -> bool:
    """Whether the port is free, waiting a while for the process we stopped (or that died):
    a Go process's last threads close its sockets after its main thread is already a zombie."""
    deadline = time.monotonic() + within
    while port_in_use(port):
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.1)
    return True


async def _wait_for(
    check: Callable[[], Awaitable[bool]],
    what: str,
    log: Path,
    waiting_on: Callable[[], str] | None = None,
) -> None:
    """`waiting_on` says, on a timeout, what the last check still waited for."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not await check():
        if time.monotonic() > deadline:
            detail = f" ({waiting_on()})" if waiting_on is not None else ""
            raise PlaygroundError(
                f"timed out after {STARTUP_TIMEOUT:.0f}s waiting for {what}{detail}; "
                f"look at {log}\n{log_tail(log)}"
            )
        await asyncio.sleep(0.2)
