"""How many of one consumer's ResourceSlices the provider answers: the count, the order the
room goes in, and the controller over hand-filled caches and a fake API server."""

from __future__ import annotations

from typing import Any

import pytest

from vk.api.constants import (
    CREATOR_USER_LABEL,
    DEFAULT_MAX_RESOURCE_SLICES,
    REMOTE_CLUSTER_ID_LABEL,
    TENANT_MAX_RESOURCE_SLICES_LABEL,
    resource_slice_user,
)
from vk.api.usage import creator_label_value
from vk.cli.peering import PeeringError
from vk.cli.progress import Progress
from vk.cli.waiting import Deadline, wait_for_resource_slice
from vk.controllers.provider_resourceslices import (
    ACCEPTED,
    AUTHENTICATION,
    DENIED,
    REASON_COUNT_EXCEEDED,
    REASON_RATE_LIMITED,
    RESOURCES,
    ProviderResourceSlices,
    ProviderSettings,
    is_answered,
    quota_path,
    slice_line,
)
from vk.kube.client import JSON, ApiError
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


def waiting(slices: list[JSON], allowed: int) -> list[str]:
    return [s["metadata"]["name"] for s in slice_line(slices, allowed, is_answered).waiting]


def test_the_oldest_slices_get_the_room_and_those_answered_keep_theirs() -> None:
    first = resource_slice("a", "2026-11-29T10:00:00Z")
    second = resource_slice("b", "2026-11-29T10:00:01Z")
    same_second = resource_slice("c", "2026-11-29T10:00:01Z")
    slices = [same_second, first, second]
    assert waiting(slices, 2) == ["c"]
    assert [s["metadata"]["name"] for s in slice_line(slices, 2, is_answered).next] == ["a", "b"]
    # One answered before the count was lowered stays answered; the others wait behind it.
    newest_answered = resource_slice("d", "2026-11-29T11:00:00Z", answered=True)
    slices.append(newest_answered)
    assert waiting(slices, 2) == ["b", "c"]
    # One being deleted leaves its room.
    slices[1] = resource_slice("a", "2026-11-29T10:00:00Z", deleting=True)
    assert waiting(slices, 2) == ["c"]
    # Resources granted alone (its first version, before the consumer wrote its ID) keep
    # no place.
    granted_only = resource_slice("e", "2026-11-29T12:00:00Z")
    granted_only["status"]["conditions"] = [
        {"type": AUTHENTICATION, "status": DENIED},
        {"type": RESOURCES, "status": ACCEPTED},
    ]
    assert waiting([*slices, granted_only], 2) == ["c", "e"]
    # None at all, for a count of 0.
    assert waiting([first], 0) == ["a"]
    assert waiting([first], 1) == []
    # A deleted slice's identity whose pods are left holds a place.
    assert slice_line([first], 1, is_answered, 1).waiting == [first]


class ProviderApi:
    name = "provider"

    def __init__(self) -> None:
        self.statuses: dict[str, JSON] = {}
        self.applied: dict[str, JSON] = {}
        self.deleted: list[str] = []

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        self.statuses[path.split("/")[-2]] = patch["status"]
        return patch

    async def apply(self, path: str, body: JSON, *, force: bool = True) -> JSON:
        self.applied[path] = body
        return body

    async def delete(self, path: str, *, body: JSON | None = None) -> JSON:
        self.deleted.append(path)
        return {}


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
    # What its first version was granted, before the consumer wrote its ID.
    slices[2]["status"]["resources"] = {"cpu": "4"}
    api = ProviderApi()
    controller = controller_of(api, slices, {})
    for name in "abc":
        await controller.reconcile(f"{TENANT}/{name}")
    assert condition(api.statuses["a"], RESOURCES)["status"] == ACCEPTED
    assert condition(api.statuses["b"], RESOURCES)["status"] == ACCEPTED
    denied = api.statuses["c"]
    for kind in (AUTHENTICATION, RESOURCES):
        assert condition(denied, kind)["status"] == DENIED
        assert condition(denied, kind)["reason"] == REASON_COUNT_EXCEEDED
        assert condition(denied, kind)["message"].startswith(
            "venice has the 2 ResourceSlices this provider answers for it at once"
        )
    assert denied["resources"] is None  # removed by the merge patch
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


