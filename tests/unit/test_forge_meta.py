"""What every reflected object shares: ownership, copied metadata, the reflection policy, and
the comparisons deciding whether a remote copy must be written."""

from __future__ import annotations

from typing import Any

import pytest

from vk.api.constants import (
    DESTINATION_LABEL,
    NODENAME_LABEL,
    ORIGIN_LABEL,
    SERVICE_ACCOUNT_NAME_LABEL,
)
from vk.reflection.forge.meta import (
    ReflectionPolicy,
    contains,
    exact_fields_differ,
    fields_differ,
    is_owned_by_us,
    metadata_differs,
    ownership_labels,
    reflected_metadata,
    should_reflect,
)

JSON = dict[str, Any]

HOME = "venice"
PROVIDER = "cool-firefly"
OURS = {ORIGIN_LABEL: HOME, DESTINATION_LABEL: PROVIDER}


def local_configmap(annotations: dict[str, str] | None = None) -> JSON:
    """A ConfigMap as `kubectl get configmap -o json` shows it."""
    metadata: JSON = {
        "name": "web-config",
        "namespace": "demo",
        "uid": "b3f1c6a2-4d6e-4f0a-9a57-2e8c0d1f7a31",
        "resourceVersion": "48102",
        "creationTimestamp": "2025-05-06T09:10:02Z",
        "labels": {"app": "web", "app.kubernetes.io/managed-by": "Helm"},
    }
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"a": "1"}}


# --- Ownership -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("node_name", "expected"),
    [
        pytest.param(None, OURS, id="reflected-objects"),
        pytest.param("cool-firefly", {**OURS, NODENAME_LABEL: "cool-firefly"}, id="pods"),
    ],
)
def test_ownership_labels_name_origin_destination_and_node_when_given(
    node_name: str | None, expected: dict[str, str]
) -> None:
    assert ownership_labels(HOME, PROVIDER, node_name) == expected


@pytest.mark.parametrize(
    ("labels", "owned"),
    [
        pytest.param(OURS, True, id="ours"),
        pytest.param({**OURS, NODENAME_LABEL: "another-node"}, True, id="ours-from-another-node"),
        pytest.param({ORIGIN_LABEL: "milan", DESTINATION_LABEL: PROVIDER}, False, id="other-home"),
        pytest.param({ORIGIN_LABEL: HOME, DESTINATION_LABEL: "naples"}, False, id="other-dest"),
        pytest.param({ORIGIN_LABEL: HOME}, False, id="origin-only"),
        pytest.param({"app": "web"}, False, id="provider-own-object"),
        pytest.param(None, False, id="no-labels"),
    ],
)
def test_only_objects_labelled_with_both_clusters_are_ours(
    labels: dict[str, str] | None, owned: bool
) -> None:
    remote = {"metadata": {"name": "web", "namespace": "demo-venice", "labels": labels}}
    assert is_owned_by_us(remote, HOME, PROVIDER) is owned


# --- Reflection policy ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "policy", "reflected"),
    [
        pytest.param(None, ReflectionPolicy.DENY_LIST, True, id="deny-list-by-default"),
        pytest.param(
            {"liqo.io/skip-reflection": ""}, ReflectionPolicy.DENY_LIST, False, id="deny-skip"
        ),
        pytest.param(
            {"liqo.io/skip-reflection": "true"},
            ReflectionPolicy.DENY_LIST,
            False,
            id="deny-skip-true",
        ),
        pytest.param(
            {"liqo.io/skip-reflection": "False"},
            ReflectionPolicy.DENY_LIST,
            True,
            id="deny-skip-false-undoes-it",
        ),
        pytest.param(
            {"liqo.io/allow-reflection": "false"},
            ReflectionPolicy.DENY_LIST,
            True,
            id="deny-ignores-allow",
        ),
        pytest.param(None, ReflectionPolicy.ALLOW_LIST, False, id="allow-list-by-default"),
        pytest.param(
            {"liqo.io/allow-reflection": ""}, ReflectionPolicy.ALLOW_LIST, True, id="allow"
        ),
        pytest.param(
            {"liqo.io/allow-reflection": "false"},
            ReflectionPolicy.ALLOW_LIST,
            False,
            id="allow-false-undoes-it",
        ),
        pytest.param(
            {"liqo.io/skip-reflection": "true"},
            ReflectionPolicy.ALLOW_LIST,
            False,
            id="allow-ignores-skip",
        ),
    ],
)
def test_policy_reflects_by_annotation(
    annotations: dict[str, str] | None, policy: ReflectionPolicy, reflected: bool
) -> None:
    assert should_reflect(local_configmap(annotations), policy) is reflected


