"""The pod reflector judges no pod before the ReflectionManager has said which namespaces are
offloaded: before, every pod would look not offloaded (a status write each), and a pod being
deleted would be finished at home with its remote pod left running."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

from vk.api.constants import (
    DESTINATION_LABEL,
    LOCAL_POD_UID_ANNOTATION,
    NODENAME_LABEL,
    ORIGIN_LABEL,
)
from vk.api.jsondata import json_copy
from vk.kube.client import JSON, AlreadyExists, ApiError, NotFound
from vk.kube.controller import Result
from vk.kube.events import EventRecorder
from vk.kube.informer import ADDED, DELETED, MODIFIED
from vk.reflection.workload.pods import (
    REASON_CHANGE_REFUSED,
    REFUSED_RETRY,
    STATUS_REFUSED,
    PodForging,
    PodReflector,
)


class Home:
    """One pod bound to the node; its writes recorded; its watch quiet."""

    name = "home"  # the `client` label of its metrics

    def __init__(self) -> None:
        self.writes: list[str] = []

    async def current_objects(self, path: str, params: Any = None, *, timeout_seconds: int = 300):  # type: ignore[no-untyped-def]
        pod = {
            "metadata": {"name": "web", "namespace": "shop", "uid": "u", "resourceVersion": "1"},
            "spec": {"nodeName": "far", "containers": [{"name": "app", "image": "nginx"}]},
            "status": {"phase": "Pending"},
        }
        yield [pod], "1"

    async def watch(self, path: str, params: Any = None, *, timeout_seconds: int = 300):  # type: ignore[no-untyped-def]
        await asyncio.Event().wait()
        yield {}

    async def merge_patch(self, path: str, body: JSON) -> JSON:
        self.writes.append(path)
        return {}

    async def get(self, path: str, params: Any = None) -> JSON:
        raise NotFound(404, "NotFound", "not found")

    async def create(self, path: str, body: JSON) -> JSON:
        self.writes.append(path)
        return body


def pod_reflector(home: Any, mappings: Any, mapped: asyncio.Event) -> PodReflector:
    """The pod reflector of node far, offloading to cluster far what `mappings` says."""
    return PodReflector(
        home,
        node_name="far",
        node_ip="10.0.0.1",
        home_cluster_id="home",
        remote_cluster_id="far",
        mappings=mappings,
        mapped=mapped,
        workers=1,
        events=EventRecorder(home, "virtual-kubelet"),
    )


@contextlib.asynccontextmanager
async def reflecting(pods: PodReflector) -> AsyncIterator[None]:
    """The reflector running for the block's length."""
    running = asyncio.create_task(pods.run())
    try:
        yield
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)


async def until_some(recorded: list[Any]) -> None:
    """Waits (2 s at most) for something to be recorded."""
    async with asyncio.timeout(2):
        while not recorded:
            await asyncio.sleep(0.01)


async def test_no_pod_is_judged_before_the_offloaded_namespaces_are_known() -> None:
    home: Any = Home()
    mapped = asyncio.Event()
    # None offloaded: the pod is reported so, once that is known.
    pods = pod_reflector(home, dict, mapped)
    async with reflecting(pods):
        await asyncio.wait_for(pods.local.synced.wait(), 1)
        await asyncio.sleep(0.2)
        assert home.writes == [], "a pod judged before the manager's first word"
        mapped.set()
        await until_some(home.writes)
        assert home.writes[0] == "/api/v1/namespaces/shop/pods/web/status"


class Provider:
    """A twin namespace whose Pods and ShadowPods (`shadows`) are listed once `listed` is set;
    the ShadowPods created and deleted recorded."""

    name = "provider"  # the `client` label of its metrics

    def __init__(self, shadows: list[JSON] | None = None, pods: list[JSON] | None = None) -> None:
        self.listed = asyncio.Event()
        self.shadows = shadows or []
        self.pods = pods or []
        self.created: list[str] = []
        self.deleted: list[str] = []

    async def current_objects(self, path: str, params: Any = None, *, timeout_seconds: int = 300):  # type: ignore[no-untyped-def]
        await self.listed.wait()
        yield (self.shadows if path.endswith("/shadowpods") else self.pods), "1"

    async def delete(self, path: str, body: JSON | None = None) -> JSON:
        self.deleted.append(path)
        return {}

    async def watch(self, path: str, params: Any = None, *, timeout_seconds: int = 300):  # type: ignore[no-untyped-def]
        await asyncio.Event().wait()
        yield {}

    async def create(self, path: str, body: JSON) -> JSON:
        self.created.append(path)
        return {**body, "metadata": {**body["metadata"], "uid": "s", "resourceVersion": "2"}}


