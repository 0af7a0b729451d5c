"""The Services and Ingresses vk copies into a provider, so that offloaded pods are reachable
there as they are at home (Liqo's `forge/services.go`, `ingresses.go`, reference §3.5).

What the consumer's cluster allocated or chose for itself (cluster IPs, node ports, load-balancer
and ingress classes) is left to the provider; their status is not reflected back. Pure: no I/O.
Objects are the API's own JSON.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

from vk.api.jsondata import json_copy
from vk.reflection.forge.meta import (
    JSON,
    exact_fields_differ,
    fields_differ,
    metadata_differs,
    reflected_metadata,
)

# --- Services ------------------------------------------------------------------------------

# "true" on a local Service: keep its node ports in the provider, instead of letting the
# provider allocate its own (the consumer's may be taken there).
FORCE_REMOTE_NODE_PORT_ANNOTATION = "liqo.io/force-remote-node-port"

# The spec fields a remote Service gets from the local one (Liqo's list).
SERVICE_SPEC_FIELDS = (
    "type",
    "selector",
    "ports",
    "externalName",
    "allocateLoadBalancerNodePorts",
    "externalTrafficPolicy",
    "internalTrafficPolicy",
    "ipFamilyPolicy",
    "loadBalancerSourceRanges",
    "publishNotReadyAddresses",
    "sessionAffinity",
    "sessionAffinityConfig",
    # Only ever "None": a headless Service stays headless; any other address is the consumer's.
    "clusterIP",
    # Only the provider's class, given by the caller: the local one names a consumer's controller.
    "loadBalancerClass",
)

# Maps of data: a key added by hand in the provider is drift.
_EXACT_SERVICE_FIELDS = ("selector",)
# Fields the provider fills in when the forged Service leaves them out: compared only when vk
# sets them, or every Service would look changed.
_SERVER_ALLOCATED_FIELDS = ("clusterIP",)

# Those of SERVICE_SPEC_FIELDS copied as they are; the others are forged.
_SERVICE_FIELDS_COPIED = tuple(
    f for f in SERVICE_SPEC_FIELDS if f not in ("ports", "clusterIP", "loadBalancerClass")
)

_SERVICE_PORT_FIELDS = ("name", "protocol", "appProtocol", "port", "targetPort")

_HEADLESS = "None"


def is_reflectable_service(local: Mapping[str, Any]) -> bool:
    """Whether a local Service may be copied to the provider at all (the policy aside): not the
    consumer's own API server, which the provider has its own `kubernetes` Service for."""
    metadata = local.get("metadata") or {}
    return not (metadata.get("namespace") == "default" and metadata.get("name") == "kubernetes")


def forge_remote_service(
    local: Mapping[str, Any],
    *,
    remote_namespace: str,
    local_cluster_id: str,
    remote_cluster_id: str,
    load_balancer_class: str | None = None,
) -> JSON:
    """The Service to apply in the provider for `local`. `load_balancer_class` is the provider's
    class for LoadBalancer Services (Liqo's `--enable-load-balancer`); without it, the provider's
    default load balancer, if any, serves them."""
    local_spec = local.get("spec") or {}
    annotations = (local.get("metadata") or {}).get("annotations") or {}
    keep_node_ports = annotations.get(FORCE_REMOTE_NODE_PORT_ANNOTATION, "").lower() == "true"

    spec: JSON = {
        field: json_copy(local_spec[field])
        for field in _SERVICE_FIELDS_COPIED
        if field in local_spec
    }
    if "ports" in local_spec:
        spec["ports"] = [_remote_port(port, keep_node_ports) for port in local_spec["ports"]]
    if local_spec.get("clusterIP") == _HEADLESS:
        spec["clusterIP"] = _HEADLESS
    if load_balancer_class is not None and local_spec.get("type") == "LoadBalancer":
        spec["loadBalancerClass"] = load_balancer_class

    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": reflected_metadata(
            local,
            name=local["metadata"]["name"],
            namespace=remote_namespace,
            local_cluster_id=local_cluster_id,
            remote_cluster_id=remote_cluster_id,
        ),
        "spec": spec,
    }


