"""The provider's ShadowPod controller, its decisions as tables: the Pod it makes of a
ShadowPod, when a Pod runs again and when never, adoption, refusals and the status it writes;
and the virtual kubelet's side of it (the ShadowPod it writes, the provider's word it reads)."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import orjson
import pytest

from vk.api.constants import (
    CREATOR_USER_LABEL,
    DELETION_GRACE_ANNOTATION,
    DESTINATION_LABEL,
    NODENAME_LABEL,
    ORIGIN_LABEL,
    REMOTE_CLUSTER_ID_LABEL,
    SHADOW_POD_FINALIZER,
    SHADOW_POD_OWNED_LABEL,
)
from vk.api.usage import forge_reserved_status, is_accounted
from vk.controllers.provider_caches import (
    CREATION_SPEC_LEFT,
    provider_pod_as_read,
    provider_shadow_pod_as_read,
)
from vk.controllers.provider_quotas import CREATOR_INDEX, quota_creator_index, share_of
from vk.controllers.provider_shadowpods import (
    POD_PATCH_BURST,
    POD_PATCH_INTERVAL_SECONDS,
    REASON_FORBIDDEN,
    REASON_INVALID,
    REASON_POD_SECURITY,
    REFUSED_RETRY,
    UNANSWERED_GRACE_SECONDS,
    ProviderShadowPods,
    forge_adoption_patch,
    forge_pod_of,
    forge_shadow_pod_status,
    is_adoptable,
    not_reserved_message,
    refusal_reason,
    status_differs,
)
from vk.kube.client import ApiError, NotFound
from vk.kube.informer import ADDED, DELETED, Informer
from vk.kube.workqueue import TokenBuckets
from vk.reflection.forge.pods import (
    consumer_grace_period,
    controller_uid,
    forge_remote_pod,
    forge_shadow_pod,
    is_evicted,
    live_pod_patch,
    shadow_pod_as_pod,
    shadow_pod_as_read,
    shadow_pod_finished,
    shadow_pod_patch,
)
from vk.reflection.workload.pods import (
    grace_annotation_patch,
    pod_path,
    provider_refusal,
    shadow_pod_path,
)

JSON = dict[str, Any]
OWNERSHIP = {ORIGIN_LABEL: "venice", DESTINATION_LABEL: "naples", NODENAME_LABEL: "naples"}


def shadow_pod(**status: Any) -> JSON:
    return {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "ShadowPod",
        "metadata": {
            "name": "web",
            "namespace": "shop-venice",
            "uid": "shadow-uid",
            "labels": {**OWNERSHIP, "app": "web"},
            "annotations": {"team": "shop", DELETION_GRACE_ANNOTATION: "17"},
        },
        "spec": {"pod": {"containers": [{"name": "app", "image": "nginx:1"}]}},
        "status": status,
    }


def pod(phase: str = "Running", **status: Any) -> JSON:
    made = forge_pod_of(shadow_pod())
    made["metadata"]["uid"] = "pod-uid"
    made["status"] = {"phase": phase, **status}
    return made


def test_the_pod_of_a_shadow_pod_is_its_spec_owned_by_it() -> None:
    made = forge_pod_of(shadow_pod())
    assert made["metadata"]["name"] == "web"
    assert made["metadata"]["namespace"] == "shop-venice"
    assert made["metadata"]["labels"] == {**OWNERSHIP, "app": "web", SHADOW_POD_OWNED_LABEL: "true"}
    # The consumer's word on its deletion is for the controller, not for the pod.
    assert made["metadata"]["annotations"] == {"team": "shop"}
    assert made["spec"] == {"containers": [{"name": "app", "image": "nginx:1"}]}
    assert made["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "ShadowPod",
            "name": "web",
            "uid": "shadow-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert controller_uid(made) == "shadow-uid"
    assert controller_uid({"metadata": {}}) is None


@pytest.mark.parametrize(
    ("status", "evicted"),
    [
        ({"phase": "Failed", "reason": "Evicted"}, True),
        ({"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "True"}]}, True),
        (
            {"phase": "Failed", "conditions": [{"type": "DisruptionTarget", "status": "False"}]},
            False,
        ),
        ({"phase": "Failed", "reason": "Error"}, False),
        ({"phase": "Succeeded"}, False),
        ({"phase": "Running", "reason": "Evicted"}, False),
    ],
)
def test_only_a_pod_put_out_counts_as_evicted(status: JSON, evicted: bool) -> None:
    assert is_evicted({"status": status}) is evicted


@pytest.mark.parametrize(
    ("phase", "done"),
    [("Succeeded", True), ("Failed", True), ("Running", False), (None, False)],
)
def test_a_shadow_pod_whose_pod_finished_is_never_run_again(phase: str | None, done: bool) -> None:
    assert shadow_pod_finished(shadow_pod(**({"phase": phase} if phase else {}))) is done


@pytest.mark.parametrize(
    ("value", "grace"),
    [("17", 17), ("0", 0), ("-1", None), ("soon", None), ("99999999", None), (None, None)],
)
def test_the_consumers_grace_period_is_taken_only_when_sane(
    value: str | None, grace: int | None
) -> None:
    shadow = shadow_pod()
    if value is None:
        del shadow["metadata"]["annotations"][DELETION_GRACE_ANNOTATION]
    else:
        shadow["metadata"]["annotations"][DELETION_GRACE_ANNOTATION] = value
    assert consumer_grace_period(shadow) == grace


def test_a_plain_pod_of_an_older_vk_is_adopted_and_nothing_else() -> None:
    plain = {"metadata": {"name": "web", "labels": dict(OWNERSHIP), "resourceVersion": "7"}}
    assert is_adoptable(plain, shadow_pod())
    patch = forge_adoption_patch(plain, shadow_pod())
    assert patch["metadata"]["resourceVersion"] == "7"
    assert patch["metadata"]["labels"] == {SHADOW_POD_OWNED_LABEL: "true"}
    assert controller_uid({"metadata": patch["metadata"]}) == "shadow-uid"

    another_node = {"metadata": {"labels": {**OWNERSHIP, NODENAME_LABEL: "elsewhere"}}}
    someone_elses = {"metadata": {"labels": {"app": "web"}}}
    controlled = {
        "metadata": {
            "labels": dict(OWNERSHIP),
            "ownerReferences": [{"kind": "ReplicaSet", "controller": True, "uid": "rs"}],
        }
    }
    for pod_in_the_way in (another_node, someone_elses, controlled):
        assert not is_adoptable(pod_in_the_way, shadow_pod())


@pytest.mark.parametrize(
    ("status", "message", "reason"),
    [
        (
            403,
            'pods "web" is forbidden: violates PodSecurity "baseline:latest"',
            REASON_POD_SECURITY,
        ),
        (403, 'pods "web" is forbidden: exceeded quota', REASON_FORBIDDEN),
        (422, 'Pod "web" is invalid', REASON_INVALID),
    ],
)
def test_a_refusal_is_named_for_what_refused_it(status: int, message: str, reason: str) -> None:
    assert refusal_reason(ApiError(status, "Forbidden", message)) == reason


def test_the_status_follows_the_pod_and_says_why_there_is_none() -> None:
    created = forge_shadow_pod_status({}, "Running", True, "PodCreated", "", reserved=None)
    assert created["phase"] == "Running"
    assert created["conditions"][0]["type"] == "PodCreated"
    assert created["conditions"][0]["status"] == "True"
    # Written once: the same again is no change, whatever the time.
    assert not status_differs(
        created, forge_shadow_pod_status(created, "Running", True, "PodCreated", "", reserved=None)
    )
    refused = forge_shadow_pod_status(
        created, None, False, "PodSecurity", "violates baseline", reserved=None
    )
    assert refused["phase"] == "Running"  # the phase recorded stays until a Pod says otherwise
    assert (refused["conditions"][0]["status"], refused["conditions"][0]["reason"]) == (
        "False",
        "PodSecurity",
    )
    assert status_differs(created, refused)
    assert forge_shadow_pod_status({}, None, False, "Invalid", "no", reserved=None)["conditions"]
    assert "phase" not in forge_shadow_pod_status({}, None, False, "Invalid", "no", reserved=None)


def test_a_consumers_shadow_pod_says_whether_its_quota_holds_it() -> None:
    created = forge_shadow_pod_status({}, "Pending", True, "PodCreated", "", reserved=True)
    reserved = created["conditions"][1]
    assert (reserved["type"], reserved["status"], reserved["reason"]) == (
        "QuotaReserved",
        "True",
        "Reserved",
    )
    assert is_accounted({"status": created})
    # Refused by Pod Security after it was found in the ledger: still accounted.
    refused = forge_shadow_pod_status(created, None, False, "PodSecurity", "no", reserved=True)
    assert is_accounted({"status": refused})
    message = not_reserved_message(consumers(shadow_pod()), quotas=1)
    unadmitted = forge_shadow_pod_status({}, None, False, "NotReserved", message, reserved=False)
    assert [c["status"] for c in unadmitted["conditions"]] == ["False", "False"]
    assert "did not pass the provider's ShadowPod webhook" in unadmitted["conditions"][1]["message"]
    assert not is_accounted({"status": unadmitted})


class ApiReads:
    """The API server's Quotas and namespaces, for the controller's fresh reads of a ledger
    and of whose namespace a ShadowPod is in."""

    def __init__(self, *quotas: JSON, namespaces: tuple[JSON, ...] = ()) -> None:
        self.objects = {
            **{f"quotas/{q['metadata']['name']}": q for q in quotas},
            **{f"namespaces/{n['metadata']['name']}": n for n in namespaces},
        }
        self.reads = 0

    async def get(self, path: str) -> JSON:
        self.reads += 1
        kind_and_name = "/".join(path.rsplit("/", 2)[-2:])
        if kind_and_name not in self.objects:
            raise NotFound(404, "NotFound", path)
        return self.objects[kind_and_name]


def quota(status: JSON, user: str = "venice-naples") -> JSON:
    return {
        "metadata": {"name": "naples", "namespace": "liqo-tenant-venice"},
        "spec": {"user": user},
        "status": status,
    }


def namespace(consumer: str | None = "venice") -> JSON:
    """shop-venice, made by the provider for `consumer` (None: the provider's own)."""
    labels = {REMOTE_CLUSTER_ID_LABEL: consumer} if consumer else {}
    return {"metadata": {"name": "shop-venice", "labels": labels}}


def controller(
    cached: JSON | None, stored: JSON | None, *, cached_namespace: JSON | None = None,
    stored_namespace: JSON | None = None,
) -> tuple[ProviderShadowPods, ApiReads]:  # fmt: skip
    reads = ApiReads(
        *([stored] if stored else []),
        namespaces=(stored_namespace,) if stored_namespace else (),
    )
    quotas = Informer(reads, "offloading.liqo.io/v1beta1", "quotas",  # type: ignore[arg-type]
                      indexers={CREATOR_INDEX: quota_creator_index})  # fmt: skip
    if cached is not None:
        quotas.store.upsert(cached)
    the_controller = ProviderShadowPods(reads, quotas)  # type: ignore[arg-type]
    if cached_namespace is not None:
        the_controller.consumer_namespaces.store.upsert(cached_namespace)
    return the_controller, reads


def reserved_for(uid: str) -> JSON:
    """A ledger holding the admission of shop-venice/web of `uid`."""
    return forge_reserved_status({}, "shop-venice/web", uid, {}, datetime.now(UTC))


def consumers(shadow: JSON, user: str = "venice-naples") -> JSON:
    shadow["metadata"]["labels"][CREATOR_USER_LABEL] = user
    return shadow


@pytest.mark.parametrize(
    ("shadow", "cached", "stored", "in_ledger", "reads"),
    [
        # The provider's own ShadowPod, in a namespace of its own: no Quota limits it.
        (shadow_pod(), None, None, True, 1),
        # A consumer's, its reservation in the cache.
        (consumers(shadow_pod()), quota(reserved_for("shadow-uid")), None, True, 0),
        # The cache has not seen the reservation yet: the API server has.
        (consumers(shadow_pod()), quota({}), quota(reserved_for("shadow-uid")), True, 1),
        # Reserved for another ShadowPod of that name (deleted and made again unadmitted).
        (
            consumers(shadow_pod()),
            quota(reserved_for("old-uid")),
            quota(reserved_for("old-uid")),
            False,
            1,
        ),
        # Never admitted: no reservation anywhere.
        (consumers(shadow_pod()), quota({}), quota({}), False, 1),
        # A consumer no Quota counts.
        (consumers(shadow_pod(), "someone-else"), quota({}), None, False, 0),
        # Accounted already: its Pod is made again without a reservation.
        (
            consumers(shadow_pod(conditions=[{"type": "QuotaReserved", "status": "True"}])),
            quota({}),
            None,
            True,
            0,
        ),
    ],
)
def test_a_consumers_shadow_pod_gets_a_pod_only_if_its_ledger_holds_it(
    shadow: JSON, cached: JSON | None, stored: JSON | None, in_ledger: bool, reads: int
) -> None:
    the_controller, api = controller(cached, stored, stored_namespace=namespace(None))
    assert asyncio.run(the_controller._in_ledger(shadow, "shop-venice/web")) is in_ledger
    assert api.reads == reads


@pytest.mark.parametrize(
    ("cached_namespace", "stored_namespace", "reads"),
    [
        (namespace(), None, 0),  # the cache knows whose namespace it is
        (None, namespace(), 1),  # the cache has not seen it yet: the API server has
    ],
)
def test_an_unstamped_shadow_pod_in_a_consumers_namespace_gets_no_pod(
    cached_namespace: JSON | None, stored_namespace: JSON | None, reads: int
) -> None:
    """It bypassed every ShadowPod webhook (down under failurePolicy Ignore, say): the
    consumer's, Quota or not, even if it claims to be accounted."""
    for shadow in (
        shadow_pod(),
        shadow_pod(conditions=[{"type": "PodCreated", "status": "True"}]),
    ):
        the_controller, api = controller(
            quota(reserved_for("shadow-uid")),
            None,
            cached_namespace=cached_namespace,
            stored_namespace=stored_namespace,
        )
        assert asyncio.run(the_controller._in_ledger(shadow, "shop-venice/web")) is False
        assert api.reads == reads
    assert "carries no creator stamp" in not_reserved_message(shadow_pod(), quotas=0)


def test_the_provider_keeps_its_pod_in_line_with_the_shadow_pod() -> None:
    shadow = shadow_pod()
    shadow["spec"]["pod"]["containers"][0]["image"] = "nginx:2"
    shadow["metadata"]["labels"]["version"] = "2"
    running = pod()
    running["metadata"]["labels"]["cni.example.com/ip"] = "10.0.0.1"  # the provider's own
    patch = live_pod_patch(forge_pod_of(shadow), running)
    assert patch == {
        "metadata": {"labels": {"version": "2"}},
        "spec": {"containers": [{"name": "app", "image": "nginx:2"}]},
    }
    assert live_pod_patch(forge_pod_of(shadow_pod()), pod()) is None


class StatusWrites:
    """The provider's API server for a ShadowPod's status writes: each merge patch answered
    with the ShadowPod at its next resourceVersion; no namespace is a consumer's."""

    name = "provider"

    def __init__(self, shadow: JSON) -> None:
        self.stored = shadow
        self.patches: list[JSON] = []

    async def get(self, path: str) -> JSON:
        raise NotFound(404, "NotFound", path)

    async def set_finalizer(self, path: str, obj: JSON, finalizer: str, *, present: bool) -> bool:
        return False  # the ShadowPod carries it already

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        self.patches.append(patch)
        metadata = self.stored["metadata"]
        version = str(int(metadata["resourceVersion"]) + 1)
        self.stored = {**self.stored, **patch, "metadata": {**metadata, "resourceVersion": version}}
        return self.stored


def controller_on(api: StatusWrites, cached_shadow: JSON) -> ProviderShadowPods:
    """The ShadowPod controller talking to `api`, with `cached_shadow` in its cache."""
    quotas = Informer(api, "offloading.liqo.io/v1beta1", "quotas")  # type: ignore[arg-type]
    the_controller = ProviderShadowPods(api, quotas)  # type: ignore[arg-type]
    the_controller.shadow_pods.store.upsert(cached_shadow)
    return the_controller


def status_writing_controller(shadow: JSON) -> tuple[StatusWrites, ProviderShadowPods]:
    """The ShadowPod controller with `shadow` (version 1, with our finalizer) cached and stored
    by an API server that records its status writes."""
    shadow["metadata"].update(resourceVersion="1", finalizers=[SHADOW_POD_FINALIZER])
    api = StatusWrites(shadow)
    return api, controller_on(api, shadow)


def test_a_status_written_is_not_written_again_on_the_caches_older_copy() -> None:
    shadow = shadow_pod()
    api, the_controller = status_writing_controller(shadow)
    key = "shop-venice/web"

    async def reconcile_with(made: JSON) -> None:
        made["metadata"]["uid"] = "pod-uid"
        the_controller.pods.store.upsert(made)
        await the_controller.reconcile(key)

    async def scenario() -> None:
        await reconcile_with(pod("Pending"))
        # The Pod scheduled, its event first: the ShadowPod's cache still holds version 1.
        await reconcile_with(pod("Pending", conditions=[{"type": "PodScheduled"}]))
        assert len(api.patches) == 1
        await reconcile_with(pod("Running"))

    asyncio.run(scenario())
    assert [patch["status"]["phase"] for patch in api.patches] == ["Pending", "Running"]
    created = [patch["status"]["conditions"][0] for patch in api.patches]
    assert created[0]["lastTransitionTime"] == created[1]["lastTransitionTime"]
    # Once the cache shows the last write, the write is forgotten and the cache read again.
    the_controller._on_shadow_pod("MODIFIED", api.stored, shadow)
    assert the_controller.recent.current(key, None) is None


def test_a_status_written_never_stands_in_for_a_shadow_pod_deleted_since() -> None:
    api, the_controller = status_writing_controller(shadow_pod())
    made = pod("Pending")
    made["metadata"]["uid"] = "pod-uid"
    the_controller.pods.store.upsert(made)
    key = "shop-venice/web"

    async def scenario() -> None:
        await the_controller.reconcile(key)
        # Deleted by the consumer, its deletion seen before our write's answer was: the write
        # is remembered, the cache holds nothing.
        the_controller.shadow_pods.store.delete(key)
        the_controller.pods.store.delete(key)
        result = await the_controller.reconcile(key)
        assert result.requeue_after is None

    asyncio.run(scenario())
    assert len(api.patches) == 1  # nothing written, nor a Pod made, for the ShadowPod gone


def a_whole_pod(image: str = "nginx:1") -> JSON:
    """The Pod of `shadow_pod()` as its API server and kubelet write it: its token volume and
    mount named for it alone, defaults, the containers' statuses."""
    made = pod("Running", podIP="10.0.0.7", hostIP="192.168.1.2")
    made["metadata"].update(uid="pod-uid", resourceVersion="7")
    made["spec"] = {
        "nodeName": "naples-worker-1",
        "containers": [
            {
                "name": "app",
                "image": image,
                "resources": {"requests": {"cpu": "100m"}},
                "volumeMounts": [{"name": "kube-api-access-x7k2p", "mountPath": "/var/run"}],
                "terminationMessagePath": "/dev/termination-log",
            }
        ],
        "volumes": [{"name": "kube-api-access-x7k2p", "projected": {"sources": []}}],
        "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists"}],
        "dnsPolicy": "ClusterFirst",
    }
    made["status"].update(
        conditions=[{"type": "Ready", "status": "True"}],
        containerStatuses=[
            {"name": "app", "ready": True, "containerID": "containerd://1f2e", "image": image}
        ],
    )
    return made


