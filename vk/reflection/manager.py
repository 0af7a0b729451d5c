"""Starts and stops reflection per offloaded namespace (Liqo's `reflection/manager`).

The NamespaceMap of the provider says which local namespaces are offloaded there and under
which remote names; every reflector is started on each Accepted one and stopped when it goes,
and restarted on all of them when the provider identity changes. Objects a namespace shares
(its ConfigMaps, Services, ...) are reflected by one virtual kubelet per provider: the holder of
the `virtual-kubelet-leader-election` Lease in the tenant namespace, as in Liqo. A virtual
kubelet that becomes the holder goes over every object again; one that dies is replaced once
its Lease expires, or at once when it stops cleanly and releases it.
"""

from __future__ import annotations

import asyncio
import contextlib

import structlog

from vk.kube.client import KubeClient
from vk.kube.informer import Informer
from vk.kube.leaderelection import LeaderElector
from vk.kube.supervision import supervise
from vk.reflection.generic import NamespacedReflector
from vk.reflection.namespacemap import accepted_mappings
from vk.reflection.provider import Provider

log = structlog.get_logger("vk.reflection.manager")

REFLECTION_LEASE = "virtual-kubelet-leader-election"


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
        self.reflectors: list[NamespacedReflector] = []
        self.tenant_namespace = tenant_namespace
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.shared_lease = shared_lease
        self.mappings: dict[str, str] = {}  # local namespace -> remote namespace
        self._client: KubeClient | None = None
        self._elector: LeaderElector | None = None
        self._started = False

    def leading(self) -> bool:
        """Whether this virtual kubelet reflects the objects its provider's namespaces share."""
        if not self.shared_lease:
            return True
        return self._elector is not None and self._elector.is_leader.is_set()

    def add(self, reflector: NamespacedReflector) -> None:
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
        mappings = accepted_mappings(self.namespace_maps.store.objects())
        if client is not self._client:
            for reflector in self.reflectors:
                for local in list(reflector.namespaces):
                    reflector.stop_namespace(local)
            self._client = client
        self.mappings = mappings if client is not None else {}
        for reflector in self.reflectors:
            for local in set(reflector.namespaces) - set(self.mappings):
                reflector.stop_namespace(local)
                log.info("reflection stopped", reflector=reflector.name, namespace=local)
            for local, remote in self.mappings.items():
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
