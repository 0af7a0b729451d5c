"""AdmissionReview in, AdmissionReview out: the handlers of `vk webhook`, over the caches.

Provider: `QuotaAdmission.mutate` stamps a consumer identity's new pod with its creator;
`validate` applies the Quota rules of `vk.webhooks.quota` to it (and keeps the stamp immutable
on updates). Consumer: `OffloadingAdmission` places the pods of offloaded namespaces and
validates NamespaceOffloadings (`vk.webhooks.offloading`). All read only the informers' caches
(and the usage ledger): no API call per admission. Until the caches hold a first complete list
they deny what they cannot judge, asking to retry.
"""

from __future__ import annotations

import base64
import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from pydantic import ValidationError

from vk.api.constants import NAMESPACE_OFFLOADING_NAME
from vk.api.offloading import Quota
from vk.api.quantity import InvalidQuantity
from vk.kube.informer import Store
from vk.webhooks.offloading import review_namespace_offloading, review_offloading_pod
from vk.webhooks.quota import (
    ALLOWED,
    JSON,
    Decision,
    UsageLedger,
    creator_label_value,
    deny,
    forge_creator_patch,
    is_tenant_identity,
    pod_usage,
    review_creator_stamp,
    review_creator_update,
    review_pod,
)

log = structlog.get_logger("vk.webhooks.admission")

ADMISSION_API = "admission.k8s.io/v1"
USER_INDEX = "user"
NOT_READY_OFFLOADING = (
    "vk's webhook is starting and has not read the NamespaceOffloadings yet: retry in a few seconds"
)
NOT_READY = (
    "the provider's quota webhook is starting and has not read the Quotas and pods yet: "
    "retry in a few seconds"
)


def quota_user_index(quota: JSON) -> list[str]:
    """Quotas by the user they limit (the Quota informer's index)."""
    user = (quota.get("spec") or {}).get("user")
    return [str(user)] if user else []


@dataclass(frozen=True)
class Answer:
    decision: Decision
    patch: list[JSON] | None = None
    warnings: tuple[str, ...] = ()


def forge_review_response(uid: str, answer: Answer) -> JSON:
    """The AdmissionReview sent back: the request's uid, the verdict (a denial as a 403 Status
    whose message the API server passes on), and the JSONPatch if any."""
    response: JSON = {"uid": uid, "allowed": answer.decision.allowed}
    if not answer.decision.allowed:
        response["status"] = {
            "code": 403,
            "reason": "Forbidden",
            "message": answer.decision.message,
        }
    if answer.warnings:
        response["warnings"] = list(answer.warnings)
    if answer.patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(answer.patch).encode()).decode()
    return {"apiVersion": ADMISSION_API, "kind": "AdmissionReview", "response": response}


def _pod_key(request: Mapping[str, Any], pod: Mapping[str, Any]) -> str:
    """`namespace/name`; a pod named by generateName has no name yet: the request's uid
    stands for it (its reservation then lapses by age, never seen in the cache)."""
    metadata = pod.get("metadata") or {}
    namespace = request.get("namespace") or metadata.get("namespace") or ""
    name = metadata.get("name") or request.get("name")
    return f"{namespace}/{name or (metadata.get('generateName') or '') + request.get('uid', '')}"


class QuotaAdmission:
    """The pod-quota handlers of one `vk webhook` process. `quotas` is the Quota cache
    (indexed by USER_INDEX), `ledger` the usage of the stamped pods, `synced()` whether both
    caches hold a complete list."""

    def __init__(
        self,
        quotas: Store,
        ledger: UsageLedger,
        *,
        enforcement_enabled: bool,
        synced: Callable[[], bool],
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.quotas = quotas
        self.ledger = ledger
        self.enforcement_enabled = enforcement_enabled
        self.synced = synced
        self.clock = clock

    def _requester(self, request: Mapping[str, Any]) -> tuple[str, bool, list[JSON]]:
        """(user, whether it is a consumer identity, the Quotas naming it)."""
        user_info = request.get("userInfo") or {}
        user = str(user_info.get("username", ""))
        quotas = sorted(
            self.quotas.by_index(USER_INDEX, user),
            key=lambda q: (q["metadata"].get("namespace", ""), q["metadata"]["name"]),
        )
        return user, is_tenant_identity(user_info.get("groups") or [], bool(quotas)), quotas

    def mutate(self, request: Mapping[str, Any]) -> Answer:
        if request.get("operation") != "CREATE":
            return Answer(ALLOWED)
        if not self.synced():
            return Answer(deny(NOT_READY))
        user, tenant, _ = self._requester(request)
        if not tenant:
            return Answer(ALLOWED)  # not a consumer's pod: never touched
        return Answer(ALLOWED, forge_creator_patch(request.get("object") or {}, user) or None)

    def validate(self, request: Mapping[str, Any]) -> Answer:
        operation = request.get("operation")
        if operation == "UPDATE":
            return Answer(
                review_creator_update(request.get("oldObject") or {}, request.get("object") or {})
            )
        if operation != "CREATE":
            return Answer(ALLOWED)
        if not self.synced():
            return Answer(deny(NOT_READY))
        pod: Mapping[str, Any] = request.get("object") or {}
        user, tenant, quotas = self._requester(request)
        stamped = review_creator_stamp(pod, user, tenant)
        if not stamped.allowed or not tenant:
            return Answer(stamped)
        if not quotas:
            if not self.enforcement_enabled:
                return Answer(ALLOWED)
            return Answer(
                deny(
                    f"no Quota of this provider names {user!r}: it grants this identity "
                    "nothing (is its ResourceSlice accepted? has it been deleted?)"
                )
            )
        creator = creator_label_value(user)
        key = _pod_key(request, pod)
        now = self.clock()
        used = self.ledger.used(creator, now, excluding=key)
        try:
            for raw in quotas:
                try:
                    quota = Quota.model_validate(raw)
                except ValidationError as error:
                    name = f"{raw['metadata'].get('namespace')}/{raw['metadata']['name']}"
                    return Answer(
                        deny(f"the Quota {name} is not valid, ask the provider to fix it: {error}")
                    )
                decision = review_pod(
                    pod, quota, used, enforcement_enabled=self.enforcement_enabled
                )
                if not decision.allowed:
                    return Answer(decision)
            usage = pod_usage(pod)
        except InvalidQuantity as error:
            return Answer(deny(f"the pod holds a quantity that does not parse: {error}"))
        if not request.get("dryRun"):
            self.ledger.reserve(creator, key, usage, now)
        return Answer(ALLOWED)


class OffloadingAdmission:
    """The namespace-offloading handlers of one `vk webhook` process; `offloadings` is the
    NamespaceOffloading cache, `synced()` whether it holds a complete list."""

    def __init__(self, offloadings: Store, *, synced: Callable[[], bool]) -> None:
        self.offloadings = offloadings
        self.synced = synced

    def place_pod(self, request: Mapping[str, Any]) -> Answer:
        if request.get("operation") != "CREATE":
            return Answer(ALLOWED)
        if not self.synced():
            return Answer(deny(NOT_READY_OFFLOADING))
        namespace = request.get("namespace") or ""
        offloading = self.offloadings.get(f"{namespace}/{NAMESPACE_OFFLOADING_NAME}")
        decision, patch = review_offloading_pod(request, offloading)
        return Answer(decision, patch or None)

    def validate_offloading(self, request: Mapping[str, Any]) -> Answer:
        decision, warnings = review_namespace_offloading(request)
        return Answer(decision, warnings=tuple(warnings))
