"""Replication of ResourceSlices and NamespaceMaps from the consumer to its providers (DESIGN §2).

A consumer's object labelled `liqo.io/replication=true` has a twin of the same name in the
provider, in the tenant namespace kept there for this consumer. The consumer's copy is the truth
for `spec`, the provider's for `status`: this controller, as the consumer's control-plane
identity, applies the spec out and copies the status back. A finalizer holds the local object
until its twin is gone, so the provider always learns of a deletion.
"""

from __future__ import annotations

import asyncio
import base64
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import Counter

from vk.api.authentication import ResourceSlice
from vk.api.constants import (
    IDENTITY_CONTROL_PLANE,
    IDENTITY_TYPE_LABEL,
    PROVIDER_STATUS_BURST,
    PROVIDER_STATUS_INTERVAL_SECONDS,
    REMOTE_CLUSTER_ID_LABEL,
    REMOTE_ID_LABEL,
    REPLICATED_LABEL,
    REPLICATION_LABEL,
    control_plane_identity_provider,
    control_plane_secret_name,
    tenant_namespace,
)
from vk.api.jsondata import json_size
from vk.api.offloading import NamespaceMap
from vk.kube.client import (
    JSON,
    ApiError,
    KubeClient,
    NotFound,
    listed_object_path,
    resource_path,
)
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.events import WARNING, EventRecorder
from vk.kube.informer import (
    EventHandler,
    Informer,
    Store,
    object_key,
    shared_informer,
    split_key,
)
from vk.kube.kubeconfig import InvalidKubeconfig, parse_secret_kubeconfig
from vk.kube.supervision import BackgroundTasks
from vk.kube.workqueue import TokenBuckets
from vk.reflection.namespacemap import untrusted_mappings, without_untrusted

log = structlog.get_logger("vk.controllers.replication")

FINALIZER = "crdreplicator.liqo.io/finalizer"
# On each control-plane identity Secret: it outlives the objects replicated through it, which
# need it to let their twins go. Deleted first (a tenant namespace deleted deletes all at once),
# it left them waiting for ever, and the namespace Terminating with them.
IDENTITY_FINALIZER = "vk.io/replication-in-use"
IDENTITIES = "secrets"  # the plural of the identities' keys in this controller's queue
UNTRUSTED_MAPPINGS = Counter(
    "vk_untrusted_mappings_total",
    "NamespaceMap status entries a provider reported Accepted for namespaces this cluster did not "
    "offload there (ignored)",
    ["provider"],
)
RETRY = 2.0
# A twin the provider refuses to store (`is_refusal`) is asked again this often: it may be let
# in once room is made there, but never by asking faster.
REFUSED_RETRY = 30.0
REASON_REFUSED = "ReplicationRefused"
REPLICATOR = "crdreplicator"  # the component its Events are from
# What the provider may make this process hold of our twins there, for each kind: their
# answers and watch lines (a twin is a few KiB: a NamespaceMap of ten thousand namespaces is
# about 1 MiB), how many of them, and their bytes as JSON all together. The provider is not
# trusted, and these caches live in the controller manager every peering shares: a few twins
# of 8 MiB each, of small dicts, took it past its 512 MiB limit (orjson makes up to 24 times a
# body's size in Python objects), crash-looping it for every provider.
TWIN_MAX_BODY_BYTES = 1024 * 1024
TWINS_MAX_OBJECTS = 1000
TWINS_MAX_BYTES = 2 * 1024 * 1024
# A provider that did not answer within the client's timeout is not asked again for this long:
# the workers are shared by every provider, and each request to a frozen one holds a worker for
# that whole timeout, so its keys alone would hold them all. (One that refuses or resets the
# connection fails at once, holding nobody: retried with the queue's back-off, as any error.)
UNANSWERED_PAUSE = 30.0


@dataclass(frozen=True)
class Replicated:
    api_version: str
    plural: str
    kind: str


REPLICATED_KINDS = (
    Replicated(ResourceSlice.group_version(), ResourceSlice.PLURAL, ResourceSlice.KIND),
    Replicated(NamespaceMap.group_version(), NamespaceMap.PLURAL, NamespaceMap.KIND),
)


