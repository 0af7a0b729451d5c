"""The provider's recount of its Quotas' ledgers: each Quota's `status.used` counted again from
the ShadowPods stamped with its user that the ShadowPod controller accounted and that have not
finished (one being deleted counts until it is gone), as Kubernetes' quota controller recounts
ResourceQuotas.

The webhook reserves each admission's share in the Quota's status, naming the ShadowPod's uid,
before it admits; the ShadowPod controller makes a Pod only for a ShadowPod whose reservation it
finds, and marks it accounted (condition QuotaReserved). The recount then folds the reservation
into the usage, and drops one whose ShadowPod never showed up (a creation that failed after
admission, or a review someone sent the webhook directly) when it expires. So the ledger is
exact under any number of webhook replicas, and whatever was reserved without an object is
undone within `RESERVATION_SECONDS`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import structlog

from vk.api.constants import CREATOR_USER_LABEL
from vk.api.offloading import Quota
from vk.api.usage import (
    Resources,
    creator_label_value,
    forge_counted_status,
    holds_resources,
    is_accounted,
    next_expiry,
    pod_usage,
    sum_usage,
)
from vk.controllers.provider_caches import every_shadow_pod
from vk.kube.client import JSON, Conflict, KubeClient, NotFound, resource_path
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.informer import (
    DELETED,
    MODIFIED,
    namespace_of_key,
    object_key,
    shared_informer,
    split_key,
)
from vk.reflection.forge.pods import shadow_pod_as_pod

log = structlog.get_logger("vk.controllers.provider_quotas")

CREATOR_INDEX = "creator"
# Every Quota is counted again this often, whatever happened: drift repaired.
RECOUNT_SECONDS = 30.0
# A write that lost to an admission's is retried at once, on the newer Quota.
AFTER_CONFLICT = 0.05
# A Quota is counted again this long after a change of it or of its ShadowPods, not at each:
# a burst of admissions is one status write (each was a write racing the webhook's ledger
# writes on the same object, one conflict in two at 10,000 pods). Until then the reservations
# count what the usage has not yet.
RECOUNT_BATCH_SECONDS = 0.25


def quota_user(quota: Mapping[str, Any]) -> str | None:
    """The identity a Quota is for (its `spec.user`), if it names one."""
    user = (quota.get("spec") or {}).get("user")
    return user if isinstance(user, str) and user else None


def quota_creator_index(quota: JSON) -> list[str]:
    """Quotas by the creator stamp their user's ShadowPods carry."""
    user = quota_user(quota)
    return [] if user is None else [creator_label_value(user)]


def shadow_pod_creator_index(shadow_pod: JSON) -> list[str]:
    creator = (shadow_pod["metadata"].get("labels") or {}).get(CREATOR_USER_LABEL)
    return [str(creator)] if creator else []


# The cached ShadowPods by twin namespace and creator stamp, `<namespace>/<stamp>`: where an
# identity whose Quota is gone still has pods (its rights in a twin, its consumer's count of
# slices).
STAMPS_BY_TWIN = "stamps-by-twin"


def twin_stamp_index(shadow_pod: JSON) -> list[str]:
    namespace = shadow_pod["metadata"].get("namespace", "")
    return [f"{namespace}/{stamp}" for stamp in shadow_pod_creator_index(shadow_pod)]


def twin_stamps_gone(event: str, shadow_pod: JSON, old: JSON | None) -> list[str]:
    """The STAMPS_BY_TWIN values a ShadowPod's event takes its object out of: its own when
    deleted, its old one when its stamp changed (an administrator may take a stamp off).
    Whether any object is left under one is the caller's to ask."""
    if event == DELETED:
        return twin_stamp_index(shadow_pod)
    if event == MODIFIED and old is not None:
        before = twin_stamp_index(old)
        if before and before != twin_stamp_index(shadow_pod):
            return before
    return []


@dataclass(frozen=True)
class Share:
    """What one ShadowPod counts for in its Quota's recount, as of one resourceVersion."""

    version: str
    uid: str
    accounted: bool
    usage: Resources  # nothing unless accounted and holding resources


