"""Events, remote → local: what the provider says about an offloaded pod (pulling its image,
a probe failing, ...) or a reflected object shows in `kubectl describe` at home, on the local
object (Liqo's `event/event.go`). Local Events never go to the provider.

Each remote Event becomes a local Event of the same name about the local object, labelled as
ours, kept up to date while the remote one changes (its count grows), at a pace (below), and
deleted with it.
The provider writes its Events as it likes: the cache of a twin namespace's Events holds only
those about an object vk reflects, as the reflector reads them, within bounds (below).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import structlog

from vk.api.constants import DESTINATION_LABEL, ORIGIN_LABEL
from vk.kube.client import JSON, AlreadyExists, KubeClient, NotFound, resource_path
from vk.kube.controller import Result
from vk.kube.events import WARNING
from vk.kube.informer import PROVIDER_MAX_OBJECTS, Informer, Store, object_key, split_key
from vk.kube.supervision import BackgroundTasks
from vk.kube.workqueue import TokenBuckets
from vk.reflection.forge.events import (
    event_needs_update,
    forge_local_event,
    involved_local_name,
    involved_object_key,
    involved_remote_name,
    remote_event_as_read,
)
from vk.reflection.forge.meta import ReflectionPolicy, is_owned_by_us, should_reflect
from vk.reflection.generic import (
    LOCAL,
    REFLECTION_ITEMS,
    REMOTE,
    NamespacedReflector,
    NamespaceReflection,
    RecentWrites,
    ReflectorOptions,
)

log = structlog.get_logger("vk.reflection.events")

# Where the local object an Event is about is read from.
_API = {
    "Pod": ("v1", "pods"),
    "ConfigMap": ("v1", "configmaps"),
    "Secret": ("v1", "secrets"),
    "Service": ("v1", "services"),
    "PersistentVolumeClaim": ("v1", "persistentvolumeclaims"),
    "Ingress": ("networking.k8s.io/v1", "ingresses"),
}
_LOCAL_OBJECTS_KEPT = 4096  # local objects remembered by the UID of their remote copy

# How many of a provider's Events a virtual kubelet holds (and so copies home), at most: about
# one object, as many as client-go's recorder lets a component make about one object at once
# (its spam filter's burst); in one twin namespace, enough for every Event in the hour an Event
# lives of a few thousand pods started. A provider that makes more (it writes these Events as
# it likes) has the rest ignored: the virtual kubelet's memory, and what it writes home, stay
# bounded, at about 1.5 KiB an Event kept (remote_event_as_read).
MAX_EVENTS_PER_OBJECT = 25
MAX_EVENTS_PER_NAMESPACE = 20_000
# How often the provider's Events about one object are written home (made or changed): as
# often as they come up to MAX_EVENTS_PER_OBJECT at once, then once every
# EVENT_WRITE_INTERVAL_SECONDS, each as the provider has it then. A provider writes its Events
# as it likes, and changing them on and on (a count, a message) would have each change written
# home; its own components' recorders make no more than that burst about one object at once,
# and one more every five minutes.
EVENT_WRITE_INTERVAL_SECONDS = 10.0
_INVOLVED_INDEX = "involved"

OffloadedPod = Callable[[str, str, str, str, str], JSON | None]
"""(local namespace, local name, remote namespace, remote name, remote UID or "") -> the local
pod this virtual kubelet offloaded as that remote pod, from its caches; None when they do not
know (another node's pod, a cache not synced, another UID): the Event reflector reads then."""


class EventReflector(NamespacedReflector):
    name = "events"
    liqo_resource = "event"

    def __init__(
        self,
        options: ReflectorOptions,
        policy: ReflectionPolicy,
        offloaded_pod: OffloadedPod | None = None,
    ) -> None:
        """`offloaded_pod`: the pod reflector's word on this node's pods, so that an Event
        about one costs no read of the pod on either side (two per offloaded pod, before)."""
        super().__init__(options)
        self.policy = policy  # on the remote Event, the only copy a user could annotate
        self.offloaded_pod = offloaded_pod
        # remote involved object UID -> the local object it stands for (None: not ours)
        self._local_objects: dict[str, JSON | None] = {}
        self.recent = RecentWrites()  # the local Events written, until their informer shows them
        # By the UID of the local object the Events are about.
        self.pace: TokenBuckets[str] = TokenBuckets(
            1 / EVENT_WRITE_INTERVAL_SECONDS, MAX_EVENTS_PER_OBJECT
        )
        self._refusals_said: set[tuple[str, str]] = set()  # (twin namespace, why), said once
        self._saying = BackgroundTasks("provider-events-refused")

    def informers(
        self, local_namespace: str, remote_namespace: str, client: KubeClient
    ) -> list[Informer]:
        # At home, only the Events reflected from this provider (in the LOCAL, REMOTE order
        # of every reflector).
        return [
            Informer(
                self.home,
                "v1",
                "events",
                namespace=local_namespace,
                label_selector=f"{ORIGIN_LABEL}={self.home_cluster_id},"
                f"{DESTINATION_LABEL}={self.remote_cluster_id}",
            ),
            Informer(
                client,
                "v1",
                "events",
                namespace=remote_namespace,
                indexers={_INVOLVED_INDEX: lambda event: [involved_object_key(event)]},
                keep=remote_event_as_read,
                admit=self._admit_remote_event,
                max_objects=PROVIDER_MAX_OBJECTS,
            ),
        ]

    def _admit_remote_event(self, event: JSON, cached: Store) -> bool:
        """Whether the cache of a twin namespace's Events takes in `event` (as kept): one about
        an object vk reflects, within the bounds above. One it holds already stays."""
        if involved_remote_name(event) is None:
            return False
        if cached.get(object_key(event)) is not None:
            return True
        if len(cached) >= MAX_EVENTS_PER_NAMESPACE:
            refusal = f"the provider holds more than {MAX_EVENTS_PER_NAMESPACE} Events there"
        elif len(cached.by_index(_INVOLVED_INDEX, involved_object_key(event))) >= (
            MAX_EVENTS_PER_OBJECT
        ):
            refusal = f"the provider made more than {MAX_EVENTS_PER_OBJECT} Events about one object"
        else:
            return True
        self._say_refused(event["metadata"].get("namespace") or "", refusal)
        return False

    def _say_refused(self, remote_namespace: str, refusal: str) -> None:
        """Once per twin namespace and reason in a process's life: a Warning Event on the
        virtual node (the provider is the one to blame, not a pod) and a log line."""
        if (remote_namespace, refusal) in self._refusals_said:
            return
        self._refusals_said.add((remote_namespace, refusal))
        message = f"Events of {remote_namespace} not copied home: {refusal}"
        log.warning("provider events refused", namespace=remote_namespace, refusal=refusal)
        node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": self.node_name}}
        self._saying.start(self.events.record(node, WARNING, "ProviderEventsRefused", message))

    def keys_of(self, state: NamespaceReflection, side: int, obj: JSON) -> list[str]:
        return [f"{state.local_namespace}/{obj['metadata']['name']}"]

    def on_event(self, state: NamespaceReflection, side: int, event: str, obj: JSON) -> None:
        if side == LOCAL and self.recent.observe(self.keys_of(state, side, obj)[0], event, obj):
            return  # our own write coming back
        super().on_event(state, side, event, obj)

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        assert namespace is not None
        state = self.active(namespace)
        if state is None:
            return Result()
        if not self.is_synced(state):
            return Result()  # enqueued again once it is
        local_events, remote_events = state.informers[LOCAL], state.informers[REMOTE]
        remote = remote_events.store.get(f"{state.remote_namespace}/{name}")
        local = self.recent.current(key, local_events.store.get(key))
        if remote is None or not should_reflect(remote, self.policy):
            if local is not None:
                with contextlib.suppress(NotFound):
                    await self.home.delete(
                        resource_path("v1", "events", namespace=namespace, name=name)
                    )
                self.recent.deleted(key, local)
            return Result()
        involved = await self._local_object(state, remote)
        if involved is None:
            return Result()  # about nothing reflected from here
        desired = forge_local_event(
            remote,
            local_namespace=namespace,
            local_involved=involved,
            local_cluster_id=self.home_cluster_id,
            remote_cluster_id=self.remote_cluster_id,
        )
        writing = local is None or event_needs_update(desired, local)
        about = involved["metadata"].get("uid") or object_key(involved)
        if writing and (wait := self.pace[about].take()) > 0:
            return Result(requeue_after=wait)  # written then, as the provider has it then
        if local is None:
            with contextlib.suppress(AlreadyExists):  # someone else's Event of that name
                self.recent.wrote(
                    key,
                    await self.home.create(
                        resource_path("v1", "events", namespace=namespace), desired
                    ),
                )
                REFLECTION_ITEMS.labels(self.name, "created").inc()
        elif event_needs_update(desired, local):
            patched = await self.home.merge_patch(
                resource_path("v1", "events", namespace=namespace, name=name),
                {
                    field: desired.get(field)
                    for field in ("count", "lastTimestamp", "message", "type", "metadata")
                },
            )
            self.recent.wrote(key, patched)
            REFLECTION_ITEMS.labels(self.name, "updated").inc()
        return Result()

    async def _local_object(self, state: NamespaceReflection, remote_event: JSON) -> JSON | None:
        """The local object a remote Event is about, or None: a kind not reflected, a remote
        object that vk did not reflect (a pod of the provider's own with the name of one of
        ours), or no such object at home."""
        reference = remote_event.get("involvedObject") or {}
        local_name = involved_local_name(remote_event, self.home_cluster_id)
        api = _API.get(reference.get("kind", ""))
        if local_name is None or api is None:
            return None
        remote_uid = reference.get("uid") or ""
        if remote_uid in self._local_objects:
            return self._local_objects[remote_uid]
        if reference.get("kind") == "Pod" and self.offloaded_pod is not None:
            pod = self.offloaded_pod(
                state.local_namespace,
                local_name,
                state.remote_namespace,
                str(reference.get("name") or ""),
                remote_uid,
            )
            if pod is not None:
                return {
                    "apiVersion": "v1",
                    "kind": "Pod",
                    "metadata": {
                        "name": local_name,
                        "namespace": state.local_namespace,
                        "uid": pod["metadata"]["uid"],
                    },
                }
        try:
            remote = await state.client.get(
                resource_path(
                    api[0], api[1], namespace=state.remote_namespace, name=reference["name"]
                )
            )
            found = await self.home.get(
                resource_path(api[0], api[1], namespace=state.local_namespace, name=local_name)
            )
        except NotFound:
            return None  # gone on one side: nothing to tell (and nothing to remember)
        local: JSON | None = None
        ours = is_owned_by_us(remote, self.home_cluster_id, self.remote_cluster_id)
        # An Event about an earlier object of that name (another UID) is not about this one.
        if ours and remote_uid in ("", remote["metadata"].get("uid")):
            local = {
                "apiVersion": api[0],
                "kind": reference["kind"],
                "metadata": {
                    "name": local_name,
                    "namespace": state.local_namespace,
                    "uid": found["metadata"]["uid"],
                },
            }
        if remote_uid:
            if len(self._local_objects) >= _LOCAL_OBJECTS_KEPT:
                self._local_objects.pop(next(iter(self._local_objects)))
            self._local_objects[remote_uid] = local
        return local
