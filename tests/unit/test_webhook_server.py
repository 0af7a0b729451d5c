"""The webhook's HTTPS port against whoever reaches it in the pod network: what a peer can hold
of it (connections, heads, bodies, time) is bounded, and the API server's reviews are answered
all the same. Each test plays the attacker over real TLS on loopback, with short deadlines."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from tests.unit.http_peer import answer, closed_within
from tests.unit.serving_certificates import loopback_serving_certificate
from vk.controllers.local_processes import free_port
from vk.webhooks.admission import Answer
from vk.webhooks.configuration import VALIDATE_OFFLOADING_PATH
from vk.webhooks.quota import ALLOWED
from vk.webhooks.server import (
    MAX_REVIEW_BYTES,
    REVIEW_BUDGET,
    SMALL_REVIEW_BYTES,
    WEBHOOK_LIMITS,
    ByteBudget,
    WebhookServer,
    serving_ssl_context,
)

JSON = dict[str, Any]
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Offloadings:
    """Allows every NamespaceOffloading review, once `release` is set (set from the start unless
    `held`); `answering` counts the reviews it was asked, `held` those it holds now."""

    def __init__(self, held: bool = False) -> None:
        self.release = asyncio.Event()
        if not held:
            self.release.set()
        self.answering = 0
        self.held = 0

    async def validate_offloading(self, request: JSON) -> Answer:
        self.answering += 1
        self.held += 1
        try:
            await self.release.wait()
        finally:
            self.held -= 1
        return Answer(ALLOWED)


class Port:
    def __init__(self, port: int, ca_pem: bytes, server: WebhookServer) -> None:
        self.port = port
        self.server = server
        self.trust = ssl.create_default_context(cadata=ca_pem.decode())

    async def connect(self) -> Streams:
        return await asyncio.open_connection("127.0.0.1", self.port, ssl=self.trust)


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path, bytes]:
    return loopback_serving_certificate(tmp_path)


@asynccontextmanager
async def webhook(
    tls_files: tuple[Path, Path, bytes],
    offloadings: Offloadings | None = None,
    **limits: Any,
) -> AsyncIterator[Port]:
    cert, key, ca_pem = tls_files
    offloadings = offloadings or Offloadings()
    port = free_port()
    server = WebhookServer(
        None,  # type: ignore[arg-type]  # no ShadowPod review here
        offloadings,  # type: ignore[arg-type]
        None,  # type: ignore[arg-type]  # nor of a tenant object
        f"127.0.0.1:{port}",
        serving_ssl_context(cert, key),
        healthy=lambda: True,
        limits=replace(WEBHOOK_LIMITS, **limits),
    )
    task = asyncio.create_task(server.run())
    try:
        await asyncio.wait_for(server.ready.wait(), 5)
        yield Port(port, ca_pem, server)
    finally:
        offloadings.release.set()  # the server's shutdown waits for the reviews being answered
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def review_body(padding: int = 0) -> bytes:
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
            "operation": "CREATE",
            "namespace": "liqo-demo",
            "object": {"metadata": {"name": "offloading", "annotations": {"pad": "x" * padding}}},
        },
    }
    return json.dumps(review).encode()


def post_head(length: int, path: str = VALIDATE_OFFLOADING_PATH) -> bytes:
    return (
        f"POST {path}?timeout=5s HTTP/1.1\r\nHost: vk-webhook.vk.svc:443\r\n"
        f"Content-Type: application/json\r\nAccept: application/json\r\n"
        f"Content-Length: {length}\r\n\r\n"
    ).encode()


def review_request(padding: int = 0) -> bytes:
    body = review_body(padding)
    return post_head(len(body)) + body


HEALTHZ = b"GET /healthz HTTP/1.1\r\nHost: vk-webhook\r\n\r\n"


async def test_a_body_larger_than_any_review_is_refused_before_it_is_sent(
    tls_files: tuple[Path, Path, bytes],
) -> None:
    async with webhook(tls_files) as port:
        reader, writer = await port.connect()
        writer.write(post_head(MAX_REVIEW_BYTES + 1) + b"{" * 1024)  # and not a byte more
        status, _ = await asyncio.wait_for(answer(reader), 3)
        assert status == 413
        # And the connection ends there: nothing more of the body is read.
        assert await closed_within(reader, 1)


async def test_a_head_left_half_sent_is_closed_at_its_deadline(
    tls_files: tuple[Path, Path, bytes],
) -> None:
    async with webhook(tls_files, request_seconds=0.5) as port:
        reader, writer = await port.connect()
        started = time.monotonic()
        writer.write(post_head(100)[:40])
        assert await closed_within(reader, 3)
        assert time.monotonic() - started >= 0.4


async def test_a_body_sent_a_byte_at_a_time_is_closed_at_the_requests_deadline(
    tls_files: tuple[Path, Path, bytes],
) -> None:
    async with webhook(tls_files, request_seconds=0.5) as port:
        reader, writer = await port.connect()
        started = time.monotonic()
        writer.write(post_head(1000))

        async def drip() -> None:
            for _ in range(1000):
                writer.write(b" ")
                await asyncio.sleep(0.05)

        dripping = asyncio.create_task(drip())
        try:
            assert await closed_within(reader, 3)
        finally:
            dripping.cancel()
            await asyncio.gather(dripping, return_exceptions=True)
        assert time.monotonic() - started >= 0.4


async def test_an_idle_connection_is_closed_after_the_idle_timeout(
    tls_files: tuple[Path, Path, bytes],
) -> None:
    async with webhook(tls_files, idle_seconds=0.5) as port:
        reader, writer = await port.connect()
        writer.write(HEALTHZ)
        assert await asyncio.wait_for(answer(reader), 3) == (200, b"ok")
        answered = time.monotonic()
        assert await closed_within(reader, 3)
        assert time.monotonic() - answered >= 0.4


async def test_a_connection_that_never_finishes_its_tls_handshake_is_closed(
    tls_files: tuple[Path, Path, bytes],
) -> None:
    async with webhook(tls_files, handshake_seconds=0.5) as port:
        reader, _ = await asyncio.open_connection("127.0.0.1", port.port)  # no ClientHello
        assert await closed_within(reader, 3)


async def test_at_the_cap_the_longest_idle_connection_makes_room_for_a_review(
    tls_files: tuple[Path, Path, bytes],
) -> None:
    async with webhook(tls_files, connections=3) as port:
        idle = [await port.connect() for _ in range(3)]
        reader, writer = await port.connect()
        writer.write(review_request())
        status, body = await asyncio.wait_for(answer(reader), 3)
        assert status == 200
        assert json.loads(body)["response"]["allowed"] is True
        assert await closed_within(idle[0][0], 1)
        assert not await closed_within(idle[1][0], 0.2)
        assert not await closed_within(idle[2][0], 0.2)


async def test_at_the_cap_a_new_connection_is_refused_when_every_one_is_being_answered(
    tls_files: tuple[Path, Path, bytes],
) -> None:
    offloadings = Offloadings(held=True)
    async with webhook(tls_files, offloadings, connections=2) as port:
        answering = [await port.connect() for _ in range(2)]
        for _, writer in answering:
            writer.write(review_request())
        while offloadings.answering < 2:
            await asyncio.sleep(0.01)
        with pytest.raises((ConnectionError, ssl.SSLError, asyncio.IncompleteReadError)):
            await asyncio.wait_for(port.connect(), 3)
        offloadings.release.set()
        for reader, _ in answering:
            status, _ = await asyncio.wait_for(answer(reader), 3)
            assert status == 200


async def test_a_request_sent_while_the_last_is_answered_closes_the_connection(
    tls_files: tuple[Path, Path, bytes],
) -> None:
    """Pipelining, which the API server never does: a client could pile requests up behind an
    answer it does not read."""
    offloadings = Offloadings(held=True)
    async with webhook(tls_files, offloadings) as port:
        reader, writer = await port.connect()
        writer.write(review_request())
        while offloadings.answering < 1:
            await asyncio.sleep(0.01)
        writer.write(HEALTHZ)
        assert await closed_within(reader, 1)


async def test_large_reviews_wait_for_a_turn_and_small_ones_do_not(
    tls_files: tuple[Path, Path, bytes],
) -> None:
    """A client stalling in a body of the largest size holds most of the large reviews' budget:
    the next large review (of almost the largest size) is read once it is closed at its
    deadline, and a small one meanwhile at once."""
    async with webhook(tls_files, request_seconds=1.5) as port:
        stalled = [await port.connect()]
        for _, writer in stalled:
            writer.write(post_head(MAX_REVIEW_BYTES) + b"{")
        await asyncio.sleep(0.3)

        reader, writer = await port.connect()
        sent = time.monotonic()
        writer.write(review_request(padding=MAX_REVIEW_BYTES - 64 * 1024))
        small_reader, small_writer = await port.connect()
        small_writer.write(review_request())
        assert (await asyncio.wait_for(answer(small_reader), 1))[0] == 200
        assert time.monotonic() - sent < 0.8

        status, _ = await asyncio.wait_for(answer(reader), 5)
        assert status == 200
        assert time.monotonic() - sent >= 0.9  # once the first stalled one was closed
        for stalled_reader, _ in stalled:
            assert await closed_within(stalled_reader, 1)


async def until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.01)


async def test_large_reviews_are_answered_within_a_budget_of_bytes(
    tls_files: tuple[Path, Path, bytes],
) -> None:
    """Large reviews are let in by their bytes, not their number: of four of 3/8 of the budget,
    held in their answers, two are read and decoded and two wait (four were decoded at once,
    some 24 times their size each), until the first are answered."""
    size = REVIEW_BUDGET * 3 // 8
    assert SMALL_REVIEW_BYTES < size <= MAX_REVIEW_BYTES
    offloadings = Offloadings(held=True)
    async with webhook(tls_files, offloadings) as port:
        budget = port.server.reviews
        clients = [await port.connect() for _ in range(4)]
        for _, writer in clients:
            writer.write(review_request(padding=size - len(review_body())))
        await until(lambda: offloadings.held == 2 and len(budget.waiting) == 2)
        assert budget.taken == 2 * size <= REVIEW_BUDGET
        offloadings.release.set()
        for reader, _ in clients:
            assert (await asyncio.wait_for(answer(reader), 5))[0] == 200
        assert offloadings.answering == 4
        assert budget.taken == 0
        assert not budget.waiting


async def test_a_large_review_waiting_past_its_deadline_leaves_the_line(
    tls_files: tuple[Path, Path, bytes],
) -> None:
    offloadings = Offloadings(held=True)
    async with webhook(tls_files, offloadings, request_seconds=1.0) as port:
        first_reader, first_writer = await port.connect()
        first_writer.write(review_request(padding=MAX_REVIEW_BYTES - 64 * 1024))
        await until(lambda: offloadings.held == 1)
        reader, writer = await port.connect()
        writer.write(post_head(MAX_REVIEW_BYTES) + b"{")
        await until(lambda: len(port.server.reviews.waiting) == 1)
        # Out of line at its deadline: 408, or the connection closed at the same moment.
        try:
            status, _ = await asyncio.wait_for(answer(reader), 3)
            assert status == 408
        except (asyncio.IncompleteReadError, ConnectionError, ssl.SSLError):
            pass
        await until(lambda: not port.server.reviews.waiting)
        offloadings.release.set()
        assert (await asyncio.wait_for(answer(first_reader), 5))[0] == 200
        await until(lambda: port.server.reviews.taken == 0)


class Takers:
    """Tasks taking their share of a `ByteBudget` and holding it until told: what they hold at
    once, and the most they held."""

    def __init__(self, budget: ByteBudget) -> None:
        self.budget = budget
        self.inside: list[int] = []
        self.most = 0
        self.leave: dict[int, asyncio.Event] = {}

    def start(self, key: int, size: int) -> asyncio.Task[None]:
        self.leave[key] = asyncio.Event()
        return asyncio.create_task(self._take(key, size))

    async def arrive(self, key: int, size: int) -> asyncio.Task[None]:
        """`start`, the loop let run until it has its share or waits for it."""
        task = self.start(key, size)
        await settle()
        return task

    async def _take(self, key: int, size: int) -> None:
        async with self.budget.take(size):
            self.inside.append(size)
            self.most = max(self.most, sum(self.inside))
            await self.leave[key].wait()
            self.inside.remove(size)


async def settle() -> None:
    for _ in range(10):
        await asyncio.sleep(0)


async def test_a_byte_budget_lets_in_no_more_bytes_than_its_limit_at_once() -> None:
    budget = ByteBudget(100)
    takers = Takers(budget)
    sizes = [40, 30, 50, 20, 60, 10, 90, 30]
    tasks = [takers.start(key, size) for key, size in enumerate(sizes)]
    await settle()
    assert takers.inside == [40, 30]  # the third would be past the limit, and the rest after it
    for key in range(len(sizes)):
        takers.leave[key].set()
        await settle()
        assert sum(takers.inside) <= 100
    await asyncio.gather(*tasks)
    assert takers.most <= 100
    assert budget.taken == 0
    assert not budget.waiting


async def test_a_byte_budget_lets_a_larger_taker_in_alone_and_in_its_turn() -> None:
    budget = ByteBudget(100)
    takers = Takers(budget)
    small = await takers.arrive(0, 30)
    large = await takers.arrive(1, 250)
    after = await takers.arrive(2, 10)  # would fit, but comes after the large one
    assert takers.inside == [30]
    takers.leave[0].set()
    await settle()
    assert takers.inside == [250]
    takers.leave[1].set()
    await settle()
    assert takers.inside == [10]
    takers.leave[2].set()
    await asyncio.gather(small, large, after)
    assert budget.taken == 0


async def test_a_byte_budget_forgets_a_taker_cancelled_while_waiting() -> None:
    budget = ByteBudget(100)
    takers = Takers(budget)
    first = await takers.arrive(0, 60)
    blocked = takers.start(1, 80)
    behind = await takers.arrive(2, 40)
    assert takers.inside == [60]
    blocked.cancel()  # the one holding the others back goes: the next fits now
    await settle()
    assert takers.inside == [60, 40]
    assert blocked.cancelled()
    takers.leave[0].set()
    takers.leave[2].set()
    await asyncio.gather(first, behind)
    assert budget.taken == 0
    assert not budget.waiting


async def test_a_byte_budget_gives_back_a_turn_granted_as_its_taker_is_cancelled() -> None:
    budget = ByteBudget(100)
    await budget.acquire(100)
    waiter = asyncio.create_task(budget.acquire(100))
    await settle()
    budget.release(100)  # the waiter's turn, given before it runs again
    assert budget.taken == 100
    waiter.cancel()
    await asyncio.gather(waiter, return_exceptions=True)
    assert waiter.cancelled()
    assert budget.taken == 0
    assert not budget.waiting


async def test_small_takers_pass_a_waiting_large_one_but_are_counted_too() -> None:
    """A pod's review does not wait behind a large one that does not fit yet; and reviews of
    128 KiB, each of which was let in (128 connections of them decoded were 440 MiB), now
    count against the same limit."""
    budget = ByteBudget(100, small=10)
    takers = Takers(budget)
    first = await takers.arrive(0, 60)
    large = takers.start(1, 80)  # waits for the first
    smalls = [takers.start(2 + i, 10) for i in range(5)]
    await settle()
    assert takers.inside == [60, 10, 10, 10, 10]  # passing the large one, up to the limit
    assert len(budget.waiting) == 2  # the large one, and the fifth small one
    for key in range(7):
        takers.leave[key].set()
    await asyncio.gather(first, large, *smalls)
    assert takers.most <= 100
    assert budget.taken == 0
