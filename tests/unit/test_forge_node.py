"""The Node a virtual kubelet registers, forged from its VirtualNode (Liqo's rules)."""

from __future__ import annotations

import datetime
import json

import pytest

from vk.node.forge import (
    APPLIED_TAINTS_ANNOTATION,
    forge_node_conditions,
    forge_node_lease,
    forge_node_metadata,
    forge_node_status,
    forge_taints_patch,
    keys_set_by_others,
    merge_taints,
    node_capacity,
    status_differs,
)

NOW = datetime.datetime(2026, 11, 22, 6, 0, 0, tzinfo=datetime.UTC)
LATER = NOW + datetime.timedelta(minutes=1)
VIRTUAL_NODE_TAINT = {
    "key": "virtual-node.liqo.io/not-allowed",
    "value": "true",
    "effect": "NoExecute",
}


def forge_labels(
    spec_labels: dict, extra_labels: dict | None = None, yielded: tuple[str, ...] = ()
) -> tuple[dict, list[str]]:
    metadata, left_out = forge_node_metadata(
        "naples",
        {"labels": spec_labels},
        remote_cluster_id="naples",
        extra_labels=extra_labels or {},
        extra_annotations={},
        yielded=yielded,
    )
    return metadata["metadata"]["labels"], left_out


def test_labels_are_liqos_base_set_extra_labels_and_the_virtual_nodes() -> None:
    node, left_out = forge_node_metadata(
        "naples",
        {
            "labels": {"topology.liqo.io/region": "south"},
            "annotations": {"a": "1"},
            "storageClasses": [{"storageClassName": "liqo"}],
        },
        remote_cluster_id="naples",
        extra_labels={"extra": "x"},
        extra_annotations={"b": "2"},
    )
    labels = node["metadata"]["labels"]
    assert labels["liqo.io/type"] == "virtual-node"
    assert labels["kubernetes.io/role"] == "agent"
    assert labels["liqo.io/remote-cluster-id"] == "naples"
    assert labels["storage.liqo.io/available"] == "true"
    assert labels["extra"] == "x"
    assert labels["topology.liqo.io/region"] == "south"
    assert node["metadata"]["annotations"] == {"b": "2", "a": "1"}
    assert left_out == []


def test_the_virtual_nodes_labels_never_override_the_kubelets_nor_the_administrators() -> None:
    """A VirtualNode's labels carry its provider's: a provider calling itself trusted, where the
    administrator's nodeExtraLabels say it is not, or another kind of node, is not believed."""
    labels, _ = forge_labels(
        {
            "tier": "trusted",
            "type": "worker",
            "liqo.io/type": "physical",
            "storage.liqo.io/available": "true",
            "team": "ops",
        },
        extra_labels={"tier": "untrusted"},
    )
    assert labels["tier"] == "untrusted"
    assert labels["type"] == "virtual-kubelet"
    assert labels["liqo.io/type"] == "virtual-node"
    assert labels["storage.liqo.io/available"] == "false"  # it offers no storage class
    assert labels["team"] == "ops"  # what nobody else says stays
    # The administrator's nodeExtraLabels may still say what the kubelet cannot know.
    arm, _ = forge_labels({}, extra_labels={"kubernetes.io/arch": "arm64"})
    assert arm["kubernetes.io/arch"] == "arm64"


def test_labels_the_api_server_would_refuse_are_left_out_and_said() -> None:
    """One of them would make every write of the Node fail, and nothing would say why."""
    labels, left_out = forge_labels(
        {
            "fine": "yes",
            "example.com/fine": "",
            "bad key": "x",
            "a/b/c": "x",
            "/x": "x",
            "Example.com/x": "x",
            f"example.com/{'n' * 64}": "x",
            f"{'d' * 254}/x": "x",
            "long": "v" * 64,
            "dash": "-x",
        },
        extra_labels={"also bad!": "1"},
    )
    assert labels["fine"] == "yes"
    assert labels["example.com/fine"] == ""
    for key in ("bad key", "a/b/c", "/x", "Example.com/x", "long", "dash", "also bad!"):
        assert key not in labels
        assert any(key in problem for problem in left_out)
    assert len(left_out) == 9
    assert not any(len(problem) > 120 for problem in left_out)  # long input is cut short


