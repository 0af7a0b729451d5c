"""A fault-injecting HTTP proxy in front of a real API server: requests pass through as they
are, and the watch streams it carries are spoiled one after another, each in its own way, the
way a broken proxy, a cut connection or a hostile provider would spoil them.

The k-th watch opened gets the k-th fault once it has been open a while (an informer's back-off
starts afresh after a watch that worked) and has carried a real event; the watches after the
last fault pass untouched. A streamed list (a watch with `sendInitialEvents`, an informer's
list) passes untouched too, and is no watch in that count: the faults are the watch's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import aiohttp
from aiohttp import web

from vk.kube.kubeconfig import ClusterConnection

OPEN_BEFORE_FAULT_SECONDS = 1.5
OVERSIZED_BYTES = 9 * 1024 * 1024  # past the client's 8 MiB bound on one event
Spoiler = Callable[[web.StreamResponse, bytes, asyncio.BaseTransport | None], Awaitable[None]]


async def _garbage(response: web.StreamResponse, _: bytes, __: object) -> None:
    await response.write(b"this is not an event\n")


async def _not_an_object(response: web.StreamResponse, _: bytes, __: object) -> None:
    await response.write(b'[{"type": "ADDED"}]\n')


async def _no_object(response: web.StreamResponse, _: bytes, __: object) -> None:
    await response.write(b'{"type": "ADDED"}\n')


async def _unnamed(response: web.StreamResponse, _: bytes, __: object) -> None:
    await response.write(b'{"type": "ADDED", "object": {"metadata": {"namespace": "x"}}}\n')


async def _unknown_type(response: web.StreamResponse, line: bytes, _: object) -> None:
    await response.write(b'{"type": "EXPLODED"' + line[line.index(b",") :])


async def _bad_error(response: web.StreamResponse, _: bytes, __: object) -> None:
    await response.write(b'{"type": "ERROR", "object": {"code": "lots", "message": 7}}\n')


async def _cut(response: web.StreamResponse, line: bytes, _: object) -> None:
    """Half an event, then the stream ends as if all was said."""
    await response.write(line[: len(line) // 2])
    await response.write_eof()


async def _dropped(
    response: web.StreamResponse, line: bytes, transport: asyncio.BaseTransport | None
) -> None:
    """Half an event, then the connection drops (the chunked body never ends)."""
    await response.write(line[: len(line) // 2])
    if transport is not None:
        transport.close()


async def _oversized(response: web.StreamResponse, _: bytes, __: object) -> None:
    """A line with no end: the client must stop reading it, not hold it."""
    chunk = b"x" * (256 * 1024)
    for _ in range(OVERSIZED_BYTES // len(chunk)):
        await response.write(chunk)


FAULTS: dict[str, Spoiler] = {
    "garbage": _garbage,
    "not-an-object": _not_an_object,
    "no-object": _no_object,
    "unnamed": _unnamed,
    "unknown-type": _unknown_type,
    "bad-error": _bad_error,
    "cut": _cut,
    "dropped": _dropped,
    "oversized": _oversized,
}


class WatchFaultProxy:
    def __init__(self, upstream: ClusterConnection, faults: list[str]) -> None:
        self.upstream = upstream
        self.faults = list(faults)
        self.served: list[str] = []  # the faults injected, in order
        self.watches = 0
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self) -> str:
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.upstream.ssl_context())
        )
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        port = self._runner.addresses[0][1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        headers = {
            name: value
            for name, value in request.headers.items()
            if name.lower() in ("accept", "content-type")
        }
        body = await request.read()
        async with self._session.request(
            request.method,
            self.upstream.server + request.path_qs,
            data=body or None,
            headers=headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_read=400),
        ) as upstream:
            if request.query.get("watch") != "true":
                return web.Response(
                    status=upstream.status,
                    body=await upstream.read(),
                    headers={"Content-Type": upstream.headers.get("Content-Type", "")},
                )
            streamed_list = request.query.get("sendInitialEvents") == "true"
            return await self._watch(request, upstream, spoil=not streamed_list)

    async def _watch(
        self, request: web.Request, upstream: aiohttp.ClientResponse, *, spoil: bool
    ) -> web.StreamResponse:
        fault = None
        if spoil:
            fault = self.faults[self.watches] if self.watches < len(self.faults) else None
            self.watches += 1
        opened = time.monotonic()
        response = web.StreamResponse(
            status=upstream.status, headers={"Content-Type": "application/json"}
        )
        await response.prepare(request)
        try:
            async for line in upstream.content:
                ripe = time.monotonic() - opened >= OPEN_BEFORE_FAULT_SECONDS
                if fault is not None and ripe and b'"BOOKMARK"' not in line:
                    self.served.append(fault)
                    await FAULTS[fault](response, line, request.transport)
                    return response
                await response.write(line)
        except (ConnectionResetError, aiohttp.ClientConnectionResetError):
            return response  # the client gave up on the stream: so do we
        await response.write_eof()
        return response
