"""Active/passive high availability through a coordination.k8s.io Lease, as client-go does it.

Expiry is judged on this process's own clock from when it last saw the Lease record change,
never from the timestamps written in it, so clock skew between holders cannot hand the lease
to two of them. Updates carry the resourceVersion read, so of two candidates only one wins.
On a clean stop the holder releases the Lease, and a standby takes over at once instead of
after the lease duration.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import signal
import time
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

import structlog

from vk.api.timestamps import kube_micro_time
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

# A release that loses to a renewal of its own holder, sent just before, reads the Lease again
# this many times at most.
RELEASE_ATTEMPTS = 3


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
        "acquireTime": kube_micro_time(now) if holder_changes else previous.get("acquireTime"),
        "renewTime": kube_micro_time(now),
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
        self._released = False  # given up for good (`release`): no more campaigning
        self._log = log.bind(lease=f"{namespace}/{name}", identity=identity)

    async def run(self) -> None:
        last_renewed = time.monotonic()
        while not self._released:
            held = await self._try_acquire_or_renew()
            if self._released:
                return  # given up while that round was on its way: it does not count
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
        except (TimeoutError, ApiError, OSError) as error:
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
        except (TimeoutError, ApiError, OSError) as error:
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
        except (TimeoutError, ApiError, OSError) as error:
            self._log.warning("cannot create the lease", error=str(error))
            return False
        self._observed, self._observed_at = created.get("spec", {}), time.monotonic()
        return True

    async def release(self) -> None:
        """Gives the Lease up (on SIGTERM) so a standby takes over without waiting it out; the
        elector campaigns no more, even if its `run` goes on (it would take the Lease again
        before the standby could)."""
        self._released = True
        if not self.is_leader.is_set():
            return
        self.is_leader.clear()
        for _ in range(RELEASE_ATTEMPTS):
            try:
                lease = await self.client.get(self.path)
                if lease.get("spec", {}).get("holderIdentity") != self.identity:
                    return
                now = kube_micro_time(datetime.datetime.now(datetime.UTC))
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
                return
            except Conflict:
                continue  # a renewal of ours, sent before, landed first: read it again
            except (TimeoutError, ApiError, OSError) as error:
                self._log.warning("cannot release the lease", error=str(error))
                return
        self._log.warning("cannot release the lease: it keeps changing")


async def _first(*awaitables: Coroutine[Any, Any, Any] | asyncio.Task[Any]) -> int:
    """Waits for the first of `awaitables` to finish; returns its index, cancels the others
    (tasks passed in are left running)."""
    tasks = [a if isinstance(a, asyncio.Task) else asyncio.ensure_future(a) for a in awaitables]
    done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    for task, given in zip(tasks, awaitables, strict=True):
        if task not in done and not isinstance(given, asyncio.Task):
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    return next(i for i, task in enumerate(tasks) if task in done)


async def run_while_leading(
    elector: LeaderElector,
    work: Callable[[], Coroutine[Any, Any, None]],
    *,
    background: Sequence[Coroutine[Any, Any, None]] = (),
) -> int:
    """The life of a leader-elected daemon: `background` (metrics, health) runs throughout;
    `work` starts once the Lease is held. Returns 0 on SIGTERM/SIGINT, 1 when the Lease is
    lost (a fresh replica should take over); a crash of `work` is raised. The Lease is released
    on the way out, so a standby takes over at once."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    running = [asyncio.create_task(c) for c in background]
    running.append(asyncio.create_task(elector.run(), name="leader-election"))
    elector._log.info("waiting for the lease")
    working: asyncio.Task[None] | None = None
    try:
        if await _first(elector.is_leader.wait(), stop.wait()) != 0:
            return 0
        elector._log.info("leading: starting work")
        working = asyncio.create_task(work(), name="work")
        outcome = await _first(stop.wait(), elector.lost.wait(), working)
        if outcome == 1:
            elector._log.error("lost the lease: exiting so that a fresh replica takes over")
            return 1
        if outcome == 2:
            working.result()  # a crash in the work surfaces here
        return 0
    finally:
        everything = [*running, *([working] if working else [])]
        for task in everything:
            task.cancel()
        await asyncio.gather(*everything, return_exceptions=True)
        await elector.release()
