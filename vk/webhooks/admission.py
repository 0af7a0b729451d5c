"""AdmissionReview in, AdmissionReview out: the handlers of `vk webhook`, over the caches.

Provider: `ShadowPodAdmission.mutate` stamps a consumer identity's new ShadowPod with its creator
and the finalizer that keeps it until its Pod is gone; `validate` admits it only in a twin
namespace of that consumer, with a `spec.pod` of the shape all these rules read
(`vk.api.podspec`), within the provider's scheduling rules (`vk.webhooks.shadowpods`),
its Pod Security level (`vk.webhooks.podsecurity`, the twin namespace's label) and the Quota
(`vk.webhooks.quota`), and keeps the stamp immutable on updates. Consumer: `OffloadingAdmission`
places the pods of offloaded namespaces and validates NamespaceOffloadings
(`vk.webhooks.offloading`). All read the informers' caches, and a ShadowPod's admission also
reads and writes its Quota's ledger in the API server (`vk.api.usage`): a reservation written
with a resourceVersion precondition before it admits, retried on conflict, so that any number
of webhook replicas admit no more than the Quota. Until the caches hold a first complete list
they deny what they cannot judge, asking to retry.
"""

from __future__ import annotations

import asyncio
import base64
import json
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

import structlog
from pydantic import ValidationError

from vk.api.authentication import ResourceSlice
from vk.api.constants import (
    NAMESPACE_OFFLOADING_NAME,
    POD_SECURITY_ENFORCE_LABEL,
    REPLICATED_LABEL,
    SHADOW_POD_FINALIZER,
    TENANT_MAX_RESOURCE_SLICES_LABEL,
    VK_NAMESPACE,
    tenant_limit,
)
from vk.api.jsondata import as_mapping, json_size
from vk.api.offloading import NamespaceMap, Quota, system_namespace_problem
from vk.api.podspec import describe_problems, pod_spec_problems
from vk.api.quantity import InvalidQuantity
from vk.api.usage import Ledger, Resources, pod_usage
from vk.kube.client import Conflict, KubeClient, NotFound, resource_path
from vk.kube.informer import EventHandler, Informer, Store
from vk.reflection.forge.pods import shadow_pod_as_pod
from vk.reflection.generic import rv_newer
from vk.webhooks.offloading import review_namespace_offloading, review_offloading_pod
from vk.webhooks.podsecurity import parse_level, pod_security_message, pod_security_violations
from vk.webhooks.quota import (
    ALLOWED,
    JSON,
    Decision,
    deny,
    forge_creator_patch,
    is_tenant_identity,
    review_creator_stamp,
    review_creator_update,
    review_pod,
    review_tenant_update,
)
from vk.webhooks.shadowpods import TenantPodPolicy, review_namespace, review_scheduling
from vk.webhooks.tenancy import (
    MAX_NAMESPACE_MAPS,
    RESOURCE_SLICES,
    TENANT_OBJECT_KINDS,
    TenantObjectKind,
    control_plane_consumer,
    held_resource_slices,
    is_replica,
    review_tenant_object,
)

log = structlog.get_logger("vk.webhooks.admission")

ADMISSION_API = "admission.k8s.io/v1"
USER_INDEX = "user"
NOT_READY_OFFLOADING = (
    "vk's webhook is starting and has not read the NamespaceOffloadings yet: retry in a few seconds"
)
NOT_READY = (
    "the provider's ShadowPod webhook is starting and has not read the Quotas and namespaces "
    "yet: retry in a few seconds"
)
# The API server gives a created object its uid before the validating webhooks see it.
NO_UID = (
    "the ShadowPod under review has no metadata.uid, which the API server sets before "
    "validating admission: the review is not the API server's"
)
# Writers of one Quota's ledger racing: each conflict is another admission or a recount landing
# first; past this many in one review, the creator is asked to retry.
MAX_LEDGER_CONFLICTS = 25


