"""The provider's Quota rules on the pods a consumer's identity asks for: pure decisions, no I/O.

In every mode a pod that would take the usage (`vk.api.usage`, the Quota's ledger) beyond the
Quota, or asks for a resource the Quota does not grant, is denied; `Soft` also wants cpu and
memory requests on every container, `Hard` requests equal to limits. A cordoned Quota admits
nothing new. The creator stamp says whose usage a ShadowPod is. The webhook
(`vk.webhooks.admission`) feeds these functions.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from vk.api.constants import CREATOR_USER_LABEL, TENANT_GROUP_PREFIX
from vk.api.offloading import LimitsEnforcement, Quota
from vk.api.quantity import InvalidQuantity, format_quantity
from vk.api.usage import (
    PODS,
    container_requests,
    creator_label_value,
    parse_resources,
    pod_usage,
)

JSON = dict[str, Any]

REQUIRED = ("cpu", "memory")  # what Soft and Hard want on every container


@dataclass(frozen=True)
class Decision:
    """An admission answer: allowed, or denied with a message saying what to change."""

    allowed: bool
    message: str = ""


ALLOWED = Decision(True)


def deny(message: str) -> Decision:
    return Decision(False, message)


# --- The stamp: who created the pod ---------------------------------------------------------


def is_tenant_identity(groups: Sequence[str], named_by_a_quota: bool) -> bool:
    """Whether a requester is a consumer's identity, whose pods the Quota rules apply to: a
    Quota names it, or it is in a consumer's tenant group (a slice identity whose Quota is not
    there, or no longer: it gets nothing)."""
    return named_by_a_quota or any(group.startswith(TENANT_GROUP_PREFIX) for group in groups)


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = (pod.get("metadata") or {}).get("labels") or {}
    return labels


def creator_of(pod: Mapping[str, Any]) -> str | None:
    return _labels(pod).get(CREATOR_USER_LABEL)


def forge_creator_patch(pod: Mapping[str, Any], user: str) -> list[JSON]:
    """The JSONPatch stamping `pod` with its creator (empty when it carries the stamp already).
    Whatever value the creator put there is replaced: the stamp is the webhook's word."""
    value = creator_label_value(user)
    labels = _labels(pod)
    if labels.get(CREATOR_USER_LABEL) == value:
        return []
    if not (pod.get("metadata") or {}).get("labels"):
        return [{"op": "add", "path": "/metadata/labels", "value": {CREATOR_USER_LABEL: value}}]
    key = CREATOR_USER_LABEL.replace("~", "~0").replace("/", "~1")  # RFC 6901
    return [{"op": "add", "path": f"/metadata/labels/{key}", "value": value}]


def review_creator_stamp(pod: Mapping[str, Any], user: str, tenant: bool) -> Decision:
    """On CREATE, after the stamping: a tenant's pod carries its creator, anyone else's pod
    carries no stamp (it would be counted in a tenant's usage, or hide from it)."""
    stamp = creator_of(pod)
    if not tenant:
        if stamp is None:
            return ALLOWED
        return deny(
            f"label {CREATOR_USER_LABEL} names the consumer identity that created a pod and is "
            f"set only by the provider's quota webhook; {user!r} is no consumer identity: "
            "create the pod without it"
        )
    expected = creator_label_value(user)
    if stamp == expected:
        return ALLOWED
    return deny(
        f"label {CREATOR_USER_LABEL} must be {expected!r}, the identity creating the pod, but "
        f"is {stamp!r}: the quota webhook's mutating configuration is missing, or another "
        "webhook changed the label after it"
    )


def review_creator_update(old: Mapping[str, Any], new: Mapping[str, Any]) -> Decision:
    """On UPDATE: the stamp is immutable, for everyone (usage is counted by it)."""
    before, after = creator_of(old), creator_of(new)
    if before == after:
        return ALLOWED
    if before is None:
        return deny(
            f"label {CREATOR_USER_LABEL} is set only when a pod is created, by the provider's "
            "quota webhook: it cannot be added to an existing pod"
        )
    change = "removed" if after is None else f"changed to {after!r}"
    return deny(
        f"label {CREATOR_USER_LABEL} names the identity that created the pod ({before!r}) and "
        f"is immutable: it cannot be {change}"
    )


# --- A tenant's update: what of its ShadowPod may change -----------------------------------

# What of a Pod's spec may change once it exists, as the API server rules for Pods (and what
# the virtual kubelet carries onto a live pod): its containers' images, its deadline, its
# tolerations. The rest of a ShadowPod's pod is held to that: its Quota share is counted from
# it, and the provider makes the Pod again from it (evicted, deleted), so resources lowered or
# raised by an update would free what the Pod still holds, or run a Pod beyond what was granted.
_MUTABLE_SPEC_FIELDS = ("activeDeadlineSeconds", "tolerations")
_CONTAINER_LISTS = ("containers", "initContainers")


def _immutable_part(spec: Any) -> Any:
    if not isinstance(spec, Mapping):
        return spec
    kept = {key: value for key, value in spec.items() if key not in _MUTABLE_SPEC_FIELDS}
    for key in _CONTAINER_LISTS:
        if isinstance(kept.get(key), list):
            kept[key] = [
                {k: v for k, v in c.items() if k != "image"} if isinstance(c, Mapping) else c
                for c in kept[key]
            ]
    return kept


