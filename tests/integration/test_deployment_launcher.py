"""The VirtualNode controller's Deployment launcher against a real API server and kube-controller-
manager: the Deployment, its ServiceAccount and RBAC are accepted and made, its pods come up (on
kwok nodes, which run no containers: the kubelet inside really runs in issue 9's real node), the
VirtualKubelet condition follows the Deployment, and deleting the VirtualNode removes it all."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Clusters
from tests.integration.conftest import (
    installed_controller_manager_stopped,
    start_controller_manager,
    stop_controller_manager,
)
from tests.integration.polling import wait_until
from vk.api.constants import TENANT_NAMESPACE_LABEL

CLUSTER = "florence"
IMAGE = "localhost/vk:launcher-test"


@pytest.fixture(scope="module")
def deployment_launcher(
    installed: Clusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[Clusters, Path]]:
    """florence's controller manager with the Deployment launcher, as real clusters run it."""
    log = tmp_path_factory.mktemp("controller-manager") / "controller-manager.log"
    with installed_controller_manager_stopped(installed, CLUSTER):
        process = start_controller_manager(
            installed,
            CLUSTER,
            log,
            "--virtual-kubelet-launcher=deployment",
            f"--virtual-kubelet-image={IMAGE}",
        )
        try:
            yield installed, log
        finally:
            stop_controller_manager(process)


def get(clusters: Clusters, *args: str) -> Any:
    result = clusters.kubectl(CLUSTER, "get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def condition(virtual_node: Any, kind: str) -> str | None:
    for c in ((virtual_node or {}).get("status") or {}).get("conditions") or []:
        if c["type"] == kind:
            return str(c["status"])
    return None


def test_a_virtual_node_gets_a_deployment_that_comes_and_goes_with_it(
    deployment_launcher: tuple[Clusters, Path], namespace_name: str
) -> None:
    clusters, log = deployment_launcher
    name = f"launch-{uuid.uuid4().hex[:6]}"
    clusters.kubectl(CLUSTER, "create", "namespace", namespace_name)
    clusters.kubectl(
        CLUSTER, "label", "namespace", namespace_name, f"{TENANT_NAMESPACE_LABEL}=true"
    )
    virtual_node = {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "VirtualNode",
        "metadata": {"name": name, "namespace": namespace_name},
        "spec": {
            "clusterID": "nowhere",
            "kubeconfigSecretRef": {"name": "kubeconfig-resourceslice-nowhere"},
            "template": {"spec": {"replicas": 1}},
        },
    }
    clusters.kubectl(CLUSTER, "apply", "-f", "-", input=json.dumps(virtual_node))
    try:
        deployment = wait_until(
            lambda: get(clusters, "deployment", f"vk-{name}", "-n", namespace_name),
            "the virtual kubelet's Deployment",
            explain=log.read_text,
        )
        pod = deployment["spec"]["template"]["spec"]
        assert pod["serviceAccountName"] == f"vk-{name}"
        assert pod["containers"][0]["image"] == IMAGE
        assert f"--nodename={name}" in pod["containers"][0]["args"]
        assert get(clusters, "serviceaccount", f"vk-{name}", "-n", namespace_name)
        assert get(clusters, "clusterrolebinding", f"vk:virtual-kubelet:{name}")

        # kube-controller-manager makes its pod; kwok reports it Running and Ready.
        wait_until(
            lambda: (
                condition(
                    get(clusters, "virtualnode", name, "-n", namespace_name), "VirtualKubelet"
                )
                == "Running"
            ),
            "VirtualKubelet Running once the Deployment has an available pod",
            timeout=60,
            explain=lambda: (
                clusters.kubectl(
                    CLUSTER, "get", "deploy,pods,virtualnode", "-n", namespace_name, "-o", "wide"
                ).stdout
            ),
        )
        pods = get(clusters, "pods", "-n", namespace_name, "-l", f"liqo.io/virtual-node={name}")[
            "items"
        ]
        assert [p["spec"]["serviceAccountName"] for p in pods] == [f"vk-{name}"]
        # No kubelet really runs in a kwok pod, so no Node registers.
        shown = get(clusters, "virtualnode", name, "-n", namespace_name)
        assert condition(shown, "Node") == "Creating"

        # A Deployment deleted by hand is made again.
        clusters.kubectl(CLUSTER, "delete", "deployment", f"vk-{name}", "-n", namespace_name)
        wait_until(
            lambda: (
                (get(clusters, "deployment", f"vk-{name}", "-n", namespace_name) or {})
                .get("metadata", {})
                .get("uid")
                not in (None, deployment["metadata"]["uid"])
            ),
            "the Deployment made again",
            explain=log.read_text,
        )
    finally:
        clusters.kubectl(
            CLUSTER, "delete", "virtualnode", name, "-n", namespace_name, "--wait=false"
        )

    wait_until(
        lambda: get(clusters, "virtualnode", name, "-n", namespace_name) is None,
        "the VirtualNode gone",
        timeout=60,
        explain=log.read_text,
    )
    assert get(clusters, "deployment", f"vk-{name}", "-n", namespace_name) is None
    assert not get(clusters, "pods", "-n", namespace_name, "-l", f"liqo.io/virtual-node={name}")[
        "items"
    ]
    assert get(clusters, "serviceaccount", f"vk-{name}", "-n", namespace_name) is None
    assert get(clusters, "clusterrolebinding", f"vk:virtual-kubelet:{name}") is None
    clusters.kubectl(CLUSTER, "delete", "namespace", namespace_name, "--wait=false")