async def queued(controller: Any) -> list[str]:
    """What the controller's queue holds, emptied."""
    queue = controller.controller.queue
    keys = [await queue.get() for _ in range(len(queue))]
    for key in keys:
        queue.done(key)
    return sorted(keys)


async def test_a_slice_going_or_the_count_changed_brings_back_the_slices_waiting() -> None:
    """The room a slice leaves goes to the oldest waiting, c, not to the one after it: the
    informer drops a deleted slice from its cache before its handlers hear of it."""

    def venices() -> list[JSON]:
        answered = [
            resource_slice(n, f"2026-11-29T10:00:0{i}Z", answered=True) for i, n in enumerate("ab")
        ]
        return [
            *answered,
            *(resource_slice(n, f"2026-11-29T10:00:0{i}Z") for i, n in ((2, "c"), (3, "d"))),
        ]

    florences = resource_slice("f", "2026-11-29T10:00:00Z")
    florences["metadata"]["namespace"] = "liqo-tenant-florence"
    a = venices()[0]
    controller = controller_of(ProviderApi(), [*venices(), florences], {})
    controller._on_slice(MODIFIED, a, a)
    assert await queued(controller) == [f"{TENANT}/a"]
    controller.slices.store.delete(f"{TENANT}/a")
    controller._on_slice(DELETED, a, a)
    assert await queued(controller) == [f"{TENANT}/a", f"{TENANT}/c"]
    controller = controller_of(ProviderApi(), [*venices(), florences], {})
    going = resource_slice("a", "2026-11-29T10:00:00Z", answered=True, deleting=True)
    controller.slices.store.upsert(going)
    controller._on_slice(MODIFIED, going, a)
    assert await queued(controller) == [f"{TENANT}/a", f"{TENANT}/c"]  # a deletion begun too
    controller = controller_of(ProviderApi(), [*venices(), florences], {})
    tenant = {"metadata": {"name": TENANT, "labels": {}}}
    relabelled = {"metadata": {"name": TENANT, "labels": {TENANT_MAX_RESOURCE_SLICES_LABEL: "5"}}}
    controller._on_namespace(MODIFIED, tenant, tenant)
    assert len(controller.controller.queue) == 0
    controller._on_namespace(MODIFIED, relabelled, tenant)
    assert len(controller.controller.queue) == 4


async def test_room_made_twice_at_once_goes_to_two_slices() -> None:
    """Two slices gone before the first waiting is answered: the second place goes to the
    next waiting, not to the first again."""
    slices = [resource_slice(n, f"2026-11-29T10:00:0{i}Z") for i, n in enumerate("cd")]
    controller = controller_of(ProviderApi(), slices, {})
    gone = resource_slice("a", "2026-11-29T09:00:00Z", answered=True)
    controller._on_slice(DELETED, gone, gone)
    assert await queued(controller) == [f"{TENANT}/a", f"{TENANT}/c", f"{TENANT}/d"]


def twin(controller: Any, name: str, consumer: str) -> None:
    labels = {REMOTE_CLUSTER_ID_LABEL: consumer}
    controller.namespaces.store.upsert({"metadata": {"name": name, "labels": labels}})


def stamped_shadow_pod(
    controller: Any, name: str, namespace: str, consumer: str, slice_name: str
) -> JSON:
    """A ShadowPod the identity of `consumer`'s slice `slice_name` made, as the webhook
    stamped it, put in the controller's cache."""
    creator = creator_label_value(resource_slice_user(consumer, slice_name))
    shadow_pod = {
        "metadata": {"name": name, "namespace": namespace, "labels": {CREATOR_USER_LABEL: creator}}
    }
    controller.shadow_pods.store.upsert(shadow_pod)
    return shadow_pod


