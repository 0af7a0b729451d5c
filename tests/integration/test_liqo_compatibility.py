"""What a Liqo 1.x user brings over runs unchanged (issue 21): a VirtualNode whose template
carries the arguments Liqo's own chart gives a virtual kubelet."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.test_namespace_offloading import get_json
from tests.liqo import liqo_virtual_kubelet_args

CONSUMER, PROVIDER = "venice", "naples"
TENANT = f"liqo-tenant-{PROVIDER}"
NODE = f"{PROVIDER}-liqo-template"


def node_ready(clusters: Clusters, name: str) -> bool:
    node = get_json(clusters, CONSUMER, "node", name) or {}
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


@pytest.fixture
def liqo_virtual_node(naples_peered: Clusters) -> Iterator[Clusters]:
    """A second VirtualNode of the peering, its template written as Liqo's webhook writes it."""
    peered = get_json(
        naples_peered, CONSUMER, "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT
    )
    secret = peered["spec"]["kubeconfigSecretRef"]["name"]
    args = liqo_virtual_kubelet_args(
        remote=PROVIDER, node=NODE, tenant_namespace=TENANT, home=CONSUMER, secret=secret
    )
    virtual_node = {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "VirtualNode",
        "metadata": {"name": NODE, "namespace": TENANT},
        "spec": {
            "clusterID": PROVIDER,
            "createNode": True,
            "kubeconfigSecretRef": {"name": secret},
            "resourceQuota": {"hard": {"cpu": "1", "memory": "1Gi", "pods": "10"}},
            "template": {
                "spec": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "virtual-kubelet",
                                    "image": "ghcr.io/liqotech/virtual-kubelet:v1.0.0",
                                    "command": ["/usr/bin/virtual-kubelet"],
                                    "args": args,
                                }
                            ]
                        }
                    },
                }
            },
        },
    }
    naples_peered.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(virtual_node))
    try:
        yield naples_peered
    finally:
        naples_peered.kubectl(
            CONSUMER, "delete", "virtualnodes.offloading.liqo.io", NODE, "-n", TENANT,
            "--ignore-not-found", "--timeout=120s",
        )  # fmt: skip


def test_a_virtual_node_with_liqos_default_arguments_runs(liqo_virtual_node: Clusters) -> None:
    wait_until(lambda: node_ready(liqo_virtual_node, NODE), f"node {NODE} Ready", timeout=90)
    status = get_json(
        liqo_virtual_node, CONSUMER, "virtualnodes.offloading.liqo.io", NODE, "-n", TENANT
    )["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"VirtualKubelet": "Running", "Node": "Running"}


def test_a_providers_storage_class_appears_on_the_slice_and_the_virtual_node(
    naples_peered: Clusters,
) -> None:
    """Liqo's providers offer their storage classes on the ResourceSlice, and the consumer
    shows them on the VirtualNode (vk's virtual class `liqo`, in every cluster, is not one)."""
    clusters = naples_peered
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "vk-test-ssd"},
        "provisioner": "example.com/none",
    }
    offered = {"storageClassName": "vk-test-ssd"}

    def on_virtual_node() -> list[dict[str, object]]:
        virtual_node = get_json(
            clusters, CONSUMER, "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT
        )
        return list(virtual_node["spec"].get("storageClasses") or [])

    slice_name = get_json(
        clusters, CONSUMER, "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT
    )["metadata"]["labels"]["liqo.io/resourceslice-name"]
    assert {"storageClassName": "liqo"} not in on_virtual_node()
    clusters.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(storage_class))
    try:
        wait_until(lambda: offered in on_virtual_node(), "the class on the VirtualNode", 60)
        for cluster, namespace in ((CONSUMER, TENANT), (PROVIDER, f"liqo-tenant-{CONSUMER}")):
            status = get_json(
                clusters, cluster, "resourceslices.authentication.liqo.io", slice_name,
                "-n", namespace,
            )["status"]  # fmt: skip
            assert offered in status["storageClasses"], cluster
            assert {"storageClassName": "liqo"} not in status["storageClasses"]
    finally:
        clusters.kubectl(PROVIDER, "delete", "storageclass", "vk-test-ssd", "--ignore-not-found")
    wait_until(lambda: offered not in on_virtual_node(), "the class gone from the VirtualNode", 60)
