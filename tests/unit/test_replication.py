"""What a provider, not trusted, can make the consumer's replication do: hold no more of our
twins there than their budget, not hold the workers every provider shares while it does not
answer, and not have their statuses copied home faster than a pace."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import orjson
import pytest

from vk.api.authentication import ResourceSlice
from vk.api.constants import (
    PROVIDER_STATUS_BURST,
    PROVIDER_STATUS_INTERVAL_SECONDS,
    REMOTE_CLUSTER_ID_LABEL,
    control_plane_secret_name,
    tenant_namespace,
)
from vk.api.offloading import NamespaceMap
from vk.controllers.replication import (
    FINALIZER,
    IDENTITIES,
    IDENTITY_FINALIZER,
    REASON_REFUSED,
    REFUSED_RETRY,
    RETRY,
    TWIN_MAX_BODY_BYTES,
    TWINS_MAX_BYTES,
    TWINS_MAX_OBJECTS,
    UNANSWERED_PAUSE,
    ProviderLink,
    Replicator,
    TwinBudget,
)
from vk.kube.client import ApiError, NotFound
from vk.kube.controller import Result
from vk.kube.informer import Informer, Store
from vk.kube.workqueue import TokenBuckets

CONSUMER = "rome"
SLICES = ResourceSlice.PLURAL


def twin(name: str, size: int, version: int = 1) -> dict[str, Any]:
    """A twin whose JSON is about `size` bytes (its status padded)."""
    return {
        "metadata": {"name": name, "namespace": "t", "resourceVersion": str(version)},
        "status": {"padding": "x" * size},
    }


def three_twins_taken(budget: TwinBudget) -> Store:
    """A cache that took three twins of 3 KB, each admitted by `budget`."""
    cached = Store()
    for name in ("a", "b", "c"):
        obj = twin(name, 3000)
        assert budget(obj, cached)
        cached.upsert(obj)
    return cached


def test_twins_are_taken_while_their_json_is_within_the_budget() -> None:
    budget = TwinBudget("naples", SLICES, max_bytes=10_000)
    cached = three_twins_taken(budget)
    assert not budget(twin("d", 3000), cached)  # a fourth would make 12 KB
    # A twin held grows past the budget: refused (the informer drops it); shrunk, it is fine.
    assert not budget(twin("a", 5000, version=2), cached)
    assert budget(twin("a", 100, version=3), cached)


def test_a_twin_gone_frees_its_part_of_the_budget() -> None:
    budget = TwinBudget("naples", SLICES, max_bytes=10_000)
    cached = three_twins_taken(budget)
    cached.delete("t/a")
    assert budget(twin("d", 3000), cached)


class TwinServer:
    """A provider's API server listing `objects` in one page, then watching in silence."""

    name = "provider"

    def __init__(self, objects: list[dict[str, Any]]) -> None:
        self.objects = objects

    async def current_objects(self, path, params=None, *, timeout_seconds=300):  # type: ignore[no-untyped-def]
        # As the client decodes each: a copy of its own.
        yield [orjson.loads(orjson.dumps(o)) for o in self.objects], "1"

    async def watch(self, path, params=None, *, timeout_seconds=300):  # type: ignore[no-untyped-def]
        await asyncio.sleep(3600)
        yield


async def test_a_provider_listing_huge_twins_has_no_more_than_the_budget_held() -> None:
    # Twins of 900 KB each (under the link's cap on a body): the old informer held them all.
    server = TwinServer([twin(f"big-{i}", 900_000) for i in range(8)])
    link = ProviderLink("naples", server, CONSUMER)  # type: ignore[arg-type]
    informer = link.informers[SLICES]
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            await informer.synced.wait()
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    held = informer.store.objects()
    assert 0 < len(held) < 8
    assert sum(len(orjson.dumps(o)) for o in held) <= TWINS_MAX_BYTES
    assert informer.max_objects == TWINS_MAX_OBJECTS
    assert TWIN_MAX_BODY_BYTES < 8 * 1024 * 1024  # below the client's provider default