def offloading_shop(home: Home, provider: Provider) -> PodReflector:
    """The pod reflector of node far, namespace shop offloaded to shop-home in `provider`."""
    mapped = asyncio.Event()
    mapped.set()
    pods = pod_reflector(home, lambda: {"shop": "shop-home"}, mapped)
    pods.start_namespace("shop", "shop-home", provider)  # type: ignore[arg-type]
    return pods


async def test_a_pod_waits_for_the_twin_namespace_caches_without_retrying_and_goes_then() -> None:
    """Before the provider's caches are whole the pod is not reconciled, nor retried every
    0.2 s (ten thousand of them, after a restart, took more CPU so than their reconciles); it
    is reconciled once they are."""
    provider = Provider()
    pods = offloading_shop(Home(), provider)
    reconciles = 0
    reconcile = pods.reconcile

    async def counted(key: str) -> Any:
        nonlocal reconciles
        reconciles += 1
        return await reconcile(key)

    pods.reconcile = counted  # type: ignore[method-assign]
    async with reflecting(pods):
        await asyncio.wait_for(pods.local.synced.wait(), 1)
        await asyncio.sleep(0.7)
        assert provider.created == []
        assert reconciles == 0, f"reconciled {reconciles} times while the caches were not whole"
        provider.listed.set()
        await until_some(provider.created)
        assert provider.created == [
            "/apis/offloading.liqo.io/v1beta1/namespaces/shop-home/shadowpods"
        ]


class HandBoundHome(Home):
    """Home, its pod bound by hand asking for a node in europe; Node far, in asia, listed once
    `node_listed` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.node_listed = asyncio.Event()
        self.node = {
            "metadata": {"name": "far", "resourceVersion": "1", "labels": {"region": "asia"}}
        }

    async def current_objects(self, path: str, params: Any = None, *, timeout_seconds: int = 300):  # type: ignore[no-untyped-def]
        if path == "/api/v1/nodes":
            await self.node_listed.wait()
            yield [self.node], "1"
            return
        async for page, version in super().current_objects(path, params):
            for pod in page:
                pod["spec"]["nodeSelector"] = {"region": "europe"}
            yield page, version

    async def get(self, path: str, params: Any = None) -> JSON:
        if path == "/api/v1/nodes/far":
            return self.node
        return await super().get(path, params)


async def test_no_pod_is_judged_before_the_node_is_known() -> None:
    """Judged on no Node, the pod would be admitted and offloaded: it waits for the Node's
    cache, and is refused then."""
    home = HandBoundHome()
    provider = Provider()
    pods = offloading_shop(home, provider)
    async with reflecting(pods):
        provider.listed.set()
        await asyncio.sleep(0.3)
        assert provider.created == []
        assert home.writes == []
        home.node_listed.set()
        await until_some(home.writes)
        assert home.writes[0] == "/api/v1/namespaces/shop/pods/web/status"
        assert provider.created == []


async def test_an_orphan_shadow_pod_found_once_the_twin_caches_are_whole_is_deleted() -> None:
    """Its local pod is gone: no local pod brings it to a reconcile, the caches' sync does."""
    labels = {ORIGIN_LABEL: "home", DESTINATION_LABEL: "far", NODENAME_LABEL: "far"}
    orphan = {
        "metadata": {
            "name": "gone",
            "namespace": "shop-home",
            "uid": "orphan-uid",
            "resourceVersion": "1",
            "labels": labels,
        },
        "spec": {"pod": {"containers": [{"name": "app", "image": "nginx"}]}},
    }
    provider = Provider([orphan])
    pods = offloading_shop(Home(), provider)
    async with reflecting(pods):
        provider.listed.set()
        await until_some(provider.deleted)
        assert provider.deleted == [
            "/apis/offloading.liqo.io/v1beta1/namespaces/shop-home/shadowpods/gone"
        ]


