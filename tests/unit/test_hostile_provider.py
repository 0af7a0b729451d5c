"""What a provider's API server, which is the other party's, may send a client and what comes of
it: answers and watch lines past the client's cap, error pages of any length, pages of items that
are not objects, lists that never end, floods of events. Served by a small HTTP server of the
test's."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson
import pytest
from aiohttp import web

from vk.kube import client as client_module
from vk.kube.client import ApiError, KubeClient, MalformedList, MalformedWatch
from vk.kube.kubeconfig import ClusterConnection

PATH = "/api/v1/namespaces/shop/configmaps"
Handler = Callable[[web.Request], Any]


def configmap(name: str, size: int = 0) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop"}, "data": {"x": "y" * size}}


async def serving(handler: Handler, **client_options: Any) -> AsyncIterator[KubeClient]:
    app = web.Application()
    app.router.add_get(PATH, handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = KubeClient(ClusterConnection(server=f"http://127.0.0.1:{port}"), **client_options)
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


async def client_of(handler: Handler, **kwargs: Any) -> tuple[KubeClient, AsyncIterator[Any]]:
    serve = serving(handler, **kwargs)
    return await anext(serve), serve


async def test_a_page_over_the_clients_cap_is_asked_again_in_halves_and_the_list_is_whole() -> None:
    stored = [configmap(f"c{i:02}", 3000) for i in range(20)]
    limits: list[int] = []

    async def handle(request: web.Request) -> web.Response:
        limit = int(request.query["limit"])
        start = int(request.query.get("continue", "0"))
        limits.append(limit)
        end = start + limit
        metadata = {"resourceVersion": "9", "continue": str(end) if end < len(stored) else ""}
        return web.json_response({"metadata": metadata, "items": stored[start:end]})

    client, serve = await client_of(handle, max_body=10_000)
    items, version = await client.list_all(PATH)
    await serve.aclose()
    assert [item["metadata"]["name"] for item in items] == [
        item["metadata"]["name"] for item in stored
    ]
    assert version == "9"
    assert limits[:9] == [500, 250, 125, 62, 31, 15, 7, 3, 3]


async def test_an_object_over_the_clients_cap_fails_the_list() -> None:
    async def handle(request: web.Request) -> web.Response:
        return web.json_response({"metadata": {}, "items": [configmap("big", 20_000)]})

    client, serve = await client_of(handle, max_body=10_000)
    with pytest.raises(ConnectionError, match="over 10000 bytes"):
        await client.list_all(PATH)
    await serve.aclose()


@pytest.mark.parametrize(
    "items",
    [
        [1, 2],
        ["a", None, [], {}],
        [
            {"metadata": {}},
            {"metadata": {"name": ""}},
            {"metadata": "m"},
            {"metadata": {"name": 5}},
        ],
        [{"metadata": {"name": "n", "namespace": 3}}],
    ],
)
async def test_list_items_that_are_not_named_objects_are_left_out(items: list[Any]) -> None:
    async def handle(request: web.Request) -> web.Response:
        return web.json_response({"metadata": {}, "items": [*items, configmap("kept")]})

    client, serve = await client_of(handle)
    listed, _ = await client.list_all(PATH)
    await serve.aclose()
    assert listed == [configmap("kept")]


@pytest.mark.parametrize(
    ("fresh_tokens", "requests_sent", "error"),
    [(False, 2, "the same continue token twice"), (True, 30, "not ended in 30 pages")],
)
async def test_a_list_whose_pages_never_end_is_given_up(
    monkeypatch: pytest.MonkeyPatch, fresh_tokens: bool, requests_sent: int, error: str
) -> None:
    monkeypatch.setattr(client_module, "MAX_PAGES_PER_LIST", 30)
    requests = 0

    async def handle(request: web.Request) -> web.Response:
        nonlocal requests
        requests += 1
        token = str(requests) if fresh_tokens else "again"
        return web.json_response({"metadata": {"continue": token}, "items": []})

    client, serve = await client_of(handle)
    async with asyncio.timeout(5):
        with pytest.raises(MalformedList, match=error):
            await client.list_all(PATH)
    await serve.aclose()
    assert requests == requests_sent


def streaming(lines: list[bytes], status: int = 200) -> Handler:
    async def handle(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=status)
        await response.prepare(request)
        await response.write(b"".join(lines))
        return response

    return handle


async def test_a_watch_line_over_the_clients_cap_is_not_an_event() -> None:
    event = orjson.dumps({"type": "ADDED", "object": configmap("big", 2000)}) + b"\n"
    client, serve = await client_of(streaming([event]), max_body=1000)
    with pytest.raises(MalformedWatch, match="over 1000 bytes"):
        async for _ in client.watch(PATH):
            pass
    await serve.aclose()


@pytest.mark.parametrize("watching", [False, True])
async def test_an_error_page_of_any_length_becomes_a_short_message(watching: bool) -> None:
    async def handle(request: web.Request) -> web.Response:
        return web.Response(status=500, body=b"e" * (10 * 1024 * 1024))

    async def ask(client: KubeClient) -> None:
        if watching:
            async for _ in client.watch(PATH):
                pass
        else:
            await client.get(PATH)

    client, serve = await client_of(handle)
    with pytest.raises(ApiError) as raised:
        await ask(client)
    await serve.aclose()
    assert raised.value.status == 500
    assert raised.value.message == "e" * 4096


@pytest.mark.parametrize(
    ("delay", "retry_after", "error"), [(0.0, "1", ApiError), (1.0, "0", TimeoutError)]
)
async def test_a_server_that_answers_429_forever_holds_a_call_no_longer_than_its_timeout(
    delay: float, retry_after: str, error: type[Exception]
) -> None:
    """Each attempt within the timeout, and each answer a 429: retried, but the whole call
    bounded by the timeout (not ten attempts' worth, 10 s here). A retry whose wait would end
    past the timeout is not made: the caller gets the 429 (an eviction a PodDisruptionBudget
    holds back is one, and its caller goes on to the next pod), else the timeout."""

    async def handle(request: web.Request) -> web.Response:
        await asyncio.sleep(delay)
        return web.json_response({}, status=429, headers={"Retry-After": retry_after})

    timeout = 1.5
    client, serve = await client_of(handle, timeout=timeout)
    started = time.monotonic()
    with pytest.raises(error) as raised:
        await client.get(PATH)
    took = time.monotonic() - started
    await serve.aclose()
    assert took < 3 * timeout
    if isinstance(raised.value, ApiError):
        assert raised.value.status == 429
        assert took < timeout  # not waited out


async def test_a_429_then_an_answer_within_the_timeout_is_the_answer() -> None:
    answered = 0

    async def handle(request: web.Request) -> web.Response:
        nonlocal answered
        answered += 1
        if answered == 1:
            return web.json_response({}, status=429, headers={"Retry-After": "1"})
        return web.json_response({"kind": "ConfigMapList"})

    client, serve = await client_of(handle, timeout=1.5)
    assert await client.get(PATH) == {"kind": "ConfigMapList"}
    await serve.aclose()
    assert answered == 2


async def test_a_flood_of_watch_events_leaves_the_event_loop_to_others() -> None:
    events = 20_000
    line = orjson.dumps({"type": "MODIFIED", "object": configmap("c")}) + b"\n"
    client, serve = await client_of(streaming([line] * events))
    ticks = 0

    async def tick() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0)
            ticks += 1

    ticker = asyncio.create_task(tick())
    await asyncio.sleep(0)
    received = 0
    async for _ in client.watch(PATH):
        received += 1
    ticker.cancel()
    await serve.aclose()
    assert received == events
    assert ticks >= events // client_module.EVENTS_BETWEEN_YIELDS