class FrozenProvider:
    """A provider's client whose every write times out, as one that accepts TCP and never
    answers does after the client's timeout."""

    name = "provider"

    def __init__(self) -> None:
        self.writes = 0

    async def apply(self, path: str, body: Any, **_: Any) -> Any:
        self.writes += 1
        raise TimeoutError

    async def delete(self, path: str, **_: Any) -> Any:
        self.writes += 1
        raise TimeoutError

    async def close(self) -> None:
        pass


class AnsweringProvider(FrozenProvider):
    async def apply(self, path: str, body: Any, **_: Any) -> Any:
        self.writes += 1
        return body


class Home:
    name = "home"

    async def set_finalizer(self, *_: Any, **__: Any) -> bool:
        return False

    async def merge_patch(self, path: str, patch: Any) -> Any:
        return patch


def local_slice(name: str, provider: str) -> dict[str, Any]:
    return {
        "apiVersion": ResourceSlice.group_version(),
        "kind": ResourceSlice.KIND,
        "metadata": {
            "name": name,
            "namespace": tenant_namespace(provider),
            "uid": f"uid-{name}",
            "labels": {REMOTE_CLUSTER_ID_LABEL: provider, "liqo.io/replication": "true"},
        },
        "spec": {"class": "default"},
    }


def linked(replicator: Replicator, provider: str, client: Any) -> Any:
    link = ProviderLink(provider, client, CONSUMER)
    for informer in link.informers.values():
        informer.synced.set()
    replicator.links[provider] = link
    return link


async def test_a_provider_that_does_not_answer_is_not_asked_again_for_a_while() -> None:
    replicator = Replicator(Home(), CONSUMER)  # type: ignore[arg-type]
    frozen, answering = FrozenProvider(), AnsweringProvider()
    linked(replicator, "naples", frozen)
    linked(replicator, "venice", answering)
    slices: Informer = replicator.local[SLICES]
    for name, provider in (("n1", "naples"), ("n2", "naples"), ("v1", "venice")):
        slices.store.upsert(local_slice(name, provider))

    first = await replicator.reconcile(f"{SLICES}|{tenant_namespace('naples')}/n1")
    assert first == Result(requeue_after=UNANSWERED_PAUSE)
    # Its other keys wait without asking it (each would hold a worker for the timeout).
    second = await replicator.reconcile(f"{SLICES}|{tenant_namespace('naples')}/n2")
    assert second.requeue_after is not None
    assert 0 < second.requeue_after <= UNANSWERED_PAUSE
    assert frozen.writes == 1
    # Another provider's keys go on.
    assert await replicator.reconcile(f"{SLICES}|{tenant_namespace('venice')}/v1") == Result()
    assert answering.writes == 1


class StatusCopies(Home):
    def __init__(self) -> None:
        self.statuses: list[Any] = []

    async def merge_patch(self, path: str, patch: Any) -> Any:
        if path.endswith("/status"):
            self.statuses.append(patch["status"])
        return patch


async def test_a_provider_changing_a_twins_status_on_and_on_has_it_copied_home_at_a_pace() -> None:
    """The attack: the provider writes our twins' statuses as it likes, and flips one's on and
    on, each change a status written home. Past a burst, one is copied every
    PROVIDER_STATUS_INTERVAL_SECONDS, as the provider has it then: its last word is not lost."""
    now = [0.0]
    home = StatusCopies()
    replicator = Replicator(home, CONSUMER)  # type: ignore[arg-type]
    replicator.status_pace = TokenBuckets(
        1 / PROVIDER_STATUS_INTERVAL_SECONDS, PROVIDER_STATUS_BURST, clock=lambda: now[0]
    )
    link = linked(replicator, "naples", AnsweringProvider())
    replicator.local[SLICES].store.upsert(local_slice("n1", "naples"))
    key = f"{SLICES}|{tenant_namespace('naples')}/n1"
    twin = local_slice("n1", "naples")
    twin["metadata"]["namespace"] = tenant_namespace(CONSUMER)
    retries = []
    for flip in range(30):
        reason = f"flip {flip}"
        twin["status"] = {"conditions": [{"type": "Resources", "reason": reason}]}
        link.informers[SLICES].store.upsert(dict(twin))
        retries.append((await replicator.reconcile(key)).requeue_after)
    assert len(home.statuses) == PROVIDER_STATUS_BURST
    assert retries[:PROVIDER_STATUS_BURST] == [None] * PROVIDER_STATUS_BURST
    assert all(r == pytest.approx(PROVIDER_STATUS_INTERVAL_SECONDS) for r in retries[10:])
    now[0] += PROVIDER_STATUS_INTERVAL_SECONDS
    assert (await replicator.reconcile(key)).requeue_after is None
    assert home.statuses[-1]["conditions"][0]["reason"] == "flip 29"