class SlowHome(Home):
    """Home, its pod labelled app=web, listed once `listed` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.listed = asyncio.Event()

    async def current_objects(self, path: str, params: Any = None, *, timeout_seconds: int = 300):  # type: ignore[no-untyped-def]
        await self.listed.wait()
        async for page, version in super().current_objects(path, params):
            for pod in page:
                pod["metadata"]["labels"] = {"app": "web"}
            yield page, version


OURS = {ORIGIN_LABEL: "home", DESTINATION_LABEL: "far", NODENAME_LABEL: "far"}


def web_shadow_pod(labels: dict[str, str], annotations: dict[str, str]) -> JSON:
    """The ShadowPod of home's pod shop/web, Running, as the provider lists it."""
    return {
        "metadata": {
            "name": "web",
            "namespace": "shop-home",
            "uid": "s",
            "resourceVersion": "1",
            "labels": labels,
            "annotations": {LOCAL_POD_UID_ANNOTATION: "u", **annotations},
        },
        "spec": {"pod": {"containers": [{"name": "app", "image": "nginx"}]}},
        "status": {"phase": "Running"},
    }


class PatchedProvider(Provider):
    def __init__(self, shadows: list[JSON], pods: list[JSON]) -> None:
        super().__init__(shadows, pods)
        self.patched: list[JSON] = []

    async def merge_patch(self, path: str, body: JSON) -> JSON:
        self.patched.append(body)
        return {}


async def test_a_shadow_pod_is_kept_as_its_local_pod_asks_of_it_and_patched_for_nothing() -> None:
    """The provider added 2000 labels and a long annotation to a ShadowPod, and made a Pod of
    its own labelled as ours: the cache keeps what the local pod asks of the ShadowPod and no
    more, and no status of the Pod of no local pod. The local pods listed late (a restart),
    the twin namespace is judged once they are known: kept as of no pod, the ShadowPod would
    lack the pod's labels, patched back again on every reconcile for nothing, and the pod's own
    Pod its status."""
    shadow = web_shadow_pod(
        {**OURS, "app": "web", **{f"ballast/{i}": "x" * 63 for i in range(2000)}},
        {"ballast": "x" * 100_000},
    )
    running = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    twin_pods = [
        {"metadata": {**shadow["metadata"], "uid": "p"}, "status": running},
        {
            "metadata": {**shadow["metadata"], "name": "intruder", "uid": "i"},
            "status": {**running, "message": "m" * 30_000},
        },
    ]
    home = SlowHome()
    provider = PatchedProvider([shadow], twin_pods)
    pods = offloading_shop(home, provider)
    async with reflecting(pods):
        provider.listed.set()
        await asyncio.sleep(0.2)
        home.listed.set()
        await asyncio.wait_for(pods.shadows["shop-home"].synced.wait(), 1)
        await asyncio.sleep(0.3)  # the pod reconciled meanwhile
        kept = pods.shadows["shop-home"].store.get("shop-home/web")
        assert kept is not None
        assert kept["metadata"]["labels"] == {**OURS, "app": "web"}
        assert kept["metadata"]["annotations"] == {LOCAL_POD_UID_ANNOTATION: "u"}
        assert provider.patched == []
        assert provider.created == []
        kept_pods = pods.remote["shop-home"].store
        assert kept_pods.get("shop-home/web")["status"] == running  # type: ignore[index]
        assert "status" not in kept_pods.get("shop-home/intruder")  # type: ignore[operator]


def synced(pods: PodReflector) -> PodReflector:
    """`pods` with its twin namespace's caches whole (empty)."""
    pods.remote["shop-home"].synced.set()
    pods.shadows["shop-home"].synced.set()
    return pods


def queued(pods: PodReflector) -> tuple[int, int]:
    """(keys waiting in the main queue, in the status queue)."""
    return len(pods.controller.queue), len(pods.status_controller.queue)


