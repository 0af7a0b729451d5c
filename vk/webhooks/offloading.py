"""Admission for namespace offloading (consumer): where pods of an offloaded namespace may be
scheduled, and what a NamespaceOffloading may say. Pure functions over the request and the
namespace's NamespaceOffloading (from the webhook's cache).

Pods (CREATE, in namespaces labelled `liqo.io/scheduling-enabled=true`): the pod offloading
strategy is merged into the pod's own required node affinity, so the vanilla scheduler does
the rest. `LocalAndRemote` tolerates the virtual-node taint and allows local nodes or the
selected virtual nodes; `Remote` tolerates it and requires selected virtual nodes; `Local`
requires local nodes (the taint alone kept off only pods that do not tolerate it). A pod of
RuntimeClass `liqo` is left to the RuntimeClass. While the NamespaceOffloading is being
deleted, new pods go to local nodes only, whatever they tolerate, select or run as: the
namespace is leaving every provider (the controller keeps the label on until it has left).
Until the namespace's NamespaceOffloading exists and its controller has seen it, pods are
refused (their controllers retry), so none is placed before the policy is known. A system
namespace (Kubernetes', vk's, a tenant namespace) is never offloaded: a NamespaceOffloading is
refused there, and its pods are left as they are, whatever labels it has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from vk.api.constants import (
    NAMESPACE_OFFLOADING_NAME,
    RUNTIME_CLASS_NAME,
    SCHEDULING_ENABLED_LABEL,
    TYPE_LABEL,
    TYPE_VIRTUAL_NODE,
    VIRTUAL_NODE_TAINT_EFFECT,
    VIRTUAL_NODE_TAINT_KEY,
    VK_NAMESPACE,
)
from vk.api.jsondata import json_copy
from vk.api.nodeselector import merge_node_selectors, selector_problems
from vk.api.offloading import (
    NamespaceMappingStrategy,
    PodOffloadingStrategy,
    remote_namespace_name_problem,
    system_namespace_problem,
)
from vk.webhooks.quota import ALLOWED, JSON, Decision, deny

VIRTUAL_NODE_TOLERATION: JSON = {
    "key": VIRTUAL_NODE_TAINT_KEY,
    "operator": "Exists",
    "effect": VIRTUAL_NODE_TAINT_EFFECT,
}
IS_VIRTUAL: JSON = {"key": TYPE_LABEL, "operator": "In", "values": [TYPE_VIRTUAL_NODE]}
IS_LOCAL: JSON = {"key": TYPE_LABEL, "operator": "NotIn", "values": [TYPE_VIRTUAL_NODE]}
LOCAL_NODES: JSON = {"nodeSelectorTerms": [{"matchExpressions": [IS_LOCAL]}]}


def policy_node_selector(spec: Mapping[str, Any]) -> JSON | None:
    """The nodes a pod of the namespace may use, as a NodeSelector (None: any node)."""
    strategy = spec.get("podOffloadingStrategy") or PodOffloadingStrategy.LOCAL_AND_REMOTE
    terms = ((spec.get("clusterSelector") or {}).get("nodeSelectorTerms")) or []
    if strategy == PodOffloadingStrategy.REMOTE:
        terms = terms or [{}]
        return {
            "nodeSelectorTerms": [
                {**t, "matchExpressions": [*(t.get("matchExpressions") or []), IS_VIRTUAL]}
                for t in terms
            ]
        }
    if strategy == PodOffloadingStrategy.LOCAL_AND_REMOTE and terms:
        # The selected virtual nodes, OR any local node.
        return {"nodeSelectorTerms": [*json_copy(terms), {"matchExpressions": [IS_LOCAL]}]}
    if strategy == PodOffloadingStrategy.LOCAL:
        # Local nodes only, whatever the pod tolerates or selects: a pod that chose a virtual
        # node itself was offloaded, then evicted and made again there, in a loop.
        return json_copy(LOCAL_NODES)
    return None


def forge_pod_placement_patch(pod: Mapping[str, Any], spec: Mapping[str, Any]) -> list[JSON]:
    """The JSON Patch that places `pod` by the offloading `spec`; [] when nothing changes."""
    strategy = spec.get("podOffloadingStrategy") or PodOffloadingStrategy.LOCAL_AND_REMOTE
    pod_spec = pod.get("spec") or {}
    if pod_spec.get("runtimeClassName") == RUNTIME_CLASS_NAME:
        return []
    patch: list[JSON] = []
    tolerations = list(pod_spec.get("tolerations") or [])
    if strategy != PodOffloadingStrategy.LOCAL and VIRTUAL_NODE_TOLERATION not in tolerations:
        patch.append(
            {
                "op": "add",
                "path": "/spec/tolerations",
                "value": [*tolerations, VIRTUAL_NODE_TOLERATION],
            }
        )
    policy = policy_node_selector(spec)
    if policy is not None:
        patch.append(_required_affinity_patch(pod_spec, policy))
    return patch


def forge_leaving_placement_patch(pod: Mapping[str, Any]) -> list[JSON]:
    """The JSON Patch that keeps `pod` on local nodes while its namespace leaves every provider
    (its NamespaceOffloading being deleted), whatever it tolerates, selects or runs as
    (RuntimeClass `liqo` included). The unoffloading waits until no pod of the namespace is on
    a virtual node: a pod that asked for one itself, placed there again, was offloaded again,
    evicted again, and the unoffloading never ended."""
    return [_required_affinity_patch(pod.get("spec") or {}, LOCAL_NODES)]


def _required_affinity_patch(pod_spec: Mapping[str, Any], nodes: JSON) -> JSON:
    """The pod's own required node affinity AND `nodes`, as a JSON Patch operation."""
    affinity = json_copy(pod_spec.get("affinity") or {})
    node_affinity = affinity.setdefault("nodeAffinity", {})
    required_key = "requiredDuringSchedulingIgnoredDuringExecution"
    node_affinity[required_key] = merge_node_selectors(node_affinity.get(required_key), nodes)
    return {"op": "add", "path": "/spec/affinity", "value": affinity}