async def test_each_providers_objects_are_served_in_turn() -> None:
    replicator = Replicator(Home(), CONSUMER)  # type: ignore[arg-type]
    for i in range(100):
        replicator.controller.enqueue(f"{SLICES}|{tenant_namespace('naples')}/n{i}")
    replicator.controller.enqueue(f"{SLICES}|{tenant_namespace('venice')}/v1")
    queue = replicator.controller.queue
    served = [await queue.get() for _ in range(2)]
    assert served[1] == f"{SLICES}|{tenant_namespace('venice')}/v1"


def test_a_new_body_under_a_version_already_sent_is_measured_again() -> None:
    """A provider sent a small twin, then a large body under the same resourceVersion: the
    size remembered for that version let it in."""
    budget = TwinBudget("naples", SLICES, max_bytes=10_000)
    cached = Store()
    small = twin("a", 100)
    assert budget(small, cached)
    cached.upsert(small)
    assert not budget(twin("a", 50_000), cached)  # same name, same version 1


def test_a_twin_that_cannot_be_encoded_is_refused_without_raising() -> None:
    nested: Any = {}
    for _ in range(300):  # orjson decodes 1024 levels, and encodes 255
        nested = {"n": nested}
    deep = {"metadata": {"name": "deep", "namespace": "t", "resourceVersion": "1"}, "x": nested}
    assert not TwinBudget("naples", SLICES)(deep, Store())


class DeletingProvider(AnsweringProvider):
    """A provider holding our twin `n1` (past the cache's budget: not cached)."""

    def __init__(self) -> None:
        super().__init__()
        self.held = {"n1"}

    async def delete(self, path: str, **_: Any) -> Any:
        self.writes += 1
        name = path.rsplit("/", 1)[1]
        if name not in self.held:
            raise NotFound(404, "NotFound", path)
        self.held.discard(name)
        return {}


class Finalizers(Home):
    def __init__(self) -> None:
        self.removed: list[str] = []

    async def set_finalizer(self, path: str, obj: Any, finalizer: str, *, present: bool) -> bool:
        if not present:
            self.removed.append(obj["metadata"]["name"])
        return True


async def test_a_twin_the_cache_does_not_hold_is_deleted_with_its_local_object() -> None:
    """A twin kept out of the cache (past its budget) was left on the provider when its local
    object was deleted: its finalizer was removed at once."""
    home = Finalizers()
    replicator = Replicator(home, CONSUMER)  # type: ignore[arg-type]
    provider = DeletingProvider()
    linked(replicator, "naples", provider)
    deleting = local_slice("n1", "naples")
    deleting["metadata"]["deletionTimestamp"] = "2026-11-29T18:00:00Z"
    replicator.local[SLICES].store.upsert(deleting)
    key = f"{SLICES}|{tenant_namespace('naples')}/n1"
    assert await replicator.reconcile(key) == Result(requeue_after=RETRY)
    assert provider.held == set()
    assert home.removed == []
    assert await replicator.reconcile(key) == Result()  # gone there: let go here
    assert home.removed == ["n1"]


class ResettingProvider(FrozenProvider):
    async def apply(self, path: str, body: Any, **_: Any) -> Any:
        self.writes += 1
        raise ConnectionResetError("a pooled connection the server had closed")


async def test_a_connection_reset_is_an_error_of_the_moment_not_a_pause_of_the_provider() -> None:
    """A reset fails at once, holding no worker: retried with the queue's back-off, not after
    30 s (a stale pooled connection would have held the provider's objects that long)."""
    replicator = Replicator(Home(), CONSUMER)  # type: ignore[arg-type]
    link = linked(replicator, "naples", ResettingProvider())
    replicator.local[SLICES].store.upsert(local_slice("n1", "naples"))
    with pytest.raises(ConnectionResetError):
        await replicator.reconcile(f"{SLICES}|{tenant_namespace('naples')}/n1")
    assert link.unanswered_until == 0.0