async def test_a_local_pod_changed_only_in_its_status_goes_to_the_status_queue_alone() -> None:
    """Its status as this virtual kubelet wrote it comes back from every write: the main
    reconcile (the ShadowPod's spec, its creation, its deletion) has nothing to act on there,
    nor the status queue when it is the very status it wrote."""
    pods = synced(offloading_shop(Home(), Provider()))
    pending = {
        "metadata": {"name": "web", "namespace": "shop", "uid": "u", "resourceVersion": "1"},
        "spec": {"nodeName": "far", "containers": [{"name": "app", "image": "nginx"}]},
        "status": {"phase": "Pending"},
    }
    running = {
        **pending,
        "metadata": {**pending["metadata"], "resourceVersion": "2"},
        "status": {"phase": "Running"},
    }
    pods._on_local_pod(MODIFIED, running, pending)
    assert queued(pods) == (0, 1)
    pods.status_controller.queue.done(await pods.status_controller.queue.get())
    # The status this virtual kubelet wrote (answered as version 3), coming back: nothing.
    pods.status_writes.wrote("shop/web", {"metadata": {"uid": "u", "resourceVersion": "3"}})
    ours = {**running, "metadata": {**running["metadata"], "resourceVersion": "3"}}
    pods._on_local_pod(MODIFIED, ours, running)
    assert queued(pods) == (0, 0)
    # Another's status write after it: the status queue's, again.
    theirs = {**ours, "metadata": {**ours["metadata"], "resourceVersion": "4"}}
    pods._on_local_pod(MODIFIED, theirs, ours)
    assert queued(pods) == (0, 1)
    deleted = {
        **theirs,
        "metadata": {**theirs["metadata"], "deletionTimestamp": "2026-11-27T00:00:00Z"},
    }
    pods._on_local_pod(MODIFIED, deleted, theirs)
    assert queued(pods) == (1, 1)


async def test_a_shadow_pod_that_says_its_pod_is_made_or_runs_is_left_to_that_pods_events() -> None:
    """Its Pod made and its share counted, then Pending to Running, its Pod cached or not: the
    main reconcile would do nothing but hand a cached Pod to the status queue, as the Pod's own
    events do. A finished phase, a refusal or a change beyond the status goes to the main
    reconcile."""
    pods = synced(offloading_shop(Home(), Provider()))
    labels = {ORIGIN_LABEL: "home", DESTINATION_LABEL: "far", NODENAME_LABEL: "far"}
    metadata = {"name": "web", "namespace": "shop-home", "uid": "s", "labels": labels}
    created = {"type": "PodCreated", "status": "True", "reason": "Created", "message": ""}
    reserved = {"type": "QuotaReserved", "status": "True", "reason": "Reserved", "message": ""}

    def shadow(version: str, phase: str, conditions: list[JSON], image: str = "nginx") -> JSON:
        return {
            "metadata": {**metadata, "resourceVersion": version},
            "spec": {"pod": {"containers": [{"name": "app", "image": image}]}},
            "status": {"phase": phase, "conditions": conditions},
        }

    stored = shadow("1", "", [])
    pending = shadow("2", "Pending", [created, reserved])
    running = shadow("3", "Running", [created, reserved])
    for cached in (False, True):
        if cached:
            pods.remote["shop-home"].store.upsert({"metadata": {**metadata, "uid": "p"}})
        for old, new in ((stored, pending), (pending, running)):
            pods._on_shadow_pod(MODIFIED, new, old)
            assert queued(pods) == (0, 0), (cached, new["status"])
    refused = {**created, "status": "False", "reason": "NotReserved"}
    for changed in (
        shadow("4", "Failed", [created, reserved]),
        shadow("4", "Running", [refused]),
        shadow("4", "Running", [created, reserved], image="nginx:2"),
    ):
        pods._on_shadow_pod(MODIFIED, changed, running)
        assert queued(pods) == (1, 0), changed
        pods.controller.queue.done(await pods.controller.queue.get())