def test_policies_read_as_liqo_flags() -> None:
    assert ReflectionPolicy("DenyList") is ReflectionPolicy.DENY_LIST
    assert ReflectionPolicy("AllowList") is ReflectionPolicy.ALLOW_LIST


# --- Reflected metadata --------------------------------------------------------------------


def test_reflected_metadata_copies_labels_and_annotations_and_adds_ownership() -> None:
    local = local_configmap({"owner": "team-a", "meta.helm.sh/release-name": "web"})
    assert reflected_metadata(
        local,
        name="web-config",
        namespace="demo-venice",
        local_cluster_id=HOME,
        remote_cluster_id=PROVIDER,
    ) == {
        "name": "web-config",
        "namespace": "demo-venice",
        "labels": {"app": "web", "app.kubernetes.io/managed-by": "Helm", **OURS},
        "annotations": {"owner": "team-a", "meta.helm.sh/release-name": "web"},
    }


def test_reflected_metadata_leaves_out_what_is_not_reflected() -> None:
    local = local_configmap({"owner": "team-a", "metallb.universe.tf/address-pool": "public"})
    metadata = reflected_metadata(
        local,
        name="web-config",
        namespace="demo-venice",
        local_cluster_id=HOME,
        remote_cluster_id=PROVIDER,
        labels_not_reflected=["app.kubernetes.io/managed-by"],
        annotations_not_reflected=["metallb.universe.tf/address-pool"],
    )
    assert metadata["labels"] == {"app": "web", **OURS}
    assert metadata["annotations"] == {"owner": "team-a"}


def test_reflected_metadata_has_no_annotations_when_none_remain() -> None:
    local = local_configmap({"metallb.universe.tf/address-pool": "public"})
    metadata = reflected_metadata(
        local,
        name="web-config",
        namespace="demo-venice",
        local_cluster_id=HOME,
        remote_cluster_id=PROVIDER,
        annotations_not_reflected=["metallb.universe.tf/address-pool"],
    )
    assert "annotations" not in metadata


def test_ownership_labels_win_over_local_and_extra_ones() -> None:
    local = local_configmap()
    local["metadata"]["labels"][ORIGIN_LABEL] = "forged"
    metadata = reflected_metadata(
        local,
        name="web-config",
        namespace="demo-venice",
        local_cluster_id=HOME,
        remote_cluster_id=PROVIDER,
        extra_labels={DESTINATION_LABEL: "elsewhere", NODENAME_LABEL: "cool-firefly"},
    )
    assert metadata["labels"] == {
        "app": "web",
        "app.kubernetes.io/managed-by": "Helm",
        **OURS,
        NODENAME_LABEL: "cool-firefly",
    }


# --- Comparisons ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("desired", "current", "held"),
    [
        pytest.param({"port": 80}, {"port": 80, "nodePort": 31234}, True, id="server-default"),
        pytest.param({"port": 80}, {"port": 8080}, False, id="changed-value"),
        pytest.param({"port": 80}, {}, False, id="missing-key"),
        pytest.param([{"port": 80}], [{"port": 80, "protocol": "TCP"}], True, id="list-items"),
        pytest.param([{"port": 80}], [{"port": 80}, {"port": 443}], False, id="longer-list"),
        pytest.param(
            [{"port": 80}, {"port": 443}], [{"port": 443}, {"port": 80}], False, id="order"
        ),
        pytest.param({"a": {"b": 1}}, {"a": "b"}, False, id="map-against-scalar"),
        pytest.param("None", "None", True, id="equal-scalars"),
    ],
)
def test_contains_ignores_only_keys_the_desired_object_does_not_name(
    desired: Any, current: Any, held: bool
) -> None:
    assert contains(desired, current) is held


