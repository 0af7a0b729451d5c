"""The Event reflector finds the local pod an Event is about in the pod reflector's caches when
they know it, and reads both pods only when they do not."""

from __future__ import annotations

import asyncio
import dataclasses
import types
from typing import Any

import pytest

from tests.unit.reflectors import reflector_options
from vk.kube.client import JSON, NotFound
from vk.kube.informer import Informer
from vk.kube.workqueue import TokenBuckets
from vk.reflection.event.events import (
    EVENT_WRITE_INTERVAL_SECONDS,
    MAX_EVENTS_PER_OBJECT,
    EventReflector,
)
from vk.reflection.forge.meta import ReflectionPolicy
from vk.reflection.generic import LOCAL as LOCAL_SIDE
from vk.reflection.generic import NamespaceReflection
from vk.reflection.workload.pods import PodReflector

LOCAL, REMOTE = "shop", "shop-home"


class ReadCounting:
    """A client whose reads are counted and answer NotFound."""

    def __init__(self) -> None:
        self.reads: list[str] = []

    async def get(self, path: str, params: Any = None) -> JSON:
        self.reads.append(path)
        raise NotFound(404, "NotFound", "not found")


def reflector(client: ReadCounting, offloaded_pod: Any) -> EventReflector:
    return EventReflector(reflector_options(client), ReflectionPolicy.DENY_LIST, offloaded_pod)


def event(uid: str = "remote-uid") -> JSON:
    return {
        "metadata": {"name": "web.1", "namespace": REMOTE},
        "involvedObject": {"kind": "Pod", "name": "web", "namespace": REMOTE, "uid": uid},
    }


def local_object(events: EventReflector, client: ReadCounting) -> JSON | None:
    state = NamespaceReflection(LOCAL, REMOTE, client, [])  # type: ignore[arg-type]
    return asyncio.run(events._local_object(state, event()))


def test_an_event_about_a_pod_of_this_node_costs_no_read() -> None:
    asked = []

    def offloaded_pod(*args: str) -> JSON | None:
        asked.append(args)
        return {"metadata": {"name": "web", "namespace": LOCAL, "uid": "local-uid"}}

    client = ReadCounting()
    found = local_object(reflector(client, offloaded_pod), client)
    assert found == {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web", "namespace": LOCAL, "uid": "local-uid"},
    }
    assert asked == [(LOCAL, "web", REMOTE, "web", "remote-uid")]
    assert client.reads == []


def test_a_pod_the_caches_do_not_know_is_read_on_both_sides() -> None:
    client = ReadCounting()
    assert local_object(reflector(client, lambda *_: None), client) is None
    assert client.reads == [f"/api/v1/namespaces/{REMOTE}/pods/web"]  # then NotFound: none


def test_the_pod_reflector_knows_only_its_own_synced_pods_of_that_uid() -> None:
    client: Any = object()
    pods = PodReflector(
        client,
        node_name="far",
        node_ip="10.0.0.1",
        home_cluster_id="home",
        remote_cluster_id="far",
        mappings=lambda: {LOCAL: REMOTE},
        mapped=asyncio.Event(),
        workers=1,
        events=None,  # type: ignore[arg-type]
    )
    local = {"metadata": {"name": "web", "namespace": LOCAL, "uid": "local-uid"}}
    pods.local.store.upsert(local)
    remote = Informer(client, "v1", "pods", namespace=REMOTE)
    remote.store.upsert({"metadata": {"name": "web", "namespace": REMOTE, "uid": "remote-uid"}})
    pods.remote[REMOTE] = remote
    pods.reflected[LOCAL] = (REMOTE, client)

    assert pods.offloaded_pod(LOCAL, "web", REMOTE, "web", "remote-uid") is None  # not synced
    remote.synced.set()
    assert pods.offloaded_pod(LOCAL, "web", REMOTE, "web", "remote-uid") is local
    assert pods.offloaded_pod(LOCAL, "web", REMOTE, "web", "") is local
    assert pods.offloaded_pod(LOCAL, "web", REMOTE, "web", "another-uid") is None  # re-created
    assert pods.offloaded_pod(LOCAL, "db", REMOTE, "db", "") is None  # not this node's
    assert pods.offloaded_pod("other", "web", REMOTE, "web", "") is None  # not mapped there


