"""The provider's ShadowPod controller: each ShadowPod a consumer writes becomes the Pod of the
same name, made and owned by the provider (Liqo's ShadowPod controller, DESIGN §4.6).

A consumer never creates Pods here: it asks with ShadowPods, which the provider's webhook admits
within its Quota and rules and this controller turns into Pods, which the API server's own Pod
Security admission checks again. A consumer's ShadowPod gets a Pod only if its Quota's ledger
holds its admission (the webhook's reservation, naming its uid): one that bypassed the webhook
(a webhook configuration missing or failing open while the webhook was down, a restore from a
backup) gets none, and says why. Whose a ShadowPod is comes from its namespace, which the provider
made for one consumer, not from the webhook's stamp alone: one that bypassed the stamping too
carries none, and is still the consumer's. Once found, the ShadowPod is marked accounted
(condition QuotaReserved), for the recount and for later.

The controller keeps the offloaded workload on its own while the consumer is away: a Pod deleted or
evicted is made again from its ShadowPod at once; a Pod that finished by its own containers stays
finished and is never run again (Liqo re-runs them, liqo#1804). A ShadowPod being deleted keeps its
finalizer until its Pod is gone, deleted with the grace period the consumer asked for. A Pod of
that name that this controller did not make is never touched, unless it is a plain pod an older vk
offloaded for the same consumer and node, which is adopted as it runs.

A consumer's ShadowPod whose creator has no Quota any more (its ResourceSlice deleted) is
deleted `UNANSWERED_GRACE_SECONDS` after the Quota went: its virtual kubelet, draining its node,
deletes it itself meanwhile (its pods evicted at home and made elsewhere). Past that it would run
on counted in no Quota, and a consumer deleting slices and making new ones would hold ever more.

A ShadowPod whose `spec.pod` is no pod spec (`vk.api.podspec`: the webhook refuses these, but
not while it is down) gets no Pod, or keeps the one it has as it was made, and says why in its
status until it changes; so does a change of it that the API server refuses on the live Pod.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import structlog

from vk.api.constants import (
    CREATOR_USER_LABEL,
    DEFAULT_SHADOW_POD_WORKERS,
    DELETION_GRACE_ANNOTATION,
    DESTINATION_LABEL,
    NODENAME_LABEL,
    ORIGIN_LABEL,
    REMOTE_CLUSTER_ID_LABEL,
    SHADOW_POD_FINALIZER,
    SHADOW_POD_NAME_TAKEN,
    SHADOW_POD_NOT_RESERVED,
    SHADOW_POD_OWNED_LABEL,
    consumer_of_namespace,
)
from vk.api.jsondata import is_integer
from vk.api.offloading import Quota, ShadowPod, ShadowPodConditionType
from vk.api.podspec import describe_problems, pod_spec_problems
from vk.api.timestamps import kube_time
from vk.api.usage import holds_reservation, is_accounted
from vk.controllers.provider_caches import (
    CREATION_SPEC_LEFT,
    every_shadow_pod,
    pods_made_of_shadow_pods,
)
from vk.controllers.provider_quotas import (
    CREATOR_INDEX,
    quota_creator_index,
    shadow_pod_creator_index,
)
from vk.kube.client import (
    JSON,
    AlreadyExists,
    ApiError,
    KubeClient,
    NotFound,
    delete_options,
    resource_path,
)
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.informer import (
    DELETED,
    Informer,
    namespace_of_key,
    object_key,
    shared_informer,
    split_key,
)
from vk.kube.workqueue import TokenBuckets
from vk.reflection.forge.pods import (
    consumer_grace_period,
    controller_uid,
    is_evicted,
    live_pod_patch,
    replaces_containers,
    shadow_pod_finished,
)
from vk.reflection.generic import RecentWrites
from vk.reflection.workload.pods import patch_on_whole, pod_path, shadow_pod_path

log = structlog.get_logger("vk.controllers.provider_shadowpods")

# Why a ShadowPod has no Pod (the PodCreated condition's reasons).
REASON_CREATED = "PodCreated"
REASON_POD_SECURITY = "PodSecurity"
REASON_FORBIDDEN = "Forbidden"
REASON_INVALID = "Invalid"
REASON_NAME_TAKEN = SHADOW_POD_NAME_TAKEN
# Why a consumer's ShadowPod has no Pod because no ledger holds it (both conditions' reason).
REASON_NOT_RESERVED = SHADOW_POD_NOT_RESERVED
REASON_RESERVED = "Reserved"
# The API server's answers that another try of the same Pod would get again.
REFUSALS = {400: "BadRequest", 403: REASON_FORBIDDEN, 422: REASON_INVALID}
# A refused Pod is tried again after this long: the namespace's level or the spec may change.
REFUSED_RETRY = 30.0
# How long a deleted ShadowPod's Pod may still be there before it is looked at again.
WAIT_FOR_GARBAGE_COLLECTION = 2.0
# How often a consumer's changes of a ShadowPod are patched onto its Pod: up to POD_PATCH_BURST
# at once, then one every POD_PATCH_INTERVAL_SECONDS, as the ShadowPod says then. A consumer
# writes its ShadowPods as it likes; changing one on and on (its labels, say) had this
# controller patch the Pod as often, and the Pod's every watcher (its kubelet among them) take
# in each change.
POD_PATCH_BURST = 10
POD_PATCH_INTERVAL_SECONDS = 2.0
# How long a consumer's ShadowPods outlive their creator's Quota (its slice deleted): its
# virtual kubelet's drain, which the unpeering waits 300 s for, with room to spare.
UNANSWERED_GRACE_SECONDS = 600.0


# --- Pure decisions ------------------------------------------------------------------------


def forge_pod_of(shadow_pod: Mapping[str, Any]) -> JSON:
    """The Pod a ShadowPod asks for: same name and namespace, its labels (and the mark of this
    controller's Pods) and annotations, its `spec.pod`, and the ShadowPod as controller owner,
    so that the Pod goes when the ShadowPod does, whatever happens to this controller."""
    metadata = shadow_pod.get("metadata") or {}
    labels = {**(metadata.get("labels") or {}), SHADOW_POD_OWNED_LABEL: "true"}
    annotations = {
        key: value
        for key, value in (metadata.get("annotations") or {}).items()
        if key != DELETION_GRACE_ANNOTATION
    }
    pod_metadata: JSON = {
        "name": metadata["name"],
        "namespace": metadata["namespace"],
        "labels": labels,
        "ownerReferences": [
            {
                "apiVersion": ShadowPod.group_version(),
                "kind": ShadowPod.KIND,
                "name": metadata["name"],
                "uid": metadata["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
    }
    if annotations:
        pod_metadata["annotations"] = annotations
    spec = dict((shadow_pod.get("spec") or {}).get("pod") or {})
    return {"apiVersion": "v1", "kind": "Pod", "metadata": pod_metadata, "spec": spec}


def unreadable_spec(shadow_pod: Mapping[str, Any]) -> str | None:
    """What is wrong with the ShadowPod's `spec.pod` if it is no pod spec the controller can
    read (`pod_spec_problems`: the webhook refuses these, unless it was down); else None."""
    problems = pod_spec_problems((shadow_pod.get("spec") or {}).get("pod"))
    if not problems:
        return None
    return f"spec.pod cannot be read as a pod spec: {describe_problems(problems)}"


def is_adoptable(pod: Mapping[str, Any], shadow_pod: Mapping[str, Any]) -> bool:
    """Whether `pod` is the plain pod an older vk offloaded for this ShadowPod's consumer and
    node: no controller of its own, the same ownership labels. Adopting it keeps it running
    (an upgrade in place restarts nothing)."""
    metadata = pod.get("metadata") or {}
    if any(owner.get("controller") for owner in metadata.get("ownerReferences") or []):
        return False
    pod_labels = metadata.get("labels") or {}
    shadow_labels = (shadow_pod.get("metadata") or {}).get("labels") or {}
    keys = (ORIGIN_LABEL, DESTINATION_LABEL, NODENAME_LABEL)
    return all(shadow_labels.get(key) and pod_labels.get(key) == shadow_labels[key] for key in keys)


def forge_adoption_patch(pod: Mapping[str, Any], shadow_pod: Mapping[str, Any]) -> JSON:
    """The merge patch making `pod` this ShadowPod's, guarded by the pod's resourceVersion."""
    owner = forge_pod_of(shadow_pod)["metadata"]["ownerReferences"]
    metadata = pod.get("metadata") or {}
    return {
        "metadata": {
            "labels": {SHADOW_POD_OWNED_LABEL: "true"},
            "ownerReferences": [*(metadata.get("ownerReferences") or []), *owner],
            "resourceVersion": metadata.get("resourceVersion"),
        }
    }


def shortens_deletion(pod: Mapping[str, Any], grace: int | None) -> bool:
    """Whether deleting `pod` again with `grace` shortens its deletion: the consumer deleted its
    pod a second time with a shorter grace period, or at once (`kubectl delete --force`), and
    the API server shortens a Pod's deletion when deleted again, as the kubelet honours it."""
    current = (pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
    return grace is not None and is_integer(current) and grace < current


def refusal_reason(error: ApiError) -> str:
    """The PodCreated reason for the API server's refusal of a Pod."""
    if error.status == 403 and "PodSecurity" in error.message:
        return REASON_POD_SECURITY
    return REFUSALS.get(error.status, error.reason or "Refused")


def consumer_of(shadow_pod: Mapping[str, Any]) -> str | None:
    """The consumer identity the webhook stamped on the ShadowPod (its creator), if any: the
    provider's own ShadowPods carry none, and no Quota limits them."""
    labels = (shadow_pod.get("metadata") or {}).get("labels") or {}
    creator = labels.get(CREATOR_USER_LABEL)
    return str(creator) if creator else None


def not_reserved_message(shadow_pod: Mapping[str, Any], quotas: int) -> str:
    """Why a consumer's ShadowPod no ledger holds gets no Pod, and what to do."""
    metadata = shadow_pod.get("metadata") or {}
    if consumer_of(shadow_pod) is None:
        return (
            "this ShadowPod, in a namespace the provider made for a consumer, carries no creator "
            "stamp: it passed none of the provider's ShadowPod webhooks (were they down with "
            "failurePolicy Ignore, or not installed?), or was written by someone other than the "
            "consumer, and only the consumer's, admitted within its Quota, run there. No Pod is "
            "made for it; delete it, and have the consumer create it through the webhooks"
        )
    if not quotas:
        return (
            f"no Quota of this provider counts the pods of {consumer_of(shadow_pod)!r}, so no "
            "Pod is made for this ShadowPod: the provider grants this consumer nothing"
        )
    return (
        f"the Quota's ledger holds no admission of this ShadowPod (uid {metadata.get('uid')}): "
        "it did not pass the provider's ShadowPod webhook (is its ValidatingWebhookConfiguration "
        "installed?), so no Pod is made for it; delete it, and create it again through the webhook"
    )


def _condition(
    current: Mapping[str, Any],
    kind: ShadowPodConditionType,
    holds: bool,
    reason: str,
    message: str,
) -> JSON:
    """A condition of the status; its transition time moves only when its status does."""
    previous: Mapping[str, Any] = next(
        (c for c in current.get("conditions") or [] if c.get("type") == kind), {}
    )
    status = "True" if holds else "False"
    return {
        "type": kind.value,
        "status": status,
        "reason": reason,
        "message": message,
        "lastTransitionTime": previous.get("lastTransitionTime")
        if previous.get("status") == status
        else kube_time(datetime.now(UTC)),
    }


def forge_shadow_pod_status(
    current: Mapping[str, Any],
    phase: str | None,
    created: bool,
    reason: str,
    message: str,
    *,
    reserved: bool | None,
) -> JSON:
    """The ShadowPod's status: the Pod's phase (or the one recorded, when there is no Pod), the
    PodCreated condition, and for a consumer's ShadowPod (`reserved` not None) QuotaReserved."""
    status: JSON = {}
    recorded = current.get("phase")
    if phase or recorded:
        status["phase"] = phase or recorded
    conditions = [_condition(current, ShadowPodConditionType.POD_CREATED, created, reason, message)]
    if reserved is not None:
        conditions.append(
            _condition(
                current,
                ShadowPodConditionType.QUOTA_RESERVED,
                reserved,
                REASON_RESERVED if reserved else REASON_NOT_RESERVED,
                "the Quota's ledger counts it" if reserved else message,
            )
        )
    status["conditions"] = conditions
    return status


def status_differs(current: Mapping[str, Any], desired: Mapping[str, Any]) -> bool:
    """Whether writing `desired` changes anything but the transition time."""

    def essence(status: Mapping[str, Any]) -> tuple[Any, ...]:
        conditions = tuple(
            (c.get("type"), c.get("status"), c.get("reason"), c.get("message") or "")
            for c in status.get("conditions") or []
        )
        return status.get("phase"), conditions

    return essence(current) != essence(desired)


# --- The controller --------------------------------------------------------------------------


class ProviderShadowPods(Reconciler):
    """Keys are the ShadowPods' `namespace/name`, which are their Pods' too."""

    name = "provider-shadowpods"

    def __init__(
        self,
        client: KubeClient,
        quotas: Informer,
        *,
        workers: int = DEFAULT_SHADOW_POD_WORKERS,
        unanswered_grace: float = UNANSWERED_GRACE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`quotas` is the Quota informer the recount runs (indexed by CREATOR_INDEX)."""
        self.client = client
        self.quotas = quotas
        self.shadow_pods = every_shadow_pod(
            client, indexers={CREATOR_INDEX: shadow_pod_creator_index}
        )
        self.unanswered_grace = unanswered_grace
        self.clock = clock
        # By creator stamp: when its Quota was found gone (by this process).
        self._unanswered_since: dict[str, float] = {}
        self.pods = pods_made_of_shadow_pods(client)
        # The namespaces the provider made for its consumers (tenant and twin namespaces alike
        # name the consumer): whatever ShadowPod is in one is that consumer's.
        self.consumer_namespaces = shared_informer(
            client, "v1", "namespaces", label_selector=REMOTE_CLUSTER_ID_LABEL
        )
        # The statuses this controller wrote, until the cache shows them: the Pod's next event
        # (scheduled, say) often comes first, and a status judged on the cache's older copy
        # was written again, its transition time moved to a transition that never was.
        self.recent = RecentWrites()
        self.pod_patch_pace: TokenBuckets[str] = TokenBuckets(
            1 / POD_PATCH_INTERVAL_SECONDS, POD_PATCH_BURST
        )
        self.controller = Controller(self, workers=workers, group=self._consumer_of)

    async def run(self) -> None:
        enqueue = self.controller.enqueue
        self.shadow_pods.add_handler(self._on_shadow_pod)
        self.pods.add_handler(lambda _, obj, __: enqueue(object_key(obj)))
        self.quotas.add_handler(self._on_quota)
        await run_with_informers(
            self.controller,
            self.shadow_pods,
            self.pods,
            self.consumer_namespaces,
            shared=(self.quotas,),
        )

    def _consumer_of(self, key: str) -> str:
        """The consumer whose namespace a key is in: each consumer's ShadowPods are served in
        turn, however many another has queued or failing (the work queue's groups)."""
        namespace = namespace_of_key(key)
        return consumer_of_namespace(self.consumer_namespaces.store.get(namespace)) or namespace

    def _on_shadow_pod(self, event: str, shadow: JSON, _: JSON | None) -> None:
        key = object_key(shadow)
        self.recent.observe(key, event, shadow)
        self.controller.enqueue(key)
        if event == DELETED:
            for stamp in shadow_pod_creator_index(shadow):
                if not self.shadow_pods.store.count_by_index(CREATOR_INDEX, stamp):
                    self._unanswered_since.pop(stamp, None)  # its last one gone

    def _on_quota(self, event: str, quota: JSON, _: JSON | None) -> None:
        """A creator's Quota gone: its ShadowPods are looked at again once their grace is up;
        made again (a slice of the same name), they are its again."""
        for stamp in quota_creator_index(quota):
            if event != DELETED:
                self._unanswered_since.pop(stamp, None)
            elif not self.quotas.store.count_by_index(CREATOR_INDEX, stamp):
                self._unanswered_since.setdefault(stamp, self.clock())
                for shadow in self.shadow_pods.store.by_index(CREATOR_INDEX, stamp):
                    self.controller.queue.add_after(object_key(shadow), self.unanswered_grace)

    def _unanswered_for(self, shadow: JSON) -> float | None:
        """How long a consumer's ShadowPod has been without its creator's Quota (None: it
        has one, or is the provider's own)."""
        stamp = consumer_of(shadow)
        if stamp is None or self._quotas_of(shadow):
            return None
        now = self.clock()
        return now - self._unanswered_since.setdefault(stamp, now)

    async def reconcile(self, key: str) -> Result:
        cached = self.shadow_pods.store.get(key)
        # Our last write stands in only for a cached copy it is newer than: with none cached,
        # the ShadowPod was deleted (its deletion may come before our write's answer), and a
        # copy of it would get a Pod made for a ShadowPod that is gone.
        shadow = None if cached is None else self.recent.current(key, cached)
        if shadow is None:
            return Result()  # its Pod goes with it: the garbage collector follows the owner
        namespace, name = split_key(key)
        assert namespace is not None
        metadata = shadow["metadata"]
        pod = self.pods.store.get(key)
        if pod is not None and controller_uid(pod) != metadata["uid"]:
            # The Pod of an earlier ShadowPod of that name, which the garbage collector removes.
            return Result(requeue_after=WAIT_FOR_GARBAGE_COLLECTION)
        if metadata.get("deletionTimestamp"):
            return await self._finish(shadow, pod, namespace, name)
        if (unanswered := self._unanswered_for(shadow)) is not None:
            if unanswered >= self.unanswered_grace:
                log.warning(
                    "deleting a shadow pod whose creator's slice is gone",
                    namespace=namespace,
                    pod=name,
                    creator=consumer_of(shadow),
                    seconds=round(unanswered),
                )
                with contextlib.suppress(NotFound):
                    await self.client.delete(
                        shadow_pod_path(namespace, name), body=delete_options(uid=metadata["uid"])
                    )
                return Result()  # its deletion brings us back
            self.controller.queue.add_after(key, self.unanswered_grace - unanswered)
        await self.client.set_finalizer(
            shadow_pod_path(namespace, name), shadow, SHADOW_POD_FINALIZER, present=True
        )
        if pod is None:
            if shadow_pod_finished(shadow):
                return Result()  # finished by its own containers: never run again
            if not await self._in_ledger(shadow, key):
                quotas = self._quotas_of(shadow)
                message = not_reserved_message(shadow, len(quotas))
                log.warning("no ledger holds the shadow pod", namespace=namespace, pod=name)
                await self._write_status(shadow, None, False, REASON_NOT_RESERVED, message)
                # A Quota made after the ShadowPod holds no reservation of it: only a missing
                # Quota (a cache behind the API server) is worth another look.
                return Result(requeue_after=None if quotas else REFUSED_RETRY)
            return await self._create(shadow, namespace, name)
        if pod["metadata"].get("deletionTimestamp"):
            # Deleted by someone, or by us for an eviction (not again: each deletion is one
            # more event of it for every watcher): made again once it is gone.
            return Result()
        if is_evicted(pod) and not shadow_pod_finished(shadow):
            # Put out, not finished: it runs again, as a ReplicaSet would make a new one.
            log.info("pod evicted, making it again", namespace=namespace, pod=name)
            await self._delete_pod(pod, None)
            return Result()  # its deletion brings us back
        return await self._keep_in_line(shadow, pod, namespace, name)

    async def _keep_in_line(self, shadow: JSON, pod: JSON, namespace: str, name: str) -> Result:
        """The Pod, made of the ShadowPod, patched with what changed of it that a live Pod may
        change, and the Pod's phase written on the ShadowPod."""
        phase = (pod.get("status") or {}).get("phase")
        desired = forge_pod_of(shadow)
        unreadable = unreadable_spec(shadow)
        if unreadable is not None:
            # Changed past the webhook (down) into a spec that is no pod's: the Pod runs on as
            # it was made, its labels and annotations alone kept in line.
            desired["spec"] = {}
        patch = live_pod_patch(desired, pod)
        if patch is not None and (wait := self.pod_patch_pace[f"{namespace}/{name}"].take()) > 0:
            return Result(requeue_after=wait)  # patched then, as the ShadowPod is then
        try:
            if replaces_containers(patch):
                # The cache keeps only the containers' names and images: a new image is patched
                # onto the whole list, read afresh (rare: a pod's image changed in place).
                patch = await patch_on_whole(
                    self.client,
                    pod_path(namespace, name),
                    lambda whole: live_pod_patch(desired, whole),
                )
            if patch is not None:
                await self.client.merge_patch(pod_path(namespace, name), patch)
        except NotFound:
            return Result()  # gone meanwhile: its deletion brings us back
        except ApiError as error:
            if error.status not in REFUSALS:
                raise
            # A change no live Pod may take (a longer deadline, an image the API server
            # refuses), which each try would get refused again: said, not retried with back-off.
            log.info("pod patch refused", namespace=namespace, pod=name, error=error.message[:500])
            message = (
                f"the Pod runs on as it was, the API server refusing this change: {error.message}"
            )
            await self._write_status(shadow, phase, True, refusal_reason(error), message)
            return Result(requeue_after=REFUSED_RETRY)
        if unreadable is not None:
            message = (
                f"{unreadable}. The Pod runs on as it was made, without the ShadowPod's changes"
            )
            await self._write_status(shadow, phase, True, REASON_INVALID, message)
        else:
            await self._write_status(shadow, phase, True, REASON_CREATED, "")
        return Result()

    def _quotas_of(self, shadow: JSON) -> list[JSON]:
        consumer = consumer_of(shadow)
        return [] if consumer is None else self.quotas.store.by_index(CREATOR_INDEX, consumer)

    async def _is_consumers(self, shadow: JSON) -> bool:
        """Whether the ShadowPod is a consumer's: stamped by the webhook, or in a namespace
        the provider made for a consumer, stamp or not (read from the API server when the
        cache has not seen it: an unstamped ShadowPod is the provider's own only if its
        namespace surely is)."""
        if consumer_of(shadow) is not None:
            return True
        namespace = shadow["metadata"]["namespace"]
        if self.consumer_namespaces.store.get(namespace) is not None:
            return True
        try:
            fresh = await self.client.get(resource_path("v1", "namespaces", name=namespace))
        except NotFound:
            return False
        return REMOTE_CLUSTER_ID_LABEL in (fresh["metadata"].get("labels") or {})

    async def _in_ledger(self, shadow: JSON, key: str) -> bool:
        """Whether the ShadowPod may get a Pod: the provider's own (neither stamped nor in a
        consumer's namespace), a stamped one accounted already, or one whose reservation a
        Quota of its consumer holds (read from the API server when the cache has not seen it
        yet: the webhook writes it before the ShadowPod is stored, but the two watches are not
        ordered). A consumer's ShadowPod without a stamp bypassed the webhooks: never."""
        if consumer_of(shadow) is None:
            return not await self._is_consumers(shadow)
        if is_accounted(shadow):
            return True
        uid = shadow["metadata"]["uid"]
        for cached in self._quotas_of(shadow):
            if holds_reservation(cached.get("status") or {}, key, uid):
                return True
            metadata = cached["metadata"]
            path = resource_path(
                Quota.group_version(),
                Quota.PLURAL,
                namespace=metadata.get("namespace"),
                name=metadata["name"],
            )
            try:
                fresh = await self.client.get(path)
            except NotFound:
                continue
            if holds_reservation(fresh.get("status") or {}, key, uid):
                return True
        return False

    async def _create(self, shadow: JSON, namespace: str, name: str) -> Result:
        if shadow.get(CREATION_SPEC_LEFT):
            # Its Pod was made once, and the cache keeps no more of it than keeping that Pod
            # in line reads: made again (deleted, evicted) of the ShadowPod read afresh.
            try:
                shadow = await self.client.get(shadow_pod_path(namespace, name))
            except NotFound:
                return Result()  # gone meanwhile: its deletion brings us back
        if (unreadable := unreadable_spec(shadow)) is not None:
            log.info(
                "spec.pod is no pod spec", namespace=namespace, pod=name, error=unreadable[:500]
            )
            message = f"{unreadable}. No Pod is made of it: delete it, and create it corrected"
            await self._write_status(shadow, None, False, REASON_INVALID, message)
            return Result()  # only a change of the ShadowPod mends it, and brings it back
        try:
            await self.client.create(
                resource_path("v1", "pods", namespace=namespace), forge_pod_of(shadow)
            )
        except AlreadyExists:
            return await self._name_taken(shadow, namespace, name)
        except ApiError as error:
            if error.status not in REFUSALS:
                raise
            log.info("pod refused", namespace=namespace, pod=name, error=error.message[:500])
            await self._write_status(shadow, None, False, refusal_reason(error), error.message)
            return Result(requeue_after=REFUSED_RETRY)
        return Result()  # the Pod's event brings us back, to write the status

    async def _name_taken(self, shadow: JSON, namespace: str, name: str) -> Result:
        """A Pod of that name that this controller did not make: adopted if an older vk
        offloaded it for this ShadowPod's consumer and node, else left alone and reported."""
        try:
            existing = await self.client.get(pod_path(namespace, name))
        except NotFound:
            return Result(requeue_after=0.5)  # gone meanwhile: try again
        if controller_uid(existing) == shadow["metadata"]["uid"]:
            return Result()  # ours: the informer has not caught up yet
        if is_adoptable(existing, shadow):
            log.info("adopting a plain offloaded pod", namespace=namespace, pod=name)
            await self.client.merge_patch(
                pod_path(namespace, name), forge_adoption_patch(existing, shadow)
            )
            return Result()
        await self._write_status(
            shadow,
            None,
            False,
            REASON_NAME_TAKEN,
            f"a Pod {namespace}/{name} that this ShadowPod does not own exists: it is left "
            "alone; remove it, or offload the pod under another name",
        )
        return Result(requeue_after=REFUSED_RETRY)

    async def _finish(self, shadow: JSON, pod: JSON | None, namespace: str, name: str) -> Result:
        """The ShadowPod is being deleted: its Pod first, with the consumer's grace period,
        then the finalizer, so the pod counts until it is gone."""
        if SHADOW_POD_FINALIZER not in (shadow["metadata"].get("finalizers") or []):
            return Result()
        if pod is not None:
            grace = consumer_grace_period(shadow)
            if not pod["metadata"].get("deletionTimestamp") or shortens_deletion(pod, grace):
                await self._delete_pod(pod, grace)
            return Result()  # the Pod's deletion brings us back
        with contextlib.suppress(NotFound):
            await self.client.set_finalizer(
                shadow_pod_path(namespace, name), shadow, SHADOW_POD_FINALIZER, present=False
            )
        return Result()

    async def _delete_pod(self, pod: JSON, grace: int | None) -> None:
        metadata = pod["metadata"]
        options = delete_options(uid=metadata["uid"], grace_period=grace)
        with contextlib.suppress(NotFound):
            await self.client.delete(
                pod_path(metadata["namespace"], metadata["name"]), body=options
            )

    async def _write_status(
        self, shadow: JSON, phase: str | None, created: bool, reason: str, message: str
    ) -> None:
        current = shadow.get("status") or {}
        # A consumer's ShadowPod gets here accounted (its Pod made or tried), or refused for
        # want of a reservation.
        reserved = reason != REASON_NOT_RESERVED if await self._is_consumers(shadow) else None
        desired = forge_shadow_pod_status(
            current, phase, created, reason, message, reserved=reserved
        )
        if not status_differs(current, desired):
            return
        metadata = shadow["metadata"]
        with contextlib.suppress(NotFound):
            written = await self.client.merge_patch(
                shadow_pod_path(metadata["namespace"], metadata["name"], "status"),
                {"status": desired},
            )
            self.recent.wrote(object_key(written), written)
