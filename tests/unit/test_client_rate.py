"""The client-side rate limit (`vk kubelet --client-qps`, `--client-max-burst`, as Liqo's):
requests, watches and retries each wait for a token, in the order asked, within their own
deadline. Served by a small HTTP server of the test's that notes when each request came."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiohttp import web

from tests.unit.test_hostile_provider import PATH, Handler, client_of
from vk.kube.workqueue import TokenBucket


def noting(arrivals: list[float]) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        arrivals.append(time.monotonic())
        if request.query.get("watch") == "true":
            return web.Response(body=b"", content_type="application/json")
        return web.json_response({"kind": "ConfigMapList", "items": []})

    return handle


async def test_requests_past_the_burst_come_at_the_rate_in_the_order_asked() -> None:
    arrivals: list[float] = []
    client, serve = await client_of(noting(arrivals), rate=TokenBucket(20, 2))
    started = time.monotonic()
    asked = [asyncio.create_task(client.get(PATH, {"n": str(n)})) for n in range(8)]
    await asyncio.gather(*asked)
    await serve.aclose()
    # Two at once, the six others 50 ms apart: the last no sooner than 300 ms after the start.
    assert arrivals[7] - started >= 0.29, [round(a - started, 3) for a in arrivals]
    assert arrivals[1] - started < 0.2


async def test_a_watch_waits_for_its_token_too() -> None:
    arrivals: list[float] = []
    client, serve = await client_of(noting(arrivals), rate=TokenBucket(5, 1))
    started = time.monotonic()
    await client.get(PATH)
    async for _ in client.watch(PATH, timeout_seconds=1):
        pass
    await serve.aclose()
    assert arrivals[1] - started >= 0.19, [round(a - started, 3) for a in arrivals]


async def test_a_token_past_the_deadline_times_the_request_out() -> None:
    """The wait is the request's: a client whose next token comes after its timeout gives up
    at the timeout, as client-go's limiter does past its context's deadline."""
    arrivals: list[float] = []
    client, serve = await client_of(noting(arrivals), rate=TokenBucket(1, 1), timeout=0.3)
    await client.get(PATH)
    with pytest.raises(TimeoutError):
        await client.get(PATH)
    await serve.aclose()
    assert len(arrivals) == 1
