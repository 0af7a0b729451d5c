"""How a playground is described: defaults, --cluster flags, YAML files, and bad input."""

from __future__ import annotations

from pathlib import Path

import pytest

from vk.playground.playground import env_exports, pod_cidr
from vk.playground.spec import (
    DEFAULT_CLUSTERS,
    InvalidPlaygroundSpec,
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
