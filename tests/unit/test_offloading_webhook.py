"""Admission for namespace offloading: pods placed by the strategy merged with their own
affinity, refused until the policy is known; NamespaceOffloadings validated."""

from __future__ import annotations

from typing import Any

import pytest

from vk.kube.informer import Store
from vk.webhooks.admission import OffloadingAdmission
from vk.webhooks.offloading import (
    IS_LOCAL,
    IS_VIRTUAL,
    VIRTUAL_NODE_TOLERATION,
    forge_pod_placement_patch,
    review_namespace_offloading,
    review_offloading_pod,
)
from vk.webhooks.quota import ALLOWED

REGION = "topology.liqo.io/region"
SOUTH = {"key": REGION, "operator": "In", "values": ["south"]}
CENTER = {"key": REGION, "operator": "In", "values": ["center"]}


def offloading_spec(strategy: str, *terms: list[dict[str, Any]]) -> dict[str, Any]:
    spec: dict[str, Any] = {"podOffloadingStrategy": strategy}
    if terms:
        spec["clusterSelector"] = {"nodeSelectorTerms": [{"matchExpressions": t} for t in terms]}
    return spec


def applied(pod: dict[str, Any], patch: list[dict[str, Any]]) -> dict[str, Any]:
    """The pod after the patch (only `add` of /spec members is used)."""
    result = {**pod, "spec": dict(pod.get("spec") or {})}
    for op in patch:
        assert op["op"] == "add"
        assert op["path"].startswith("/spec/")
        result["spec"][op["path"].removeprefix("/spec/")] = op["value"]
    return result


def required_terms(pod: dict[str, Any]) -> list[list[dict[str, Any]]]:
    selector = pod["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]
    return [t["matchExpressions"] for t in selector["nodeSelectorTerms"]]


def test_local_and_remote_with_a_selector_allows_local_nodes_or_the_selected_ones() -> None:
    pod = applied(
        {"spec": {}},
        forge_pod_placement_patch({"spec": {}}, offloading_spec("LocalAndRemote", [SOUTH])),
    )
    assert pod["spec"]["tolerations"] == [VIRTUAL_NODE_TOLERATION]
    assert required_terms(pod) == [[SOUTH], [IS_LOCAL]]


def test_local_and_remote_without_a_selector_only_tolerates() -> None:
    patch = forge_pod_placement_patch({"spec": {}}, offloading_spec("LocalAndRemote"))
    assert applied({"spec": {}}, patch)["spec"] == {"tolerations": [VIRTUAL_NODE_TOLERATION]}


def test_remote_requires_selected_virtual_nodes() -> None:
    pod = applied(
        {"spec": {}},
        forge_pod_placement_patch({"spec": {}}, offloading_spec("Remote", [SOUTH], [CENTER])),
    )
    assert required_terms(pod) == [[SOUTH, IS_VIRTUAL], [CENTER, IS_VIRTUAL]]
    bare = applied({"spec": {}}, forge_pod_placement_patch({"spec": {}}, offloading_spec("Remote")))
    assert required_terms(bare) == [[IS_VIRTUAL]]


def test_the_pods_own_affinity_is_anded_with_the_policy_as_in_the_tutorial() -> None:
    """app-center asks for center; the namespace allows south or local: nothing fits."""
    own = {
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [CENTER]}]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1}],
            }
        },
        "tolerations": [{"key": "other", "operator": "Exists"}],
    }
    pod = {"spec": own}
    placed = applied(
        pod, forge_pod_placement_patch(pod, offloading_spec("LocalAndRemote", [SOUTH]))
    )
    assert required_terms(placed) == [[CENTER, SOUTH], [CENTER, IS_LOCAL]]
    node_affinity = placed["spec"]["affinity"]["nodeAffinity"]
    assert node_affinity["preferredDuringSchedulingIgnoredDuringExecution"] == [{"weight": 1}]
    assert placed["spec"]["tolerations"] == [
        {"key": "other", "operator": "Exists"},
        VIRTUAL_NODE_TOLERATION,
    ]
    assert pod["spec"] is own
    assert "tolerations" in own
    assert required_terms({"spec": own}) == [[CENTER]]


@pytest.mark.parametrize("strategy", ["Local", "Remote", "LocalAndRemote"])
def test_the_runtime_class_leaves_the_pod_alone(strategy: str) -> None:
    spec = offloading_spec(strategy, [SOUTH])
    assert forge_pod_placement_patch({"spec": {"runtimeClassName": "liqo"}}, spec) == []


