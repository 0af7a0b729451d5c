"""Offloads the pods bound to the virtual node: each becomes a ShadowPod in the provider, in the
namespace its NamespaceMap maps it to, which the provider turns into the Pod of the same name;
that Pod's status is reported back (DESIGN §4.6). The virtual kubelet never writes a Pod there.

Level-based and restart-safe: every local pod key is reconciled from the caches (local pods on
this node; our ShadowPods and their Pods in each mapped provider namespace), so a restart lists
both sides and converges without re-creating anything, and a ShadowPod whose local pod is gone
is deleted. A remote object without our ownership labels is never modified or deleted: the
conflict is reported on the local pod, and so is the provider's refusal of a pod (its webhook's,
its Pod Security level's).

A pod is admitted to the virtual node, as a kubelet admits one to its node, before its first
ShadowPod is asked for: one bound by hand against its node affinity, nodeSelector or tolerations
is refused (Failed, as a kubelet leaves it) and never reaches the provider. Only new pods are
judged: one with a ShadowPod, or that ran, is never failed for a Node that changed since.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol, TypeVar

import orjson
import structlog
from prometheus_client import REGISTRY, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from vk.api.constants import (
    DELETION_GRACE_ANNOTATION,
    DESTINATION_LABEL,
    NODENAME_LABEL,
    ORIGIN_LABEL,
    POD_TERMINAL_PHASES,
    PROVIDER_STATUS_BURST,
    PROVIDER_STATUS_INTERVAL_SECONDS,
    SHADOW_POD_NAME_TAKEN,
    SHADOW_POD_NOT_RESERVED,
)
from vk.api.jsondata import is_integer
from vk.api.offloading import ShadowPod, ShadowPodConditionType
from vk.api.timestamps import kube_time
from vk.kube.client import (
    JSON,
    AlreadyExists,
    ApiError,
    KubeClient,
    NotFound,
    delete_options,
    resource_path,
)
from vk.kube.controller import Controller, Reconciler, Result
from vk.kube.events import WARNING, EventRecorder
from vk.kube.informer import (
    ADDED,
    DELETED,
    MODIFIED,
    PROVIDER_MAX_OBJECTS,
    Informer,
    namespace_index,
    resource_version,
    shared_informer,
    split_key,
)
from vk.kube.workqueue import TokenBuckets
from vk.reflection.addresses import HomeAddresses, HomeNetwork, trusted_pod_ips, without_pod_ips
from vk.reflection.forge.meta import is_owned_by_us, ownership_labels
from vk.reflection.forge.pods import (
    MAX_PROVIDER_MESSAGE,
    changed_beyond_status,
    consumer_grace_period,
    controller_uid,
    deletion_grace_period,
    desired_remote_pod,
    forge_local_pod_status,
    forge_rejected_status,
    forge_remote_pod,
    forge_shadow_pod,
    forge_status_patch,
    forge_stopped_status,
    host_namespaces_not_offloaded,
    is_evicted,
    live_pod_patch,
    local_pod_uid,
    local_status_needs_update,
    mounted_token_secret,
    node_admission_refusal,
    patches_containers,
    shadow_pod_as_pod,
    shadow_pod_as_read,
    shadow_pod_finished,
    shadow_pod_patch,
    status_worth_reporting,
)
from vk.reflection.generic import (
    REFUSALS,
    REFUSED_RETRY,
    RecentWrites,
    liqo_observer,
    rv_newer,
)
from vk.reflection.workload.admission import AdmissionGate, is_stamped

log = structlog.get_logger("vk.reflection.pods")

Said = TypeVar("Said")  # what a refusal said once per pod is about

POD_OFFLOAD_SECONDS = Histogram(
    "vk_pod_offload_seconds",
    "From when the virtual kubelet first sees a pod bound to its node to when it reports the "
    "pod Running from the provider",
    ["node"],
    buckets=(0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 30, 60, 120),
)


# Reasons shown in `kubectl get pod` (STATUS) and `kubectl describe pod` for pods that cannot
# be offloaded, and on the Events that explain them.
REASON_NOT_OFFLOADED = "NamespaceNotOffloaded"
REASON_CONFLICT = "RemotePodConflict"
REASON_REFUSED = "OffloadingBackOff"  # Liqo's reason for a pod that could not be offloaded
# A change of an offloaded pod (its labels, images, tolerations: a VirtualNode's
# offloadingPatch among them) that the provider will not take: the pod runs on there as it was.
REASON_CHANGE_REFUSED = "OffloadedPodChangeRefused"
# A pod asking for host namespaces (hostNetwork, hostPID, hostIPC), which it runs without there.
REASON_HOST_NAMESPACES = "HostNamespacesNotOffloaded"
# The provider failing (5xx: its webhook down and failing closed, among others) or throttling
# (429) a ShadowPod: said at home, and asked again after this long, not after the work queue's
# back-off (which reaches 1000 s).
PROVIDER_FAILURE_RETRY = 5.0
# A ShadowPod this virtual kubelet created is not asked for again, until its cache shows it, for
# this long at most (a watch event lost behind a relist would otherwise hold the pod for ever).
CREATED_UNSEEN_SECONDS = 15.0
# What the API server gives a pod that sets no terminationGracePeriodSeconds.
DEFAULT_TERMINATION_GRACE_SECONDS = 30


class PodsByPhase(Collector):
    """`vk_pods{node, phase}`: the pods bound to the virtual node, counted at scrape time."""

    def __init__(self, node: str, pods: Informer) -> None:
        self.node = node
        self.pods = pods

    def collect(self) -> Iterator[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "vk_pods", "Pods bound to the virtual node, by phase", labels=["node", "phase"]
        )
        counts: dict[str, int] = {}
        for pod in self.pods.store.objects():
            phase = pod.get("status", {}).get("phase") or "Pending"
            counts[phase] = counts.get(phase, 0) + 1
        for phase in ("Pending", "Running", "Succeeded", "Failed", "Unknown"):
            family.add_metric([self.node, phase], counts.get(phase, 0))
        yield family


class TokenSecrets(Protocol):
    """The ServiceAccount token reflector, as the pod reflector asks it whether a pod's token
    Secret is on the provider yet."""

    def holds_tokens_of(self, pod: JSON) -> bool: ...

    def on_tokens_written(self, listener: Callable[[str], None]) -> None: ...


@dataclass(frozen=True)
class PodForging:
    """How remote pods are built, from what else the virtual kubelet reflects."""

    # Token sources become the Secret the ServiceAccount token reflection writes.
    service_account_tokens: bool = False
    # kube-api-access volumes use the reflected copy of the home cluster's CA.
    root_ca_reflected: bool = False
    # Where offloaded pods reach their home API server (KUBERNETES_SERVICE_HOST/PORT).
    home_api_server: tuple[str, int] | None = None
    # Whether the provider's pod IPs are reported at home (Liqo's --disable-ip-reflection):
    # without a network between the clusters, home's Services would route to them in vain.
    reflect_ips: bool = True


def pod_path(namespace: str, name: str, subresource: str | None = None) -> str:
    return resource_path("v1", "pods", namespace=namespace, name=name, subresource=subresource)


def shadow_pod_path(namespace: str, name: str | None = None, subresource: str | None = None) -> str:
    return resource_path(
        ShadowPod.group_version(),
        ShadowPod.PLURAL,
        namespace=namespace,
        name=name,
        subresource=subresource,
    )


async def patch_on_whole(
    client: KubeClient, path: str, build: Callable[[JSON], JSON | None]
) -> JSON | None:
    """`build`'s merge patch of the object at `path` read afresh, for a patch that a cache's
    part of the object cannot build (a container list, sent whole: `replaces_containers`).
    Conditional on the version read: a list built on it must not replace a newer one. NotFound
    if the object is gone."""
    whole = await client.get(path)
    patch = build(whole)
    if patch is not None:
        patch["metadata"] = {
            **patch.get("metadata", {}),
            "resourceVersion": whole["metadata"]["resourceVersion"],
        }
    return patch


def provider_refusal(shadow_pod: JSON) -> tuple[str, str] | None:
    """(reason, message) when the provider says it made no Pod for `shadow_pod` and why;
    the message is the provider's, bounded."""
    for condition in (shadow_pod.get("status") or {}).get("conditions") or []:
        if (
            condition.get("type") == ShadowPodConditionType.POD_CREATED
            and condition.get("status") == "False"
        ):
            reason = str(condition.get("reason") or "")
            message = str(condition.get("message") or "")[:MAX_PROVIDER_MESSAGE]
            return reason, message
    return None


