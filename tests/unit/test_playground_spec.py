"""How a playground is described: defaults, --cluster flags, YAML files, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.playground_fakes import FAKE_BINARIES
from vk.playground.cluster_objects import scheduler_configuration
from vk.playground.commandlines import controller_manager_args, scheduler_args
from vk.playground.paths import ClusterPaths
from vk.playground.playground import env_exports, pod_cidr
from vk.playground.spec import (
    DEFAULT_CLUSTERS,
    InvalidPlaygroundSpec,
    cluster_spec,
    parse_cluster_flag,
    parse_playground_file,
)


def test_default_playground_is_the_tutorials_three_clusters() -> None:
    assert [(c.name, c.role, c.nodes, c.labels) for c in DEFAULT_CLUSTERS] == [
        ("venice", "consumer", 1, {"topology.liqo.io/region": "north"}),
        ("florence", "provider", 2, {"topology.liqo.io/region": "center"}),
        ("naples", "provider", 2, {"topology.liqo.io/region": "south"}),
    ]


def test_cluster_flag_gives_name_role_nodes_and_labels() -> None:
    spec = parse_cluster_flag("cool-firefly:provider:3:topology.liqo.io/region=east,tier=gold")
    assert (spec.name, spec.role, spec.nodes) == ("cool-firefly", "provider", 3)
    assert spec.labels == {"topology.liqo.io/region": "east", "tier": "gold"}


def test_cluster_flag_with_only_a_name_is_a_one_node_provider() -> None:
    spec = parse_cluster_flag("wispy-firefly")
    assert (spec.role, spec.nodes, spec.labels) == ("provider", 1, {})


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("Venice", "DNS-1123"),
        ("venice:boss", "role must be one of consumer, provider"),
        ("venice:consumer:many", "NODES must be a number"),
        ("venice:consumer:1:novalue", "is not KEY=VALUE"),
    ],
)
def test_bad_cluster_flags_say_what_to_fix(flag: str, message: str) -> None:
    with pytest.raises(InvalidPlaygroundSpec, match=message):
        parse_cluster_flag(flag)


def test_playground_file_with_custom_capacity() -> None:
    clusters = parse_playground_file(
        """
clusters:
- name: home
  role: consumer
  nodes: 1
- name: cool-firefly
  nodes: 2
  labels: {topology.liqo.io/region: east}
  nodeCapacity: {pods: "1100"}
"""
    )
    assert [c.name for c in clusters] == ["home", "cool-firefly"]
    assert clusters[1].node_capacity["pods"] == "1100"
    assert clusters[1].node_capacity["cpu"] == "8"  # the defaults stay for what is not given


def test_playground_file_refuses_duplicate_names() -> None:
    with pytest.raises(InvalidPlaygroundSpec, match="unique: a"):
        parse_playground_file("clusters: [{name: a}, {name: a}]")


def test_playground_file_may_leave_vk_out_of_a_cluster() -> None:
    clusters = parse_playground_file("clusters: [{name: a, vk: false}, {name: b}]")

    assert [c.vk for c in clusters] == [False, True]
    assert [c.to_dict()["vk"] for c in clusters] == [False, True]  # recorded in the state
    with pytest.raises(InvalidPlaygroundSpec, match="vk and realNode must be true or false"):
        parse_playground_file("clusters: [{name: a, vk: 'no'}]")


def test_controller_qps_raises_both_controllers_rates_and_is_recorded() -> None:
    (kept, raised) = parse_playground_file("clusters: [{name: a}, {name: b, controllerQPS: 1000}]")
    assert (kept.controller_qps, raised.controller_qps) == (None, 1000)
    assert cluster_spec(raised.to_dict()) == raised  # the recorded state gives it back
    paths = ClusterPaths(Path("/state/b"))
    ports = {"controller-manager": 1, "scheduler": 2}
    binaries = FAKE_BINARIES
    manager = controller_manager_args(binaries, paths, ports, raised.controller_qps)
    assert manager[-2:] == ["--kube-api-qps=1000", "--kube-api-burst=2000"]
    assert not any("kube-api" in flag for flag in controller_manager_args(binaries, paths, ports))
    kubeconfig = paths.component_kubeconfig("kube-scheduler")
    assert scheduler_configuration(kubeconfig, 1000)["clientConnection"] == {
        "kubeconfig": str(kubeconfig),
        "qps": 1000,
        "burst": 2000,
    }
    # Kubernetes' defaults when not raised; one scheduler, never electing a leader.
    assert scheduler_configuration(kubeconfig, None)["clientConnection"] == {
        "kubeconfig": str(kubeconfig)
    }
    assert scheduler_configuration(kubeconfig, None)["leaderElection"] == {"leaderElect": False}


def test_scheduler_reads_its_client_from_its_configuration_file() -> None:
    paths = ClusterPaths(Path("/state/b"))
    flags = scheduler_args(FAKE_BINARIES, paths, {"scheduler": 2})
    assert f"--config={paths.scheduler_config}" in flags
    # Beside --config, kube-scheduler ignores --kubeconfig: none is given to mislead.
    assert not any(flag.startswith("--kubeconfig=") for flag in flags)


@pytest.mark.parametrize("qps", [0, -5, "many", True, 2.5])
def test_controller_qps_must_be_a_positive_whole_number(qps: object) -> None:
    with pytest.raises(InvalidPlaygroundSpec, match="controllerQPS must be a whole number >= 1"):
        cluster_spec({"name": "a", "controllerQPS": qps})


def test_playground_file_must_list_clusters() -> None:
    with pytest.raises(InvalidPlaygroundSpec, match="clusters:"):
        parse_playground_file("name: a")


def test_env_exports_the_consumer_as_kubeconfig_and_every_cluster_by_name() -> None:
    paths = {c.name: Path(f"/state/{c.name}/kubeconfig") for c in DEFAULT_CLUSTERS}
    assert env_exports(DEFAULT_CLUSTERS, paths) == [
        'export KUBECONFIG="/state/venice/kubeconfig"',
        'export KUBECONFIG_VENICE="/state/venice/kubeconfig"',
        'export KUBECONFIG_FLORENCE="/state/florence/kubeconfig"',
        'export KUBECONFIG_NAPLES="/state/naples/kubeconfig"',
    ]


def test_each_cluster_gets_its_own_pod_cidr() -> None:
    assert [pod_cidr(i) for i in range(3)] == ["10.244.0.0/16", "10.245.0.0/16", "10.246.0.0/16"]