def share_of(shadow_pod: JSON) -> Share:
    metadata = shadow_pod["metadata"]
    accounted = is_accounted(shadow_pod)
    pod = shadow_pod_as_pod(shadow_pod)
    usage = pod_usage(pod) if accounted and holds_resources(pod) else {}
    version, uid = str(metadata.get("resourceVersion", "")), str(metadata.get("uid", ""))
    return Share(version, uid, accounted, usage)


class ProviderQuotaUsage(Reconciler):
    """Keys are the Quotas' `namespace/name`."""

    name = "provider-quota-usage"

    def __init__(
        self, client: KubeClient, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
    ) -> None:
        self.client = client
        self.clock = clock
        self.quotas = shared_informer(
            client,
            Quota.group_version(),
            Quota.PLURAL,
            indexers={CREATOR_INDEX: quota_creator_index},
        )
        # The ShadowPod controller's informer. The index leaves out the few that carry no stamp.
        self.shadow_pods = every_shadow_pod(
            client, indexers={CREATOR_INDEX: shadow_pod_creator_index}
        )
        # Each ShadowPod's share by key, worked out once per version of it: a recount adds
        # them up. Working every share out again at each recount took 93 ms at 10,000 pods, up
        # to four times a second while they changed, and held up everything else this
        # process does meanwhile.
        self._shares: dict[str, Share] = {}
        # Grouped by tenant namespace (one consumer's): a consumer's many Quotas recounted do
        # not hold up another's.
        self.controller = Controller(self, workers=2, group=namespace_of_key)

    def _recount_soon(self, quota: JSON) -> None:
        self.controller.queue.add_after(object_key(quota), RECOUNT_BATCH_SECONDS)

    def _share(self, key: str, shadow_pod: JSON) -> Share:
        share = self._shares.get(key)
        if share is None or share.version != shadow_pod["metadata"].get("resourceVersion"):
            share = self._shares[key] = share_of(shadow_pod)
        return share

    def _on_shadow_pod(self, event: str, shadow_pod: JSON, old: JSON | None) -> None:
        creators = shadow_pod_creator_index(shadow_pod)
        if event == DELETED or not creators:
            self._shares.pop(object_key(shadow_pod), None)
        # A stamp changed or gone (only an admin can: the webhook refuses it to tenants) takes
        # the ShadowPod out of the Quota it counted in, which is counted again too.
        for creator in {*creators, *(shadow_pod_creator_index(old) if old else ())}:
            for quota in self.quotas.store.by_index(CREATOR_INDEX, creator):
                self._recount_soon(quota)

    async def run(self) -> None:
        self.quotas.add_handler(lambda _, obj, __: self._recount_soon(obj))
        self.shadow_pods.add_handler(self._on_shadow_pod)
        await run_with_informers(self.controller, self.quotas, self.shadow_pods)

    async def reconcile(self, key: str) -> Result:
        quota = self.quotas.store.get(key)
        if quota is None:
            return Result()
        accounted: dict[str, Resources] = {}
        pending: dict[str, str] = {}
        for creator in quota_creator_index(quota):
            for shadow_pod in self.shadow_pods.store.by_index(CREATOR_INDEX, creator):
                shadow_pod_key = object_key(shadow_pod)
                share = self._share(shadow_pod_key, shadow_pod)
                if share.accounted:
                    accounted[shadow_pod_key] = share.usage
                else:
                    pending[shadow_pod_key] = share.uid
        now = self.clock()
        status = quota.get("status") or {}
        used = sum_usage(accounted.values())
        counted = forge_counted_status(status, used, accounted, pending, now)
        if counted != status:
            namespace, name = split_key(key)
            path = resource_path(
                Quota.group_version(),
                Quota.PLURAL,
                namespace=namespace,
                name=name,
                subresource="status",
            )
            try:
                # The whole status, guarded by the resourceVersion counted from: an admission
                # that reserved meanwhile is never lost.
                await self.client.replace(path, {**quota, "status": counted})
            except Conflict:
                return Result(requeue_after=AFTER_CONFLICT)
            except NotFound:
                return Result()
        expiry = next_expiry(counted, now)
        if expiry is None:
            return Result(requeue_after=RECOUNT_SECONDS)
        until = (expiry - now).total_seconds() + 0.5
        return Result(requeue_after=min(max(until, 0.5), RECOUNT_SECONDS))