def review_tenant_update(
    old: Mapping[str, Any], new: Mapping[str, Any], finalizer: str
) -> Decision:
    """On a consumer's UPDATE of its pod (a ShadowPod seen as one): its spec changes only where
    a Pod's may, and `finalizer`, which holds the ShadowPod and its share of the Quota until
    its Pod has stopped, stays until the provider removes it."""
    if _immutable_part(old.get("spec")) != _immutable_part(new.get("spec")):
        return deny(
            "a pod's spec may change only in its containers' images, its activeDeadlineSeconds "
            "and its tolerations, as a Pod's: delete it and create it again to change the rest"
        )
    finalizers = (new.get("metadata") or {}).get("finalizers") or []
    if finalizer in ((old.get("metadata") or {}).get("finalizers") or []) and (
        finalizer not in finalizers
    ):
        return deny(
            f"finalizer {finalizer} holds the pod, and its share of the Quota, until the "
            "provider has stopped its Pod: the provider removes it, not the consumer"
        )
    return ALLOWED


# --- The decision ---------------------------------------------------------------------------


def _quota_name(quota: Quota) -> str:
    return f"{quota.metadata.namespace}/{quota.metadata.name}"


def _containers(pod: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    spec = pod.get("spec") or {}
    return [
        (kind, container)
        for kind, key in (("container", "containers"), ("init container", "initContainers"))
        for container in spec.get(key) or []
    ]


def _review_limits(pod: Mapping[str, Any], quota: Quota, mode: LimitsEnforcement) -> Decision:
    """Soft: cpu and memory requests on every container; Hard: and limits equal to them."""
    rule = (
        "requires cpu and memory requests on every container"
        if mode == LimitsEnforcement.SOFT
        else "requires every container's cpu and memory requests to equal its limits"
    )
    where = f"the Quota {_quota_name(quota)} (limitsEnforcement {mode.value}) {rule}"
    problems = []
    for kind, container in _containers(pod):
        name = container.get("name", "")
        resources = container.get("resources") or {}
        limits = parse_resources(resources.get("limits"))
        requests = container_requests(container)
        for resource in REQUIRED:
            if resource not in requests:
                problems.append(f"{kind} {name} sets no {resource} request")
            elif mode == LimitsEnforcement.HARD and resource not in limits:
                problems.append(f"{kind} {name} sets no {resource} limit")
            elif mode == LimitsEnforcement.HARD and requests[resource] != limits[resource]:
                problems.append(
                    f"{kind} {name} requests {format_quantity(resource, requests[resource])} "
                    f"{resource} but limits it to {format_quantity(resource, limits[resource])}"
                )
    if problems:
        return deny(f"{'; '.join(problems)}: {where}")
    return ALLOWED


def review_pod(
    pod: Mapping[str, Any],
    quota: Quota,
    used: Mapping[str, Decimal],
    *,
    enforcement_enabled: bool = True,
) -> Decision:
    """Whether `quota` admits `pod`, its user's other pods using `used` (pods_usage). With
    enforcement disabled (a provider setting) only a cordon stops a pod: it is the provider's
    explicit word on this tenant, not resource accounting. `pod`'s spec has the shape
    `vk.api.podspec` checks (the webhook refuses any other first). InvalidQuantity if the pod
    holds a quantity that does not parse (a ShadowPod's are not parsed before admission)."""
    name = _quota_name(quota)
    if quota.spec.cordoned:
        return deny(
            f"the Quota {name} is cordoned: the provider admits no new pods of {quota.spec.user} "
            "until it uncordons it (spec.cordoned)"
        )
    if not enforcement_enabled:
        return ALLOWED
    mode = quota.spec.limits_enforcement or LimitsEnforcement.NONE
    if mode != LimitsEnforcement.NONE:
        decision = _review_limits(pod, quota, mode)
        if not decision.allowed:
            return decision
    try:
        granted = parse_resources(quota.spec.resources)
    except InvalidQuantity as error:
        return deny(f"the Quota {name} does not parse ({error}): ask the provider to fix it")
    asked = pod_usage(pod)
    missing = sorted(resource for resource in asked if resource not in granted and resource != PODS)
    if missing:
        return deny(
            f"the pod asks for {', '.join(missing)}, which the Quota {name} does not grant "
            f"(it grants {', '.join(sorted(granted)) or 'nothing'}): remove "
            f"{'that request' if len(missing) == 1 else 'those requests'}, or ask the provider "
            "for a ResourceSlice that grants it"
        )
    exceeded = []
    for resource in sorted(asked):
        if resource not in granted:
            continue
        already = used.get(resource, Decimal(0))
        if already + asked[resource] > granted[resource]:
            exceeded.append(
                f"{resource}: asks {format_quantity(resource, asked[resource])}, "
                f"{format_quantity(resource, already)} used, "
                f"{format_quantity(resource, granted[resource])} allowed"
            )
    if exceeded:
        return deny(
            f"the pod would exceed the Quota {name} of {quota.spec.user} on "
            f"{'; '.join(exceeded)}. Wait for other pods to finish, ask for less, or ask the "
            "provider for more"
        )
    return ALLOWED