async def test_a_deleted_slices_identity_holds_its_place_while_its_pods_are_left() -> None:
    """The attack: at its count, a tenant deletes an answered slice, whose pods run on until
    its virtual node is drained (or the provider's grace is up), and makes another; again and
    again, one more slice's worth each time. The deleted slice's identity holds its place
    while ShadowPods it made are left; their last gone, the slice waiting is answered."""
    slices = [
        resource_slice("a", "2026-11-29T10:00:00Z", answered=True),
        resource_slice("c", "2026-11-29T10:00:02Z"),
    ]
    api = ProviderApi()
    controller = controller_of(api, slices, {})
    twin(controller, "shop-venice", "venice")
    twin(controller, "cart-florence", "florence")
    # b is deleted, and its Quota with it; two ShadowPods it made are left.
    left = [stamped_shadow_pod(controller, n, "shop-venice", "venice", "b") for n in ("w1", "w2")]
    # a's (a slice of venice's) and another consumer's b hold no place of venice's besides.
    stamped_shadow_pod(controller, "api", "shop-venice", "venice", "a")
    stamped_shadow_pod(controller, "x", "cart-florence", "florence", "b")
    await controller.reconcile(f"{TENANT}/c")
    denied = condition(api.statuses["c"], AUTHENTICATION)
    assert denied["status"] == DENIED
    assert "1 of them are deleted slices whose offloaded pods are not gone yet" in denied["message"]
    assert quota_path(TENANT, "c") not in api.applied
    # One of b's pods gone: its place is held still.
    controller.shadow_pods.store.delete("shop-venice/w1")
    controller._on_shadow_pod(DELETED, left[0], None)
    assert len(controller.controller.queue) == 0
    controller.shadow_pods.store.delete("shop-venice/w2")
    controller._on_shadow_pod(DELETED, left[1], None)
    assert len(controller.controller.queue) == 1  # c, looked at again
    await controller.reconcile(f"{TENANT}/c")
    assert condition(api.statuses["c"], RESOURCES)["status"] == ACCEPTED
    assert quota_path(TENANT, "c") in api.applied


async def test_a_slice_made_again_under_its_name_is_not_counted_twice() -> None:
    """b deleted and made again: its identity is the same, its pods left are its own, and it
    takes one place, not two."""
    slices = [
        resource_slice("a", "2026-11-29T10:00:00Z", answered=True),
        resource_slice("b", "2026-11-29T10:00:02Z"),
    ]
    api = ProviderApi()
    controller = controller_of(api, slices, {})
    twin(controller, "shop-venice", "venice")
    stamped_shadow_pod(controller, "w1", "shop-venice", "venice", "b")
    await controller.reconcile(f"{TENANT}/b")
    assert condition(api.statuses["b"], RESOURCES)["status"] == ACCEPTED


