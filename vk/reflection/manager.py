"""Starts and stops reflection per offloaded namespace (Liqo's `reflection/manager`).

The NamespaceMap of the provider says which local namespaces are offloaded there and under
which remote names; every reflector (the pods' among them) is started on each Accepted one and
stopped when it goes, and restarted on all of them when the provider identity changes: the
manager alone follows the NamespaceMap and the provider. Objects a namespace shares
(its ConfigMaps, Services, ...) are reflected by one virtual kubelet per provider: the holder of
the `virtual-kubelet-leader-election` Lease in the tenant namespace, as in Liqo. A virtual
kubelet that becomes the holder goes over every object again; one that dies is replaced once
its Lease expires, or at once when it stops cleanly and releases it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Collection
from typing import Protocol

import structlog

from vk.kube.client import KubeClient
from vk.kube.informer import Informer
from vk.kube.leaderelection import LeaderElector
from vk.kube.supervision import supervise
from vk.reflection.namespacemap import accepted_mappings
from vk.reflection.provider import Provider

log = structlog.get_logger("vk.reflection.manager")

REFLECTION_LEASE = "virtual-kubelet-leader-election"


class Reflector(Protocol):
    """What the manager runs: the generic reflectors (vk/reflection/generic.py) and the pod
    reflector (vk/reflection/workload/pods.py)."""

    name: str
    leader_only: bool

    @property
    def namespaces(self) -> Collection[str]:
        """The local namespaces it reflects now."""
        ...

    def start_namespace(self, local: str, remote: str, client: KubeClient) -> None: ...

    def stop_namespace(self, local: str) -> None: ...

    def resync(self) -> None: ...

    def retry_now(self) -> None:
        """The work waiting on a back-off, tried now (the provider is back)."""
        ...

    async def run(self) -> None: ...


class ReflectionManager:
    def __init__(
        self,
        home: KubeClient,
        provider: Provider,
        namespace_maps: Informer,
        *,
        tenant_namespace: str,
        identity: str,
        lease_duration: int = 15,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
        shared_lease: bool = True,
    ) -> None:
        """`shared_lease` False (Liqo's --vk-lease-enabled=false): this virtual kubelet
        reflects the shared objects without campaigning, as every other one of the provider
        then does."""
        self.home = home
        self.provider = provider
        self.namespace_maps = namespace_maps
        self.reflectors: list[Reflector] = []
        self.tenant_namespace = tenant_namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.shared_lease = shared_lease
        # local namespace -> remote namespace, of the Accepted entries of the NamespaceMap,
        # whether the provider identity works now or not.
        self.mappings: dict[str, str] = {}
        self.mapped = asyncio.Event()  # set once `mappings` holds the NamespaceMap's first list
        self._client: KubeClient | None = None
        self._elector: LeaderElector | None = None
        self._started = False

    def leading(self) -> bool:
        """Whether this virtual kubelet reflects the objects its provider's namespaces share."""
        if not self.shared_lease:
            return True
        return self._elector is not None and self._elector.is_leader.is_set()

    def add(self, reflector: Reflector) -> None:
        self.reflectors.append(reflector)

    async def run(self) -> None:
        """Until cancelled; the namespace maps' informer is run by the caller."""
        tasks = [asyncio.create_task(reflector.run()) for reflector in self.reflectors]
        if self.shared_lease and any(reflector.leader_only for reflector in self.reflectors):
            tasks.append(asyncio.create_task(supervise("reflection-lease", self._campaign)))
        try:
            await self.namespace_maps.synced.wait()
            self.namespace_maps.add_handler(lambda *_: self._sync())
            self.provider.on_change(self._sync)
            self._started = True
            self._sync()
            self.mapped.set()
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            if self._elector is not None:
                await self._elector.release()

    def _sync(self) -> None:
        if not self._started:
            return
        client = self.provider.client
        self.mappings = accepted_mappings(self.namespace_maps.store.objects())
        if client is not self._client:
            for reflector in self.reflectors:
                for local in list(reflector.namespaces):
                    reflector.stop_namespace(local)
            self._client = client
        # Without a provider identity that works, nothing is reflected (the node says why).
        reflected = self.mappings if client is not None else {}
        for reflector in self.reflectors:
            for local in set(reflector.namespaces) - set(reflected):
                reflector.stop_namespace(local)
                log.info("reflection stopped", reflector=reflector.name, namespace=local)
            for local, remote in reflected.items():
                assert client is not None
                if local not in reflector.namespaces:
                    log.info(
                        "reflection started",
                        reflector=reflector.name,
                        namespace=local,
                        remote_namespace=remote,
                    )
                reflector.start_namespace(local, remote, client)

    async def _campaign(self) -> None:
        """Campaigns for the reflection Lease for as long as the process works: holding it,
        losing it (an API server too slow to renew it) and winning it again."""
        while True:
            elector = LeaderElector(
                self.home,
                namespace=self.tenant_namespace,
                name=REFLECTION_LEASE,
                identity=self.identity,
                lease_duration=self.lease_duration,
                renew_deadline=self.renew_deadline,
                retry_period=self.retry_period,
            )
            self._elector = elector
            running = asyncio.create_task(elector.run())
            try:
                await elector.is_leader.wait()
                log.info("reflecting the shared objects", lease=REFLECTION_LEASE)
                for reflector in self.reflectors:
                    if reflector.leader_only:
                        reflector.resync()
                await running  # returns when the Lease is lost
                log.warning("no longer reflecting the shared objects: lost the Lease")
            finally:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