def is_refusal(error: ApiError) -> bool:
    """Whether the provider refuses to store a twin as it is: its schema (400, 422) or one of
    its admission webhooks (403, said so by the API server) says no. A 403 of its RBAC is no
    refusal: a binding just made may not be seen yet, and is retried at the queue's pace."""
    if error.status in (400, 422):
        return True
    return error.status == 403 and error.message.startswith("admission webhook ")


def provider_of(obj: Mapping[str, Any]) -> str:
    labels = obj["metadata"].get("labels") or {}
    return str(labels.get(REMOTE_ID_LABEL) or labels.get(REMOTE_CLUSTER_ID_LABEL) or "")


def forge_twin(obj: Mapping[str, Any], kind: Replicated, consumer: str) -> JSON:
    """The provider's copy: the spec and labels of ours, marked as a replica of `consumer`'s."""
    labels = {
        **(obj["metadata"].get("labels") or {}),
        REPLICATION_LABEL: "false",
        REPLICATED_LABEL: "true",
        REMOTE_CLUSTER_ID_LABEL: consumer,
    }
    labels.pop(REMOTE_ID_LABEL, None)
    return {
        "apiVersion": kind.api_version,
        "kind": kind.kind,
        "metadata": {
            "name": obj["metadata"]["name"],
            "namespace": tenant_namespace(consumer),
            "labels": labels,
        },
        "spec": obj.get("spec") or {},
    }


def without_empty_maps(value: Any) -> Any:
    """`value` with its empty maps left out, at any depth. Server-side apply reads an empty map
    as null, which the schemas refuse (a NamespaceMap whose last mapping was removed); left
    out, what was there is removed all the same."""
    if not isinstance(value, Mapping):
        return value
    kept = {k: without_empty_maps(v) for k, v in value.items()}
    return {k: v for k, v in kept.items() if v != {}}


def replacement_patch(old: Mapping[str, Any], new: Mapping[str, Any]) -> JSON:
    """A JSON merge patch turning `old` into `new`: keys gone from `new` are set to null (a
    plain merge would keep a mapping the provider has dropped)."""
    patch: JSON = {key: None for key in old if key not in new}
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, Mapping) and isinstance(before, Mapping):
            patch[key] = replacement_patch(before, value)
        else:
            patch[key] = value
    return patch


class TwinBudget:
    """The admission of a provider's twins into a cache (Informer's `admit`): while they come
    to at most `max_bytes` of JSON all together. The size of each twin admitted is remembered,
    so an event costs the encoding of its own object only."""

    def __init__(self, provider: str, plural: str, max_bytes: int = TWINS_MAX_BYTES) -> None:
        self.provider = provider
        self.plural = plural
        self.max_bytes = max_bytes
        self._sizes: dict[str, int] = {}  # key -> bytes of the version admitted last
        self._refusing = False  # said once, until a twin is taken again

    def __call__(self, obj: JSON, cached: Store) -> bool:
        key = object_key(obj)
        # Always measured: a provider may send a new body under the version it sent before.
        size = json_size(obj)
        held = cached.keys()
        total = size
        for other in held:
            if other != key and (other_obj := cached.get(other)) is not None:
                known = self._sizes.get(other)
                total += known if known is not None else json_size(other_obj)
        if len(self._sizes) > 2 * len(held) + 16:  # sizes of twins gone
            still_held = set(held)
            self._sizes = {k: v for k, v in self._sizes.items() if k in still_held}
        if total <= self.max_bytes:
            self._sizes[key] = size
            self._refusing = False
            return True
        self._sizes.pop(key, None)
        if not self._refusing:
            self._refusing = True
            log.warning(
                "a provider's replicas are over their budget: those past it are not read",
                provider=self.provider,
                resource=self.plural,
                twin=key,
                max_bytes=self.max_bytes,
            )
        return False


