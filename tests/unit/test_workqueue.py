"""The work queue's contract (client-go's): dedup, one worker per item, back-off, shutdown."""

from __future__ import annotations

import asyncio

import pytest

from vk.kube.workqueue import (
    MAX_BUCKETS,
    ShutDown,
    TokenBucket,
    TokenBuckets,
    WorkQueue,
    exponential_backoff,
)


async def test_an_item_added_twice_is_handed_out_once() -> None:
    queue: WorkQueue[str] = WorkQueue("dedup")
    queue.add("a")
    queue.add("a")
    queue.add("b")
    assert len(queue) == 2
    assert [await queue.get(), await queue.get()] == ["a", "b"]


async def test_an_item_added_while_processing_waits_until_done() -> None:
    queue: WorkQueue[str] = WorkQueue("processing")
    queue.add("a")
    item = await queue.get()
    queue.add("a")
    assert len(queue) == 0  # not handed to a second worker while the first holds it
    queue.done(item)
    assert len(queue) == 1
    assert await queue.get() == "a"


async def test_get_waits_for_an_add() -> None:
    queue: WorkQueue[str] = WorkQueue("wait")
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    assert not getter.done()
    queue.add("x")
    assert await asyncio.wait_for(getter, 1) == "x"


async def test_add_after_keeps_the_earliest_time() -> None:
    queue: WorkQueue[str] = WorkQueue("delay")
    queue.add_after("a", 10)
    queue.add_after("a", 0.02)
    queue.add_after("a", 5)
    assert len(queue) == 0
    assert await asyncio.wait_for(queue.get(), 1) == "a"


async def test_failures_back_off_exponentially_until_forgotten() -> None:
    queue: WorkQueue[str] = WorkQueue("backoff", base_delay=0.02)
    queue.add("a")
    item = await queue.get()
    waits = []
    for _ in range(3):
        queue.add_rate_limited(item)  # the attempt failed
        queue.done(item)
        started = asyncio.get_running_loop().time()
        item = await asyncio.wait_for(queue.get(), 2)
        waits.append(asyncio.get_running_loop().time() - started)
    assert queue.num_requeues("a") == 3
    assert waits[0] >= 0.018
    assert waits[1] >= 0.038
    assert waits[2] >= 0.078
    queue.forget("a")
    assert queue.num_requeues("a") == 0


async def test_what_backs_off_is_retried_at_once_when_asked() -> None:
    queue: WorkQueue[str] = WorkQueue("outage", base_delay=600.0)  # minutes of back-off
    queue.add("a")
    item = await queue.get()
    queue.add_rate_limited(item)  # the provider is away
    queue.done(item)
    queue.add_after("b", 600.0)
    assert len(queue) == 0
    assert queue.retry_now() == 2  # the provider answers again
    assert sorted([await asyncio.wait_for(queue.get(), 1) for _ in range(2)]) == ["a", "b"]
    assert queue.num_requeues("a") == 0


def test_exponential_backoff_doubles_up_to_the_cap() -> None:
    assert [exponential_backoff(n, 0.005, 1000) for n in range(4)] == [0.005, 0.01, 0.02, 0.04]
    assert exponential_backoff(40, 0.005, 1000) == 1000
    assert exponential_backoff(10_000, 0.005, 1000) == 1000


def test_token_bucket_allows_a_burst_then_paces() -> None:
    bucket = TokenBucket(rate=10, burst=3)
    assert [bucket.reserve() for _ in range(3)] == [0, 0, 0]
    assert bucket.reserve() == pytest.approx(0.1, abs=0.01)
    assert bucket.reserve() == pytest.approx(0.2, abs=0.01)


def test_a_token_taken_is_only_one_there_and_a_refusal_takes_none() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=0.1, burst=2, clock=lambda: now[0])  # one every 10 s
    assert [bucket.take() for _ in range(2)] == [0, 0]
    assert bucket.take() == pytest.approx(10)
    now[0] = 4.0
    assert bucket.take() == pytest.approx(6)  # refused ones took nothing
    now[0] = 10.0
    assert bucket.take() == 0
    assert bucket.take() == pytest.approx(10)
    bucket.resize(1)  # lowered: holds no more than that
    now[0] = 1000.0
    assert [bucket.take(), bucket.take()] == [0, pytest.approx(10)]
    bucket.resize(3)  # raised: the two more are there at once
    assert [bucket.take(), bucket.take(), bucket.take()] == [0, 0, pytest.approx(10)]


def test_buckets_refilled_are_forgotten_and_those_in_use_kept() -> None:
    now = [0.0]
    buckets: TokenBuckets[int] = TokenBuckets(rate=1.0, burst=1, most=4, clock=lambda: now[0])
    for key in range(5):  # the fifth sweeps, and finds the four in use
        assert buckets[key].take() == 0
    assert len(buckets) == 5
    assert buckets[0].take() == pytest.approx(1)  # kept, empty
    for key in range(5, 8):  # no sweep before twice the four it left
        assert buckets[key].take() == 0
    assert len(buckets) == 8
    now[0] = 10.0  # all refilled: the next new key sweeps them all
    assert buckets[8].take() == 0
    assert len(buckets) == 1
    assert buckets[0].wait() == 0  # made again, full


def test_how_long_until_tokens_are_there_takes_none() -> None:
    now = [0.0]
    bucket = TokenBucket(rate=0.1, burst=2, clock=lambda: now[0])
    assert (bucket.wait(), bucket.wait(2)) == (0, 0)
    assert [bucket.take(), bucket.take()] == [0, 0]
    now[0] = 5.0
    assert (bucket.wait(), bucket.wait(2)) == (pytest.approx(5), pytest.approx(15))
    now[0] = 10.0
    assert bucket.wait() == 0
    assert bucket.take() == 0  # what waiting said was there


