"""The generic reflector's pure parts: which copy of a remote object is newer, and the body
that replaces a remote object with the local truth."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from tests.unit.reflectors import reflector_options
from vk.api.constants import DESTINATION_LABEL, ORIGIN_LABEL, SERVICE_ACCOUNT_NAME_LABEL
from vk.kube.client import ApiError
from vk.kube.controller import Result
from vk.kube.informer import ADDED, DELETED, MODIFIED, Informer
from vk.reflection.configuration.configmaps import ConfigMapReflector
from vk.reflection.configuration.secrets import SecretReflector
from vk.reflection.exposition.services import ServiceReflector
from vk.reflection.forge.meta import (
    ReflectionPolicy,
    RemoteObjectAsRead,
    is_owned_by_us,
    ownership_labels,
)
from vk.reflection.forge.pods import remote_root_ca_configmap_name
from vk.reflection.generic import (
    LOCAL,
    REASON_FAILED,
    REASON_LESSENED,
    REFUSED_RETRY,
    REMOTE,
    NamespaceReflection,
    RecentWrites,
    replacement,
    rv_newer,
)


def versioned(rv: str) -> dict[str, Any]:
    return {"metadata": {"name": "settings", "resourceVersion": rv}}


@pytest.mark.parametrize(
    ("candidate", "than", "newer"),
    [
        ("1200", "1199", True),
        ("1199", "1200", False),
        ("1200", "1200", False),
        # Compared as numbers, not strings: "999" < "1000".
        ("1000", "999", True),
        # Not an etcd revision: the informer's copy is trusted.
        ("abc", "1", False),
    ],
)
def test_rv_newer_compares_etcd_revisions(candidate: str, than: str, newer: bool) -> None:
    assert rv_newer(versioned(candidate), versioned(than)) is newer


def test_rv_newer_without_a_version_is_not_newer() -> None:
    assert rv_newer({"metadata": {}}, versioned("1")) is False


def test_replacement_is_the_desired_object_guarded_by_the_current_version() -> None:
    desired = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop-venice", "labels": {"a": "1"}},
        "data": {"mode": "production"},
    }
    current = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "settings",
            "namespace": "shop-venice",
            "resourceVersion": "42",
            "uid": "u-1",
            "labels": {"a": "1", "hand": "made"},
            "finalizers": ["example.com/keep"],
            "ownerReferences": [{"kind": "Thing", "name": "t", "uid": "u-2", "apiVersion": "v1"}],
        },
        "data": {"mode": "broken", "extra": "x"},
    }
    assert replacement(desired, current) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "settings",
            "namespace": "shop-venice",
            "labels": {"a": "1"},
            "resourceVersion": "42",
            "finalizers": ["example.com/keep"],
            "ownerReferences": [{"kind": "Thing", "name": "t", "uid": "u-2", "apiVersion": "v1"}],
        },
        "data": {"mode": "production"},
    }
    assert "resourceVersion" not in desired["metadata"], "the desired object is left as it was"


def copy_of(uid: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": "settings", "uid": uid, "resourceVersion": rv}}


KEY = "shop-venice/settings"


def test_what_we_wrote_stands_until_the_informer_catches_up() -> None:
    recent = RecentWrites()
    created = copy_of("u-1", "10")
    recent.wrote(KEY, created)
    assert recent.current(KEY, None) is created, "the informer has not seen it yet"
    older = copy_of("u-1", "9")
    assert recent.current(KEY, older) is created, "the informer is behind our write"
    seen = copy_of("u-1", "10")
    assert recent.current(KEY, seen) is seen
    assert recent.current(KEY, None) is None, "forgotten once the informer showed it"


def test_a_later_change_by_someone_else_wins_over_what_we_wrote() -> None:
    recent = RecentWrites()
    recent.wrote(KEY, copy_of("u-1", "10"))
    edited = copy_of("u-1", "11")
    assert recent.current(KEY, edited) is edited


def test_what_we_deleted_is_gone_though_the_informer_still_has_it() -> None:
    recent = RecentWrites()
    cached = copy_of("u-1", "10")
    recent.deleted(KEY, cached)
    assert recent.current(KEY, cached) is None
    recent.observe(KEY, DELETED, cached)
    recreated = copy_of("u-2", "12")
    assert recent.current(KEY, recreated) is recreated


def test_what_we_wrote_is_forgotten_when_the_informer_shows_it_though_never_asked_again() -> None:
    recent = RecentWrites()
    recent.wrote(KEY, copy_of("u-1", "10"))
    recent.observe(KEY, ADDED, copy_of("u-1", "9"))  # an event from before our write
    assert recent.current(KEY, None) is not None
    recent.observe(KEY, MODIFIED, copy_of("u-1", "10"))
    assert recent._written == {}, "nothing kept of a write the informer shows"


def test_a_copy_deleted_by_hand_before_the_informer_saw_our_write_is_not_remembered() -> None:
    recent = RecentWrites()
    created = copy_of("u-1", "10")
    recent.wrote(KEY, created)
    recent.observe(KEY, DELETED, created)  # added and deleted before we looked again
    assert recent.current(KEY, None) is None, "so it is created again"


def test_only_our_own_write_coming_back_is_an_echo() -> None:
    """An echo needs no reconcile: the one that wrote it knew all it says. Anything else
    does: an older event, someone's later change, a deletion, a write already seen."""
    recent = RecentWrites()
    recent.wrote(KEY, copy_of("u-1", "10"))
    assert recent.observe(KEY, MODIFIED, copy_of("u-1", "9")) is False, "from before our write"
    assert recent.observe(KEY, MODIFIED, copy_of("u-1", "10")) is True
    assert recent.observe(KEY, MODIFIED, copy_of("u-1", "10")) is False, "told once"
    recent.wrote(KEY, copy_of("u-1", "12"))
    assert recent.observe(KEY, MODIFIED, copy_of("u-1", "13")) is False, "someone else's, later"
    recent.wrote(KEY, copy_of("u-1", "14"))
    assert recent.observe(KEY, DELETED, copy_of("u-1", "14")) is False
    assert recent.observe(KEY, ADDED, copy_of("u-2", "15")) is False, "nothing written"


