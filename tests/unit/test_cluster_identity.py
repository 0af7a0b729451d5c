"""The cluster identity ConfigMap, as vk's chart writes it: parsed without I/O, with clear
errors."""

from typing import Any

import pytest

from tests.plain_manifests import installed
from vk.api.constants import CLUSTER_IDENTITY_CONFIGMAP, VK_NAMESPACE
from vk.api.identity import ClusterIdentity, InvalidClusterIdentity, parse_cluster_identity


def _configmap(data: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "vk-cluster-identity", "namespace": "vk"},
        "data": data,
    }


def test_the_charts_identity_configmap_is_where_vk_reads_it_and_parses() -> None:
    configmap = installed("ConfigMap", CLUSTER_IDENTITY_CONFIGMAP, namespace=VK_NAMESPACE)

    # deploy/vk.yaml names a placeholder cluster, without labels.
    assert parse_cluster_identity(configmap) == ClusterIdentity(cluster_id="my-cluster")


def test_labels_as_the_chart_writes_them_parse() -> None:
    # The chart's toJson: compact, keys sorted.
    labels = '{"tier":"gold","topology.liqo.io/region":"south"}'

    identity = parse_cluster_identity(_configmap({"clusterID": "naples", "clusterLabels": labels}))

    assert identity == ClusterIdentity(
        cluster_id="naples", labels={"topology.liqo.io/region": "south", "tier": "gold"}
    )


def test_identity_without_labels_has_none() -> None:
    assert parse_cluster_identity(_configmap({"clusterID": "venice"})).labels == {}
    assert parse_cluster_identity(_configmap({"clusterID": "venice", "clusterLabels": "{}"})) == (
        ClusterIdentity(cluster_id="venice")
    )


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
