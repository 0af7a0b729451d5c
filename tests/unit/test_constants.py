"""Liqo's well-known names, and the pure functions that build names from them."""

import pytest

from vk.api import constants
from vk.api.core import InvalidClusterID, validate_cluster_id


def test_tenant_namespace_is_liqo_tenant_and_the_cluster_id() -> None:
    assert constants.tenant_namespace("cool-firefly") == "liqo-tenant-cool-firefly"


def test_kubeconfig_secret_is_named_after_the_resource_slice() -> None:
    assert constants.kubeconfig_secret_name("mypool") == "kubeconfig-resourceslice-mypool"


def test_labels_and_taint_are_liqos() -> None:
    taint = (
        f"{constants.VIRTUAL_NODE_TAINT_KEY}={constants.VIRTUAL_NODE_TAINT_VALUE}"
        f":{constants.VIRTUAL_NODE_TAINT_EFFECT}"
    )

    assert taint == "virtual-node.liqo.io/not-allowed=true:NoExecute"
    assert f"{constants.TYPE_LABEL}={constants.TYPE_VIRTUAL_NODE}" == "liqo.io/type=virtual-node"
    assert constants.REMOTE_CLUSTER_ID_LABEL == "liqo.io/remote-cluster-id"
    assert constants.REMOTE_ID_LABEL == "liqo.io/remoteID"
    assert constants.REPLICATION_LABEL == "liqo.io/replication"
    assert constants.CREATE_VIRTUAL_NODE_ANNOTATION == "liqo.io/create-virtual-node"
    assert constants.SCHEDULING_ENABLED_LABEL == "liqo.io/scheduling-enabled"
    assert constants.ORIGIN_LABEL == "offloading.liqo.io/origin"
    assert constants.DESTINATION_LABEL == "offloading.liqo.io/destination"
    assert constants.NODENAME_LABEL == "offloading.liqo.io/nodename"
    assert constants.SKIP_REFLECTION_ANNOTATION == "liqo.io/skip-reflection"
    assert constants.ALLOW_REFLECTION_ANNOTATION == "liqo.io/allow-reflection"
    assert constants.RUNTIME_CLASS_NAME == "liqo"
    assert constants.NAMESPACE_OFFLOADING_NAME == "offloading"
    assert constants.REGION_LABEL == "topology.liqo.io/region"


@pytest.mark.parametrize(
    "cluster_id",
    ["venice", "cool-firefly", "a", "4858caa2-7848-4aab-a6b4-6984389bac56", "x" * 63],
)
def test_dns1123_labels_are_valid_cluster_ids(cluster_id: str) -> None:
    assert validate_cluster_id(cluster_id) == cluster_id


@pytest.mark.parametrize(
    ("cluster_id", "reason"),
    [
        ("", "empty"),
        ("Venice", "DNS-1123"),
        ("cool_firefly", "DNS-1123"),
        ("-venice", "DNS-1123"),
        ("venice-", "DNS-1123"),
        ("venice.it", "DNS-1123"),
        ("x" * 64, "at most 63"),
    ],
)
def test_other_cluster_ids_are_refused_with_the_reason(cluster_id: str, reason: str) -> None:
    with pytest.raises(InvalidClusterID, match=reason):
        validate_cluster_id(cluster_id)


def identity_secret(namespace: str, name: str, provider: object = "naples") -> dict[str, object]:
    return {
        "metadata": {
            "namespace": namespace,
            "name": name,
            "labels": {"liqo.io/remote-cluster-id": provider},
        }
    }


@pytest.mark.parametrize(
    ("secret", "provider"),
    [
        (identity_secret("liqo-tenant-naples", "vk-control-plane-naples"), "naples"),
        # Labelled alike, anywhere else, or under another name, or for another provider: not it.
        (identity_secret("team-a", "vk-control-plane-naples"), None),
        (identity_secret("liqo-tenant-naples", "mine"), None),
        (identity_secret("liqo-tenant-naples", "vk-control-plane-naples", "florence"), None),
        (identity_secret("liqo-tenant-naples", "vk-control-plane-naples", None), None),
        (identity_secret("liqo-tenant-naples", "vk-control-plane-naples", ["naples"]), None),
        ({"metadata": {}}, None),
    ],
)
def test_only_the_secret_named_for_it_in_its_tenant_namespace_is_a_control_plane_identity(
    secret: dict[str, object], provider: str | None
) -> None:
    assert constants.control_plane_identity_provider(secret) == provider
