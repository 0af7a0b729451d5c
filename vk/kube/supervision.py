"""Tasks that do not die silently: `supervise` runs a long-running one for ever, restarting it
after an unexpected exception (logged with its traceback, counted in `vk_task_restarts_total`)
with back-off, and `task_problems` names, for /readyz, those that failed lately;
`BackgroundTasks` holds the short ones started and not awaited, and logs their failures.

What each task expects (a provider away, a 409) it handles itself: what reaches the
supervisor is a bug, or a failure nobody foresaw. Restarting the task (and not the process)
keeps the rest of the process serving meanwhile; the process still exits if the task is
cancelled.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import structlog
from prometheus_client import Counter

log = structlog.get_logger("vk.kube.supervision")

TASK_RESTARTS = Counter(
    "vk_task_restarts_total",
    "Long-running tasks (informers, by resource; loops, by name) restarted after an "
    "unexpected failure",
    ["task"],
)
MIN_BACKOFF, MAX_BACKOFF = 0.5, 30.0
# A task that failed less than this long ago is named by /readyz; one that has run this long
# since its restart has its back-off reset.
RECENT_SECONDS = 30.0


@dataclass
class TaskState:
    problem: str
    failed_at: float


# name -> what last made it fail, for the tasks that failed in this process.
FAILED: dict[str, TaskState] = {}


def task_problems(now: float | None = None) -> list[str]:
    """The supervised tasks that failed in the last RECENT_SECONDS, and why (sorted)."""
    now = time.monotonic() if now is None else now
    return sorted(
        f"task {name}: {state.problem} ({now - state.failed_at:.0f} s ago)"
        for name, state in FAILED.items()
        if now - state.failed_at < RECENT_SECONDS
    )


def next_backoff(backoff: float, ran_for: float) -> float:
    """The wait before the next restart: doubled after a quick failure (MIN_BACKOFF after the
    first), from the start again after a run of RECENT_SECONDS or more."""
    if ran_for >= RECENT_SECONDS:
        return MIN_BACKOFF
    return min(backoff * 2, MAX_BACKOFF)


async def supervise(name: str, run: Callable[[], Awaitable[None]]) -> None:
    """Runs `run()` until cancelled, restarting it whenever it raises or returns."""
    backoff = MIN_BACKOFF / 2
    while True:
        started = time.monotonic()
        try:
            await run()
            problem = "returned"
        except asyncio.CancelledError:
            raise
        except Exception as error:
            problem = f"{type(error).__name__}: {error}"
        backoff = next_backoff(backoff, time.monotonic() - started)
        log.error(
            "task failed unexpectedly, restarting it",
            task=name,
            error=problem,
            retry_in=backoff,
            exc_info=problem != "returned",
        )
        TASK_RESTARTS.labels(name).inc()
        FAILED[name] = TaskState(problem, time.monotonic())
        await asyncio.sleep(backoff)


class BackgroundTasks:
    """Tasks started and not awaited (a connection served, a client closed later, an Event
    recorded): held until they end, since the event loop keeps only weak references to its
    tasks and would let one be collected mid-run; a failure logged when it happens, with
    `name` (asyncio would say it only once the task is collected, if ever)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._tasks: set[asyncio.Task[None]] = set()

    def __len__(self) -> int:
        return len(self._tasks)

    def start(self, coroutine: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._ended)
        return task

    def cancel(self) -> None:
        """Cancels those still running (a server stopping)."""
        for task in self._tasks:
            task.cancel()

    def _ended(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if task.cancelled():
            return
        error = task.exception()
        if error is not None:
            log.error(
                "background task failed",
                tasks=self.name,
                error=f"{type(error).__name__}: {error}",
                exc_info=error,
            )
