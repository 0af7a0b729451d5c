"""The Node a virtual kubelet registers, built from its VirtualNode: pure functions, no I/O.

Labels, taints, capacity and conditions follow Liqo's virtual kubelet (reference §1.3-1.5), so
selectors and tolerations written for Liqo's virtual nodes match ours. Two departures, because
a VirtualNode's labels and quota carry its provider's word, which the consumer does not trust:
its labels do not override what the kubelet says of the node nor the administrator's
nodeExtraLabels, and labels and capacity Kubernetes would refuse are left out (and reported),
not sent to make every write of the Node fail.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Collection, Mapping
from typing import Any

from vk.api.constants import (
    REMOTE_CLUSTER_ID_LABEL,
    TYPE_LABEL,
    TYPE_VIRTUAL_NODE,
    VIRTUAL_NODE_TAINT_EFFECT,
    VIRTUAL_NODE_TAINT_KEY,
    VIRTUAL_NODE_TAINT_VALUE,
)
from vk.api.labels import is_label_value, is_qualified_name
from vk.api.quantity import InvalidQuantity, parse_quantity
from vk.api.timestamps import kube_micro_time, kube_time

JSON = dict[str, Any]

# The taints this kubelet put on the Node last time, so it can remove those it no longer
# wants while leaving any an administrator added (Node taints are one atomic list).
APPLIED_TAINTS_ANNOTATION = "vk/last-applied-taints"

VIRTUAL_NODE_TAINT = {
    "key": VIRTUAL_NODE_TAINT_KEY,
    "value": VIRTUAL_NODE_TAINT_VALUE,
    "effect": VIRTUAL_NODE_TAINT_EFFECT,
}

READY_MESSAGE = "The Liqo Virtual Kubelet is posting ready status"


# What a Node counts in whole units (apimachinery's IsIntegerResourceName): these, and extended
# resources. A fraction of one makes the API server refuse the whole status.
INTEGER_RESOURCES = frozenset(
    {
        "pods",
        "resourcequotas",
        "services",
        "replicationcontrollers",
        "secrets",
        "configmaps",
        "persistentvolumeclaims",
        "services.nodeports",
        "services.loadbalancers",
    }
)

# The kube-scheduler counts a node's allocatable as an int64 (CPU in millicores) and scores it
# (NodeResourcesFit, least allocated) as (allocatable - requested) * 100 / allocatable: above
# this the product overflows, and a score out of [0, 100] fails the scheduling of every pod
# the node passes the filters for. 92 PB of memory, 92 trillion CPUs: no real cluster's.
MAX_SCHEDULABLE = (2**63 - 1) // 100


def shown(text: object, limit: int = 64) -> str:
    """`text` quoted for a message, cut short: what a provider writes may be long."""
    text = str(text)
    return repr(text if len(text) <= limit else f"{text[: limit - 1]}…")


def label_problem(key: object, value: object) -> str | None:
    """Why the API server would refuse the label `key=value` (and the object carrying it)."""
    if not is_qualified_name(key):
        return f"{shown(key)} is not a label key"
    if not is_label_value(value):
        return f"{key}={shown(value)} is not a label value"
    return None


def valid_labels(labels: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """The labels the API server takes, and why each other one is left out."""
    kept, left_out = {}, []
    for key, value in labels.items():
        if problem := label_problem(key, value):
            left_out.append(problem)
        else:
            kept[key] = value
    return kept, left_out


def base_labels(node_name: str, remote_cluster_id: str, storage: bool) -> dict[str, str]:
    return {
        "kubernetes.io/hostname": node_name,
        "kubernetes.io/role": "agent",
        "kubernetes.io/os": "linux",
        "kubernetes.io/arch": "amd64",
        TYPE_LABEL: TYPE_VIRTUAL_NODE,
        "type": "virtual-kubelet",
        REMOTE_CLUSTER_ID_LABEL: remote_cluster_id,
        "node.kubernetes.io/exclude-from-external-load-balancers": "true",
        "alpha.service-controller.kubernetes.io/exclude-balancer": "true",
        "storage.liqo.io/available": "true" if storage else "false",
    }


BASE_LABEL_KEYS = frozenset(base_labels("", "", storage=False))


def is_integer_resource(resource: str) -> bool:
    if resource in INTEGER_RESOURCES:
        return True
    # An extended resource: prefixed, outside *kubernetes.io, and a quota can name it.
    return (
        "/" in resource
        and "kubernetes.io/" not in resource
        and not resource.startswith("requests.")
        and is_qualified_name(f"requests.{resource}")
    )


def resource_problem(resource: object, quantity: Any) -> str | None:
    """Why a Node cannot offer `quantity` of `resource`: not a resource name, not a quantity,
    negative or a fraction where the API server refuses one, or beyond what the scheduler
    counts (`MAX_SCHEDULABLE`)."""
    if not isinstance(resource, str) or not is_qualified_name(resource):
        return f"{shown(resource)} is not a resource name"
    try:
        value = parse_quantity(quantity)
    except InvalidQuantity as error:
        return f"{resource}: {error}"
    if value < 0:
        return f"{resource} is negative"
    if is_integer_resource(resource) and value != value.to_integral_value():
        return f"{resource}: {shown(quantity)} is not a whole number"
    if value * (1000 if resource == "cpu" else 1) > MAX_SCHEDULABLE:
        return f"{resource}: {shown(quantity)} is more than the scheduler can count"
    return None


def node_capacity(hard: Mapping[str, Any]) -> tuple[dict[str, str], list[str]]:
    """Capacity (= allocatable) from `resourceQuota.hard`: every key, verbatim, but those a
    Node cannot offer (`resource_problem`), left out and said why, to be reported."""
    capacity, invalid = {}, []
    for resource, quantity in hard.items():
        if problem := resource_problem(resource, quantity):
            invalid.append(problem)
        else:
            capacity[resource] = str(quantity)
    return capacity, invalid


def resources_ready(capacity: Mapping[str, str]) -> bool:
    """Liqo: a node is usable when it offers some CPU and some memory."""

    def positive(resource: str) -> bool:
        try:
            return parse_quantity(capacity.get(resource, "0")) > 0
        except InvalidQuantity:
            return False

    return positive("cpu") and positive("memory")


def desired_taints(virtual_node_spec: Mapping[str, Any]) -> list[JSON]:
    return [dict(VIRTUAL_NODE_TAINT), *(dict(t) for t in virtual_node_spec.get("taints") or [])]


def taint_identity(taint: Mapping[str, Any]) -> tuple[str, str]:
    return str(taint.get("key", "")), str(taint.get("effect", ""))


def merge_taints(
    current: list[JSON], previously_applied: list[JSON], ours: list[JSON]
) -> list[JSON]:
    """The Node's taints: whatever others put there, plus ours; ours from last time that we no
    longer want are removed. A taint is identified by key and effect, as Kubernetes does."""
    ours_now = {taint_identity(t) for t in ours}
    ours_before = {taint_identity(t) for t in previously_applied}
    others = [
        t
        for t in current
        if taint_identity(t) not in ours_now and taint_identity(t) not in ours_before
    ]
    return others + ours


def forge_node_metadata(
    node_name: str,
    virtual_node_spec: Mapping[str, Any],
    *,
    remote_cluster_id: str,
    extra_labels: Mapping[str, str],
    extra_annotations: Mapping[str, str],
    yielded: Collection[str] = (),
) -> tuple[JSON, list[str]]:
    """The Node's labels and annotations, for server-side apply (what we stop applying is
    removed; what others set stays), and why each label left out is (`valid_labels`).

    Labels: the VirtualNode's, then the kubelet's own (`base_labels`), then the administrator's
    `extra_labels` (the VkOptionsTemplate's nodeExtraLabels), each winning over those before.
    Liqo lets the VirtualNode's win over all; but they carry the provider's, and a provider
    must not move its node into a cluster selector written to leave it out, nor pass for
    another kind of node. `yielded`: keys someone else set on the Node itself (`kubectl label
    node`), left to them."""
    spec_labels, left_out = valid_labels(virtual_node_spec.get("labels") or {})
    own, invalid = valid_labels(
        base_labels(node_name, remote_cluster_id, bool(virtual_node_spec.get("storageClasses")))
    )
    left_out += invalid
    extra, invalid = valid_labels(extra_labels)
    left_out += invalid
    labels = {
        key: value for key, value in {**spec_labels, **own, **extra}.items() if key not in yielded
    }
    annotations = {**extra_annotations, **(virtual_node_spec.get("annotations") or {})}
    metadata = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": node_name, "labels": labels, "annotations": annotations},
    }
    return metadata, left_out


def keys_set_by_others(obj: Mapping[str, Any], field: tuple[str, ...], manager: str) -> set[str]:
    """The keys of the map at `field` (e.g. ("metadata", "labels")) of `obj` that a field
    manager other than `manager` owns, as its managedFields say."""
    keys: set[str] = set()
    for entry in (obj.get("metadata") or {}).get("managedFields") or []:
        if entry.get("manager") == manager:
            continue
        owned = entry.get("fieldsV1") or {}
        for name in field:
            owned = owned.get(f"f:{name}") or {}
        keys.update(key.removeprefix("f:") for key in owned if key.startswith("f:"))
    return keys


def applied_taints(node: Mapping[str, Any]) -> list[JSON]:
    text = node.get("metadata", {}).get("annotations", {}).get(APPLIED_TAINTS_ANNOTATION, "[]")
    try:
        taints = json.loads(text)
    except ValueError:
        return []
    return taints if isinstance(taints, list) else []


def forge_taints_patch(
    node: Mapping[str, Any], virtual_node_spec: Mapping[str, Any]
) -> JSON | None:
    """A merge patch setting the Node's taints, or None when they are already right. It carries
    the resourceVersion read, so a concurrent change by someone else makes it fail, not lose."""
    ours = desired_taints(virtual_node_spec)
    current = node.get("spec", {}).get("taints") or []
    merged = merge_taints(current, applied_taints(node), ours)
    if merged == current and applied_taints(node) == ours:
        return None
    return {
        "metadata": {
            "resourceVersion": node["metadata"]["resourceVersion"],
            "annotations": {APPLIED_TAINTS_ANNOTATION: json.dumps(ours, sort_keys=True)},
        },
        "spec": {"taints": merged},
    }


def condition(
    condition_type: str,
    status: str,
    reason: str,
    message: str,
    now: str,
    previous: Mapping[str, Mapping[str, Any]],
) -> JSON:
    """A NodeCondition; lastTransitionTime moves only when the status does."""
    before = previous.get(condition_type, {})
    transition = before.get("lastTransitionTime") if before.get("status") == status else None
    return {
        "type": condition_type,
        "status": status,
        "reason": reason,
        "message": message,
        "lastHeartbeatTime": now,
        "lastTransitionTime": transition or now,
    }


def forge_node_conditions(
    capacity: Mapping[str, str],
    now: datetime.datetime,
    previous: list[JSON],
    *,
    not_ready: str | None = None,
) -> list[JSON]:
    """The Node's conditions. `not_ready` says why the virtual kubelet cannot work at all (as
    a kubelet whose runtime is broken says so in its Ready condition)."""
    stamp = kube_time(now)
    before = {c.get("type", ""): c for c in previous}
    usable = resources_ready(capacity)
    pressure = "False" if usable else "True"
    ready = usable and not_ready is None
    return [
        condition(
            "Ready",
            "True" if ready else "False",
            "KubeletReady" if ready else "KubeletNotReady",
            READY_MESSAGE if ready else not_ready or "The virtual node offers no CPU or no memory",
            stamp,
            before,
        ),
        condition(
            "MemoryPressure",
            pressure,
            "RemoteClusterHasSufficientMemory" if usable else "RemoteClusterHasMemoryPressure",
            "The remote cluster has sufficient memory available"
            if usable
            else "The remote cluster has insufficient memory available",
            stamp,
            before,
        ),
        condition(
            "DiskPressure",
            pressure,
            "RemoteClusterHasNoDiskPressure" if usable else "RemoteClusterHasDiskPressure",
            "The remote cluster has no disk pressure"
            if usable
            else "The remote cluster has disk pressure",
            stamp,
            before,
        ),
        condition(
            "PIDPressure",
            pressure,
            "RemoteClusterHasNoPIDPressure" if usable else "RemoteClusterHasPIDPressure",
            "The remote cluster has sufficient PID available"
            if usable
            else "The remote cluster has insufficient PID available",
            stamp,
            before,
        ),
    ]


def forge_node_status(
    capacity: Mapping[str, str],
    *,
    node_ip: str,
    kubelet_port: int,
    kubelet_version: str,
    now: datetime.datetime,
    previous_conditions: list[JSON],
    declared_features: tuple[str, ...] = (),
    not_ready: str | None = None,
) -> JSON:
    """The Node's status (for server-side apply on the status subresource). Declared features
    tell the API server what the kubelet API serves, e.g. `ExtendWebSocketsToKubelet`: exec,
    attach and port-forward may then arrive as WebSockets, proxied as they are. `not_ready`:
    see `forge_node_conditions`."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "status": {
            "capacity": dict(capacity),
            "allocatable": dict(capacity),
            "conditions": forge_node_conditions(
                capacity, now, previous_conditions, not_ready=not_ready
            ),
            "addresses": [{"type": "InternalIP", "address": node_ip}],
            "declaredFeatures": sorted(set(declared_features)),
            "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
            "nodeInfo": {
                "kubeletVersion": kubelet_version,
                "architecture": "amd64",
                "operatingSystem": "linux",
                "kubeProxyVersion": "",
                "osImage": "",
                "kernelVersion": "",
                "containerRuntimeVersion": "",
                "machineID": "",
                "systemUUID": "",
                "bootID": "",
            },
        },
    }