def grace_annotation_patch(grace: int | None, shadow_pod: JSON) -> JSON | None:
    """The annotation telling the provider `grace`, the grace period of the local pod's
    deletion, when its ShadowPod does not tell it already (a custom resource's deletion keeps
    none of its own; unsaid, the pod's own is used). Once the ShadowPod is being deleted, only a
    shorter one is told: a second deletion may shorten a pod's grace period, as `kubectl delete
    --grace-period` and `--force` do at home, never lengthen it. None when nothing is to tell."""
    if grace is None:
        return None
    own = ((shadow_pod.get("spec") or {}).get("pod") or {}).get("terminationGracePeriodSeconds")
    told = consumer_grace_period(shadow_pod)
    if told is None:
        told = own if is_integer(own) else DEFAULT_TERMINATION_GRACE_SECONDS
    if grace == told or (shadow_pod["metadata"].get("deletionTimestamp") and grace > told):
        return None
    return {"metadata": {"annotations": {DELETION_GRACE_ANNOTATION: str(grace)}}}


# What the virtual kubelet reads of a remote Pod's metadata: which pod it is (a new UID is a
# re-creation), its generation (for observedGeneration), whether it is going.
_REMOTE_POD_METADATA_READ = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "generation",
    "deletionTimestamp",
)


# A remote Pod's status larger than this is not kept, nor reflected: a kubelet's status of a
# pod of a few containers is 1 to 3 KiB, and one of twenty, each with the longest termination
# message a kubelet keeps (its 12 KiB for a pod in all), under 30. A provider writes its pods'
# status as it likes, up to the 1.5 MiB of an object: ten thousand of those would be 15 GiB in
# the virtual kubelet, and as much written home.
MAX_REMOTE_POD_STATUS_BYTES = 32 * 1024
# Where the cache's copy of a remote Pod whose status was not kept says how large it was.
STATUS_REFUSED = "statusBytesRefused"
# Where the cache's copy of a remote Pod says which ShadowPod controls it (its UID, kept up to
# _MAX_OWNER_UID characters): a Pod still cached from an earlier ShadowPod of the name (the
# provider's Pods watch behind its ShadowPods watch) is not the pod's.
SHADOW_POD_UID = "shadowPodUID"
_MAX_OWNER_UID = 64


def says_nothing_to_act_on(old: JSON, shadow: JSON) -> bool:
    """Whether a ShadowPod changed only in what its provider reports of a Pod it made (its
    Pod made, its Quota share counted, Pending to Running): the main reconcile would do nothing
    but hand the Pod, if cached, to the status queue, which the Pod's own events bring it to. A
    finished phase (perhaps of a Pod gone since) and a refusal are the main reconcile's."""
    return (
        not changed_beyond_status(old, shadow)
        and (shadow.get("status") or {}).get("phase") not in POD_TERMINAL_PHASES
        and provider_refusal(shadow) is None
    )


def remote_pod_as_read(pod: JSON, *, of_a_local_pod: bool = True) -> JSON:
    """What the virtual kubelet reads of a remote Pod, all its cache keeps: its status, and of
    its metadata what says which pod it is. Its spec is the ShadowPod's, its labels and
    annotations the local pod's, read from there (ten thousand times over, they were half of
    what the cache kept of it). A status over MAX_REMOTE_POD_STATUS_BYTES is kept as its size
    (STATUS_REFUSED), with no status. Of a Pod of no local pod (`of_a_local_pod` False: its
    local pod gone, or none ever, the provider labelling Pods of its own as ours), no status
    is read, and none kept."""
    metadata = pod.get("metadata") or {}
    kept: JSON = {
        "metadata": {key: metadata[key] for key in _REMOTE_POD_METADATA_READ if key in metadata}
    }
    if not of_a_local_pod:
        return kept
    if (owner := controller_uid(pod)) is not None:
        kept[SHADOW_POD_UID] = owner[:_MAX_OWNER_UID]
    kept["status"] = pod.get("status") or {}
    if (size := len(orjson.dumps(kept["status"]))) > MAX_REMOTE_POD_STATUS_BYTES:
        kept["status"] = {}
        kept[STATUS_REFUSED] = size
    return kept