def test_local_keeps_a_pod_off_virtual_nodes_whatever_it_tolerates_or_selects() -> None:
    # A pod that tolerates the virtual-node taint itself and selects a virtual node was
    # offloaded, then evicted, and its replacement offloaded again.
    pod = {
        "spec": {
            "tolerations": [VIRTUAL_NODE_TOLERATION],
            "nodeSelector": {"liqo.io/type": "virtual-node"},
        }
    }
    [patch] = forge_pod_placement_patch(pod, offloading_spec("Local"))
    placed = {"spec": {**pod["spec"], "affinity": patch["value"]}}
    assert required_terms(placed) == [[IS_LOCAL]]
    assert placed["spec"]["tolerations"] == [VIRTUAL_NODE_TOLERATION]  # none added


def test_a_toleration_already_there_is_not_added_twice() -> None:
    pod = {"spec": {"tolerations": [VIRTUAL_NODE_TOLERATION]}}
    assert forge_pod_placement_patch(pod, offloading_spec("LocalAndRemote")) == []


def pod_request(operation: str = "CREATE") -> dict[str, Any]:
    return {"operation": operation, "namespace": "liqo-demo", "object": {"spec": {}}}


def test_pods_wait_for_the_policy() -> None:
    decision, _ = review_offloading_pod(pod_request(), None)
    assert not decision.allowed
    assert "no NamespaceOffloading" in decision.message
    assert "kubectl label namespace liqo-demo liqo.io/scheduling-enabled-" in decision.message
    unprocessed = {"metadata": {"generation": 2}, "status": {"observedGeneration": 1}}
    decision, _ = review_offloading_pod(pod_request(), unprocessed)
    assert not decision.allowed
    assert "not been processed" in decision.message
    ready = {
        "metadata": {"generation": 2},
        "spec": offloading_spec("Remote"),
        "status": {"observedGeneration": 2},
    }
    decision, patch = review_offloading_pod(pod_request(), ready)
    assert decision.allowed
    assert patch
    assert review_offloading_pod(pod_request("UPDATE"), None)[0].allowed


@pytest.mark.parametrize(
    "own",
    [
        {},
        {
            "tolerations": [VIRTUAL_NODE_TOLERATION],
            "nodeSelector": {"liqo.io/type": "virtual-node"},
        },
        {"runtimeClassName": "liqo"},
    ],
    ids=["plain", "asks-for-a-virtual-node", "runtime-class-liqo"],
)
def test_a_leaving_namespaces_new_pods_stay_on_local_nodes(own: dict[str, Any]) -> None:
    # Evicted from a virtual node while the namespace leaves, a pod that asked for one itself
    # came back there, was offloaded and evicted again: the unoffloading never ended.
    leaving = {
        "metadata": {"generation": 1, "deletionTimestamp": "2026-12-07T15:30:00Z"},
        "spec": offloading_spec("Remote", [SOUTH]),
        "status": {"observedGeneration": 1},
    }
    request = {"operation": "CREATE", "namespace": "liqo-demo", "object": {"spec": own}}
    decision, patch = review_offloading_pod(request, leaving)
    assert decision.allowed
    placed = applied({"spec": own}, patch)
    assert required_terms(placed) == [[IS_LOCAL]]
    assert placed["spec"].get("tolerations") == own.get("tolerations")  # none added


def offloading_request(
    operation: str,
    spec: dict[str, Any],
    name: str = "offloading",
    old: dict[str, Any] | None = None,
) -> dict[str, Any]:
    request: dict[str, Any] = {
        "operation": operation,
        "object": {"metadata": {"name": name}, "spec": spec},
    }
    if old is not None:
        request["oldObject"] = {"metadata": {"name": name}, "spec": old}
    return request


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        (offloading_request("CREATE", {}, name="other"), "must be named 'offloading'"),
        (
            offloading_request("CREATE", {"namespaceMappingStrategy": "SelectedName"}),
            "needs remoteNamespaceName",
        ),
        (
            offloading_request(
                "CREATE",
                {"namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": "Bad_Name"},
            ),
            "not a valid namespace name",
        ),
        (
            offloading_request(
                "CREATE",
                {
                    "clusterSelector": {
                        "nodeSelectorTerms": [
                            {"matchExpressions": [{"key": REGION, "operator": "In"}]}
                        ]
                    }
                },
            ),
            "clusterSelector is invalid",
        ),
        (
            offloading_request(
                "UPDATE",
                {"namespaceMappingStrategy": "EnforceSameName"},
                old={"namespaceMappingStrategy": "DefaultName"},
            ),
            "namespaceMappingStrategy cannot change",
        ),
        (
            offloading_request(
                "UPDATE",
                {"namespaceMappingStrategy": "EnforceSameName"},
                old={},  # DefaultName by default
            ),
            "unoffload the namespace",
        ),
    ],
)
def test_bad_namespace_offloadings_are_refused_with_the_fix(
    request_: dict[str, Any], message: str
) -> None:
    decision, _ = review_namespace_offloading(request_)
    assert not decision.allowed
    assert message in decision.message