def test_a_label_someone_else_set_on_the_node_is_left_to_them() -> None:
    """An administrator's `kubectl label node naples tier=untrusted --overwrite` stays."""
    node = {
        "metadata": {
            "managedFields": [
                {"manager": "vk", "fieldsV1": {"f:metadata": {"f:labels": {"f:team": {}}}}},
                {
                    "manager": "kubectl-label",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:tier": {}}}},
                },
                {"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {"f:taints": {}}}},
            ]
        }
    }
    theirs = keys_set_by_others(node, ("metadata", "labels"), "vk")
    assert theirs == {"tier"}
    labels, _ = forge_labels({"tier": "trusted", "team": "ops"}, yielded=tuple(theirs))
    assert "tier" not in labels
    assert labels["team"] == "ops"


def test_capacity_is_every_key_of_the_quota_and_bad_quantities_are_set_apart() -> None:
    capacity, invalid = node_capacity(
        {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 1, "pods": "lots"}
    )
    assert capacity == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
    assert invalid == ["pods: 'lots' is not a Kubernetes quantity (e.g. 4, 500m, 8Gi)"]


# What Kubernetes and the scheduler take, up to the edge: the bad one is left out, never these.
SOUND_CAPACITY = {
    "cpu": "9e13",
    "memory": "9e16",
    "pods": "110",
    "hugepages-2Mi": "1Gi",
    "example.com/gpu": "2",
    "ephemeral-storage": "1.5Gi",
}


@pytest.mark.parametrize(
    ("resource", "quantity", "problem"),
    [
        ("bad name", "1", "is not a resource name"),
        (f"example.com/{'n' * 64}", "1", "is not a resource name"),
        ("cpu", "-1", "is negative"),
        # The API server refuses a fraction of what it counts whole, and the whole status.
        ("pods", "1.5", "is not a whole number"),
        ("example.com/gpu", "500m", "is not a whole number"),
        # The scheduler scores (allocatable - requested) * 100 in an int64, CPU in millicores.
        ("cpu", "1e15", "is more than the scheduler can count"),
        ("memory", "1e17", "is more than the scheduler can count"),
    ],
)
def test_capacity_leaves_out_what_a_node_cannot_offer(
    resource: str, quantity: str, problem: str
) -> None:
    capacity, invalid = node_capacity({**SOUND_CAPACITY, resource: quantity})
    assert capacity == {k: v for k, v in SOUND_CAPACITY.items() if k != resource}
    assert len(invalid) == 1
    assert problem in invalid[0]


@pytest.mark.parametrize(
    ("capacity", "ready"),
    [
        ({"cpu": "4", "memory": "8Gi"}, "True"),
        ({"cpu": "0", "memory": "8Gi"}, "False"),
        ({"memory": "8Gi"}, "False"),
    ],
)
def test_ready_needs_some_cpu_and_some_memory(capacity: dict, ready: str) -> None:
    conditions = {c["type"]: c for c in forge_node_conditions(capacity, NOW, [])}
    assert conditions["Ready"]["status"] == ready
    assert conditions["Ready"]["reason"] == (
        "KubeletReady" if ready == "True" else "KubeletNotReady"
    )
    assert set(conditions) == {"Ready", "MemoryPressure", "DiskPressure", "PIDPressure"}


def test_a_virtual_kubelet_that_cannot_work_says_why_in_its_ready_condition() -> None:
    capacity = {"cpu": "4", "memory": "8Gi"}
    why = "Secret t/k: users[0].user.exec: a kubeconfig Secret takes inline credentials only"
    conditions = {c["type"]: c for c in forge_node_conditions(capacity, NOW, [], not_ready=why)}
    assert conditions["Ready"]["status"] == "False"
    assert conditions["Ready"]["reason"] == "KubeletNotReady"
    assert conditions["Ready"]["message"] == why
    assert conditions["MemoryPressure"]["status"] == "False"  # its quota still has room


def test_transition_time_moves_only_when_the_status_does() -> None:
    capacity = {"cpu": "4", "memory": "8Gi"}
    first = forge_node_conditions(capacity, NOW, [])
    again = {c["type"]: c for c in forge_node_conditions(capacity, LATER, first)}
    assert again["Ready"]["lastTransitionTime"] == "2026-11-22T06:00:00Z"
    assert again["Ready"]["lastHeartbeatTime"] == "2026-11-22T06:01:00Z"
    flipped = {c["type"]: c for c in forge_node_conditions({"cpu": "0"}, LATER, first)}
    assert flipped["Ready"]["lastTransitionTime"] == "2026-11-22T06:01:00Z"


def test_status_differs_ignores_heartbeats_only() -> None:
    capacity = {"cpu": "4", "memory": "8Gi"}
    kwargs = {"node_ip": "127.0.0.1", "kubelet_port": 10250, "kubelet_version": "v1.36.4"}
    written = forge_node_status(capacity, now=NOW, previous_conditions=[], **kwargs)
    node = {"status": written["status"]}
    same_later = forge_node_status(capacity, now=LATER, previous_conditions=[], **kwargs)
    assert not status_differs(node, same_later)
    more = forge_node_status(
        {**capacity, "pods": "110"}, now=LATER, previous_conditions=[], **kwargs
    )
    assert status_differs(node, more)
    # kube-controller-manager marked it Unknown: ours must be written again.
    unknown = json.loads(json.dumps(node))
    unknown["status"]["conditions"][0]["status"] = "Unknown"
    assert status_differs(unknown, same_later)


def test_taints_keep_others_and_drop_what_we_no_longer_want() -> None:
    admin = {"key": "admin", "effect": "NoSchedule"}
    gpu = {"key": "gpu", "value": "true", "effect": "NoSchedule"}
    current = [admin, VIRTUAL_NODE_TAINT, gpu]
    assert merge_taints(current, [VIRTUAL_NODE_TAINT, gpu], [VIRTUAL_NODE_TAINT]) == [
        admin,
        VIRTUAL_NODE_TAINT,
    ]


def test_taints_patch_is_none_when_nothing_changes_and_carries_the_resource_version() -> None:
    node = {
        "metadata": {"resourceVersion": "42", "annotations": {}},
        "spec": {"taints": [{"key": "admin", "effect": "NoSchedule"}]},
    }
    patch = forge_taints_patch(node, {})
    assert patch is not None
    assert patch["metadata"]["resourceVersion"] == "42"
    assert patch["spec"]["taints"] == [{"key": "admin", "effect": "NoSchedule"}, VIRTUAL_NODE_TAINT]
    applied = {
        "metadata": {"resourceVersion": "43", "annotations": patch["metadata"]["annotations"]},
        "spec": {"taints": patch["spec"]["taints"]},
    }
    assert forge_taints_patch(applied, {}) is None
    assert json.loads(applied["metadata"]["annotations"][APPLIED_TAINTS_ANNOTATION]) == [
        VIRTUAL_NODE_TAINT
    ]


def test_node_lease_is_owned_by_the_node() -> None:
    lease = forge_node_lease("naples", "uid-1", 40, NOW)
    assert lease["metadata"]["namespace"] == "kube-node-lease"
    assert lease["metadata"]["ownerReferences"] == [
        {"apiVersion": "v1", "kind": "Node", "name": "naples", "uid": "uid-1"}
    ]
    assert lease["spec"] == {
        "holderIdentity": "naples",
        "leaseDurationSeconds": 40,
        "renewTime": "2026-11-22T06:00:00.000000Z",
    }
