"""An offloaded pod's life at its edges, judged as a kubelet would judge it: a remote Pod put out
and made again by the provider is a restart, not a failure; a finished pod's status is final; a
pod made again under the same name starts afresh; a Pod still cached from an earlier ShadowPod
of the name says nothing of this one; a pod deleted while its ShadowPod's creation is not yet
seen is not finished before that ShadowPod is deleted; a pod bound by hand that the virtual
node would not take is failed before it is offloaded, and a pod offloaded already never is. The
reflector's caches are filled by hand (no watch), its writes recorded."""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import pytest

from vk.api.constants import (
    DELETION_GRACE_ANNOTATION,
    DESTINATION_LABEL,
    LOCAL_POD_UID_ANNOTATION,
    NODENAME_LABEL,
    ORIGIN_LABEL,
    PROVIDER_STATUS_BURST,
    PROVIDER_STATUS_INTERVAL_SECONDS,
    VIRTUAL_NODE_TAINT_EFFECT,
    VIRTUAL_NODE_TAINT_KEY,
    VIRTUAL_NODE_TAINT_VALUE,
)
from vk.kube.client import JSON, ApiError, NotFound
from vk.kube.events import EventRecorder
from vk.kube.informer import DELETED
from vk.kube.workqueue import TokenBuckets
from vk.reflection.workload.pods import PodReflector, remote_pod_as_read

KEY = "shop/web"
OWNERSHIP = {ORIGIN_LABEL: "home", DESTINATION_LABEL: "far", NODENAME_LABEL: "far"}


NODE_PATH = "/api/v1/nodes/far"


class Home:
    name = "home"

    def __init__(self) -> None:
        self.status_writes: list[JSON] = []
        self.deleted: list[str] = []
        self.events: list[tuple[str, str]] = []  # (reason, message)
        self.node: JSON | None = None  # the Node, as a read afresh finds it
        self.reads: list[str] = []

    async def get(self, path: str, params: Any = None) -> JSON:
        self.reads.append(path)
        if path == NODE_PATH and self.node is not None:
            return self.node
        raise NotFound(404, "NotFound", "not found")

    async def merge_patch(self, path: str, body: JSON) -> JSON:
        if path.endswith("/status"):
            self.status_writes.append(body["status"])
        return {"metadata": {"uid": "x", "resourceVersion": str(100 + len(self.status_writes))}}

    async def delete(self, path: str, body: JSON | None = None) -> JSON:
        self.deleted.append(path)
        return {}

    async def create(self, path: str, body: JSON) -> JSON:
        if path.endswith("/events"):
            self.events.append((body["reason"], body["message"]))
        return body


class Provider:
    name = "provider"

    def __init__(self) -> None:
        self.deleted: list[str] = []
        self.patches: list[JSON] = []
        self.created: list[str] = []

    async def create(self, path: str, body: JSON) -> JSON:
        self.created.append(body["metadata"]["name"])
        return {**body, "metadata": {**body["metadata"], "uid": "s-new", "resourceVersion": "50"}}

    async def delete(self, path: str, body: JSON | None = None) -> JSON:
        self.deleted.append(path)
        return {}

    async def merge_patch(self, path: str, body: JSON) -> JSON:
        self.patches.append(body)
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


