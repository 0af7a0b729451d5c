"""Every daemon's metrics port (`/metrics`, `/healthz`, `/readyz`) against whoever reaches it in
the pod network: what a peer can hold of it (connections, heads, time) is bounded, and the
scrapes and probes are answered all the same. Each test plays the peer over plain HTTP on
loopback, against the real server, with short deadlines."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from prometheus_client import REGISTRY

from tests.unit.http_peer import answer, closed_within
from vk.controllers.local_processes import free_port
from vk.kube.observability import METRICS_LIMITS, MetricsServer

Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


class Port:
    def __init__(self, port: int) -> None:
        self.port = port

    async def connect(self) -> Streams:
        return await asyncio.open_connection("127.0.0.1", self.port)


@asynccontextmanager
async def metrics_port(**limits: Any) -> AsyncIterator[Port]:
    port = free_port()
    server = MetricsServer(
        f"127.0.0.1:{port}", ready=lambda: True, limits=replace(METRICS_LIMITS, **limits)
    )
    task = asyncio.create_task(server.run())
    try:
        await asyncio.wait_for(server.started.wait(), 5)
        yield Port(port)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def get(path: str, *headers: str) -> bytes:
    lines = [f"GET {path} HTTP/1.1", "Host: 10.244.1.7:5872", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def closed_for(reason: str) -> float:
    return (
        REGISTRY.get_sample_value(
            "vk_connections_closed_total", {"listener": "metrics", "reason": reason}
        )
        or 0.0
    )


async def test_a_scrapes_idle_connection_is_closed_after_the_idle_timeout() -> None:
    async with metrics_port(idle_seconds=0.5) as port:
        reader, writer = await port.connect()
        writer.write(get("/metrics", "Accept: text/plain", "User-Agent: Prometheus/2.53.0"))
        status, body = await asyncio.wait_for(answer(reader), 3)
        assert status == 200
        assert b"# TYPE vk_connections_closed_total counter" in body
        writer.write(get("/readyz"))  # the same connection, the next request
        assert await asyncio.wait_for(answer(reader), 3) == (200, b"ok")
        answered = time.monotonic()
        assert await closed_within(reader, 3)
        assert time.monotonic() - answered >= 0.4


async def test_a_head_left_half_sent_is_closed_at_the_requests_deadline() -> None:
    async with metrics_port(request_seconds=0.5) as port:
        reader, writer = await port.connect()
        started = time.monotonic()
        writer.write(get("/metrics")[:20])
        assert await closed_within(reader, 3)
        assert time.monotonic() - started >= 0.4


async def test_a_head_of_more_headers_than_a_probe_sends_is_refused() -> None:
    async with metrics_port() as port:
        reader, writer = await port.connect()
        many = [f"X-Padding-{n}: {'x' * 64}" for n in range(METRICS_LIMITS.max_headers + 1)]
        writer.write(get("/healthz", *many))
        status, _ = await asyncio.wait_for(answer(reader), 3)
        assert status == 400
        assert await closed_within(reader, 1)


async def test_at_the_cap_the_longest_idle_connection_makes_room_for_a_probe() -> None:
    before = closed_for("waited-longest")
    async with metrics_port(connections=3) as port:
        idle = [await port.connect() for _ in range(3)]
        reader, writer = await port.connect()
        writer.write(get("/healthz", "User-Agent: kube-probe/1.31", "Connection: close"))
        assert await asyncio.wait_for(answer(reader), 3) == (200, b"ok")
        assert await closed_within(idle[0][0], 1)
        assert not await closed_within(idle[1][0], 0.2)
        assert not await closed_within(idle[2][0], 0.2)
    assert closed_for("waited-longest") - before == 1


async def test_a_flood_of_connections_holds_no_more_than_the_cap() -> None:
    """Connections opened and left silent, many times the cap: all but the last `connections`
    are closed as they come, and a probe still gets in."""
    async with metrics_port(connections=4) as port:
        flood = [await port.connect() for _ in range(40)]
        still_open = [reader for reader, _ in flood if not await closed_within(reader, 0.05)]
        assert len(still_open) <= 4
        reader, writer = await port.connect()
        writer.write(get("/readyz", "User-Agent: kube-probe/1.31"))
        assert await asyncio.wait_for(answer(reader), 3) == (200, b"ok")
