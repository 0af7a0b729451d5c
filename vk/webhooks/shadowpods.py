"""The provider's rules on where and how its tenants' pods run: pure decisions, no I/O.

Pod Security admission leaves the scheduling fields alone, yet they decide which of the
provider's nodes a pod lands on and whom it may preempt: a ShadowPod names no node, uses only
the priority classes, schedulers and runtime classes the provider lists, and tolerates only the
taints it allows (so never its control plane's). And a consumer's identity asks for pods only
in the twin namespaces the provider made for that consumer.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vk.api.constants import (
    REMOTE_CLUSTER_ID_LABEL,
    TENANT_GROUP_PREFIX,
    TENANT_NAMESPACE_LABEL,
    VIRTUAL_NODE_TAINT_KEY,
)
from vk.webhooks.quota import ALLOWED, Decision, deny

# Whatever a provider lists, these classes are for its own nodes' and cluster's components:
# a tenant's pod holding them could preempt them.
RESERVED_PRIORITY_CLASSES = frozenset({"system-node-critical", "system-cluster-critical"})
DEFAULT_SCHEDULER = "default-scheduler"
# The tolerations every pod gets from the API server (DefaultTolerationSeconds), which an
# offloaded pod carries from home: they only bound how long it stays on a failing node.
NODE_LIFECYCLE_TAINTS = frozenset(
    {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}
)


@dataclass(frozen=True)
class TenantPodPolicy:
    """What the provider lets its tenants' pods name, besides the defaults."""

    priority_classes: frozenset[str] = field(default_factory=frozenset)
    scheduler_names: frozenset[str] = field(default_factory=frozenset)
    runtime_classes: frozenset[str] = field(default_factory=frozenset)
    toleration_keys: frozenset[str] = field(default_factory=frozenset)


def _listed(allowed: Iterable[str]) -> str:
    names = sorted(allowed)
    return f"allowed: {', '.join(names)}" if names else "the provider allows none"


def _toleration_allowed(toleration: Mapping[str, Any], policy: TenantPodPolicy) -> bool:
    key = toleration.get("key") or ""
    if not key:
        return False  # an empty key with Exists tolerates every taint
    if key == VIRTUAL_NODE_TAINT_KEY or key in policy.toleration_keys:
        return True
    return key in NODE_LIFECYCLE_TAINTS and toleration.get("effect") == "NoExecute"


def review_scheduling(spec: Mapping[str, Any], policy: TenantPodPolicy) -> Decision:
    """Whether a tenant's pod spec keeps to the provider's scheduling rules; a denial lists
    every field that does not, and what the provider allows there."""
    problems = []
    if spec.get("nodeName"):
        problems.append(
            f"spec.nodeName is {spec['nodeName']!r}: the provider's scheduler places its tenants' "
            "pods, remove it"
        )
    priority_class = spec.get("priorityClassName")
    if priority_class and (
        priority_class in RESERVED_PRIORITY_CLASSES or priority_class not in policy.priority_classes
    ):
        allowed = policy.priority_classes - RESERVED_PRIORITY_CLASSES
        problems.append(f"spec.priorityClassName {priority_class!r} ({_listed(allowed)})")
    scheduler = spec.get("schedulerName")
    if scheduler and scheduler != DEFAULT_SCHEDULER and scheduler not in policy.scheduler_names:
        allowed = policy.scheduler_names | {DEFAULT_SCHEDULER}
        problems.append(f"spec.schedulerName {scheduler!r} ({_listed(allowed)})")
    runtime_class = spec.get("runtimeClassName")
    if runtime_class and runtime_class not in policy.runtime_classes:
        problems.append(
            f"spec.runtimeClassName {runtime_class!r} ({_listed(policy.runtime_classes)})"
        )
    for index, toleration in enumerate(spec.get("tolerations") or []):
        if not _toleration_allowed(toleration, policy):
            allowed = policy.toleration_keys | {VIRTUAL_NODE_TAINT_KEY}
            what = toleration.get("key") or "every taint (no key)"
            problems.append(
                f"spec.tolerations[{index}] tolerates {what!r} (taints {_listed(allowed)})"
            )
    if problems:
        return deny(
            "the provider decides where its tenants' pods run: "
            + "; ".join(problems)
            + ". Change the pod (or its VirtualNode's offloadingPatch), or ask the provider to "
            "allow it"
        )
    return ALLOWED


def tenant_of(groups: Sequence[str]) -> str | None:
    """The consumer a requester's slice identity belongs to, from its tenant group."""
    for group in groups:
        if group.startswith(TENANT_GROUP_PREFIX) and len(group) > len(TENANT_GROUP_PREFIX):
            return group[len(TENANT_GROUP_PREFIX) :]
    return None


def review_namespace(
    namespace: str, labels: Mapping[str, str] | None, groups: Sequence[str]
) -> Decision:
    """Whether a consumer's identity may ask for pods in `namespace`: one of the twin
    namespaces the provider made for that consumer (a usage is counted against the tenant
    whose namespace it is, never against a label the tenant writes)."""
    consumer = tenant_of(groups)
    if consumer is None:
        return ALLOWED  # no tenant group: named by a Quota only; RBAC confines it
    if labels is None:
        return deny(
            f"namespace {namespace} is not known to the provider's webhook yet: retry in a few "
            "seconds"
        )
    owner = labels.get(REMOTE_CLUSTER_ID_LABEL)
    if owner != consumer or TENANT_NAMESPACE_LABEL in labels:
        return deny(
            f"namespace {namespace} is not a namespace this provider made for {consumer}'s "
            "offloaded pods"
        )
    return ALLOWED
