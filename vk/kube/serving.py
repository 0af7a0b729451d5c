"""How a vk daemon serves an aiohttp application on a port open to the pod network (the
webhook's, the metrics agent's, every daemon's `/metrics`, `/healthz` and `/readyz`): tenants'
pods reach them all, and aiohttp alone lets a peer hold as many connections as it opens, an hour
each, with 1 MiB of head apiece. Here what a peer can hold of a port is bounded: connections
counted from accept, at most a cap of them, and each stage (a TLS handshake, a request, idling)
within its deadline, so that a flood costs the process neither its sockets nor its memory.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Literal, cast

import structlog
from aiohttp import web
from prometheus_client import Counter

from vk.kube.supervision import BackgroundTasks

log = structlog.get_logger("vk.kube.serving")

TLS_HANDSHAKE_SECONDS = 5.0
# A request line and each header at most aiohttp's default size; the count of headers is each
# port's (`ConnectionLimits.max_headers`): aiohttp's default of 128 headers of 8 KiB would let
# each connection hold 2 MiB of head.
MAX_HEADER_BYTES = 8190
# After a failed accept (no file descriptor left), the pause before the next one.
ACCEPT_RETRY = 0.1

CONNECTIONS_CLOSED = Counter(
    "vk_connections_closed_total",
    "Connections a vk port closed or refused on its own, by listener and why",
    ["listener", "reason"],
)


@dataclass(frozen=True)
class ConnectionLimits:
    """What one port grants each connection (tests shorten the times)."""

    # Connections in all, counted from accept.
    connections: int
    # From a request's first byte to its body's last.
    request_seconds: float
    # Between requests (and before the first).
    idle_seconds: float
    max_headers: int
    # Served over TLS: from accept to the handshake's end.
    handshake_seconds: float = TLS_HANDSHAKE_SECONDS
    # Bodies read with `read_body` larger than this (or of no stated length) are read
    # `large_bodies` at a time, each turn held until its request is answered. A port that reads
    # none keeps the defaults: every body in turn.
    large_body_bytes: int = 0
    large_bodies: int = 1


def split_address(address: str) -> tuple[str, int]:
    """`:9443` → all interfaces; `127.0.0.1:9443`; `[::1]:9443`."""
    host, _, port = address.rpartition(":")
    return host.strip("[]") or "0.0.0.0", int(port)


async def serve(
    app: web.Application,
    address: str,
    context: ssl.SSLContext | None,
    what: str,
    ready: asyncio.Event | None = None,
    *,
    limits: ConnectionLimits,
) -> None:
    """Serves `app` at `address` until cancelled, over HTTPS with `context` (plain HTTP
    without), each connection within `limits` (`one_request_at_a_time` made its first
    middleware); `what` names the port in logs and metrics; `ready` is set once it listens."""
    app.middlewares.insert(0, one_request_at_a_time)
    runner = web.AppRunner(
        app,
        access_log=None,
        # aiohttp's own idle timer, the same as ours (its default is an hour).
        keepalive_timeout=limits.idle_seconds,
        max_line_size=MAX_HEADER_BYTES,
        max_field_size=MAX_HEADER_BYTES,
        max_headers=limits.max_headers,
        # A body left unread (a request refused, 403 or 413) ends its connection with the
        # answer: aiohttp would read and drop the rest for 10 s, holding the request and its head
        # even once the peer has gone, out of any count.
        lingering_time=0,
    )
    await runner.setup()
    try:
        host, port = split_address(address)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        # The listening socket is ours, as the kubelet port's: each connection is counted when
        # it is accepted, before any TLS (an asyncio server would start TLS on its own first).
        with socket.create_server((host, port), family=family, backlog=1024) as listening:
            listening.setblocking(False)
            assert runner.server is not None
            listener = Listener(what, limits, runner.server, context)
            log.info(f"{what} listening", address=f"{host}:{port}")
            if ready is not None:
                ready.set()
            await listener.accept(listening)
    finally:
        await runner.cleanup()


ConnectionState = Literal["handshake", "idle", "reading", "answering"]


class Listener:
    """The connections of one port: counted from accept, at most `limits.connections` of them;
    at the cap the one waiting longest (in its TLS handshake, idle, or sending its request) is
    closed to make room, and only if every one is being answered is the new one refused. Each
    `Connection` keeps its own deadlines."""

    def __init__(
        self,
        what: str,
        limits: ConnectionLimits,
        http: Callable[[], asyncio.Protocol],
        context: ssl.SSLContext | None,
    ) -> None:
        self.what = what
        self.limits = limits
        self.http = http  # aiohttp's protocol for a new connection
        self.context = context
        self.connections: set[Connection] = set()
        # Those not being answered, the one waiting longest first.
        self.waiting: dict[Connection, None] = {}
        self.large_bodies = asyncio.Semaphore(limits.large_bodies)
        self._handshakes = BackgroundTasks(f"{what}-handshakes")

    async def accept(self, listening: socket.socket) -> None:
        """Accepts connections on `listening` until cancelled."""
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    connected, _ = await loop.sock_accept(listening)
                except OSError as error:
                    # Out of file descriptors, or a connection reset before it was accepted:
                    # the port stays open for the next one.
                    CONNECTIONS_CLOSED.labels(self.what, "accept-failed").inc()
                    log.warning("cannot accept a connection", listener=self.what, error=str(error))
                    await asyncio.sleep(ACCEPT_RETRY)
                    continue
                self._open(connected)
        finally:
            # Those past their handshake are aiohttp's to close (the runner's cleanup lets the
            # requests being answered finish).
            self._handshakes.cancel()

    def _open(self, connected: socket.socket) -> None:
        if len(self.connections) >= self.limits.connections:
            longest = next(iter(self.waiting), None)
            if longest is None:
                CONNECTIONS_CLOSED.labels(self.what, "at-capacity").inc()
                connected.close()
                return
            self.close(longest, "waited-longest")
        connection = Connection(self, self.http())
        self.connections.add(connection)
        self.waits(connection)
        connection.handshake = self._handshakes.start(self._handshake(connection, connected))

    async def _handshake(self, connection: Connection, connected: socket.socket) -> None:
        """The connection handed to the event loop: over TLS, once its handshake is done."""
        loop = asyncio.get_running_loop()
        try:
            await loop.connect_accepted_socket(
                lambda: connection,
                connected,
                ssl=self.context,
                ssl_handshake_timeout=self.limits.handshake_seconds if self.context else None,
            )
        except OSError:  # ssl.SSLError, a reset, the handshake's deadline (the socket is closed)
            if connection in self.connections:
                self.forget(connection)
                reason = "tls-handshake" if self.context else "accept-failed"
                CONNECTIONS_CLOSED.labels(self.what, reason).inc()

    def waits(self, connection: Connection) -> None:
        """`connection` waits from now on (last in line to be closed for room)."""
        if connection in self.connections:
            self.waiting.pop(connection, None)
            self.waiting[connection] = None

    def answers(self, connection: Connection) -> None:
        self.waiting.pop(connection, None)

    def forget(self, connection: Connection) -> None:
        self.connections.discard(connection)
        self.waiting.pop(connection, None)

    def close(self, connection: Connection, reason: str) -> None:
        """Closes `connection` now, out of the count at once."""
        if connection in self.connections:
            CONNECTIONS_CLOSED.labels(self.what, reason).inc()
        self.forget(connection)
        connection.abort()


class Connection(asyncio.Protocol):
    """One accepted connection, in front of aiohttp's protocol for it (`http`), keeping the
    deadlines aiohttp does not: idle for `idle_seconds` at most, and once a request's first byte
    is in, its head and body within `request_seconds`. One request at a time, as vk's callers
    send them (the API server, Prometheus and the kubelet's probes: Go's client writes the next
    only once it has read the answer): a byte that comes while one is answered, or while its
    answer is not taken, ends the connection, so that no client piles requests up behind an
    answer it does not read."""

    def __init__(self, listener: Listener, http: asyncio.Protocol) -> None:
        self.listener = listener
        self.http = http
        self.transport: asyncio.Transport | None = None
        self.handshake: asyncio.Task[None] | None = None
        self.state: ConnectionState = "handshake"
        self.deadline = 0.0  # of the request being read (the event loop's time)
        self.holds_large_body = False
        self._timer: asyncio.TimerHandle | None = None
        self._writing_paused = False

    # The protocol, passed on to aiohttp's.

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        self.http.connection_made(transport)
        self._enter("idle")

    def data_received(self, data: bytes) -> None:
        if self.state == "answering" or self._writing_paused:
            self.listener.close(self, "pipelined")
            return
        if self.state == "idle":
            self._enter("reading")
        self.http.data_received(data)

    def eof_received(self) -> bool | None:
        return self.http.eof_received()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self.http.pause_writing()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self.http.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        self._cancel_timer()
        self.listener.forget(self)
        self.http.connection_lost(exc)

    # What the requests tell it (`one_request_at_a_time`, `read_body`).

    def dispatched(self, has_body: bool) -> None:
        if self.state == "idle":  # parsed along with the request before it
            self._enter("reading")
        if not has_body:
            self._enter("answering")

    async def read_body(self, request: web.BaseRequest) -> bytes:
        """The body, within the request's deadline; a large one once one of the listener's
        turns for large bodies is free (held until it is answered)."""
        length = request.content_length
        limits = self.listener.limits
        try:
            async with asyncio.timeout_at(self.deadline):
                large = length is None or length > limits.large_body_bytes
                if large and not self.holds_large_body:
                    await self.listener.large_bodies.acquire()
                    self.holds_large_body = True
                body = await request.read()
        except (TimeoutError, ConnectionError) as error:
            raise web.HTTPRequestTimeout(text="the request did not come in time") from error
        self._enter("answering")
        return body

    def answered(self) -> None:
        if self.holds_large_body:
            self.holds_large_body = False
            self.listener.large_bodies.release()
        self._enter("idle")

    def abort(self) -> None:
        self._cancel_timer()
        if self.transport is not None:
            self.transport.abort()
        elif self.handshake is not None:
            self.handshake.cancel()

    def _enter(self, state: ConnectionState) -> None:
        self._cancel_timer()
        self.state = state
        if self not in self.listener.connections:  # closed: no more deadlines
            return
        if state == "answering":
            self.listener.answers(self)
            return
        loop = asyncio.get_running_loop()
        if state == "reading":
            self.deadline = loop.time() + self.listener.limits.request_seconds
            self._timer = loop.call_at(self.deadline, self.listener.close, self, "request-timeout")
        else:
            seconds = self.listener.limits.idle_seconds
            self._timer = loop.call_later(seconds, self.listener.close, self, "idle")
        self.listener.waits(self)

    def _cancel_timer(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


def connection_of(request: web.BaseRequest) -> Connection | None:
    protocol = request.transport.get_protocol() if request.transport is not None else None
    return protocol if isinstance(protocol, Connection) else None


@web.middleware
async def one_request_at_a_time(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    """Tells the request's connection when a request starts and when it is answered."""
    connection = connection_of(request)
    if connection is None:
        return await handler(request)
    connection.dispatched(request.body_exists)
    try:
        return await handler(request)
    finally:
        connection.answered()


async def read_body(request: web.BaseRequest, max_bytes: int) -> bytes:
    """The request's body, within its connection's deadline: 413 at once if its Content-Length
    says more than `max_bytes` (aiohttp's `client_max_size` stops a chunked one there too)."""
    length = request.content_length
    if length is not None and length > max_bytes:
        raise web.HTTPRequestEntityTooLarge(max_size=max_bytes, actual_size=length)
    connection = connection_of(request)
    return await (request.read() if connection is None else connection.read_body(request))
