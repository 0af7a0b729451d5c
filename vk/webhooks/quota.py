"""The provider's Quota rules on the pods a consumer's identity creates: pure decisions, no I/O.

A pod's demand is what the scheduler would reserve for it (its containers' requests summed, the
init containers' peak if higher, plus the pod overhead) and one `pods`. A Quota's usage is the
demand of the pods stamped with its user that still hold resources. In every mode a pod that
would take the usage beyond the Quota, or asks for a resource the Quota does not grant, is
denied; `Soft` also wants cpu and memory requests on every container, `Hard` requests equal to
limits. A cordoned Quota admits nothing new. The webhook (`vk.webhooks.admission`) feeds these
functions from its caches.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from vk.api.constants import CREATOR_USER_LABEL, POD_TERMINAL_PHASES, TENANT_GROUP_PREFIX
from vk.api.offloading import LimitsEnforcement, Quota
from vk.api.quantity import InvalidQuantity, format_quantity, parse_quantity

JSON = dict[str, Any]
Resources = dict[str, Decimal]

PODS = "pods"  # the count of pods, 1 per pod, limited by a Quota that grants it
REQUIRED = ("cpu", "memory")  # what Soft and Hard want on every container
# Kubernetes' label value syntax (at most 63 characters besides).
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NOT_IN_LABEL_VALUE = re.compile(r"[^-A-Za-z0-9_.]")


@dataclass(frozen=True)
class Decision:
    """An admission answer: allowed, or denied with a message saying what to change."""

    allowed: bool
    message: str = ""


ALLOWED = Decision(True)


def deny(message: str) -> Decision:
    return Decision(False, message)


# --- The stamp: who created the pod ---------------------------------------------------------


def creator_label_value(user: str) -> str:
    """The CREATOR_USER_LABEL value naming `user`: the name itself when it is a valid label
    value (a ResourceSlice identity's `<slice>-<hash>` is, unless the slice name is very long),
    else a readable prefix and a digest of the whole name."""
    if len(user) <= 63 and _LABEL_VALUE.match(user):
        return user
    digest = hashlib.sha256(user.encode()).hexdigest()[:12]
    readable = _NOT_IN_LABEL_VALUE.sub("-", user)[:50].strip("-_.")
    return f"{readable}-{digest}" if readable else digest


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


# --- What a pod asks for --------------------------------------------------------------------


def _add(total: Resources, more: Mapping[str, Decimal]) -> Resources:
    result = dict(total)
    for name, value in more.items():
        result[name] = result.get(name, Decimal(0)) + value
    return result


def _maximum(left: Resources, right: Mapping[str, Decimal]) -> Resources:
    result = dict(left)
    for name, value in right.items():
        result[name] = max(result.get(name, Decimal(0)), value)
    return result


def _parsed(resources: Mapping[str, Any] | None) -> Resources:
    return {name: parse_quantity(value) for name, value in (resources or {}).items()}


def container_requests(container: Mapping[str, Any]) -> Resources:
    """A container's requests; a resource with a limit and no request asks for its limit, as
    the API server defaults it."""
    resources = container.get("resources") or {}
    return _parsed({**(resources.get("limits") or {}), **(resources.get("requests") or {})})


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What the scheduler reserves for `pod`: the containers' requests summed, then the larger
    of that and the init containers' peak (a sidecar, an init container restarting Always, runs
    beside every later container), pod-level requests where set, plus the overhead. Zero
    requests are left out: the pod does not ask for those. InvalidQuantity if one does not
    parse."""
    spec = pod.get("spec") or {}
    total: Resources = {}
    for container in spec.get("containers") or []:
        total = _add(total, container_requests(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in spec.get("initContainers") or []:
        requests = container_requests(container)
        if container.get("restartPolicy") == "Always":
            total = _add(total, requests)
            sidecars = _add(sidecars, requests)
            running = sidecars
        else:
            running = _add(requests, sidecars)
        init_peak = _maximum(init_peak, running)
    total = _maximum(total, init_peak)
    pod_level = spec.get("resources") or {}
    total.update(_parsed({**(pod_level.get("limits") or {}), **(pod_level.get("requests") or {})}))
    total = _add(total, _parsed(spec.get("overhead")))
    return {name: value for name, value in total.items() if value > 0}


def pod_usage(pod: Mapping[str, Any]) -> Resources:
    """What `pod` takes of a Quota: its requests and one `pods`."""
    return {**pod_requests(pod), PODS: Decimal(1)}


def holds_resources(pod: Mapping[str, Any]) -> bool:
    """Whether `pod` (a ShadowPod seen as its pod) counts in its Quota's usage: not finished.
    One being deleted still counts, until it is gone: its finalizer holds it until its Pod has
    stopped (Liqo gives the share back at once, while the pod may still run)."""
    return (pod.get("status") or {}).get("phase") not in POD_TERMINAL_PHASES


def pods_usage(pods: Iterable[Mapping[str, Any]]) -> Resources:
    """The usage of a set of pods: the sum of those holding resources."""
    total: Resources = {}
    for pod in pods:
        if holds_resources(pod):
            total = _add(total, pod_usage(pod))
    return total


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
        limits = _parsed(resources.get("limits"))
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
    explicit word on this tenant, not resource accounting. InvalidQuantity if the pod holds a
    quantity that does not parse (the API server parses them before admission)."""
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
        granted = _parsed(quota.spec.resources)
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


# --- Usage, kept up to date -----------------------------------------------------------------


class UsageLedger:
    """The usage of every creator, kept by events instead of summed per admission: the pods
    the cache holds, plus those admitted but not yet seen in it (so that a burst of creations
    is not admitted against a usage that none of them is in yet). A reservation lapses when
    its pod shows up, or after `reservation_ttl` seconds (its creation failed after the
    admission). Pure bookkeeping: the caller gives the time."""

    # Long enough for the informer to show an admitted pod (well under a second), short enough
    # that a creation which failed after its admission (the name taken, say) does not hold
    # the consumer's share for long.
    def __init__(self, reservation_ttl: float = 5.0) -> None:
        self.reservation_ttl = reservation_ttl
        self._pods: dict[str, tuple[str, Resources]] = {}  # key -> (creator, usage)
        self._totals: dict[str, Resources] = {}
        self._reserved: dict[str, dict[str, tuple[Resources, float]]] = {}  # creator -> key
        self._reserved_by: dict[str, str] = {}  # key -> creator

    def observe(self, pod: Mapping[str, Any]) -> None:
        """A pod as the cache has it now (added or changed)."""
        metadata = pod.get("metadata") or {}
        key = f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"
        self.forget(key)
        creator = creator_of(pod)
        if creator is None or not holds_resources(pod):
            return
        try:
            usage = pod_usage(pod)
        except InvalidQuantity:
            usage = {PODS: Decimal(1)}  # never admitted so: count what can be counted
        self._pods[key] = (creator, usage)
        self._totals[creator] = _add(self._totals.get(creator, {}), usage)

    def forget(self, key: str) -> None:
        """The pod `namespace/name` is gone (or about to be observed again)."""
        self._unreserve(key)
        entry = self._pods.pop(key, None)
        if entry is None:
            return
        creator, usage = entry
        remaining = _add(self._totals.get(creator, {}), {k: -v for k, v in usage.items()})
        remaining = {name: value for name, value in remaining.items() if value != 0}
        if remaining:
            self._totals[creator] = remaining
        else:
            self._totals.pop(creator, None)

    def reserve(self, creator: str, key: str, usage: Resources, now: float) -> None:
        """A pod just admitted for `creator`, counted until the cache shows it."""
        self._unreserve(key)
        self._reserved.setdefault(creator, {})[key] = (usage, now + self.reservation_ttl)
        self._reserved_by[key] = creator

    def _unreserve(self, key: str) -> None:
        creator = self._reserved_by.pop(key, None)
        if creator is not None:
            reservations = self._reserved.get(creator, {})
            reservations.pop(key, None)
            if not reservations:
                self._reserved.pop(creator, None)

    def used(self, creator: str, now: float, *, excluding: str | None = None) -> Resources:
        """What `creator`'s pods use, `excluding` the pod `namespace/name` (the one under
        review: a retried creation is not counted twice)."""
        total = dict(self._totals.get(creator, {}))
        if excluding is not None and excluding in self._pods:
            owner, usage = self._pods[excluding]
            if owner == creator:
                total = _add(total, {k: -v for k, v in usage.items()})
        reservations = self._reserved.get(creator, {})
        for key, (usage, expiry) in list(reservations.items()):
            if expiry <= now:
                self._unreserve(key)
            elif key != excluding:
                total = _add(total, usage)
        return total
