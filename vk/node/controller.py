"""Keeps the virtual node's Node registered, labelled, tainted and reporting, and its Lease
renewed, for as long as the provider answers.

Level-based: every change of the VirtualNode or the Node, and every change in the provider's
reachability, leads to one `sync` that compares the Node as it is (from the informer) with the
Node as it should be, and writes only the difference. While the provider does not answer
`/livez`, neither the Lease nor the status is renewed, so kube-controller-manager marks the Node
NotReady as it would a silent kubelet; when it answers again, the next sync reports Ready.

The Node's labels are the kubelet's, but a label someone else set on it over one of ours (an
administrator's `kubectl label node`, say, marking a provider's node untrusted) is theirs from
then on, as on a kubelet's node: not put back, until they remove it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog
from prometheus_client import Gauge

from vk.kube.client import FIELD_MANAGER, JSON, ApiError, Conflict, KubeClient, resource_path
from vk.kube.events import NORMAL, WARNING, EventRecorder
from vk.kube.informer import Informer
from vk.kube.supervision import supervise
from vk.node.forge import (
    forge_node_lease,
    forge_node_metadata,
    forge_node_status,
    forge_taints_patch,
    keys_set_by_others,
    node_capacity,
    status_differs,
)

# While the provider is unreachable, how often it is pinged.
RECOVERY_PING = 1.0

log = structlog.get_logger("vk.node.controller")

PROVIDER_REACHABLE = Gauge(
    "vk_node_provider_reachable",
    "1 while the provider's API server answers the virtual kubelet's ping, else 0",
    ["node"],
)


@dataclass(frozen=True)
class NodeOptions:
    node_name: str
    node_ip: str
    kubelet_port: int
    remote_cluster_id: str
    kubelet_version: str
    lease_duration: int = 40
    ping_interval: float = 10.0
    ping_timeout: float = 1.0
    status_interval: float = 60.0  # a full status at least this often, as the kubelet does
    extra_labels: dict[str, str] = field(default_factory=dict)
    extra_annotations: dict[str, str] = field(default_factory=dict)
    declared_features: tuple[str, ...] = ()


class NodeController:
    def __init__(
        self,
        home: KubeClient,
        options: NodeOptions,
        *,
        virtual_nodes: Informer,
        virtual_node_key: str,
        ping: Callable[[float], Awaitable[str | None]],
        events: EventRecorder,
        identity_problem: Callable[[], str | None] = lambda: None,
    ) -> None:
        self.home = home
        self.options = options
        self.virtual_nodes = virtual_nodes
        self.virtual_node_key = virtual_node_key
        self.nodes = Informer(
            home, "v1", "nodes", field_selector=f"metadata.name={options.node_name}"
        )
        self.ping = ping
        self.events = events
        # Why the provider identity cannot be used (its kubeconfig Secret missing, garbage, or
        # asking to run a command): not a blip that a lapsing Lease should tell, but a setting
        # to fix, said at once in the Node's Ready condition while the Lease is renewed, as a
        # kubelet whose runtime is broken does.
        self.identity_problem = identity_problem
        self.provider_problem: str | None = "not pinged yet"
        self.node_path = resource_path("v1", "nodes", name=options.node_name)
        self._dirty = asyncio.Event()
        self._node_exists = asyncio.Event()  # the heartbeat starts as soon as there is a Node
        self._node_uid = ""  # the Lease's owner: the Node as last written or seen
        self._renew_now = asyncio.Event()  # e.g. the provider answers again: do not wait 10 s
        self._applied_metadata: JSON | None = None
        self._yielded: frozenset[str] = frozenset()  # the Node's labels others took over
        self._last_status_write = 0.0
        self._reported: dict[str, str] = {}
        self._on_provider_back: list[Callable[[], Any]] = []
        self._log = log.bind(node=options.node_name)

    @property
    def provider_ready(self) -> bool:
        return self.provider_problem is None

    def trigger(self, *_: Any) -> None:
        self._dirty.set()

    def on_provider_back(self, listener: Callable[[], Any]) -> None:
        """`listener` runs each time the provider answers again after it did not."""
        self._on_provider_back.append(listener)

    async def run(self) -> None:
        self.virtual_nodes.add_handler(self.trigger)
        self.nodes.add_handler(self.trigger)
        await asyncio.gather(
            self.nodes.run(),
            supervise("node-status", self._sync_loop),
            supervise("provider-ping", self._ping_loop),
            supervise("node-lease", self._lease_loop),
        )

    # -- loops -------------------------------------------------------------------------

    async def _sync_loop(self) -> None:
        await self.nodes.synced.wait()
        await self.virtual_nodes.synced.wait()
        backoff = 0.5
        while True:
            with contextlib.suppress(TimeoutError):  # no change: still refresh the status
                await asyncio.wait_for(self._dirty.wait(), self.options.status_interval)
            self._dirty.clear()
            try:
                await self.sync()
                backoff = 0.5
            except (ApiError, OSError, TimeoutError) as error:
                self._log.warning("node sync failed, retrying", error=str(error), retry_in=backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 30)
                self._dirty.set()

    async def _ping_loop(self) -> None:
        # The Events are on the VirtualNode: a problem found before the VirtualNode is in the
        # cache would be noted as told and never said.
        await self.virtual_nodes.synced.wait()
        while True:
            problem = await self.ping(self.options.ping_timeout)
            if problem != self.provider_problem:
                if problem is None:
                    self._log.info("provider reachable")
                    for listener in self._on_provider_back:
                        listener()
                    await self._report(
                        NORMAL,
                        "ProviderReachable",
                        "The provider cluster answers again",
                        "provider",
                    )
                else:
                    self._log.warning("provider unreachable", error=problem)
                    await self._report(
                        WARNING,
                        "ProviderUnreachable",
                        f"{problem}; the node will go NotReady",
                        "provider",
                    )
                self.provider_problem = problem
                PROVIDER_REACHABLE.labels(self.options.node_name).set(0 if problem else 1)
                self.trigger()
                self._renew_now.set()
            # An unreachable provider is asked again soon: the node is Ready again, and what
            # waited for it offloaded, within seconds of its return, not a ping interval later.
            interval = self.options.ping_interval
            await asyncio.sleep(interval if problem is None else min(interval, RECOVERY_PING))

    async def _lease_loop(self) -> None:
        interval = self.options.lease_duration * 0.25  # the kubelet renews at a quarter
        await self._node_exists.wait()
        path = resource_path(
            "coordination.k8s.io/v1",
            "leases",
            namespace="kube-node-lease",
            name=self.options.node_name,
        )
        while True:
            if self.provider_ready or self.identity_problem() is not None:
                lease = forge_node_lease(
                    self.options.node_name,
                    self._node_uid,
                    self.options.lease_duration,
                    datetime.datetime.now(datetime.UTC),
                )
                try:
                    await self.home.apply(path, lease)
                except (ApiError, OSError, TimeoutError) as error:
                    self._log.warning("cannot renew the node lease", error=str(error))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._renew_now.wait(), interval)
            self._renew_now.clear()

    # -- the level-based sync ------------------------------------------------------------

    async def sync(self) -> None:
        virtual_node = self.virtual_nodes.store.get(self.virtual_node_key)
        if virtual_node is None:
            self._log.warning("VirtualNode not found", virtual_node=self.virtual_node_key)
            return
        spec = virtual_node.get("spec") or {}
        if spec.get("createNode") is False:
            return
        capacity, invalid = node_capacity((spec.get("resourceQuota") or {}).get("hard") or {})
        await self._report_problems(
            "InvalidResourceQuota",
            f"spec.resourceQuota.hard offers what a Node cannot: {'; '.join(invalid)}; the node "
            "leaves it out",
            "quota",
            invalid,
        )
        node = self.nodes.store.get(self.options.node_name)
        metadata, left_out = self._forge_metadata(spec)
        if node is not None and _changed_by_others(node, metadata, self._yielded):
            # Who changed it tells whether to put it back: the cache keeps no managedFields.
            node = await self.home.get(self.node_path)
            self._yielded = frozenset(
                keys_set_by_others(node, ("metadata", "labels"), FIELD_MANAGER)
            )
            metadata, left_out = self._forge_metadata(spec)
        await self._report_problems(
            "InvalidNodeLabels",
            f"labels the API server would refuse: {'; '.join(left_out)}; the node leaves them out",
            "labels",
            left_out,
        )
        if node is None or metadata != self._applied_metadata or _missing(node, metadata):
            node = await self.home.apply(self.node_path, metadata)
            self._applied_metadata = metadata
            if node is not None:
                self._log.info("node registered")
        self._node_uid = node["metadata"]["uid"]
        self._node_exists.set()
        taints = forge_taints_patch(node, spec)
        if taints is not None:
            try:
                node = await self.home.merge_patch(self.node_path, taints)
            except Conflict:
                self.trigger()  # someone else changed the Node meanwhile: look again
                return
        identity_problem = self.identity_problem()
        if not self.provider_ready and identity_problem is None:
            return  # unreachable: the Lease lapses and the node controller says so
        desired = forge_node_status(
            capacity,
            node_ip=self.options.node_ip,
            kubelet_port=self.options.kubelet_port,
            kubelet_version=self.options.kubelet_version,
            now=datetime.datetime.now(datetime.UTC),
            previous_conditions=node.get("status", {}).get("conditions", []),
            declared_features=self.options.declared_features,
            not_ready=None
            if identity_problem is None
            else f"The provider identity cannot be used: {identity_problem}",
        )
        desired["metadata"] = {"name": self.options.node_name}
        stale = time.monotonic() - self._last_status_write >= self.options.status_interval
        if status_differs(node, desired) or stale:
            await self.home.apply(f"{self.node_path}/status", desired)
            self._last_status_write = time.monotonic()

    def _forge_metadata(self, spec: JSON) -> tuple[JSON, list[str]]:
        return forge_node_metadata(
            self.options.node_name,
            spec,
            remote_cluster_id=self.options.remote_cluster_id,
            extra_labels=self.options.extra_labels,
            extra_annotations=self.options.extra_annotations,
            yielded=self._yielded,
        )

    async def _report_problems(
        self, reason: str, message: str, topic: str, problems: list[str]
    ) -> None:
        """A Warning once for `problems`; none to say, and the next ones are said again."""
        if problems:
            await self._report(WARNING, reason, message, topic)
        else:
            self._reported.pop(topic, None)

    async def _report(self, event_type: str, reason: str, message: str, topic: str) -> None:
        """An Event on the VirtualNode, once per change of what there is to say on `topic`."""
        if self._reported.get(topic) == message:
            return
        virtual_node = self.virtual_nodes.store.get(self.virtual_node_key)
        if virtual_node is None:  # nothing to put it on: the next call may say it
            return
        self._reported[topic] = message
        await self.events.record(virtual_node, event_type, reason, message)


def _changed_by_others(node: JSON, metadata: JSON, yielded: frozenset[str]) -> bool:
    """Someone set one of our labels to another value, or removed one we left to them."""
    have = node.get("metadata", {}).get("labels") or {}
    ours = metadata["metadata"]["labels"]
    return any(k in have and have[k] != v for k, v in ours.items()) or any(
        k not in have for k in yielded
    )


def _missing(node: JSON, metadata: JSON) -> bool:
    """Someone removed a label or annotation we set: apply again."""
    current = node.get("metadata", {})
    for part in ("labels", "annotations"):
        have = current.get(part) or {}
        if any(have.get(k) != v for k, v in metadata["metadata"][part].items()):
            return True
    return False