async def test_a_consumer_making_slices_again_and_again_is_paced() -> None:
    """The attack: venice deletes a slice and makes another, again and again, within its count.
    Each new slice answered is a Quota naples binds in every twin of venice's, and unbinds when
    it goes: hundreds of naples' writes for each two of venice's. After its count's worth at
    once, venice gets one more per interval; the one held back says so, and is looked at again
    when its turn comes. A slice that took its turn, or has its Quota, is not new."""
    api = ProviderApi()
    controller = ProviderResourceSlices(
        api,  # type: ignore[arg-type]
        ProviderSettings(
            "naples", {}, "https://naples", b"", max_resource_slices=2, new_slice_interval=3600
        ),
    )
    controller.namespaces.store.upsert({"metadata": {"name": TENANT, "labels": {}}})

    async def answer(name: str) -> float | None:
        controller.slices.store.upsert(resource_slice(name, "2026-11-29T10:00:00Z"))
        result = await controller.reconcile(f"{TENANT}/{name}")
        return result.requeue_after

    for name in ("a", "b"):
        assert await answer(name) is None
        assert await answer(name) is None  # looked at again: its turn taken once
        assert condition(api.statuses[name], RESOURCES)["status"] == ACCEPTED
        controller.slices.store.delete(f"{TENANT}/{name}")
        await controller.reconcile(f"{TENANT}/{name}")
    retry = await answer("c")
    assert retry == pytest.approx(3600, rel=0.01)
    for kind in (AUTHENTICATION, RESOURCES):
        held_back = condition(api.statuses["c"], kind)
        assert (held_back["status"], held_back["reason"]) == (DENIED, REASON_RATE_LIMITED)
        assert held_back["message"].startswith(
            "venice had its 2 new ResourceSlices answered at once, and gets one more every 3600 s"
        )
    assert quota_path(TENANT, "c") not in api.applied
    # One with its Quota already (this process restarted) is not new.
    user = resource_slice_user("venice", "d")
    controller.quotas.store.upsert({"metadata": {"name": user, "namespace": TENANT}})
    assert await answer("d") is None
    assert condition(api.statuses["d"], RESOURCES)["status"] == ACCEPTED
    # The provider's administrator allows venice one more slice: c's turn is there at once.
    labels = {TENANT_MAX_RESOURCE_SLICES_LABEL: "3"}
    controller.namespaces.store.upsert({"metadata": {"name": TENANT, "labels": labels}})
    assert await answer("c") is None
    assert condition(api.statuses["c"], RESOURCES)["status"] == ACCEPTED


async def test_new_slices_waiting_for_turns_get_them_the_oldest_first() -> None:
    """Turns go as the count's room does, the oldest slice first, whichever of those waiting is
    looked at first when one comes: the younger leaves it to the older, brought back now."""
    now = [0.0]
    api = ProviderApi()
    controller = ProviderResourceSlices(
        api,  # type: ignore[arg-type]
        ProviderSettings(
            "naples", {}, "https://naples", b"", max_resource_slices=2, new_slice_interval=60
        ),
        clock=lambda: now[0],
    )
    controller.namespaces.store.upsert({"metadata": {"name": TENANT, "labels": {}}})

    async def look_at(name: str) -> str:
        await controller.reconcile(f"{TENANT}/{name}")
        return str(condition(api.statuses[name], RESOURCES)["reason"])

    for name in ("a", "b"):  # the burst, taken and gone
        controller.slices.store.upsert(resource_slice(name, "2026-11-29T10:00:00Z"))
        await controller.reconcile(f"{TENANT}/{name}")
        controller.slices.store.delete(f"{TENANT}/{name}")
        await controller.reconcile(f"{TENANT}/{name}")
    controller.slices.store.upsert(resource_slice("older", "2026-11-29T11:00:00Z"))
    controller.slices.store.upsert(resource_slice("younger", "2026-11-29T11:00:01Z"))
    await queued(controller)
    assert await look_at("younger") == REASON_RATE_LIMITED
    now[0] = 60.0  # one turn comes: the younger, looked at first, leaves it to the older
    assert await look_at("younger") == REASON_RATE_LIMITED
    assert await queued(controller) == [f"{TENANT}/older"]
    assert await look_at("older") != REASON_RATE_LIMITED
    assert await look_at("younger") == REASON_RATE_LIMITED
    now[0] = 120.0
    assert await look_at("younger") != REASON_RATE_LIMITED


async def test_a_slice_whose_identity_is_being_signed_keeps_its_place() -> None:
    """The newer slice of the same second, by name older, does not take the place of one whose
    request is made already: that one would flip from being signed to Denied (and vkctl stop
    on it)."""
    slices = [
        resource_slice("a", "2026-11-29T10:00:00Z", answered=True),
        resource_slice("c", "2026-11-29T10:00:01Z"),
        resource_slice("b", "2026-11-29T10:00:01Z"),
    ]
    api = ProviderApi()
    controller = controller_of(api, slices, {})
    request = resource_slice_user("venice", "c")
    controller.requests.store.upsert({"metadata": {"name": request}, "spec": {}})
    await controller.reconcile(f"{TENANT}/b")
    assert condition(api.statuses["b"], AUTHENTICATION)["status"] == DENIED