class LedgerClient(Protocol):
    """What the webhook needs of the API server for a Quota's ledger (a KubeClient)."""

    async def get(self, path: str, params: dict[str, str] | None = None) -> JSON: ...

    async def replace(self, path: str, body: JSON) -> JSON: ...


def quota_as_read(quota: JSON) -> JSON:
    """What the webhook's Quota cache keeps: which Quota it is and whom it limits. Its ledger
    (the status) is judged as the API server has it, read afresh or as this process last wrote
    it (`ShadowPodAdmission._ledger_base`); cached, it was decoded and compacted again at every
    write of it, several a second in a burst, with every reservation not counted yet."""
    return {key: quota[key] for key in ("apiVersion", "kind", "metadata", "spec") if key in quota}


def quota_user_index(quota: JSON) -> list[str]:
    """Quotas by the user they limit (the Quota informer's index)."""
    user = (quota.get("spec") or {}).get("user")
    return [str(user)] if user else []


def quota_informer(client: KubeClient) -> Informer:
    """The webhook's Quota cache: every Quota, by the user it limits (USER_INDEX), each kept
    as `quota_as_read`: never its ledger."""
    return Informer(
        client,
        Quota.group_version(),
        Quota.PLURAL,
        indexers={USER_INDEX: quota_user_index},
        keep=quota_as_read,
    )


@dataclass(frozen=True)
class Answer:
    decision: Decision
    patch: list[JSON] | None = None
    warnings: tuple[str, ...] = ()
    # Of a denial: 403, or 503 for one to retry as it is (the API server passes it on).
    code: int = 403


def forge_review_response(uid: str, answer: Answer) -> JSON:
    """The AdmissionReview sent back: the request's uid, the verdict (a denial as a Status
    whose code and message the API server passes on), and the JSONPatch if any."""
    response: JSON = {"uid": uid, "allowed": answer.decision.allowed}
    if not answer.decision.allowed:
        response["status"] = {
            "code": answer.code,
            "reason": "Forbidden" if answer.code == 403 else "ServiceUnavailable",
            "message": answer.decision.message,
        }
    if answer.warnings:
        response["warnings"] = list(answer.warnings)
    if answer.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(answer.patch).encode()).decode()
    return {"apiVersion": ADMISSION_API, "kind": "AdmissionReview", "response": response}


