"""The one rate-limited work queue every vk controller uses, with client-go's semantics.

An item is queued at most once however often it is added (the dirty set), is never handed to
two workers at once (the processing set: an item added while being processed is queued again
when `done`), and is retried with per-item exponential back-off capped by a token bucket (one
per group, below), so a broken object backs off while a storm of them cannot flood the API
server (ten retries a second, bursts of a hundred, for each group). An item
queued wakes one idle worker, as client-go's Signal does: waking them all (an Event) would cost
every idle worker a wake-up per item, most of a reconcile's CPU when items come one at a time.

Items may fall in groups (`group`: the tenant an item is of, on a provider every consumer
shares): then the groups with items queued are served in turn, one item each, and each group
has its own token bucket, so one group's thousands of items, or of failing items, do not make
another's new item wait behind them.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import time
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from prometheus_client import Counter, Gauge

T = TypeVar("T", bound=Hashable)

QUEUE_DEPTH = Gauge("vk_workqueue_depth", "Items waiting in a work queue", ["name"])
QUEUE_ADDS = Counter("vk_workqueue_adds_total", "Items added to a work queue", ["name"])
QUEUE_RETRIES = Counter(
    "vk_workqueue_retries_total", "Items re-queued after a failed attempt", ["name"]
)


# Token buckets kept at most (one per group that failed lately), past which those refilled
# are forgotten: groups come and go (a consumer's namespaces).
MAX_BUCKETS = 1024


class ShutDown(Exception):
    """The queue was shut down and has nothing left to hand out."""


class TokenBucket:
    """Overall rate limit (client-go's default: 10 per second, bursts of 100): `rate` tokens a
    second, `burst` at most, full at first."""

    __slots__ = ("_clock", "_last", "_tokens", "burst", "rate")

    def __init__(
        self, rate: float, burst: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.rate = rate
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()

    def full(self) -> bool:
        """Whether it has refilled to its burst: forgotten, it would be made again as it is."""
        return self._tokens + (self._clock() - self._last) * self.rate >= self.burst

    def reserve(self) -> float:
        """Reserves a token, there or to come, and says how long to wait for it."""
        self._refill()
        self._tokens -= 1
        return 0.0 if self._tokens >= 0 else -self._tokens / self.rate

    def take(self) -> float:
        """Takes a token if one is there (0.0); else takes none, and says how long until one
        is: for what is refused meanwhile, not delayed."""
        wait = self.wait()
        if wait == 0:
            self._tokens -= 1
        return wait

    def wait(self, tokens: int = 1) -> float:
        """How long until `tokens` are there (0.0: they are), taking none."""
        self._refill()
        return max(0.0, (tokens - self._tokens) / self.rate)

    def resize(self, burst: int) -> None:
        """A new burst: raised, the tokens it adds are there at once (more allowed is more
        allowed now); lowered, those past it go."""
        self._refill()
        self._tokens = min(burst, self._tokens + max(0, burst - self.burst))
        self.burst = burst

    def _refill(self) -> None:
        now = self._clock()
        self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        self._last = now


class TokenBuckets(Generic[T]):
    """A TokenBucket for each key, made full when a key first needs one: `rate` and `burst`
    each. At `most` kept (or twice what the last sweep left, if more), those refilled are
    forgotten (they hold nothing: made again, they would be as they are): keys that come and
    go cost no more than those in use, and a sweep is paid for by the keys added since."""

    def __init__(
        self,
        rate: float,
        burst: int,
        *,
        most: int = MAX_BUCKETS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.rate, self.burst, self.most = rate, burst, most
        self._clock = clock
        self._buckets: dict[T, TokenBucket] = {}
        self._sweep_at = most

    def __len__(self) -> int:
        return len(self._buckets)

    def __getitem__(self, key: T) -> TokenBucket:
        bucket = self._buckets.get(key)
        if bucket is None:
            if len(self._buckets) >= self._sweep_at:
                self._buckets = {k: b for k, b in self._buckets.items() if not b.full()}
                self._sweep_at = max(self.most, 2 * len(self._buckets))
            bucket = self._buckets[key] = TokenBucket(self.rate, self.burst, clock=self._clock)
        return bucket


def exponential_backoff(failures: int, base: float, cap: float) -> float:
    """base * 2^failures, at most cap (client-go: 5 ms doubling up to 1000 s)."""
    return float(min(cap, base * 2.0 ** min(failures, 64)))


class WorkQueue(Generic[T]):
    def __init__(
        self,
        name: str,
        *,
        base_delay: float = 0.005,
        max_delay: float = 1000.0,
        rate: float = 10.0,
        burst: int = 100,
        group: Callable[[T], Hashable] | None = None,
    ) -> None:
        self.name = name
        # The items queued, by group, the groups in the order they are served (the one served
        # last goes to the end); without `group`, one group: first in, first out.
        self._queues: collections.OrderedDict[Hashable, collections.deque[T]] = (
            collections.OrderedDict()
        )
        self._queued = 0
        self._group = group
        self._dirty: set[T] = set()
        self._processing: set[T] = set()
        self._failures: dict[T, int] = {}
        self._delayed: dict[T, tuple[float, asyncio.TimerHandle]] = {}
        self._idle: collections.deque[asyncio.Future[None]] = collections.deque()  # in `get`
        self._shutting_down = False
        self._base_delay = base_delay
        self._max_delay = max_delay
        self._buckets: TokenBuckets[Hashable] = TokenBuckets(rate, burst)
        self._depth = QUEUE_DEPTH.labels(name)
        self._adds = QUEUE_ADDS.labels(name)
        self._retries = QUEUE_RETRIES.labels(name)

    def __len__(self) -> int:
        return self._queued

    def _group_of(self, item: T) -> Hashable:
        return None if self._group is None else self._group(item)

    def _enqueue(self, item: T) -> None:
        group = self._group_of(item)
        queue = self._queues.get(group)
        if queue is None:
            queue = self._queues[group] = collections.deque()
        queue.append(item)
        self._queued += 1
        self._depth.set(self._queued)
        self._wake_one()

    def add(self, item: T) -> None:
        if self._shutting_down or item in self._dirty:
            return
        self._adds.inc()
        self._dirty.add(item)
        if item in self._processing:
            return  # queued again by done(): one worker at a time per item
        self._enqueue(item)

    def add_after(self, item: T, delay: float) -> None:
        """Adds `item` after `delay` seconds; of several pending delays the earliest wins."""
        if self._shutting_down:
            return
        if delay <= 0:
            self.add(item)
            return
        ready_at = time.monotonic() + delay
        pending = self._delayed.get(item)
        if pending is not None:
            if pending[0] <= ready_at:
                return
            pending[1].cancel()
        handle = asyncio.get_running_loop().call_later(delay, self._delay_elapsed, item)
        self._delayed[item] = (ready_at, handle)

    def _delay_elapsed(self, item: T) -> None:
        self._delayed.pop(item, None)
        self.add(item)

    def add_rate_limited(self, item: T) -> None:
        """Re-queues `item` after a failure, backing off per item and overall."""
        failures = self._failures.get(item, 0)
        self._failures[item] = failures + 1
        self._retries.inc()
        delay = max(
            exponential_backoff(failures, self._base_delay, self._max_delay),
            self._buckets[self._group_of(item)].reserve(),
        )
        self.add_after(item, delay)

    def retry_now(self) -> int:
        """Every item waiting (backing off after failures, or asked back later) is queued now,
        its failures forgotten: what waited on something that is back (the provider after an
        outage) is not left to a back-off that may have grown to minutes. How many."""
        waiting = list(self._delayed)
        for item in waiting:
            _, handle = self._delayed.pop(item)
            handle.cancel()
            self._failures.pop(item, None)
            self.add(item)
        return len(waiting)

    def forget(self, item: T) -> None:
        """Stops tracking failures of `item` (call it once the item succeeded)."""
        self._failures.pop(item, None)

    def num_requeues(self, item: T) -> int:
        return self._failures.get(item, 0)

    async def get(self) -> T:
        """The next item; call `done(item)` when finished with it. Raises ShutDown."""
        while not self._queued:
            if self._shutting_down:
                raise ShutDown(self.name)
            waiter = asyncio.get_running_loop().create_future()
            self._idle.append(waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                if waiter.cancelled():
                    with contextlib.suppress(ValueError):  # skipped by _wake_one already
                        self._idle.remove(waiter)
                else:
                    self._wake_one()  # woken for an item, then cancelled: another takes it
                raise
        group, queue = next(iter(self._queues.items()))
        item = queue.popleft()
        if queue:
            self._queues.move_to_end(group)  # the other groups' turn first
        else:
            del self._queues[group]
        self._queued -= 1
        self._depth.set(self._queued)
        self._processing.add(item)
        self._dirty.discard(item)
        return item

    def done(self, item: T) -> None:
        self._processing.discard(item)
        if item in self._dirty:
            self._enqueue(item)

    def shutdown(self) -> None:
        """No new items; workers drain what is queued, then `get` raises ShutDown."""
        self._shutting_down = True
        for _, handle in self._delayed.values():
            handle.cancel()
        self._delayed.clear()
        while self._idle:
            self._wake_one()

    def _wake_one(self) -> None:
        """Wakes the worker idle longest, if any (it may find the item taken by a worker that
        came back first, and waits again)."""
        while self._idle:
            waiter = self._idle.popleft()
            if not waiter.done():  # a cancelled worker's is done
                waiter.set_result(None)
                return