async def test_shutdown_drains_then_stops_workers() -> None:
    queue: WorkQueue[str] = WorkQueue("shutdown")
    queue.add("last")
    queue.add_after("never", 0.01)
    queue.shutdown()
    queue.add("ignored")
    assert await queue.get() == "last"
    with pytest.raises(ShutDown):
        await queue.get()
    await asyncio.sleep(0.02)
    assert len(queue) == 0


async def test_shutdown_wakes_a_waiting_worker() -> None:
    queue: WorkQueue[str] = WorkQueue("wake")
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    queue.shutdown()
    with pytest.raises(ShutDown):
        await asyncio.wait_for(getter, 1)


async def test_an_item_wakes_one_idle_worker_not_all() -> None:
    # Each wait is a future the loop makes: ten workers idle, ten items one at a time, and
    # each worker waits once (woken all for every item, they would wait 10 + 9 + ... times).
    queue: WorkQueue[str] = WorkQueue("one")
    loop = asyncio.get_running_loop()
    made = 0
    create_future = loop.create_future

    def counting_create_future() -> asyncio.Future[None]:
        nonlocal made
        made += 1
        return create_future()

    loop.create_future = counting_create_future  # type: ignore[method-assign]
    try:
        workers = [asyncio.create_task(queue.get()) for _ in range(10)]
        await asyncio.sleep(0)  # (a sleep of 0 makes no future)
        for index in range(10):
            queue.add(str(index))
            for _ in range(3):
                await asyncio.sleep(0)
    finally:
        del loop.create_future
    taken = sorted(await asyncio.wait_for(asyncio.gather(*workers), 1))
    assert taken == [str(index) for index in range(10)]
    assert made == 10


async def two_idle_workers(queue: WorkQueue[str]) -> tuple[asyncio.Task[str], asyncio.Task[str]]:
    """Two workers waiting in `queue.get()`, the first idle longer."""
    first = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0.01)
    return first, second


async def test_a_worker_woken_then_cancelled_passes_its_item_on() -> None:
    queue: WorkQueue[str] = WorkQueue("woken")
    first, second = await two_idle_workers(queue)
    queue.add("x")  # wakes the first, idle longest
    first.cancel()  # before it ran
    assert await asyncio.wait_for(second, 1) == "x"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_a_cancelled_idle_worker_is_not_woken_for_an_item() -> None:
    queue: WorkQueue[str] = WorkQueue("cancelled")
    first, second = await two_idle_workers(queue)
    first.cancel()
    queue.add("x")  # the first's wait is cancelled but it has not run yet
    assert await asyncio.wait_for(second, 1) == "x"
    with pytest.raises(asyncio.CancelledError):
        await first


async def test_shutdown_wakes_every_waiting_worker() -> None:
    queue: WorkQueue[str] = WorkQueue("wake all")
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0.01)
    queue.shutdown()
    for getter in getters:
        with pytest.raises(ShutDown):
            await asyncio.wait_for(getter, 1)


def tenant(key: str) -> str:
    return key.split("/")[0]


async def test_groups_are_served_in_turn_however_many_items_one_has_queued() -> None:
    """One tenant's thousands of keys on a provider queued first made another's new key wait
    behind all of them (20 s for 5000 at 40 ms each on 10 workers)."""
    queue: WorkQueue[str] = WorkQueue("tenants", group=tenant)
    for i in range(1000):
        queue.add(f"venice/{i}")
    queue.add("florence/new")
    served = [await queue.get() for _ in range(3)]
    assert served == ["venice/0", "florence/new", "venice/1"]
    assert len(queue) == 998
    # Without groups, first in, first out, as before.
    fifo: WorkQueue[str] = WorkQueue("fifo")
    for key in ("venice/0", "venice/1", "florence/new"):
        fifo.add(key)
    assert [await fifo.get() for _ in range(3)] == ["venice/0", "venice/1", "florence/new"]


async def test_an_item_queued_again_when_done_takes_its_groups_turn() -> None:
    queue: WorkQueue[str] = WorkQueue("again", group=tenant)
    queue.add("venice/a")
    item = await queue.get()
    queue.add("venice/a")  # while processing
    queue.add("florence/b")
    queue.done(item)
    assert [await queue.get(), await queue.get()] == ["florence/b", "venice/a"]


async def test_one_groups_failures_do_not_spend_anothers_retry_budget() -> None:
    """2000 failing keys of one tenant had another's one retry wait 200 s for a token."""
    queue: WorkQueue[str] = WorkQueue("retries", base_delay=0.001, rate=10, burst=100, group=tenant)
    for i in range(2000):
        queue.add_rate_limited(f"venice/{i}")
    queue.add_rate_limited("florence/x")
    await asyncio.sleep(0.1)
    served = []
    while len(queue):
        served.append(await queue.get())
    assert "florence/x" in served
    queue.shutdown()


async def test_the_buckets_of_groups_that_failed_long_ago_are_forgotten() -> None:
    queue: WorkQueue[str] = WorkQueue("buckets", base_delay=0.001, rate=1000, burst=1, group=tenant)
    for i in range(MAX_BUCKETS + 10):
        queue.add_rate_limited(f"ns-{i}/pod")
        await asyncio.sleep(0.002)  # refilled: each bucket of a burst of one is full again
    assert len(queue._buckets) <= MAX_BUCKETS
    queue.shutdown()