def service_needs_update(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether the remote Service must be rewritten. What the provider's API server filled in
    (cluster IPs, IP families, allocated node ports) is not drift; a field vk sets that differs,
    or one the local Service dropped (a selector), is."""
    want = desired.get("spec") or {}
    have = current.get("spec") or {}
    special = (*_EXACT_SERVICE_FIELDS, *_SERVER_ALLOCATED_FIELDS)
    compared = [f for f in SERVICE_SPEC_FIELDS if f not in special]
    allocated = [f for f in _SERVER_ALLOCATED_FIELDS if f in want]
    return (
        metadata_differs(desired, current)
        or exact_fields_differ(want, have, _EXACT_SERVICE_FIELDS)
        or fields_differ(want, have, [*compared, *allocated])
    )


# What only a Service reached from outside its cluster has: a ClusterIP Service may not set them.
_EXTERNAL_SERVICE_FIELDS = (
    "externalTrafficPolicy",
    "allocateLoadBalancerNodePorts",
    "loadBalancerSourceRanges",
    "loadBalancerClass",
)
_EXTERNAL_SERVICE_TYPES = ("NodePort", "LoadBalancer")


def as_cluster_ip_service(remote: Mapping[str, Any]) -> JSON | None:
    """A forged NodePort or LoadBalancer Service made ClusterIP: what a provider that gives no
    node ports or load balancers to its consumers (vk's default quota) still takes, so that
    offloaded pods there reach the Service by its name. None for any other type."""
    spec = remote.get("spec") or {}
    if spec.get("type") not in _EXTERNAL_SERVICE_TYPES:
        return None
    internal = {
        field: value for field, value in spec.items() if field not in _EXTERNAL_SERVICE_FIELDS
    }
    internal["type"] = "ClusterIP"
    if "ports" in spec:
        internal["ports"] = [
            {field: value for field, value in port.items() if field != "nodePort"}
            for port in spec["ports"]
        ]
    return {**remote, "spec": internal}


def _remote_port(port: Mapping[str, Any], keep_node_port: bool) -> JSON:
    fields = (*_SERVICE_PORT_FIELDS, "nodePort") if keep_node_port else _SERVICE_PORT_FIELDS
    return {field: port[field] for field in fields if field in port}


# --- Ingresses -----------------------------------------------------------------------------

# The class annotation older Ingresses carry: it names a consumer's ingress controller.
INGRESS_CLASS_ANNOTATION = "kubernetes.io/ingress.class"

_INGRESS_SPEC_FIELDS = ("rules", "defaultBackend", "tls")


def forge_remote_ingress(
    local: Mapping[str, Any],
    *,
    remote_namespace: str,
    local_cluster_id: str,
    remote_cluster_id: str,
    remote_ingress_class: str | None,
) -> JSON:
    """The Ingress to apply in the provider for `local`. `remote_ingress_class` is the provider's
    class (Liqo's `--enable-ingress`); without it, the provider's default class serves it. The
    local class, by field or by annotation, is the consumer's and never reflected."""
    local_spec = local.get("spec") or {}
    spec: JSON = {
        field: json_copy(local_spec[field]) for field in _INGRESS_SPEC_FIELDS if field in local_spec
    }
    if remote_ingress_class is not None:
        spec["ingressClassName"] = remote_ingress_class
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": reflected_metadata(
            local,
            name=local["metadata"]["name"],
            namespace=remote_namespace,
            local_cluster_id=local_cluster_id,
            remote_cluster_id=remote_cluster_id,
            annotations_not_reflected=(INGRESS_CLASS_ANNOTATION,),
        ),
        "spec": spec,
    }


def ingress_needs_update(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether the remote Ingress must be rewritten. Without a class of its own, the provider's
    admission gives the Ingress its default class: that is not drift."""
    want = desired.get("spec") or {}
    have = current.get("spec") or {}
    class_field = ("ingressClassName",) if "ingressClassName" in want else ()
    return metadata_differs(desired, current) or fields_differ(
        want, have, (*_INGRESS_SPEC_FIELDS, *class_field)
    )


# --- EndpointSlices ---------------------------------------------------------------------------

SERVICE_NAME_LABEL = "kubernetes.io/service-name"
ENDPOINTSLICE_MANAGED_BY_LABEL = "endpointslice.kubernetes.io/managed-by"
# The manager of the EndpointSlices Kubernetes makes for Services with a selector: the only
# ones reflected (not mirrored ones, not another controller's, not ours).
ENDPOINTSLICE_CONTROLLER = "endpointslice-controller.k8s.io"
# Liqo's manager of the reflected ones, on ShadowEndpointSlices and the EndpointSlices the
# provider makes of them (the provider's EndpointSlice controller leaves those alone).
REFLECTED_ENDPOINTSLICE_MANAGER = "endpointslice.reflection.liqo.io"
# What of an endpoint reaches the provider: not its node (one of home's, meaningless there, and
# read by kube-proxy for node-local traffic) nor the pod it names (a pod at home).
_ENDPOINT_FIELDS = ("addresses", "conditions", "hostname")
_PORT_FIELDS = ("name", "port", "protocol", "appProtocol")


def is_reflectable_endpointslice(local: Mapping[str, Any]) -> bool:
    labels = (local.get("metadata") or {}).get("labels") or {}
    return bool(labels.get(SERVICE_NAME_LABEL)) and (
        labels.get(ENDPOINTSLICE_MANAGED_BY_LABEL) == ENDPOINTSLICE_CONTROLLER
    )


def shadow_endpoint(endpoint: Mapping[str, Any]) -> JSON:
    """An endpoint as it travels to the provider, and as the provider takes it."""
    return {k: json_copy(endpoint[k]) for k in _ENDPOINT_FIELDS if k in endpoint}


def shadow_port(port: Mapping[str, Any]) -> JSON:
    return {k: port[k] for k in _PORT_FIELDS if k in port}


def forge_shadow_endpointslice(
    local: Mapping[str, Any],
    *,
    remote_namespace: str,
    local_cluster_id: str,
    remote_cluster_id: str,
    provider_nodes: Collection[str],
) -> JSON:
    """The ShadowEndpointSlice asking the provider for `local`'s endpoints (one
    `is_reflectable_endpointslice` accepts), those of pods on `provider_nodes` (the virtual
    nodes of this provider) left out: they run in the provider, which has their endpoints
    already (Liqo's EndpointSlice reflection)."""
    labels = (local.get("metadata") or {}).get("labels") or {}
    return {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "ShadowEndpointSlice",
        "metadata": reflected_metadata(
            local,
            name=local["metadata"]["name"],
            namespace=remote_namespace,
            local_cluster_id=local_cluster_id,
            remote_cluster_id=remote_cluster_id,
            extra_labels={
                SERVICE_NAME_LABEL: labels[SERVICE_NAME_LABEL],
                ENDPOINTSLICE_MANAGED_BY_LABEL: REFLECTED_ENDPOINTSLICE_MANAGER,
            },
        ),
        "spec": {
            "template": {
                "addressType": local.get("addressType"),
                "endpoints": [
                    shadow_endpoint(endpoint)
                    for endpoint in local.get("endpoints") or []
                    if endpoint.get("nodeName") not in provider_nodes
                ],
                "ports": [shadow_port(port) for port in local.get("ports") or []],
            }
        },
    }


def shadow_endpointslice_needs_update(
    desired: Mapping[str, Any], current: Mapping[str, Any]
) -> bool:
    return metadata_differs(desired, current) or (desired.get("spec") or {}) != (
        current.get("spec") or {}
    )
