"""`vkctl info`'s reports, built from the objects read: what a pod takes of a node, what the
slices acquired, whether the controller manager runs, the peering's state, and how it all
prints for people."""

from __future__ import annotations

import datetime
from decimal import Decimal
from typing import Any

import pytest

from vk.api.identity import ClusterIdentity
from vk.api.usage import pod_usage
from vk.cli.info import (
    controller_manager_state,
    format_report,
    local_report,
    peer_report,
    peering_summary,
    sum_resources,
    used_resources,
    virtual_kubelet_states,
    webhook_state,
)

NOW = datetime.datetime(2026, 11, 22, 8, 0, 30, tzinfo=datetime.UTC)


def container(**requests: str) -> dict[str, Any]:
    return {"name": "c", "resources": {"requests": requests}}


def pod(
    node: str = "naples",
    phase: str = "Running",
    containers: list[dict[str, Any]] | None = None,
    init: list[dict[str, Any]] | None = None,
    overhead: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node, "containers": containers or []}
    if init:
        spec["initContainers"] = init
    if overhead:
        spec["overhead"] = overhead
    return {"metadata": {"name": "p"}, "spec": spec, "status": {"phase": phase}}


def test_a_pod_takes_the_sum_of_its_containers_requests_and_one_pod() -> None:
    requests = pod_usage(pod(containers=[container(cpu="250m", memory="64Mi"), container(cpu="1")]))
    assert requests == {"cpu": Decimal("1.25"), "memory": Decimal(64 * 2**20), "pods": 1}


def test_an_init_container_asking_more_than_the_containers_sets_the_request() -> None:
    requests = pod_usage(
        pod(containers=[container(cpu="100m", memory="1Gi")], init=[container(cpu="2")])
    )
    assert requests == {"cpu": Decimal(2), "memory": Decimal(2**30), "pods": 1}


def test_sidecars_stay_and_add_to_the_containers_and_to_later_init_containers() -> None:
    sidecar = {**container(cpu="500m"), "restartPolicy": "Always"}
    requests = pod_usage(
        pod(containers=[container(cpu="1")], init=[sidecar, container(cpu="1800m")])
    )
    # Running: 1 + 0.5 sidecar = 1.5; the second init container ran beside the sidecar: 2.3.
    assert requests["cpu"] == Decimal("2.3")


def test_the_pod_overhead_adds_to_the_requests() -> None:
    requests = pod_usage(pod(containers=[container(cpu="1")], overhead={"cpu": "100m"}))
    assert requests["cpu"] == Decimal("1.1")


def test_finished_pods_use_nothing() -> None:
    pods = [
        pod(containers=[container(cpu="1", memory="128Mi")]),
        pod(phase="Pending", containers=[container(cpu="500m")]),
        pod(phase="Succeeded", containers=[container(cpu="8")]),
        pod(phase="Failed", containers=[container(cpu="8")]),
    ]
    assert used_resources(pods) == {"cpu": "1500m", "memory": "128Mi", "pods": "2"}


def test_resource_lists_add_up_whatever_their_units() -> None:
    assert sum_resources([{"cpu": "4", "memory": "8Gi"}, {"cpu": "500m", "memory": "512Mi"}]) == {
        "cpu": "4500m",
        "memory": "8704Mi",
    }


def test_a_quantity_a_provider_made_up_is_shown_invalid_not_computed() -> None:
    assert sum_resources([{"cpu": "1e30000000", "pods": "10"}, {"cpu": "4", "pods": "1"}]) == {
        "cpu": "invalid (1e30000000)",
        "pods": "11",
    }


def lease(renewed: str | None, holder: str | None = "vk-controller-manager-venice") -> Any:
    return {
        "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15, "renewTime": renewed},
    }


def test_the_controller_manager_runs_while_its_lease_is_renewed() -> None:
    assert controller_manager_state(lease("2026-11-22T08:00:25.000000Z"), NOW) == {
        "running": True,
        "holder": "vk-controller-manager-venice",
        "lastRenewal": "2026-11-22T08:00:25.000000Z",
        "secondsSinceRenewal": 5,
    }


@pytest.mark.parametrize(
    "held",
    [
        None,  # never started
        lease("2026-11-22T07:59:00.000000Z"),  # stopped without a word: expired
        lease("2026-11-22T08:00:29.000000Z", holder=None),  # released on a clean stop
    ],
)
def test_the_controller_manager_is_not_running_without_a_live_lease(held: Any) -> None:
    assert controller_manager_state(held, NOW)["running"] is False