def test_a_tighter_pod_strategy_is_allowed_with_a_warning() -> None:
    decision, warnings = review_namespace_offloading(
        offloading_request(
            "UPDATE",
            {"podOffloadingStrategy": "Remote"},
            old={"podOffloadingStrategy": "LocalAndRemote"},
        )
    )
    assert decision.allowed
    assert len(warnings) == 1
    assert "evicted" in warnings[0]
    decision, warnings = review_namespace_offloading(
        offloading_request("UPDATE", {}, old={"podOffloadingStrategy": "Remote"})
    )
    assert decision.allowed
    assert warnings == []


def test_a_default_name_too_long_for_a_namespace_is_refused_with_the_fix() -> None:
    """DefaultName gives `shop-...-venice`, 64 characters: refused at creation, naming the name
    and SelectedName; an offloading already there stays updatable (and so deletable)."""
    long_namespace = "shop-" + "x" * 52
    request = offloading_request("CREATE", {})
    request["namespace"] = long_namespace
    decision, _ = review_namespace_offloading(request, home_cluster_id="venice")
    assert not decision.allowed
    assert f"'{long_namespace}-venice' is 64 characters long" in decision.message
    assert "namespaceMappingStrategy SelectedName and a shorter remoteNamespaceName" in (
        decision.message
    )
    update = offloading_request("UPDATE", {}, old={})
    update["namespace"] = long_namespace
    assert review_namespace_offloading(update, home_cluster_id="venice")[0].allowed
    request["namespace"] = "s" * 56  # '-venice' makes 63
    assert review_namespace_offloading(request, home_cluster_id="venice")[0].allowed


def test_the_webhook_judges_a_default_name_with_this_clusters_id() -> None:
    namespace = "n" * 57
    request = {
        "operation": "CREATE",
        "namespace": namespace,
        "object": {"metadata": {"name": "offloading", "namespace": namespace}, "spec": {}},
    }
    knowing = OffloadingAdmission(Store(), synced=lambda: True, home_cluster_id="venice")
    assert not knowing.validate_offloading(request).decision.allowed
    unknowing = OffloadingAdmission(Store(), synced=lambda: True)
    assert unknowing.validate_offloading(request).decision.allowed


def in_namespace(request: dict[str, Any], namespace: str) -> dict[str, Any]:
    return {**request, "namespace": namespace}


@pytest.mark.parametrize(
    "namespace", ["kube-system", "kube-public", "kube-node-lease", "vk", "liqo-tenant-naples"]
)
def test_a_namespace_offloading_in_a_system_namespace_is_refused_saying_why_and_what_to_do(
    namespace: str,
) -> None:
    request = in_namespace(offloading_request("CREATE", {}), namespace)
    decision, _ = review_namespace_offloading(request, home_cluster_id="venice")
    assert not decision.allowed
    assert f"namespace {namespace} is " in decision.message
    assert "its Secrets (" in decision.message
    assert decision.message.endswith("offload the namespaces of your workloads instead")
    admission = OffloadingAdmission(Store(), synced=lambda: True, home_cluster_id="venice")
    assert admission.validate_offloading(request).decision == decision
    # One admitted before (the webhook down) stays updatable, and so deletable.
    update = in_namespace(offloading_request("UPDATE", {}, old={}), namespace)
    assert review_namespace_offloading(update, home_cluster_id="venice")[0].allowed


def test_the_namespace_vk_was_told_is_refused_too() -> None:
    request = in_namespace(offloading_request("CREATE", {}), "vk-system")
    assert review_namespace_offloading(request)[0].allowed
    decision, _ = review_namespace_offloading(request, vk_namespace="vk-system")
    assert not decision.allowed
    assert "namespace vk-system is vk's own namespace" in decision.message
    admission = OffloadingAdmission(Store(), synced=lambda: True, vk_namespace="vk-system")
    assert not admission.validate_offloading(request).decision.allowed


def test_a_system_namespaces_pods_are_neither_refused_nor_placed() -> None:
    """Labelled by hand, or by an offloading that got in: its pods get no toleration of the
    virtual nodes, and are not held back waiting for a policy."""
    request = in_namespace(pod_request(), "kube-system")
    assert review_offloading_pod(request, None) == (ALLOWED, [])
    remote = {
        "metadata": {"generation": 1},
        "spec": offloading_spec("Remote"),
        "status": {"observedGeneration": 1},
    }
    assert review_offloading_pod(request, remote) == (ALLOWED, [])
    admission = OffloadingAdmission(Store(), synced=lambda: True)
    assert admission.place_pod(request).decision.allowed
    # Nor while the webhook starts: there is no policy of theirs to wait for.
    starting = OffloadingAdmission(Store(), synced=lambda: False)
    assert starting.place_pod(request).decision.allowed
    assert not starting.place_pod(in_namespace(request, "liqo-demo")).decision.allowed
    assert review_offloading_pod(in_namespace(request, "liqo-demo"), remote)[1]
