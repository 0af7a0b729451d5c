"""What a consumer's pods take of its Quota on a provider, and the Quota's ledger: pure
arithmetic on the API's JSON, shared by the webhook that admits ShadowPods and the controller
that counts them again.

A pod's demand is what the scheduler would reserve for it (its containers' requests summed, the
init containers' peak if higher, plus the pod overhead) and one `pods`. A Quota's usage is the
demand of the ShadowPods stamped with its user that the provider accounted (their
QuotaReserved condition) and that have not finished. The ledger, in the Quota's status, is that
usage as last counted plus the reservations of admissions not counted yet: the webhook adds a
reservation, naming the ShadowPod's uid, before it admits (with a resourceVersion precondition,
as Kubernetes' ResourceQuota admission writes its usage); the ShadowPod controller makes a Pod
only for a ShadowPod whose reservation it finds, and marks it accounted; the recount then folds
the reservation into the usage, and drops one that expires with no ShadowPod of its uid.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Iterable, Mapping
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from vk.api.constants import POD_TERMINAL_PHASES
from vk.api.jsondata import as_mapping
from vk.api.offloading import ShadowPodConditionType
from vk.api.quantity import format_quantity, parse_quantity
from vk.api.timestamps import kube_time

JSON = dict[str, Any]
Resources = dict[str, Decimal]

PODS = "pods"  # the count of pods, 1 per pod, limited by a Quota that grants it
# How long an admission's reservation waits for its ShadowPod: the API server stores an admitted
# object within milliseconds; one never stored (or a review sent by someone else than the API
# server) is undone after this.
RESERVATION_SECONDS = 30
# Kubernetes' label value syntax (at most 63 characters besides).
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_NOT_IN_LABEL_VALUE = re.compile(r"[^-A-Za-z0-9_.]")


def creator_label_value(user: str) -> str:
    """The CREATOR_USER_LABEL value naming `user`: the name itself when it is a valid label
    value (a ResourceSlice identity's `<slice>-<hash>` is, unless the slice name is very long),
    else a readable prefix and a digest of the whole name."""
    if len(user) <= 63 and _LABEL_VALUE.match(user):
        return user
    digest = hashlib.sha256(user.encode()).hexdigest()[:12]
    readable = _NOT_IN_LABEL_VALUE.sub("-", user)[:50].strip("-_.")
    return f"{readable}-{digest}" if readable else digest


def add_resources(total: Resources, more: Mapping[str, Decimal]) -> Resources:
    result = dict(total)
    for name, value in more.items():
        result[name] = result.get(name, Decimal(0)) + value
    return result


def _maximum(left: Resources, right: Mapping[str, Decimal]) -> Resources:
    result = dict(left)
    for name, value in right.items():
        result[name] = max(result.get(name, Decimal(0)), value)
    return result


def parse_resources(resources: Mapping[str, Any] | None) -> Resources:
    return {name: parse_quantity(value) for name, value in (resources or {}).items()}


# A pod spec is read as `vk.api.podspec` says it is shaped, which the webhook makes sure of
# before it counts one; a part of another shape (a ShadowPod changed while the webhook was down,
# which its controller reports) asks for nothing, so that a Quota's recount never stops on it.


def _objects(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def _requirements(resources: Any) -> Resources:
    """What a container's or a pod's `resources` asks for (`container_requests`)."""
    resources = as_mapping(resources)
    return parse_resources(
        {**as_mapping(resources.get("limits")), **as_mapping(resources.get("requests"))}
    )


def container_requests(container: Mapping[str, Any]) -> Resources:
    """A container's requests; a resource with a limit and no request asks for its limit, as
    the API server defaults it."""
    return _requirements(container.get("resources"))


def pod_requests(pod: Mapping[str, Any]) -> Resources:
    """What the scheduler reserves for `pod`: the containers' requests summed, then the larger
    of that and the init containers' peak (a sidecar, an init container restarting Always, runs
    beside every later container), pod-level requests where set, plus the overhead. Zero
    requests are left out: the pod does not ask for those. InvalidQuantity if one does not
    parse."""
    spec = as_mapping(pod.get("spec"))
    total: Resources = {}
    for container in _objects(spec.get("containers")):
        total = add_resources(total, container_requests(container))
    sidecars: Resources = {}
    init_peak: Resources = {}
    for container in _objects(spec.get("initContainers")):
        requests = container_requests(container)
        if container.get("restartPolicy") == "Always":
            total = add_resources(total, requests)
            sidecars = add_resources(sidecars, requests)
            running = sidecars
        else:
            running = add_resources(requests, sidecars)
        init_peak = _maximum(init_peak, running)
    total = _maximum(total, init_peak)
    total.update(_requirements(spec.get("resources")))
    total = add_resources(total, parse_resources(as_mapping(spec.get("overhead"))))
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
    return sum_usage(pod_usage(pod) for pod in pods if holds_resources(pod))


def sum_usage(usages: Iterable[Mapping[str, Decimal]]) -> Resources:
    """The sum of usages, added up in place (a recount adds up ten thousand)."""
    total: Resources = {}
    for usage in usages:
        for name, value in usage.items():
            total[name] = total.get(name, Decimal(0)) + value
    return total


# --- The ledger in the Quota's status --------------------------------------------------------


def _expired(reservation: Mapping[str, Any], now: datetime) -> bool:
    try:
        expires = datetime.fromisoformat(str(reservation.get("expires")))
    except ValueError:
        return True  # unreadable: as good as lapsed
    return expires <= now


def _reservations(status: Mapping[str, Any]) -> dict[str, Any]:
    return dict((status or {}).get("reservations") or {})


class Ledger:
    """A Quota's ledger (its status), read once for a batch of admissions: the usage as last
    counted and every reservation parsed once, each admission judged on it and reserved in it
    in turn. (Parsing the whole ledger again for each pod made a batch cost reservations times
    pods: the more pods waiting on the provider, the slower each was admitted.) InvalidQuantity
    if the status holds a quantity that does not parse."""

    def __init__(self, status: Mapping[str, Any]) -> None:
        self._status = dict(status or {})
        self._reservations = _reservations(status)
        self._parsed = {
            key: parse_resources(reservation.get("resources"))
            for key, reservation in self._reservations.items()
        }
        self._others = parse_resources(self._status.get("used"))  # all but `_parsed`'s
        for usage in self._parsed.values():
            self._others = add_resources(self._others, usage)

    def usage(self, *, excluding: str | None) -> Resources:
        """What is taken: the usage as last counted plus every reservation (an expired one too,
        until the recount drops it: failing safe while the recount is away), but the one of
        `excluding` (the ShadowPod under review: a retried creation is not counted twice)."""
        own = self._parsed.get(excluding) if excluding is not None else None
        if not own:
            return dict(self._others)
        return {name: value - own.get(name, Decimal(0)) for name, value in self._others.items()}

    def reserve(self, key: str, uid: str, usage: Mapping[str, Decimal], now: datetime) -> None:
        """Reserves `usage` for the ShadowPod `key` of `uid`, in place of any reservation of
        that key; it lapses RESERVATION_SECONDS from `now` unless that ShadowPod shows up.
        Another uid's reservation of the key is replaced by one of each resource's larger
        amount: a creation retried (another uid, the same pod) is not counted twice, and a
        second creation of a name that exists (refused by the API server only after the
        webhooks) cannot shrink what the first holds until the recount has counted its Pod."""
        own = self._parsed.get(key)
        if own and self._reservations.get(key, {}).get("uid") != uid:
            usage = {name: max(own.get(name, Decimal(0)), usage.get(name, Decimal(0)))
                     for name in {*own, *usage}}  # fmt: skip
        self._others = add_resources(self.usage(excluding=key), usage)
        self._parsed[key] = dict(usage)
        self._reservations[key] = _reservation(uid, usage, now)

    def status(self) -> JSON:
        return {**self._status, "reservations": dict(self._reservations)}


def ledger_usage(status: Mapping[str, Any], *, excluding: str | None) -> Resources:
    """What the Quota's ledger says is taken (`Ledger.usage`)."""
    return Ledger(status).usage(excluding=excluding)