def foreign_cluster(
    cluster_id: str = "naples",
    *,
    role: str = "Provider",
    offloading: str | None = "Established",
    tenant: str = "None",
) -> dict[str, Any]:
    def condition(kind: str, status: str, message: str) -> dict[str, str]:
        return {"type": kind, "status": status, "message": message}

    return {
        "metadata": {"name": cluster_id},
        "spec": {"clusterID": cluster_id},
        "status": {
            "role": role,
            "apiServerUrl": "https://127.0.0.1:6443",
            "modules": {
                "networking": {"enabled": False},
                "authentication": {
                    "enabled": True,
                    "conditions": [
                        condition("AuthIdentityControlPlaneStatus", "Established", "ours"),
                        condition("AuthTenantStatus", tenant, "theirs"),
                    ],
                },
                "offloading": {
                    "enabled": offloading is not None,
                    "conditions": [condition("OffloadingVirtualNodeStatus", offloading, "1 Ready")]
                    if offloading
                    else [],
                },
            },
        },
    }


def test_a_peering_reads_as_kubectl_get_foreignclusters_shows_it() -> None:
    assert peering_summary(foreign_cluster()) == {
        "clusterID": "naples",
        "role": "Provider",
        "outgoingPeering": "Established",
        "incomingPeering": "None",
        "authentication": "Established",
        "networking": "Disabled",
    }
    consumer = peering_summary(
        foreign_cluster(role="Consumer", offloading=None, tenant="Established")
    )
    assert (consumer["outgoingPeering"], consumer["incomingPeering"]) == ("None", "Established")


def test_info_reports_the_identity_the_controller_manager_and_the_peerings_by_id() -> None:
    report = local_report(
        ClusterIdentity("venice", {"topology.liqo.io/region": "north"}),
        lease("2026-11-22T08:00:29.000000Z"),
        [foreign_cluster("naples"), foreign_cluster("florence")],
        NOW,
    )
    assert report["clusterID"] == "venice"
    assert report["clusterLabels"] == {"topology.liqo.io/region": "north"}
    assert report["controllerManager"]["running"] is True
    assert [p["clusterID"] for p in report["peerings"]] == ["florence", "naples"]


def resource_slice(
    name: str, *, resources: str = "Accepted", replicated: bool = False, cpu: str = "4"
) -> dict[str, Any]:
    labels = {"liqo.io/replicated": "true"} if replicated else {"liqo.io/replication": "true"}
    return {
        "metadata": {"name": name, "namespace": "liqo-tenant-naples", "labels": labels},
        "spec": {"class": "default"},
        "status": {
            "conditions": [
                {"type": "Authentication", "status": "Accepted"},
                {
                    "type": "Resources",
                    "status": resources,
                    "reason": "ResourceSliceResourcesDenied" if resources == "Denied" else "",
                },
            ],
            "resources": {"cpu": cpu, "memory": "8Gi", "pods": "110"},
        },
    }


def virtual_node(name: str, slice_name: str | None = None) -> dict[str, Any]:
    labels = {"liqo.io/remote-cluster-id": "naples"}
    if slice_name:
        labels["liqo.io/resourceslice-name"] = slice_name
    return {
        "metadata": {"name": name, "namespace": "liqo-tenant-naples", "labels": labels},
        "spec": {
            "kubeconfigSecretRef": {"name": f"kubeconfig-resourceslice-{slice_name or name}"},
            "resourceQuota": {"hard": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
        },
        "status": {
            "conditions": [
                {"type": "VirtualKubelet", "status": "Running"},
                {"type": "Node", "status": "Running"},
            ]
        },
    }


def ready_node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {"conditions": [{"type": "Ready", "status": "True"}]},
    }


def peer_info() -> dict[str, Any]:
    return peer_report(
        foreign_cluster(),
        [
            resource_slice("naples"),
            resource_slice("more", cpu="2"),
            resource_slice("denied", resources="Denied", cpu="64"),
            resource_slice("theirs", replicated=True, cpu="1"),
        ],
        [virtual_node("naples", "naples"), virtual_node("extra")],
        {"naples": ready_node("naples")},
        [pod(containers=[container(cpu="250m", memory="64Mi")])],
    )


