"""bench/probe.py's `stages` probe: each stage's CPU is its own steps', counted once a run,
and the probe is wired into the controllers it times; and how bench/offload.py sums a profile."""

from __future__ import annotations

import asyncio
import time

import pytest

from bench import offload
from bench.probe import OnCpuOf, StageTimes, instrument_stages
from vk.kube import client, controller, informer, transport
from vk.kube.controller import Controller, Reconciler, Result


def burn(seconds: float) -> None:
    """Spends `seconds` of this thread's CPU."""
    until = time.thread_time() + seconds
    while time.thread_time() < until:
        pass


async def two_steps_and_a_wait() -> str:
    burn(0.02)
    time.sleep(0.15)  # noqa: ASYNC251  # in a step, but off the CPU: the thread waits
    await asyncio.sleep(0.3)  # neither this wait nor what runs meanwhile is the coroutine's
    burn(0.02)
    return "done"


async def test_a_coroutine_counts_the_cpu_of_its_steps_once_it_ends() -> None:
    stages = StageTimes()
    other = asyncio.create_task(asyncio.to_thread(burn, 0.2))  # busy meanwhile, not its CPU
    started = time.monotonic()
    assert await OnCpuOf(two_steps_and_a_wait(), stages, "work") == "done"
    await other
    runs, seconds = stages.totals["work"]
    assert time.monotonic() - started >= 0.45
    assert runs == 1
    assert 0.04 <= seconds < 0.12


async def test_a_coroutine_that_fails_is_counted_and_its_error_raised() -> None:
    stages = StageTimes()

    async def fails() -> None:
        burn(0.01)
        await asyncio.sleep(0)
        raise ValueError("no")

    with pytest.raises(ValueError, match="no"):
        await OnCpuOf(fails(), stages, "failing")
    assert stages.totals["failing"][0] == 1
    assert stages.totals["failing"][1] >= 0.01


async def test_a_cancelled_coroutine_is_counted_and_cancelled() -> None:
    stages = StageTimes()
    cleaned_up = []

    async def waits() -> None:
        try:
            await asyncio.sleep(10)
        finally:
            cleaned_up.append(True)

    async def awaits_it() -> None:
        await OnCpuOf(waits(), stages, "cancelled")

    task = asyncio.create_task(awaits_it())
    await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cleaned_up == [True]
    assert stages.totals["cancelled"][0] == 1


class Counting(Reconciler):
    name = "counting"

    def __init__(self) -> None:
        self.keys: list[str] = []

    async def reconcile(self, key: str) -> Result:
        burn(0.01)
        self.keys.append(key)
        return Result()


async def test_instrumented_controllers_time_each_reconcile(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # What the probe replaces, put back after the test: the probe patches for good.
    monkeypatch.setattr(controller.Controller, "__init__", controller.Controller.__init__)
    monkeypatch.setattr(informer.Informer, "_kept", informer.Informer._kept)
    monkeypatch.setattr(informer.Informer, "_take", informer.Informer._take)
    monkeypatch.setattr(client, "parse_watch_event", client.parse_watch_event)
    monkeypatch.setattr(transport._Connection, "data_received", transport._Connection.data_received)
    stages = StageTimes()
    instrument_stages(stages)
    reconciler = Counting()
    running = Controller(reconciler)
    running.enqueue("a")
    running.enqueue("b")
    task = asyncio.create_task(running.run())
    while len(reconciler.keys) < 2:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    runs, seconds = stages.totals["reconcile: counting"]
    assert runs == 2
    assert seconds >= 0.02
    event = b'{"type": "ADDED", "object": {"metadata": {"name": "a"}}}'
    assert client.parse_watch_event(event)["type"] == "ADDED"
    assert stages.totals["event decoded"][0] == 1


def test_a_profile_is_summed_by_where_its_functions_are() -> None:
    # Named as bench/probe.py names them: below vk/, below site-packages/, or whole paths.
    phase = {
        "kube/compaction.py:82(_share_within)": [38, 0.8, 1.4],
        "reflection/forge/pods.py:377(shadow_pod_as_read)": [3, 0.2, 1.0],
        "~:0(<orjson.loads>)": [23, 0.7, 0.7],
        "/usr/lib/python3.11/asyncio/events.py:78(_run)": [90, 0.3, 6.0],
        "prometheus_client/metrics.py:138(labels)": [8, 0.1, 0.2],
    }
    assert offload.own_cpu_by_package(phase) == pytest.approx(
        {"vk": 1.0, "built-ins (C)": 0.7, "standard library": 0.3, "prometheus_client": 0.1}
    )
