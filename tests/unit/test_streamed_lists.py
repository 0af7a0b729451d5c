"""An informer's list (`KubeClient.current_objects`): streamed where the API server streams
lists (a watch sending the objects there are, then a bookmark saying that was all), page by
page where it refuses to (an API server before 1.27, or 1.33 with WatchList off), and never
page by page for a failure of another kind. Served by a small HTTP server of the test's."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from vk.kube.client import ApiError, KubeClient, MalformedWatch
from vk.kube.kubeconfig import ClusterConnection

PATH = "/api/v1/namespaces/shop/pods"


def pod(name: str, version: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "shop", "resourceVersion": version}}


class ApiServer:
    """Answers lists of two pods, and watches as `streams` says: "yes" (streamed),
    "refused" (422, as an API server without streaming lists), "forbidden" (403), or as a
    broken or hostile server would: "truncated" (no bookmark ends the objects), "changed" (a
    MODIFIED event among them)."""

    def __init__(self, streams: str) -> None:
        self.streams = streams
        self.requests: list[str] = []

    async def handle(self, request: web.Request) -> web.StreamResponse:
        watching = request.query.get("watch") == "true"
        self.requests.append("watch" if watching else "list")
        if not watching:
            body = {"metadata": {"resourceVersion": "7"}, "items": [pod("a", "5"), pod("b", "6")]}
            return web.json_response(body)
        assert request.query["sendInitialEvents"] == "true"
        assert request.query["resourceVersionMatch"] == "NotOlderThan"
        if self.streams in ("refused", "forbidden"):
            status = 422 if self.streams == "refused" else 403
            return web.json_response({"kind": "Status", "code": status}, status=status)
        response = web.StreamResponse()
        await response.prepare(request)
        end = {"metadata": {"resourceVersion": "7", "annotations": {}}}
        end["metadata"]["annotations"]["k8s.io/initial-events-end"] = "true"
        events = [
            {"type": "ADDED", "object": pod("a", "5")},
            {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "6"}}},
            {"type": "MODIFIED" if self.streams == "changed" else "ADDED", "object": pod("b", "6")},
            {"type": "BOOKMARK", "object": end},
        ]
        for event in events[:-1] if self.streams == "truncated" else events:
            await response.write(orjson.dumps(event) + b"\n")
        return response


async def serving(api: ApiServer) -> AsyncIterator[KubeClient]:
    app = web.Application()
    app.router.add_get(PATH, api.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    client = KubeClient(ClusterConnection(server=f"http://127.0.0.1:{port}"))
    try:
        yield client
    finally:
        await client.close()
        await runner.cleanup()


async def listed(client: KubeClient) -> tuple[list[str], str]:
    names, version = [], ""
    async for batch, batch_version in client.current_objects(PATH):
        names += [obj["metadata"]["name"] for obj in batch]
        version = batch_version or version
    return names, version


async def test_a_list_is_streamed_where_the_api_server_streams_lists() -> None:
    api = ApiServer("yes")
    async for client in serving(api):
        assert await listed(client) == (["a", "b"], "7")
    assert api.requests == ["watch"]


async def test_a_list_is_paged_where_the_api_server_refuses_to_stream_it_and_after() -> None:
    api = ApiServer("refused")
    async for client in serving(api):
        assert await listed(client) == (["a", "b"], "7")
        assert await listed(client) == (["a", "b"], "7")
    assert api.requests == ["watch", "list", "list"]  # asked once


async def test_a_streamed_list_forbidden_is_a_failure_not_a_reason_to_page() -> None:
    api = ApiServer("forbidden")
    async for client in serving(api):
        with pytest.raises(ApiError) as refused:
            await listed(client)
    assert refused.value.status == 403
    assert api.requests == ["watch"]


@pytest.mark.parametrize("broken", ["truncated", "changed"])
async def test_a_streamed_list_that_breaks_the_protocol_is_a_failure(broken: str) -> None:
    """Objects without the bookmark that says they were all, or a change among them: never
    taken as the whole list (the informer lists again), nor a reason to page."""
    api = ApiServer(broken)
    async for client in serving(api):
        with pytest.raises(MalformedWatch):
            await listed(client)
    assert api.requests == ["watch"]
