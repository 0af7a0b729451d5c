"""The Deployment a virtual kubelet runs as on real clusters: Liqo's shape, vk's image."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from vk.controllers.virtualkubelet_deployment import (
    DEFAULT_RESOURCES,
    SERVICE_ACCOUNT_UID_ANNOTATION,
    deployment_available,
    forge_virtual_kubelet_deployment,
    parse_pod_placement,
)
from vk.controllers.virtualnodes import forge_virtual_kubelet_spec

IMAGE = "registry.example/vk:0.1.0"


def virtual_node(template: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "clusterID": "naples",
        "kubeconfigSecretRef": {"name": "kubeconfig-resourceslice-naples"},
    }
    if template is not None:
        spec["template"] = template
    return {"metadata": {"name": "naples", "namespace": "liqo-tenant-naples"}, "spec": spec}


def forge(template: dict[str, Any] | None = None) -> dict[str, Any]:
    spec = forge_virtual_kubelet_spec(virtual_node(template), "venice")
    return forge_virtual_kubelet_deployment(spec, IMAGE)


def test_the_deployment_is_named_and_labelled_as_liqos() -> None:
    deployment = forge()
    assert deployment["metadata"]["name"] == "vk-naples"
    assert deployment["metadata"]["namespace"] == "liqo-tenant-naples"
    labels = deployment["metadata"]["labels"]
    assert labels["offloading.liqo.io/component"] == "virtual-kubelet"
    assert labels["liqo.io/virtual-node"] == "naples"
    assert labels["liqo.io/remote-cluster-id"] == "naples"
    selector = deployment["spec"]["selector"]["matchLabels"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert selector.items() <= pod_labels.items()
    assert deployment["spec"]["replicas"] == 1


def test_the_container_runs_vk_kubelet_with_liqos_arguments_and_downward_env() -> None:
    pod = forge()["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "vk-naples"
    (container,) = pod["containers"]
    assert container["image"] == IMAGE
    assert container["args"] == [
        "kubelet",
        "--foreign-cluster-id=naples",
        "--nodename=naples",
        "--tenant-namespace=liqo-tenant-naples",
        "--home-cluster-id=venice",
        "--foreign-kubeconfig-secret-name=kubeconfig-resourceslice-naples",
        "--create-node=true",
        "--node-ip=$(POD_IP)",
    ]
    env = {e["name"]: e for e in container["env"]}
    assert env["POD_IP"]["valueFrom"]["fieldRef"]["fieldPath"] == "status.podIP"
    assert env["POD_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.name"
    assert env["POD_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    assert env["VIRTUALNODE_NAME"] == {"name": "VIRTUALNODE_NAME", "value": "naples"}
    assert env["PYTHONOPTIMIZE"] == {"name": "PYTHONOPTIMIZE", "value": "2"}
    assert len(container["env"]) == 5  # POD_NAMESPACE once, from the downward API


def test_the_pod_is_locked_down_and_scrapeable() -> None:
    template = forge()["spec"]["template"]
    pod = template["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    container = pod["containers"][0]
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["resources"] == DEFAULT_RESOURCES
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    annotations = template["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == "5872"


def test_a_service_account_made_again_rolls_the_pods_out_for_new_tokens() -> None:
    spec = forge_virtual_kubelet_spec(virtual_node(), "venice")
    first, again = (
        forge_virtual_kubelet_deployment(dataclasses.replace(spec, service_account_uid=uid), IMAGE)
        for uid in ("uid-1", "uid-2")
    )
    annotations = first["spec"]["template"]["metadata"]["annotations"]
    assert annotations[SERVICE_ACCOUNT_UID_ANNOTATION] == "uid-1"
    assert first["spec"]["template"] != again["spec"]["template"]


def test_the_virtual_nodes_template_sets_replicas_pod_fields_labels_and_extra_args() -> None:
    template = {
        "metadata": {"labels": {"team": "edge"}, "annotations": {"note": "x"}},
        "spec": {
            "replicas": 2,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "args": ["--node-ping-interval=5s"],
                            "resources": {"requests": {"cpu": "1"}},
                        }
                    ],
                    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
                    "imagePullSecrets": [{"name": "pull"}],
                    "hostNetwork": True,  # not the template's to set
                }
            },
        },
    }
    deployment = forge(template)
    assert deployment["spec"]["replicas"] == 2
    assert deployment["metadata"]["labels"]["team"] == "edge"
    pod_template = deployment["spec"]["template"]
    assert pod_template["metadata"]["annotations"]["note"] == "x"
    pod = pod_template["spec"]
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]
    assert pod["imagePullSecrets"] == [{"name": "pull"}]
    assert "hostNetwork" not in pod
    container = pod["containers"][0]
    assert container["resources"] == {"requests": {"cpu": "1"}}
    assert container["args"][-2:] == ["--node-ping-interval=5s", "--node-ip=$(POD_IP)"]


def test_a_template_label_cannot_steal_the_selector() -> None:
    template = {"metadata": {"labels": {"liqo.io/virtual-node": "other"}}}
    deployment = forge(template)
    assert deployment["metadata"]["labels"]["liqo.io/virtual-node"] == "naples"


def test_available_means_the_current_generation_has_an_available_pod() -> None:
    def deployment(generation: int, observed: int, available: int) -> dict[str, Any]:
        return {
            "metadata": {"generation": generation},
            "status": {"observedGeneration": observed, "availableReplicas": available},
        }

    assert deployment_available(deployment(2, 2, 1))
    assert not deployment_available(deployment(2, 1, 1))  # the new spec not rolled out yet
    assert not deployment_available(deployment(2, 2, 0))
    assert not deployment_available(None)


PLACEMENT = {
    "nodeSelector": {"dedicated": "vk"},
    "tolerations": [{"key": "dedicated", "operator": "Exists"}],
}


def test_the_launchers_placement_applies_unless_the_template_places_the_pod() -> None:
    spec = forge_virtual_kubelet_spec(virtual_node(), "venice")
    pod = forge_virtual_kubelet_deployment(spec, "vk:1", PLACEMENT)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"dedicated": "vk"}
    assert pod["tolerations"] == [{"key": "dedicated", "operator": "Exists"}]

    own = {"spec": {"template": {"spec": {"nodeSelector": {"zone": "a"}}}}}
    spec = forge_virtual_kubelet_spec(virtual_node(own), "venice")
    pod = forge_virtual_kubelet_deployment(spec, "vk:1", PLACEMENT)["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"zone": "a"}
    assert pod["tolerations"] == PLACEMENT["tolerations"]


def test_placement_flags_are_parsed_and_bad_tolerations_say_what_is_expected() -> None:
    placement = parse_pod_placement(
        {"dedicated": "vk"}, '[{"key":"dedicated","operator":"Exists","effect":"NoSchedule"}]'
    )
    assert placement == {
        "nodeSelector": {"dedicated": "vk"},
        "tolerations": [{"key": "dedicated", "operator": "Exists", "effect": "NoSchedule"}],
    }
    assert parse_pod_placement({}, None) == {}
    assert parse_pod_placement({}, "[]") == {}
    with pytest.raises(ValueError, match="not JSON"):
        parse_pod_placement({}, "[{key: dedicated}]")
    with pytest.raises(ValueError, match="a JSON list of tolerations"):
        parse_pod_placement({}, '{"key": "dedicated"}')
    with pytest.raises(ValueError, match="a JSON list of tolerations"):
        parse_pod_placement({}, '[{"key": "dedicated", "nodeName": "x"}]')
