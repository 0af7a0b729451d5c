"""A supervised task that fails is restarted, counted and named by /readyz; cancelling it
stops it. Background tasks are held while they run, and their failures logged."""

from __future__ import annotations

import asyncio

import pytest
from structlog.testing import capture_logs

from vk.kube import supervision
from vk.kube.supervision import (
    FAILED,
    MAX_BACKOFF,
    RECENT_SECONDS,
    TASK_RESTARTS,
    BackgroundTasks,
    TaskState,
    next_backoff,
    supervise,
    task_problems,
)


@pytest.fixture(autouse=True)
def quick(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(supervision, "MIN_BACKOFF", 0.001)
    FAILED.clear()


async def test_a_failing_task_is_restarted_counted_and_named() -> None:
    runs = 0
    finished = asyncio.Event()
    before = TASK_RESTARTS.labels("flaky")._value.get()

    async def flaky() -> None:
        nonlocal runs
        runs += 1
        if runs < 3:
            raise KeyError("metadata")
        finished.set()
        await asyncio.Event().wait()

    task = asyncio.create_task(supervise("flaky", flaky))
    await asyncio.wait_for(finished.wait(), 5)
    assert runs == 3
    assert TASK_RESTARTS.labels("flaky")._value.get() == before + 2
    [problem] = task_problems()
    assert problem.startswith("task flaky: KeyError: 'metadata'")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_a_task_that_returns_is_restarted_too() -> None:
    runs = 0
    again = asyncio.Event()

    async def returns() -> None:
        nonlocal runs
        runs += 1
        if runs == 2:
            again.set()
            await asyncio.Event().wait()

    task = asyncio.create_task(supervise("returns", returns))
    await asyncio.wait_for(again.wait(), 5)
    assert "returned" in task_problems()[0]
    task.cancel()


def test_a_failure_is_named_only_while_recent() -> None:
    FAILED["old"] = TaskState("boom", failed_at=100.0)
    assert task_problems(now=100.0 + RECENT_SECONDS - 1) == ["task old: boom (29 s ago)"]
    assert task_problems(now=100.0 + RECENT_SECONDS) == []


def test_back_off_doubles_on_quick_failures_and_resets_after_a_long_run() -> None:
    assert next_backoff(1.0, ran_for=0.1) == 2.0
    assert next_backoff(MAX_BACKOFF, ran_for=0.1) == MAX_BACKOFF
    assert next_backoff(8.0, ran_for=RECENT_SECONDS) == supervision.MIN_BACKOFF


async def test_background_tasks_are_held_while_they_run_and_let_go_when_they_end() -> None:
    tasks = BackgroundTasks("recording")
    go_on = asyncio.Event()
    ran = []

    async def record(n: int) -> None:
        await go_on.wait()
        ran.append(n)

    started = [tasks.start(record(n)) for n in range(3)]
    await asyncio.sleep(0)
    assert len(tasks) == 3
    go_on.set()
    await asyncio.gather(*started)
    await asyncio.sleep(0)  # the done callbacks run in the loop's next turn
    assert sorted(ran) == [0, 1, 2]
    assert len(tasks) == 0


async def test_a_background_tasks_failure_is_logged_with_its_name_when_it_happens() -> None:
    tasks = BackgroundTasks("closing-clients")

    async def fails() -> None:
        raise ConnectionResetError("the provider hung up")

    async def succeeds() -> None:
        return None

    with capture_logs() as logs:
        for task in (tasks.start(fails()), tasks.start(succeeds())):
            await asyncio.wait([task])
        await asyncio.sleep(0)
    [failure] = logs
    assert failure["event"] == "background task failed"
    assert failure["log_level"] == "error"
    assert failure["tasks"] == "closing-clients"
    assert failure["error"] == "ConnectionResetError: the provider hung up"
    assert len(tasks) == 0


async def test_cancelling_background_tasks_stops_them_and_logs_no_failure() -> None:
    tasks = BackgroundTasks("connections")

    async def serve() -> None:
        await asyncio.Event().wait()

    serving = tasks.start(serve())
    await asyncio.sleep(0)
    with capture_logs() as logs:
        tasks.cancel()
        await asyncio.wait([serving])
        await asyncio.sleep(0)
    assert serving.cancelled()
    assert logs == []
    assert len(tasks) == 0