def test_a_remote_object_reflected_here_wakes_its_key_but_our_echo_and_anothers_do_not() -> None:
    """The Secret reflector shares the twin namespace's Secrets with the token reflector: a
    pod's token Secret, another reflector's, wakes nothing (one reconcile per pod, before),
    until it goes (a local Secret of its name may be reflected then); our own write coming
    back wakes nothing either."""
    client: Any = object()
    secrets = SecretReflector(reflector_options(client), ReflectionPolicy.DENY_LIST)
    state = NamespaceReflection("shop", "shop-far", client, [Informer(client, "v1", "secrets")])
    state.informers[0].synced.set()
    queue = secrets.controller.queue

    def woken() -> list[str]:
        return sorted(queue._dirty)

    token = {
        "metadata": {
            "name": "web-token",
            "uid": "t",
            "resourceVersion": "3",
            "labels": {SERVICE_ACCOUNT_NAME_LABEL: "default"},
        }
    }
    secrets.on_event(state, REMOTE, ADDED, token)
    secrets.on_event(state, REMOTE, MODIFIED, token)
    assert woken() == []
    secrets.on_event(state, REMOTE, DELETED, token)
    assert woken() == ["shop/web-token"]

    queue._dirty.clear()
    written = {"metadata": {"name": "settings", "uid": "s", "resourceVersion": "7"}}
    secrets.recent.wrote("shop-far/settings", written)
    secrets.on_event(state, REMOTE, ADDED, written)
    assert woken() == [], "our own write coming back"
    secrets.on_event(
        state,
        REMOTE,
        MODIFIED,
        {**written, "metadata": {**written["metadata"], "resourceVersion": "8"}},
    )
    assert woken() == ["shop/settings"], "changed by someone else"