async def test_a_slice_out_of_view_or_being_deleted_loses_its_quota_at_once() -> None:
    """The attack: at its count, a tenant removes the replica label of an answered slice (or
    holds its deletion with a finalizer of its own) to make room for one more. Out of the
    provider's view, or being deleted, the slice's Quota goes at once, so it is room for
    nothing."""
    api = ProviderApi()
    controller = controller_of(api, [], {})
    await controller.reconcile(f"{TENANT}/hidden")
    going = resource_slice("going", "2026-11-29T10:00:00Z", answered=True, deleting=True)
    controller.slices.store.upsert(going)
    await controller.reconcile(f"{TENANT}/going")
    assert api.deleted == [quota_path(TENANT, "hidden"), quota_path(TENANT, "going")]


async def test_past_the_count_another_class_keeps_its_resources_and_gets_no_quota() -> None:
    """Resources of another class are its controller's: denied only the identity, and no
    Quota made of what that controller grants, while past the count."""
    slices = [resource_slice(n, f"2026-11-29T10:00:0{i}Z") for i, n in enumerate("abc")]
    custom = slices[2]
    custom["spec"]["class"] = "gpu-class"
    custom["status"] = {
        "resources": {"nvidia.com/gpu": "1"},
        "conditions": [{"type": RESOURCES, "status": ACCEPTED, "reason": "Granted"}],
    }
    api = ProviderApi()
    await controller_of(api, slices, {}).reconcile(f"{TENANT}/c")
    status = api.statuses["c"]
    assert condition(status, AUTHENTICATION)["status"] == DENIED
    assert condition(status, RESOURCES) == {
        "type": RESOURCES,
        "status": ACCEPTED,
        "reason": "Granted",
    }
    assert status["resources"] == {"nvidia.com/gpu": "1"}
    assert api.applied == {}


@pytest.mark.parametrize(
    ("reason", "advice"),
    [
        (REASON_COUNT_EXCEEDED, "it is answered on its own once there is room"),
        (REASON_RATE_LIMITED, "it is answered on its own when its turn comes"),
    ],
)
async def test_vkctl_says_a_slice_held_back_is_answered_on_its_own(
    reason: str, advice: str
) -> None:
    """Not "delete it and create it again": that would put it last in the line."""

    class Consumer:
        async def get(self, path: str) -> JSON:
            return {
                "metadata": {"name": "capped"},
                "status": {
                    "conditions": [
                        {
                            "type": AUTHENTICATION,
                            "status": DENIED,
                            "reason": reason,
                            "message": "venice has the 2 ResourceSlices ...",
                        }
                    ]
                },
            }

    with pytest.raises(PeeringError) as raised:
        await wait_for_resource_slice(
            Consumer(),  # type: ignore[arg-type]
            "liqo-tenant-naples",
            "capped",
            deadline=Deadline.after(5),
            progress=Progress(quiet=True),
        )
    assert str(raised.value).endswith(advice)
    assert "create it again" not in str(raised.value)


