"""The real node's pure parts: names, the configuration of its daemons, the API servers' and
metrics-server's addressing with a real node, vk's chart values, and the images' inputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.playground_fakes import FAKE_BINARIES
from vk.playground.binaries import NodeBinaries
from vk.playground.cluster import cluster_components, node_not_ready_reason
from vk.playground.cluster_objects import metrics_server_service, playground_chart_values
from vk.playground.commandlines import apiserver_args
from vk.playground.images import DEFAULT_DEBIAN_MIRROR, debian_mirror, source_digest
from vk.playground.paths import ClusterPaths
from vk.playground.realnode import (
    HOST_ADDRESS,
    MAX_REAL_NODES,
    NodePaths,
    RealNodeError,
    cni_conflist,
    containerd_config,
    ensure_inotify_instances,
    in_namespace,
    kube_proxy_configuration,
    kubelet_args,
    kubelet_configuration,
    node_network,
)
from vk.playground.spec import (
    DEFAULT_CLUSTERS,
    InvalidPlaygroundSpec,
    validate_clusters,
    with_real_node,
)


def test_real_node_mode_gives_the_consumer_a_node_for_vk_and_naples_its_only_node() -> None:
    clusters = with_real_node(DEFAULT_CLUSTERS)
    venice, florence, naples = clusters
    assert [c.name for c in clusters if c.real_node] == ["venice", "naples"]
    assert venice.nodes == 1  # its kwok node beside: the real one is reserved for vk
    assert naples.nodes == 0  # the real node alone: offloaded pods run there, as containers
    assert florence == DEFAULT_CLUSTERS[1]
    for real in (venice, naples):
        assert "kubelet" in cluster_components(real)
        assert "vk-controller-manager" not in cluster_components(real)  # a pod there
    assert "kubelet" not in cluster_components(florence)
    assert validate_clusters(clusters) == clusters


def test_a_playground_has_a_bounded_number_of_real_nodes() -> None:
    many = tuple(
        DEFAULT_CLUSTERS[1].__class__(f"p{i}", "provider", 0, real_node=True)
        for i in range(MAX_REAL_NODES + 1)
    )
    with pytest.raises(InvalidPlaygroundSpec, match=f"{MAX_REAL_NODES} clusters at most"):
        validate_clusters(many)
    with pytest.raises(RealNodeError):
        node_network(Path("/tmp/a"), "p8", MAX_REAL_NODES)


def test_network_names_fit_linux_interface_names_and_follow_the_playground_and_cluster() -> None:
    one = node_network(Path("/tmp/a"), "venice", 0)
    assert one == node_network(Path("/tmp/a"), "venice", 0)
    assert one.namespace != node_network(Path("/tmp/b"), "venice", 0).namespace
    assert one.namespace != node_network(Path("/tmp/a"), "naples", 0).namespace
    assert len(one.host_link) <= 15
    assert len(one.node_link) <= 15
    assert in_namespace(one, ["kubelet"])[:3] == ["nsenter", f"--net={one.namespace_path}", "--"]


def test_two_nodes_share_no_address_cidr_or_cgroup_and_the_first_hosts_the_api_servers() -> None:
    first = node_network(Path("/pg"), "venice", 0)
    second = node_network(Path("/pg"), "naples", 1)
    assert first.host_address == HOST_ADDRESS
    assert (first.node_address, first.pod_cidr) == ("10.201.0.2", "10.202.0.0/24")
    assert (second.host_address, second.node_address) == ("10.201.1.1", "10.201.1.2")
    assert second.pod_cidr == "10.202.1.0/24"
    assert first.cgroup_parent != second.cgroup_parent
    for network in (first, second):
        paths = NodePaths(Path("/pg") / network.namespace)
        kubelet = kubelet_configuration(paths, network, Path("/pg/ca.crt"))
        assert kubelet["cgroupRoot"] == f"/{network.cgroup_parent}"
        assert kubelet["address"] == kubelet["healthzBindAddress"] == network.node_address
        assert kube_proxy_configuration(paths, network, "x")["clusterCIDR"] == network.pod_cidr


def test_a_real_node_is_tainted_for_vk_only_when_kwok_nodes_are_beside_it() -> None:
    network = node_network(Path("/pg"), "venice", 0)
    node = NodeBinaries(*(Path(f"/bin/{n}") for n in NodeBinaries.__dataclass_fields__))
    paths = NodePaths(Path("/pg/venice"))
    beside = kubelet_args(node, paths, network, "venice", reserved_for_vk=True)
    alone = kubelet_args(node, paths, network, "venice", reserved_for_vk=False)
    taint = "--register-with-taints=playground.vk.io/real-node=true:NoSchedule"
    assert taint in beside
    assert taint not in alone
    assert f"--node-ip={network.node_address}" in alone


def test_containerd_keeps_everything_under_the_node_and_restricts_oom_score_adj() -> None:
    paths = NodePaths(Path("/pg/naples"))
    network = node_network(Path("/pg"), "naples", 1)
    config = containerd_config(paths, network, "localhost/vk-pause:1")
    assert 'sandbox_image = "localhost/vk-pause:1"' in config
    assert "restrict_oom_score_adj = true" in config
    assert "netns_mounts_under_state_dir = true" in config
    assert 'root = "/pg/naples/node/containerd/root"' in config
    assert 'Root = "/pg/naples/node/containerd/state/runc"' in config  # not /run/containerd
    assert 'address = "10.201.1.2:1338"' in config
    bridge = cni_conflist(paths, network)["plugins"][0]
    assert bridge["ipam"]["ranges"] == [[{"subnet": "10.202.1.0/24", "gateway": "10.202.1.1"}]]
    assert bridge["ipam"]["dataDir"] == "/pg/naples/node/cni/ipam"


def test_api_servers_listen_where_the_node_reaches_them_and_audit_service_accounts() -> None:
    paths = ClusterPaths(Path("/pg/venice"))
    ports = {"apiserver": 6443, "etcd": 2379}
    plain = apiserver_args(FAKE_BINARIES, paths, ports)
    assert "--bind-address=127.0.0.1" in plain
    assert "--endpoint-reconciler-type=none" in plain
    assert not [a for a in plain if a.startswith("--audit")]
    real = apiserver_args(FAKE_BINARIES, paths, ports, HOST_ADDRESS, audit=True)
    assert f"--bind-address={HOST_ADDRESS}" in real
    assert f"--advertise-address={HOST_ADDRESS}" in real
    assert "--endpoint-reconciler-type=lease" in real
    assert "--enable-aggregator-routing=true" in real
    assert f"--audit-log-path={paths.audit_log}" in real


def test_metrics_server_is_reached_through_an_endpoint_slice_with_a_real_node() -> None:
    [external] = metrics_server_service(4443, None)
    assert external["spec"]["type"] == "ExternalName"
    service, endpoints = metrics_server_service(4443, HOST_ADDRESS)
    assert service["spec"]["ports"] == [
        {"name": "https", "port": 4443, "protocol": "TCP", "targetPort": 4443}
    ]
    assert endpoints["metadata"]["labels"]["kubernetes.io/service-name"] == "metrics-server"
    assert endpoints["endpoints"][0]["addresses"] == [HOST_ADDRESS]


def test_the_chart_puts_every_vk_pod_on_the_real_node_with_the_local_image() -> None:
    venice = with_real_node(DEFAULT_CLUSTERS)[0]
    values = playground_chart_values(venice, "localhost/vk:dev-abc", "https://10.201.0.1:6443")
    assert values["image"] == {
        "repository": "localhost/vk",
        "tag": "dev-abc",
        "pullPolicy": "Never",
    }
    assert values["clusterID"] == "venice"
    for component in ("controllerManager", "webhook", "virtualKubelet"):
        assert values[component]["nodeSelector"] == {"playground.vk.io/real-node": "true"}
        assert values[component]["tolerations"][0]["effect"] == "NoSchedule"
    assert values["controllerManager"]["apiServerURL"] == "https://10.201.0.1:6443"


def test_the_debian_mirror_comes_from_apts_sources() -> None:
    one_line = "deb http://mirror.example/debian bookworm main\n"
    deb822 = "Types: deb\nURIs: https://deb.example.org/debian/\nSuites: bookworm\n"
    assert debian_mirror([one_line]) == "http://mirror.example/debian"
    assert debian_mirror([deb822]) == "https://deb.example.org/debian"
    assert debian_mirror(["# nothing\n"]) == DEFAULT_DEBIAN_MIRROR


def test_the_image_digest_follows_what_the_dockerfile_copies(tmp_path: Path) -> None:
    for name in ("Dockerfile", "pyproject.toml", "README.md"):
        (tmp_path / name).write_text(name)
    (tmp_path / "vk").mkdir()
    (tmp_path / "deploy" / "helm").mkdir(parents=True)
    (tmp_path / "deploy" / "helm" / "Chart.yaml").write_text("name: vk\n")
    (tmp_path / "vk" / "a.py").write_text("a = 1\n")
    before = source_digest(tmp_path)
    (tmp_path / "vk" / "__pycache__").mkdir()
    (tmp_path / "vk" / "__pycache__" / "a.pyc").write_bytes(b"\0")
    (tmp_path / "tests.txt").write_text("not copied")
    assert source_digest(tmp_path) == before
    (tmp_path / "vk" / "a.py").write_text("a = 2\n")
    assert source_digest(tmp_path) != before


def test_the_inotify_limit_is_raised_never_lowered_and_a_failure_says_the_fix(
    tmp_path: Path,
) -> None:
    limit = tmp_path / "max_user_instances"
    limit.write_text("128\n")
    assert ensure_inotify_instances(limit, wanted=512) == 128
    assert limit.read_text() == "512\n"
    assert ensure_inotify_instances(limit, wanted=512) is None
    limit.write_text("8192\n")
    assert ensure_inotify_instances(limit, wanted=512) is None
    assert limit.read_text() == "8192\n"
    with pytest.raises(RealNodeError, match=r"sysctl -w fs.inotify.max_user_instances=512"):
        ensure_inotify_instances(tmp_path / "no" / "such" / "file", wanted=512)


def test_a_node_not_ready_is_explained_by_its_ready_condition() -> None:
    def node(*conditions: dict[str, str]) -> dict[str, object]:
        return {"status": {"conditions": list(conditions)}}

    assert node_not_ready_reason(None) == "not registered"
    assert node_not_ready_reason(node()) == "no Ready condition yet"
    network = {
        "type": "Ready",
        "status": "False",
        "reason": "KubeletNotReady",
        "message": "container runtime network not ready",
    }
    assert node_not_ready_reason(node({"type": "MemoryPressure", "status": "False"}, network)) == (
        "Ready=False, container runtime network not ready"
    )
    assert node_not_ready_reason(node({"type": "Ready", "status": "Unknown"})) == "Ready=Unknown"