async def test_a_provider_changing_a_pods_status_on_and_on_has_it_written_home_at_a_pace() -> None:
    """The attack: the provider writes its Pods' statuses as it likes, and flips one's
    readiness on and on, each change a write home as fast as the virtual kubelet goes. Past a
    burst, one is written each PROVIDER_STATUS_INTERVAL_SECONDS, and it is what the provider's Pod
    says then: nothing it says last is lost."""
    now = [0.0]
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    pods.status_pace = TokenBuckets(
        1 / PROVIDER_STATUS_INTERVAL_SECONDS, PROVIDER_STATUS_BURST, clock=lambda: now[0]
    )
    cached(pods, local=local_pod("a"), shadow=shadow_pod("a"), remote=None)

    def ready(status: JSON) -> str:
        return str(next(c["status"] for c in status["conditions"] if c["type"] == "Ready"))

    retries = []
    for flip in range(100):
        status = {**RUNNING, "conditions": [{"type": "Ready", "status": str(flip % 2 == 1)}]}
        pods.remote["shop-home"].store.upsert(remote_pod("r1", status))
        retries.append((await pods.reconcile_status(KEY)).requeue_after)
    assert len(home.status_writes) == PROVIDER_STATUS_BURST
    assert retries[:PROVIDER_STATUS_BURST] == [None] * PROVIDER_STATUS_BURST
    assert all(r == pytest.approx(PROVIDER_STATUS_INTERVAL_SECONDS) for r in retries[10:])
    now[0] += PROVIDER_STATUS_INTERVAL_SECONDS  # asked back then: the provider's last word
    assert (await pods.reconcile_status(KEY)).requeue_after is None
    assert len(home.status_writes) == PROVIDER_STATUS_BURST + 1
    assert ready(home.status_writes[-1]) == "True"


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


def told(grace: int) -> JSON:
    return {"metadata": {"annotations": {DELETION_GRACE_ANNOTATION: str(grace)}}}


def deleting(grace: int) -> JSON:
    pod = local_pod("a", version=str(10 + grace), deletionTimestamp="2026-11-29T10:00:00Z")
    pod["metadata"]["deletionGracePeriodSeconds"] = grace
    return pod