def offloading_not_ready(namespace: str, offloading: Mapping[str, Any] | None) -> str | None:
    """Why pods of `namespace` cannot be placed yet, or None."""
    advice = (
        f"retry in a few seconds (controllers retry by themselves); if {namespace} is not "
        f"meant to be offloaded, remove its label: kubectl label namespace {namespace} "
        f"{SCHEDULING_ENABLED_LABEL}-"
    )
    if offloading is None:
        return (
            f"namespace {namespace} is labelled {SCHEDULING_ENABLED_LABEL}=true but has no "
            f"NamespaceOffloading {NAMESPACE_OFFLOADING_NAME!r} yet, so where its pods may run "
            f"is not known: {advice}"
        )
    metadata = offloading.get("metadata") or {}
    observed = (offloading.get("status") or {}).get("observedGeneration") or 0
    if observed < (metadata.get("generation") or 1):
        return (
            f"the NamespaceOffloading of {namespace} has not been processed by vk's controller "
            f"manager yet: {advice}"
        )
    return None


def review_offloading_pod(
    request: Mapping[str, Any],
    offloading: Mapping[str, Any] | None,
    vk_namespace: str = VK_NAMESPACE,
) -> tuple[Decision, list[JSON]]:
    """The answer to a pod CREATE in an offloaded namespace: refused until the policy is
    known, else placed by it; while its NamespaceOffloading is being deleted, on local nodes
    only (`forge_leaving_placement_patch`). A system namespace's places nothing, since it is
    never offloaded: its pods are never refused either (a label set there by hand would
    otherwise hold back its new pods, coredns's among them)."""
    if request.get("operation") != "CREATE":
        return ALLOWED, []
    namespace = str(request.get("namespace") or "")
    if system_namespace_problem(namespace, vk_namespace):
        return ALLOWED, []
    why = offloading_not_ready(namespace, offloading)
    if why:
        return deny(why), []
    assert offloading is not None
    if (offloading.get("metadata") or {}).get("deletionTimestamp"):
        return ALLOWED, forge_leaving_placement_patch(request.get("object") or {})
    return ALLOWED, forge_pod_placement_patch(
        request.get("object") or {}, offloading.get("spec") or {}
    )


