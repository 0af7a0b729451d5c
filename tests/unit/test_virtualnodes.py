"""The VirtualNode controller's pure parts: the kubelet it launches, its conditions, the drain."""

from __future__ import annotations

import datetime

from vk.controllers.virtualnodes import (
    VirtualKubeletSpec,
    forge_conditions,
    forge_virtual_kubelet_spec,
    is_drainable,
)

NOW = datetime.datetime(2026, 11, 22, 8, 0, tzinfo=datetime.UTC)


def virtual_node(**spec: object) -> dict[str, object]:
    return {
        "metadata": {"name": "mypool", "namespace": "liqo-tenant-naples"},
        "spec": {
            "clusterID": "naples",
            "kubeconfigSecretRef": {"name": "kubeconfig-resourceslice-mypool"},
            **spec,
        },
    }


def test_the_kubelet_gets_liqos_arguments_and_environment() -> None:
    assert forge_virtual_kubelet_spec(virtual_node(), "venice") == VirtualKubeletSpec(
        namespace="liqo-tenant-naples",
        name="mypool",
        args=(
            "--foreign-cluster-id=naples",
            "--nodename=mypool",
            "--tenant-namespace=liqo-tenant-naples",
            "--home-cluster-id=venice",
            "--foreign-kubeconfig-secret-name=kubeconfig-resourceslice-mypool",
            "--create-node=true",
        ),
        env=(("POD_NAMESPACE", "liqo-tenant-naples"), ("VIRTUALNODE_NAME", "mypool")),
        cluster_id="naples",
        template={},
    )


def test_the_template_adds_arguments_and_create_node_false_is_passed_on() -> None:
    template = {
        "spec": {"template": {"spec": {"containers": [{"args": ["--node-ping-interval=1s"]}]}}}
    }
    spec = forge_virtual_kubelet_spec(virtual_node(createNode=False, template=template), "venice")
    assert spec.args[-2:] == ("--create-node=false", "--node-ping-interval=1s")


def test_conditions_keep_their_transition_time_while_the_status_stays() -> None:
    first = forge_conditions(None, {"VirtualKubelet": ("Creating", "starting")}, NOW)
    later = NOW + datetime.timedelta(minutes=5)
    same = forge_conditions(first, {"VirtualKubelet": ("Creating", "still starting")}, later)
    assert same[0]["lastTransitionTime"] == "2026-11-22T08:00:00Z"
    running = forge_conditions(same, {"VirtualKubelet": ("Running", "runs")}, later)
    assert running[0] == {
        "type": "VirtualKubelet",
        "status": "Running",
        "lastTransitionTime": "2026-11-22T08:05:00Z",
        "message": "runs",
    }


def test_draining_moves_workloads_but_not_daemonset_mirror_or_finished_pods() -> None:
    def pod(
        phase: str = "Running", owner: str = "ReplicaSet", annotations: dict[str, str] | None = None
    ) -> dict[str, object]:
        return {
            "metadata": {"ownerReferences": [{"kind": owner}], "annotations": annotations or {}},
            "status": {"phase": phase},
        }

    assert is_drainable(pod())
    assert not is_drainable(pod(owner="DaemonSet"))
    assert not is_drainable(pod(annotations={"kubernetes.io/config.mirror": "x"}))
    assert not is_drainable(pod(phase="Succeeded"))