class Home:
    """Stores the Events created, each with a resourceVersion."""

    def __init__(self) -> None:
        self.created: list[JSON] = []

    async def create(self, path: str, body: JSON) -> JSON:
        stored = {**body, "metadata": {**body["metadata"], "uid": "e", "resourceVersion": "9"}}
        self.created.append(stored)
        return stored


def test_a_reflected_event_is_written_once_and_its_echo_wakes_nothing() -> None:
    """Before its informer shows it, the Event written stands for it (a second reconcile
    creates no other); its own copy coming back needs no reconcile (one per pod, before)."""
    home: Any = Home()
    events = EventReflector(
        reflector_options(home),
        ReflectionPolicy.DENY_LIST,
        lambda *_: {"metadata": {"name": "web", "namespace": LOCAL, "uid": "local-uid"}},
    )
    local_events = Informer(home, "v1", "events", namespace=LOCAL)
    remote_events = Informer(home, "v1", "events", namespace=REMOTE)
    remote_events.store.upsert(
        {**event(), "reason": "Scheduled", "message": "assigned", "type": "Normal", "count": 1}
    )
    for informer in (local_events, remote_events):
        informer.synced.set()
    state = NamespaceReflection(LOCAL, REMOTE, home, [local_events, remote_events])
    events.namespaces[LOCAL] = state

    asyncio.run(events.reconcile(f"{LOCAL}/web.1"))
    asyncio.run(events.reconcile(f"{LOCAL}/web.1"))
    assert len(home.created) == 1, "created again before its informer showed it"
    local_events.store.upsert(home.created[0])
    events.on_event(state, LOCAL_SIDE, "ADDED", home.created[0])
    assert len(events.controller.queue) == 0, "our own write coming back"
    events.on_event(state, LOCAL_SIDE, "DELETED", home.created[0])
    assert len(events.controller.queue) == 1, "deleted by another: made again"


class Writes(Home):
    """Stores the Events created, and the patches of the first, each a new version."""

    def __init__(self) -> None:
        super().__init__()
        self.patched: list[JSON] = []

    async def merge_patch(self, path: str, body: JSON) -> JSON:
        self.patched.append(body)
        stored = self.created[0]
        version = str(10 + len(self.patched))
        return {**stored, **body, "metadata": {**stored["metadata"], "resourceVersion": version}}


async def test_a_provider_changing_its_events_on_and_on_has_them_written_home_at_a_pace() -> None:
    """The attack: the provider writes its Events as it likes, and bumps one's count on and
    on, each change a write home. Past MAX_EVENTS_PER_OBJECT about one object, one is written
    every EVENT_WRITE_INTERVAL_SECONDS, as the provider has it then."""
    now = [0.0]
    home: Any = Writes()
    events = EventReflector(
        reflector_options(home),
        ReflectionPolicy.DENY_LIST,
        lambda *_: {"metadata": {"name": "web", "namespace": LOCAL, "uid": "local-uid"}},
    )
    events.pace = TokenBuckets(
        1 / EVENT_WRITE_INTERVAL_SECONDS, MAX_EVENTS_PER_OBJECT, clock=lambda: now[0]
    )
    local_events = Informer(home, "v1", "events", namespace=LOCAL)
    remote_events = Informer(home, "v1", "events", namespace=REMOTE)
    for informer in (local_events, remote_events):
        informer.synced.set()
    events.namespaces[LOCAL] = NamespaceReflection(
        LOCAL, REMOTE, home, [local_events, remote_events]
    )

    def bumped(count: int) -> JSON:
        remote = {**event(), "reason": "BackOff", "message": "back-off", "type": "Warning"}
        return {
            **remote,
            "metadata": {**remote["metadata"], "resourceVersion": str(count)},
            "count": count,
        }

    retries = []
    for count in range(1, 61):
        remote_events.store.upsert(bumped(count))
        retries.append((await events.reconcile(f"{LOCAL}/web.1")).requeue_after)
    assert len(home.created) + len(home.patched) == MAX_EVENTS_PER_OBJECT
    assert all(r == pytest.approx(EVENT_WRITE_INTERVAL_SECONDS) for r in retries[25:])
    now[0] += EVENT_WRITE_INTERVAL_SECONDS
    assert (await events.reconcile(f"{LOCAL}/web.1")).requeue_after is None
    assert home.patched[-1]["count"] == 60


