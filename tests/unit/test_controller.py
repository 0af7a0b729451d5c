"""The reconcile loop: every key reconciled, failures retried with back-off, terminal errors
not retried, and requeue-after honoured."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter

import pytest
from prometheus_client import REGISTRY

from vk.kube.client import JSON
from vk.kube.controller import Controller, Reconciler, Result, TerminalError
from vk.kube.informer import (
    FAILING_FOR_SECONDS,
    Informer,
    Store,
    informer_problems,
    informer_scope,
    namespace_index,
    object_key,
    retry_informers_now,
    shared_informer,
)
from vk.kube.observability import MetricsServer
from vk.kube.supervision import TASK_RESTARTS


class Recorder(Reconciler):
    name = "recorder"

    def __init__(self, failures: dict[str, int] | None = None) -> None:
        self.calls: Counter[str] = Counter()
        self.failures = failures or {}

    async def reconcile(self, key: str) -> Result:
        self.calls[key] += 1
        if key == "bad":
            raise TerminalError("bad input")
        if self.calls[key] <= self.failures.get(key, 0):
            raise RuntimeError("transient")
        if key == "again" and self.calls[key] == 1:
            return Result(requeue_after=0.05)
        return Result()


async def run_until(controller: Controller, condition, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    task = asyncio.create_task(controller.run())
    try:
        async with asyncio.timeout(timeout):
            while not condition():
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_each_key_is_reconciled_once_when_it_succeeds() -> None:
    reconciler = Recorder()
    controller = Controller(reconciler, workers=2)
    for key in ("a", "b", "a"):
        controller.enqueue(key)
    await run_until(controller, lambda: reconciler.calls["b"] == 1 and reconciler.calls["a"] == 1)
    await asyncio.sleep(0.05)
    assert reconciler.calls == Counter({"a": 1, "b": 1})


async def test_failures_are_retried_until_they_succeed() -> None:
    reconciler = Recorder(failures={"flaky": 3})
    controller = Controller(reconciler)
    controller.enqueue("flaky")
    await run_until(controller, lambda: reconciler.calls["flaky"] == 4)
    assert controller.queue.num_requeues("flaky") == 0  # forgotten once it succeeded


async def test_terminal_errors_are_not_retried() -> None:
    reconciler = Recorder()
    controller = Controller(reconciler)
    controller.enqueue("bad")
    controller.enqueue("good")
    await run_until(controller, lambda: reconciler.calls["good"] == 1)
    await asyncio.sleep(0.1)
    assert reconciler.calls["bad"] == 1


async def test_requeue_after_calls_again() -> None:
    reconciler = Recorder()
    controller = Controller(reconciler)
    controller.enqueue("again")
    await run_until(controller, lambda: reconciler.calls["again"] == 2)


async def test_a_failure_handled_is_counted_failed_and_called_again_when_it_asked() -> None:
    class Refused(Reconciler):
        name = "refused"

        def __init__(self) -> None:
            self.calls = 0

        async def reconcile(self, key: str) -> Result:
            self.calls += 1
            return Result(requeue_after=0.05, failed=True)

    observed: list[tuple[str, bool]] = []
    reconciler = Refused()
    controller = Controller(reconciler, observe=lambda key, ok: observed.append((key, ok)))
    controller.enqueue("quota-full")
    await run_until(controller, lambda: reconciler.calls == 3)
    assert observed[:2] == [("quota-full", False)] * 2
    assert controller.queue.num_requeues("quota-full") == 0, "not on the back-off"


class Restless(Reconciler):
    """Answers from its caches, awaiting nothing, and asks to be looked at again at once,
    `runs` times."""

    name = "restless"

    def __init__(self, runs: int) -> None:
        self.left = runs
        self.done = 0

    async def reconcile(self, key: str) -> Result:
        self.done += 1
        self.left -= 1
        return Result(requeue_after=0 if self.left > 0 else None)


async def test_a_reconcile_that_awaits_nothing_leaves_the_event_loop_its_turns() -> None:
    """Else a key that asks to be looked at again at once, forever, would hold the loop: no
    watch read, no timer fired, no signal handled (SIGTERM ignored)."""
    reconciler = Restless(runs=10_000)
    controller = Controller(reconciler)
    controller.enqueue("key")
    seen_at: list[int] = []

    async def another_task() -> None:
        await asyncio.sleep(0)
        seen_at.append(reconciler.done)

    running = asyncio.create_task(controller.run())
    other = asyncio.create_task(another_task())
    try:
        async with asyncio.timeout(30):
            await other
        assert seen_at[0] < 10, seen_at  # within a few reconciles, not 10,000
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running


class FlakyApiServer:
    """A collection as an API server serves it, broken on purpose: the first list fails in a
    way nobody foresaw, and each watch ends as soon as it opens."""

    name = "fake"  # the `client` label of its metrics

    def __init__(self) -> None:
        self.lists = 0
        self.watches: list[float] = []

    async def current_objects(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        self.lists += 1
        if self.lists == 1:
            raise KeyError("an unexpected bug")
        yield [{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}}], "1"

    async def watch(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        self.watches.append(asyncio.get_running_loop().time())
        return
        yield


async def test_an_informer_survives_an_unexpected_failure_and_backs_off_refused_watches() -> None:
    server = FlakyApiServer()
    informer = Informer(server, "v1", "configmaps")  # type: ignore[arg-type]
    before = TASK_RESTARTS.labels("informer:configmaps")._value.get()
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(10):
            await informer.synced.wait()
            while len(server.watches) < 3:
                await asyncio.sleep(0.05)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert informer.store.get("ns/a") is not None
    assert TASK_RESTARTS.labels("informer:configmaps")._value.get() == before + 1
    gaps = [b - a for a, b in zip(server.watches, server.watches[1:], strict=False)]
    assert all(gap >= 0.4 for gap in gaps), gaps  # backed off, not a hot loop


MANAGED_FIELDS = ({"manager": "kubectl", "operation": "Update", "fieldsV1": {"f:data": {}}},)


class TalkativeApiServer:
    """A collection whose objects carry managedFields, listed and then watched."""

    name = "fake"  # the `client` label of its metrics

    async def current_objects(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        metadata = {"name": "a", "namespace": "ns", "resourceVersion": "1"}
        yield [{"metadata": {**metadata, "managedFields": MANAGED_FIELDS}}], "1"

    async def watch(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        metadata = {"name": "b", "namespace": "ns", "resourceVersion": "2"}
        metadata["managedFields"] = MANAGED_FIELDS  # type: ignore[assignment]
        yield {"type": "ADDED", "object": {"metadata": metadata}}
        await asyncio.sleep(3600)


async def run_until_it_holds(informer: Informer, count: int) -> None:
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            while len(informer.store) < count:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_an_informer_keeps_no_managed_fields() -> None:
    informer = Informer(TalkativeApiServer(), "v1", "configmaps")  # type: ignore[arg-type]
    await run_until_it_holds(informer, 2)
    assert [o["metadata"].get("managedFields") for o in informer.store.objects()] == [None, None]


async def test_an_informer_counts_the_watch_events_it_takes_in_not_its_list() -> None:
    def added() -> float:
        labels = {"client": "fake", "resource": "configmaps", "type": "ADDED"}
        return REGISTRY.get_sample_value("vk_watch_events_total", labels) or 0.0

    before = added()
    informer = Informer(TalkativeApiServer(), "v1", "configmaps")  # type: ignore[arg-type]
    await run_until_it_holds(informer, 2)
    assert added() - before == 1  # object b came by the watch; a, listed, is no watch event


class DownApiServer:
    """An API server that never answers the list."""

    name = "fake"  # the `client` label of its metrics

    async def current_objects(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        raise OSError("connection refused")
        yield  # an async generator, as list_pages is


async def test_readyz_names_an_informer_failing_for_long() -> None:
    informer = Informer(DownApiServer(), "v1", "secrets", namespace="liqo-tenant-naples")  # type: ignore[arg-type]
    server = MetricsServer("127.0.0.1:0", ready=lambda: True)
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            while informer.failing_since is None:
                await asyncio.sleep(0.01)
        assert (await server._readyz(None)).status == 200  # type: ignore[arg-type]  # a blip
        later = asyncio.get_running_loop().time() + FAILING_FOR_SECONDS
        (problem,) = [p for p in informer_problems(later) if "liqo-tenant-naples" in p]
        assert problem.startswith("/api/v1/namespaces/liqo-tenant-naples/secrets: ")
        assert "connection refused" in problem
        informer.failing_since -= FAILING_FOR_SECONDS  # as if it had been failing that long
        answer = await server._readyz(None)  # type: ignore[arg-type]
        assert answer.status == 503
        assert "liqo-tenant-naples/secrets: connection refused" in (answer.text or "")
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert not [p for p in informer_problems() if "liqo-tenant-naples" in p]  # stopped: gone


class ComesBackApiServer:
    """An API server down for the first lists, then answering."""

    name = "fake"  # the `client` label of its metrics

    def __init__(self) -> None:
        self.up = False
        self.lists = 0

    async def current_objects(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        self.lists += 1
        if not self.up:
            raise OSError("connection refused")
        yield [], "1"

    async def watch(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        await asyncio.Event().wait()
        yield


async def test_informers_of_a_server_back_list_again_at_once_not_after_their_back_off() -> None:
    server, other = ComesBackApiServer(), ComesBackApiServer()
    informer = Informer(server, "v1", "pods")  # type: ignore[arg-type]
    bystander = Informer(other, "v1", "pods")  # type: ignore[arg-type]
    tasks = [asyncio.create_task(i.run()) for i in (informer, bystander)]
    try:
        async with asyncio.timeout(10):
            while server.lists < 4:  # its pause is 4 s by now
                await asyncio.sleep(0.05)
        server.up = other.up = True
        lists = other.lists
        retry_informers_now(server)  # type: ignore[arg-type]
        async with asyncio.timeout(1):
            await informer.synced.wait()
        assert not bystander.synced.is_set()  # another server's: still in its pause
        assert other.lists == lists
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class CountingApiServer:
    """Counts lists and watches; its watches stay open until cancelled."""

    name = "fake"  # the `client` label of its metrics

    def __init__(self) -> None:
        self.lists = 0
        self.watches = 0

    async def current_objects(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        self.lists += 1
        yield [{"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "1"}}], "1"

    async def watch(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        self.watches += 1
        await asyncio.sleep(3600)
        yield {}


async def test_controllers_in_one_scope_share_one_informer_and_its_one_watch() -> None:
    server = CountingApiServer()
    client = server  # what the informers are made with
    with informer_scope():
        first = shared_informer(client, "v1", "pods", namespace="ns")  # type: ignore[arg-type]
        second = shared_informer(client, "v1", "pods", namespace="ns")  # type: ignore[arg-type]
        other = shared_informer(client, "v1", "pods", namespace="elsewhere")  # type: ignore[arg-type]
    outside = shared_informer(client, "v1", "pods", namespace="ns")  # type: ignore[arg-type]
    assert first is second
    assert other is not first
    assert outside is not first

    runs = [asyncio.create_task(informer.run()) for informer in (first, second)]
    async with asyncio.timeout(5):
        await first.synced.wait()
        while server.watches < 1:
            await asyncio.sleep(0.01)
    assert (server.lists, server.watches) == (1, 1)
    runs[0].cancel()  # one user stops: the other still follows the server
    await asyncio.sleep(0.05)
    assert first._following is not None
    assert not first._following.done()
    following = first._following
    runs[1].cancel()  # the last one stops: so does the watch
    await asyncio.gather(*runs, return_exceptions=True)
    assert following.cancelled()
    assert first._following is None


def test_an_index_name_means_one_thing_in_a_shared_informer() -> None:
    client = CountingApiServer()
    with informer_scope():
        informer = shared_informer(client, "v1", "pods", indexers={"ns": namespace_index})  # type: ignore[arg-type]
        informer.store.upsert({"metadata": {"name": "a", "namespace": "x"}})
        again = shared_informer(client, "v1", "pods", indexers={"node": lambda _: ["n"]})  # type: ignore[arg-type]
        assert [o["metadata"]["name"] for o in again.store.by_index("node", "n")] == ["a"]
        with pytest.raises(ValueError, match="defined already"):
            shared_informer(client, "v1", "pods", indexers={"ns": lambda _: []})  # type: ignore[arg-type]


def test_an_index_is_counted_and_its_values_listed_as_objects_come_and_go() -> None:
    def team(obj: JSON) -> list[str]:
        return [obj["metadata"]["labels"]["team"]]

    def pod(name: str, label: str) -> JSON:
        return {"metadata": {"name": name, "namespace": "ns", "labels": {"team": label}}}

    store = Store({"team": team})
    for name, label in (("a", "x"), ("b", "x"), ("c", "y")):
        store.upsert(pod(name, label))
    assert sorted(store.index_values("team")) == ["x", "y"]
    assert (store.count_by_index("team", "x"), store.count_by_index("team", "z")) == (2, 0)
    store.delete("ns/c")
    store.upsert(pod("b", "z"))  # b changes team: no longer counted in x
    assert sorted(store.index_values("team")) == ["x", "z"]
    assert [store.count_by_index("team", value) for value in ("x", "y", "z")] == [1, 0, 1]


def test_a_removed_handler_sees_no_more_changes() -> None:
    informer = Informer(CountingApiServer(), "v1", "pods")  # type: ignore[arg-type]
    seen: list[str] = []

    def handler(event: str, obj: JSON, _: JSON | None) -> None:
        seen.append(obj["metadata"]["name"])
        informer.remove_handler(handler)  # removing itself while being notified

    informer.add_handler(handler)
    informer._notify("ADDED", {"metadata": {"name": "a"}}, None)
    informer._notify("ADDED", {"metadata": {"name": "b"}}, None)
    assert seen == ["a"]


async def test_an_informer_keeps_what_its_users_read_of_each_object() -> None:
    informer = Informer(
        TalkativeApiServer(),  # type: ignore[arg-type]
        "v1",
        "configmaps",
        keep=lambda obj: {"metadata": {"name": obj["metadata"]["name"]}},
    )
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            while len(informer.store) < 2:  # one listed, one watched
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert sorted(informer.store.objects(), key=str) == [
        {"metadata": {"name": "a"}},
        {"metadata": {"name": "b"}},
    ]


class ScriptedApiServer:
    """Lists `listed`, then watches `watched` (each an event), then holds the watch open."""

    name = "fake"

    def __init__(self, listed: list[JSON], watched: list[JSON]) -> None:
        self.listed, self.watched = listed, watched

    async def current_objects(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        yield self.listed, "1"

    async def watch(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        for event in self.watched:
            yield event
        await asyncio.sleep(3600)


def named(name: str, version: str, **fields: str) -> JSON:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": version}, **fields}


async def test_an_informer_holds_only_what_it_admits_and_tells_only_of_that() -> None:
    """An admission sees each object with the cache as it is; an object refused is neither held
    nor heard of, and one held that comes back refused is gone, as if deleted."""
    server = ScriptedApiServer(
        [named("a", "1"), named("b", "1"), named("c", "1", bad="yes")],
        [
            {"type": "ADDED", "object": named("d", "2")},  # over the bound of two
            {"type": "MODIFIED", "object": named("a", "3", bad="yes")},
            {"type": "ADDED", "object": named("e", "4")},  # room again: a is gone
        ],
    )
    judged: list[tuple[str, int]] = []

    def at_most_two_good_ones(obj: JSON, cached: Store) -> bool:
        judged.append((obj["metadata"]["name"], len(cached)))
        held = cached.get(object_key(obj)) is not None
        return "bad" not in obj and (held or len(cached) < 2)

    refused_before = refused_count()
    informer = Informer(server, "v1", "configmaps", admit=at_most_two_good_ones)  # type: ignore[arg-type]
    heard: list[tuple[str, str]] = []
    informer.add_handler(lambda event, obj, _: heard.append((event, obj["metadata"]["name"])))
    task = asyncio.create_task(informer.run())
    try:
        async with asyncio.timeout(5):
            while ("ADDED", "e") not in heard:
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
    assert heard == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a"), ("ADDED", "e")]
    assert sorted(informer.store.keys()) == ["ns/b", "ns/e"]
    assert judged == [("a", 0), ("b", 1), ("c", 2), ("d", 2), ("a", 2), ("e", 1)]
    assert refused_count() - refused_before == 3  # c, d, and a as changed


def refused_count() -> float:
    value = REGISTRY.get_sample_value(
        "vk_informer_refused_total", {"client": "fake", "resource": "configmaps"}
    )
    return value or 0.0


async def test_a_relist_lets_go_of_what_is_gone_before_it_admits_what_is_new() -> None:
    """A bound judged against objects the server no longer holds would refuse what replaced
    them until the next list."""
    informer = Informer(
        ScriptedApiServer([named("c", "5")], []),  # type: ignore[arg-type]
        "v1",
        "configmaps",
        admit=lambda obj, cached: cached.get(object_key(obj)) is not None or len(cached) < 2,
    )
    informer.store.upsert(named("a", "1"))
    informer.store.upsert(named("b", "1"))
    await informer._relist()
    assert informer.store.keys() == ["ns/c"]


async def test_a_relist_judges_each_page_before_it_reads_the_next() -> None:
    """A provider's million Events in a twin namespace, bounded to twenty thousand, were all
    held before the first was judged: a relist judges what it lists as it comes, and holds only
    what it takes."""
    log: list[str] = []

    class PagedApiServer(ScriptedApiServer):
        async def current_objects(
            self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
        ):  # type: ignore[no-untyped-def]
            for page in ("a", "b"), ("c", "d"):
                log.append(f"page {page[0]}{page[1]}")
                yield [named(name, "1") for name in page], "1"

    def at_most_three(obj: JSON, cached: Store) -> bool:
        log.append(f"judged {obj['metadata']['name']} with {len(cached)}")
        return len(cached) < 3

    informer = Informer(PagedApiServer([], []), "v1", "configmaps", admit=at_most_three)  # type: ignore[arg-type]
    informer.store.upsert(named("z", "1"))  # held before, listed no more
    await informer._relist()
    assert log == [
        "page ab",
        "judged a with 0",
        "judged b with 1",
        "page cd",
        "judged c with 2",
        "judged d with 3",
    ]
    assert sorted(informer.store.keys()) == ["ns/a", "ns/b", "ns/c"]


def test_a_shared_informer_keeps_one_thing_of_each_object() -> None:
    def names(obj: JSON) -> JSON:
        return {"metadata": {"name": obj["metadata"]["name"]}}

    client = CountingApiServer()
    with informer_scope():
        informer = shared_informer(client, "v1", "secrets", keep=names)  # type: ignore[arg-type]
        assert shared_informer(client, "v1", "secrets", keep=names) is informer  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="keeps something else"):
            shared_informer(client, "v1", "secrets")  # type: ignore[arg-type]