def format_resources(resources: Mapping[str, Decimal]) -> dict[str, str]:
    return {name: format_quantity(name, value) for name, value in sorted(resources.items())}


def forge_reserved_status(
    status: Mapping[str, Any], key: str, uid: str, usage: Mapping[str, Decimal], now: datetime
) -> JSON:
    """The Quota's status with a reservation of `usage` for the ShadowPod `key` of `uid`, which
    lapses RESERVATION_SECONDS from `now` unless that ShadowPod shows up."""
    reservations = _reservations(status)
    reservations[key] = _reservation(uid, usage, now)
    return {**dict(status or {}), "reservations": reservations}


def _reservation(uid: str, usage: Mapping[str, Decimal], now: datetime) -> JSON:
    return {
        "uid": uid,
        "resources": format_resources(usage),
        "expires": kube_time(now + timedelta(seconds=RESERVATION_SECONDS)),
    }


def holds_reservation(status: Mapping[str, Any], key: str, uid: str) -> bool:
    """Whether the ledger holds the admission of the ShadowPod `key` of `uid`: what the
    ShadowPod controller asks before it makes the Pod."""
    reservation = _reservations(status).get(key) or {}
    return bool(uid) and reservation.get("uid") == uid


def is_accounted(shadow_pod: Mapping[str, Any]) -> bool:
    """Whether the ShadowPod controller found the ShadowPod's reservation and marked it
    (condition QuotaReserved True): from then on the usage counts it. One a vk before the mark
    gave a Pod (PodCreated True, no QuotaReserved) was admitted too: it counts, and is marked
    at its next status write."""
    by_type = {
        c.get("type"): c.get("status")
        for c in (shadow_pod.get("status") or {}).get("conditions") or []
    }
    reserved = by_type.get(ShadowPodConditionType.QUOTA_RESERVED)
    if reserved is not None:
        return bool(reserved == "True")
    return bool(by_type.get(ShadowPodConditionType.POD_CREATED) == "True")


def forge_counted_status(
    status: Mapping[str, Any],
    used: Mapping[str, Decimal],
    accounted: Collection[str],
    pending: Mapping[str, str],
    now: datetime,
) -> JSON:
    """The Quota's status counted again from its user's ShadowPods as they exist: those
    `accounted` (their keys) make `used` (`pods_usage` of them, seen as their pods); `pending`
    (key -> uid) are not accounted yet. A reservation goes once its ShadowPod is accounted
    (folded into `used`), and once it has expired with no pending ShadowPod of its uid (never
    created, or never the API server's); one waiting for its ShadowPod's accounting stays,
    expired or not."""
    reservations = {
        key: reservation
        for key, reservation in _reservations(status).items()
        if key not in accounted
        and (not _expired(reservation, now) or pending.get(key) == reservation.get("uid"))
    }
    counted: JSON = {"used": format_resources(used)}
    if reservations:
        counted["reservations"] = reservations
    return counted


def next_expiry(status: Mapping[str, Any], now: datetime) -> datetime | None:
    """When the next reservation of the status lapses after `now`, if any (one expired already
    waits for its ShadowPod's accounting, which brings the recount back)."""
    moments = []
    for reservation in _reservations(status).values():
        try:
            moments.append(datetime.fromisoformat(str(reservation.get("expires"))))
        except ValueError:
            continue
    return min((moment for moment in moments if moment > now), default=None)
