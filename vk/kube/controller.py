"""The reconciler contract and the loop that drives it (controller-runtime's, in asyncio).

A reconciler is level-based: `reconcile(key)` looks at the current state of the caches and
makes the world match, whatever event woke it. An exception means "retry with back-off";
`TerminalError` means "do not retry until something changes"; a `Result` may ask to be
called again after a while, and say that the reconcile failed in a way already handled.
"""

from __future__ import annotations

import abc
import asyncio
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

import structlog

from vk.kube.informer import Informer
from vk.kube.workqueue import ShutDown, WorkQueue

log = structlog.get_logger("vk.kube.controller")


@dataclass(frozen=True)
class Result:
    requeue_after: float | None = None
    # A failure the reconciler has handled (said where the user looks, and retried after
    # `requeue_after`, not on the back-off, with no traceback logged): counted as failed.
    failed: bool = False


class TerminalError(Exception):
    """The object cannot be reconciled as it is (bad input): report it, do not retry."""


class Reconciler(abc.ABC):
    """Implement `reconcile`; name the reconciler for its queue, logs and metrics."""

    name: str

    @abc.abstractmethod
    async def reconcile(self, key: str) -> Result:
        """Make the world match the desired state of `key`; idempotent."""


class Controller:
    """Runs `workers` concurrent reconciles off one work queue. Items are keys; the queue
    guarantees a key is never reconciled by two workers at once."""

    def __init__(
        self,
        reconciler: Reconciler,
        *,
        workers: int = 1,
        observe: Callable[[str, bool], None] | None = None,
        group: Callable[[str], Hashable] | None = None,
    ) -> None:
        """`observe(key, succeeded)` is told of every reconcile done (a metric of its own);
        `group(key)`: the group a key is of, the groups served in turn (WorkQueue)."""
        self.reconciler = reconciler
        self.queue: WorkQueue[str] = WorkQueue(reconciler.name, group=group)
        self.workers = workers
        self._observe = observe
        self.ready = asyncio.Event()
        self._log = log.bind(controller=reconciler.name)

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    async def run(self) -> None:
        """Until cancelled; then the queue is shut down and in-flight reconciles finish."""
        tasks = [asyncio.create_task(self._worker()) for _ in range(self.workers)]
        self.ready.set()
        try:
            await asyncio.gather(*tasks)
        finally:
            self.queue.shutdown()
            await asyncio.gather(*tasks, return_exceptions=True)

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            try:
                result = await self.reconciler.reconcile(key)
            except TerminalError as error:
                self._log.warning("cannot reconcile", key=key, error=str(error))
                self.queue.forget(key)
            except asyncio.CancelledError:
                raise
            except Exception as error:
                self._log.warning(
                    "reconcile failed, retrying",
                    key=key,
                    error=str(error),
                    attempt=self.queue.num_requeues(key) + 1,
                    exc_info=error,
                )
                if self._observe is not None:
                    self._observe(key, False)
                self.queue.add_rate_limited(key)
            else:
                if self._observe is not None:
                    self._observe(key, not result.failed)
                self.queue.forget(key)
                if result.requeue_after is not None:
                    self.queue.add_after(key, result.requeue_after)
            finally:
                self.queue.done(key)
            # The event loop's turn between two items: a reconcile answered from the caches
            # awaits nothing, and a queue of such items (ten thousand of them, or one that
            # asks to be looked at again at once) would hold the loop until drained, no watch
            # read and no signal handled meanwhile (a worker never parked in `get` never
            # yields).
            await asyncio.sleep(0)


async def run_with_informers(
    controller: Controller, *informers: Informer, shared: Sequence[Informer] = ()
) -> None:
    """Runs `informers`, then, once every one and every `shared` informer (which another
    controller runs) has its first list, `controller`; until cancelled, when all of `informers`
    stop. Reconciling before the caches are full would take missing objects for deleted
    ones."""
    tasks = [asyncio.create_task(informer.run()) for informer in informers]
    try:
        for informer in (*informers, *shared):
            await informer.synced.wait()
        await controller.run()
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