def test_info_peer_adds_up_what_accepted_slices_acquired_and_what_pods_use() -> None:
    report = peer_info()
    assert report["resources"] == {
        "acquired": {"cpu": "6", "memory": "16Gi", "pods": "220"},
        "used": {"cpu": "250m", "memory": "64Mi", "pods": "1"},
        "provided": {"cpu": "1", "memory": "8Gi", "pods": "110"},
    }


def test_info_peer_lists_slices_with_their_state_and_virtual_nodes_with_readiness() -> None:
    report = peer_info()
    assert report["clusterID"] == "naples"
    assert report["apiServer"] == "https://127.0.0.1:6443"
    slices = {s["name"]: s for s in report["resourceSlices"]}
    assert slices["naples"]["accepted"] is True
    assert slices["naples"]["action"] == "Consuming"
    assert slices["theirs"]["action"] == "Providing"
    assert slices["denied"]["accepted"] is False
    assert {c["type"]: c["status"] for c in slices["denied"]["conditions"]}["Resources"] == "Denied"
    nodes = {v["name"]: v for v in report["virtualNodes"]}
    assert nodes["naples"]["ready"] is True
    assert nodes["naples"]["resourceSlice"] == "naples"
    assert nodes["extra"]["ready"] is False  # no Node (yet)
    assert "resourceSlice" not in nodes["extra"]


def test_reports_print_for_people_as_titled_lines() -> None:
    text = format_report(peer_info())
    lines = text.splitlines()
    assert lines[:3] == ["Cluster ID: naples", "Role: Provider", "Peering"]
    assert "  Outgoing peering: Established" in lines
    assert "  Networking: Disabled" in lines
    assert "    AuthIdentityControlPlaneStatus: Established (ours)" in lines
    assert "API server: https://127.0.0.1:6443" in lines
    assert "  Acquired: cpu=6, memory=16Gi, pods=220" in lines
    assert "  naples" in lines  # a slice, then a virtual node, by name
    assert "    Accepted: yes" in lines
    assert "      Resources: Denied (ResourceSliceResourcesDenied)" in lines
    assert "    Ready: no" in lines


def test_empty_lists_and_maps_print_as_none() -> None:
    report = local_report(ClusterIdentity("venice"), None, [], NOW)
    assert format_report(report).splitlines() == [
        "Cluster ID: venice",
        "Cluster labels: none",
        "Controller manager",
        "  Running: no",
        "Peerings: none",
    ]


def test_info_reports_the_webhook_and_each_virtual_kubelet() -> None:
    webhook = webhook_state(
        [{"kind": "MutatingWebhookConfiguration"}, {"kind": "ValidatingWebhookConfiguration"}],
        {"spec": {"replicas": 2}, "status": {"readyReplicas": 1}},
    )
    assert webhook == {"registered": True, "ready": "1/2"}
    assert webhook_state([{"kind": "MutatingWebhookConfiguration"}], None) == {"registered": False}
    virtual_nodes = [
        {
            "metadata": {"name": "naples", "namespace": "liqo-tenant-naples"},
            "status": {"conditions": [{"type": "VirtualKubelet", "status": "Running"}]},
        },
        {
            "metadata": {"name": "rome", "namespace": "liqo-tenant-rome"},
            "status": {
                "conditions": [
                    {
                        "type": "VirtualKubelet",
                        "status": "None",
                        "message": "the VkOptionsTemplate x/y does not exist",
                    }
                ]
            },
        },
    ]
    nodes = {"naples": {"status": {"conditions": [{"type": "Ready", "status": "True"}]}}}
    report = local_report(
        ClusterIdentity("venice"),
        None,
        [],
        NOW,
        webhook=webhook,
        virtual_kubelets=virtual_kubelet_states(virtual_nodes, nodes),
    )
    assert report["virtualKubelets"] == [
        {"name": "liqo-tenant-naples/naples", "virtualKubelet": "Running", "nodeReady": True},
        {
            "name": "liqo-tenant-rome/rome",
            "virtualKubelet": "None",
            "nodeReady": None,
            "message": "the VkOptionsTemplate x/y does not exist",
        },
    ]
    lines = format_report(report).splitlines()
    assert "Webhook" in lines
    assert "  Registered: yes" in lines
    assert "  liqo-tenant-naples/naples" in lines
    assert "    Node ready: yes" in lines
