"""An offloaded pod's life at its edges, judged as a kubelet would judge it: a remote Pod put out
and made again by the provider is a restart, not a failure; a finished pod's status is final; a
pod made again under the same name starts afresh; a Pod still cached from an earlier ShadowPod
of the name says nothing of this one; a pod deleted while its ShadowPod's creation is not yet
seen is not finished before that ShadowPod is deleted. The reflector's caches are filled by
hand (no watch), its writes recorded."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from vk.api.constants import (
    DESTINATION_LABEL,
    LOCAL_POD_UID_ANNOTATION,
    NODENAME_LABEL,
    ORIGIN_LABEL,
)
from vk.kube.client import JSON
from vk.kube.events import EventRecorder
from vk.reflection.workload.pods import PodReflector, remote_pod_as_read

KEY = "shop/web"
OWNERSHIP = {ORIGIN_LABEL: "home", DESTINATION_LABEL: "far", NODENAME_LABEL: "far"}


class Home:
    name = "home"

    def __init__(self) -> None:
        self.status_writes: list[JSON] = []
        self.deleted: list[str] = []

    async def merge_patch(self, path: str, body: JSON) -> JSON:
        if path.endswith("/status"):
            self.status_writes.append(body["status"])
        return {"metadata": {"uid": "x", "resourceVersion": str(100 + len(self.status_writes))}}

    async def delete(self, path: str, body: JSON | None = None) -> JSON:
        self.deleted.append(path)
        return {}

    async def create(self, path: str, body: JSON) -> JSON:
        return body


class Provider:
    name = "provider"

    def __init__(self) -> None:
        self.deleted: list[str] = []

    async def create(self, path: str, body: JSON) -> JSON:
        return {**body, "metadata": {**body["metadata"], "uid": "s-new", "resourceVersion": "50"}}

    async def delete(self, path: str, body: JSON | None = None) -> JSON:
        self.deleted.append(path)
        return {}

    async def merge_patch(self, path: str, body: JSON) -> JSON:
        return {}


def reflector(home: Home, provider: Provider) -> PodReflector:
    mapped = asyncio.Event()
    mapped.set()
    pods = PodReflector(
        home,  # type: ignore[arg-type]
        node_name="far",
        node_ip="10.0.0.1",
        home_cluster_id="home",
        remote_cluster_id="far",
        mappings=lambda: {"shop": "shop-home"},
        mapped=mapped,
        workers=1,
        events=EventRecorder(home, "virtual-kubelet"),  # type: ignore[arg-type]
    )
    pods.start_namespace("shop", "shop-home", provider)  # type: ignore[arg-type]
    pods.remote["shop-home"].synced.set()
    pods.shadows["shop-home"].synced.set()
    return pods


def local_pod(uid: str, *, phase: str = "Running", version: str = "1", **metadata: Any) -> JSON:
    return {
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "uid": uid,
            "resourceVersion": version,
            **metadata,
        },
        "spec": {"nodeName": "far", "containers": [{"name": "app", "image": "nginx"}]},
        "status": {"phase": phase},
    }


def shadow_pod(local_uid: str, *, uid: str = "s1", phase: str = "Running") -> JSON:
    return {
        "metadata": {
            "name": "web",
            "namespace": "shop-home",
            "uid": uid,
            "resourceVersion": "2",
            "labels": OWNERSHIP,
            "annotations": {LOCAL_POD_UID_ANNOTATION: local_uid},
        },
        "spec": {"pod": {"containers": [{"name": "app", "image": "nginx"}]}},
        "status": {"phase": phase},
    }


RUNNING = {
    "phase": "Running",
    "podIP": "10.9.0.7",
    "conditions": [{"type": "Ready", "status": "True"}],
    "containerStatuses": [
        {"name": "app", "restartCount": 0, "ready": True, "state": {"running": {}}}
    ],
}
EVICTED = {
    "phase": "Failed",
    "reason": "Evicted",
    "message": "The node was low on resource: memory.",
    "containerStatuses": [
        {"name": "app", "restartCount": 0, "state": {"terminated": {"exitCode": 137}}}
    ],
}


def remote_pod(uid: str, status: JSON, *, shadow_uid: str | None = "s1") -> JSON:
    """A remote Pod as the provider writes it, kept as the virtual kubelet's cache keeps it."""
    owners = [{"kind": "ShadowPod", "uid": shadow_uid, "controller": True}] if shadow_uid else []
    pod = {
        "metadata": {
            "name": "web",
            "namespace": "shop-home",
            "uid": uid,
            "resourceVersion": "3",
            "ownerReferences": owners,
        },
        "status": status,
    }
    return remote_pod_as_read(pod)


def cached(pods: PodReflector, *, local: JSON, shadow: JSON | None, remote: JSON | None) -> None:
    pods.local.store.upsert(local)
    if shadow is not None:
        pods.shadows["shop-home"].store.upsert(shadow)
    if remote is not None:
        pods.remote["shop-home"].store.upsert(remote)


