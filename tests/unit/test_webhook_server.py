"""The webhook's HTTPS port against whoever reaches it in the pod network: what a peer can hold
of it (connections, heads, bodies, time) is bounded, and the API server's reviews are answered
all the same. Each test plays the attacker over real TLS on loopback, with short deadlines."""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import AsyncIterator
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
    LARGE_REVIEWS,
    MAX_REVIEW_BYTES,
    SMALL_REVIEW_BYTES,
    WEBHOOK_LIMITS,
    WebhookServer,
    serving_ssl_context,
)

JSON = dict[str, Any]
Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Offloadings:
    """Allows every NamespaceOffloading review, once `release` is set (set from the start unless
    `held`); `answering` counts the reviews it was asked."""

    def __init__(self, held: bool = False) -> None:
        self.release = asyncio.Event()
        if not held:
            self.release.set()
        self.answering = 0

    async def validate_offloading(self, request: JSON) -> Answer:
        self.answering += 1
        await self.release.wait()
        return Answer(ALLOWED)


class Port:
    def __init__(self, port: int, ca_pem: bytes) -> None:
        self.port = port
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
        f"127.0.0.1:{port}",
        serving_ssl_context(cert, key),
        healthy=lambda: True,
        limits=replace(WEBHOOK_LIMITS, **limits),
    )
    task = asyncio.create_task(server.run())
    try:
        await asyncio.wait_for(server.ready.wait(), 5)
        yield Port(port, ca_pem)
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
    """LARGE_REVIEWS clients stalling in large bodies hold every turn: the next large review
    (of almost the largest size) is read once one of them is closed at its deadline, and a
    small one meanwhile at once."""
    async with webhook(tls_files, request_seconds=1.5) as port:
        stalled = [await port.connect() for _ in range(LARGE_REVIEWS)]
        for _, writer in stalled:
            writer.write(post_head(SMALL_REVIEW_BYTES + 1) + b"{")
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