def shadow_being_deleted(grace: int | None) -> JSON:
    shadow = shadow_pod("a")
    shadow["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    if grace is not None:
        shadow["metadata"]["annotations"][DELETION_GRACE_ANNOTATION] = str(grace)
    return shadow


async def test_a_second_deletion_with_a_shorter_grace_period_reaches_the_provider() -> None:
    # `kubectl delete --grace-period=600`, then `--grace-period=5`: a kubelet honours the
    # shorter one.
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(pods, local=deleting(600), shadow=shadow_pod("a"), remote=None)
    await pods.reconcile(KEY)
    assert provider.patches == [told(600)]
    assert len(provider.deleted) == 1
    cached(pods, local=deleting(5), shadow=shadow_being_deleted(600), remote=None)
    await pods.reconcile(KEY)
    assert provider.patches == [told(600), told(5)]
    assert len(provider.deleted) == 1, "a ShadowPod being deleted is not deleted again"
    # Told: its echo asks nothing more.
    cached(pods, local=deleting(5), shadow=shadow_being_deleted(5), remote=None)
    await pods.reconcile(KEY)
    assert provider.patches == [told(600), told(5)]
    assert home.deleted == []


async def test_a_pod_deleted_at_once_has_its_shadow_pod_deleted_at_once() -> None:
    # `kubectl delete --force --grace-period=0`: the pod is gone from the API server before
    # the virtual kubelet deletes its ShadowPod; the grace period is read from its last state.
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(pods, local=local_pod("a"), shadow=shadow_pod("a"), remote=None)
    gone = deleting(0)
    pods.local.store.delete(KEY)
    pods._on_local_pod(DELETED, gone, None)
    await pods.reconcile(KEY)
    assert provider.patches == [told(0)]
    assert len(provider.deleted) == 1
    # Forced while its ShadowPod was being deleted with the pod's own grace period.
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(pods, local=local_pod("a"), shadow=shadow_being_deleted(None), remote=None)
    pods.local.store.delete(KEY)
    pods._on_local_pod(DELETED, gone, None)
    await pods.reconcile(KEY)
    assert provider.patches == [told(0)]
    assert provider.deleted == []


async def test_a_pod_gone_tells_its_grace_period_to_its_own_shadow_pod_only() -> None:
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(pods, local=local_pod("a"), shadow=shadow_pod("b", uid="s-b"), remote=None)
    gone = deleting(0)
    pods.local.store.delete(KEY)
    pods._on_local_pod(DELETED, gone, None)
    await pods.reconcile(KEY)
    assert provider.patches == []
    assert len(provider.deleted) == 1  # an orphan all the same, deleted as before


def running_here(uid: str = "a") -> JSON:
    """A local pod whose remote Pod ran: its status the reflected RUNNING, and a startTime."""
    pod = local_pod(uid)
    pod["status"] = {
        **RUNNING,
        "startTime": "2026-11-29T09:00:00Z",
        "conditions": [
            {"type": "ContainersReady", "status": "True"},
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-29T09:00:05Z"},
            {"type": "PodScheduled", "status": "True"},
        ],
    }
    return pod


def assert_stopped(status: JSON, waiting: str = "ContainerCreating") -> None:
    assert status["phase"] == "Running", "a pod's phase never goes back"
    conditions = {c["type"]: c for c in status["conditions"]}
    assert conditions["Ready"]["status"] == conditions["ContainersReady"]["status"] == "False"
    assert conditions["Ready"]["reason"] == "ContainersNotReady"
    assert conditions["Ready"]["lastTransitionTime"] != "2026-11-29T09:00:05Z"
    assert conditions["PodScheduled"]["status"] == "True"
    [container] = status["containerStatuses"]
    assert container["ready"] is False
    assert container["state"] == {"waiting": {"reason": waiting}}


async def test_a_pod_whose_remote_pod_is_put_out_is_not_ready_until_made_again() -> None:
    # Ready kept, a Service sent to a pod that ran nowhere until the provider's new Pod showed.
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(pods, local=running_here(), shadow=shadow_pod("a"), remote=remote_pod("r1", EVICTED))
    await pods.reconcile_status(KEY)
    [stopped] = home.status_writes
    assert_stopped(stopped)


async def test_a_pod_whose_remote_pod_is_gone_is_not_ready_until_made_again() -> None:
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    cached(pods, local=running_here(), shadow=shadow_pod("a"), remote=None)
    await pods.reconcile_status(KEY)
    [stopped] = home.status_writes
    assert_stopped(stopped)


CORDONED = (
    'admission webhook "shadowpod.validate.liqo.io" denied the request: the Quota '
    "liqo-tenant-home/far-1 is cordoned"
)


def refusing_provider() -> Provider:
    """A provider whose webhook refuses every new ShadowPod: its tenant drained."""
    provider = Provider()

    async def refused(path: str, body: JSON) -> JSON:
        raise ApiError(403, "Forbidden", CORDONED)

    provider.create = refused  # type: ignore[method-assign]
    return provider


async def test_a_running_pod_whose_shadow_pod_is_gone_and_refused_again_is_not_ready() -> None:
    # A provider draining its tenant deletes its ShadowPods and refuses new ones: the pod was
    # left Running and Ready, its IP in home's Services, while it ran nowhere.
    home = Home()
    pods = reflector(home, refusing_provider())
    cached(pods, local=running_here(), shadow=None, remote=None)
    await pods.reconcile(KEY)
    [written] = home.status_writes
    assert_stopped(written, waiting="OffloadingBackOff")  # what `kubectl get pods` shows
    assert written["reason"] == "OffloadingBackOff"
    assert CORDONED in written["message"]
    # Said once: asked again, the same refusal writes nothing more.
    pods.local.store.upsert({**running_here(), "status": {**running_here()["status"], **written}})
    pods._reported.clear()
    await pods.reconcile(KEY)
    assert len(home.status_writes) == 1


async def test_a_pending_pod_refused_by_the_provider_says_why_and_stays_pending() -> None:
    home = Home()
    pods = reflector(home, refusing_provider())
    cached(pods, local=local_pod("a", phase="Pending"), shadow=None, remote=None)
    await pods.reconcile(KEY)
    [written] = home.status_writes
    assert written["phase"] == "Pending"
    assert written["reason"] == "OffloadingBackOff"
    assert "containerStatuses" not in written
    assert "conditions" not in written


@pytest.mark.parametrize("case", ["pending", "finished", "deleting", "unsynced"])
async def test_a_pod_whose_remote_pod_is_gone_says_nothing_if_it_never_ran_or_is_done(
    case: str,
) -> None:
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    local = running_here()
    shadow = shadow_pod("a")
    if case == "pending":
        local = local_pod("a", phase="Pending")
    elif case == "finished":
        shadow = shadow_pod("a", phase="Succeeded")
    elif case == "deleting":
        local["metadata"]["deletionTimestamp"] = "2026-11-29T10:00:00Z"
    else:
        pods.remote["shop-home"].synced.clear()
    cached(pods, local=local, shadow=shadow, remote=None)
    await pods.reconcile_status(KEY)
    assert home.status_writes == []


async def test_a_remote_pod_made_again_while_its_pod_ran_is_a_restart_not_a_pending_pod() -> None:
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    local = running_here()
    cached(pods, local=local, shadow=shadow_pod("a"), remote=remote_pod("r1", RUNNING))
    await pods.reconcile_status(KEY)  # r1 counted
    creating = {
        "phase": "Pending",
        "startTime": "2026-11-29T10:00:00Z",
        "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady"}],
        "containerStatuses": [
            {
                "name": "app",
                "restartCount": 0,
                "ready": False,
                "state": {"waiting": {"reason": "ContainerCreating"}},
            }
        ],
    }
    pods.remote["shop-home"].store.upsert(remote_pod("r2", creating))
    await pods.reconcile_status(KEY)
    written = home.status_writes[-1]
    assert written["phase"] == "Running"
    assert written["startTime"] == "2026-11-29T09:00:00Z", "a pod starts once"
    assert written["containerStatuses"][0]["restartCount"] == 1