def review_namespace_offloading(
    request: Mapping[str, Any],
    home_cluster_id: str | None = None,
    vk_namespace: str = VK_NAMESPACE,
) -> tuple[Decision, list[str]]:
    """The validation of a NamespaceOffloading CREATE or UPDATE: (decision, warnings). The
    remote name DefaultName gives is checked only knowing this cluster's ID."""
    operation = request.get("operation")
    if operation not in ("CREATE", "UPDATE"):
        return ALLOWED, []
    offloading = request.get("object") or {}
    namespace = str(
        (offloading.get("metadata") or {}).get("namespace") or request.get("namespace") or ""
    )
    # On CREATE only, as the name below: one admitted before this check stays deletable (its
    # finalizer's removal is an UPDATE), and the controller maps it nowhere.
    if operation == "CREATE" and (problem := system_namespace_problem(namespace, vk_namespace)):
        return deny(f"{problem}: offload the namespaces of your workloads instead"), []
    name = (offloading.get("metadata") or {}).get("name") or request.get("name")
    if operation == "CREATE" and name != NAMESPACE_OFFLOADING_NAME:
        return deny(
            f"a NamespaceOffloading must be named {NAMESPACE_OFFLOADING_NAME!r} (one per "
            f"namespace), not {name!r}: create it as {NAMESPACE_OFFLOADING_NAME!r}"
        ), []
    spec = offloading.get("spec") or {}
    strategy = spec.get("namespaceMappingStrategy") or NamespaceMappingStrategy.DEFAULT_NAME
    # On CREATE only: the name cannot change after, and an offloading admitted before this
    # check must stay deletable (its finalizer's removal is an UPDATE). DefaultName's name is
    # known only with this cluster's ID.
    name_known = home_cluster_id is not None or strategy == NamespaceMappingStrategy.SELECTED_NAME
    if operation == "CREATE" and name_known:
        problem = remote_namespace_name_problem(namespace, spec, home_cluster_id or "")
        if problem:
            return deny(problem), []
    problems = selector_problems(spec.get("clusterSelector"))
    if problems:
        return deny("the clusterSelector is invalid: " + "; ".join(problems)), []
    if operation == "UPDATE":
        old_spec = (request.get("oldObject") or {}).get("spec") or {}
        return _review_update(old_spec, spec)
    return ALLOWED, []


def _review_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> tuple[Decision, list[str]]:
    default = NamespaceMappingStrategy.DEFAULT_NAME
    immutable: Sequence[tuple[str, Any]] = (
        ("namespaceMappingStrategy", default),
        ("remoteNamespaceName", ""),
    )
    for field, unset in immutable:
        if (old.get(field) or unset) != (new.get(field) or unset):
            return deny(
                f"{field} cannot change once the namespace is offloaded (its twin namespaces "
                "would be renamed under running pods): unoffload the namespace (vkctl "
                "unoffload namespace NAME) and offload it again with the new value"
            ), []
    old_strategy = old.get("podOffloadingStrategy") or PodOffloadingStrategy.LOCAL_AND_REMOTE
    new_strategy = new.get("podOffloadingStrategy") or PodOffloadingStrategy.LOCAL_AND_REMOTE
    if new_strategy != old_strategy and new_strategy != PodOffloadingStrategy.LOCAL_AND_REMOTE:
        return ALLOWED, [
            f"podOffloadingStrategy {new_strategy} is more restrictive: pods now running where "
            "it forbids are evicted and recreated by their controllers; pods without a "
            "controller keep running, with an Event saying so"
        ]
    return ALLOWED, []
