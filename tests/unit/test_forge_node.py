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


def test_labels_are_liqos_base_set_then_extra_then_the_virtual_nodes() -> None:
    node = forge_node_metadata(
        "naples",
        {
            "labels": {"topology.liqo.io/region": "south", "type": "mine"},
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
    assert labels["type"] == "mine"  # the VirtualNode's labels win, as in Liqo
    assert node["metadata"]["annotations"] == {"b": "2", "a": "1"}


def test_capacity_is_every_key_of_the_quota_and_bad_quantities_are_set_apart() -> None:
    capacity, invalid = node_capacity(
        {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": 1, "pods": "lots"}
    )
    assert capacity == {"cpu": "4", "memory": "8Gi", "nvidia.com/gpu": "1"}
    assert invalid == ["pods='lots'"]


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
