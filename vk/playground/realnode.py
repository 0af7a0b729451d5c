"""Real nodes for the playground: a kubelet and containerd (Debian's) in a network namespace the
playground creates, so that vk runs there as pods of its own image (on the consumer), and
offloaded pods run as containers (on a provider), as they do on real clusters.

Why a network namespace: a kubelet refuses a loopback node IP, and this machine's traffic may
only go to loopback or into namespaces of our own. So each node lives at its own address behind
a veth pair; the host end of the first node's pair, HOST_ADDRESS, is where every API server of
the playground listens: every node's pods reach every cluster there (a node's default route is
the machine, which delivers its own addresses locally), and the API servers, metrics-server and
Prometheus reach a node's pods through a route to its pod CIDR.

Two nodes on one machine share nothing they could break in each other: each has its namespace,
addresses and pod CIDR, its cgroup parent (named as its namespace), containerd's root, state,
socket and runc state, and the kubelet's root directory, so `down` removes one node's pods,
mounts and cgroups without touching another's.

containerd, the kubelet and kube-proxy enter the namespace with `nsenter --net` only: they share
the machine's mount namespace, so the kubelet's volume mounts are what containerd bind-mounts
into containers, and `down` finds every mount under the playground's directory.

The configuration files and command lines are built by pure functions; `ensure_network`,
`import_images` and `remove_node` are the side effects.
"""

from __future__ import annotations

import contextlib
import datetime
import hashlib
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vk.kube.pki import Issued, issue
from vk.playground.binaries import NodeBinaries
from vk.playground.images import NodeImages

# The playground's real nodes, numbered from 0: node i at 10.201.i.2 behind 10.201.i.1, its
# pods in 10.202.i.0/24. Every API server listens on node 0's host end.
MAX_REAL_NODES = 8
HOST_ADDRESS = "10.201.0.1"
LINK_PREFIX_LENGTH = 30
KUBELET_PORT = 10250
KUBELET_HEALTHZ_PORT = 10248
KUBE_PROXY_HEALTHZ_PORT = 10256
KUBE_PROXY_METRICS_PORT = 10249
CONTAINERD_METRICS_PORT = 1338
# A real node beside kwok nodes takes only vk's pods (which tolerate this): the tutorial's
# workloads there stay on the kwok nodes. A real node alone in its cluster takes every pod.
REAL_NODE_TAINT = {"key": "playground.vk.io/real-node", "value": "true", "effect": "NoSchedule"}
REAL_NODE_LABEL = "playground.vk.io/real-node"
CGROUP_ROOT = Path("/sys/fs/cgroup")
REQUIRED_TOOLS = ("containerd", "runc", "ctr", "iptables", "nsenter", "ip")
CNI_PLUGINS_DIR = Path("/usr/lib/cni")
INOTIFY_INSTANCES_LIMIT = Path("/proc/sys/fs/inotify/max_user_instances")
# Every process of the playground runs as root and shares root's inotify instances (128 on a
# default kernel): each API server holds 6, each controller manager 5, each kubelet 6. A kubelet
# that gets none exits a few seconds after it answered its health check (cAdvisor cannot
# start), so its node is never Ready. 512 is what kind's known issues advise for several
# clusters on one machine.
INOTIFY_INSTANCES_WANTED = 512
DEBIAN_PACKAGES = "containerd runc containernetworking-plugins iptables"


class RealNodeError(RuntimeError):
    """The real node cannot run here; the message says what to install or free."""


@dataclass(frozen=True)
class NodeNetwork:
    """One real node's network namespace, its veth pair (names within 15 bytes) with the
    addresses of both ends, and the node's pod CIDR."""

    namespace: str
    host_link: str
    node_link: str
    host_address: str
    node_address: str
    pod_cidr: str
    pod_gateway: str

    @property
    def namespace_path(self) -> str:
        return f"/var/run/netns/{self.namespace}"

    @property
    def cgroup_parent(self) -> str:
        """The cgroup under which the node's kubelet puts its pods (`kubepods` and below),
        named as the namespace: `down` finds both from the one name."""
        return self.namespace


