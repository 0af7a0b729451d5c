"""The NamespaceOffloading controller (consumer): a namespace extended to the providers its
cluster selector chooses.

For each NamespaceOffloading (named `offloading`, in the namespace it offloads) the selector is
evaluated against every virtual node: the Node's labels, or the VirtualNode's before its Node
exists (labels an administrator added to either count). A provider with a matching virtual node
gets the mapping `namespace -> remote name` in its NamespaceMap, which the replicator carries to
it and whose status (the twin namespace created, or refused) comes back; the others lose it.
The status reports, per provider, whether it was selected and whether its twin namespace is
ready, and one phase for all. The namespace is labelled `liqo.io/scheduling-enabled=true`
(the pod webhook acts there, keeping a Local namespace's pods on local nodes too).

Pods go where the policy says, including those admitted before it (the race Liqo's page warns
about) and those a tightened policy now forbids: a pod whose controller can recreate it is
evicted, so that its replacement is placed by the webhook's rules; a bare pod gets an Event.
Before a provider loses the namespace (deselected, or the NamespaceOffloading deleted), every
pod of the namespace on its virtual nodes is evicted and gone, so that pods come home first
and no kubelet chases a remote namespace being deleted. The label stays until the namespace
has left every provider: meanwhile the webhook keeps its new pods on local nodes, so that
those evicted cannot come back to a virtual node.

A system namespace (Kubernetes', vk's, a tenant namespace: `system_namespace_problem`) is never
offloaded, even by a NamespaceOffloading the webhook did not see: no provider is asked for it,
a provider that has it already loses it as a deselected one does, it loses the label, and the
status says why (`SystemNamespace`).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from vk.api.constants import (
    NAMESPACE_OFFLOADING_NAME,
    POD_TERMINAL_PHASES,
    REMOTE_CLUSTER_ID_LABEL,
    REMOTE_ID_LABEL,
    REPLICATION_LABEL,
    RUNTIME_CLASS_NAME,
    SCHEDULING_ENABLED_LABEL,
    TYPE_LABEL,
    TYPE_VIRTUAL_NODE,
    VK_NAMESPACE,
    tenant_namespace,
)
from vk.api.nodeselector import selector_matches, selector_problems
from vk.api.offloading import (
    MappingPhase,
    NamespaceMap,
    NamespaceOffloading,
    OffloadingPhase,
    PodOffloadingStrategy,
    VirtualNode,
    remote_namespace_name,
    remote_namespace_name_problem,
    system_namespace_problem,
)
from vk.kube.client import JSON, AlreadyExists, KubeClient, NotFound, resource_path
from vk.kube.conditions import forge_condition
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.events import WARNING, EventRecorder
from vk.kube.eviction import evict
from vk.kube.informer import MODIFIED, Informer, object_key, shared_informer, split_key

log = structlog.get_logger("vk.controllers.namespaceoffloading")

FINALIZER = "namespaceoffloading-controller.liqo.io/finalizer"
RETRY = 2.0

OFFLOADING_REQUIRED, READY = "OffloadingRequired", "Ready"
# The tutorial's reasons and messages.
CLUSTER_SELECTED = "ClusterSelected"
CLUSTER_SELECTED_MESSAGE = "The remote cluster has been selected through the ClusterSelector field"
CLUSTER_NOT_SELECTED = "ClusterNotSelected"
CLUSTER_NOT_SELECTED_MESSAGE = "You have not selected this cluster through ClusterSelector fields"
NAMESPACE_CREATED = "RemoteNamespaceCreated"
NAMESPACE_CREATED_MESSAGE = "Namespace correctly offloaded on this cluster"
# Ready False reasons: only these two are failures; the others are on their way.
CREATION_LOOP_BACK_OFF = "CreationLoopBackOff"
NOT_PEERED = "NotPeered"
CREATING = "Creating"
TERMINATING = "Terminating"
INVALID_SELECTOR = "InvalidClusterSelector"
INVALID_REMOTE_NAME = "InvalidRemoteNamespaceName"
SYSTEM_NAMESPACE = "SystemNamespace"
FAILURES = (CREATION_LOOP_BACK_OFF, NOT_PEERED, INVALID_REMOTE_NAME, SYSTEM_NAMESPACE)
# Looked at again shortly: the states that change by themselves.
ON_THE_WAY = (CREATING, TERMINATING)
# A namespace's pods are read from its own informer, started with its offloading: this long
# after, if that informer has not listed yet, the offloading is looked at again.
PODS_NOT_LISTED_RETRY = 0.5
# The pods' changes in an offloaded namespace are looked at together, at most this late.
PODS_BATCH_SECONDS = 1.0


# --- Pure parts ----------------------------------------------------------------------------


def virtual_node_labels(virtual_node: Mapping[str, Any], node: Mapping[str, Any] | None) -> JSON:
    """What the selector sees of a virtual node: its Node's labels, or, before the Node
    exists, the labels the kubelet will give it."""
    if node is not None:
        return dict(node["metadata"].get("labels") or {})
    spec = virtual_node.get("spec") or {}
    return {
        **(spec.get("labels") or {}),
        TYPE_LABEL: TYPE_VIRTUAL_NODE,
        REMOTE_CLUSTER_ID_LABEL: spec.get("clusterID", ""),
    }


@dataclass(frozen=True)
class VirtualNodeView:
    """A virtual node as the controller reasons about it."""

    name: str
    cluster_id: str
    labels: Mapping[str, str]


def selection(
    selector: Mapping[str, Any] | None, nodes: Iterable[VirtualNodeView]
) -> tuple[set[str], set[str]]:
    """(the names of the virtual nodes the selector matches, the clusters that have one)."""
    chosen = [n for n in nodes if selector_matches(selector, n.labels, n.name)]
    return {n.name for n in chosen}, {n.cluster_id for n in chosen}


def first_holder(
    namespace: str, remote: str, desired: Mapping[str, str], current: Mapping[str, Any]
) -> str | None:
    """Another namespace of this cluster that holds `remote` on the provider: one this cluster
    mapped to that name itself (its desiredMapping: the provider's word alone names nothing)
    and that the provider reports Accepted there."""
    for local, entry in current.items():
        if local == namespace or desired.get(local) != remote:
            continue
        if (entry or {}).get("phase") == MappingPhase.ACCEPTED and (
            entry.get("remoteNamespace") == remote
        ):
            return str(local)
    return None


def forge_cluster_conditions(
    previous: list[JSON] | None,
    *,
    selected: bool,
    remote: str,
    cluster_id: str,
    entry: Mapping[str, Any] | None,
    peered: bool,
    now: datetime.datetime,
    holder: str | None = None,
    invalid_name: str | None = None,
    system_namespace: str | None = None,
) -> list[JSON]:
    """The conditions of one provider: selected or not, and where its twin namespace is.
    `entry` is the provider's report of this namespace (its NamespaceMap currentMapping),
    `holder` the namespace of this cluster that holds the same remote name there, if any,
    `invalid_name` why the remote name cannot be a namespace's, if it cannot,
    `system_namespace` why the namespace is never offloaded, if it is not."""
    by_type = {c.get("type"): c for c in previous or []}

    def condition(kind: str, status: str, reason: str, message: str) -> JSON:
        return forge_condition(by_type.get(kind), kind, status, message, now, reason=reason)

    phase = (entry or {}).get("phase")
    if not selected:
        conditions = [
            condition(
                OFFLOADING_REQUIRED, "False", CLUSTER_NOT_SELECTED, CLUSTER_NOT_SELECTED_MESSAGE
            )
        ]
        if entry:  # still there: pods leaving, or the provider deleting its twin
            conditions.append(
                condition(
                    READY,
                    "False",
                    TERMINATING,
                    f"removing namespace {entry.get('remoteNamespace', remote)} from "
                    f"{cluster_id}: its pods come back first",
                )
            )
        return conditions
    selected_condition = condition(
        OFFLOADING_REQUIRED, "True", CLUSTER_SELECTED, CLUSTER_SELECTED_MESSAGE
    )
    if system_namespace is not None:
        ready = condition(READY, "False", SYSTEM_NAMESPACE, system_namespace)
    elif invalid_name is not None:
        ready = condition(READY, "False", INVALID_REMOTE_NAME, invalid_name)
    elif not peered:
        ready = condition(
            READY,
            "False",
            NOT_PEERED,
            f"{cluster_id} has a virtual node but no tenant namespace "
            f"{tenant_namespace(cluster_id)} here: peer with it (vkctl peer) to offload there",
        )
    elif phase == MappingPhase.ACCEPTED and entry and entry.get("remoteNamespace") == remote:
        ready = condition(READY, "True", NAMESPACE_CREATED, NAMESPACE_CREATED_MESSAGE)
    elif phase == MappingPhase.CREATION_LOOP_BACK_OFF and holder is not None:
        ready = condition(
            READY,
            "False",
            CREATION_LOOP_BACK_OFF,
            f"namespace {remote} in {cluster_id} already holds this cluster's namespace "
            f"{holder}, mapped to that name first: unoffload this namespace and offload it "
            "again with another remote name or namespace mapping strategy",
        )
    elif phase == MappingPhase.CREATION_LOOP_BACK_OFF:
        ready = condition(
            READY,
            "False",
            CREATION_LOOP_BACK_OFF,
            f"namespace {remote} already exists in {cluster_id} and vk did not create it for "
            "this namespace (another namespace of this cluster may hold it), or the name is "
            "reserved there: it is left alone; unoffload and offload again with another "
            "namespace mapping strategy or remote name, or ask that cluster's administrator "
            "(the Events of its NamespaceMap say which)",
        )
    elif phase == MappingPhase.TERMINATING:
        ready = condition(
            READY,
            "False",
            TERMINATING,
            f"namespace {entry.get('remoteNamespace') if entry else remote} is being deleted "
            f"in {cluster_id}; it is created again once it is gone",
        )
    else:
        ready = condition(
            READY, "False", CREATING, f"waiting for {cluster_id} to create namespace {remote}"
        )
    return [selected_condition, ready]


def offloading_phase(conditions: Mapping[str, list[JSON]], deleting: bool) -> OffloadingPhase:
    """One phase for all providers, by Liqo's rule."""
    if deleting:
        return OffloadingPhase.TERMINATING
    required = ready = failed = 0
    for cluster_conditions in conditions.values():
        by_type = {c["type"]: c for c in cluster_conditions}
        if by_type.get(OFFLOADING_REQUIRED, {}).get("status") != "True":
            continue
        required += 1
        state = by_type.get(READY, {})
        if state.get("status") == "True":
            ready += 1
        elif state.get("reason") in FAILURES:
            failed += 1
    if required == 0:
        return OffloadingPhase.NO_CLUSTER_SELECTED
    if ready == required:
        return OffloadingPhase.READY
    if failed == required:
        return OffloadingPhase.ALL_FAILED
    if failed:
        return OffloadingPhase.SOME_FAILED
    return OffloadingPhase.IN_PROGRESS


def labels_changed(_: str, obj: JSON, old: JSON | None) -> bool:
    return old is None or obj["metadata"].get("labels") != old["metadata"].get("labels")


def is_movable(pod: Mapping[str, Any]) -> bool:
    """A pod whose controller recreates it once evicted (a bare pod would be gone for good)."""
    return any(o.get("controller") for o in pod["metadata"].get("ownerReferences") or [])


def placement_violation(
    pod: Mapping[str, Any],
    node_cluster: str | None,
    strategy: str,
    selected_nodes: set[str],
) -> str | None:
    """Why a scheduled pod is where its namespace's policy no longer lets it be, or None.
    `node_cluster` is the provider of the pod's virtual node, None for a local node."""
    node = (pod.get("spec") or {}).get("nodeName")
    runtime_class = (pod.get("spec") or {}).get("runtimeClassName") == RUNTIME_CLASS_NAME
    if node_cluster is None:
        if strategy == PodOffloadingStrategy.REMOTE and not runtime_class:
            return f"the strategy is Remote, and it runs on local node {node}"
        return None
    if node not in selected_nodes:
        return f"virtual node {node} ({node_cluster}) is not selected by the cluster selector"
    if strategy == PodOffloadingStrategy.LOCAL and not runtime_class:
        return f"the strategy is Local, and it runs on virtual node {node} ({node_cluster})"
    return None


def is_placed(pod: Mapping[str, Any]) -> bool:
    """Scheduled, not finished and not on its way out."""
    return bool(
        (pod.get("spec") or {}).get("nodeName")
        and not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in POD_TERMINAL_PHASES
    )


_PLACEMENT_METADATA = (
    "name",
    "namespace",
    "uid",
    "resourceVersion",
    "deletionTimestamp",
    "ownerReferences",
)
_PLACEMENT_SPEC = ("nodeName", "runtimeClassName")


def pod_placement(pod: Mapping[str, Any]) -> JSON:
    """What the controller's pod caches keep of a pod, all it reads: which pod it is (for an
    eviction, an Event), where it runs and whether it runs on (`is_placed`,
    `placement_violation`), and whether a controller makes it again (`is_movable`). A whole
    pod, ten thousand times in an offloaded namespace, was kept for these."""
    metadata = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    placement: JSON = {
        "apiVersion": pod.get("apiVersion") or "v1",
        "kind": pod.get("kind") or "Pod",
        "metadata": {key: metadata[key] for key in _PLACEMENT_METADATA if key in metadata},
        "spec": {key: spec[key] for key in _PLACEMENT_SPEC if key in spec},
    }
    if phase := (pod.get("status") or {}).get("phase"):
        placement["status"] = {"phase": phase}
    return placement


def placement_changed(
    event: str, placement: Mapping[str, Any], old: Mapping[str, Any] | None
) -> bool:
    """Whether a pod's event (on its `pod_placement`) may change what the controller decides:
    all but a change of its resourceVersion alone (its status written, say, but not its phase)."""
    if event != MODIFIED or old is None:
        return True
    if placement.get("spec") != old.get("spec") or placement.get("status") != old.get("status"):
        return True
    metadata, old_metadata = placement["metadata"], old.get("metadata") or {}
    return any(
        metadata.get(key) != old_metadata.get(key)
        for key in _PLACEMENT_METADATA
        if key != "resourceVersion"
    )


def status_patch(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> JSON | None:
    """The merge patch turning status `current` into `wanted` (providers that left are set
    to null, as a merge patch removes keys); None when nothing changes."""
    if all(current.get(k) == v for k, v in wanted.items()):
        return None
    patch = dict(wanted)
    old = current.get("remoteNamespacesConditions") or {}
    new = wanted.get("remoteNamespacesConditions") or {}
    patch["remoteNamespacesConditions"] = {**{k: None for k in old if k not in new}, **new}
    return patch


# --- The controller ------------------------------------------------------------------------


class NamespaceOffloadings(Reconciler):
    name = "namespaceoffloadings"

    def __init__(
        self, client: KubeClient, home_cluster_id: str, vk_namespace: str = VK_NAMESPACE
    ) -> None:
        self.client = client
        self.home_cluster_id = home_cluster_id
        self.vk_namespace = vk_namespace
        self.offloadings = shared_informer(
            client, NamespaceOffloading.group_version(), NamespaceOffloading.PLURAL
        )
        self.virtual_nodes = shared_informer(
            client, VirtualNode.group_version(), VirtualNode.PLURAL
        )
        self.nodes = shared_informer(
            client, "v1", "nodes", label_selector=f"{TYPE_LABEL}={TYPE_VIRTUAL_NODE}"
        )
        self.maps = shared_informer(
            client,
            NamespaceMap.group_version(),
            NamespaceMap.PLURAL,
            label_selector=f"{REPLICATION_LABEL}=true",
        )
        self.namespaces = shared_informer(client, "v1", "namespaces")
        # Pods are read only where a NamespaceOffloading is: each such namespace's own
        # informer, started when its offloading is first looked at and stopped once it is
        # gone (never a cache of every pod in the cluster).
        self.pods: dict[str, tuple[Informer, asyncio.Task[None]]] = {}
        self.events = EventRecorder(client, "namespaceoffloading-controller")
        self.controller = Controller(self, workers=4)
        self._reported: dict[str, str] = {}  # pod uid -> the violation last reported

    def _enqueue_all(self, *_: Any) -> None:
        for offloading in self.offloadings.store.objects():
            self.controller.enqueue(object_key(offloading))

    def _enqueue_namespace(self, namespace: str) -> None:
        key = f"{namespace}/{NAMESPACE_OFFLOADING_NAME}"
        if self.offloadings.store.get(key) is not None:
            self.controller.enqueue(key)

    def _on_pod(self, namespace: str, event: str, pod: JSON, old: JSON | None) -> None:
        """A pod of an offloaded namespace changed where it runs, or whether it runs on: its
        namespace is looked at again, once for the changes of a PODS_BATCH_SECONDS. (At each
        change of any pod, a namespace of ten thousand pods was judged whole, over and over,
        while a Deployment of them rolled out.)"""
        key = f"{namespace}/{NAMESPACE_OFFLOADING_NAME}"
        if placement_changed(event, pod, old) and self.offloadings.store.get(key) is not None:
            self.controller.queue.add_after(key, PODS_BATCH_SECONDS)

    async def run(self) -> None:
        self.offloadings.add_handler(lambda _, obj, __: self.controller.enqueue(object_key(obj)))
        # Virtual nodes and their labels come and go; providers answer in their maps. (Node
        # heartbeats change no label: no need to look again then.)
        for informer in (self.virtual_nodes, self.maps):
            informer.add_handler(self._enqueue_all)
        self.nodes.add_handler(
            lambda event, obj, old: self._enqueue_all() if labels_changed(event, obj, old) else None
        )
        self.namespaces.add_handler(
            lambda _, obj, __: self._enqueue_namespace(obj["metadata"]["name"])
        )
        try:
            await run_with_informers(
                self.controller,
                self.offloadings,
                self.virtual_nodes,
                self.nodes,
                self.maps,
                self.namespaces,
            )
        finally:
            for namespace in list(self.pods):
                self._stop_pods(namespace)

    def _pods_of(self, namespace: str) -> Informer:
        """The informer of the namespace's pods, started on first need."""
        if namespace not in self.pods:
            informer = Informer(self.client, "v1", "pods", namespace=namespace, keep=pod_placement)
            informer.add_handler(lambda event, pod, old: self._on_pod(namespace, event, pod, old))
            self.pods[namespace] = (informer, asyncio.create_task(informer.run()))
        return self.pods[namespace][0]

    def _stop_pods(self, namespace: str) -> None:
        informer = self.pods.pop(namespace, None)
        if informer is not None:
            informer[1].cancel()

    def _path(self, namespace: str, subresource: str | None = None) -> str:
        return resource_path(
            NamespaceOffloading.group_version(),
            NamespaceOffloading.PLURAL,
            namespace=namespace,
            name=NAMESPACE_OFFLOADING_NAME,
            subresource=subresource,
        )

    def _virtual_nodes(self) -> list[VirtualNodeView]:
        views = []
        for virtual_node in self.virtual_nodes.store.objects():
            if virtual_node["metadata"].get("deletionTimestamp"):
                continue
            name = virtual_node["metadata"]["name"]
            labels = virtual_node_labels(virtual_node, self.nodes.store.get(name))
            cluster_id = (virtual_node.get("spec") or {}).get("clusterID", "")
            views.append(VirtualNodeView(name, cluster_id, labels))
        return views

    def _maps(self) -> dict[str, JSON]:
        """The consumer's NamespaceMaps by provider: each in that provider's tenant namespace."""
        return {
            m["metadata"]["name"]: m
            for m in self.maps.store.objects()
            if m["metadata"].get("namespace") == tenant_namespace(m["metadata"]["name"])
        }

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        assert namespace is not None
        offloading = self.offloadings.store.get(key)
        if offloading is None:
            if name == NAMESPACE_OFFLOADING_NAME:
                self._stop_pods(namespace)
                # Its finalizer removed by hand, say: no webhook is to place pods there now.
                await self._label_namespace(namespace, unlabelled=True)
            return Result()
        if name != NAMESPACE_OFFLOADING_NAME:
            await self.events.record(
                offloading,
                WARNING,
                "Invalid",
                f"a NamespaceOffloading must be named {NAMESPACE_OFFLOADING_NAME!r}: this one "
                "is ignored; create one named so instead",
            )
            return Result()
        metadata = offloading["metadata"]
        deleting = bool(metadata.get("deletionTimestamp"))
        if deleting and FINALIZER not in (metadata.get("finalizers") or []):
            self._stop_pods(namespace)
            await self._label_namespace(namespace, unlabelled=True)
            return Result()
        if not deleting and await self.client.set_finalizer(
            self._path(namespace), offloading, FINALIZER, present=True
        ):
            return Result()
        spec = offloading.get("spec") or {}
        # A system namespace is asked of no provider, whatever the rest of the spec says (an
        # invalid selector included: the webhook refuses the offloading, unless it was not
        # running then); a provider that has it loses it as a deselected one does.
        system = None
        system_problem = system_namespace_problem(namespace, self.vk_namespace)
        if not deleting and (problem := system_problem):
            system = (
                f"{problem}: no provider is asked for it, and one that has it already loses it, "
                "its pods coming home first (that provider has had its Secrets: rotate them); "
                f"delete this NamespaceOffloading (vkctl unoffload namespace {namespace})"
            )
        selector = spec.get("clusterSelector")
        problems = selector_problems(selector)
        if problems and not deleting and system is None:
            return await self._invalid_selector(offloading, problems)

        remote = remote_namespace_name(namespace, spec, self.home_cluster_id)
        # A name no provider could create is asked of none (the webhook refuses it, unless it
        # was not running then); leaving, the mappings go as always.
        invalid_name = None
        if not deleting and (
            problem := remote_namespace_name_problem(namespace, spec, self.home_cluster_id)
        ):
            invalid_name = (
                f"{problem}; no provider is asked for it: unoffload the namespace first (vkctl "
                f"unoffload namespace {namespace}), its mapping cannot change"
            )
        refused = system or invalid_name
        strategy = spec.get("podOffloadingStrategy") or PodOffloadingStrategy.LOCAL_AND_REMOTE
        nodes = self._virtual_nodes()
        selected_nodes, selected_clusters = (
            (set(), set()) if deleting else selection(selector, nodes)
        )
        maps = self._maps()
        node_clusters = {n.name: n.cluster_id for n in nodes}
        namespace_pods = self._pods_of(namespace)
        if not namespace_pods.synced.is_set():
            return Result(requeue_after=PODS_NOT_LISTED_RETRY)
        pods = [p for p in namespace_pods.store.objects() if is_placed(p)]

        # Kept while the namespace leaves: the webhook then keeps its new pods on local nodes,
        # which are all its pods can come home to (one asking for a virtual node itself was
        # offloaded again as each was evicted, and the namespace never left).
        await self._label_namespace(namespace, unlabelled=system_problem is not None)
        waiting = False
        if not deleting and system is None:
            # Pods on the virtual nodes of providers losing the namespace leave below.
            staying = [
                p
                for p in pods
                if p["spec"]["nodeName"] not in node_clusters
                or node_clusters[p["spec"]["nodeName"]] in selected_clusters
            ]
            waiting |= await self._move_misplaced(staying, node_clusters, strategy, selected_nodes)

        now = datetime.datetime.now(datetime.UTC)
        previous = (offloading.get("status") or {}).get("remoteNamespacesConditions") or {}
        conditions: dict[str, list[JSON]] = {}
        for cluster_id in sorted({n.cluster_id for n in nodes} | set(maps)):
            namespace_map = maps.get(cluster_id)
            desired = ((namespace_map or {}).get("spec") or {}).get("desiredMapping") or {}
            current = ((namespace_map or {}).get("status") or {}).get("currentMapping") or {}
            selected = cluster_id in selected_clusters
            peered = self.namespaces.store.get(tenant_namespace(cluster_id)) is not None
            if selected and peered and refused is None:
                if desired.get(namespace) != remote:
                    await self._set_mapping(cluster_id, namespace_map, namespace, remote)
            elif namespace in desired:
                leaving = [
                    p for p in pods if node_clusters.get(p["spec"]["nodeName"]) == cluster_id
                ]
                if leaving:
                    await self._evict(leaving, f"namespace {namespace} leaves {cluster_id}")
                    waiting = True
                elif namespace_map is not None:
                    await self._set_mapping(cluster_id, namespace_map, namespace, None)
            entry = current.get(namespace)
            if deleting and not entry and namespace not in desired:
                continue  # done with this provider
            conditions[cluster_id] = forge_cluster_conditions(
                previous.get(cluster_id),
                selected=selected,
                remote=remote,
                cluster_id=cluster_id,
                entry=entry if (namespace in desired or not selected) else None,
                peered=peered,
                now=now,
                holder=first_holder(namespace, remote, desired, current),
                invalid_name=invalid_name,
                system_namespace=system,
            )
            waiting |= conditions[cluster_id][-1].get("reason") in ON_THE_WAY

        if deleting and not conditions:
            await self._label_namespace(namespace, unlabelled=True)
            await self.client.set_finalizer(
                self._path(namespace), offloading, FINALIZER, present=False
            )
            log.info("namespace unoffloaded", namespace=namespace)
            return Result()
        # A system namespace's offloading failed whole, even with no provider to say it on.
        phase = OffloadingPhase.ALL_FAILED if system else offloading_phase(conditions, deleting)
        written = await self._write_status(
            offloading,
            {
                "remoteNamespaceName": remote,
                "offloadingPhase": phase.value,
                "remoteNamespacesConditions": conditions,
                "observedGeneration": metadata.get("generation"),
            },
        )
        if written and refused is not None:
            reason = SYSTEM_NAMESPACE if system else "Invalid"
            await self.events.record(offloading, WARNING, reason, refused)
        return Result(requeue_after=RETRY if waiting else None)

    async def _invalid_selector(self, offloading: JSON, problems: list[str]) -> Result:
        """Nothing changes where the namespace is offloaded (no twin deleted for a typo); the
        status and an Event say what to fix."""
        message = (
            "the clusterSelector is invalid, so the offloading is left as it was: "
            + "; ".join(problems)
            + " (fix it: kubectl edit namespaceoffloading offloading -n "
            + offloading["metadata"]["namespace"]
            + ")"
        )
        now = datetime.datetime.now(datetime.UTC)
        previous = (offloading.get("status") or {}).get("remoteNamespacesConditions") or {}
        conditions = {
            cluster_id: [
                forge_condition(
                    next((c for c in old if c.get("type") == OFFLOADING_REQUIRED), None),
                    OFFLOADING_REQUIRED,
                    "Unknown",
                    message,
                    now,
                    reason=INVALID_SELECTOR,
                )
            ]
            for cluster_id, old in previous.items()
        }
        if await self._write_status(
            offloading,
            {
                "offloadingPhase": OffloadingPhase.ALL_FAILED.value,
                "remoteNamespacesConditions": conditions,
                "observedGeneration": offloading["metadata"].get("generation"),
            },
        ):
            await self.events.record(offloading, WARNING, "Invalid", message)
        return Result()

    async def _write_status(self, offloading: JSON, wanted: JSON) -> bool:
        patch = status_patch(offloading.get("status") or {}, wanted)
        if patch is None:
            return False
        await self.client.merge_patch(
            self._path(offloading["metadata"]["namespace"], "status"), {"status": patch}
        )
        return True

    async def _label_namespace(self, namespace: str, unlabelled: bool) -> None:
        """`liqo.io/scheduling-enabled=true` while the pod webhook must place pods here."""
        current = self.namespaces.store.get(namespace)
        if current is None:
            return
        has = (current["metadata"].get("labels") or {}).get(SCHEDULING_ENABLED_LABEL) == "true"
        if has == (not unlabelled):
            return
        with contextlib.suppress(NotFound):
            await self.client.merge_patch(
                resource_path("v1", "namespaces", name=namespace),
                {
                    "metadata": {
                        "labels": {SCHEDULING_ENABLED_LABEL: None if unlabelled else "true"}
                    }
                },
            )

    async def _set_mapping(
        self, cluster_id: str, namespace_map: JSON | None, namespace: str, remote: str | None
    ) -> None:
        """One entry of a provider's NamespaceMap, set or (None) removed, by merge patch: the
        maps are shared by every offloaded namespace, and each controller worker touches only
        its own key."""
        tenant = tenant_namespace(cluster_id)
        path = resource_path(
            NamespaceMap.group_version(), NamespaceMap.PLURAL, namespace=tenant, name=cluster_id
        )
        if namespace_map is None:
            if remote is None:
                return
            with contextlib.suppress(AlreadyExists):
                await self.client.create(
                    resource_path(
                        NamespaceMap.group_version(), NamespaceMap.PLURAL, namespace=tenant
                    ),
                    forge_namespace_map(cluster_id, {namespace: remote}),
                )
                return
        with contextlib.suppress(NotFound):
            await self.client.merge_patch(path, {"spec": {"desiredMapping": {namespace: remote}}})

    async def _move_misplaced(
        self,
        pods: list[JSON],
        node_clusters: Mapping[str, str],
        strategy: str,
        selected_nodes: set[str],
    ) -> bool:
        """Evicts the movable pods the policy forbids where they are, reports the bare ones;
        True while evicted ones are on their way."""
        moving = []
        for pod in pods:
            node = pod["spec"]["nodeName"]
            cluster = node_clusters.get(node)
            if cluster is None and self.nodes.store.get(node) is not None:
                continue  # a virtual node without VirtualNode: not ours to judge
            why = placement_violation(pod, cluster, strategy, selected_nodes)
            if why is None:
                self._reported.pop(pod["metadata"].get("uid", ""), None)
                continue
            if is_movable(pod):
                moving.append(pod)
                continue
            uid = pod["metadata"].get("uid", "")
            if self._reported.get(uid) != why:
                self._reported[uid] = why
                await self.events.record(
                    pod,
                    WARNING,
                    "OffloadingPolicyViolation",
                    f"this pod is where its namespace's offloading policy no longer allows: "
                    f"{why}; no controller would recreate it, so it is left running: delete "
                    "and create it again to place it by the policy",
                )
        if moving:
            await self._evict(moving, "its namespace's offloading policy changed")
        return bool(moving)

    async def _evict(self, pods: Iterable[JSON], why: str) -> None:
        for pod in pods:
            await evict(self.client, pod, why)


def forge_namespace_map(cluster_id: str, desired: Mapping[str, str]) -> JSON:
    """The consumer's NamespaceMap towards `cluster_id`, replicated to it."""
    return {
        "apiVersion": NamespaceMap.group_version(),
        "kind": NamespaceMap.KIND,
        "metadata": {
            "name": cluster_id,
            "namespace": tenant_namespace(cluster_id),
            "labels": {
                REMOTE_CLUSTER_ID_LABEL: cluster_id,
                REMOTE_ID_LABEL: cluster_id,
                REPLICATION_LABEL: "true",
            },
        },
        "spec": {"desiredMapping": dict(desired)},
    }