def test_before_the_caches_are_whole_only_a_deletion_wakes_its_key_then_every_key_wakes_once() -> (
    None
):
    """A restart's lists tell every object to the handlers just before each cache is marked
    whole, and `namespace_synced` then enqueues every key the caches hold: each key was
    reconciled twice. An object gone before the caches are whole is in none of them: its
    deletion wakes its key."""
    client: Any = object()
    secrets = SecretReflector(reflector_options(client), ReflectionPolicy.DENY_LIST)
    local, remote = Informer(client, "v1", "secrets"), Informer(client, "v1", "secrets")
    state = NamespaceReflection("shop", "shop-far", client, [local, remote])
    queue = secrets.controller.queue
    settings = {"metadata": {"name": "settings", "namespace": "shop", "uid": "s"}}
    local.store.upsert(settings)
    local.synced.set()

    secrets.on_event(state, LOCAL, ADDED, settings)
    secrets.on_event(state, REMOTE, MODIFIED, {"metadata": {"name": "settings", "uid": "c"}})
    assert list(queue._dirty) == []
    secrets.on_event(state, REMOTE, DELETED, {"metadata": {"name": "gone", "uid": "g"}})
    assert list(queue._dirty) == ["shop/gone"]

    remote.synced.set()
    secrets.namespace_synced(state)
    assert sorted(queue._dirty) == ["shop/gone", "shop/settings"]
    assert len(queue) == 2  # each once


def test_a_copy_of_ours_is_kept_without_what_the_provider_piled_on_it() -> None:
    """The provider writes a megabyte of status on a Service of ours (no reflector reads it or
    copies it home) and 10,000 finalizers and owner references: the cache keeps the copy as
    its reflector reads it, with 16 of each, and vk's next write of it carries no more."""
    ours = {
        "metadata": {
            "name": "web",
            "resourceVersion": "7",
            "labels": {ORIGIN_LABEL: "home", DESTINATION_LABEL: "far"},
            "finalizers": ["backup.example/keep", *(f"x.example/{i}" for i in range(10_000))],
            "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": f"o{i}", "uid": f"u{i}"}
                for i in range(10_000)
            ],
        },
        "spec": {"ports": [{"port": 80}]},
        "status": {"loadBalancer": {"ingress": [{"hostname": "h" * 1_000_000}]}},
    }

    kept = RemoteObjectAsRead("home", "far")(ours)

    assert "status" not in kept
    assert kept["spec"] == ours["spec"]
    assert kept["metadata"]["finalizers"] == ours["metadata"]["finalizers"][:16]
    assert kept["metadata"]["ownerReferences"] == ours["metadata"]["ownerReferences"][:16]
    assert kept["metadata"]["labels"] == ours["metadata"]["labels"]
    desired = {"metadata": {"name": "web", "labels": ours["metadata"]["labels"]}, "spec": {}}
    written = replacement(desired, kept)
    assert written["metadata"]["finalizers"][0] == "backup.example/keep"
    assert len(written["metadata"]["finalizers"]) == 16
    assert len(written["metadata"]["ownerReferences"]) == 16


def test_a_cache_keeps_of_a_providers_own_object_only_whose_it_is() -> None:
    """A provider may fill a twin namespace with objects of a megabyte: of one vk did not write,
    its reflector reads only whose it is (to leave it alone and say so), and that is all kept;
    one of ours is kept whole (it has no status), to be compared with the local object."""
    as_read = RemoteObjectAsRead("home", "far")
    assert as_read == RemoteObjectAsRead("home", "far"), "one cache for every reflector"
    ours = {
        "metadata": {
            "name": "settings",
            "labels": {ORIGIN_LABEL: "home", DESTINATION_LABEL: "far"},
        },
        "data": {"big": "x" * 1_000_000},
    }
    assert as_read(ours) == ours
    theirs = {
        "metadata": {
            "name": "settings",
            "namespace": "shop-far",
            "uid": "u",
            "resourceVersion": "5",
            "labels": {ORIGIN_LABEL: "elsewhere", "app": "x" * 60},
            "annotations": {"padding": "p" * 200_000},
            "managedFields": [{"manager": "kubectl"}],
        },
        "data": {"big": "x" * 1_000_000},
    }
    kept = as_read(theirs)
    assert kept == {
        "metadata": {
            "name": "settings",
            "namespace": "shop-far",
            "uid": "u",
            "resourceVersion": "5",
            "labels": {ORIGIN_LABEL: "elsewhere"},
        }
    }
    assert not is_owned_by_us(kept, "home", "far")
    token = {"metadata": {"name": "t", "labels": {SERVICE_ACCOUNT_NAME_LABEL: "default"}}}
    assert as_read(token) == token, "what tells a token Secret apart is kept"