class RefusingProvider(AnsweringProvider):
    """A provider whose admission refuses our twins while `refusal` is set."""

    def __init__(self) -> None:
        super().__init__()
        self.refusal: ApiError | None = ApiError(
            403,
            "Forbidden",
            'admission webhook "resourceslice.validate.vk.io" denied the request: rome has the '
            "128 resourceslices this provider keeps for it (at most 128): delete one first",
        )

    async def apply(self, path: str, body: Any, **_: Any) -> Any:
        self.writes += 1
        if self.refusal is not None:
            raise self.refusal
        return body


class Said:
    """The Events the replicator records."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str, str, str]] = []

    async def record(self, obj: Any, event_type: str, reason: str, message: str) -> None:
        self.events.append((obj["metadata"]["name"], event_type, reason, message))


async def test_a_twin_the_provider_refuses_to_store_is_said_once_and_asked_again_later() -> None:
    replicator = Replicator(Home(), CONSUMER)  # type: ignore[arg-type]
    said = Said()
    replicator.events = said  # type: ignore[assignment]
    provider = RefusingProvider()
    linked(replicator, "naples", provider)
    replicator.local[SLICES].store.upsert(local_slice("n1", "naples"))
    key = f"{SLICES}|{tenant_namespace('naples')}/n1"
    for _ in range(3):
        assert await replicator.reconcile(key) == Result(requeue_after=REFUSED_RETRY)
    assert said.events == [
        (
            "n1",
            "Warning",
            REASON_REFUSED,
            "cluster naples refused to store this ResourceSlice: admission webhook "
            '"resourceslice.validate.vk.io" denied the request: rome has the 128 resourceslices '
            "this provider keeps for it (at most 128): delete one first",
        )
    ]
    # Let in once there is room; refused again later, said again.
    provider.refusal, refusal = None, provider.refusal
    assert await replicator.reconcile(key) == Result()
    provider.refusal = refusal
    replicator.local[SLICES].store.upsert(
        {**local_slice("n1", "naples"), "spec": {"class": "other"}}
    )
    assert await replicator.reconcile(key) == Result(requeue_after=REFUSED_RETRY)
    assert len(said.events) == 2
    # An error of the provider's own is no refusal, nor a binding not seen yet: retried at
    # the queue's pace.
    for error in (
        ApiError(500, "InternalError", "etcd is down"),
        ApiError(
            403,
            "Forbidden",
            'resourceslices.authentication.liqo.io "n1" is forbidden: User '
            '"vk-control-plane:rome" cannot patch resource "resourceslices"',
        ),
    ):
        provider.refusal = error
        with pytest.raises(ApiError):
            await replicator.reconcile(key)
    assert len(said.events) == 2
    # Its schema's refusal is one.
    provider.refusal = ApiError(422, "Invalid", 'ResourceSlice "n1" is invalid: spec.class')
    assert await replicator.reconcile(key) == Result(requeue_after=REFUSED_RETRY)
    assert said.events[-1][3] == (
        'cluster naples refused to store this ResourceSlice: ResourceSlice "n1" is invalid: '
        "spec.class"
    )


async def test_a_namespace_unoffloaded_raises_no_alarm_while_the_provider_catches_up() -> None:
    """Every unoffload leaves the provider's status a moment behind the spec: that is no
    misbehaving provider (no Event, nothing counted), and its word is copied home as it is.
    A namespace it then reports that this cluster never offloaded is one."""
    home = StatusCopies()
    replicator = Replicator(home, CONSUMER)  # type: ignore[arg-type]
    said = Said()
    replicator.events = said  # type: ignore[assignment]
    link = linked(replicator, "naples", AnsweringProvider())
    maps = NamespaceMap.PLURAL
    local = {
        **local_slice("m1", "naples"),
        "apiVersion": NamespaceMap.group_version(),
        "kind": NamespaceMap.KIND,
        "spec": {"desiredMapping": {"shop": "shop"}},
    }
    accepted = {"shop": {"remoteNamespace": "shop", "phase": "Accepted"}}
    twin = {**local, "metadata": {**local["metadata"], "namespace": tenant_namespace(CONSUMER)}}
    key = f"{maps}|{tenant_namespace('naples')}/m1"

    async def provider_says(current: dict[str, Any]) -> None:
        link.informers[maps].store.upsert({**twin, "status": {"currentMapping": current}})
        assert await replicator.reconcile(key) == Result()
        if home.statuses:
            local["status"] = home.statuses[-1]  # as the local cache then has it
            replicator.local[maps].store.upsert(dict(local))

    replicator.local[maps].store.upsert(dict(local))
    await provider_says(accepted)
    local["spec"] = {}  # unoffloaded
    replicator.local[maps].store.upsert(dict(local))
    await provider_says(accepted)  # not answered yet
    assert said.events == []
    assert home.statuses == [{"currentMapping": accepted}]
    await provider_says({"shop": {"remoteNamespace": "shop", "phase": "Terminating"}})
    await provider_says({})
    assert said.events == []
    assert home.statuses[-1] == {"currentMapping": {"shop": None}}
    # Gone from the status home, it is not trusted again.
    await provider_says(accepted)
    assert [(reason, "shop -> shop" in message) for _, _, reason, message in said.events] == [
        ("UntrustedMapping", True)
    ]


class FinalizerWrites(Home):
    """Home's API server as the finalizers written there: (name, finalizer, present)."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, str, bool]] = []

    async def set_finalizer(self, path: str, obj: Any, finalizer: str, *, present: bool) -> bool:
        self.writes.append((obj["metadata"]["name"], finalizer, present))
        return True