async def test_a_remote_pod_put_out_and_made_again_is_a_restart_not_a_failure() -> None:
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(pods, local=local_pod("a"), shadow=shadow_pod("a"), remote=remote_pod("r1", RUNNING))
    await pods.reconcile_status(KEY)
    assert [s["phase"] for s in home.status_writes] == ["Running"]
    # Evicted on the provider, which makes it again (its ShadowPod not finished): the local pod
    # is not reported Failed, so no ReplicaSet replaces a pod that runs on.
    pods.remote["shop-home"].store.upsert(remote_pod("r1", EVICTED))
    await pods.reconcile_status(KEY)
    assert [s["phase"] for s in home.status_writes] == ["Running"]
    pods.remote["shop-home"].store.upsert(remote_pod("r2", RUNNING))
    await pods.reconcile_status(KEY)
    assert home.status_writes[-1]["containerStatuses"][0]["restartCount"] == 1


async def test_a_remote_pod_put_out_for_good_is_reported_failed() -> None:
    # A provider that does not make it again (Liqo's) says so with its ShadowPod's phase.
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(
        pods,
        local=local_pod("a"),
        shadow=shadow_pod("a", phase="Failed"),
        remote=remote_pod("r1", EVICTED),
    )
    await pods.reconcile_status(KEY)
    assert [(s["phase"], s.get("reason")) for s in home.status_writes] == [("Failed", "Evicted")]


@pytest.mark.parametrize("phase", ["Failed", "Succeeded"])
async def test_a_finished_local_pods_status_is_final(phase: str) -> None:
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(
        pods,
        local=local_pod("a", phase=phase),
        shadow=shadow_pod("a"),
        remote=remote_pod("r2", RUNNING),
    )
    await pods.reconcile_status(KEY)
    assert home.status_writes == []


async def test_a_pod_made_again_under_its_name_starts_with_no_restart() -> None:
    # A StatefulSet's pod: A finished and A' bound before a worker took the key, the two
    # events merged in one reconcile that never saw A gone.
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(pods, local=local_pod("a"), shadow=shadow_pod("a"), remote=remote_pod("r1", RUNNING))
    await pods.reconcile_status(KEY)
    cached(
        pods,
        local=local_pod("a2", version="7"),
        shadow=shadow_pod("a2", uid="s2"),
        remote=remote_pod("r2", RUNNING, shadow_uid="s2"),
    )
    await pods.reconcile_status(KEY)
    assert home.status_writes[-1]["containerStatuses"][0]["restartCount"] == 0


async def test_a_pod_of_an_earlier_shadow_pod_still_cached_says_nothing_of_this_one() -> None:
    # The provider's Pods watch behind its ShadowPods watch: A's Pod still there, A''s not yet.
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(
        pods,
        local=local_pod("a2"),
        shadow=shadow_pod("a2", uid="s2"),
        remote=remote_pod("r1", RUNNING, shadow_uid="s1"),
    )
    await pods.reconcile_status(KEY)
    assert home.status_writes == []
    # A Pod naming no controller (a provider that sets none) is read as before.
    pods.remote["shop-home"].store.upsert(remote_pod("r3", RUNNING, shadow_uid=None))
    await pods.reconcile_status(KEY)
    assert [s["phase"] for s in home.status_writes] == ["Running"]


@pytest.mark.parametrize(
    "owners",
    [
        "ShadowPod",
        [None, 7, "x"],
        [{"kind": "ShadowPod", "controller": True, "uid": {"not": "a string"}}],
        [{"kind": "ShadowPod", "controller": True, "uid": "u" * 10_000}],
    ],
)
def test_what_a_provider_writes_as_a_pods_owners_raises_nothing_in_the_cache(owners: Any) -> None:
    kept = remote_pod_as_read(
        {"metadata": {"name": "web", "uid": "r", "ownerReferences": owners}, "status": {}}
    )
    assert len(str(kept)) < 500


async def test_a_pod_deleted_before_its_shadow_pods_creation_is_seen_waits_for_it() -> None:
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(pods, local=local_pod("a", phase="Pending"), shadow=None, remote=None)
    await pods.reconcile(KEY)  # creates the ShadowPod, not yet in the cache
    deleting = local_pod(
        "a", phase="Pending", version="2", deletionTimestamp="2026-11-29T08:00:00Z"
    )
    deleting["metadata"]["deletionGracePeriodSeconds"] = 30
    pods.local.store.upsert(deleting)
    result = await pods.reconcile(KEY)
    assert home.deleted == [], "finished at home while its ShadowPod may run"
    assert result.requeue_after is not None
    assert result.requeue_after > 0
    # Its creation seen: its ShadowPod is deleted first.
    pods.shadows["shop-home"].store.upsert(shadow_pod("a", uid="s-new"))
    await pods.reconcile(KEY)
    assert provider.deleted == [
        "/apis/offloading.liqo.io/v1beta1/namespaces/shop-home/shadowpods/web"
    ]
    assert home.deleted == []