def forge_finalizer_patch(obj: Mapping[str, Any], finalizer: str) -> list[JSON]:
    """The JSONPatch adding `finalizer` to `obj` (empty when it has it)."""
    finalizers = (obj.get("metadata") or {}).get("finalizers")
    if not finalizers:
        return [{"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}]
    if finalizer in finalizers:
        return []
    return [{"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}]


def review_pod_spec(pod: Mapping[str, Any]) -> Decision:
    """Whether the spec of `pod` (a ShadowPod's `spec.pod`, which the API server stores
    unchecked) has the shape the provider's rules and its Quota read it in."""
    problems = pod_spec_problems(pod.get("spec"))
    if not problems:
        return ALLOWED
    return deny(f"spec.pod cannot be read as a pod spec: {describe_problems(problems)}")


def review_pod_security(pod: Mapping[str, Any], namespace_labels: Mapping[str, str]) -> Decision:
    """Pod Security admission's verdict on `pod` in a namespace with `namespace_labels`, given
    on the ShadowPod before any Pod exists; the namespace's label stays the enforcement."""
    level_label = namespace_labels.get(POD_SECURITY_ENFORCE_LABEL)
    if not level_label:
        return ALLOWED
    try:
        level = parse_level(level_label)
    except ValueError:
        return ALLOWED  # the API server judges a label it does not know; so does it here
    metadata = pod.get("metadata") or {}
    violations = pod_security_violations(
        pod.get("spec") or {}, level, metadata.get("annotations") or {}
    )
    return deny(pod_security_message(violations, level)) if violations else ALLOWED


def _object_key(request: Mapping[str, Any], obj: Mapping[str, Any]) -> str:
    """`namespace/name`; an object named by generateName has no name yet: the request's uid
    stands for it (its reservation then lapses by age, never seen in the cache)."""
    metadata = obj.get("metadata") or {}
    namespace = request.get("namespace") or metadata.get("namespace") or ""
    name = metadata.get("name") or request.get("name")
    return f"{namespace}/{name or (metadata.get('generateName') or '') + request.get('uid', '')}"


def quota_path(quota: Mapping[str, Any], subresource: str | None = None) -> str:
    metadata = quota["metadata"]
    return resource_path(
        Quota.group_version(),
        Quota.PLURAL,
        namespace=metadata.get("namespace"),
        name=metadata["name"],
        subresource=subresource,
    )


class ShadowPodAdmission:
    """The ShadowPod handlers of one `vk webhook` process. `quotas` is the Quota cache (indexed
    by USER_INDEX, to find a user's Quotas), `namespaces` the cache of the namespaces made for
    consumers, `ledger` reads and writes the Quotas' ledgers, `synced()` whether the caches
    hold a complete list."""

    def __init__(
        self,
        quotas: Store,
        namespaces: Store,
        ledger: LedgerClient,
        *,
        enforcement_enabled: bool,
        synced: Callable[[], bool],
        policy: TenantPodPolicy | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.quotas = quotas
        self.namespaces = namespaces
        self.ledger = ledger
        self.enforcement_enabled = enforcement_enabled
        self.synced = synced
        self.policy = policy or TenantPodPolicy()
        self.clock = clock
        # Per Quota (its path): the reviews waiting for its ledger, and the task writing it.
        self._pending: dict[str, list[PendingReservation]] = {}
        self._writers: dict[str, asyncio.Task[None]] = {}
        # Per Quota (its path): the Quota as this process last wrote its ledger (the API
        # server's answer), the base of its next write: one round trip per batch, not a read
        # and a write (`_ledger_base`). One entry per Quota written, taken at each use.
        self._written: dict[str, JSON] = {}

    def _requester(self, request: Mapping[str, Any]) -> tuple[str, list[str], bool, list[JSON]]:
        """(user, groups, whether it is a consumer identity, the Quotas naming it)."""
        user_info = request.get("userInfo") or {}
        user = str(user_info.get("username", ""))
        groups = [str(g) for g in user_info.get("groups") or []]
        quotas = sorted(
            self.quotas.by_index(USER_INDEX, user),
            key=lambda q: (q["metadata"].get("namespace", ""), q["metadata"]["name"]),
        )
        return user, groups, is_tenant_identity(groups, bool(quotas)), quotas

    def mutate(self, request: Mapping[str, Any]) -> Answer:
        if request.get("operation") != "CREATE":
            return Answer(ALLOWED)
        if not self.synced():
            return Answer(deny(NOT_READY))
        user, _, tenant, _ = self._requester(request)
        if not tenant:
            return Answer(ALLOWED)  # not a consumer's: never touched
        shadow_pod = request.get("object") or {}
        patch = forge_creator_patch(shadow_pod, user) + forge_finalizer_patch(
            shadow_pod, SHADOW_POD_FINALIZER
        )
        return Answer(ALLOWED, patch or None)

    def _review_tenant_pod(
        self, request: Mapping[str, Any], pod: Mapping[str, Any], groups: list[str]
    ) -> Decision:
        """The provider's rules on a consumer's pod: its namespace, its spec's shape, its
        scheduling fields, its Pod Security level; the first that refuses it answers."""
        verdicts = self._tenant_pod_verdicts(request, pod, groups)
        return next((decision for decision in verdicts if not decision.allowed), ALLOWED)

    def _tenant_pod_verdicts(
        self, request: Mapping[str, Any], pod: Mapping[str, Any], groups: list[str]
    ) -> Iterator[Decision]:
        namespace = str(request.get("namespace") or "")
        found = self.namespaces.get(namespace)
        labels = None if found is None else (found["metadata"].get("labels") or {})
        yield review_namespace(namespace, labels, groups)
        # Each rule after this one, and the Quota's, reads the spec: only one of their shape.
        yield review_pod_spec(pod)
        yield review_scheduling(pod.get("spec") or {}, self.policy)
        yield review_pod_security(pod, labels or {})

    async def validate(self, request: Mapping[str, Any]) -> Answer:
        operation = request.get("operation")
        pod = shadow_pod_as_pod(request.get("object") or {})
        if operation == "UPDATE":
            old = shadow_pod_as_pod(request.get("oldObject") or {})
            decision = review_creator_update(old, pod)
            if not decision.allowed:
                return Answer(decision)
            if not self.synced():
                return Answer(deny(NOT_READY))
            _, groups, tenant, _ = self._requester(request)
            if not tenant:
                return Answer(ALLOWED)
            updated = review_tenant_update(old, pod, SHADOW_POD_FINALIZER)
            if not updated.allowed:
                return Answer(updated)
            return Answer(self._review_tenant_pod(request, pod, groups))
        if operation != "CREATE":
            return Answer(ALLOWED)
        if not self.synced():
            return Answer(deny(NOT_READY))
        user, groups, tenant, quotas = self._requester(request)
        stamped = review_creator_stamp(pod, user, tenant)
        if not stamped.allowed or not tenant:
            return Answer(stamped)
        rules = self._review_tenant_pod(request, pod, groups)
        if not rules.allowed:
            return Answer(rules)
        if not quotas:
            # Even with enforcement off: the provider makes Pods only for ShadowPods a ledger
            # holds, and a consumer with no Quota has none.
            return Answer(
                deny(
                    f"no Quota of this provider names {user!r}: it grants this identity "
                    "nothing (is its ResourceSlice accepted? has it been deleted?)"
                )
            )
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        if not uid:
            return Answer(deny(NO_UID))
        key = _object_key(request, pod)
        for cached in quotas:
            decision = await self._reserve(
                cached, key, uid, pod, dry_run=bool(request.get("dryRun"))
            )
            if not decision.allowed:
                return Answer(decision)
        return Answer(ALLOWED)

    async def _reserve(
        self, cached: JSON, key: str, uid: str, pod: Mapping[str, Any], *, dry_run: bool
    ) -> Decision:
        """Admits `pod` (the ShadowPod `key` of `uid`) within the Quota `cached` names, judged
        on its ledger as the API server has it, and reserves its usage there unless on a dry
        run (with enforcement off too: the ledger is what the provider's controller makes Pods
        for). The reviews waiting on one Quota are judged and written together, in the order
        they came, by one writer (a group commit: one ledger write for a burst, where one each
        raced into conflicts and capped the admission rate); what a write races with (another
        replica, a recount) is judged again on a conflict. A batch is judged on this process's
        last write of the ledger when nothing later is known, and its write, with that
        version's precondition, proves it current; a batch that writes nothing (denials, dry
        runs) is judged on a fresh read."""
        waiting = PendingReservation(
            key, uid, pod, dry_run, asyncio.get_running_loop().create_future()
        )
        path = quota_path(cached)
        self._pending.setdefault(path, []).append(waiting)
        if path not in self._writers:
            self._writers[path] = asyncio.create_task(self._write_ledger(cached, path))
        return await waiting.decision

    async def _write_ledger(self, cached: JSON, path: str) -> None:
        """Judges and writes the reservations waiting on the Quota at `path`, a batch at a time,
        until none wait."""
        try:
            while batch := self._pending.pop(path, []):
                try:
                    decisions = await self._reserve_together(cached, batch)
                except asyncio.CancelledError:
                    for waiting in batch:
                        waiting.decision.cancel()
                    raise
                except Exception as error:  # each review fails with it, as its own write would
                    for waiting in batch:
                        if not waiting.decision.done():
                            waiting.decision.set_exception(error)
                    continue
                for waiting, decision in zip(batch, decisions, strict=True):
                    if not waiting.decision.done():  # its review may have been abandoned
                        waiting.decision.set_result(decision)
        finally:
            del self._writers[path]
            for waiting in self._pending.pop(path, []):  # left only when cancelled
                waiting.decision.cancel()

    async def _reserve_together(
        self, cached: JSON, batch: list[PendingReservation]
    ) -> list[Decision]:
        name = f"{cached['metadata'].get('namespace')}/{cached['metadata']['name']}"
        gone = deny(f"the Quota {name} is gone: the provider grants this identity nothing")
        path = quota_path(cached)
        base = self._ledger_base(name, path)
        for _ in range(MAX_LEDGER_CONFLICTS):
            read = base is None
            try:
                current = base or await self.ledger.get(path)
            except NotFound:
                return [gone] * len(batch)
            base = None
            decisions, ledger = self._judge_batch(current, batch, name)
            if ledger is None:  # denials and dry runs: nothing to write
                if read:
                    return decisions
                continue  # judged on our own last write, which no write confirms: read it
            try:
                written = await self.ledger.replace(
                    quota_path(cached, "status"), {**current, "status": ledger.status()}
                )
            except Conflict:
                continue  # another replica's admission, or a recount, wrote first: judge again
            except NotFound:
                return [gone] * len(batch)
            self._written[path] = written
            return decisions
        return [
            deny(
                f"the Quota {name} is changing too fast to reserve this pod's share ("
                f"{MAX_LEDGER_CONFLICTS} conflicts): retry"
            )
        ] * len(batch)

    def _judge_batch(
        self, current: JSON, batch: list[PendingReservation], name: str
    ) -> tuple[list[Decision], Ledger | None]:
        """Each review of `batch` on the Quota `current` (named `name`), in turn, on the
        ledger with the reservations of those before it; and that ledger, if any reserved."""
        try:
            quota = Quota.model_validate(current)
        except ValidationError as error:
            message = f"the Quota {name} is not valid, ask the provider to fix it: {error}"
            return [deny(message)] * len(batch), None
        now = self.clock()
        try:
            ledger = Ledger(current.get("status") or {})
        except InvalidQuantity as error:
            return [unparsable(name, error)] * len(batch), None
        decisions: list[Decision] = []
        reserving = False
        for waiting in batch:
            decision, usage = self._judge(waiting, quota, ledger, name)
            if decision.allowed and not waiting.dry_run and usage is not None:
                ledger.reserve(waiting.key, waiting.uid, usage, now)
                reserving = True
            decisions.append(decision)
        return decisions, ledger if reserving else None

    def _ledger_base(self, key: str, path: str) -> JSON | None:
        """The Quota at `path` (its cache key `key`) as this process last wrote it, unless the
        cache shows a later version (a recount, another replica's write, an edit): a write on
        it carries its resourceVersion, so one that is stale all the same conflicts, and is
        judged again on a fresh read. None: read it."""
        written = self._written.pop(path, None)
        seen = self.quotas.get(key)
        if written is None or seen is None or rv_newer(seen, written):
            return None
        return written

    def _judge(
        self, waiting: PendingReservation, quota: Quota, ledger: Ledger, name: str
    ) -> tuple[Decision, Resources | None]:
        """One pod against the Quota, on the ledger with the reservations of the reviews before
        it; and its usage."""
        try:
            used = ledger.usage(excluding=waiting.key)
            decision = review_pod(
                waiting.pod, quota, used, enforcement_enabled=self.enforcement_enabled
            )
            return decision, pod_usage(waiting.pod)
        except InvalidQuantity as error:
            return unparsable(name, error), None


def unparsable(quota: str, error: InvalidQuantity) -> Decision:
    return deny(f"the pod or the Quota {quota} holds a quantity that does not parse: {error}")


@dataclass
class PendingReservation:
    """A ShadowPod's review waiting for its Quota's ledger writer."""

    key: str
    uid: str
    pod: Mapping[str, Any]
    dry_run: bool
    decision: asyncio.Future[Decision]


class OffloadingAdmission:
    """The namespace-offloading handlers of one `vk webhook` process; `offloadings` is the
    NamespaceOffloading cache, `synced()` whether it holds a complete list."""

    def __init__(
        self,
        offloadings: Store,
        *,
        synced: Callable[[], bool],
        home_cluster_id: str | None = None,
        vk_namespace: str = VK_NAMESPACE,
    ) -> None:
        """`home_cluster_id`: this cluster's ID, which the remote name DefaultName gives
        holds (None: not known, and that name is left to the controller to judge);
        `vk_namespace`: where vk runs, never offloaded."""
        self.offloadings = offloadings
        self.synced = synced
        self.home_cluster_id = home_cluster_id
        self.vk_namespace = vk_namespace

    def place_pod(self, request: Mapping[str, Any]) -> Answer:
        if request.get("operation") != "CREATE":
            return Answer(ALLOWED)
        namespace = request.get("namespace") or ""
        if system_namespace_problem(namespace, self.vk_namespace):
            return Answer(ALLOWED)  # never offloaded: nothing to wait for (coredns's pods)
        if not self.synced():
            return Answer(deny(NOT_READY_OFFLOADING))
        offloading = self.offloadings.get(f"{namespace}/{NAMESPACE_OFFLOADING_NAME}")
        decision, patch = review_offloading_pod(request, offloading, self.vk_namespace)
        return Answer(decision, patch or None)

    def validate_offloading(self, request: Mapping[str, Any]) -> Answer:
        decision, warnings = review_namespace_offloading(
            request, self.home_cluster_id, self.vk_namespace
        )
        return Answer(decision, warnings=tuple(warnings))


NOT_READY_TENANT_OBJECTS = (
    "the provider's webhook has not read its tenants' ResourceSlices and NamespaceMaps yet, or "
    "does not follow them now: retry in a few seconds"
)
# How long an admitted creation holds its place before the cache shows the object: the watch
# brings it within a second; one that the API server did not make after all (another webhook
# refused it) gives its place back then.
RESERVATION_SECONDS = 30.0
REPLICAS_BY_NAMESPACE = "replicas"


def as_counted(obj: JSON) -> JSON:
    """What the caches of tenant objects keep: which object it is, and whether a replica."""
    metadata = obj["metadata"]
    kept: JSON = {key: metadata[key] for key in ("name", "namespace", "uid") if key in metadata}
    if is_replica(obj):
        kept["labels"] = {REPLICATED_LABEL: "true"}
    return {"metadata": kept}


def replicas_by_namespace(obj: JSON) -> list[str]:
    """The index of the replicas in each namespace (what a consumer's bounds count)."""
    return [obj["metadata"].get("namespace") or ""] if is_replica(obj) else []


def tenant_object_informers(client: KubeClient) -> dict[str, Informer]:
    """The caches `TenantObjectAdmission` counts in: every ResourceSlice and NamespaceMap of
    the cluster, the replicas indexed by namespace, each kept `as_counted`."""
    return {
        api.PLURAL: Informer(
            client,
            api.group_version(),
            api.PLURAL,
            indexers={REPLICAS_BY_NAMESPACE: replicas_by_namespace},
            keep=as_counted,
        )
        for api in (ResourceSlice, NamespaceMap)
    }


def object_uid(obj: object) -> str:
    uid = as_mapping(as_mapping(obj).get("metadata")).get("uid")
    return uid if isinstance(uid, str) else ""


class TenantObjectAdmission:
    """The provider's bounds on its consumers' control-plane identities in their tenant
    namespaces (`vk.webhooks.tenancy`), over the caches of ResourceSlices, NamespaceMaps (their
    replicas indexed by namespace) and the tenant namespaces (their limit labels). Counting and
    taking a place are one step of the event loop, so a burst of creations, each admitted
    before the cache shows the ones before it, is counted whole: each admitted creation is held
    as a reservation, by the UID the API server gave it, until the cache shows that very object
    (`shown`: a name deleted and made again is two objects) or RESERVATION_SECONDS pass (a dry
    run's holds none: the webhook declares no side effects). While a cache does not follow its
    collection (`following` false), creations are asked to retry: reservations would end
    unseen. Each webhook replica counts its own admissions: N replicas keep at most N times the
    bound."""

    def __init__(
        self,
        caches: Mapping[str, Store],
        namespaces: Store,
        *,
        following: Callable[[], bool],
        max_resource_slices: int,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        """`caches`: by plural (TENANT_OBJECT_KINDS); `following()`: whether they, and the
        namespaces', hold a complete list and follow it now; `max_resource_slices`: the
        ResourceSlices of a consumer answered at once, unless its tenant namespace's label
        says otherwise."""
        self.caches = caches
        self.namespaces = namespaces
        self.following = following
        self.max_resource_slices = max_resource_slices
        self.now = now
        # (plural, namespace) -> UID -> until when its admitted creation holds a place
        self._reserved: dict[tuple[str, str], dict[str, float]] = {}

    def validate(self, request: Mapping[str, Any]) -> Answer:
        consumer = control_plane_consumer(str((request.get("userInfo") or {}).get("username", "")))
        kind = TENANT_OBJECT_KINDS.get(str((request.get("resource") or {}).get("resource", "")))
        operation = request.get("operation")
        if consumer is None or kind is None or operation not in ("CREATE", "UPDATE"):
            return Answer(ALLOWED)  # not a control plane's write of a kind bounded here
        creating = operation == "CREATE"
        if creating and not self.following():
            # Unavailable, not Forbidden: the consumer's replicator retries it at its pace.
            return Answer(deny(NOT_READY_TENANT_OBJECTS), code=503)
        namespace = str(request.get("namespace") or "")
        obj = request.get("object") or {}
        old = None if creating else request.get("oldObject") or {}
        decision = review_tenant_object(
            kind,
            consumer=consumer,
            namespace=namespace,
            obj=obj,
            old=old,
            size=json_size(obj),
            old_size=None if old is None else json_size(old),
            held=self._held(kind.plural, namespace) if creating else 0,
            limit=self._limit(kind, namespace),
        )
        if decision.allowed and creating and not request.get("dryRun"):
            reserved = self._reserved.setdefault((kind.plural, namespace), {})
            reserved[object_uid(obj) or str(request.get("uid"))] = self.now() + RESERVATION_SECONDS
        return Answer(decision)

    def shown(self, plural: str) -> EventHandler:
        """The handler of the cache of `plural`: an object it shows (made, changed or gone) is
        counted by the cache from then on, no longer by its reservation (one made and deleted
        between two creations would otherwise be counted until its reservation ends)."""

        def drop_reservation(_: str, obj: JSON, __: JSON | None) -> None:
            key = (plural, obj["metadata"].get("namespace") or "")
            reserved = self._reserved.get(key)
            if reserved is not None:
                reserved.pop(object_uid(obj), None)
                if not reserved:
                    del self._reserved[key]

        return drop_reservation

    def _held(self, plural: str, namespace: str) -> int:
        """The replicas of `plural` in `namespace`: in the cache, and admitted since."""
        cached = {
            object_uid(obj)
            for obj in self.caches[plural].by_index(REPLICAS_BY_NAMESPACE, namespace)
        }
        reserved = self._reserved.get((plural, namespace), {})
        now = self.now()
        # Past its time, never made; or reserved after the cache showed it.
        for uid in [u for u, until in reserved.items() if until <= now or u in cached]:
            del reserved[uid]
        if not reserved:
            self._reserved.pop((plural, namespace), None)
        return len(cached) + len(reserved)

    def _limit(self, kind: TenantObjectKind, namespace: str) -> int:
        if kind is not RESOURCE_SLICES:
            return MAX_NAMESPACE_MAPS
        answered, _ = tenant_limit(
            self.namespaces.get(namespace),
            TENANT_MAX_RESOURCE_SLICES_LABEL,
            self.max_resource_slices,
        )
        return held_resource_slices(answered)