@pytest.mark.parametrize(
    ("current_metadata", "differs"),
    [
        pytest.param({"labels": {"app": "web"}, "annotations": {"a": "1"}}, False, id="same"),
        pytest.param(
            {
                "labels": {"app": "web"},
                "annotations": {"a": "1"},
                "uid": "x",
                "resourceVersion": "7",
            },
            False,
            id="server-fields",
        ),
        pytest.param(
            {"labels": {"app": "web", "hand": "made"}, "annotations": {"a": "1"}},
            True,
            id="hand-added-label",
        ),
        pytest.param({"labels": {"app": "web"}, "annotations": {}}, True, id="lost-annotation"),
        pytest.param({"labels": {"app": "api"}, "annotations": {"a": "1"}}, True, id="changed"),
    ],
)
def test_metadata_must_be_exactly_the_local_one(current_metadata: JSON, differs: bool) -> None:
    desired = {"metadata": {"labels": {"app": "web"}, "annotations": {"a": "1"}}}
    assert metadata_differs(desired, {"metadata": current_metadata}) is differs


def test_absent_and_empty_metadata_are_the_same() -> None:
    assert not metadata_differs({"metadata": {"labels": {}}}, {"metadata": {}})


@pytest.mark.parametrize(
    ("desired", "current", "differs"),
    [
        pytest.param({"type": "ClusterIP"}, {"type": "ClusterIP"}, False, id="same"),
        pytest.param({"type": "ClusterIP"}, {"type": "NodePort"}, True, id="changed"),
        pytest.param({}, {"selector": {"app": "web"}}, True, id="removed-locally"),
        pytest.param({}, {"selector": {}}, False, id="removed-and-empty"),
        pytest.param({}, {"clusterIP": "10.96.4.20"}, True, id="unnamed-field-set"),
        pytest.param({}, {"other": "x"}, False, id="field-not-compared"),
        pytest.param(
            {"ports": [{"port": 80}]},
            {"ports": [{"port": 80, "nodePort": 31234}]},
            False,
            id="server-default-inside",
        ),
    ],
)
def test_fields_differ_by_content(desired: JSON, current: JSON, differs: bool) -> None:
    assert fields_differ(desired, current, ("type", "selector", "ports", "clusterIP")) is differs


@pytest.mark.parametrize(
    ("current", "differs"),
    [
        pytest.param({"data": {"a": "1"}}, False, id="same"),
        pytest.param({"data": {"a": "1", "b": "2"}}, True, id="hand-added-key"),
        pytest.param({"data": {"a": "2"}}, True, id="changed-value"),
        pytest.param({}, True, id="missing"),
    ],
)
def test_exact_fields_differ_on_any_key(current: JSON, differs: bool) -> None:
    assert exact_fields_differ({"data": {"a": "1"}}, current, ("data", "binaryData")) is differs


def test_a_local_label_that_marks_vks_own_objects_is_never_copied() -> None:
    # A tenant's Secret labelled as a node's token Secret, or a ServiceAccount's: on the
    # provider, it would be taken for vk's own, or ignored and never deleted.
    local = local_configmap()
    local["metadata"]["labels"].update(
        {NODENAME_LABEL: "naples", SERVICE_ACCOUNT_NAME_LABEL: "default"}
    )
    metadata = reflected_metadata(
        local,
        name="web-token",
        namespace="demo-venice",
        local_cluster_id=HOME,
        remote_cluster_id=PROVIDER,
    )
    assert metadata["labels"] == {"app": "web", "app.kubernetes.io/managed-by": "Helm", **OURS}