async def test_a_remote_pod_goes_to_the_status_queue_only_with_a_status_worth_reporting() -> None:
    """A Pod created, then bound, says nothing its local pod does not: no reconcile each. Its
    containers, a failing condition, a status too large to keep (said once at home) and a Pod
    gone (its pod stopped, if its ShadowPod lives) are the status queue's."""
    pods = synced(offloading_shop(Home(), Provider()))
    metadata = {"name": "web", "namespace": "shop-home", "uid": "p", "resourceVersion": "1"}
    scheduled = {"type": "PodScheduled", "status": "True"}
    for event, status in (
        (ADDED, {"phase": "Pending"}),
        (MODIFIED, {"phase": "Pending", "conditions": [scheduled]}),
    ):
        pods._on_remote_pod(event, {"metadata": metadata, "status": status}, None)
        assert queued(pods) == (0, 0), (event, status)
    unschedulable = {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
    waiting = {"name": "app", "state": {"waiting": {"reason": "ContainerCreating"}}}
    for pod in (
        {"metadata": metadata, "status": {"phase": "Pending", "conditions": [unschedulable]}},
        {"metadata": metadata, "status": {"phase": "Pending", "containerStatuses": [waiting]}},
        {"metadata": metadata, "status": {"phase": "Running"}},
        {"metadata": metadata, "status": {}, STATUS_REFUSED: 40_000},
        {"metadata": metadata, "status": {"phase": "Pending"}, "gone": True},
    ):
        pods._on_remote_pod(DELETED if pod.pop("gone", False) else MODIFIED, pod, None)
        assert queued(pods) == (0, 1), pod
        pods.status_controller.queue.done(await pods.status_controller.queue.get())


async def test_a_remote_pod_listed_before_the_twin_caches_are_whole_waits_for_its_reconcile() -> (
    None
):
    """A restart's list of the twin namespace's Pods: every pod is reconciled once both caches
    are whole, and hands a Pod it finds cached to the status queue then; the Pod's own event
    doing so too had each status reconciled twice."""
    pods = offloading_shop(Home(), Provider())
    running = {
        "metadata": {"name": "web", "namespace": "shop-home", "uid": "p", "resourceVersion": "1"},
        "status": {"phase": "Running"},
    }
    pods._on_remote_pod(ADDED, running, None)
    pods.remote["shop-home"].synced.set()
    pods._on_remote_pod(MODIFIED, running, None)  # the ShadowPods not listed yet
    assert queued(pods) == (0, 0)
    pods.shadows["shop-home"].synced.set()
    pods._on_remote_pod(MODIFIED, running, None)
    assert queued(pods) == (0, 1)


class TokenHome(Home):
    """Home, its pod projecting a ServiceAccount token."""

    async def current_objects(self, path: str, params: Any = None, *, timeout_seconds: int = 300):  # type: ignore[no-untyped-def]
        async for page, version in super().current_objects(path, params):
            token = {"serviceAccountToken": {"path": "token"}}
            for pod in page:
                pod["spec"]["volumes"] = [{"name": "api", "projected": {"sources": [token]}}]
            yield page, version


class Tokens:
    """The token reflector as the pod reflector sees it: the Secret there once `there`."""

    def __init__(self) -> None:
        self.there = False
        self.listeners: list[Any] = []

    def holds_tokens_of(self, pod: JSON) -> bool:
        return self.there

    def on_tokens_written(self, listener: Any) -> None:
        self.listeners.append(listener)


async def test_a_pod_mounting_home_tokens_gets_its_shadow_pod_once_its_token_secret_is_there() -> (
    None
):
    """The provider's kubelet would start none of its containers before the Secret: the
    ShadowPod is asked for once the token reflector says it wrote it, and not before."""
    provider = Provider()
    pods = offloading_shop(TokenHome(), provider)
    pods.pod_forging = PodForging(service_account_tokens=True)
    tokens = Tokens()
    pods.await_tokens_from(tokens)
    async with reflecting(pods):
        provider.listed.set()
        await asyncio.wait_for(pods.shadows["shop-home"].synced.wait(), 1)
        await asyncio.sleep(0.3)  # reconciled meanwhile
        assert provider.created == [], "a ShadowPod before its token Secret"
        tokens.there = True
        for listener in tokens.listeners:
            listener("shop/other")  # another pod's Secret: this one is not woken by it
        await asyncio.sleep(0.2)
        assert provider.created == []
        for listener in tokens.listeners:
            listener("shop/web")
        await until_some(provider.created)


async def test_a_pod_mounting_no_home_token_does_not_wait_for_one() -> None:
    """No projected token (or the token reflection off): nothing to wait for."""
    for home, forging in (
        (Home(), PodForging(service_account_tokens=True)),
        (TokenHome(), PodForging()),
    ):
        provider = Provider()
        pods = offloading_shop(home, provider)
        pods.pod_forging = forging
        pods.await_tokens_from(Tokens())
        async with reflecting(pods):
            provider.listed.set()
            await until_some(provider.created)


LOCAL_POD = {
    "metadata": {"name": "web", "namespace": "shop", "uid": "u", "resourceVersion": "1"},
    "spec": {"nodeName": "far", "containers": [{"name": "app", "image": "nginx"}]},
    "status": {"phase": "Pending"},
}
SHADOW_PODS = "/apis/offloading.liqo.io/v1beta1/namespaces/shop-home/shadowpods"


class Patched(Provider):
    """A provider taking the ShadowPods' patches too."""

    async def merge_patch(self, path: str, body: JSON) -> JSON:
        return {}


async def test_a_shadow_pod_created_is_not_asked_for_again_until_the_cache_shows_it() -> None:
    """Asked for again, the provider's webhook would reserve the Quota's share for that
    creation, which the API server then refuses (the name is taken), instead of for the
    ShadowPod that exists: refused NotReserved, it would be withdrawn."""
    provider = Patched()
    pods = synced(offloading_shop(Home(), provider))
    pods.local.store.upsert(json_copy(LOCAL_POD))
    await pods.reconcile("shop/web")
    assert provider.created == [SHADOW_PODS]
    waiting = await pods.reconcile("shop/web")  # its pod's status written, say
    assert provider.created == [SHADOW_PODS]
    assert 0 < (waiting.requeue_after or 0) <= 15
    labels = {ORIGIN_LABEL: "home", DESTINATION_LABEL: "far", NODENAME_LABEL: "far"}
    shadow = {
        "metadata": {"name": "web", "namespace": "shop-home", "uid": "s", "labels": labels},
        "spec": {"pod": {"containers": [{"name": "app", "image": "nginx"}]}},
    }
    pods.shadows["shop-home"].store.upsert(shadow)
    await pods.reconcile("shop/web")
    pods.shadows["shop-home"].store.delete("shop-home/web")  # deleted on the provider
    await pods.reconcile("shop/web")
    assert provider.created == [SHADOW_PODS, SHADOW_PODS], "asked for again once seen gone"


class NameTaken(Provider):
    """A provider where the ShadowPod exists already (ours: the cache is behind)."""

    async def create(self, path: str, body: JSON) -> JSON:
        self.created.append(path)
        raise AlreadyExists(409, "AlreadyExists", "shadowpods.offloading.liqo.io web exists")

    async def get(self, path: str, params: Any = None) -> JSON:
        labels = {ORIGIN_LABEL: "home", DESTINATION_LABEL: "far", NODENAME_LABEL: "far"}
        return {"metadata": {"name": "web", "namespace": "shop-home", "labels": labels}}


async def test_a_shadow_pod_found_made_already_waits_for_its_event() -> None:
    pods = synced(offloading_shop(Home(), NameTaken()))
    pods.local.store.upsert(json_copy(LOCAL_POD))
    result = await pods.reconcile("shop/web")  # was: UnboundLocalError, retried with back-off
    assert result.requeue_after is None


async def test_a_shadow_pod_coming_back_as_it_was_created_is_not_reconciled_again() -> None:
    """Its ADDED event, of the very version its creation was answered with, its local pod
    unchanged but for its status: nothing for the main reconcile, and the Pod, cached before
    its ShadowPod, handed to the status queue. Anything else (another version, its local pod
    changed meanwhile) goes to the main reconcile, as before."""
    labels = {ORIGIN_LABEL: "home", DESTINATION_LABEL: "far", NODENAME_LABEL: "far"}
    metadata = {"name": "web", "namespace": "shop-home", "uid": "s", "labels": labels}

    def shadow(version: str) -> JSON:
        return {
            "metadata": {**metadata, "resourceVersion": version},
            "spec": {"pod": {"containers": [{"name": "app", "image": "nginx"}]}},
        }

    async def created(pods: PodReflector) -> None:
        pods.local.store.upsert(json_copy(LOCAL_POD))
        await pods.reconcile("shop/web")  # created, answered as version 2 (Provider.create)

    pods = synced(offloading_shop(Home(), Patched()))
    await created(pods)
    running = json_copy(LOCAL_POD)
    running["metadata"]["resourceVersion"] = "3"
    running["status"] = {"phase": "Running"}  # its status written meanwhile
    pods.local.store.upsert(running)
    pods._on_shadow_pod(ADDED, shadow("2"), None)
    assert queued(pods) == (0, 0)
    assert pods._created_unseen == {}, "seen: a ShadowPod gone after this is asked for again"

    pods = synced(offloading_shop(Home(), Patched()))
    await created(pods)
    pods.remote["shop-home"].store.upsert({"metadata": {**metadata, "uid": "p"}})
    pods._on_shadow_pod(ADDED, shadow("2"), None)
    assert queued(pods) == (0, 1), "the Pod cached first is the status queue's"

    pods = synced(offloading_shop(Home(), Patched()))
    await created(pods)
    pods._on_shadow_pod(ADDED, shadow("5"), None)  # changed since its creation
    assert queued(pods) == (1, 0)

    pods = synced(offloading_shop(Home(), Patched()))
    await created(pods)
    relabelled = json_copy(LOCAL_POD)
    relabelled["metadata"] |= {"resourceVersion": "3", "labels": {"tier": "front"}}
    pods.local.store.upsert(relabelled)
    pods._on_shadow_pod(ADDED, shadow("2"), None)
    assert queued(pods) == (1, 0), "its local pod changed: the ShadowPod may need a patch"


class RefusingProvider(PatchedProvider):
    """Its webhook refuses every change of a ShadowPod, as a provider whose scheduling rules
    allow not a toleration the VirtualNode's offloadingPatch now adds."""

    async def merge_patch(self, path: str, body: JSON) -> JSON:
        self.patched.append(body)
        raise ApiError(403, "Forbidden", 'admission webhook "shadowpod.validate.liqo.io" denied')


class Warnings:
    def __init__(self) -> None:
        self.said: list[tuple[str, str, str]] = []

    async def record(self, obj: Any, event_type: str, reason: str, message: str) -> None:
        self.said.append((event_type, reason, message))


async def test_a_change_the_provider_refuses_is_said_once_and_tried_again_in_a_while() -> None:
    """Each try would be refused again: not retried on the work queue's back-off with nothing
    said (as it was), but said once on the pod, and asked again after REFUSED_RETRY."""
    shadow = web_shadow_pod(OURS, {})  # without the pod's label app=web: a patch is due
    home = SlowHome()
    provider = RefusingProvider([shadow], [])
    pods = offloading_shop(home, provider)
    warnings = Warnings()
    pods.events = warnings  # type: ignore[assignment]
    async with reflecting(pods):
        provider.listed.set()
        home.listed.set()
        await until_some(provider.patched)  # the reflector's own reconcile, refused
        results = [await pods.reconcile("shop/web") for _ in range(2)]
    assert results == [Result(requeue_after=REFUSED_RETRY, failed=True)] * 2
    assert len(provider.patched) == 3
    assert warnings.said == [
        (
            "Warning",
            REASON_CHANGE_REFUSED,
            "cluster far refused a change of this pod, which runs on there as it was: "
            'admission webhook "shadowpod.validate.liqo.io" denied',
        )
    ]


async def test_a_pod_asking_for_host_namespaces_is_told_it_runs_without_them() -> None:
    """Liqo runs it without them and says nothing: its owner sees a pod IP where it expected
    its node's, and no word of why."""
    provider = Patched()
    pods = synced(offloading_shop(Home(), provider))
    warnings = Warnings()
    pods.events = warnings  # type: ignore[assignment]
    host_network = json_copy(LOCAL_POD)
    host_network["spec"].update(hostNetwork=True, hostPID=True, hostIPC=False)
    pods.local.store.upsert(host_network)
    await pods.reconcile("shop/web")
    assert provider.created == [SHADOW_PODS]
    [(event_type, reason, message)] = warnings.said
    assert (event_type, reason) == ("Warning", "HostNamespacesNotOffloaded")
    assert "runs in cluster far without hostNetwork, hostPID:" in message

    plain = Patched()
    pods = synced(offloading_shop(Home(), plain))
    pods.events = warnings  # type: ignore[assignment]
    pods.local.store.upsert(json_copy(LOCAL_POD))
    await pods.reconcile("shop/web")
    assert plain.created == [SHADOW_PODS]
    assert len(warnings.said) == 1, "a pod asking for none is told nothing"
