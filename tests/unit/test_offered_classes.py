"""The storage, ingress and load-balancer classes a provider offers: what its ResourceSlice
status says, what the consumer takes of it (nothing that is not a class name), and what the
virtual kubelet is then told."""

from __future__ import annotations

from typing import Any

import pytest

from vk.controllers.consumer_resourceslices import forge_virtual_node, slice_status_problems
from vk.controllers.provider_resourceslices import offered_classes
from vk.controllers.virtualnodes import forge_virtual_kubelet_spec


def named(name: str, **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "annotations": annotations}}


def test_the_provider_offers_its_classes_with_the_default_marked_and_not_vks_own() -> None:
    storage = [
        named("standard", **{"storageclass.kubernetes.io/is-default-class": "true"}),
        named("liqo"),  # vk's virtual class, in every cluster
        named("fast"),
    ]
    ingress = [named("nginx", **{"ingressclass.kubernetes.io/is-default-class": "true"})]
    assert offered_classes(storage, ingress, ("metallb.io/lb", "example.com/other")) == {
        "storageClasses": [
            {"storageClassName": "fast"},
            {"storageClassName": "standard", "default": True},
        ],
        "ingressClasses": [{"ingressClassName": "nginx", "default": True}],
        "loadBalancerClasses": [
            {"loadBalancerClassName": "metallb.io/lb", "default": True},
            {"loadBalancerClassName": "example.com/other"},
        ],
    }


def test_a_provider_with_no_class_offers_none() -> None:
    assert offered_classes([named("liqo")], [], ()) == {}


@pytest.mark.parametrize(
    ("status", "problem"),
    [
        ({"storageClasses": [{"storageClassName": "fast --enable-storage"}]}, "not a class name"),
        ({"ingressClasses": [{"ingressClassName": "-x"}]}, "not a class name"),
        ({"loadBalancerClasses": [{"loadBalancerClassName": "a" * 300}]}, "not a class name"),
        ({"storageClasses": [{"storageClassName": 7}]}, "not a class name"),
        ({"storageClasses": ["fast"]}, "not a class name"),
        ({"storageClasses": {"storageClassName": "fast"}}, "not a list"),
        ({"storageClasses": [{"storageClassName": f"c{i}"} for i in range(65)]}, "at most 64"),
    ],
)
def test_a_class_that_is_no_class_name_makes_the_status_unusable(
    status: dict[str, Any], problem: str
) -> None:
    problems = slice_status_problems(status)
    assert len(problems) == 1
    assert problem in problems[0]


def resource_slice(**status: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "mypool", "namespace": "liqo-tenant-naples", "uid": "u1"},
        "status": {"resources": {"cpu": "4"}, **status},
    }


def test_the_virtual_node_shows_the_classes_and_nothing_else_of_their_entries() -> None:
    offered = {
        "storageClasses": [
            {"storageClassName": "fast", "extra": "x"},
            {"storageClassName": "standard", "default": True},
        ],
        "loadBalancerClasses": [{"loadBalancerClassName": "metallb.io/lb", "default": False}],
    }
    assert slice_status_problems(offered) == []
    spec = forge_virtual_node(resource_slice(**offered), "naples", {})["spec"]
    assert spec["storageClasses"] == [
        {"storageClassName": "fast"},
        {"storageClassName": "standard", "default": True},
    ]
    assert spec["loadBalancerClasses"] == [{"loadBalancerClassName": "metallb.io/lb"}]
    assert "ingressClasses" not in spec


def test_the_virtual_kubelet_uses_the_default_class_of_each_kind_else_the_first() -> None:
    spec = forge_virtual_node(
        resource_slice(
            storageClasses=[
                {"storageClassName": "fast"},
                {"storageClassName": "standard", "default": True},
            ],
            ingressClasses=[{"ingressClassName": "nginx"}, {"ingressClassName": "traefik"}],
        ),
        "naples",
        {},
    )
    args = forge_virtual_kubelet_spec(spec, "venice").args
    assert "--remote-real-storage-class-name=standard" in args
    assert "--remote-real-ingress-class-name=nginx" in args
    assert not any(a.startswith("--remote-real-load-balancer-class-name") for a in args)
