"""The generic reflector: what reflecting any kind of object takes, written once (Liqo's
`reflection/generic`). One work queue and its workers per resource; per offloaded namespace an
informer on each side; keys are `local namespace/local name` whichever side an event came from,
so each reconcile looks at both copies and makes the remote one match the local one.

The rules, for every resource: the local object is the truth, and remote drift is set back;
deleting (or skipping) the local object deletes the remote copy; a remote object without our
ownership labels is never touched, and the conflict is reported on the local object; failures
are Events on the local object and `vk_reflection_items_total{reflector,result}`.

What differs from one resource to another (names, which objects, the forge, what counts as a
difference) is a `ReflectedResource`, one small module each.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import structlog
from prometheus_client import REGISTRY, Counter
from prometheus_client.core import UnknownMetricFamily
from prometheus_client.registry import Collector

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
    DELETED,
    PROVIDER_MAX_OBJECTS,
    EventHandler,
    Informer,
    resource_version,
    shared_informer,
    split_key,
)
from vk.reflection.forge.meta import RemoteObjectAsRead, is_owned_by_us, without_not_reflected

log = structlog.get_logger("vk.reflection")

REFLECTION_ITEMS = Counter(
    "vk_reflection_items_total",
    "Objects reflected, by reflector and result (created, updated, deleted, conflict, failed, "
    "lessened: a lesser copy the provider took in place of the whole)",
    ["reflector", "result"],
)


class LiqoReflectionMetrics(Collector):
    """Liqo's virtual-kubelet metrics, under Liqo's names and labels, so that Liqo's dashboards
    and alerts work on vk: every work item a reflector processed, and every one that failed.
    Exposed as Liqo's Go client exposes them, without the `_total` a Python Counter would add
    to their names (a query for Liqo's name would find nothing)."""

    LABELS = ("namespace", "reflector_resource", "cluster_id", "node_name")
    FAMILIES: ClassVar[dict[bool, tuple[str, str]]] = {
        True: (
            "liqo_virtual_kubelet_reflection_item_counter",
            "Items a reflector processed (Liqo's metric; a fast increase can mean a local and "
            "a remote controller fighting over an object)",
        ),
        False: (
            "liqo_virtual_kubelet_reflection_error_counter",
            "Items a reflector failed to process, to be retried (Liqo's metric)",
        ),
    }

    def __init__(self) -> None:
        self.counts: dict[bool, dict[tuple[str, ...], int]] = {True: {}, False: {}}

    def inc(self, succeeded: bool, labels: tuple[str, ...]) -> None:
        counts = self.counts[succeeded]
        counts[labels] = counts.get(labels, 0) + 1

    def collect(self) -> Iterator[UnknownMetricFamily]:
        for succeeded, (name, help_text) in self.FAMILIES.items():
            family = UnknownMetricFamily(name, help_text, labels=list(self.LABELS))
            for labels, count in self.counts[succeeded].items():
                family.add_metric(list(labels), count)
            yield family


LIQO_METRICS = LiqoReflectionMetrics()
REGISTRY.register(LIQO_METRICS)


def liqo_observer(resource: str, cluster_id: str, node_name: str) -> Callable[[str, bool], None]:
    """What a reflector's Controller tells Liqo's counters of each key it reconciled
    (`namespace/name`); `resource` is Liqo's name of the reflected kind (`pod`, `service`)."""

    def observe(key: str, succeeded: bool) -> None:
        namespace = key.split("/", 1)[0] if "/" in key else ""
        LIQO_METRICS.inc(succeeded, (namespace, resource, cluster_id, node_name))

    return observe


# Liqo's Event reasons on local objects.
REASON_FAILED = "FailedReflection"
REASON_FAILED_DELETION = "FailedDeletion"
# What a provider answers when it will not take the object as it is: said once as an Event,
# then tried again every REFUSED_RETRY (its admission or quota may change meanwhile; retrying at
# once would change nothing, and the work queue's back-off reaches 1000 s). A 409 (someone
# wrote the copy since we read it) or a 404 (deleted meanwhile) is a race: retried without a
# word.
REFUSALS = (400, 403, 422)
REFUSED_RETRY = 10.0
# A copy reflected in a lesser form than the local object's, the provider refusing the whole
# (a NodePort Service as ClusterIP): said on the local object.
REASON_LESSENED = "ReflectedLessened"
NOT_SYNCED_RETRY = 0.2
# The informers of a local → remote reflector, by position.
LOCAL, REMOTE = 0, 1


def rv_newer(candidate: JSON, than: JSON) -> bool:
    """Whether `candidate` is a later version than `than`. resourceVersions are opaque to
    clients, but every API server we talk to gives etcd revisions; anything else is taken as
    not newer, so the informer's copy is used."""
    try:
        return int(candidate["metadata"]["resourceVersion"]) > int(
            than["metadata"]["resourceVersion"]
        )
    except (KeyError, ValueError):
        return False


@dataclass(frozen=True)
class LesserCopy:
    """What a reflector writes when the provider refuses the copy as the local object is, and
    the words said of it on the local object."""

    copy: JSON
    said: str


class RecentWrites:
    """What this process last wrote or deleted, by `namespace/name`, until the informer shows
    it: an event that comes before the informer has caught up with our own write must not
    write (or delete) again."""

    def __init__(self) -> None:
        self._written: dict[str, JSON] = {}
        self._deleted: set[str] = set()  # UIDs

    def wrote(self, key: str, obj: JSON) -> None:
        self._written[key] = obj

    def deleted(self, key: str, obj: JSON) -> None:
        self._deleted.add(obj["metadata"].get("uid", ""))
        self._written.pop(key, None)

    def observe(self, key: str, event: str, obj: JSON) -> bool:
        """The informer's event on `key`: what we wrote or deleted of it that the informer
        shows now is forgotten. Not only when the key is reconciled again: an object written
        once and never reconciled after (a pod's token Secret) kept our write, answer and
        all, for ever (bench.curve --heap: 0.8 KiB per pod). True when the event is our last
        write itself coming back (the very resourceVersion our write was answered with): it
        tells the reconcile that wrote it nothing new, and needs none (one per pod saved)."""
        uid = obj["metadata"].get("uid", "")
        if event == DELETED:
            self._deleted.discard(uid)
            if (self._written.get(key) or {}).get("metadata", {}).get("uid") == uid:
                del self._written[key]
            return False
        written = self._written.get(key)
        if written is None or rv_newer(written, obj):
            return False
        del self._written[key]
        return resource_version(written) == resource_version(obj) != ""

    def current(self, key: str, cached: JSON | None) -> JSON | None:
        """The latest known state of `key`: the informer's `cached` copy, or what we wrote
        later, or None once we deleted it."""
        if cached is not None and cached["metadata"].get("uid") in self._deleted:
            cached = None
        written = self._written.get(key)
        if written is None:
            return cached
        if cached is not None and not rv_newer(written, cached):
            del self._written[key]
            return cached
        return written


@dataclass(frozen=True)
class ReflectorOptions:
    """What every reflector of a virtual kubelet is given."""

    home: KubeClient
    home_cluster_id: str
    remote_cluster_id: str
    node_name: str
    events: EventRecorder
    leading: Callable[[], bool]
    workers: int
    # The VirtualNode's offloadingPatch now: the labels and annotations it keeps at home are
    # left out of every reflected copy.
    offloading_patch: Callable[[], Mapping[str, Any]] = dict


@dataclass
class NamespaceReflection:
    """One offloaded namespace, as one reflector sees it: its informers on both sides."""

    local_namespace: str
    remote_namespace: str
    client: KubeClient
    informers: list[Informer]
    tasks: list[asyncio.Task[None]] = field(default_factory=list)
    # The handler this reflector added to each informer, which other reflectors may share.
    handlers: list[tuple[Informer, EventHandler]] = field(default_factory=list)

    def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        for informer, handler in self.handlers:
            informer.remove_handler(handler)


class NamespacedReflector(Reconciler):
    """A reflector over the offloaded namespaces: started and stopped per namespace by the
    manager, re-enqueued in full when this virtual kubelet becomes the one that reflects the
    shared objects (`resync`)."""

    # Shared objects (a namespace's ConfigMaps, Services, ...) are reflected by one virtual
    # kubelet per provider, the holder of the reflection Lease; per-node ones by each.
    leader_only = True

    # Liqo's name of what it reflects (its `--<resource>-reflection-workers` flag's).
    liqo_resource: str = ""

    def __init__(self, options: ReflectorOptions) -> None:
        self.controller = Controller(
            self,
            workers=options.workers,
            observe=liqo_observer(
                self.liqo_resource or self.name, options.remote_cluster_id, options.node_name
            ),
        )
        self.namespaces: dict[str, NamespaceReflection] = {}
        self.leading = options.leading
        self.home = options.home
        self.home_cluster_id = options.home_cluster_id
        self.remote_cluster_id = options.remote_cluster_id
        self.node_name = options.node_name
        self.events = options.events
        self.offloading_patch = options.offloading_patch
        # What a cache of a twin namespace keeps of each provider object (ours whole).
        self.remote_as_read = RemoteObjectAsRead(self.home_cluster_id, self.remote_cluster_id)
        # key -> (local uid, message) last reported, so a resync does not repeat an Event.
        self._reported: dict[str, tuple[str, str]] = {}

    @abc.abstractmethod
    def informers(
        self, local_namespace: str, remote_namespace: str, client: KubeClient
    ) -> list[Informer]:
        """The informers one namespace needs (handlers are wired by the reflector)."""

    @abc.abstractmethod
    def keys_of(self, state: NamespaceReflection, side: int, obj: JSON) -> list[str]:
        """The keys an object of the namespace's informer number `side` wakes up (by side,
        not by namespace: with EnforceSameName both sides have the same one)."""

    async def report(
        self,
        local: JSON,
        kind: tuple[str, str],
        result: str,
        message: str,
        *,
        reason: str = REASON_FAILED,
    ) -> None:
        """A failure, counted, and said once per object and message: a Warning Event on the
        local object, whose (apiVersion, kind) is `kind` (listed objects carry none, and
        `kubectl describe` matches Events on it)."""
        REFLECTION_ITEMS.labels(self.name, result).inc()
        key = f"{local['metadata']['namespace']}/{local['metadata']['name']}"
        said = (local["metadata"].get("uid", ""), message)
        if self._reported.get(key) == said:
            return
        self._reported[key] = said
        log.warning("cannot reflect", reflector=self.name, key=key, result=result, error=message)
        involved = {**local, "apiVersion": kind[0], "kind": kind[1]}
        await self.events.record(involved, WARNING, reason, message)

    def start_namespace(self, local: str, remote: str, client: KubeClient) -> None:
        current = self.namespaces.get(local)
        if current and current.remote_namespace == remote and current.client is client:
            return
        self.stop_namespace(local)
        state = NamespaceReflection(local, remote, client, self.informers(local, remote, client))

        def handler_of(side: int) -> EventHandler:
            def handler(event: str, obj: JSON, _: JSON | None) -> None:
                self.on_event(state, side, event, obj)

            return handler

        loop = asyncio.get_running_loop()
        for side, informer in enumerate(state.informers):
            handler = handler_of(side)
            informer.add_handler(handler)
            state.handlers.append((informer, handler))
            state.tasks.append(loop.create_task(informer.run()))
        state.tasks.append(loop.create_task(self._reconcile_once_synced(state)))
        self.namespaces[local] = state

    def informers_to_sync(self, state: NamespaceReflection) -> list[Informer]:
        """The informers whose caches a reconcile of the namespace reads: until they have
        synced, its keys wait (and are all enqueued once they have)."""
        return state.informers

    async def _reconcile_once_synced(self, state: NamespaceReflection) -> None:
        # Keys that came before the caches were whole were left (a reconcile then would judge
        # on half the objects): each of ten thousand retried every 0.2 s meanwhile, as they
        # were, took more of a restart's CPU than their reconciles (issue 20).
        for informer in self.informers_to_sync(state):
            await informer.synced.wait()
        self.namespace_synced(state)

    def namespace_synced(self, state: NamespaceReflection) -> None:
        """Every key the namespace's caches know, enqueued: its informers have synced."""
        for side, informer in enumerate(state.informers):
            for obj in informer.store.objects():
                self._enqueue(self.keys_of(state, side, obj))

    def is_synced(self, state: NamespaceReflection) -> bool:
        """Whether a reconcile of the namespace may read its caches (`informers_to_sync`);
        when not, it waits for `namespace_synced`, which enqueues its key again."""
        return all(informer.synced.is_set() for informer in self.informers_to_sync(state))

    def stop_namespace(self, local: str) -> None:
        state = self.namespaces.pop(local, None)
        if state is not None:
            state.stop()

    def retry_now(self) -> None:
        """The work waiting on a back-off, tried now (the provider is back)."""
        self.controller.queue.retry_now()

    def resync(self) -> None:
        """Every object of every namespace, again: after a change of leader, nothing the
        previous one left half done stays so."""
        for state in self.namespaces.values():
            for side, informer in enumerate(state.informers):
                for obj in informer.store.objects():
                    self._enqueue(self.keys_of(state, side, obj))

    def left_for_namespace_synced(self, state: NamespaceReflection, event: str) -> bool:
        """Whether an event's key is left for `namespace_synced` to enqueue: any but a deletion
        while the namespace's caches are not whole, since the object is in one that it
        enqueues whole once all are. A restart's lists tell their objects to the handlers just
        before each cache is marked whole: every key was reconciled twice, the second time for
        nothing (issue 20)."""
        return event != DELETED and not self.is_synced(state)

    def on_event(self, state: NamespaceReflection, side: int, event: str, obj: JSON) -> None:
        if self.left_for_namespace_synced(state, event):
            return
        self._enqueue(self.keys_of(state, side, obj))

    def _enqueue(self, keys: list[str]) -> None:
        for key in keys:
            self.controller.enqueue(key)

    async def run(self) -> None:
        try:
            await self.controller.run()
        finally:
            for local in list(self.namespaces):
                self.stop_namespace(local)

    def active(self, namespace: str) -> NamespaceReflection | None:
        """The namespace's state if this reflector should act on it now."""
        if self.leader_only and not self.leading():
            return None
        return self.namespaces.get(namespace)


class LocalToRemoteReflector(NamespacedReflector):
    """Reflects one resource local → remote with the rules of the module docstring. The
    resource's specifics come from the `Reflected*` methods, overridden per resource."""

    api_version: str
    plural: str
    kind: str
    # The kind of the copies, when not the local objects' (EndpointSlices become
    # ShadowEndpointSlices, which the provider checks and turns into EndpointSlices).
    remote_api_version: str | None = None
    remote_plural: str | None = None
    remote_kind: str | None = None

    def __init__(self, options: ReflectorOptions) -> None:
        super().__init__(options)
        self.recent = RecentWrites()
        self._log = log.bind(reflector=self.name)

    # -- what each resource says ---------------------------------------------------------

    def remote_name(self, local_name: str) -> str:
        return local_name

    def local_name(self, remote_name: str) -> str:
        return remote_name

    @abc.abstractmethod
    def wants(self, local: JSON) -> bool:
        """Whether this local object is to be reflected (policy, and what the resource
        reflects at all)."""

    def wants_in(self, state: NamespaceReflection, local: JSON) -> bool:
        """`wants`, for reflectors that also look at other objects of the namespace (its
        informers past the first two)."""
        return self.wants(local)

    def ignores_remote(self, remote: JSON) -> bool:
        """Remote objects this reflector leaves alone (another reflector's), their changes
        waking nothing; a local object wanting the name is told only by
        `name_kept_for_another`."""
        return False

    def name_kept_for_another(self, local_name: str, remote: JSON | None) -> str | None:
        """Why a local object of this name is not reflected, its remote name being another's:
        another local object's (`remote_name` maps another name onto it), or another
        reflector's, whose object `remote` is (None: none there now); None when it is its own.
        Neither written nor deleted for this one, and said on it."""
        return None

    @abc.abstractmethod
    def forge(self, local: JSON, remote_namespace: str) -> JSON:
        """The remote copy of `local` (a pure forge function)."""

    @abc.abstractmethod
    def needs_update(self, desired: JSON, current: JSON) -> bool:
        """Whether the remote object must be written to become `desired`."""

    def lesser_copy(self, desired: JSON) -> LesserCopy | None:
        """What to write in place of `desired` when the provider refuses it, and what to say
        of it; None: nothing (the refusal is said, and the copy is left as it is)."""
        return None

    async def after_write(self, local: JSON, remote: JSON, state: NamespaceReflection) -> None:
        """What else the resource does once the remote copy is written (PVCs: the local PV)."""

    async def after_delete(self, namespace: str, name: str) -> None:
        """What else the resource does once the local object is gone."""

    # -- wiring ---------------------------------------------------------------------------

    def informers(
        self, local_namespace: str, remote_namespace: str, client: KubeClient
    ) -> list[Informer]:
        # The remote informer is not filtered by our labels: a foreign object of the same
        # name must be seen to be left alone and reported (and no more of it is kept).
        return [
            shared_informer(self.home, self.api_version, self.plural, namespace=local_namespace),
            shared_informer(
                client,
                self.remote_api_version or self.api_version,
                self.remote_plural or self.plural,
                namespace=remote_namespace,
                keep=self.remote_as_read,
                max_objects=PROVIDER_MAX_OBJECTS,
            ),
        ]

    def keys_of(self, state: NamespaceReflection, side: int, obj: JSON) -> list[str]:
        name = obj["metadata"]["name"]
        local_name = name if side == LOCAL else self.local_name(name)
        return [f"{state.local_namespace}/{local_name}"]

    def on_event(self, state: NamespaceReflection, side: int, event: str, obj: JSON) -> None:
        if side == REMOTE:
            key = f"{state.remote_namespace}/{obj['metadata']['name']}"
            if self.recent.observe(key, event, obj):
                return  # our own write coming back
            if event != DELETED and self.ignores_remote(obj):
                # Another reflector's (the token Secret of every pod, in the Secrets' shared
                # informer): its reconcile would leave it at once. Its deletion is not left:
                # a local object of that name may be reflected then.
                return
        super().on_event(state, side, event, obj)

    def _remote(self, state: NamespaceReflection, name: str) -> JSON | None:
        key = f"{state.remote_namespace}/{name}"
        return self.recent.current(key, state.informers[REMOTE].store.get(key))

    # -- the reconcile ----------------------------------------------------------------------

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        assert namespace is not None
        state = self.active(namespace)
        if state is None:
            # Not offloaded (any more), or another virtual kubelet reflects it: the twin
            # namespace's deletion takes the copies with it.
            return Result()
        if not self.is_synced(state):
            return Result()  # enqueued again once it is
        local = state.informers[LOCAL].store.get(key)
        remote_name = self.remote_name(name)
        remote = self._remote(state, remote_name)
        wanted = (
            local is not None
            and not local["metadata"].get("deletionTimestamp")
            and self.wants_in(state, local)
        )
        if taken := self.name_kept_for_another(name, remote):
            if wanted and local is not None:
                await self.report(local, (self.api_version, self.kind), "conflict", taken)
            else:
                self._reported.pop(key, None)
            return Result()
        if remote is not None and self.ignores_remote(remote):
            return Result()
        if remote is not None and not is_owned_by_us(
            remote, self.home_cluster_id, self.remote_cluster_id
        ):
            if wanted and local is not None:
                await self.report(
                    local,
                    (self.api_version, self.kind),
                    "conflict",
                    f"{self.remote_kind or self.kind} {state.remote_namespace}/{remote_name} "
                    "already exists in "
                    f"cluster {self.remote_cluster_id} and was not created by vk: it is left "
                    "untouched, and this object is not reflected until it is renamed or "
                    "removed there",
                )
            return Result()
        if not wanted:
            if remote is not None and not remote["metadata"].get("deletionTimestamp"):
                await self._delete_remote(state, remote, local)
            if local is None:
                self._reported.pop(key, None)
                await self.after_delete(namespace, name)
            return Result()
        assert local is not None
        desired = without_not_reflected(
            self.forge(local, state.remote_namespace), self.offloading_patch()
        )
        try:
            if remote is not None and not self.needs_update(desired, remote):
                await self.after_write(local, remote, state)
                return Result()
            if remote is not None and remote.get("immutable"):
                # An immutable ConfigMap or Secret cannot change: replaced by a new one.
                await self._delete_remote(state, remote, local)
                return Result(requeue_after=NOT_SYNCED_RETRY)
            written = await self._write(state, remote, desired)
        except AlreadyExists:
            return Result(requeue_after=NOT_SYNCED_RETRY)  # the informer has not caught up
        except ApiError as error:
            if error.status not in REFUSALS:
                raise
            return await self._refused(state, local, remote, desired, error)
        if self._reported.pop(key, None):
            self._log.info("reflected again", key=key)
        await self.after_write(local, written, state)
        return Result()

    async def _refused(
        self,
        state: NamespaceReflection,
        local: JSON,
        remote: JSON | None,
        desired: JSON,
        refusal: ApiError,
    ) -> Result:
        """The provider refused `desired`: its lesser copy written if the resource has one, the
        refusal said on the local object once, and the whole copy tried again in a while."""
        kind = (self.api_version, self.kind)
        failed = Result(requeue_after=REFUSED_RETRY, failed=True)
        lesser = self.lesser_copy(desired)
        if lesser is not None:
            try:
                if remote is None or self.needs_update(lesser.copy, remote):
                    remote = await self._write(state, remote, lesser.copy)
            except AlreadyExists:
                return Result(requeue_after=NOT_SYNCED_RETRY)
            except ApiError as error:
                if error.status not in REFUSALS:
                    raise
                refusal, lesser = error, None  # refused too: what is said is why
        if lesser is None or remote is None:
            await self.report(
                local,
                kind,
                "failed",
                f"cannot reflect to cluster {self.remote_cluster_id}: {refusal.message}",
            )
            return failed
        await self.report(
            local,
            kind,
            "lessened",
            f"cluster {self.remote_cluster_id} refused it as it is ({refusal.message}): "
            f"{lesser.said}",
            reason=REASON_LESSENED,
        )
        await self.after_write(local, remote, state)
        return failed

    async def _write(self, state: NamespaceReflection, remote: JSON | None, desired: JSON) -> JSON:
        """Creates the remote copy (`remote` None), or replaces `remote` with `desired`."""
        name = desired["metadata"]["name"]
        if remote is None:
            written = await state.client.create(self._collection(state), desired)
            REFLECTION_ITEMS.labels(self.name, "created").inc()
        else:
            written = await state.client.replace(
                self._path(state, name), replacement(desired, remote)
            )
            REFLECTION_ITEMS.labels(self.name, "updated").inc()
        self.recent.wrote(f"{state.remote_namespace}/{name}", written)
        return written

    def _collection(self, state: NamespaceReflection) -> str:
        return resource_path(
            self.remote_api_version or self.api_version,
            self.remote_plural or self.plural,
            namespace=state.remote_namespace,
        )

    def _path(self, state: NamespaceReflection, name: str) -> str:
        return resource_path(
            self.remote_api_version or self.api_version,
            self.remote_plural or self.plural,
            namespace=state.remote_namespace,
            name=name,
        )

    async def _delete_remote(
        self, state: NamespaceReflection, remote: JSON, local: JSON | None
    ) -> None:
        metadata = remote["metadata"]
        try:
            await state.client.delete(
                self._path(state, metadata["name"]),
                body=delete_options(uid=metadata["uid"]),
            )
        except NotFound:
            pass
        except ApiError as error:
            if local is not None and error.status in REFUSALS:
                await self.report(
                    local,
                    (self.api_version, self.kind),
                    "failed",
                    f"cannot delete the copy in cluster {self.remote_cluster_id}: {error.message}",
                    reason=REASON_FAILED_DELETION,
                )
            raise
        self.recent.deleted(f"{state.remote_namespace}/{metadata['name']}", remote)
        REFLECTION_ITEMS.labels(self.name, "deleted").inc()


def replacement(desired: JSON, current: JSON) -> JSON:
    """The body of a PUT making `current` into `desired`: guarded by its resourceVersion, and
    keeping what others may have added that the local object does not say (finalizers, owner
    references); the server keeps allocated values (a Service's clusterIP, nodePorts)."""
    metadata = dict(desired["metadata"])
    metadata["resourceVersion"] = current["metadata"]["resourceVersion"]
    for kept in ("finalizers", "ownerReferences"):
        if current["metadata"].get(kept):
            metadata[kept] = current["metadata"][kept]
    return {**desired, "metadata": metadata}