class PodReflector(Reconciler):
    name = "pods"

    def __init__(
        self,
        home: KubeClient,
        *,
        node_name: str,
        node_ip: str,
        home_cluster_id: str,
        remote_cluster_id: str,
        mappings: Callable[[], Mapping[str, str]],
        mapped: asyncio.Event,
        workers: int,
        events: EventRecorder,
        pod_forging: PodForging | None = None,
        home_network: HomeNetwork | None = None,
        offloading_patch: Callable[[], Mapping[str, Any]] = dict,
    ) -> None:
        """`mappings`: the offloaded namespaces now (local -> remote, the ReflectionManager's,
        which starts and stops this reflector on them as on the others, and says which are
        offloaded while the provider identity does not work); `mapped`: set once they are
        known (before, every pod would look not offloaded, and one being deleted would be
        finished at home with its remote pod left running). `home_network`: this cluster's
        ranges and addresses, which no pod IP a provider reports may be in (run by the
        reflector; None: only the loopback, link-local, multicast and unspecified addresses are
        refused). `offloading_patch`: the VirtualNode's
        `spec.offloadingPatch` now (`OffloadingPatchSource.current`); when it changes, the
        caller calls `resync` so that live pods gain what a live pod may."""
        self.home = home
        self.node_name = node_name
        self.node_ip = node_ip
        self.home_cluster_id = home_cluster_id
        self.remote_cluster_id = remote_cluster_id
        self.events = events
        self.local = Informer(
            home,
            "v1",
            "pods",
            field_selector=f"spec.nodeName={node_name}",
            indexers={"namespace": namespace_index},
        )
        # This node's Node, which pods are admitted against (a kubelet's own Node informer): one
        # object, shared in the virtual kubelet's informer scope.
        self.nodes = shared_informer(
            home, "v1", "nodes", field_selector=f"metadata.name={node_name}"
        )
        self.mappings = mappings
        self.mapped = mapped
        self.pod_forging = pod_forging or PodForging()
        self.home_network = home_network
        self.offloading_patch = offloading_patch
        # key -> (local uid, IPs refused): a refusal is told once per pod and IPs.
        self._refused_ips: dict[str, tuple[str, tuple[str, ...]]] = {}
        # key -> local uid: a pod whose remote status was refused as too large, told once.
        self._refused_statuses: dict[str, str] = {}
        # key -> (local uid, the provider's answer): a change of it refused there, told once.
        self._refused_changes: dict[str, tuple[str, str]] = {}
        # local namespace -> (remote namespace, provider client): where it reflects now.
        self.reflected: dict[str, tuple[str, KubeClient]] = {}
        self.remote: dict[str, Informer] = {}  # remote namespace -> our pods there
        self.shadows: dict[str, Informer] = {}  # remote namespace -> our ShadowPods there
        self._remote_tasks: dict[str, asyncio.Task[None]] = {}
        observe = liqo_observer("pod", remote_cluster_id, node_name)
        self.controller = Controller(self, workers=workers, observe=observe)
        # The provider's Pods' changes, reflected home on a queue of their own: behind
        # thousands of creations waiting for the provider's admission, a pod already running
        # there would wait minutes to show Running at home.
        self.status_controller = Controller(
            _StatusReflection(self), workers=workers, observe=observe
        )
        # The local pods' statuses this virtual kubelet wrote, until their informer shows them.
        self.status_writes = RecentWrites()
        self.status_pace: TokenBuckets[str] = TokenBuckets(
            1 / PROVIDER_STATUS_INTERVAL_SECONDS, PROVIDER_STATUS_BURST
        )
        self._first_seen: dict[str, tuple[str, float]] = {}  # key -> (local uid, when)
        # Pods whose offload time was observed: a second look at a local pod whose cache has
        # not caught up with our own Running yet is not a second offload.
        self._offload_observed: set[str] = set()
        # key -> (local uid, remote uid, recreations): a pod made again under its name (another
        # local uid, the two events merged in one reconcile) starts afresh.
        self._remote_uids: dict[str, tuple[str, str, int]] = {}
        # key -> (local uid, message): a pod recreated under the same name is told again.
        self._reported: dict[str, tuple[str, str]] = {}
        # Whether the provider admits ShadowPods now, and the pods waiting for it to.
        self.admission = AdmissionGate()
        self._awaiting_admission: set[str] = set()
        # The token reflector, once `await_tokens_from` is given it, and the pods waiting for
        # their token Secret on the provider before their ShadowPod is asked for.
        self._tokens: TokenSecrets | None = None
        self._awaiting_tokens: set[str] = set()
        # The ShadowPods created and not in the cache yet, by key (`_Created`). A reconcile
        # meanwhile (its pod's status written, its token Secret) would create one again, and
        # the provider's webhook, which reserves before the API server finds the name taken,
        # would give the Quota's share to that failed creation instead of to the ShadowPod
        # that exists (refused NotReserved, then withdrawn). Argued, not seen: the NotReserved
        # refusals once seen in a burst (50 to 140 of 1000) were this across two processes, a
        # bench script's two virtual kubelets of one identity both leading.
        self._created_unseen: dict[str, _Created] = {}
        # Local pods gone after a deletion, by key, until reconciled: a pod deleted at once
        # (`--force`) is gone before its ShadowPod is deleted, and the grace period it was
        # deleted with is read from its last state, which only its DELETED event holds.
        self._gone: dict[str, _Gone] = {}
        # This node's pods only: another virtual kubelet of the same provider offloads its
        # own node's pods into the same twin namespaces, and they are not orphans to us.
        self._owned_selector = (
            f"{ORIGIN_LABEL}={home_cluster_id},{DESTINATION_LABEL}={remote_cluster_id},"
            f"{NODENAME_LABEL}={node_name}"
        )
        self._log = log.bind(node=node_name)
        # What a ShadowPod of no local pod known is compared with: whose it is.
        self._of_no_pod: JSON = {
            "metadata": {"labels": ownership_labels(home_cluster_id, remote_cluster_id, node_name)}
        }

    leader_only = False  # each virtual kubelet offloads its own node's pods

    def await_tokens_from(self, tokens: TokenSecrets) -> None:
        """A pod that mounts home ServiceAccount tokens gets its ShadowPod once `tokens` has
        written its token Secret on the provider, not before: the provider's kubelet would
        start none of its containers, and say FailedMount (copied home as a Warning) until
        its mount's back-off lets it look again."""
        self._tokens = tokens
        tokens.on_tokens_written(self._tokens_written)

    def _tokens_written(self, key: str) -> None:
        if key in self._awaiting_tokens:
            self._awaiting_tokens.discard(key)
            self.controller.enqueue(key)

    @property
    def namespaces(self) -> Collection[str]:
        return self.reflected.keys()

    def remote_namespace_of(self, namespace: str, pod: str) -> str | None:
        """Where a pod bound to this node runs in the provider (None: not offloaded here)."""
        if self.local.store.get(f"{namespace}/{pod}") is None:
            return None
        return self.mappings().get(namespace)

    def bound_pods(self) -> list[JSON]:
        return self.local.store.objects()

    def offloaded_pods(self) -> list[tuple[JSON, str]]:
        """The pods bound to this node whose namespace is offloaded, each with the remote
        namespace it runs in."""
        mappings = self.mappings()
        return [
            (pod, mappings[pod["metadata"]["namespace"]])
            for pod in self.local.store.objects()
            if pod["metadata"]["namespace"] in mappings
        ]

    def offloaded_pod(
        self,
        local_namespace: str,
        local_name: str,
        remote_namespace: str,
        remote_name: str,
        remote_uid: str,
    ) -> JSON | None:
        """The local pod this node offloaded as that remote pod (of that UID, unless ""), as
        the caches know it; None when they do not (not this node's, not synced yet, another
        pod by now): the Event reflector reads the pods then. The remote pods' cache holds
        this node's pods only, by their ownership labels."""
        if self.reflected.get(local_namespace, ("",))[0] != remote_namespace:
            return None
        informer = self.remote.get(remote_namespace)
        if informer is None or not informer.synced.is_set():
            return None
        remote = informer.store.get(f"{remote_namespace}/{remote_name}")
        if remote is None or remote_uid not in ("", remote["metadata"].get("uid")):
            return None
        return self.local.store.get(f"{local_namespace}/{local_name}")

    def remote_uid_of(self, remote_namespace: str, pod: str) -> str:
        """The UID of the remote pod running for a local one now ("": none, or not cached)."""
        informer = self.remote.get(remote_namespace)
        remote = informer.store.get(f"{remote_namespace}/{pod}") if informer else None
        return str(remote["metadata"].get("uid") or "") if remote else ""

    def resync(self) -> None:
        """Every pod bound to this node, again (the offloading patch changed)."""
        for pod in self.local.store.objects():
            self._enqueue(_key(pod))

    def retry_now(self) -> None:
        """The pods waiting on a back-off, tried now (the provider is back)."""
        self.controller.queue.retry_now()
        self.status_controller.queue.retry_now()

    # -- wiring --------------------------------------------------------------------------

    async def run(self) -> None:
        """Until cancelled; the ReflectionManager starts and stops its namespaces."""
        collector = PodsByPhase(self.node_name, self.local)
        REGISTRY.register(collector)
        self.local.add_handler(self._on_local_pod)
        informers = [asyncio.create_task(self.local.run()), asyncio.create_task(self.nodes.run())]
        if self.home_network is not None:
            informers += [asyncio.create_task(i.run()) for i in self.home_network.informers()]
        try:
            await self.local.synced.wait()
            await self.nodes.synced.wait()  # a pod judged on no Node would be admitted
            await self.mapped.wait()
            if self.home_network is not None:
                await self.home_network.synced()
            await asyncio.gather(self.controller.run(), self.status_controller.run())
        finally:
            for local in list(self.reflected):
                self.stop_namespace(local)
            for task in informers:
                task.cancel()
            await asyncio.gather(*informers, return_exceptions=True)
            REGISTRY.unregister(collector)

    def start_namespace(self, local: str, remote: str, client: KubeClient) -> None:
        """The pods of `local` are offloaded to `remote` through `client` (a call that changes
        nothing is nothing): the twin namespace's Pods and ShadowPods are followed."""
        if self.reflected.get(local) == (remote, client):
            return
        self.stop_namespace(local)
        self.reflected[local] = (remote, client)
        if remote not in self.remote:
            pods, shadows = (
                Informer(
                    client,
                    api_version,
                    plural,
                    namespace=remote,
                    label_selector=self._owned_selector,
                    keep=keep,
                    max_objects=PROVIDER_MAX_OBJECTS,
                )
                for api_version, plural, keep in (
                    ("v1", "pods", self._remote_pod_as_read),
                    (ShadowPod.group_version(), ShadowPod.PLURAL, self._shadow_pod_as_read),
                )
            )
            pods.add_handler(self._on_remote_pod)
            shadows.add_handler(self._on_shadow_pod)
            self.remote[remote] = pods
            self.shadows[remote] = shadows
            self._remote_tasks[remote] = asyncio.create_task(self._follow_twin(remote))
        self._enqueue_namespace(local)

    async def _follow_twin(self, remote: str) -> None:
        """The twin namespace's Pods and ShadowPods followed; once both caches are whole, the
        pods of the local namespaces mapped to it are reconciled, and so is every ShadowPod's
        (an orphan's too: its local pod is gone). Before, they were left: judged on half the
        objects, a pod would look not offloaded yet."""
        pods, shadows = self.remote[remote], self.shadows[remote]
        # A ShadowPod or Pod is kept as compared with its local pod (`_shadow_pod_as_read`,
        # `_remote_pod_as_read`): one listed before the local pods would be kept as of no pod,
        # a ShadowPod patched for nothing, a Pod's status not reflected until it changed.
        await self.local.synced.wait()

        async def reconcile_once_synced() -> None:
            await pods.synced.wait()
            await shadows.synced.wait()
            for local, (twin, _) in list(self.reflected.items()):
                if twin == remote:
                    self._enqueue_namespace(local)
            for shadow in shadows.store.objects():
                for key in self._local_keys(shadow):
                    self._enqueue(key)

        await asyncio.gather(pods.run(), shadows.run(), reconcile_once_synced())

    def stop_namespace(self, local: str) -> None:
        """No more reflection of `local`'s pods (no longer offloaded, or the provider
        identity changed): their twin namespace is no longer followed unless another local
        namespace maps to it."""
        stopped = self.reflected.pop(local, None)
        if stopped is None:
            return
        remote = stopped[0]
        if all(twin != remote for twin, _ in self.reflected.values()):
            self.remote.pop(remote, None)
            self.shadows.pop(remote, None)
            task = self._remote_tasks.pop(remote, None)
            if task is not None:
                task.cancel()
        self._enqueue_namespace(local)

    def _enqueue_namespace(self, local: str) -> None:
        for pod in self.local.store.by_index("namespace", local):
            self._enqueue(_key(pod))

    def _enqueue(self, key: str) -> None:
        """`key` to be reconciled, unless its namespace is offloaded to a twin namespace whose
        caches are not whole yet: its pods are all enqueued once they are (`_follow_twin`), and
        so every pod reconciled is judged on both caches, once."""
        reflected = self.reflected.get(key.split("/", 1)[0])
        if reflected is not None and self._twin_listing(reflected[0]):
            return
        self.controller.enqueue(key)

    def _twin_listing(self, remote_namespace: str) -> bool:
        """Whether the twin namespace's caches are followed but not whole yet: once both are,
        `_follow_twin` enqueues every pod mapped there."""
        pods, shadows = self.remote.get(remote_namespace), self.shadows.get(remote_namespace)
        return bool(pods and shadows and not (pods.synced.is_set() and shadows.synced.is_set()))

    def _local_keys(self, remote: JSON) -> list[str]:
        """The keys of the local pods an object in a twin namespace may be for."""
        remote_namespace = remote["metadata"]["namespace"]
        name = remote["metadata"]["name"]
        return [
            f"{local}/{name}"
            for local, (twin, _) in self.reflected.items()
            if twin == remote_namespace
        ]

    def _local_pod_of(self, remote: JSON) -> JSON | None:
        """The local pod a Pod or ShadowPod of a twin namespace stands for, if the cache has
        one of its name."""
        return next(filter(None, map(self.local.store.get, self._local_keys(remote))), None)

    def _shadow_pod_as_read(self, shadow: JSON) -> JSON:
        """What the cache keeps of a ShadowPod: what is compared with its local pod's, if the
        cache has one, and bounded by it (`shadow_pod_as_read`)."""
        local = self._local_pod_of(shadow)
        return shadow_pod_as_read(shadow, self._desired(local) if local else self._of_no_pod)

    def _remote_pod_as_read(self, pod: JSON) -> JSON:
        """What the cache keeps of a remote Pod: its status only if the cache has its local
        pod (`remote_pod_as_read`)."""
        return remote_pod_as_read(pod, of_a_local_pod=self._local_pod_of(pod) is not None)

    def _desired(self, local: JSON) -> JSON:
        return desired_remote_pod(
            local,
            local_cluster_id=self.home_cluster_id,
            remote_cluster_id=self.remote_cluster_id,
            node_name=self.node_name,
            offloading_patch=self.offloading_patch(),
        )

    def _on_local_pod(self, event: str, pod: JSON, old: JSON | None) -> None:
        key = _key(pod)
        if event == DELETED and (grace := deletion_grace_period(pod)) is not None:
            metadata = pod["metadata"]
            if metadata.get("deletionTimestamp"):
                # Gone with a deletion's grace period, perhaps at once (`--force`): its
                # ShadowPod, if any is left, is deleted with it.
                self._gone[key] = _Gone(metadata["uid"], grace)
        ours = self.status_writes.observe(key, event, pod)
        if event == MODIFIED and old is not None and not changed_beyond_status(old, pod):
            # Its status alone: nothing the main reconcile acts on. Unless it is the status
            # this virtual kubelet wrote last, coming back, the status queue sees that it still
            # says what the provider's Pod does.
            if not ours:
                self.status_controller.enqueue(key)
            return
        self._enqueue(key)

    def _on_shadow_pod(self, event: str, shadow: JSON, old: JSON | None) -> None:
        if event == MODIFIED and old is not None and says_nothing_to_act_on(old, shadow):
            return
        for key in self._local_keys(shadow):
            if not (event == ADDED and self._own_creation_back(key, shadow)):
                self._enqueue(key)

    def _own_creation_back(self, key: str, shadow: JSON) -> bool:
        """Whether `shadow` is the ShadowPod this virtual kubelet created for `key` coming
        back as it was answered (its very resourceVersion), its local pod unchanged since but
        for its status: the main reconcile would find nothing to do, but hand the Pod, if
        cached already, to the status queue, which is done here. That reconcile, and the
        status reconcile it handed a Pod whose status was reflected already, were two of a
        pod's three that did nothing (issue 20)."""
        created = self._created_unseen.get(key)
        if created is None or resource_version(shadow) != created.version:
            return False
        local = self.local.store.get(key)
        if local is None or (
            local is not created.made_from and changed_beyond_status(created.made_from, local)
        ):
            return False
        del self._created_unseen[key]
        remote_namespace, name = shadow["metadata"]["namespace"], shadow["metadata"]["name"]
        pods = self.remote.get(remote_namespace)
        if pods is not None and pods.store.get(f"{remote_namespace}/{name}") is not None:
            # Cached before its ShadowPod was: its status reconcile found no ShadowPod then.
            self.status_controller.enqueue(key)
        return True

    def _on_remote_pod(self, event: str, pod: JSON, _: JSON | None) -> None:
        # Only a status the status queue would act on: a Pod gone, or one still saying nothing
        # the local pod does not (created, then bound: two of the three events of a Pod
        # starting), would cost a reconcile each for nothing.
        # A Pod gone is one the provider makes again, if its ShadowPod lives (its pod is
        # then reported stopped), or one of a pod being deleted (then nothing is written).
        if event != DELETED and not (pod.get(STATUS_REFUSED) or status_worth_reporting(pod)):
            return
        if self._twin_listing(pod["metadata"]["namespace"]):
            # Once both caches are whole, every pod is reconciled, and hands a Pod it finds
            # cached to the status queue (a restart reconciled each status twice).
            return
        for key in self._local_keys(pod):
            self.status_controller.enqueue(key)

    # -- the reconcile ---------------------------------------------------------------------

    def _shadow_pod_patch(self, local: JSON, shadow: JSON) -> JSON | None:
        """The merge patch bringing the ShadowPod in line with the local pod, or None."""
        return shadow_pod_patch(live_pod_patch(self._desired(local), shadow_pod_as_pod(shadow)))

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        assert namespace is not None
        local = self.local.store.get(key)
        gone = self._gone.pop(key, None)
        remote_namespace = self.mappings().get(namespace)
        reflected = self.reflected.get(namespace)
        if reflected is not None and reflected[0] != remote_namespace:
            reflected = None  # the manager is about to start it on the new mapping
        client = reflected[1] if reflected else None
        informer = self.remote.get(remote_namespace) if reflected and remote_namespace else None
        shadows = self.shadows.get(remote_namespace) if reflected and remote_namespace else None
        if local is None:
            self._first_seen.pop(key, None)
            self._offload_observed.discard(key)
            self._remote_uids.pop(key, None)
            self._reported.pop(key, None)
            self._refused_ips.pop(key, None)
            self._refused_statuses.pop(key, None)
            self._refused_changes.pop(key, None)
            self._awaiting_admission.discard(key)
            self._awaiting_tokens.discard(key)
            self._created_unseen.pop(key, None)
            if client and shadows and shadows.synced.is_set():
                await self._delete_orphan(client, shadows, remote_namespace or "", name, gone)
            return Result()
        uid = local["metadata"]["uid"]
        if (first := self._first_seen.get(key)) is None or first[0] != uid:
            self._first_seen[key] = (uid, time.monotonic())
            self._offload_observed.discard(key)
        if remote_namespace is None and local["metadata"].get("deletionTimestamp"):
            # No twin namespace (never, or no longer: its deletion takes the remote pod with
            # it): nothing runs that the kubelet must wait for.
            await self._finish_local(local)
            return Result()
        if remote_namespace is None:
            await self._report(
                local,
                REASON_NOT_OFFLOADED,
                f"namespace {namespace} is not offloaded to cluster "
                f"{self.remote_cluster_id}: no Accepted entry in its NamespaceMap; "
                "the pod waits until there is one",
            )
            return Result()
        if client is None or informer is None or shadows is None:
            return Result(requeue_after=5.0)  # no usable provider identity: the node says why
        if not (informer.synced.is_set() and shadows.synced.is_set()):
            # Enqueued again once they are (`_follow_twin`): ten thousand pods retried every
            # 0.2 s meanwhile, as they were, took more of a restart's CPU than their reconciles.
            return Result()
        remote_key = f"{remote_namespace}/{name}"
        shadow = shadows.store.get(remote_key)
        if local["metadata"].get("deletionTimestamp"):
            return await self._delete(client, local, shadow, remote_namespace)
        if shadow is not None and local_pod_uid(shadow) not in (None, local["metadata"]["uid"]):
            # The ShadowPod of an earlier pod of that name (deleted and made again while this
            # virtual kubelet was away, as a StatefulSet does): it goes, with its Pod, before
            # this pod gets its own; its status is never this pod's.
            return await self._delete_earlier(client, shadow, remote_namespace)
        if shadow is None:
            created = self._created_unseen.get(key)
            if created is not None and (unseen := created.until - time.monotonic()) > 0:
                return Result(requeue_after=unseen)  # its event brings us back before that
            return await self._create(client, local, remote_namespace)
        self._created_unseen.pop(key, None)
        patch = self._shadow_pod_patch(local, shadow)
        if patches_containers(patch):
            # The cache keeps only the containers' names and images: a new image is patched
            # onto the whole list, read afresh (rare: a pod's image changed in place).
            try:
                patch = await patch_on_whole(
                    client,
                    shadow_pod_path(remote_namespace, name),
                    lambda whole: self._shadow_pod_patch(local, whole),
                )
            except NotFound:
                return Result()  # gone meanwhile: its deletion brings us back
        if patch is not None:
            try:
                await client.merge_patch(shadow_pod_path(remote_namespace, name), patch)
            except NotFound:
                return Result()  # gone meanwhile: its deletion brings us back
            except ApiError as error:
                if error.status not in REFUSALS:
                    raise
                # Each try would be refused again: said once, tried again in a while (the
                # provider's rule, or the pod, may change meanwhile).
                await self._change_refused(local, error)
                if informer.store.get(remote_key) is not None:
                    self.status_controller.enqueue(key)
                return Result(requeue_after=REFUSED_RETRY, failed=True)
        self._refused_changes.pop(key, None)  # taken, or asked no more: said again if refused
        if informer.store.get(remote_key) is not None:
            # Its status is the status queue's alone: two queues writing the same status
            # from the same caches would write it twice.
            self.status_controller.enqueue(key)
        elif (phase := (shadow.get("status") or {}).get("phase")) in POD_TERMINAL_PHASES:
            # Finished while this virtual kubelet was away, and gone since: the provider's
            # record of how it ended is all there is to report.
            wait = await self._reflect_status(key, local, {"status": {"phase": phase}})
            return Result(requeue_after=wait or None)
        elif refusal := provider_refusal(shadow):
            reason, message = refusal
            if reason == SHADOW_POD_NOT_RESERVED:
                return await self._withdraw_unadmitted(client, local, shadow, message)
            await self._report(
                local,
                REASON_CONFLICT if reason == SHADOW_POD_NAME_TAKEN else REASON_REFUSED,
                f"cluster {self.remote_cluster_id} runs no pod for it ({reason}): {message}",
            )
        return Result()

    async def reconcile_status(self, key: str) -> Result:
        """A provider's Pod changed, or the main reconcile found one: its status reflected
        home, when its pod is settled (its ShadowPod made for this very pod and neither being
        deleted). Anything else is the main reconcile's, which the local pod's or the
        ShadowPod's own events bring to it: a remote Pod changes nothing there."""
        namespace, name = split_key(key)
        assert namespace is not None
        local = self.local.store.get(key)
        remote_namespace = self.mappings().get(namespace)
        informer = self.remote.get(remote_namespace) if remote_namespace else None
        shadows = self.shadows.get(remote_namespace) if remote_namespace else None
        remote_key = f"{remote_namespace}/{name}"
        shadow = shadows.store.get(remote_key) if shadows else None
        remote = informer.store.get(remote_key) if informer else None
        if (
            local is None
            or shadow is None
            or local["metadata"].get("deletionTimestamp")
            or shadow["metadata"].get("deletionTimestamp")
            or local_pod_uid(shadow) not in (None, local["metadata"]["uid"])
            # Finished: its status is final, as a kubelet keeps it.
            or (local.get("status") or {}).get("phase") in POD_TERMINAL_PHASES
        ):
            return Result()
        if remote is None or (is_evicted(remote) and not shadow_pod_finished(shadow)):
            # Gone, or put out, while its ShadowPod lives and is not finished: the provider
            # makes it again (DESIGN §4.6), and the new one's status is reported, a restart.
            # Meanwhile the pod runs nowhere, and says so as a kubelet does of containers
            # that stopped. Reported Failed, it would be replaced by its ReplicaSet while it
            # runs on. A provider that does not make it again says so with its ShadowPod's
            # phase, and it is reported then.
            if (
                not shadow_pod_finished(shadow)
                and informer is not None
                and informer.synced.is_set()
            ):
                return Result(requeue_after=await self._report_stopped(key, local) or None)
            return Result()
        if remote.get(SHADOW_POD_UID, shadow["metadata"]["uid"]) != shadow["metadata"]["uid"]:
            return Result()  # a Pod still cached from an earlier ShadowPod of the name
        self._count_recreation(key, local, remote)
        return Result(requeue_after=await self._reflect_status(key, local, remote) or None)

    async def _create(self, client: KubeClient, local: JSON, remote_namespace: str) -> Result:
        phase = local.get("status", {}).get("phase")
        if phase in POD_TERMINAL_PHASES:
            return Result()  # finished: a finished pod is never started again
        key = _key(local)
        if not self._forwarded(key, local) and (refusal := await self._node_refusal(local)):
            await self._report(local, *refusal, rejected=True)
            return Result()  # Failed: never asked for again
        if (wait := self.admission.wait(time.monotonic())) > 0:
            self._awaiting_admission.add(key)
            await self._report(
                local,
                REASON_REFUSED,
                f"cluster {self.remote_cluster_id} admits no pod now "
                f"({SHADOW_POD_NOT_RESERVED}: the last pods asked for passed none of its "
                "webhooks); this pod is asked for once one does",
            )
            return Result(requeue_after=wait)
        self._awaiting_admission.discard(key)
        if (
            self._tokens is not None
            and mounted_token_secret(local, self.pod_forging.service_account_tokens)
            and not self._tokens.holds_tokens_of(local)
        ):
            self._awaiting_tokens.add(key)
            return Result()  # the token reflector brings it back (`_tokens_written`)
        self._awaiting_tokens.discard(key)
        name = local["metadata"]["name"]
        remote_pod = forge_remote_pod(
            local,
            remote_namespace=remote_namespace,
            local_cluster_id=self.home_cluster_id,
            remote_cluster_id=self.remote_cluster_id,
            node_name=self.node_name,
            offloading_patch=self.offloading_patch(),
            service_account_tokens=self.pod_forging.service_account_tokens,
            root_ca_reflected=self.pod_forging.root_ca_reflected,
            home_api_server=self.pod_forging.home_api_server,
        )
        try:
            created = await client.create(
                shadow_pod_path(remote_namespace), forge_shadow_pod(remote_pod)
            )
        except AlreadyExists:
            try:
                existing = await client.get(shadow_pod_path(remote_namespace, name))
            except NotFound:
                return Result(requeue_after=0.5)  # gone meanwhile: try again
            if not is_owned_by_us(existing, self.home_cluster_id, self.remote_cluster_id):
                await self._report(
                    local,
                    REASON_CONFLICT,
                    f"a ShadowPod {remote_namespace}/{name} that vk did not create exists in "
                    f"cluster {self.remote_cluster_id}; it is left untouched: rename or remove "
                    "it there",
                )
            # Ours (the informer has not caught up yet: its event brings us back), or said
            # above: either way nothing to create.
            return Result()
        except ApiError as error:
            if error.status >= 500 or error.status == 429:
                await self._report(
                    local,
                    REASON_REFUSED,
                    f"cluster {self.remote_cluster_id} could not take the pod now "
                    f"({error.status}): {error.message[:MAX_PROVIDER_MESSAGE]}",
                )
                return Result(requeue_after=PROVIDER_FAILURE_RETRY, failed=True)
            if error.status not in REFUSALS:
                raise
            # The provider refused it (its webhook: the Quota, its Pod Security level, its
            # scheduling rules; its RBAC): the consumer sees why, and the pod is tried again,
            # as the provider's usage may go down.
            await self._report(
                local,
                REASON_REFUSED,
                f"cluster {self.remote_cluster_id} refused the pod: "
                f"{error.message[:MAX_PROVIDER_MESSAGE]}",
            )
            return Result(requeue_after=REFUSED_RETRY, failed=True)
        self._created_unseen[key] = _Created(
            until=time.monotonic() + CREATED_UNSEEN_SECONDS,
            version=resource_version(created),
            made_from=local,
        )
        if host_namespaces := host_namespaces_not_offloaded(local):
            # It runs, but not as it asked: a kubelet would have run it in its node's.
            await self.events.record(
                local,
                WARNING,
                REASON_HOST_NAMESPACES,
                f"runs in cluster {self.remote_cluster_id} without {', '.join(host_namespaces)}: "
                "the host namespaces of a provider's nodes are not a consumer's to use, so it "
                "has its own network (its own IP), processes and IPC there",
            )
        if is_stamped(created) and self.admission.admitted():
            # The provider's webhook is back: every pod that waited for it asks now.
            for waiting in self._awaiting_admission:
                self.controller.enqueue(waiting)
            self._awaiting_admission.clear()
        return Result()

    def _forwarded(self, key: str, local: JSON) -> bool:
        """Whether this virtual kubelet created a ShadowPod for this very pod that its cache
        does not show yet (`_Created`): admitted then, it may run."""
        created = self._created_unseen.get(key)
        return (
            created is not None and created.made_from["metadata"]["uid"] == local["metadata"]["uid"]
        )

    async def _node_refusal(self, local: JSON) -> tuple[str, str] | None:
        """Why the virtual node refuses a pod that has no ShadowPod, as a kubelet would
        (`node_admission_refusal`), or None. A refusal is final: it is judged again on the Node
        read afresh, as a kubelet does, since its cache may be behind a label added just
        before the pod was bound. Only a pod about to be refused costs that read."""
        if node_admission_refusal(local, self.nodes.store.get(self.node_name)) is None:
            return None
        try:
            node = await self.home.get(resource_path("v1", "nodes", name=self.node_name))
        except NotFound:
            node = None  # gone: nothing to judge against
        return node_admission_refusal(local, node)

    async def _delete(
        self, client: KubeClient, local: JSON, shadow: JSON | None, remote_namespace: str
    ) -> Result:
        """The local pod is being deleted: delete its ShadowPod, whose Pod the provider deletes
        with the same grace period before the ShadowPod goes, then finish the local one, as a
        kubelet does once its containers have stopped."""
        if shadow is not None:
            await self._delete_shadow_pod(client, shadow, deletion_grace_period(local))
            return Result()  # the ShadowPod's deletion event brings us back
        created = self._created_unseen.get(_key(local))
        if created is not None and (unseen := created.until - time.monotonic()) > 0:
            # Made, and not yet seen: finished now, the pod would be gone at home while its
            # ShadowPod runs, deleted later as an orphan with the pod's own grace period.
            return Result(requeue_after=unseen)  # its event brings us back before that
        await self._finish_local(local)
        return Result()

    async def _delete_earlier(
        self, client: KubeClient, shadow: JSON, remote_namespace: str
    ) -> Result:
        if not shadow["metadata"].get("deletionTimestamp"):
            self._log.info(
                "deleting the ShadowPod of an earlier pod of the same name",
                namespace=remote_namespace,
                pod=shadow["metadata"]["name"],
            )
            with contextlib.suppress(NotFound):
                await client.delete(
                    shadow_pod_path(remote_namespace, shadow["metadata"]["name"]),
                    body=delete_options(uid=shadow["metadata"]["uid"]),
                )
        return Result()  # its deletion brings us back, to create this pod's

    async def _withdraw_unadmitted(
        self, client: KubeClient, local: JSON, shadow: JSON, message: str
    ) -> Result:
        """The provider holds no admission of the pod's ShadowPod and makes no Pod of it (it
        passed none of the provider's webhooks, which failed open while down): it is deleted,
        and asked for again through the webhooks once the admission gate lets it."""
        metadata = shadow["metadata"]
        if metadata.get("deletionTimestamp"):
            return Result()  # withdrawn already: its deletion brings us back
        self.admission.refused(time.monotonic())
        await self._report(
            local,
            REASON_REFUSED,
            f"cluster {self.remote_cluster_id} runs no pod for it ({SHADOW_POD_NOT_RESERVED}): "
            f"{message}. vk withdraws it and asks again",
        )
        self._log.info(
            "withdrawing a ShadowPod the provider did not admit",
            namespace=metadata["namespace"],
            pod=metadata["name"],
        )
        with contextlib.suppress(NotFound):
            await client.delete(
                shadow_pod_path(metadata["namespace"], metadata["name"]),
                body=delete_options(uid=metadata["uid"]),
            )
        return Result()  # its deletion brings us back, to ask again

    async def _finish_local(self, local: JSON) -> None:
        """Deletes the local pod for good, as a kubelet does once its containers stopped."""
        metadata = local["metadata"]
        with contextlib.suppress(NotFound):
            await self.home.delete(
                pod_path(metadata["namespace"], metadata["name"]),
                body=delete_options(uid=metadata["uid"], grace_period=0),
            )

    async def _delete_orphan(
        self,
        client: KubeClient,
        informer: Informer,
        namespace: str,
        name: str,
        gone: _Gone | None,
    ) -> None:
        """The local pod is gone: its ShadowPod goes, with the grace period of the pod's last
        deletion when it was deleted at once (`kubectl delete --force`)."""
        remote = informer.store.get(f"{namespace}/{name}")
        if remote is None:
            return
        if not is_owned_by_us(remote, self.home_cluster_id, self.remote_cluster_id):
            return
        grace = None
        if gone is not None and local_pod_uid(remote) in (None, gone.uid):
            grace = gone.grace
        if not remote["metadata"].get("deletionTimestamp"):
            self._log.info(
                "deleting a ShadowPod whose local pod is gone", namespace=namespace, pod=name
            )
        await self._delete_shadow_pod(client, remote, grace)

    async def _delete_shadow_pod(self, client: KubeClient, shadow: JSON, grace: int | None) -> None:
        """Deletes `shadow`, first telling the provider `grace` for its Pod (`grace_annotation_
        patch`); told again if shorter once the ShadowPod is being deleted."""
        metadata = shadow["metadata"]
        path = shadow_pod_path(metadata["namespace"], metadata["name"])
        with contextlib.suppress(NotFound):
            if patch := grace_annotation_patch(grace, shadow):
                await client.merge_patch(path, patch)
            if not metadata.get("deletionTimestamp"):
                await client.delete(path, body=delete_options(uid=metadata["uid"]))

    def _count_recreation(self, key: str, local: JSON, remote: JSON) -> None:
        """A remote pod replaced by a new one counts as a restart of the local pod."""
        local_uid, uid = local["metadata"]["uid"], remote["metadata"]["uid"]
        seen = self._remote_uids.get(key)
        if seen is None or seen[0] != local_uid:
            self._remote_uids[key] = (local_uid, uid, 0)
        elif seen[1] != uid:
            self._remote_uids[key] = (local_uid, uid, seen[2] + 1)

    def _recreations(self, key: str, local: JSON) -> int:
        seen = self._remote_uids.get(key)
        return seen[2] if seen is not None and seen[0] == local["metadata"]["uid"] else 0

    async def _reflect_status(self, key: str, local: JSON, remote: JSON) -> float:
        """The remote pod's status written home, if it says more than the local pod's; how
        long to wait to write it, if its pod's statuses are coming faster than
        PROVIDER_STATUS_INTERVAL_SECONDS (0.0: written, or nothing to write)."""
        if remote.get(STATUS_REFUSED):
            await self._refuse_status(local, remote[STATUS_REFUSED])
            return 0.0  # the local pod says what it said before
        self._refused_statuses.pop(key, None)  # said again if it comes again
        if not status_worth_reporting(remote):
            return 0.0
        if self.pod_forging.reflect_ips:
            home = self.home_network.current() if self.home_network else HomeAddresses()
            remote_status, refused = trusted_pod_ips(remote.get("status") or {}, home)
            if refused:
                await self._refuse_ips(local, refused)
        else:
            remote_status = without_pod_ips(remote.get("status") or {})
        desired = forge_local_pod_status(
            {**remote, "status": remote_status},
            local,
            node_ip=self.node_ip,
            extra_restarts=self._recreations(key, local),
        )
        return await self._write_local_status(key, local, desired)

    async def _report_stopped(self, key: str, local: JSON) -> float:
        desired = forge_stopped_status(local, kube_time(datetime.now(UTC)))
        return 0.0 if desired is None else await self._write_local_status(key, local, desired)

    async def _write_local_status(self, key: str, local: JSON, desired: JSON) -> float:
        """`desired` written as the local pod's status, if it changes it and the pod's pace
        (`status_pace`) allows; else how long until it does."""
        if not local_status_needs_update(local, desired):
            return 0.0
        if (wait := self.status_pace[key].take()) > 0:
            return wait  # written then, as the provider's Pod says then
        was_running = local.get("status", {}).get("phase") == "Running"
        written = await self.home.merge_patch(
            pod_path(local["metadata"]["namespace"], local["metadata"]["name"], "status"),
            forge_status_patch(local, desired),
        )
        # Its version, not the whole pod, held until its event comes (thousands, in a burst);
        # unless the event came first.
        version = {
            "metadata": {
                "uid": (written.get("metadata") or {}).get("uid"),
                "resourceVersion": resource_version(written),
            }
        }
        cached = self.local.store.get(key)
        if cached is None or rv_newer(version, cached):
            self.status_writes.wrote(key, version)
        self._reported.pop(key, None)
        first = self._first_seen.get(key)
        if (
            desired.get("phase") == "Running"
            and not was_running
            and first is not None
            and first[0] == local["metadata"]["uid"]
            and key not in self._offload_observed
        ):
            self._offload_observed.add(key)
            POD_OFFLOAD_SECONDS.labels(self.node_name).observe(time.monotonic() - first[1])
        return 0.0

    async def _change_refused(self, local: JSON, error: ApiError) -> None:
        """Says, once per pod and answer, that the provider refused a change of it (its
        webhook: its scheduling rules, its Pod Security level). The pod runs on there as it
        was, its status reflected as ever."""
        message = error.message[:MAX_PROVIDER_MESSAGE]
        await self._warn_once(
            self._refused_changes,
            local,
            (local["metadata"].get("uid", ""), message),
            REASON_CHANGE_REFUSED,
            f"cluster {self.remote_cluster_id} refused a change of this pod, which runs on there "
            f"as it was: {message}",
        )

    async def _refuse_status(self, local: JSON, size: int) -> None:
        """Says, once per pod, that the provider's status of it is too large to reflect."""
        await self._warn_once(
            self._refused_statuses,
            local,
            local["metadata"].get("uid", ""),
            "PodStatusRefused",
            f"cluster {self.remote_cluster_id} reported a status of {size // 1024} KiB for this "
            f"pod, over the {MAX_REMOTE_POD_STATUS_BYTES // 1024} KiB a virtual kubelet "
            "reflects: its status here is left as it was until the provider reports a smaller one",
        )

    async def _refuse_ips(self, local: JSON, refused: list[tuple[str, str]]) -> None:
        """Says once per pod and IPs which pod IPs the provider reported were left out."""
        detail = "; ".join(f"{ip[:64]} ({why})" for ip, why in refused)
        await self._warn_once(
            self._refused_ips,
            local,
            (local["metadata"].get("uid", ""), tuple(ip for ip, _ in refused)),
            "PodIPRefused",
            f"cluster {self.remote_cluster_id} reported pod IPs that are this cluster's own, not "
            f"reflected (Services here would route there): {detail}",
        )

    async def _warn_once(
        self, said_of: dict[str, Said], local: JSON, said: Said, reason: str, message: str
    ) -> None:
        """A Warning Event on the local pod, and a log line, unless `said` (what the refusal
        is about: the pod's UID, and what was refused) was said of this pod last."""
        key = _key(local)
        if said_of.get(key) == said:
            return
        said_of[key] = said
        self._log.warning("refused by the provider", pod=key, reason=reason, message=message)
        await self.events.record(local, WARNING, reason, message)

    async def _report(
        self, local: JSON, reason: str, message: str, *, rejected: bool = False
    ) -> None:
        """Why a pod cannot be offloaded: in its status (STATUS in `kubectl get pod`) and as a
        Warning Event, once per distinct message. `rejected`: for good, the virtual node
        refusing it as a kubelet refuses a pod (`rejectPod`): Failed, as a kubelet writes it."""
        key = _key(local)
        said = (local["metadata"].get("uid", ""), message)
        if self._reported.get(key) == said:
            return
        self._reported[key] = said
        self._log.warning(
            "cannot offload pod",
            namespace=local["metadata"]["namespace"],
            pod=local["metadata"]["name"],
            reason=reason,
            error=message,
        )
        status = local.get("status", {})
        now = kube_time(datetime.now(UTC))
        if rejected:
            written = forge_rejected_status(local, reason, message, now)
        else:
            # A pod that ran there (its ShadowPod gone, and refused again: a provider that
            # drained its tenant, say) runs nowhere now: its containers stopped and not Ready,
            # as `_report_stopped` says, or Services here would still send to it.
            written = {
                **(forge_stopped_status(local, now, waiting_reason=reason) or {}),
                "phase": status.get("phase") or "Pending",
                "reason": reason,
                "message": message,
            }
        if local_status_needs_update(local, {**status, **written}):
            try:
                await self.home.merge_patch(
                    pod_path(local["metadata"]["namespace"], local["metadata"]["name"], "status"),
                    {"status": written},
                )
            except ApiError as error:
                if rejected:
                    # Final, unlike a report: asked again on the work queue's back-off, not
                    # left Pending.
                    self._reported.pop(key, None)
                    raise
                self._log.warning("cannot write the pod status", error=str(error))
        await self.events.record(local, WARNING, reason, message)


class _StatusReflection(Reconciler):
    """The pod reflector's second queue: remote Pods' status, home."""

    name = "pod-status"

    def __init__(self, pods: PodReflector) -> None:
        self.pods = pods

    async def reconcile(self, key: str) -> Result:
        return await self.pods.reconcile_status(key)


@dataclass(frozen=True, slots=True)
class _Created:
    """A ShadowPod this virtual kubelet created, until its cache shows it."""

    until: float  # asked for again after this (time.monotonic()) if the cache still does not
    version: str  # the resourceVersion its creation was answered with
    made_from: JSON  # its local pod, as the cache held it then


@dataclass(frozen=True, slots=True)
class _Gone:
    """A local pod gone from the API server after a deletion, until its key is reconciled."""

    uid: str
    grace: int  # the grace period of its last deletion (0: `kubectl delete --force`)


def _key(pod: JSON) -> str:
    return f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
