"""Active/passive high availability through a coordination.k8s.io Lease, as client-go does it.

Expiry is judged on this process's own clock from when it last saw the Lease record change,
never from the timestamps written in it, so clock skew between holders cannot hand the lease
to two of them. Updates carry the resourceVersion read, so of two candidates only one wins.
On a clean stop the holder releases the Lease, and a standby takes over at once instead of
after the lease duration.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from typing import Any

import aiohttp
import structlog

from vk.kube.client import (
    JSON,
    AlreadyExists,
    ApiError,
    Conflict,
    KubeClient,
    NotFound,
    resource_path,
)

log = structlog.get_logger("vk.kube.leaderelection")


def micro_time(now: datetime.datetime) -> str:
    """metav1.MicroTime's wire format."""
    return now.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def forge_lease_spec(
    identity: str, duration: int, now: datetime.datetime, previous: JSON | None
) -> JSON:
    """The spec of the Lease held by `identity` from `now`, continuing `previous`."""
    previous = previous or {}
    holder_changes = previous.get("holderIdentity") != identity
    transitions = int(previous.get("leaseTransitions", 0)) + (
        1 if previous and holder_changes else 0
    )
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": duration,
        "acquireTime": micro_time(now) if holder_changes else previous.get("acquireTime"),
        "renewTime": micro_time(now),
        "leaseTransitions": transitions,
    }


class LeaderElector:
    """`run()` campaigns for the Lease and keeps it; `is_leader` is set while it is held, and
    `lost` once a held Lease could not be renewed in time (the process should then stop
    working: Liqo's virtual kubelet exits)."""

    def __init__(
        self,
        client: KubeClient,
        *,
        namespace: str,
        name: str,
        identity: str,
        lease_duration: int = 15,
        renew_deadline: float = 10.0,
        retry_period: float = 2.0,
    ) -> None:
        self.client = client
        self.path = resource_path(
            "coordination.k8s.io/v1", "leases", namespace=namespace, name=name
        )
        self.collection = resource_path("coordination.k8s.io/v1", "leases", namespace=namespace)
        self.namespace, self.name, self.identity = namespace, name, identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.is_leader = asyncio.Event()
        self.lost = asyncio.Event()
        self._observed: JSON | None = None  # the Lease's spec as last read
        self._observed_at = 0.0  # monotonic time it last changed
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)

    async def run(self) -> None:
        last_renewed = time.monotonic()
        while True:
            held = await self._try_acquire_or_renew()
            now = time.monotonic()
            if held:
                last_renewed = now
                if not self.is_leader.is_set():
                    self._log.info("became leader")
                    self.is_leader.set()
            elif self.is_leader.is_set() and now - last_renewed > self.renew_deadline:
                self._log.warning("lost leadership: could not renew in time")
                self.is_leader.clear()
                self.lost.set()
                return
            await asyncio.sleep(self.retry_period)

    async def wait_for_leadership(self) -> None:
        await self.is_leader.wait()

    async def _try_acquire_or_renew(self) -> bool:
        try:
            lease = await self.client.get(self.path)
        except NotFound:
            return await self._create()
        except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as error:
            self._log.warning("cannot read the lease", error=str(error))
            return False
        spec = lease.get("spec", {})
        if spec != self._observed:
            self._observed, self._observed_at = spec, time.monotonic()
        holder = spec.get("holderIdentity")
        duration = int(spec.get("leaseDurationSeconds") or self.lease_duration)
        expired = time.monotonic() > self._observed_at + duration
        if holder and holder != self.identity and not expired:
            return False
        now = datetime.datetime.now(datetime.UTC)
        lease["spec"] = forge_lease_spec(self.identity, self.lease_duration, now, spec)
        try:
            updated = await self.client.replace(self.path, lease)
        except (Conflict, NotFound):
            return False  # someone else moved first; look again next round
        except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as error:
            self._log.warning("cannot renew the lease", error=str(error))
            return False
        self._observed, self._observed_at = updated.get("spec", {}), time.monotonic()
        return True

    async def _create(self) -> bool:
        now = datetime.datetime.now(datetime.UTC)
        lease: dict[str, Any] = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": self.name, "namespace": self.namespace},
            "spec": forge_lease_spec(self.identity, self.lease_duration, now, None),
        }
        try:
            created = await self.client.create(self.collection, lease)
        except (AlreadyExists, Conflict):
            return False
        except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as error:
            self._log.warning("cannot create the lease", error=str(error))
            return False
        self._observed, self._observed_at = created.get("spec", {}), time.monotonic()
        return True

    async def release(self) -> None:
        """Gives the Lease up (on SIGTERM) so a standby takes over without waiting it out."""
        if not self.is_leader.is_set():
            return
        self.is_leader.clear()
        try:
            lease = await self.client.get(self.path)
            if lease.get("spec", {}).get("holderIdentity") != self.identity:
                return
            now = micro_time(datetime.datetime.now(datetime.UTC))
            lease["spec"].update(
                {
                    "holderIdentity": None,
                    "leaseDurationSeconds": 1,
                    "renewTime": now,
                    "acquireTime": now,
                }
            )
            await self.client.replace(self.path, lease)
            self._log.info("released the lease")
        except (TimeoutError, ApiError, aiohttp.ClientError, OSError) as error:
            self._log.warning("cannot release the lease", error=str(error))