def node_network(playground_root: Path, cluster_name: str, index: int) -> NodeNetwork:
    """Names derived from the playground's directory and the cluster, so its `down` finds them
    again; addresses from the node's number in the playground (see HOST_ADDRESS)."""
    if not 0 <= index < MAX_REAL_NODES:
        raise RealNodeError(f"a playground has at most {MAX_REAL_NODES} real nodes")
    key = f"{playground_root.resolve()}:{cluster_name}"
    tag = hashlib.sha256(key.encode()).hexdigest()[:8]
    return NodeNetwork(
        namespace=f"vk-{tag}",
        host_link=f"vkh{tag}",
        node_link=f"vkn{tag}",
        host_address=f"10.201.{index}.1",
        node_address=f"10.201.{index}.2",
        pod_cidr=f"10.202.{index}.0/24",
        pod_gateway=f"10.202.{index}.1",
    )


class NodePaths:
    """Everything of the node under `<cluster>/node`."""

    def __init__(self, cluster_root: Path) -> None:
        self.root = cluster_root / "node"

    @property
    def containerd_config(self) -> Path:
        return self.root / "containerd" / "config.toml"

    @property
    def containerd_root(self) -> Path:
        return self.root / "containerd" / "root"

    @property
    def containerd_state(self) -> Path:
        return self.root / "containerd" / "state"

    @property
    def containerd_socket(self) -> Path:
        return self.root / "containerd" / "containerd.sock"

    @property
    def cni_config_dir(self) -> Path:
        return self.root / "cni" / "net.d"

    @property
    def cni_data_dir(self) -> Path:
        return self.root / "cni" / "ipam"

    @property
    def kubelet_root(self) -> Path:
        return self.root / "kubelet"

    @property
    def kubelet_config(self) -> Path:
        return self.root / "kubelet.yaml"

    @property
    def kubelet_kubeconfig(self) -> Path:
        return self.root / "kubelet.kubeconfig"

    @property
    def pod_logs(self) -> Path:
        return self.root / "pod-logs"

    @property
    def kube_proxy_config(self) -> Path:
        return self.root / "kube-proxy.yaml"

    @property
    def kube_proxy_kubeconfig(self) -> Path:
        return self.root / "kube-proxy.kubeconfig"

    def pki(self, stem: str) -> Path:
        return self.root / "pki" / stem


def node_name(cluster_name: str) -> str:
    return f"{cluster_name}-node"


# -- configuration (pure) --------------------------------------------------------------------


def containerd_config(paths: NodePaths, network: NodeNetwork, pause_image: str) -> str:
    """containerd's CRI for one node: directories of its own (runc's state among them: its
    default is the machine's), the local pause image, Debian's CNI plugins, cgroupfs, and
    `restrict_oom_score_adj` (root here lacks CAP_SYS_RESOURCE: without it every sandbox fails
    with "can't get final child's PID from pipe: EOF")."""
    return f"""\
version = 2
root = "{paths.containerd_root}"
state = "{paths.containerd_state}"

[grpc]
  address = "{paths.containerd_socket}"

[metrics]
  address = "{network.node_address}:{CONTAINERD_METRICS_PORT}"

[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause_image}"
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_selinux = false
  disable_apparmor = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{CNI_PLUGINS_DIR}"
    conf_dir = "{paths.cni_config_dir}"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
        Root = "{paths.containerd_state / "runc"}"
"""