# --- Admission to the virtual node -----------------------------------------------------------

VIRTUAL_NODE_TOLERATION = {"key": VIRTUAL_NODE_TAINT_KEY, "operator": "Exists"}


def node(**labels: str) -> JSON:
    """Node far, with the virtual-node taint."""
    return {
        "metadata": {"name": "far", "resourceVersion": "5", "labels": labels},
        "spec": {
            "taints": [
                {
                    "key": VIRTUAL_NODE_TAINT_KEY,
                    "value": VIRTUAL_NODE_TAINT_VALUE,
                    "effect": VIRTUAL_NODE_TAINT_EFFECT,
                }
            ]
        },
    }


def on_node(pods: PodReflector, home: Home, current: JSON) -> None:
    """The Node is `current`, in the cache and read afresh alike."""
    pods.nodes.store.upsert(current)
    home.node = current


def bound_by_hand(
    uid: str, *, name: str = "web", region: str = "europe", tolerations: Any = None
) -> JSON:
    """A new pod bound to far by hand, asking for a node of `region`, tolerating the
    virtual-node taint unless `tolerations` says otherwise."""
    pod = local_pod(uid, phase="Pending")
    pod["metadata"]["name"] = name
    pod["spec"]["nodeSelector"] = {"region": region}
    pod["spec"]["tolerations"] = [VIRTUAL_NODE_TOLERATION] if tolerations is None else tolerations
    return pod


AFFINITY = "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector"
TAINT = "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate"