class Recorder:
    """The Events the reflector says, as (involved kind/name, type, reason, message)."""

    def __init__(self) -> None:
        self.said: list[tuple[str, str, str, str]] = []

    async def record(self, involved: JSON, event_type: str, reason: str, message: str) -> None:
        self.said.append(
            (f"{involved['kind']}/{involved['metadata']['name']}", event_type, reason, message)
        )


def provider_event(name: str, about: str, kind: str = "Pod") -> JSON:
    return {
        "metadata": {"name": name, "namespace": REMOTE, "resourceVersion": "1"},
        "involvedObject": {"apiVersion": "v1", "kind": kind, "name": about, "namespace": REMOTE},
        "reason": "Pulled",
        "message": "pulled",
    }


async def held_of(events: list[JSON], recorder: Recorder) -> list[str]:
    """The names of `events` the remote Events' cache holds once each came to it."""
    reflector = EventReflector(
        dataclasses.replace(reflector_options(None), events=recorder),  # type: ignore[arg-type]
        ReflectionPolicy.DENY_LIST,
    )
    provider: Any = types.SimpleNamespace(name="provider")
    _, remote_events = reflector.informers(LOCAL, REMOTE, provider)
    for remote_event in events:
        remote_events._take(remote_events._kept(remote_event))
    await asyncio.sleep(0)  # the Events said
    return sorted(obj["metadata"]["name"] for obj in remote_events.store.objects())


async def test_a_provider_holds_no_more_than_25_events_about_one_object_in_a_consumer() -> None:
    """A provider that makes Events about an offloaded pod without end makes the virtual
    kubelet hold 25 of them, and copy no more home; it is said once, on the virtual node."""
    recorder = Recorder()
    flood = [provider_event(f"web.{i:03}", "web") for i in range(MAX_EVENTS_PER_OBJECT + 10)]
    updated = {**flood[0], "metadata": {**flood[0]["metadata"], "resourceVersion": "2"}}
    held = await held_of([*flood, updated, provider_event("db.1", "db")], recorder)
    assert held == sorted(["db.1", *(f"web.{i:03}" for i in range(MAX_EVENTS_PER_OBJECT))])
    assert recorder.said == [
        (
            "Node/far",
            "Warning",
            "ProviderEventsRefused",
            f"Events of {REMOTE} not copied home: the provider made more than "
            f"{MAX_EVENTS_PER_OBJECT} Events about one object",
        )
    ]


async def test_a_twin_namespace_holds_a_bounded_number_of_provider_events(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("vk.reflection.event.events.MAX_EVENTS_PER_NAMESPACE", 3)
    recorder = Recorder()
    held = await held_of([provider_event(f"e{i}", f"pod-{i}") for i in range(5)], recorder)
    assert held == ["e0", "e1", "e2"]
    assert [said[2:] for said in recorder.said] == [
        (
            "ProviderEventsRefused",
            f"Events of {REMOTE} not copied home: the provider holds more than 3 Events there",
        )
    ]


async def test_events_about_objects_vk_does_not_reflect_are_not_held_nor_complained_of() -> None:
    recorder = Recorder()
    events = [
        provider_event("quota.1", "quota", kind="ResourceQuota"),
        provider_event("ns.1", REMOTE, kind="Namespace"),
        {**provider_event("odd.1", "web"), "involvedObject": "not an object"},
    ]
    assert await held_of(events, recorder) == []
    assert recorder.said == []