def cni_conflist(paths: NodePaths, network: NodeNetwork) -> dict[str, Any]:
    """A bridge in the node's namespace, addresses from its pod CIDR. No masquerade: the API
    servers see the pods' own addresses and answer them through the route to the pod CIDR."""
    return {
        "cniVersion": "1.0.0",
        "name": "vk-playground",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "dataDir": str(paths.cni_data_dir),
                    "ranges": [[{"subnet": network.pod_cidr, "gateway": network.pod_gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def kubelet_configuration(
    paths: NodePaths, network: NodeNetwork, client_ca: Path
) -> dict[str, Any]:
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": network.node_address,
        "port": KUBELET_PORT,
        "healthzBindAddress": network.node_address,
        "healthzPort": KUBELET_HEALTHZ_PORT,
        "readOnlyPort": 0,
        "tlsCertFile": str(paths.pki("kubelet-serving.crt")),
        "tlsPrivateKeyFile": str(paths.pki("kubelet-serving.key")),
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{paths.containerd_socket}",
        "imageServiceEndpoint": f"unix://{paths.containerd_socket}",
        # This machine: cgroup v1 without systemd managing it, swap possibly on, and a disk
        # shared with everything else (so eviction only when nearly full).
        "failCgroupV1": False,
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": f"/{network.cgroup_parent}",
        "failSwapOn": False,
        "evictionHard": {
            "memory.available": "1%",
            "nodefs.available": "1%",
            "imagefs.available": "1%",
        },
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "staticPodPath": "",
        "podLogsDir": str(paths.pod_logs),
        "clusterDNS": [],
        "serializeImagePulls": False,
        "resolvConf": "",
        # The node's status often, so a lost Lease or a replaced pod shows within seconds.
        "nodeStatusUpdateFrequency": "5s",
        "syncFrequency": "10s",
    }


def kubelet_args(
    binaries: NodeBinaries,
    paths: NodePaths,
    network: NodeNetwork,
    cluster_name: str,
    *,
    reserved_for_vk: bool,
) -> list[str]:
    """`reserved_for_vk`: the node is tainted with REAL_NODE_TAINT (it has kwok nodes beside)."""
    taint = REAL_NODE_TAINT
    return [
        str(binaries.kubelet),
        f"--config={paths.kubelet_config}",
        f"--kubeconfig={paths.kubelet_kubeconfig}",
        f"--root-dir={paths.kubelet_root}",
        f"--hostname-override={node_name(cluster_name)}",
        f"--node-ip={network.node_address}",
        f"--node-labels={REAL_NODE_LABEL}=true",
        *(
            [f"--register-with-taints={taint['key']}={taint['value']}:{taint['effect']}"]
            if reserved_for_vk
            else []
        ),
        "--v=1",
    ]


def kube_proxy_configuration(
    paths: NodePaths, network: NodeNetwork, cluster_name: str
) -> dict[str, Any]:
    return {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(paths.kube_proxy_kubeconfig)},
        "hostnameOverride": node_name(cluster_name),
        "bindAddress": network.node_address,
        "healthzBindAddress": f"{network.node_address}:{KUBE_PROXY_HEALTHZ_PORT}",
        "metricsBindAddress": f"{network.node_address}:{KUBE_PROXY_METRICS_PORT}",
        "clusterCIDR": network.pod_cidr,
        # The namespace's conntrack table is the machine's: leave its size alone.
        "conntrack": {"maxPerCore": 0, "min": 0},
    }


def kube_proxy_args(binaries: NodeBinaries, paths: NodePaths) -> list[str]:
    return [str(binaries.kube_proxy), f"--config={paths.kube_proxy_config}", "--v=1"]


def containerd_args(paths: NodePaths) -> list[str]:
    return ["containerd", f"--config={paths.containerd_config}", "--log-level=warn"]


def in_namespace(network: NodeNetwork, args: Sequence[str]) -> list[str]:
    """`args` run in the node's network namespace and nothing else of it (see the module)."""
    return ["nsenter", f"--net={network.namespace_path}", "--", *args]


def node_certificates(
    ca: Any, ca_key: Any, cluster_name: str, node_address: str, now: datetime.datetime
) -> dict[str, Issued]:
    """The kubelet's client identity (a node, as NodeRestriction wants), its serving
    certificate for the node's address, and kube-proxy's identity."""
    name = node_name(cluster_name)
    return {
        "kubelet-client": issue(
            ca, ca_key, f"system:node:{name}", now, organizations=("system:nodes",), client=True
        ),
        "kubelet-serving": issue(
            ca,
            ca_key,
            f"system:node:{name}",
            now,
            dns_names=(name,),
            ip_addresses=(node_address,),
            server=True,
        ),
        "kube-proxy": issue(ca, ca_key, "system:kube-proxy", now, client=True),
    }


# -- side effects ----------------------------------------------------------------------------


def check_tools() -> None:
    missing = [tool for tool in REQUIRED_TOOLS if shutil.which(tool) is None]
    if not CNI_PLUGINS_DIR.joinpath("bridge").exists():
        missing.append("the CNI plugins")
    if missing:
        raise RealNodeError(
            f"the real node needs {', '.join(missing)}: apt-get install -y {DEBIAN_PACKAGES}"
        )
    if os.geteuid() != 0:
        raise RealNodeError(
            "the real node needs root (network namespaces, cgroups, mounts): run as root"
        )


def ensure_inotify_instances(
    limit_file: Path = INOTIFY_INSTANCES_LIMIT, wanted: int = INOTIFY_INSTANCES_WANTED
) -> int | None:
    """Raises the machine's limit of inotify instances per user to `wanted` (never lowers
    it). Returns the limit it replaced, None when it was already high enough."""
    try:
        current = int(limit_file.read_text())
        if current >= wanted:
            return None
        limit_file.write_text(f"{wanted}\n")
    except (OSError, ValueError) as error:
        raise RealNodeError(
            f"the real node's kubelet needs inotify instances, and the limit could not be raised "
            f"({error}): run `sysctl -w fs.inotify.max_user_instances={wanted}`"
        ) from error
    return current


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(["ip", *args], capture_output=True, text=True)
    if check and result.returncode != 0:
        raise RealNodeError(f"`ip {' '.join(args)}` failed: {result.stderr.strip()}")
    return result


def _address_owner(address: str) -> str | None:
    """The interface of the root namespace that holds `address`, if any."""
    for entry in json.loads(_ip("-j", "-4", "addr", "show").stdout or "[]"):
        for info in entry.get("addr_info", []):
            if info.get("local") == address:
                name: str = entry["ifname"]
                return name
    return None


def ensure_network(network: NodeNetwork) -> None:
    """The namespace, the veth pair with its two addresses, forwarding in the namespace, and
    the machine's route to the node's pods. Idempotent."""
    owner = _address_owner(network.host_address)
    if owner is not None and owner != network.host_link:
        raise RealNodeError(
            f"{network.host_address} is already on {owner}: another playground has a real node; "
            f"bring it down first (`vkctl playground down` with its VK_PLAYGROUND_DIR)"
        )
    if not Path(network.namespace_path).exists():
        _ip("netns", "add", network.namespace)
    if owner is None:
        _ip("link", "del", network.host_link, check=False)  # half made by an interrupted run
        _ip("link", "add", network.host_link, "type", "veth", "peer", "name", network.node_link)
        _ip("link", "set", network.node_link, "netns", network.namespace)
        _ip("addr", "add", f"{network.host_address}/{LINK_PREFIX_LENGTH}", "dev", network.host_link)
        _ip("link", "set", network.host_link, "up")
        inside = ("-n", network.namespace)
        node_address = f"{network.node_address}/{LINK_PREFIX_LENGTH}"
        _ip(*inside, "addr", "add", node_address, "dev", network.node_link)
        _ip(*inside, "link", "set", network.node_link, "up")
        _ip(*inside, "link", "set", "lo", "up")
        _ip(*inside, "route", "add", "default", "via", network.host_address)
    _ip(
        "route",
        "replace",
        network.pod_cidr,
        "via",
        network.node_address,
        "dev",
        network.host_link,
    )
    subprocess.run(
        [
            "nsenter",
            f"--net={network.namespace_path}",
            "sysctl",
            "-q",
            "-w",
            "net.ipv4.ip_forward=1",
        ],
        check=True,
    )


def cgroup_hierarchies() -> list[Path]:
    """The mounted cgroup hierarchies (v1: one per controller, co-mounted ones by symlink;
    v2: the one)."""
    if (CGROUP_ROOT / "cgroup.controllers").exists():
        return [CGROUP_ROOT]
    return sorted(p for p in CGROUP_ROOT.iterdir() if p.is_dir() and not p.is_symlink())


def ensure_cgroup_parent(network: NodeNetwork) -> None:
    """The node's cgroup parent in every hierarchy: the kubelet refuses a `cgroupRoot` that
    does not exist. A new v1 cpuset starts with no CPUs and no memory nodes; it gets its
    parent's, as anything put in it needs some."""
    for hierarchy in cgroup_hierarchies():
        parent = hierarchy / network.cgroup_parent
        parent.mkdir(exist_ok=True)
        for name in ("cpuset.cpus", "cpuset.mems"):
            own = parent / name
            if own.exists() and not own.read_text().strip():
                own.write_text((hierarchy / name).read_text())


def import_images(paths: NodePaths, images: NodeImages) -> None:
    """Loads the archives into the k8s.io namespace the CRI reads, unless there already."""
    ctr = ["ctr", f"--address={paths.containerd_socket}", "--namespace=k8s.io"]
    listed = subprocess.run([*ctr, "images", "list", "-q"], capture_output=True, text=True)
    present = set(listed.stdout.split())
    for name, archive in images.archives():
        if name in present:
            continue
        result = subprocess.run(
            [*ctr, "images", "import", "--no-unpack", str(archive)], capture_output=True, text=True
        )
        if result.returncode != 0:
            raise RealNodeError(f"importing {archive} into containerd failed: {result.stderr}")


def mounts_under(root: Path) -> list[str]:
    prefix = str(root.resolve()) + os.sep
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point.startswith(prefix):
            points.append(point)
    return points


def cgroup_dirs(name: str) -> list[Path]:
    """`name` in every cgroup hierarchy that has it, deepest children first."""
    found: list[Path] = []
    for hierarchy in cgroup_hierarchies():
        top = hierarchy / name
        if top.is_dir():
            found += sorted((p for p in top.rglob("*") if p.is_dir()), key=lambda p: -len(p.parts))
            found.append(top)
    return found


def remove_node(network: NodeNetwork, node_root: Path) -> None:
    """Everything one real node leaves outside its files: its pods' processes (those in its
    cgroup parent, no other node's), the mounts under its directory, its cgroups, its namespace
    (with the iptables rules and the bridge in it), the veth pair and the machine's route.
    Call after its containerd and kubelet stopped."""
    for directory in cgroup_dirs(network.cgroup_parent):
        procs = directory / "cgroup.procs"
        with contextlib.suppress(OSError):
            for pid in procs.read_text().split():
                with contextlib.suppress(ProcessLookupError):
                    os.kill(int(pid), signal.SIGKILL)
    for point in sorted(mounts_under(node_root), key=len, reverse=True):
        subprocess.run(["umount", "--lazy", point], capture_output=True)
    deadline = time.monotonic() + 10
    for directory in cgroup_dirs(network.cgroup_parent):
        while True:
            try:
                directory.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:  # its last processes still exiting
                if time.monotonic() > deadline:
                    break
                time.sleep(0.1)
    if Path(network.namespace_path).exists():
        _ip("netns", "del", network.namespace, check=False)
    _ip("link", "del", network.host_link, check=False)