def test_the_provider_keeps_of_its_pods_what_its_controllers_read() -> None:
    whole = a_whole_pod()
    kept = provider_pod_as_read(whole)
    assert kept["spec"]["containers"] == [{"name": "app", "image": "nginx:1"}]
    assert "volumes" not in kept["spec"]
    assert "containerStatuses" not in kept["status"]
    assert kept["spec"]["nodeName"] == "naples-worker-1"
    assert kept["metadata"] == whole["metadata"]
    evicted = a_whole_pod()
    evicted["status"].update(phase="Failed", reason="Evicted")
    assert is_evicted(provider_pod_as_read(evicted))
    assert not is_evicted(kept)
    # Every change the controller keeps its Pod in line with but an image, judged alike.
    relabelled, tolerating, deadline = shadow_pod(), shadow_pod(), shadow_pod()
    relabelled["metadata"]["labels"]["version"] = "2"
    tolerating["spec"]["pod"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    deadline["spec"]["pod"]["activeDeadlineSeconds"] = 30
    for shadow in (shadow_pod(), relabelled, tolerating, deadline):
        wanted = forge_pod_of(shadow)
        assert live_pod_patch(wanted, kept) == live_pod_patch(wanted, whole)


class ProviderObjects(StatusWrites):
    """The provider's API server holding the whole ShadowPod and, if given, its whole Pod: the
    Pods made and the Pod's patches recorded."""

    def __init__(self, shadow: JSON, whole_pod: JSON | None = None) -> None:
        super().__init__(shadow)
        self.whole_pod = whole_pod
        self.made: list[JSON] = []
        self.pod_patches: list[JSON] = []

    async def get(self, path: str) -> JSON:
        if path == shadow_pod_path("shop-venice", "web"):
            return self.stored
        if path == pod_path("shop-venice", "web") and self.whole_pod is not None:
            return self.whole_pod
        raise NotFound(404, "NotFound", path)

    async def create(self, path: str, body: JSON) -> JSON:
        self.made.append(body)
        return body

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        if path == pod_path("shop-venice", "web"):
            self.pod_patches.append(patch)
            return self.whole_pod or {}
        return await super().merge_patch(path, patch)


def test_a_new_image_is_patched_onto_the_whole_pod_read_afresh() -> None:
    """The cache keeps a container's name and image only; a merge patch replaces the list
    whole, so one built on the cache would strip the Pod's containers of the rest (and be
    refused: a container is immutable but for its image)."""
    shadow = shadow_pod()
    shadow["spec"]["pod"]["containers"][0]["image"] = "nginx:2"
    shadow["metadata"].update(resourceVersion="1", finalizers=[SHADOW_POD_FINALIZER])
    api = ProviderObjects(shadow, a_whole_pod("nginx:1"))
    the_controller = controller_on(api, shadow)
    the_controller.pods.store.upsert(provider_pod_as_read(a_whole_pod("nginx:1")))
    asyncio.run(the_controller.reconcile("shop-venice/web"))
    [patch] = api.pod_patches
    assert patch["spec"]["containers"] == [
        {**a_whole_pod()["spec"]["containers"][0], "image": "nginx:2"}
    ]
    # On the version read: a list built on it never replaces a newer one.
    assert patch["metadata"]["resourceVersion"] == "7"


def test_a_consumer_changing_a_shadow_pod_on_and_on_has_its_pod_patched_at_a_pace() -> None:
    """The attack: a consumer writes its ShadowPods as it likes, and changes one's labels on
    and on: each change was a patch of the Pod, and an event of it for each of the Pod's
    watchers. Past a burst, one is patched every POD_PATCH_INTERVAL_SECONDS, as the ShadowPod
    says then: its last word is not lost."""
    now = [0.0]
    shadow = shadow_pod()
    shadow["metadata"].update(resourceVersion="1", finalizers=[SHADOW_POD_FINALIZER])
    api = ProviderObjects(shadow, a_whole_pod())
    the_controller = controller_on(api, shadow)
    the_controller.pod_patch_pace = TokenBuckets(
        1 / POD_PATCH_INTERVAL_SECONDS, POD_PATCH_BURST, clock=lambda: now[0]
    )
    the_controller.pods.store.upsert(provider_pod_as_read(a_whole_pod()))

    async def relabelled(value: str) -> float | None:
        labels = {**OWNERSHIP, "app": "web", "flip": value}
        changed = {**shadow["metadata"], "labels": labels, "resourceVersion": f"1{value:0>3}"}
        the_controller.shadow_pods.store.upsert({**shadow, "metadata": changed})
        return (await the_controller.reconcile("shop-venice/web")).requeue_after

    retries = [asyncio.run(relabelled(str(flip))) for flip in range(30)]
    assert len(api.pod_patches) == POD_PATCH_BURST
    assert all(r == pytest.approx(POD_PATCH_INTERVAL_SECONDS) for r in retries[10:])
    now[0] += POD_PATCH_INTERVAL_SECONDS  # asked back then
    asyncio.run(the_controller.reconcile("shop-venice/web"))
    assert api.pod_patches[-1]["metadata"]["labels"]["flip"] == "29"


def a_whole_shadow_pod(**status: Any) -> JSON:
    """The ShadowPod of a pod as a virtual kubelet writes it: a token volume and mount named for
    this pod alone, a sidecar, an overhead; `status` as the provider wrote it."""
    shadow = shadow_pod(**status)
    shadow["metadata"].update(resourceVersion="3", finalizers=[SHADOW_POD_FINALIZER])
    mount = {"name": "kube-api-access-x7k2p", "mountPath": "/var/run/secrets"}
    shadow["spec"]["pod"] = {
        "containers": [
            {
                "name": "app",
                "image": "nginx:1",
                "resources": {"requests": {"cpu": "100m"}, "limits": {"memory": "64Mi"}},
                "env": [{"name": "MODE", "value": "production"}],
                "volumeMounts": [mount],
            }
        ],
        "initContainers": [
            {
                "name": "proxy",
                "image": "envoy:1",
                "restartPolicy": "Always",
                "resources": {"requests": {"cpu": "50m"}},
                "volumeMounts": [mount],
            }
        ],
        "volumes": [{"name": "kube-api-access-x7k2p", "secret": {"secretName": "web-token-x7k2p"}}],
        "overhead": {"cpu": "10m"},
        "tolerations": [{"key": "virtual-node.liqo.io/not-allowed", "operator": "Exists"}],
        "activeDeadlineSeconds": 600,
    }
    return shadow


MADE = {"conditions": [{"type": "PodCreated", "status": "True"}], "phase": "Running"}


def test_a_shadow_pod_nested_past_what_json_encodes_is_not_kept_whole() -> None:
    """A consumer's `spec.pod` too deep to measure (orjson encodes 255 levels) is no small one:
    kept as read, and never a raise in the informer, which would stop the cache."""
    deep: JSON = {}
    for _ in range(300):
        deep = {"nested": deep}
    waiting = a_whole_shadow_pod()
    waiting["spec"]["pod"]["nodeSelector"] = deep
    kept = provider_shadow_pod_as_read(waiting)
    assert kept[CREATION_SPEC_LEFT] is True
    assert "nodeSelector" not in kept["spec"]["pod"]


def test_a_shadow_pod_is_kept_whole_until_its_pod_is_made_then_as_read() -> None:
    waiting = a_whole_shadow_pod()
    assert provider_shadow_pod_as_read(waiting) is waiting  # its Pod is made of it
    whole = a_whole_shadow_pod(**MADE)
    kept = provider_shadow_pod_as_read(whole)
    assert kept[CREATION_SPEC_LEFT] is True
    assert "volumes" not in kept["spec"]["pod"]
    assert all("volumeMounts" not in c for c in kept["spec"]["pod"]["containers"])
    assert kept["metadata"] == whole["metadata"]
    assert kept["status"] == whole["status"]
    # It counts in its Quota as it did whole: the sidecar and the overhead with the rest.
    assert share_of(kept) == share_of(whole)
    assert share_of(kept).usage == {
        "cpu": Decimal("0.16"),
        "memory": Decimal(64 * 1024 * 1024),
        "pods": Decimal(1),
    }
    # Its Pod is kept in line with it as it was whole, whatever the consumer changes.
    running = a_whole_pod()
    for change in (
        lambda s: s["metadata"]["labels"].update(version="2"),
        lambda s: s["spec"]["pod"]["tolerations"].append({"key": "gpu", "operator": "Exists"}),
        lambda s: s["spec"]["pod"].update(activeDeadlineSeconds=30),
        lambda s: s["spec"]["pod"]["containers"][0].update(image="nginx:2"),
    ):
        changed = a_whole_shadow_pod(**MADE)
        change(changed)
        assert live_pod_patch(
            forge_pod_of(provider_shadow_pod_as_read(changed)), running
        ) == live_pod_patch(forge_pod_of(changed), running)


class PodDeletions(StatusWrites):
    """The provider's API server recording the deletions of Pods."""

    def __init__(self, shadow: JSON) -> None:
        super().__init__(shadow)
        self.deleted: list[tuple[str, JSON | None]] = []

    async def delete(self, path: str, body: JSON | None = None) -> None:
        self.deleted.append((path, body))


def test_an_evicted_pod_is_deleted_once_then_left_until_it_is_gone() -> None:
    """Deleted already, a Pod is not deleted again at each of its events until it is gone:
    each deletion is one more event for every watcher (kwok's, deleting by name, took the Pod
    made again after it)."""
    shadow = shadow_pod()
    shadow["metadata"].update(resourceVersion="1", finalizers=[SHADOW_POD_FINALIZER])
    api = PodDeletions(shadow)
    the_controller = controller_on(api, shadow)
    evicted = pod("Failed", reason="Evicted")
    the_controller.pods.store.upsert(evicted)
    asyncio.run(the_controller.reconcile("shop-venice/web"))
    [(path, options)] = api.deleted
    assert path == pod_path("shop-venice", "web")
    assert (options or {}).get("preconditions") == {"uid": "pod-uid"}
    evicted["metadata"]["deletionTimestamp"] = "2026-11-28T19:14:34Z"
    the_controller.pods.store.upsert(evicted)
    asyncio.run(the_controller.reconcile("shop-venice/web"))
    assert len(api.deleted) == 1
    assert api.patches == []  # nor its status written meanwhile


@pytest.mark.parametrize(
    ("told", "pod_grace", "deleted_with"),
    [("5", 600, [5]), ("0", 600, [0]), ("600", 600, []), ("900", 600, []), (None, 30, [])],
)
def test_a_pod_being_deleted_is_deleted_again_when_the_consumer_shortens_its_grace(
    told: str | None, pod_grace: int, deleted_with: list[int]
) -> None:
    """A consumer's second deletion with a shorter grace period (`kubectl delete
    --grace-period=5`, or `--force`) reaches the Pod, which its first deletion gave longer."""
    shadow = shadow_pod()
    annotations = shadow["metadata"]["annotations"]
    del annotations[DELETION_GRACE_ANNOTATION]
    if told is not None:
        annotations[DELETION_GRACE_ANNOTATION] = told
    shadow["metadata"].update(
        resourceVersion="1",
        finalizers=[SHADOW_POD_FINALIZER],
        deletionTimestamp="2026-11-29T10:00:00Z",
    )
    api = PodDeletions(shadow)
    the_controller = controller_on(api, shadow)
    deleting = pod()
    deleting["metadata"].update(
        deletionTimestamp="2026-11-29T10:10:00Z", deletionGracePeriodSeconds=pod_grace
    )
    the_controller.pods.store.upsert(deleting)
    asyncio.run(the_controller.reconcile("shop-venice/web"))
    assert [(options or {}).get("gracePeriodSeconds") for _, options in api.deleted] == (
        deleted_with
    )


def test_a_pod_made_again_is_made_of_the_shadow_pod_read_afresh() -> None:
    """Its Pod evicted or deleted, a ShadowPod the cache keeps as read gets its Pod again, with
    the volumes and the rest of its containers the cache does not keep."""
    whole = a_whole_shadow_pod(**MADE)
    api = ProviderObjects(whole)
    the_controller = controller_on(api, provider_shadow_pod_as_read(whole))
    asyncio.run(the_controller.reconcile("shop-venice/web"))
    [made] = api.made
    assert made == forge_pod_of(whole)


def test_a_large_shadow_pod_waiting_for_its_pod_is_kept_as_read_and_its_pod_made_afresh() -> None:
    """`spec.pod` is free JSON to the API server: one of small objects by the thousand is 20
    times its JSON decoded. Until its Pod is made, a ShadowPod is kept whole only if its
    `spec.pod` is small; a larger one is kept as once its Pod is made, and its Pod is made of
    it read afresh."""
    whole = a_whole_shadow_pod()  # no status: its Pod is not made
    junk = [{"k": i} for i in range(20_000)]
    whole["spec"]["pod"]["volumes"].append({"name": "data", "emptyDir": {}, "j": junk})
    whole["spec"]["pod"]["containers"][0]["j"] = junk
    kept = provider_shadow_pod_as_read(whole)
    assert kept[CREATION_SPEC_LEFT] is True
    assert len(orjson.dumps(kept)) < 2048 < 200_000 < len(orjson.dumps(whole))
    assert share_of(kept) == share_of(whole)  # it counts in its Quota as it did whole
    api = ProviderObjects(whole)
    the_controller = controller_on(api, kept)
    asyncio.run(the_controller.reconcile("shop-venice/web"))
    [made] = api.made
    assert made == forge_pod_of(whole)


def test_a_shadow_pods_tolerations_are_kept_as_its_pod_keeps_them() -> None:
    """A toleration with a field no Pod has (or an empty one, which the API server leaves out)
    never equals the Pod's: compared whole, it was added to the Pod again at each reconcile,
    each addition an event of the Pod and another reconcile. Nor is what a consumer put
    around them kept."""
    shadow = a_whole_shadow_pod(**MADE)
    junk = [{"k": i} for i in range(20_000)]
    shadow["spec"]["pod"]["tolerations"] = [
        {"key": "gpu", "operator": "Exists", "value": "", "effect": "NoSchedule", "j": junk},
        {"key": "spot", "operator": "Equal", "value": "yes", "tolerationSeconds": 0},
    ]
    shadow["spec"]["pod"]["containers"][0]["resources"]["claims"] = junk
    shadow["spec"]["pod"]["resources"] = {"requests": {"cpu": "1"}, "j": junk}
    kept = provider_shadow_pod_as_read(shadow)
    running = a_whole_pod()
    running["spec"]["activeDeadlineSeconds"] = 600
    running["spec"]["tolerations"] = [
        {"key": "node.kubernetes.io/not-ready", "operator": "Exists"},
        {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
        {"key": "spot", "operator": "Equal", "value": "yes", "tolerationSeconds": 0},
    ]
    assert live_pod_patch(forge_pod_of(kept), provider_pod_as_read(running)) is None
    assert len(orjson.dumps(kept)) < 2048
    assert share_of(kept) == share_of(shadow)
    # One the Pod lacks is added, as it was.
    del running["spec"]["tolerations"][2]
    patch = live_pod_patch(forge_pod_of(kept), provider_pod_as_read(running))
    assert patch is not None
    assert patch["spec"]["tolerations"][-1] == {
        "key": "spot",
        "operator": "Equal",
        "value": "yes",
        "tolerationSeconds": 0,
    }


# --- A spec.pod that is no pod spec (stored while the webhook was down) ---------------------


def nameless(shadow: JSON) -> JSON:
    """`shadow` (version 1, with our finalizer) asking for a second container with no name."""
    shadow["spec"]["pod"]["containers"].append({"image": "busybox"})
    shadow["metadata"].update(resourceVersion="1", finalizers=[SHADOW_POD_FINALIZER])
    return shadow


def pod_created(api: StatusWrites) -> JSON:
    """The PodCreated condition last written on the ShadowPod."""
    condition: JSON = api.stored["status"]["conditions"][0]
    assert condition["type"] == "PodCreated"
    return condition


def test_a_shadow_pod_that_is_no_pod_gets_none_and_says_why_without_retrying() -> None:
    api = ProviderObjects(nameless(shadow_pod()))
    the_controller = controller_on(api, api.stored)

    async def scenario() -> None:
        for _ in range(2):
            result = await the_controller.reconcile("shop-venice/web")
            assert result.requeue_after is None  # only a change of the ShadowPod mends it

    asyncio.run(scenario())
    assert api.made == []
    assert len(api.patches) == 1  # said once
    condition = pod_created(api)
    assert (condition["status"], condition["reason"]) == ("False", REASON_INVALID)
    assert condition["message"].startswith(
        "spec.pod cannot be read as a pod spec: spec.pod.containers[1].name: required. "
        "No Pod is made of it"
    )


def test_a_consumers_shadow_pod_that_is_no_pod_and_no_ledger_holds_is_not_accounted() -> None:
    """Its ledger is asked first: told NotReserved, the consumer withdraws it (and the webhook
    tells why it refuses it again); marked Invalid, it would count in the Quota."""
    api = ProviderObjects(nameless(consumers(shadow_pod())))
    quotas = Informer(api, "offloading.liqo.io/v1beta1", "quotas",  # type: ignore[arg-type]
                      indexers={CREATOR_INDEX: quota_creator_index})  # fmt: skip
    quotas.store.upsert(quota({}))
    the_controller = ProviderShadowPods(api, quotas)  # type: ignore[arg-type]
    the_controller.shadow_pods.store.upsert(api.stored)
    asyncio.run(the_controller.reconcile("shop-venice/web"))
    assert api.made == []
    assert pod_created(api)["reason"] == "NotReserved"
    assert not is_accounted(api.stored)
    # Found in its ledger (admitted by an older webhook), it is accounted, and refused.
    admitted = nameless(consumers(shadow_pod()))
    api = ProviderObjects(admitted)
    quotas.store.upsert(quota(reserved_for("shadow-uid")))
    the_controller = ProviderShadowPods(api, quotas)  # type: ignore[arg-type]
    the_controller.shadow_pods.store.upsert(admitted)
    asyncio.run(the_controller.reconcile("shop-venice/web"))
    assert api.made == []
    assert pod_created(api)["reason"] == REASON_INVALID
    assert is_accounted(api.stored)


def test_a_pod_whose_shadow_pod_became_no_pod_runs_on_as_made_and_says_why() -> None:
    shadow = nameless(shadow_pod())
    shadow["metadata"]["labels"]["version"] = "2"
    api = ProviderObjects(shadow)
    the_controller = controller_on(api, shadow)
    the_controller.pods.store.upsert(pod())
    result = asyncio.run(the_controller.reconcile("shop-venice/web"))
    assert result.requeue_after is None
    # Its labels kept in line still; its spec left as it was made.
    assert api.pod_patches == [{"metadata": {"labels": {"version": "2"}}}]
    condition = pod_created(api)
    assert (condition["status"], condition["reason"]) == ("True", REASON_INVALID)
    assert "spec.pod.containers[1].name: required" in condition["message"]
    assert api.stored["status"]["phase"] == "Running"


class RefusedPodPatches(ProviderObjects):
    """The provider's API server refusing every patch of the Pod as invalid."""

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        if path == pod_path("shop-venice", "web"):
            self.pod_patches.append(patch)
            raise ApiError(422, "Invalid", 'Pod "web" is invalid: spec: Forbidden: pod updates')
        return await super().merge_patch(path, patch)


def test_a_change_the_api_server_refuses_on_the_pod_is_said_not_retried_with_back_off() -> None:
    """A deadline lengthened, an image of spaces: nothing of the webhook's to refuse, but no
    live Pod may take it, and each try is refused again."""
    shadow = shadow_pod()
    shadow["spec"]["pod"]["activeDeadlineSeconds"] = 600
    shadow["metadata"].update(resourceVersion="1", finalizers=[SHADOW_POD_FINALIZER])
    api = RefusedPodPatches(shadow)
    the_controller = controller_on(api, shadow)
    running = pod()
    running["spec"]["activeDeadlineSeconds"] = 60
    the_controller.pods.store.upsert(running)
    result = asyncio.run(the_controller.reconcile("shop-venice/web"))
    assert api.pod_patches == [{"spec": {"activeDeadlineSeconds": 600}}]
    assert result.requeue_after == REFUSED_RETRY  # as a refused creation is tried again
    condition = pod_created(api)
    assert (condition["status"], condition["reason"]) == ("True", REASON_INVALID)
    assert condition["message"].endswith('Pod "web" is invalid: spec: Forbidden: pod updates')


# --- The virtual kubelet's side ---------------------------------------------------------------


def local_pod(**metadata: Any) -> JSON:
    return {
        "metadata": {
            "name": "web",
            "namespace": "shop",
            "uid": "local-uid",
            "labels": {"app": "web"},
            **metadata,
        },
        "spec": {
            "nodeName": "naples",
            "containers": [{"name": "app", "image": "nginx:1"}],
            "terminationGracePeriodSeconds": 30,
        },
    }


def test_the_virtual_kubelet_asks_for_its_remote_pod_as_a_shadow_pod() -> None:
    remote = forge_remote_pod(
        local_pod(),
        remote_namespace="shop-venice",
        local_cluster_id="venice",
        remote_cluster_id="naples",
        node_name="naples",
    )
    shadow = forge_shadow_pod(remote)
    assert shadow["apiVersion"] == "offloading.liqo.io/v1beta1"
    assert shadow["kind"] == "ShadowPod"
    assert shadow["metadata"] == remote["metadata"]
    assert shadow["spec"] == {"pod": remote["spec"]}
    assert shadow_pod_as_pod(shadow) == {"metadata": remote["metadata"], "spec": remote["spec"]}
    assert shadow_pod_patch({"metadata": {"labels": {"a": "b"}}, "spec": {"x": 1}}) == {
        "metadata": {"labels": {"a": "b"}},
        "spec": {"pod": {"x": 1}},
    }
    assert shadow_pod_patch(None) is None


def test_a_deletion_tells_its_grace_period_only_when_it_is_not_the_pods_own() -> None:
    shadow = {"metadata": {}, "spec": {"pod": {"terminationGracePeriodSeconds": 30}}}
    assert grace_annotation_patch(30, shadow) is None
    assert grace_annotation_patch(None, shadow) is None
    assert grace_annotation_patch(17, shadow) == {
        "metadata": {"annotations": {DELETION_GRACE_ANNOTATION: "17"}}
    }
    assert grace_annotation_patch(600, shadow) == {
        "metadata": {"annotations": {DELETION_GRACE_ANNOTATION: "600"}}
    }
    # A pod of no terminationGracePeriodSeconds has the API server's 30 s.
    assert grace_annotation_patch(30, {"metadata": {}, "spec": {"pod": {}}}) is None


def test_a_shadow_pod_being_deleted_is_told_only_a_shorter_grace_period() -> None:
    deleting = {
        "metadata": {
            "deletionTimestamp": "2026-11-29T10:00:00Z",
            "annotations": {DELETION_GRACE_ANNOTATION: "600"},
        },
        "spec": {"pod": {"terminationGracePeriodSeconds": 30}},
    }
    assert grace_annotation_patch(600, deleting) is None
    assert grace_annotation_patch(900, deleting) is None, "a deletion is never lengthened"
    assert grace_annotation_patch(5, deleting) == {
        "metadata": {"annotations": {DELETION_GRACE_ANNOTATION: "5"}}
    }
    assert grace_annotation_patch(0, deleting) == {
        "metadata": {"annotations": {DELETION_GRACE_ANNOTATION: "0"}}
    }
    # Deleted with the pod's own: told nothing, so the pod's own 30 s is what is shortened.
    del deleting["metadata"]["annotations"]
    assert grace_annotation_patch(30, deleting) is None
    assert grace_annotation_patch(45, deleting) is None
    assert grace_annotation_patch(5, deleting) is not None


def test_the_virtual_kubelets_cache_keeps_the_grace_period_told_and_only_a_sane_one() -> None:
    desired = {"metadata": {"annotations": {}}, "spec": {}}
    told = shadow_pod()
    assert shadow_pod_as_read(told, desired)["metadata"]["annotations"] == {
        DELETION_GRACE_ANNOTATION: "17"
    }
    told["metadata"]["annotations"][DELETION_GRACE_ANNOTATION] = "9" * 5000
    assert shadow_pod_as_read(told, desired)["metadata"]["annotations"] == {}


def test_the_providers_word_on_a_missing_pod_is_read_bounded() -> None:
    assert provider_refusal(shadow_pod()) is None
    refused = shadow_pod(
        conditions=[
            {
                "type": "PodCreated",
                "status": "False",
                "reason": "PodSecurity",
                "message": "x" * 5000,
            }
        ]
    )
    reason, message = provider_refusal(refused) or ("", "")
    assert reason == "PodSecurity"
    assert len(message) == 2048
    created = shadow_pod(
        conditions=[{"type": "PodCreated", "status": "True", "reason": "PodCreated"}]
    )
    assert provider_refusal(created) is None


def test_what_a_tenant_writes_on_its_shadow_pod_cannot_make_the_pod_anyone_elses() -> None:
    hostile = shadow_pod()
    hostile["metadata"]["labels"][SHADOW_POD_OWNED_LABEL] = "false"
    hostile["metadata"]["ownerReferences"] = [
        {
            "apiVersion": "v1",
            "kind": "Node",
            "name": "naples-worker-1",
            "uid": "n",
            "controller": True,
        }
    ]
    made = forge_pod_of(hostile)
    assert made["metadata"]["labels"][SHADOW_POD_OWNED_LABEL] == "true"
    assert controller_uid(made) == "shadow-uid"
    assert [o["kind"] for o in made["metadata"]["ownerReferences"]] == ["ShadowPod"]


async def test_each_consumers_shadow_pods_are_served_in_turn() -> None:
    """venice's thousand ShadowPods queued first, over two twin namespaces of its own, made
    florence's new one wait behind them all."""
    the_controller, _ = controller(None, None, cached_namespace=namespace("venice"))
    for name, consumer in (("web-venice", "venice"), ("shop-florence", "florence")):
        the_controller.consumer_namespaces.store.upsert(
            {"metadata": {"name": name, "labels": {REMOTE_CLUSTER_ID_LABEL: consumer}}}
        )
    for i in range(500):
        the_controller.controller.enqueue(f"shop-venice/pod-{i}")
        the_controller.controller.enqueue(f"web-venice/pod-{i}")
    the_controller.controller.enqueue("shop-florence/new")
    queue = the_controller.controller.queue
    served = [await queue.get() for _ in range(3)]
    assert "shop-florence/new" in served


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def unanswered_controller(shadow: JSON) -> tuple[PodDeletions, ProviderShadowPods, Clock]:
    """The controller with a consumer's running ShadowPod and its Pod cached, the Quota of its
    creator (venice-naples) too, and a clock of its own."""
    shadow = consumers(shadow)
    shadow["metadata"].update(resourceVersion="1", finalizers=[SHADOW_POD_FINALIZER])
    api = PodDeletions(shadow)
    quotas = Informer(api, "offloading.liqo.io/v1beta1", "quotas",  # type: ignore[arg-type]
                      indexers={CREATOR_INDEX: quota_creator_index})  # fmt: skip
    quotas.store.upsert(quota({}))
    clock = Clock()
    the_controller = ProviderShadowPods(api, quotas, clock=clock)  # type: ignore[arg-type]
    the_controller.shadow_pods.store.upsert(shadow)
    the_controller.pods.store.upsert(pod())
    return api, the_controller, clock


def test_a_shadow_pod_outliving_its_creators_quota_by_the_grace_is_deleted() -> None:
    """The attack: a consumer offloads its Quota's worth, deletes the slice (its Quota goes),
    makes another and offloads as much again, and again: what the first ran would run on
    counted in no Quota. Its virtual kubelet may drain its node for UNANSWERED_GRACE_SECONDS;
    then the provider deletes what is left."""
    api, the_controller, clock = unanswered_controller(shadow_pod())

    async def scenario() -> None:
        key = "shop-venice/web"
        await the_controller.reconcile(key)
        assert api.deleted == []  # answered: left alone
        gone = the_controller.quotas.store.delete("liqo-tenant-venice/naples")
        assert gone is not None
        the_controller._on_quota(DELETED, gone, gone)
        clock.now += UNANSWERED_GRACE_SECONDS - 1
        await the_controller.reconcile(key)
        assert api.deleted == []  # its drain has a second left
        clock.now += 1
        await the_controller.reconcile(key)
        [(path, options)] = api.deleted
        assert path == shadow_pod_path("shop-venice", "web")
        assert (options or {}).get("preconditions") == {"uid": "shadow-uid"}

    asyncio.run(scenario())


def test_a_slice_made_again_under_its_name_keeps_its_creators_shadow_pods() -> None:
    """Its Quota back (the same identity), the grace is over: nothing is deleted. Nor is the
    provider's own ShadowPod, which no Quota ever limits."""
    api, the_controller, clock = unanswered_controller(shadow_pod())

    async def scenario() -> None:
        gone = the_controller.quotas.store.delete("liqo-tenant-venice/naples")
        assert gone is not None
        the_controller._on_quota(DELETED, gone, gone)
        clock.now += UNANSWERED_GRACE_SECONDS / 2
        back = quota({})
        the_controller.quotas.store.upsert(back)
        the_controller._on_quota(ADDED, back, None)
        clock.now += UNANSWERED_GRACE_SECONDS
        await the_controller.reconcile("shop-venice/web")
        assert api.deleted == []
        # Gone again: a whole grace from then.
        the_controller.quotas.store.delete("liqo-tenant-venice/naples")
        the_controller._on_quota(DELETED, back, back)
        clock.now += UNANSWERED_GRACE_SECONDS - 1
        await the_controller.reconcile("shop-venice/web")
        assert api.deleted == []

    asyncio.run(scenario())
    own = shadow_pod()
    own["metadata"].update(resourceVersion="1", finalizers=[SHADOW_POD_FINALIZER])
    api = PodDeletions(own)
    the_controller = controller_on(api, own)
    the_controller.pods.store.upsert(pod())
    asyncio.run(the_controller.reconcile("shop-venice/web"))
    assert api.deleted == []