def status_differs(node: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """True when the Node's status is not what we want, heartbeat times aside."""

    def comparable(status: Mapping[str, Any]) -> JSON:
        conditions = sorted(
            (
                {k: v for k, v in c.items() if k not in ("lastHeartbeatTime", "lastTransitionTime")}
                for c in status.get("conditions", [])
            ),
            key=lambda c: str(c.get("type")),
        )
        return {
            "capacity": status.get("capacity"),
            "allocatable": status.get("allocatable"),
            "conditions": conditions,
            "addresses": status.get("addresses"),
            "port": status.get("daemonEndpoints", {}).get("kubeletEndpoint", {}).get("Port"),
            "version": status.get("nodeInfo", {}).get("kubeletVersion"),
            "features": status.get("declaredFeatures") or [],
        }

    return comparable(node.get("status", {})) != comparable(desired["status"])


def forge_node_lease(node_name: str, node_uid: str, duration: int, now: datetime.datetime) -> JSON:
    """The node's heartbeat Lease in kube-node-lease, owned by the Node as the kubelet's is
    (deleting the Node deletes it)."""
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": node_name,
            "namespace": "kube-node-lease",
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "Node", "name": node_name, "uid": node_uid}
            ],
        },
        "spec": {
            "holderIdentity": node_name,
            "leaseDurationSeconds": duration,
            "renewTime": kube_micro_time(now),
        },
    }
