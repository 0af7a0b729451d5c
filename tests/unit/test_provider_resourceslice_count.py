"""How many of one consumer's ResourceSlices the provider answers: the count, the order the
room goes in, and the controller over hand-filled caches and a fake API server."""

from __future__ import annotations

from typing import Any

from vk.api.constants import TENANT_MAX_RESOURCE_SLICES_LABEL
from vk.controllers.provider_resourceslices import (
    ACCEPTED,
    AUTHENTICATION,
    DEFAULT_MAX_RESOURCE_SLICES,
    DENIED,
    RESOURCES,
    ProviderResourceSlices,
    ProviderSettings,
    past_slice_count,
    quota_path,
)
from vk.kube.client import JSON
from vk.kube.informer import DELETED, MODIFIED

TENANT = "liqo-tenant-venice"


def resource_slice(
    name: str, created: str, *, answered: bool = False, deleting: bool = False
) -> JSON:
    metadata: JSON = {
        "name": name,
        "namespace": TENANT,
        "uid": f"{name}-uid",
        "creationTimestamp": created,
        "labels": {"liqo.io/replicated": "true"},
    }
    if deleting:
        metadata["deletionTimestamp"] = created
    status: JSON = {}
    if answered:
        status["conditions"] = [{"type": AUTHENTICATION, "status": ACCEPTED}]
    return {"metadata": metadata, "spec": {"consumerClusterID": "venice"}, "status": status}


def test_the_oldest_slices_get_the_room_and_those_answered_keep_theirs() -> None:
    first = resource_slice("a", "2026-11-29T10:00:00Z")
    second = resource_slice("b", "2026-11-29T10:00:01Z")
    same_second = resource_slice("c", "2026-11-29T10:00:01Z")
    slices = [first, second, same_second]
    assert [past_slice_count(s, slices, 2) for s in slices] == [False, False, True]
    # One answered before the count was lowered stays answered; the others wait behind it.
    newest_answered = resource_slice("d", "2026-11-29T11:00:00Z", answered=True)
    slices.append(newest_answered)
    assert [past_slice_count(s, slices, 2) for s in slices] == [False, True, True, False]
    # One being deleted leaves its room.
    slices[0] = resource_slice("a", "2026-11-29T10:00:00Z", deleting=True)
    assert past_slice_count(second, slices, 2) is False
    assert past_slice_count(same_second, slices, 2) is True
    # Resources granted alone (its first version, before the consumer wrote its ID) keep
    # no place.
    granted_only = resource_slice("e", "2026-11-29T12:00:00Z")
    granted_only["status"]["conditions"] = [
        {"type": AUTHENTICATION, "status": DENIED},
        {"type": RESOURCES, "status": ACCEPTED},
    ]
    assert past_slice_count(granted_only, [*slices, granted_only], 2) is True
    # None at all, for a count of 0; a slice not cached yet is judged with the others.
    assert past_slice_count(first, [], 0) is True
    assert past_slice_count(first, [], 1) is False


class ProviderApi:
    name = "provider"

    def __init__(self) -> None:
        self.statuses: dict[str, JSON] = {}
        self.applied: dict[str, JSON] = {}

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        self.statuses[path.split("/")[-2]] = patch["status"]
        return patch

    async def apply(self, path: str, body: JSON, *, force: bool = True) -> JSON:
        self.applied[path] = body
        return body


def controller_of(api: ProviderApi, slices: list[JSON], tenant_labels: dict[str, str]) -> Any:
    controller = ProviderResourceSlices(
        api,  # type: ignore[arg-type]
        ProviderSettings("naples", {}, "https://naples", b"", max_resource_slices=2),
    )
    for each in slices:
        controller.slices.store.upsert(each)
    controller.namespaces.store.upsert({"metadata": {"name": TENANT, "labels": tenant_labels}})
    return controller


def condition(status: JSON, kind: str) -> JSON:
    return next(c for c in status["conditions"] if c["type"] == kind)


async def test_a_tenant_asking_past_its_slices_is_denied_and_told_and_gets_no_quota() -> None:
    """The attack: a tenant writes more ResourceSlices than the provider answers for it, each
    of which would be an identity signed here, valid a year, and a Quota. The oldest are
    answered; the one past the count is denied both, saying why, and gets no Quota."""
    slices = [resource_slice(n, f"2026-11-29T10:00:0{i}Z") for i, n in enumerate("abc")]
    api = ProviderApi()
    controller = controller_of(api, slices, {})
    for name in "abc":
        await controller.reconcile(f"{TENANT}/{name}")
    assert condition(api.statuses["a"], RESOURCES)["status"] == ACCEPTED
    assert condition(api.statuses["b"], RESOURCES)["status"] == ACCEPTED
    denied = api.statuses["c"]
    for kind in (AUTHENTICATION, RESOURCES):
        assert condition(denied, kind)["status"] == DENIED
        assert condition(denied, kind)["reason"] == f"ResourceSlice{kind}Denied"
        assert condition(denied, kind)["message"].startswith(
            "venice has the 2 ResourceSlices this provider answers for it"
        )
    assert "resources" not in denied
    assert set(api.applied) == {quota_path(TENANT, "a"), quota_path(TENANT, "b")}


async def test_the_tenant_namespaces_label_sets_the_count_and_a_bad_one_is_ignored() -> None:
    slices = [resource_slice(n, f"2026-11-29T10:00:0{i}Z") for i, n in enumerate("abc")]
    api = ProviderApi()
    await controller_of(api, slices, {TENANT_MAX_RESOURCE_SLICES_LABEL: "3"}).reconcile(
        f"{TENANT}/c"
    )
    assert condition(api.statuses["c"], RESOURCES)["status"] == ACCEPTED
    api = ProviderApi()
    await controller_of(api, slices, {TENANT_MAX_RESOURCE_SLICES_LABEL: "all"}).reconcile(
        f"{TENANT}/c"
    )
    assert condition(api.statuses["c"], RESOURCES)["status"] == DENIED  # the default, 2 here
    assert DEFAULT_MAX_RESOURCE_SLICES == 64


def test_a_slice_gone_or_the_count_changed_brings_back_the_consumers_slices() -> None:
    slices = [resource_slice(n, f"2026-11-29T10:00:0{i}Z") for i, n in enumerate("abc")]
    florences = resource_slice("f", "2026-11-29T10:00:00Z")
    florences["metadata"]["namespace"] = "liqo-tenant-florence"
    controller = controller_of(ProviderApi(), [*slices, florences], {})
    controller._on_slice(MODIFIED, slices[0], slices[0])
    assert len(controller.controller.queue) == 1
    controller._on_slice(DELETED, slices[0], slices[0])
    assert len(controller.controller.queue) == 3  # venice's, not florence's
    controller = controller_of(ProviderApi(), [*slices, florences], {})
    tenant = {"metadata": {"name": TENANT, "labels": {}}}
    relabelled = {"metadata": {"name": TENANT, "labels": {TENANT_MAX_RESOURCE_SLICES_LABEL: "5"}}}
    controller._on_namespace(MODIFIED, tenant, tenant)
    assert len(controller.controller.queue) == 0
    controller._on_namespace(MODIFIED, relabelled, tenant)
    assert len(controller.controller.queue) == 3
