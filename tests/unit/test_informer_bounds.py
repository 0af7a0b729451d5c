"""What a provider's API server, not trusted, can make an informer do: not relist in a hot
loop on 410 Gone, and not hold more objects than its bound."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

import pytest

from vk.kube import informer as informer_module
from vk.kube.client import Gone
from vk.kube.informer import FAILING_FOR_SECONDS, Informer, informer_problems


def configmap(name: str, version: int) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(version)}}


async def run_for(informer: Informer, until: Callable[[], bool], seconds: float) -> None:
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            while not until():
                await asyncio.sleep(0.01)
        await asyncio.sleep(seconds)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


class GoneApiServer:
    """Answers every watch with 410 Gone: after `lasting` seconds for the watches numbered in
    `expiring`, at once for the others; each list at a new resourceVersion."""

    name = "fake"

    def __init__(self, expiring: frozenset[int] = frozenset(), lasting: float = 0.0) -> None:
        self.lists: list[float] = []
        self.watches = 0
        self.expiring, self.lasting = expiring, lasting

    async def current_objects(self, path, params=None, *, timeout_seconds=300):  # type: ignore[no-untyped-def]
        self.lists.append(asyncio.get_running_loop().time())
        yield [configmap("a", len(self.lists))], str(len(self.lists))

    async def watch(self, path, params=None, *, timeout_seconds=300):  # type: ignore[no-untyped-def]
        self.watches += 1
        await asyncio.sleep(self.lasting if self.watches in self.expiring else 0)
        raise Gone(410, "Expired", "too old resource version")
        yield


async def test_a_gone_as_soon_as_listed_is_a_problem_and_backs_off() -> None:
    server = GoneApiServer()
    informer = Informer(server, "v1", "configmaps", namespace="gone-at-once")  # type: ignore[arg-type]
    modified: list[str] = []
    informer.add_handler(lambda event, obj, old: modified.append(event))
    await run_for(informer, lambda: len(server.lists) >= 2, 1.0)
    gaps = [b - a for a, b in zip(server.lists, server.lists[1:], strict=False)]
    assert len(server.lists) <= 4, gaps  # not thousands a second
    assert all(gap >= 0.4 for gap in gaps), gaps
    assert informer.problem is not None
    assert "410 Gone" in informer.problem
    assert informer.failing_since is not None
    informer.failing_since -= FAILING_FOR_SECONDS  # as if it had been so that long
    informer_module.RUNNING.add(informer)  # as if still running: /readyz names it
    try:
        assert [p for p in informer_problems() if "gone-at-once" in p]
    finally:
        informer_module.RUNNING.discard(informer)


async def test_a_gone_after_a_watch_that_lasted_relists_at_once_and_ends_the_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(informer_module, "QUICK_CLOSE_SECONDS", 0.1)
    server = GoneApiServer(expiring=frozenset({2, 3}), lasting=0.2)  # the first watch: Gone at once
    informer = Informer(server, "v1", "configmaps")  # type: ignore[arg-type]
    problems: list[str | None] = []

    async def watch_problems() -> None:
        while True:
            problems.append(informer.problem)
            await asyncio.sleep(0.02)

    watching = asyncio.create_task(watch_problems())
    await run_for(informer, lambda: server.watches >= 3 and len(server.lists) >= 3, 0.0)
    watching.cancel()
    assert any(problem and "410 Gone" in problem for problem in problems)
    # The second watch lasted: the third list came as soon as it was Gone, no back-off.
    assert server.lists[2] - server.lists[1] < 0.2 + 0.15, server.lists
    assert informer.problem is None


class EndlessApiServer:
    """Streams a list that never ends, of new names; then, if it ever watched, new names too."""

    name = "fake"

    def __init__(self, listed: int | None = None) -> None:
        self.listed = listed  # how many objects a list has (None: no end)
        self.lists = 0
        self.closed = 0  # lists closed by the informer before their end

    async def current_objects(self, path, params=None, *, timeout_seconds=300):  # type: ignore[no-untyped-def]
        self.lists += 1
        count = 0
        try:
            while self.listed is None or count < self.listed:
                count += 1
                yield [configmap(f"listed-{count}", count)], ""
                await asyncio.sleep(0)
            yield [], str(count)
        except GeneratorExit:
            self.closed += 1
            raise

    async def watch(self, path, params=None, *, timeout_seconds=300):  # type: ignore[no-untyped-def]
        yield {"type": "MODIFIED", "object": configmap("listed-1", 1000)}
        count = 0
        while True:
            count += 1
            yield {"type": "ADDED", "object": configmap(f"watched-{count}", 1000 + count)}
            await asyncio.sleep(0)


async def test_a_list_that_never_ends_is_not_held_past_the_bound() -> None:
    server = EndlessApiServer()
    informer = Informer(server, "v1", "configmaps", max_objects=100)  # type: ignore[arg-type]
    await run_for(informer, lambda: server.lists >= 1 and informer.problem is not None, 0.2)
    assert len(informer.store) == 0
    assert not informer.synced.is_set()
    assert informer.problem is not None
    assert "more than 100" in informer.problem
    assert server.closed == server.lists  # each list closed, not read on


async def test_watched_objects_of_new_names_are_not_held_past_the_bound() -> None:
    server = EndlessApiServer(listed=5)
    informer = Informer(server, "v1", "configmaps", max_objects=10)  # type: ignore[arg-type]
    await run_for(informer, lambda: informer.problem is not None, 0.2)
    assert len(informer.store) <= 10
    assert informer.problem is not None
    assert "more than 10" in informer.problem
    assert informer.store.get("ns/listed-1") is not None  # held before the bound: kept
    assert server.lists >= 1


async def test_objects_held_still_change_at_the_bound() -> None:
    server = EndlessApiServer(listed=5)
    informer = Informer(server, "v1", "configmaps", max_objects=5)  # type: ignore[arg-type]
    seen: list[tuple[str, str]] = []
    informer.add_handler(lambda event, obj, old: seen.append((event, obj["metadata"]["name"])))
    await run_for(informer, lambda: informer.problem is not None, 0.0)
    assert ("MODIFIED", "listed-1") in seen
    assert not [name for _, name in seen if name.startswith("watched-")]
    assert "more than 5" in (informer.problem or "")


class OnceOverTheBoundApiServer:
    """Lists one object; its first watch brings a second (over a bound of one), its later ones
    are healthy: bookmarks only, for as long as they are read."""

    name = "fake"

    def __init__(self) -> None:
        self.watches = 0

    async def current_objects(self, path, params=None, *, timeout_seconds=300):  # type: ignore[no-untyped-def]
        yield [configmap("a", 1)], "1"

    async def watch(self, path, params=None, *, timeout_seconds=300):  # type: ignore[no-untyped-def]
        self.watches += 1
        if self.watches == 1:
            yield {"type": "ADDED", "object": configmap("b", 2)}
        for version in range(3, 1000):
            await asyncio.sleep(0.05)
            yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": str(version)}}}


async def test_a_watch_that_lasts_within_the_bound_ends_the_problem(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(informer_module, "MIN_BACKOFF", 0.05)
    monkeypatch.setattr(informer_module, "QUICK_CLOSE_SECONDS", 0.2)
    server = OnceOverTheBoundApiServer()
    informer = Informer(server, "v1", "configmaps", max_objects=1)  # type: ignore[arg-type]
    await run_for(informer, lambda: server.watches >= 2, 0.6)
    assert informer.problem is None  # not until the healthy watch ends, minutes later