async def test_vkctl_says_why_the_provider_refused_to_store_a_slice() -> None:
    """Refused by the provider's webhook, a slice waits unanswered: vkctl shows the refusal
    the replicator recorded on it (the latest), as the provider's words go to a terminal, and
    ends with it at its deadline (vk asks again on its own meanwhile: room may come)."""
    refusal = (
        "cluster naples refused to store this ResourceSlice: admission webhook "
        '"resourceslice.validate.vk.io" denied the request: venice has the 128 resourceslices '
        "this provider keeps for it (at most 128)\x1b[2J"
    )
    asked: list[tuple[str, Any]] = []

    class Consumer:
        def __init__(self, said: list[JSON] | None) -> None:
            self.said = said

        async def get(self, path: str, params: Any = None) -> JSON:
            asked.append((path, params))
            if "/events" in path:
                if self.said is None:
                    raise ApiError(403, "Forbidden", "cannot list events")
                return {"items": self.said}
            return {"metadata": {"name": "extra", "namespace": "liqo-tenant-naples", "uid": "u1"}}

    async def timed_out(said: list[JSON] | None) -> str:
        with pytest.raises(PeeringError) as raised:
            await wait_for_resource_slice(
                Consumer(said),  # type: ignore[arg-type]
                "liqo-tenant-naples",
                "extra",
                deadline=Deadline.after(0),
                progress=Progress(quiet=True),
            )
        return str(raised.value)

    said = [
        {"message": "older", "lastTimestamp": "2026-11-29T10:00:00Z"},
        {"message": refusal, "lastTimestamp": "2026-11-29T10:00:30Z"},
    ]
    assert await timed_out(said) == (
        "the ResourceSlice liqo-tenant-naples/extra was not accepted within 0s (Authentication "
        f"pending, Resources pending; {refusal.replace(chr(27), '?')}): is vk controller-manager "
        "running in both clusters (`vkctl info`)?"
    )
    assert asked[-1] == (
        "/api/v1/namespaces/liqo-tenant-naples/events",
        {"fieldSelector": "involvedObject.uid=u1,reason=ReplicationRefused,source=crdreplicator"},
    )
    # Nothing refused, or the Events not readable: it waits for the answer, as before.
    for nothing in ([], None):
        assert "(Authentication pending, Resources pending)" in await timed_out(nothing)


async def test_a_tenant_being_deleted_has_no_slice_answered_on_its_way_out() -> None:
    """Its teardown deletes its answered slices, which makes room: a slice waiting behind them
    was signed an identity, valid a year, and given a Quota as the peering ended."""
    going = resource_slice("a", "2026-11-29T10:00:00Z", answered=True, deleting=True)
    waiting_one = resource_slice("b", "2026-11-29T10:00:01Z")
    waiting_one["spec"]["csr"] = "bm90IGEgQ1NS"  # asked for: the controller would look at it
    api = ProviderApi()
    controller = controller_of(api, [going, waiting_one], {})
    controller.tenants.store.upsert(
        {
            "metadata": {
                "name": "venice",
                "namespace": TENANT,
                "deletionTimestamp": "2026-11-29T10:01:00Z",
            },
            "spec": {"clusterID": "venice"},
        }
    )
    await controller.reconcile(f"{TENANT}/b")
    assert api.statuses.get("b") is None  # nothing answered
    assert api.applied == {}


async def test_a_quota_deleted_by_someone_else_is_made_again_while_its_slice_is_answered() -> None:
    """A consumer's ShadowPods whose creator has no Quota are deleted after a grace: a Quota
    deleted by hand (an administrator's mistake) must not take an answered slice's pods with
    it. Its deletion looks at its slice again, which applies it anew; a slice gone or going
    is not answered, and its Quota stays gone."""
    slices = [resource_slice("a", "2026-11-29T10:00:00Z", answered=True)]
    slices[0]["status"]["resources"] = {"cpu": "4"}
    slices[0]["status"]["conditions"].append({"type": RESOURCES, "status": ACCEPTED})
    api = ProviderApi()
    controller = controller_of(api, slices, {})
    await controller.reconcile(f"{TENANT}/a")
    path = quota_path(TENANT, "a")
    assert path is not None
    quota = api.applied.pop(path)
    await controller.reconcile(f"{TENANT}/a")
    assert path not in api.applied  # applied already: not again
    controller._on_quota(DELETED, quota, quota)
    assert await controller.controller.queue.get() == f"{TENANT}/a"
    await controller.reconcile(f"{TENANT}/a")
    assert api.applied[path] == quota
    # Going: its deletion by this controller makes nothing again.
    going = resource_slice("a", "2026-11-29T10:00:00Z", answered=True, deleting=True)
    controller.slices.store.upsert(going)
    api.applied.clear()
    controller._on_quota(DELETED, quota, quota)
    await controller.reconcile(f"{TENANT}/a")
    assert api.applied == {}
    assert api.deleted[-1] == path