@pytest.mark.parametrize(
    ("pod", "reason", "message"),
    [
        (bound_by_hand("a", region="asia"), "NodeAffinity", AFFINITY),
        (bound_by_hand("a", tolerations=[]), "TaintToleration", TAINT),
    ],
)
async def test_a_pod_bound_by_hand_that_the_node_would_not_take_is_failed_never_offloaded(
    pod: JSON, reason: str, message: str
) -> None:
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    on_node(pods, home, node(region="europe"))
    cached(pods, local=pod, shadow=None, remote=None)
    await pods.reconcile(KEY)
    assert provider.created == [], "offloaded a pod its kubelet would have refused"
    [status] = home.status_writes
    assert (status["phase"], status["reason"]) == ("Failed", reason)
    assert status["message"] == f"Pod was rejected: {message}"
    assert home.events == [(reason, message)]
    # Again before the cache shows it Failed: nothing said twice.
    await pods.reconcile(KEY)
    assert len(home.status_writes) == 1
    assert len(home.events) == 1


async def test_the_node_is_read_afresh_before_a_pod_is_refused() -> None:
    # Labelled region=asia just before the pod was bound: the Node cache is behind.
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    on_node(pods, home, node(region="europe"))
    home.node = node(region="asia")
    cached(pods, local=bound_by_hand("a", region="asia"), shadow=None, remote=None)
    await pods.reconcile(KEY)
    assert NODE_PATH in home.reads
    assert provider.created == ["web"]
    assert home.status_writes == []


async def test_after_a_restart_on_a_node_relabelled_only_a_new_pod_is_judged() -> None:
    # web was offloaded while far was in europe; api was bound by hand since, asking for it.
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    on_node(pods, home, node(region="asia"))
    cached(
        pods,
        local=bound_by_hand("a"),
        shadow=shadow_pod("a"),
        remote=remote_pod("r1", RUNNING),
    )
    pods.local.store.upsert(bound_by_hand("b", name="api"))
    await pods.reconcile(KEY)
    await pods.reconcile("shop/api")
    assert provider.created == []
    assert provider.deleted == []
    assert [(s["phase"], s["reason"]) for s in home.status_writes] == [("Failed", "NodeAffinity")]
    assert home.events == [("NodeAffinity", AFFINITY)]


async def test_a_pod_whose_shadow_pod_is_created_and_not_seen_yet_is_not_judged_again() -> None:
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    on_node(pods, home, node(region="europe"))
    cached(pods, local=bound_by_hand("a"), shadow=None, remote=None)
    await pods.reconcile(KEY)
    assert provider.created == ["web"]
    # Relabelled, and the ShadowPod still not in the cache when it is asked for again.
    on_node(pods, home, node(region="asia"))
    pods._created_unseen[KEY] = dataclasses.replace(pods._created_unseen[KEY], until=0.0)
    await pods.reconcile(KEY)
    assert provider.created == ["web", "web"]
    assert home.status_writes == []
    # A pod made again under its name is new: judged, once its forerunner's wait is over.
    pods.local.store.upsert(bound_by_hand("a2"))
    pods._created_unseen[KEY] = dataclasses.replace(pods._created_unseen[KEY], until=0.0)
    await pods.reconcile(KEY)
    assert provider.created == ["web", "web"]
    assert [(s["phase"], s["reason"]) for s in home.status_writes] == [("Failed", "NodeAffinity")]


async def test_a_refusal_whose_status_cannot_be_written_is_tried_again_not_left_pending() -> None:
    home, provider = Home(), Provider()
    pods = reflector(home, provider)
    on_node(pods, home, node(region="europe"))
    cached(pods, local=bound_by_hand("a", region="asia"), shadow=None, remote=None)
    write = home.merge_patch

    async def unavailable(path: str, body: JSON) -> JSON:
        raise ApiError(503, "ServiceUnavailable", "the API server is restarting")

    home.merge_patch = unavailable  # type: ignore[method-assign]
    with pytest.raises(ApiError):
        await pods.reconcile(KEY)
    home.merge_patch = write  # type: ignore[method-assign]
    await pods.reconcile(KEY)
    assert [(s["phase"], s["reason"]) for s in home.status_writes] == [("Failed", "NodeAffinity")]
    assert home.events == [("NodeAffinity", AFFINITY)]
    assert provider.created == []
