"""EndpointSlice reflection (issue 21): what a consumer asks for of its home endpoints, and
what the provider accepts of it."""

from __future__ import annotations

from typing import Any

import pytest

from vk.controllers.provider_shadowendpointslices import (
    accepted_ranges,
    address_refusal,
    forge_endpointslice,
    refused_addresses,
)
from vk.reflection.forge.exposition import (
    forge_shadow_endpointslice,
    is_reflectable_endpointslice,
)

LOCAL_SLICE: dict[str, Any] = {
    "apiVersion": "discovery.k8s.io/v1",
    "kind": "EndpointSlice",
    "metadata": {
        "name": "web-abc12",
        "namespace": "shop",
        "labels": {
            "kubernetes.io/service-name": "web",
            "endpointslice.kubernetes.io/managed-by": "endpointslice-controller.k8s.io",
        },
    },
    "addressType": "IPv4",
    "endpoints": [
        {
            "addresses": ["10.244.0.5"],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "nodeName": "venice-worker-1",
            "targetRef": {"kind": "Pod", "name": "web-1", "namespace": "shop", "uid": "u1"},
            "zone": "north",
        },
        {"addresses": ["10.250.0.9"], "conditions": {"ready": True}, "nodeName": "naples"},
    ],
    "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
}


def test_only_the_slices_kubernetes_makes_for_services_are_reflected() -> None:
    assert is_reflectable_endpointslice(LOCAL_SLICE)
    mirrored = {
        "metadata": {
            "labels": {
                "kubernetes.io/service-name": "web",
                "endpointslice.kubernetes.io/managed-by": "endpointslicemirroring-controller"
                ".k8s.io",
            }
        }
    }
    assert not is_reflectable_endpointslice(mirrored)
    assert not is_reflectable_endpointslice({"metadata": {}})


def test_the_shadow_lists_home_pods_only_without_their_node_or_pod() -> None:
    shadow = forge_shadow_endpointslice(
        LOCAL_SLICE,
        remote_namespace="shop-venice",
        local_cluster_id="venice",
        remote_cluster_id="naples",
        provider_nodes={"naples"},
    )
    assert shadow["kind"] == "ShadowEndpointSlice"
    labels = shadow["metadata"]["labels"]
    assert labels["kubernetes.io/service-name"] == "web"
    assert labels["endpointslice.kubernetes.io/managed-by"] == "endpointslice.reflection.liqo.io"
    assert labels["offloading.liqo.io/origin"] == "venice"
    assert shadow["spec"]["template"] == {
        "addressType": "IPv4",
        # The pod offloaded to naples runs there: its endpoint is the provider's already.
        "endpoints": [
            {
                "addresses": ["10.244.0.5"],
                "conditions": {"ready": True, "serving": True, "terminating": False},
            }
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def namespace(annotation: str | None) -> dict[str, Any]:
    annotations = {"offloading.vk.io/accepted-endpoint-ranges": annotation} if annotation else {}
    return {"metadata": {"name": "liqo-tenant-venice", "annotations": annotations}}


def test_accepted_ranges_are_the_tenant_namespaces_annotation() -> None:
    ranges, invalid = accepted_ranges(namespace("10.244.0.0/16, fd00::/64,bogus"))
    assert [str(r) for r in ranges] == ["10.244.0.0/16", "fd00::/64"]
    assert invalid == ["bogus"]
    assert accepted_ranges(namespace(None)) == ([], [])
    assert accepted_ranges(None) == ([], [])


@pytest.mark.parametrize(
    ("address", "refused"),
    [
        ("10.244.3.4", None),
        ("10.245.0.1", "outside the ranges"),
        ("fd00::5", None),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("127.0.0.1", "loopback"),
        ("0.0.0.0", "unspecified"),
        ("224.0.0.1", "multicast"),
        ("web.example.com", "not an IP address"),
        # IPv4-mapped: a dual-stack host routes them to the IPv4 address.
        ("::ffff:169.254.169.254", "link-local"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:10.244.3.4", None),
    ],
)
def test_an_address_is_taken_only_in_the_accepted_ranges(address: str, refused: str | None) -> None:
    ranges, _ = accepted_ranges(namespace("10.244.0.0/16,fd00::/64,169.254.0.0/16,0.0.0.0/0"))
    if refused == "outside the ranges":
        ranges, _ = accepted_ranges(namespace("10.244.0.0/16"))
    why = address_refusal(address, ranges)
    assert (why is None) if refused is None else (refused in str(why))


def test_every_refused_address_of_a_template_is_named() -> None:
    ranges, _ = accepted_ranges(namespace("10.244.0.0/16"))
    template = {
        "endpoints": [
            {"addresses": ["10.244.0.5", "203.0.113.7"]},
            {"addresses": "169.254.169.254"},  # not even a list
            "junk",
        ]
    }
    assert refused_addresses(template, ranges) == [
        ("203.0.113.7", "outside the ranges the provider accepts from this consumer"),
        ("169.254.169.254", "addresses is not a list"),
    ]


def test_the_provider_makes_an_endpointslice_of_only_what_it_checks() -> None:
    shadow = {
        "metadata": {
            "name": "web-abc12",
            "namespace": "shop-venice",
            "uid": "s1",
            "labels": {"kubernetes.io/service-name": "web"},
        },
        "spec": {
            "template": {
                "addressType": "FQDN",
                "endpoints": [
                    {
                        "addresses": ["10.244.0.5"],
                        "conditions": {"ready": True, "serving": "yes"},
                        "nodeName": "provider-node-1",
                        "targetRef": {"kind": "Pod", "name": "other-tenant-pod"},
                        "hostname": "web-1",
                    }
                ],
                "ports": [{"port": 8080, "protocol": "ICMP", "name": "http", "extra": 1}],
            }
        },
    }
    made = forge_endpointslice(shadow)
    assert made["addressType"] == "IPv4"
    assert made["endpoints"] == [
        {"addresses": ["10.244.0.5"], "conditions": {"ready": True}, "hostname": "web-1"}
    ]
    assert made["ports"] == [{"name": "http", "port": 8080}]
    assert made["metadata"]["labels"] == {
        "kubernetes.io/service-name": "web",
        "endpointslice.kubernetes.io/managed-by": "endpointslice.reflection.liqo.io",
        "liqo.io/managed-by": "shadowendpointslice",
    }
    owner = made["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"], owner["controller"]) == ("ShadowEndpointSlice", "s1", True)
