"""A VkOptionsTemplate as Liqo's chart writes one: what the virtual kubelets of the
VirtualNodes naming it are launched with, and how a VirtualNode's own template overrides it."""

from __future__ import annotations

from typing import Any

from vk.controllers.virtualkubelet_deployment import forge_virtual_kubelet_deployment
from vk.controllers.virtualnodes import (
    forge_virtual_kubelet_spec,
    options_template_key,
)
from vk.reflection.offloading_patch import with_kept_home

# The spec of Liqo's `virtual-kubelet-default` template, as its Helm chart renders it (values
# at their defaults, some extras set).
LIQO_DEFAULT_TEMPLATE: dict[str, Any] = {
    "replicas": 1,
    "createNode": True,
    "disableNetworkCheck": False,
    "containerImage": "ghcr.io/liqotech/virtual-kubelet:v1.0.0",
    "metricsEnabled": False,
    "labelsNotReflected": ["team"],
    "annotationsNotReflected": ["metallb.universe.tf/address-pool"],
    "reflectorsConfig": {
        "pod": {"workers": 10},
        "service": {"workers": 3, "type": "DenyList"},
        "endpointslice": {"workers": 10},
        "ingress": {"workers": 3, "type": "DenyList"},
        "configmap": {"workers": 3, "type": "CustomLiqo"},
        "secret": {"workers": 3, "type": "AllowList"},
        "event": {"workers": 3, "type": "DenyList"},
    },
    "resources": {"limits": {"memory": "1Gi"}},
    "extraArgs": ["--enable-apiserver-support=true"],
    "extraLabels": {"team": "platform"},
    "extraAnnotations": {"owner": "ops"},
    "nodeExtraLabels": {"tier": "gold"},
    "nodeExtraAnnotations": {"note": "x"},
    "imagePullSecrets": [{"name": "registry"}],
    "pullPolicy": "Always",
    "tolerations": [{"key": "infra", "operator": "Exists"}],
}


def virtual_node(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "mypool", "namespace": "liqo-tenant-naples"},
        "spec": {"clusterID": "naples", "kubeconfigSecretRef": {"name": "kc"}, **spec},
    }


def test_the_template_becomes_the_kubelets_arguments_before_the_virtual_nodes_own() -> None:
    own = {
        "spec": {
            "template": {"spec": {"containers": [{"args": ["--secret-reflection-type=DenyList"]}]}}
        }
    }
    args = forge_virtual_kubelet_spec(
        virtual_node(template=own), "venice", LIQO_DEFAULT_TEMPLATE
    ).args
    for expected in (
        "--pod-reflection-workers=10",
        "--endpointslice-reflection-workers=10",
        "--service-reflection-type=DenyList",
        "--secret-reflection-type=AllowList",
        "--node-extra-labels=tier=gold",
        "--node-extra-annotations=note=x",
        "--labels-not-reflected=team",
        "--annotations-not-reflected=metallb.universe.tf/address-pool",
        "--metrics-enabled=false",
        "--enable-apiserver-support=true",
    ):
        assert expected in args, expected
    assert "--configmap-reflection-type=CustomLiqo" not in args  # Liqo's default: no flag
    # The VirtualNode's own argument comes last: click takes the last value.
    assert args[-1] == "--secret-reflection-type=DenyList"


def test_the_virtual_nodes_create_node_wins_and_the_templates_applies_without_it() -> None:
    off = {**LIQO_DEFAULT_TEMPLATE, "createNode": False}
    assert "--create-node=false" in forge_virtual_kubelet_spec(virtual_node(), "v", off).args
    kept = forge_virtual_kubelet_spec(virtual_node(createNode=True), "v", off).args
    assert "--create-node=true" in kept


def test_the_deployment_takes_the_templates_pod_and_the_virtual_nodes_over_it() -> None:
    own = {
        "metadata": {"labels": {"team": "payments"}},
        "spec": {
            "replicas": 2,
            "template": {"spec": {"containers": [{"resources": {"limits": {"memory": "2Gi"}}}]}},
        },
    }
    spec = forge_virtual_kubelet_spec(virtual_node(template=own), "venice", LIQO_DEFAULT_TEMPLATE)
    deployment = forge_virtual_kubelet_deployment(spec, "localhost/vk:1")
    pod = deployment["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert deployment["spec"]["replicas"] == 2  # the VirtualNode's
    assert deployment["metadata"]["labels"]["team"] == "payments"
    assert deployment["spec"]["template"]["metadata"]["annotations"]["owner"] == "ops"
    assert container["resources"] == {"limits": {"memory": "2Gi"}}
    assert container["imagePullPolicy"] == "Always"
    assert container["image"] == "localhost/vk:1"  # never Liqo's image
    assert pod["tolerations"] == [{"key": "infra", "operator": "Exists"}]
    assert pod["imagePullSecrets"] == [{"name": "registry"}]


def test_without_a_template_nothing_changes() -> None:
    spec = forge_virtual_kubelet_spec(virtual_node(), "venice")
    assert spec.template == {}
    assert forge_virtual_kubelet_spec(virtual_node(), "venice", {}) == spec


def test_the_reference_defaults_to_the_virtual_nodes_namespace() -> None:
    assert options_template_key(virtual_node()) is None
    named = virtual_node(vkOptionsTemplateRef={"name": "fast"})
    assert options_template_key(named) == "liqo-tenant-naples/fast"
    elsewhere = virtual_node(vkOptionsTemplateRef={"name": "default", "namespace": "liqo"})
    assert options_template_key(elsewhere) == "liqo/default"


def test_keys_kept_home_add_to_the_virtual_nodes_patch() -> None:
    patch = {"labelsNotReflected": ["a"], "nodeSelector": {"x": "y"}}
    merged = with_kept_home(
        patch, {"labelsNotReflected": ["a", "b"], "annotationsNotReflected": []}
    )
    assert merged == {"labelsNotReflected": ["a", "b"], "nodeSelector": {"x": "y"}}