def control_plane_identity(provider: str, *, deleting: bool = False) -> dict[str, Any]:
    metadata: dict[str, Any] = {
        "name": control_plane_secret_name(provider),
        "namespace": tenant_namespace(provider),
        "uid": f"uid-identity-{provider}",
        "labels": {REMOTE_CLUSTER_ID_LABEL: provider},
    }
    if deleting:
        metadata["deletionTimestamp"] = "2026-12-07T19:00:00Z"
    return {"metadata": metadata, "data": {}}


async def test_an_identity_outlives_what_was_replicated_through_it() -> None:
    """A tenant namespace deleted deletes its control-plane identity with its slices: the
    slices, which need it to let their twins go, waited for ever, the namespace with them."""
    home = FinalizerWrites()
    replicator = Replicator(home, CONSUMER)  # type: ignore[arg-type]
    identity_key = (
        f"{IDENTITIES}|{tenant_namespace('naples')}/{control_plane_secret_name('naples')}"
    )
    replicator.identities.store.upsert(control_plane_identity("naples"))
    await replicator.reconcile(identity_key)
    assert home.writes == [(control_plane_secret_name("naples"), IDENTITY_FINALIZER, True)]

    # Deleted while a slice replicated through it waits for its twin: kept.
    home.writes.clear()
    replicated = local_slice("n1", "naples")
    replicated["metadata"]["finalizers"] = [FINALIZER]
    replicator.local[SLICES].store.upsert(replicated)
    elsewhere = local_slice("other", "florence")
    elsewhere["metadata"]["finalizers"] = [FINALIZER]
    replicator.local[SLICES].store.upsert(elsewhere)
    replicator.identities.store.upsert(control_plane_identity("naples", deleting=True))
    await replicator.reconcile(identity_key)
    assert home.writes == []

    # The slice gone: looked at again, and let go (another provider's slice holds nothing).
    replicator.local[SLICES].store.delete(f"{tenant_namespace('naples')}/n1")
    await replicator.reconcile(f"{SLICES}|{tenant_namespace('naples')}/n1")
    assert await asyncio.wait_for(replicator.controller.queue.get(), 1) == identity_key
    await replicator.reconcile(identity_key)
    assert home.writes == [(control_plane_secret_name("naples"), IDENTITY_FINALIZER, False)]


async def test_a_secret_that_is_no_identity_is_never_given_the_finalizer() -> None:
    home = FinalizerWrites()
    replicator = Replicator(home, CONSUMER)  # type: ignore[arg-type]
    impostor = control_plane_identity("naples")
    impostor["metadata"]["namespace"] = "team-a"  # labelled so by someone, elsewhere
    replicator.identities.store.upsert(impostor)
    await replicator.reconcile(f"{IDENTITIES}|team-a/{control_plane_secret_name('naples')}")
    assert home.writes == []