async def test_a_foreign_object_as_kept_is_still_reported_as_a_conflict() -> None:
    reported: list[str] = []

    class Events:
        async def record(self, involved: Any, event_type: str, reason: str, message: str) -> None:
            reported.append(message)

    client: Any = object()
    options = dataclasses.replace(reflector_options(client), events=Events())
    secrets = SecretReflector(options, ReflectionPolicy.DENY_LIST)
    local, remote = Informer(client, "v1", "secrets"), Informer(client, "v1", "secrets")
    local.store.upsert({"metadata": {"name": "settings", "namespace": "shop", "uid": "l"}})
    foreign = {
        "metadata": {"name": "settings", "namespace": "shop-far", "uid": "r"},
        "data": {"big": "eA=="},
    }
    remote.store.upsert(secrets.remote_as_read(foreign))
    for informer in (local, remote):
        informer.synced.set()
    secrets.namespaces["shop"] = NamespaceReflection("shop", "shop-far", client, [local, remote])
    await secrets.reconcile("shop/settings")
    assert len(reported) == 1
    assert "was not created by vk: it is left untouched" in reported[0]


async def test_a_configmap_named_as_the_cas_copy_touches_not_that_copy() -> None:
    """Reflected under its own name, a tenant's ConfigMap `kube-root-ca.crt.<id>` overwrote the
    copy of the cluster's CA offloaded pods verify their home API server with; gone, it
    deleted it."""
    reported: list[str] = []

    class Events:
        async def record(self, involved: Any, event_type: str, reason: str, message: str) -> None:
            reported.append(message)

    class Provider:
        name = "far"

        def __init__(self) -> None:
            self.written: list[str] = []

        async def delete(self, path: str, body: Any = None) -> None:
            self.written.append(f"DELETE {path}")

        async def replace(self, path: str, body: Any) -> Any:
            self.written.append(f"PUT {path}")
            return body

        async def create(self, path: str, body: Any) -> Any:
            self.written.append(f"POST {path}")
            return body

    provider: Any = Provider()
    options = dataclasses.replace(reflector_options(provider), events=Events())
    configmaps = ConfigMapReflector(options, ReflectionPolicy.DENY_LIST)
    copy_name = remote_root_ca_configmap_name("home")
    local, remote = Informer(provider, "v1", "configmaps"), Informer(provider, "v1", "configmaps")
    impostor = {"metadata": {"name": copy_name, "namespace": "shop", "uid": "l"}, "data": {}}
    local.store.upsert(impostor)
    ca_copy = {
        "metadata": {
            "name": copy_name,
            "namespace": "shop-far",
            "uid": "r",
            "labels": ownership_labels("home", "far"),
        },
        "data": {"ca.crt": "PEM"},
    }
    remote.store.upsert(configmaps.remote_as_read(ca_copy))
    for informer in (local, remote):
        informer.synced.set()
    configmaps.namespaces["shop"] = NamespaceReflection(
        "shop", "shop-far", provider, [local, remote]
    )
    await configmaps.reconcile(f"shop/{copy_name}")
    local.store.delete(f"shop/{copy_name}")
    await configmaps.reconcile(f"shop/{copy_name}")
    assert provider.written == []
    assert len(reported) == 1
    assert "rename it" in reported[0]


class QuotaBoundProvider:
    """A provider whose twin namespace's quota allows no node ports (vk's default), nor more
    than `services` Services, nor any ConfigMap."""

    name = "far"

    def __init__(self, services: int = 10) -> None:
        self.services = services
        self.written: list[tuple[str, Any]] = []

    async def create(self, path: str, body: Any) -> Any:
        self._admit(path, body)
        self.written.append(("POST", body))
        return {**body, "metadata": {**body["metadata"], "uid": "r", "resourceVersion": "7"}}

    async def replace(self, path: str, body: Any) -> Any:
        self._admit(path, body)
        self.written.append(("PUT", body))
        return {**body, "metadata": {**body["metadata"], "uid": "r", "resourceVersion": "8"}}

    def _admit(self, path: str, body: Any) -> None:
        if "/configmaps" in path:
            raise ApiError(403, "Forbidden", "exceeded quota: vk-tenant-objects, configmaps=0")
        if body["spec"].get("type") == "NodePort":
            raise ApiError(403, "Forbidden", "exceeded quota: vk-tenant-objects, nodeports=0")
        if len(self.written) >= self.services:
            raise ApiError(403, "Forbidden", "exceeded quota: vk-tenant-objects, services=0")