class ProviderLink:
    """The control-plane identity on one provider, and the informers of our twins there."""

    def __init__(self, provider: str, client: KubeClient, consumer: str) -> None:
        self.provider = provider
        self.client = client
        self.informers = {
            kind.plural: Informer(
                client,
                kind.api_version,
                kind.plural,
                namespace=tenant_namespace(consumer),
                label_selector=f"{REPLICATED_LABEL}=true",
                admit=TwinBudget(provider, kind.plural),
                max_objects=TWINS_MAX_OBJECTS,
            )
            for kind in REPLICATED_KINDS
        }
        self.tasks: list[asyncio.Task[None]] = []
        # Until when the provider is not asked (UNANSWERED_PAUSE), by time.monotonic().
        self.unanswered_until = 0.0

    def start(self) -> None:
        self.tasks = [asyncio.create_task(i.run()) for i in self.informers.values()]

    async def stop(self) -> None:
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        await self.client.close()

    @property
    def synced(self) -> bool:
        return all(i.synced.is_set() for i in self.informers.values())


class Replicator(Reconciler):
    """Keys are `<plural>|<namespace>/<name>` of the consumer's objects."""

    name = "replication"

    def __init__(self, client: KubeClient, consumer: str) -> None:
        self.client = client
        self.consumer = consumer
        self.local = {
            kind.plural: shared_informer(
                client, kind.api_version, kind.plural, label_selector=f"{REPLICATION_LABEL}=true"
            )
            for kind in REPLICATED_KINDS
        }
        self.identities = shared_informer(
            client,
            "v1",
            "secrets",
            label_selector=f"{IDENTITY_TYPE_LABEL}={IDENTITY_CONTROL_PLANE}",
        )
        self.links: dict[str, ProviderLink] = {}
        self._kubeconfigs: dict[str, bytes] = {}
        # Each object's status copied home at the provider's pace, within bounds.
        self.status_pace: TokenBuckets[str] = TokenBuckets(
            1 / PROVIDER_STATUS_INTERVAL_SECONDS, PROVIDER_STATUS_BURST
        )
        self._stopping = BackgroundTasks("provider-links-stopping")
        # Each provider's objects (in its tenant namespace) served in turn.
        self.controller = Controller(
            self, workers=4, group=lambda key: split_key(key.partition("|")[2])[0]
        )
        self.events = EventRecorder(client, REPLICATOR)
        self._not_peered: dict[str, str] = {}  # what was reported, to say it once
        self._untrusted: dict[str, tuple[str, str]] = {}  # likewise, by the map's uid
        self._refused: dict[str, tuple[str, str]] = {}  # likewise, by the object's uid
        self._impostors: set[str] = set()  # uids of Secrets labelled as identities, said once

    async def run(self) -> None:
        for kind in REPLICATED_KINDS:
            self.local[kind.plural].add_handler(self._enqueue_local(kind.plural))
        self.identities.add_handler(self._on_identity)
        try:
            await run_with_informers(self.controller, *self.local.values(), self.identities)
        finally:
            for link in self.links.values():
                await link.stop()

    def _enqueue_local(self, plural: str) -> EventHandler:
        def enqueue(_: str, obj: JSON, __: JSON | None) -> None:
            self.controller.enqueue(f"{plural}|{object_key(obj)}")

        return enqueue

    def _on_identity(self, _: str, secret: JSON, __: JSON | None) -> None:
        self._sync_links()
        self.controller.enqueue(f"{IDENTITIES}|{object_key(secret)}")

    def _enqueue_identities(self, namespace: str) -> None:
        """The identities in `namespace`: one of its replicated objects went, which one being
        deleted may have waited for."""
        for secret in self.identities.store.objects():
            if secret["metadata"].get("namespace") == namespace:
                self.controller.enqueue(f"{IDENTITIES}|{object_key(secret)}")

    def _holds(self, provider: str) -> bool:
        """Whether an object replicated to `provider` still waits for its twin to go there."""
        return any(
            provider_of(obj) == provider and FINALIZER in (obj["metadata"].get("finalizers") or [])
            for informer in self.local.values()
            for obj in informer.store.objects()
            if obj["metadata"].get("namespace") == tenant_namespace(provider)
        )

    async def _reconcile_identity(self, object_ref: str) -> Result:
        """A control-plane identity holds IDENTITY_FINALIZER until it is deleted and nothing
        replicated through it is left."""
        secret = self.identities.store.get(object_ref)
        provider = control_plane_identity_provider(secret) if secret else None
        if secret is None or provider is None:
            return Result()
        path = listed_object_path("v1", "secrets", secret)
        deleting = bool(secret["metadata"].get("deletionTimestamp"))
        if deleting and self._holds(provider):
            return Result()  # looked at again as each of those goes
        await self.client.set_finalizer(path, secret, IDENTITY_FINALIZER, present=not deleting)
        return Result()

    def _enqueue_twin(self, plural: str, provider: str) -> EventHandler:
        def enqueue(_: str, twin: JSON, __: JSON | None) -> None:
            self.controller.enqueue(
                f"{plural}|{tenant_namespace(provider)}/{twin['metadata']['name']}"
            )

        return enqueue

    def _sync_links(self) -> None:
        """One link per provider whose control-plane kubeconfig is there; a changed kubeconfig
        (a renewed certificate) replaces the link."""
        wanted: dict[str, bytes] = {}
        impostors = set()
        for secret in self.identities.store.objects():
            provider = control_plane_identity_provider(secret)
            if provider is None:
                impostors.add(secret["metadata"].get("uid", ""))
                if secret["metadata"].get("uid", "") not in self._impostors:
                    log.warning(
                        "a Secret labelled as a control-plane identity is not one: not used",
                        secret=object_key(secret),
                        only="vk-control-plane-<provider> in liqo-tenant-<provider>",
                    )
            data = (secret.get("data") or {}).get("kubeconfig")
            if provider and data:
                wanted[provider] = base64.b64decode(data)
        self._impostors = impostors
        for provider in list(self.links):
            if wanted.get(provider) != self._kubeconfigs.get(provider):
                link = self.links.pop(provider)
                self._kubeconfigs.pop(provider, None)
                self._stopping.start(link.stop())
        for provider, kubeconfig in wanted.items():
            if provider in self.links:
                continue
            try:
                connection = parse_secret_kubeconfig(kubeconfig)
            except InvalidKubeconfig as error:
                log.warning(
                    "unusable control-plane kubeconfig", provider=provider, error=str(error)
                )
                continue
            link = ProviderLink(
                provider,
                KubeClient(connection, name="provider", max_body=TWIN_MAX_BODY_BYTES),
                self.consumer,
            )
            for plural, informer in link.informers.items():
                # Ours is the same name in the tenant namespace of that provider.
                informer.add_handler(self._enqueue_twin(plural, provider))
            link.start()
            self.links[provider] = link
            self._kubeconfigs[provider] = kubeconfig
        for plural, informer in self.local.items():
            for obj in informer.store.objects():
                self.controller.enqueue(f"{plural}|{object_key(obj)}")

    async def reconcile(self, key: str) -> Result:
        plural, _, object_ref = key.partition("|")
        if plural == IDENTITIES:
            return await self._reconcile_identity(object_ref)
        kind = next(k for k in REPLICATED_KINDS if k.plural == plural)
        namespace, name = split_key(object_ref)
        local = self.local[plural].store.get(object_ref)
        if local is None:
            self._not_peered.pop(key, None)
            self._refused.pop(key, None)
            self._enqueue_identities(namespace or "")
            return Result()
        provider = provider_of(local)
        link = self.links.get(provider)
        if link is None:
            message = (
                f"not peered with cluster {provider}: no control-plane identity for it (Secret "
                f"{control_plane_secret_name(provider)} in {tenant_namespace(provider)}); peer "
                f"with it first (`vkctl peer --remote-kubeconfig <{provider}'s kubeconfig>`)"
            )
            if self._not_peered.get(key) != message:
                self._not_peered[key] = message
                await self.events.record(local, WARNING, "NotPeered", message)
            return Result(requeue_after=RETRY)
        self._not_peered.pop(key, None)
        if not link.synced:
            return Result(requeue_after=RETRY)
        if (pause := link.unanswered_until - time.monotonic()) > 0:
            return Result(requeue_after=pause)
        local_path = resource_path(kind.api_version, plural, namespace=namespace, name=name)
        twin_path = resource_path(
            kind.api_version, plural, namespace=tenant_namespace(self.consumer), name=name
        )
        twin = link.informers[plural].store.get(f"{tenant_namespace(self.consumer)}/{name}")
        if local["metadata"].get("deletionTimestamp"):
            if twin is None or not twin["metadata"].get("deletionTimestamp"):
                # Asked even when the cache has none: one past its budget is not cached.
                try:
                    await link.client.delete(twin_path)
                except NotFound:
                    if twin is None:
                        await self.client.set_finalizer(local_path, local, FINALIZER, present=False)
                        return Result()
                except TimeoutError as error:
                    return self._unanswered(link, error)
            return Result(requeue_after=RETRY)  # until the provider has let it go
        await self.client.set_finalizer(local_path, local, FINALIZER, present=True)
        desired = without_empty_maps(forge_twin(local, kind, self.consumer))
        if (
            twin is None
            or without_empty_maps(twin.get("spec") or {}) != desired.get("spec", {})
            or any(
                (twin["metadata"].get("labels") or {}).get(k) != v
                for k, v in desired["metadata"]["labels"].items()
            )
        ):
            try:
                await link.client.apply(twin_path, desired)
            except TimeoutError as error:
                return self._unanswered(link, error)
            except ApiError as error:
                if not is_refusal(error):
                    raise
                return await self._refused_by(key, local, kind, provider, error)
            self._refused.pop(key, None)
        status = (twin or {}).get("status")
        if status and kind.kind == NamespaceMap.KIND:
            status = await self._trusted_status(key, local, status, provider)
        if status and status != local.get("status"):
            if (wait := self.status_pace[key].take()) > 0:
                return Result(requeue_after=wait)  # copied then, as the provider has it then
            await self.client.merge_patch(
                resource_path(
                    kind.api_version, plural, namespace=namespace, name=name, subresource="status"
                ),
                {"status": replacement_patch(local.get("status") or {}, status)},
            )
        return Result()

    async def _refused_by(
        self, key: str, local: JSON, kind: Replicated, provider: str, error: ApiError
    ) -> Result:
        """The provider will not store the twin as it is: said once on the local object, as
        its answer (`vkctl` reads it there), and asked again in a while."""
        message = f"cluster {provider} refused to store this {kind.kind}: {error.message}"
        said = (local["metadata"].get("uid", ""), message)
        if self._refused.get(key) != said:
            self._refused[key] = said
            log.warning("twin refused", provider=provider, key=key, error=error.message)
            await self.events.record(local, WARNING, REASON_REFUSED, message)
        return Result(requeue_after=REFUSED_RETRY)

    @staticmethod
    def _unanswered(link: ProviderLink, error: Exception) -> Result:
        """The provider did not answer: its keys wait UNANSWERED_PAUSE, asking nothing."""
        if link.unanswered_until < time.monotonic():
            log.warning(
                "the provider did not answer: not asked again for a while",
                provider=link.provider,
                seconds=UNANSWERED_PAUSE,
                error=str(error)[:500] or type(error).__name__,
            )
        link.unanswered_until = time.monotonic() + UNANSWERED_PAUSE
        return Result(requeue_after=UNANSWERED_PAUSE)

    async def _trusted_status(self, key: str, local: JSON, status: JSON, provider: str) -> JSON:
        """The provider's NamespaceMap status without the entries it reports Accepted for
        namespaces this cluster did not offload there: they would have this cluster reflect
        what it never offloaded. Each such report is an Event and counted, once. An entry just
        unoffloaded, which the provider has yet to remove, is none of them."""
        untrusted = untrusted_mappings(local, status)
        if not untrusted:
            self._untrusted.pop(key, None)
            return status
        entries = ", ".join(f"{local} -> {remote}" for local, remote in sorted(untrusted.items()))
        message = (
            f"cluster {provider} reports namespaces Accepted that this cluster did not offload "
            f"there (local -> remote: {entries}): ignored, nothing is reflected for them; the "
            "provider's vk is misbehaving or compromised"
        )
        said = (local["metadata"].get("uid", ""), message)  # a map made again is told again
        if self._untrusted.get(key) != said:
            self._untrusted[key] = said
            UNTRUSTED_MAPPINGS.labels(provider).inc(len(untrusted))
            log.warning(
                "untrusted namespace mappings ignored", provider=provider, entries=untrusted
            )
            await self.events.record(local, WARNING, "UntrustedMapping", message)
        return without_untrusted(local, status)
