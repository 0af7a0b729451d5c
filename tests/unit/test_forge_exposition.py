"""Service and Ingress forging: the consumer's objects → their copies in the provider."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from vk.api.constants import DESTINATION_LABEL, ORIGIN_LABEL
from vk.reflection.forge.exposition import (
    SERVICE_SPEC_FIELDS,
    as_cluster_ip_service,
    forge_remote_ingress,
    forge_remote_service,
    ingress_needs_update,
    is_reflectable_service,
    service_needs_update,
)

JSON = dict[str, Any]

HOME = "venice"
PROVIDER = "cool-firefly"
REMOTE_NAMESPACE = "demo-venice"
OURS = {ORIGIN_LABEL: HOME, DESTINATION_LABEL: PROVIDER}


def local_service() -> JSON:
    """A ClusterIP Service as `kubectl get service -o json` shows it once defaulted."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "web",
            "namespace": "demo",
            "uid": "3a8d2f61-0b7c-4e0e-b6a9-1c2d3e4f5a6b",
            "resourceVersion": "48120",
            "creationTimestamp": "2025-05-06T09:10:03Z",
            "labels": {"app": "web"},
            "annotations": {"prometheus.io/scrape": "true"},
        },
        "spec": {
            "clusterIP": "10.96.14.201",
            "clusterIPs": ["10.96.14.201"],
            "internalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "ports": [
                {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                {
                    "name": "grpc",
                    "port": 9090,
                    "protocol": "TCP",
                    "targetPort": "grpc",
                    "appProtocol": "kubernetes.io/h2c",
                },
            ],
            "selector": {"app": "web"},
            "sessionAffinity": "None",
            "type": "ClusterIP",
        },
        "status": {"loadBalancer": {}},
    }


def local_load_balancer() -> JSON:
    """A LoadBalancer Service the consumer's load balancer has served."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "web-public",
            "namespace": "demo",
            "uid": "9e1f4b2a-6c3d-4a8e-9f0b-7d6c5b4a3e21",
            "resourceVersion": "48177",
            "creationTimestamp": "2025-05-06T09:10:04Z",
            "annotations": {"metallb.universe.tf/address-pool": "public"},
        },
        "spec": {
            "allocateLoadBalancerNodePorts": True,
            "clusterIP": "10.96.80.12",
            "clusterIPs": ["10.96.80.12"],
            "externalTrafficPolicy": "Local",
            "healthCheckNodePort": 32145,
            "internalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "loadBalancerClass": "metallb.universe.tf/metallb",
            "loadBalancerSourceRanges": ["203.0.113.0/24"],
            "ports": [
                {
                    "name": "https",
                    "nodePort": 30443,
                    "port": 443,
                    "protocol": "TCP",
                    "targetPort": 8443,
                }
            ],
            "selector": {"app": "web"},
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
            "type": "LoadBalancer",
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.7", "ipMode": "VIP"}]}},
    }


def local_headless() -> JSON:
    """A StatefulSet's headless Service."""
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "db",
            "namespace": "demo",
            "uid": "5c4b3a29-1e0f-4d2c-8b7a-6f5e4d3c2b1a",
            "resourceVersion": "48190",
            "creationTimestamp": "2025-05-06T09:10:05Z",
        },
        "spec": {
            "clusterIP": "None",
            "clusterIPs": ["None"],
            "internalTrafficPolicy": "Cluster",
            "ipFamilies": ["IPv4"],
            "ipFamilyPolicy": "SingleStack",
            "ports": [{"name": "pg", "port": 5432, "protocol": "TCP", "targetPort": 5432}],
            "publishNotReadyAddresses": True,
            "selector": {"app": "db"},
            "sessionAffinity": "None",
            "type": "ClusterIP",
        },
        "status": {"loadBalancer": {}},
    }