class Said:
    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    async def record(self, involved: Any, event_type: str, reason: str, message: str) -> None:
        self.events.append((reason, message))


def node_port_service() -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "shop", "uid": "l"},
        "spec": {
            "type": "NodePort",
            "selector": {"app": "web"},
            "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP", "nodePort": 30080}],
            "externalTrafficPolicy": "Local",
            "clusterIP": "10.96.0.10",
        },
    }


def reflecting_in_shop(reflector: Any, provider: Any, *local_objects: Any) -> Informer:
    """The reflector set up on namespace shop (its twin shop-far), its caches synced: the
    remote informer returned."""
    local = Informer(provider, reflector.api_version, reflector.plural)
    remote = Informer(provider, reflector.api_version, reflector.plural)
    for obj in local_objects:
        local.store.upsert(obj)
    for informer in (local, remote):
        informer.synced.set()
    reflector.namespaces["shop"] = NamespaceReflection(
        "shop", "shop-far", provider, [local, remote]
    )
    return remote


async def test_a_refused_copy_is_said_once_and_tried_again_in_a_while_without_a_traceback() -> None:
    """It was raised again once said: retried on the work queue's back-off (up to 1000 s), a
    traceback logged at each try."""
    provider: Any = QuotaBoundProvider()
    said = Said()
    options = dataclasses.replace(reflector_options(provider), events=said)
    configmaps = ConfigMapReflector(options, ReflectionPolicy.DENY_LIST)
    reflecting_in_shop(
        configmaps, provider, {"metadata": {"name": "settings", "namespace": "shop", "uid": "l"}}
    )
    results = [await configmaps.reconcile("shop/settings") for _ in range(3)]
    assert results == [Result(requeue_after=REFUSED_RETRY, failed=True)] * 3
    assert said.events == [
        (
            REASON_FAILED,
            "cannot reflect to cluster far: exceeded quota: vk-tenant-objects, configmaps=0",
        )
    ]


async def test_a_node_port_service_the_provider_refuses_is_reflected_as_cluster_ip_and_said() -> (
    None
):
    """The provider gives its consumers no node ports: the Service was not reflected at all, and
    the offloaded pods there could not reach it by its name."""
    provider: Any = QuotaBoundProvider()
    said = Said()
    options = dataclasses.replace(reflector_options(provider), events=said)
    services = ServiceReflector(options, ReflectionPolicy.DENY_LIST)
    remote = reflecting_in_shop(services, provider, node_port_service())

    result = await services.reconcile("shop/web")
    assert result == Result(requeue_after=REFUSED_RETRY, failed=True), "the whole tried again"
    [(verb, written)] = provider.written
    assert verb == "POST"
    assert written["spec"] == {
        "type": "ClusterIP",
        "selector": {"app": "web"},
        "ports": [{"port": 80, "targetPort": 8080, "protocol": "TCP"}],
    }
    [(reason, message)] = said.events
    assert reason == REASON_LESSENED
    assert "refused it as it is (exceeded quota: vk-tenant-objects, nodeports=0)" in message
    assert "reflected there as a ClusterIP Service" in message

    # Tried again with the copy in place: the whole is refused again, the copy already is the
    # lesser one, so nothing is written and nothing said again.
    remote.store.upsert(
        {**written, "metadata": {**written["metadata"], "uid": "r", "resourceVersion": "7"}}
    )
    assert await services.reconcile("shop/web") == Result(requeue_after=REFUSED_RETRY, failed=True)
    assert len(provider.written) == 1
    assert len(said.events) == 1


async def test_a_service_refused_even_as_cluster_ip_is_said_as_a_failure() -> None:
    provider: Any = QuotaBoundProvider(services=0)
    said = Said()
    options = dataclasses.replace(reflector_options(provider), events=said)
    services = ServiceReflector(options, ReflectionPolicy.DENY_LIST)
    reflecting_in_shop(services, provider, node_port_service())
    assert await services.reconcile("shop/web") == Result(requeue_after=REFUSED_RETRY, failed=True)
    assert provider.written == []
    assert said.events == [
        (
            REASON_FAILED,
            "cannot reflect to cluster far: exceeded quota: vk-tenant-objects, services=0",
        )
    ]
