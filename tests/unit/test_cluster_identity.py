"""The cluster identity ConfigMap: forged and parsed without I/O, with clear errors."""

import json
from typing import Any

import pytest

from vk.api.identity import (
    ClusterIdentity,
    InvalidClusterIdentity,
    forge_cluster_identity_configmap,
    parse_cluster_identity,
)


def _configmap(data: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "vk-cluster-identity", "namespace": "vk"},
        "data": data,
    }


def test_identity_configmap_lives_in_the_vk_namespace() -> None:
    configmap = forge_cluster_identity_configmap("naples", {"topology.liqo.io/region": "south"})

    assert configmap == _configmap(
        {"clusterID": "naples", "clusterLabels": '{"topology.liqo.io/region": "south"}'}
    )


def test_forged_identity_parses_back() -> None:
    labels = {"topology.liqo.io/region": "south", "tier": "gold"}

    identity = parse_cluster_identity(forge_cluster_identity_configmap("naples", labels))

    assert identity == ClusterIdentity(cluster_id="naples", labels=labels)


def test_identity_without_labels_has_none() -> None:
    assert parse_cluster_identity(forge_cluster_identity_configmap("venice")).labels == {}
    assert parse_cluster_identity(_configmap({"clusterID": "venice"})).labels == {}


def test_forged_labels_are_serialized_deterministically() -> None:
    first = forge_cluster_identity_configmap("venice", {"b": "2", "a": "1"})
    second = forge_cluster_identity_configmap("venice", {"a": "1", "b": "2"})

    assert first == second
    assert json.loads(first["data"]["clusterLabels"]) == {"a": "1", "b": "2"}


@pytest.mark.parametrize(
    ("configmap", "message"),
    [
        ({"metadata": {}}, "has no data"),
        (_configmap({"clusterLabels": "{}"}), "has no 'clusterID' key"),
        (_configmap({"clusterID": "Venice"}), "not a DNS-1123 label"),
        (_configmap({"clusterID": ""}), "cluster ID is empty"),
        (_configmap({"clusterID": "venice", "clusterLabels": "{"}), "is not valid JSON"),
        (_configmap({"clusterID": "venice", "clusterLabels": '["a"]'}), "must be an object"),
        (
            _configmap({"clusterID": "venice", "clusterLabels": '{"region": 3}'}),
            "not a string-to-string pair",
        ),
        (
            _configmap({"clusterID": "venice", "clusterLabels": '{"region": "north italy"}'}),
            "not a valid label value",
        ),
        (
            _configmap({"clusterID": "venice", "clusterLabels": '{"-region": "north"}'}),
            "not a valid label name",
        ),
        (
            _configmap({"clusterID": "venice", "clusterLabels": '{"Topology/region": "north"}'}),
            "invalid prefix",
        ),
    ],
)
def test_malformed_identity_configmap_is_refused_with_a_clear_message(
    configmap: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidClusterIdentity, match=message) as refused:
        parse_cluster_identity(configmap)

    assert "ConfigMap vk/vk-cluster-identity" in str(refused.value)


def test_forging_an_invalid_identity_is_refused() -> None:
    with pytest.raises(InvalidClusterIdentity, match="DNS-1123"):
        forge_cluster_identity_configmap("Venice")
    with pytest.raises(InvalidClusterIdentity, match="label value"):
        forge_cluster_identity_configmap("venice", {"region": "x" * 64})