def local_ingress() -> JSON:
    """An Ingress as `kubectl get ingress -o json` shows it once the consumer's controller
    served it."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": "web",
            "namespace": "demo",
            "uid": "2b3c4d5e-6f70-4812-9a3b-4c5d6e7f8091",
            "resourceVersion": "48210",
            "generation": 1,
            "creationTimestamp": "2025-05-06T09:10:06Z",
            "labels": {"app": "web"},
            "annotations": {
                "kubernetes.io/ingress.class": "nginx",
                "nginx.ingress.kubernetes.io/rewrite-target": "/",
            },
        },
        "spec": {
            "ingressClassName": "nginx",
            "defaultBackend": {"service": {"name": "web", "port": {"name": "http"}}},
            "rules": [
                {
                    "host": "web.example.com",
                    "http": {
                        "paths": [
                            {
                                "path": "/api",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": "api", "port": {"number": 9090}}},
                            }
                        ]
                    },
                }
            ],
            "tls": [{"hosts": ["web.example.com"], "secretName": "web-tls"}],
        },
        "status": {"loadBalancer": {"ingress": [{"ip": "198.51.100.8"}]}},
    }


def forge_service(local: JSON, load_balancer_class: str | None = None) -> JSON:
    return forge_remote_service(
        local,
        remote_namespace=REMOTE_NAMESPACE,
        local_cluster_id=HOME,
        remote_cluster_id=PROVIDER,
        load_balancer_class=load_balancer_class,
    )


def forge_ingress(local: JSON, remote_ingress_class: str | None = None) -> JSON:
    return forge_remote_ingress(
        local,
        remote_namespace=REMOTE_NAMESPACE,
        local_cluster_id=HOME,
        remote_cluster_id=PROVIDER,
        remote_ingress_class=remote_ingress_class,
    )


def as_provider_returns(forged: JSON) -> JSON:
    """The forged Service once the provider's API server stored and defaulted it: its own
    cluster IP and families, node ports it allocated, a status."""
    stored = copy.deepcopy(forged)
    stored["metadata"].update(
        uid="c0ffee00-1111-4222-8333-444455556666",
        resourceVersion="9120",
        creationTimestamp="2025-05-06T09:12:50Z",
    )
    spec = stored["spec"]
    if spec.get("clusterIP") != "None":
        spec["clusterIP"] = "10.112.7.33"
    spec["clusterIPs"] = [spec["clusterIP"]]
    spec["ipFamilies"] = ["IPv4"]
    if spec["type"] in ("NodePort", "LoadBalancer"):
        for number, port in enumerate(spec["ports"]):
            port.setdefault("nodePort", 31000 + number)
    stored["status"] = {"loadBalancer": {}}
    return stored


# --- Which Services ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("namespace", "name", "reflectable"),
    [
        pytest.param("default", "kubernetes", False, id="consumer-api-server"),
        pytest.param("default", "web", True, id="other-in-default"),
        pytest.param("demo", "kubernetes", True, id="kubernetes-elsewhere"),
    ],
)
def test_only_the_consumer_api_server_service_is_never_reflected(
    namespace: str, name: str, reflectable: bool
) -> None:
    local = local_service()
    local["metadata"].update(namespace=namespace, name=name)
    assert is_reflectable_service(local) is reflectable


# --- Service forging -----------------------------------------------------------------------


def test_service_is_copied_without_what_the_consumer_allocated() -> None:
    assert forge_service(local_service()) == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "web",
            "namespace": REMOTE_NAMESPACE,
            "labels": {"app": "web", **OURS},
            "annotations": {"prometheus.io/scrape": "true"},
        },
        "spec": {
            "internalTrafficPolicy": "Cluster",
            "ipFamilyPolicy": "SingleStack",
            "ports": [
                {"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080},
                {
                    "name": "grpc",
                    "port": 9090,
                    "protocol": "TCP",
                    "targetPort": "grpc",
                    "appProtocol": "kubernetes.io/h2c",
                },
            ],
            "selector": {"app": "web"},
            "sessionAffinity": "None",
            "type": "ClusterIP",
        },
    }


def test_load_balancer_gets_the_provider_class_and_no_node_ports() -> None:
    assert forge_service(local_load_balancer(), "metallb.io/provider") == {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "web-public",
            "namespace": REMOTE_NAMESPACE,
            "labels": OURS,
            "annotations": {"metallb.universe.tf/address-pool": "public"},
        },
        "spec": {
            "allocateLoadBalancerNodePorts": True,
            "externalTrafficPolicy": "Local",
            "internalTrafficPolicy": "Cluster",
            "ipFamilyPolicy": "SingleStack",
            "loadBalancerClass": "metallb.io/provider",
            "loadBalancerSourceRanges": ["203.0.113.0/24"],
            "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}],
            "selector": {"app": "web"},
            "sessionAffinity": "ClientIP",
            "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
            "type": "LoadBalancer",
        },
    }


def test_a_load_balancer_made_cluster_ip_keeps_what_pods_reach_it_by() -> None:
    forged = forge_service(local_load_balancer(), "metallb.io/provider")
    internal = as_cluster_ip_service(forged)
    assert internal is not None
    assert internal["metadata"] == forged["metadata"]
    assert internal["spec"] == {
        "internalTrafficPolicy": "Cluster",
        "ipFamilyPolicy": "SingleStack",
        "ports": [{"name": "https", "port": 443, "protocol": "TCP", "targetPort": 8443}],
        "selector": {"app": "web"},
        "sessionAffinity": "ClientIP",
        "sessionAffinityConfig": {"clientIP": {"timeoutSeconds": 10800}},
        "type": "ClusterIP",
    }
    assert not service_needs_update(internal, internal), "a stable copy: written once"


def test_a_forced_node_port_made_cluster_ip_loses_its_node_port() -> None:
    local = local_load_balancer()
    local["metadata"]["annotations"]["liqo.io/force-remote-node-port"] = "true"
    local["spec"]["type"] = "NodePort"
    forged = forge_service(local)
    assert any("nodePort" in port for port in forged["spec"]["ports"])
    internal = as_cluster_ip_service(forged)
    assert internal is not None
    assert internal["spec"]["type"] == "ClusterIP"
    assert not any("nodePort" in port for port in internal["spec"]["ports"])
    assert forged["spec"]["type"] == "NodePort", "the forged copy is left alone"


@pytest.mark.parametrize("service", [local_service, local_headless])
def test_only_a_service_reached_from_outside_has_a_cluster_ip_form(
    service: Callable[[], JSON],
) -> None:
    assert as_cluster_ip_service(forge_service(service())) is None


@pytest.mark.parametrize(
    ("service", "load_balancer_class", "expected"),
    [
        pytest.param(local_load_balancer, None, None, id="no-provider-class"),
        pytest.param(local_load_balancer, "metallb.io/provider", "metallb.io/provider", id="given"),
        pytest.param(local_service, "metallb.io/provider", None, id="not-a-load-balancer"),
    ],
)
def test_the_local_load_balancer_class_is_never_reflected(
    service: Callable[[], JSON], load_balancer_class: str | None, expected: str | None
) -> None:
    spec = forge_service(service(), load_balancer_class)["spec"]
    assert spec.get("loadBalancerClass") == expected


@pytest.mark.parametrize(
    ("annotation", "node_port"),
    [
        pytest.param(None, None, id="not-annotated"),
        pytest.param("true", 30443, id="forced"),
        pytest.param("True", 30443, id="forced-any-case"),
        pytest.param("false", None, id="not-forced"),
    ],
)
def test_node_ports_are_kept_only_when_forced(
    annotation: str | None, node_port: int | None
) -> None:
    local = local_load_balancer()
    if annotation is not None:
        local["metadata"]["annotations"]["liqo.io/force-remote-node-port"] = annotation
    [port] = forge_service(local)["spec"]["ports"]
    assert port.get("nodePort") == node_port


def test_headless_service_stays_headless() -> None:
    spec = forge_service(local_headless())["spec"]
    assert spec["clusterIP"] == "None"
    assert "clusterIPs" not in spec
    assert spec["publishNotReadyAddresses"] is True


def test_external_name_service_is_copied() -> None:
    local = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "db-external", "namespace": "demo", "uid": "1f2e3d4c"},
        "spec": {
            "externalName": "db.example.com",
            "sessionAffinity": "None",
            "type": "ExternalName",
        },
    }
    assert forge_service(local)["spec"] == {
        "externalName": "db.example.com",
        "sessionAffinity": "None",
        "type": "ExternalName",
    }


def test_every_forged_spec_field_is_one_reflected() -> None:
    for local in (local_service(), local_load_balancer(), local_headless()):
        assert set(forge_service(local, "lb")["spec"]) <= set(SERVICE_SPEC_FIELDS)


def test_forging_leaves_the_local_service_alone() -> None:
    local = local_load_balancer()
    forged = forge_service(local)
    forged["spec"]["ports"][0]["port"] = 1
    forged["spec"]["selector"]["app"] = "other"
    assert local == local_load_balancer()


# --- Service drift -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "service",
    [
        pytest.param(local_service, id="cluster-ip"),
        pytest.param(local_load_balancer, id="load-balancer"),
        pytest.param(local_headless, id="headless"),
    ],
)
def test_service_as_the_provider_returns_it_needs_no_update(service: Callable[[], JSON]) -> None:
    desired = forge_service(service())
    assert not service_needs_update(desired, as_provider_returns(desired))


def test_forced_node_port_as_the_provider_returns_it_needs_no_update() -> None:
    local = local_load_balancer()
    local["metadata"]["annotations"]["liqo.io/force-remote-node-port"] = "true"
    desired = forge_service(local)
    assert not service_needs_update(desired, as_provider_returns(desired))


def _port_changed(local: JSON) -> None:
    local["spec"]["ports"][0]["targetPort"] = 8081


def _selector_removed(local: JSON) -> None:
    del local["spec"]["selector"]


def _selector_changed(local: JSON) -> None:
    local["spec"]["selector"] = {"app": "web", "track": "canary"}


def _port_added(local: JSON) -> None:
    local["spec"]["ports"].append({"name": "metrics", "port": 9100, "protocol": "TCP"})


def _type_changed(local: JSON) -> None:
    local["spec"]["type"] = "NodePort"


def _label_changed(local: JSON) -> None:
    local["metadata"]["labels"]["version"] = "v2"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_port_changed, id="port-changed"),
        pytest.param(_port_added, id="port-added"),
        pytest.param(_selector_removed, id="selector-removed"),
        pytest.param(_selector_changed, id="selector-changed"),
        pytest.param(_type_changed, id="type-changed"),
        pytest.param(_label_changed, id="label-changed"),
    ],
)
def test_changed_local_service_needs_update(change: Callable[[JSON], None]) -> None:
    current = as_provider_returns(forge_service(local_service()))
    local = local_service()
    change(local)
    assert service_needs_update(forge_service(local), current)


def _hand_added_label(remote: JSON) -> None:
    remote["metadata"]["labels"]["hand"] = "made"


def _hand_added_selector_key(remote: JSON) -> None:
    remote["spec"]["selector"]["tier"] = "frontend"


def _hand_set_node_port(remote: JSON) -> None:
    remote["spec"]["ports"][0]["nodePort"] = 30080


def _hand_changed_policy(remote: JSON) -> None:
    remote["spec"]["sessionAffinity"] = "ClientIP"


@pytest.mark.parametrize(
    ("drift", "needs_update"),
    [
        pytest.param(_hand_added_label, True, id="hand-added-label"),
        pytest.param(_hand_added_selector_key, True, id="hand-added-selector-key"),
        pytest.param(_hand_changed_policy, True, id="hand-changed-affinity"),
        # A node port vk did not ask for is the provider's: not drift.
        pytest.param(_hand_set_node_port, False, id="provider-node-port"),
    ],
)
def test_remote_service_changed_in_the_provider(
    drift: Callable[[JSON], None], needs_update: bool
) -> None:
    desired = forge_service(local_service())
    current = as_provider_returns(desired)
    drift(current)
    assert service_needs_update(desired, current) is needs_update


def test_headless_service_with_an_address_in_the_provider_needs_update() -> None:
    desired = forge_service(local_headless())
    current = as_provider_returns(forge_service(local_headless()))
    current["spec"]["clusterIP"] = "10.112.7.34"
    assert service_needs_update(desired, current)


# --- Ingresses -----------------------------------------------------------------------------


def test_ingress_is_copied_without_the_consumer_class() -> None:
    assert forge_ingress(local_ingress()) == {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": "web",
            "namespace": REMOTE_NAMESPACE,
            "labels": {"app": "web", **OURS},
            "annotations": {"nginx.ingress.kubernetes.io/rewrite-target": "/"},
        },
        "spec": {
            "defaultBackend": {"service": {"name": "web", "port": {"name": "http"}}},
            "rules": [
                {
                    "host": "web.example.com",
                    "http": {
                        "paths": [
                            {
                                "path": "/api",
                                "pathType": "Prefix",
                                "backend": {"service": {"name": "api", "port": {"number": 9090}}},
                            }
                        ]
                    },
                }
            ],
            "tls": [{"hosts": ["web.example.com"], "secretName": "web-tls"}],
        },
    }


@pytest.mark.parametrize(
    ("remote_class", "expected"),
    [
        pytest.param(None, None, id="provider-default"),
        pytest.param("haproxy", "haproxy", id="provider-class"),
    ],
)
def test_ingress_class_is_the_provider_one_when_given(
    remote_class: str | None, expected: str | None
) -> None:
    assert forge_ingress(local_ingress(), remote_class)["spec"].get("ingressClassName") == expected


def test_forging_leaves_the_local_ingress_alone() -> None:
    local = local_ingress()
    forge_ingress(local)["spec"]["rules"][0]["host"] = "other.example.com"
    assert local == local_ingress()


def _stored_ingress(forged: JSON, default_class: str | None = None) -> JSON:
    stored = copy.deepcopy(forged)
    stored["metadata"].update(uid="c0ffee00-2222", resourceVersion="9130", generation=1)
    if default_class is not None:
        stored["spec"].setdefault("ingressClassName", default_class)
    stored["status"] = {"loadBalancer": {}}
    return stored


@pytest.mark.parametrize(
    ("remote_class", "default_class"),
    [
        pytest.param(None, None, id="no-class"),
        pytest.param(None, "traefik", id="provider-default-class-admitted"),
        pytest.param("haproxy", "traefik", id="provider-class"),
    ],
)
def test_ingress_as_the_provider_returns_it_needs_no_update(
    remote_class: str | None, default_class: str | None
) -> None:
    desired = forge_ingress(local_ingress(), remote_class)
    assert not ingress_needs_update(desired, _stored_ingress(desired, default_class))


def _ingress_path_changed(ingress: JSON) -> None:
    ingress["spec"]["rules"][0]["http"]["paths"][0]["path"] = "/v2"


def _ingress_tls_removed(ingress: JSON) -> None:
    del ingress["spec"]["tls"]


def _ingress_annotation_changed(ingress: JSON) -> None:
    ingress["metadata"]["annotations"]["nginx.ingress.kubernetes.io/rewrite-target"] = "/v2"


@pytest.mark.parametrize(
    "change",
    [
        pytest.param(_ingress_path_changed, id="path"),
        pytest.param(_ingress_tls_removed, id="tls-removed"),
        pytest.param(_ingress_annotation_changed, id="annotation"),
    ],
)
def test_changed_local_ingress_needs_update(change: Callable[[JSON], None]) -> None:
    current = _stored_ingress(forge_ingress(local_ingress()))
    local = local_ingress()
    change(local)
    assert ingress_needs_update(forge_ingress(local), current)


def test_ingress_with_another_class_than_the_provider_one_needs_update() -> None:
    desired = forge_ingress(local_ingress(), "haproxy")
    current = _stored_ingress(forge_ingress(local_ingress()), "traefik")
    assert ingress_needs_update(desired, current)
