"""HTTP/1.1 to one API server, lean: the transport under `KubeClient` (issue 20).

A virtual kubelet sends about five requests for every pod it offloads and takes in about ten
watch events. Through aiohttp's client session a request cost half as much CPU again as it does
here, and a watch event a fifth more (timed in one process against the playground: 0.33 ms
against 0.22 per ConfigMap created, 0.22 against 0.18 per pod event). What vk needs of HTTP is
small: requests with a body known in full, answered with a body read in full, or a watch read
as it comes; kept-alive connections to one server, over TLS, perhaps through an HTTP proxy (a
kubeconfig's `proxy-url`). That is all this module does.

Every answer is untrusted input (a provider's API server is the provider's): its head is bounded
in size, its framing checked, and anything unexpected ends the connection with a
`ProtocolError`, never with a connection left in an unknown state for the next request.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
import time
import zlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import cast
from urllib.parse import unquote, urlsplit

# A response head (status line and headers) larger than this is refused: Go's net/http
# writes at most a few KiB of headers, and a larger head would be held whole before it is read.
MAX_HEAD_BYTES = 64 * 1024
# A chunk-size line or a trailer line longer than this is not HTTP.
MAX_LINE_BYTES = 4096
# An answer read whole is refused past this size (inflated, if gzipped: a small bomb inflates a
# thousandfold): a page of 500 objects at etcd's limit of 1.5 MiB each is 750 MiB. The default,
# for the home API server, which is trusted; a provider's gets far less (`Endpoint(max_body=)`,
# vk/kube/client.py's PROVIDER_MAX_BODY_BYTES): decoded, JSON takes many times its size.
MAX_BODY_BYTES = 1024 * 1024 * 1024
# Of an error answer, only this much is read (the rest is not, and the connection is closed):
# a message is for a log and a condition, and a hostile server's 200 MiB error page must not
# become a 200 MiB message.
MAX_ERROR_BODY_BYTES = 64 * 1024
# A Content-Length of more digits than this is refused: 19 digits hold any size a body may
# have, and Python refuses to read an int of over 4300 digits with a ValueError.
MAX_CONTENT_LENGTH_DIGITS = 19
# An idle connection is used again for this long at most. An API server closes those idle
# longer (kube-apiserver after 90 s): a request sent on one just as it does is lost.
IDLE_SECONDS = 30.0
# Requests to one server at once, each on a connection of its own (watches apart: `stream`).
MAX_REQUESTS_IN_FLIGHT = 100
# A streamed answer's bytes not yet taken by its reader beyond which the socket is not read.
STREAM_HIGH_WATER = 1024 * 1024
# Methods a request may be sent again for when a kept-alive connection turns out closed before
# any answer came (RFC 9110 §9.2.2; Go's transport does the same).
IDEMPOTENT = frozenset({"GET", "HEAD", "PUT", "DELETE", "OPTIONS"})


class ProtocolError(ConnectionError):
    """The server's answer is not well-formed HTTP/1.1 (or is beyond a bound): the connection
    is closed. A ConnectionError, so that every caller that retries a connection failure
    retries this."""


class BodyTooLarge(ProtocolError):
    """An answer's body over the bound its reader set: a caller that can ask for less (a
    smaller page of a list) does."""


@dataclass(frozen=True)
class Head:
    status: int
    headers: dict[str, str]  # names lower-cased; repeated ones joined by ", "


def parse_head(raw: bytes) -> Head:
    """A response head (without its blank line): the status line and headers. Parsed as text,
    which is four times as fast as bytes here (it runs for every request)."""
    status_line, *lines = raw.decode("latin-1").split("\r\n")
    version, _, rest = status_line.partition(" ")
    code = rest[:3]
    if (
        not version.startswith("HTTP/1.")
        or not (code.isascii() and code.isdigit())
        or rest[3:4] not in ("", " ")
    ):
        raise ProtocolError(f"not an HTTP/1.1 status line: {status_line[:100]!r}")
    headers: dict[str, str] = {}
    for line in lines:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip():
            raise ProtocolError(f"not a header line: {line[:100]!r}")
        key = name.lower()
        value = value.strip()
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    if version == "HTTP/1.0" and "keep-alive" not in headers.get("connection", "").lower():
        headers.setdefault("connection", "close")
    return Head(int(code), headers)


class ResponseParser:
    """One response read from the bytes of a connection, as they come (`feed`): its head, then
    its body unframed (Content-Length, chunked, or until the connection closes), in `body`
    until taken. Bytes after the response's end are a protocol error: vk never pipelines."""

    def __init__(self, *, bodiless: bool = False) -> None:
        """`bodiless`: the answer to a CONNECT or a HEAD, which has no body whatever its head
        says."""
        self.head: Head | None = None
        self.body = bytearray()
        self.done = False
        self._bodiless = bodiless
        self._started = False
        self._buffer = bytearray()
        self._state = "head"
        self._remaining = 0  # of the body (Content-Length) or of the chunk being read

    def feed(self, data: bytes) -> None:
        if self.done:
            if data:
                raise ProtocolError("bytes after the end of the answer")
            return
        self._started = self._started or bool(data)
        self._buffer += data
        while self._step():
            pass

    def feed_eof(self) -> None:
        """The connection closed: the end of a body read until then; else a ProtocolError
        if the answer is not whole."""
        if self._state == "until-close":
            self.body += self._buffer
            self._buffer.clear()
            self._finish()
        elif not self.done:
            raise ProtocolError("the connection closed before the answer ended")

    @property
    def started(self) -> bool:
        """Whether any byte of the answer came."""
        return self._started

    def take_body(self) -> bytes:
        body = bytes(self.body)
        self.body.clear()
        return body

    @property
    def keep_alive(self) -> bool:
        """Whether the connection may carry another request once this answer is read."""
        return (
            self.done
            and self._state != "closed"
            and self.head is not None
            and "close" not in self.head.headers.get("connection", "").lower()
        )

    def _step(self) -> bool:
        """Advances by one part of the answer if the buffer holds it: whether it did."""
        buffer = self._buffer
        if self._state == "head":
            end = buffer.find(b"\r\n\r\n")
            if end < 0:
                if len(buffer) > MAX_HEAD_BYTES:
                    raise ProtocolError(f"an answer's head over {MAX_HEAD_BYTES} bytes")
                return False
            if end > MAX_HEAD_BYTES:
                raise ProtocolError(f"an answer's head over {MAX_HEAD_BYTES} bytes")
            head = parse_head(bytes(buffer[:end]))
            del buffer[: end + 4]
            if 100 <= head.status < 200:
                return True  # an interim answer (100 Continue): the real one follows
            self.head = head
            self._start_body(head)
            return True
        if self._state == "length":
            taken = buffer[: self._remaining]
            self.body += taken
            del buffer[: len(taken)]
            self._remaining -= len(taken)
            if self._remaining == 0:
                self._finish()
            return False
        if self._state == "until-close":
            self.body += buffer
            buffer.clear()
            return False
        if self._state == "chunk-size":
            line = self._line()
            if line is None:
                return False
            size_text = line.split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise ProtocolError(f"not a chunk size: {line[:100]!r}") from None
            if size < 0 or size_text.startswith((b"+", b"-", b"0x", b"0X")):
                raise ProtocolError(f"not a chunk size: {line[:100]!r}")
            self._remaining = size
            self._state = "chunk-data" if size else "trailers"
            return True
        if self._state == "chunk-data":
            if self._remaining:
                taken = buffer[: self._remaining]
                self.body += taken
                del buffer[: len(taken)]
                self._remaining -= len(taken)
                if self._remaining:
                    return False
            if len(buffer) < 2:
                return False
            if buffer[:2] != b"\r\n":
                raise ProtocolError("a chunk not ended by CRLF")
            del buffer[:2]
            self._state = "chunk-size"
            return True
        # trailers: lines until a blank one
        line = self._line()
        if line is None:
            return False
        if not line:
            self._finish()
        return not self.done

    def _start_body(self, head: Head) -> None:
        encoding = head.headers.get("transfer-encoding", "").lower()
        length = head.headers.get("content-length")
        if self._bodiless or head.status in (204, 304):
            self._finish()
        elif encoding:
            if encoding != "chunked":
                raise ProtocolError(f"a transfer encoding vk does not read: {encoding[:100]!r}")
            self._state = "chunk-size"
        elif length is not None:
            if (
                not (length.isascii() and length.isdigit())  # "²" is a digit to Python
                or len(length) > MAX_CONTENT_LENGTH_DIGITS
            ):
                raise ProtocolError(f"not a Content-Length: {length[:100]!r}")
            self._remaining = int(length)
            self._state = "length"
            if self._remaining == 0:
                self._finish()
        else:
            self._state = "until-close"

    def _line(self) -> bytes | None:
        end = self._buffer.find(b"\r\n")
        if end < 0:
            if len(self._buffer) > MAX_LINE_BYTES:
                raise ProtocolError(f"a chunked framing line over {MAX_LINE_BYTES} bytes")
            return None
        if end > MAX_LINE_BYTES:
            raise ProtocolError(f"a chunked framing line over {MAX_LINE_BYTES} bytes")
        line = bytes(self._buffer[:end])
        del self._buffer[: end + 2]
        return line

    def _finish(self) -> None:
        if self._state == "until-close":
            self._state = "closed"
        self.done = True
        if self._buffer:
            raise ProtocolError("bytes after the end of the answer")


class _Connection(asyncio.Protocol):
    """One connection: at most one request on it at a time, its answer parsed as it comes and
    its reader woken whenever there is more of it."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser: ResponseParser | None = None
        self.failure: BaseException | None = None  # why the connection can carry no more
        self.idle_since = 0.0
        self.reused = False
        self.tls_generation = 0  # the Endpoint's TLS settings it was opened with (renew_tls)
        self._wake: asyncio.Future[None] | None = None
        self._paused = False
        self._last_read = 0.0
        self._read_timeout: float | None = None
        self._watchdog: asyncio.TimerHandle | None = None

    # asyncio.Protocol

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport's subclasses, but have its methods.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._last_read = time.monotonic()
        if self.parser is None:
            self._fail(ProtocolError("bytes from the server when no request was sent"))
            return
        try:
            self.parser.feed(data)
        except ProtocolError as error:
            self._fail(error)
            return
        except ValueError as error:  # a head no check foresaw: never out of data_received
            self._fail(ProtocolError(f"an answer vk cannot read: {error}"))
            return
        if len(self.parser.body) > STREAM_HIGH_WATER and not self._paused:
            assert self.transport is not None
            self._paused = True
            self.transport.pause_reading()
        self._notify()

    def eof_received(self) -> bool:
        self._ended(None)
        return False  # the transport closes itself

    def connection_lost(self, exc: Exception | None) -> None:
        self._ended(exc)

    # used by Endpoint

    @property
    def usable(self) -> bool:
        return (
            self.failure is None
            and self.transport is not None
            and not self.transport.is_closing()
            and time.monotonic() - self.idle_since < IDLE_SECONDS
        )

    def watch_reads(self, timeout: float | None) -> None:
        """Fails the connection with a TimeoutError once nothing has come for `timeout`
        seconds (None: no more). One timer for the whole stream, looked at when it fires:
        a timer set again for every chunk costs every watch event."""
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        self._read_timeout = timeout
        if timeout is not None:
            self._last_read = time.monotonic()
            self._watchdog = asyncio.get_running_loop().call_later(timeout, self._check_reads)

    def _check_reads(self) -> None:
        assert self._read_timeout is not None
        quiet = time.monotonic() - self._last_read
        if self._paused or quiet < self._read_timeout:  # paused: the reader is behind, not it
            delay = self._read_timeout - quiet if not self._paused else self._read_timeout
            self._watchdog = asyncio.get_running_loop().call_later(delay, self._check_reads)
            return
        self._watchdog = None
        self._fail(TimeoutError(f"nothing read for {self._read_timeout:.0f} s"))

    def send(self, data: bytes, *, bodiless: bool = False) -> None:
        assert self.transport is not None
        self.parser = ResponseParser(bodiless=bodiless)  # first: no answer yet, whatever comes
        if self.failure is not None:
            raise ConnectionResetError(f"the connection is closed: {self.failure}")
        self.transport.write(data)

    async def head(self) -> Head:
        parser = self._parser()
        while parser.head is None:
            await self._progress()
        return parser.head

    async def chunk(self) -> bytes | None:
        """The answer's body that came since the last call, waiting for some; None at its
        end."""
        parser = self._parser()
        while not parser.body and not parser.done:
            await self._progress()
        if not parser.body:
            return None
        body = parser.take_body()
        if self._paused:
            assert self.transport is not None
            self._paused = False
            self.transport.resume_reading()
        return body

    def close(self) -> None:
        if self.failure is None:
            self.failure = ConnectionResetError("closed by vk")
        if self.transport is not None:
            self.transport.close()

    def _parser(self) -> ResponseParser:
        assert self.parser is not None
        return self.parser

    async def _progress(self) -> None:
        if self.failure is not None:
            raise self.failure
        self._wake = asyncio.get_running_loop().create_future()
        try:
            await self._wake
        finally:
            self._wake = None

    def _notify(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    def _ended(self, exc: Exception | None) -> None:
        if self.failure is not None:
            self._notify()
            return
        parser = self.parser
        if parser is not None and not parser.done:
            try:
                parser.feed_eof()
            except ProtocolError as error:
                self._fail(exc or error)
                return
        self.failure = exc or ConnectionResetError("the server closed the connection")
        self._notify()

    def _fail(self, error: BaseException) -> None:
        self.failure = error
        if self.transport is not None:
            self.transport.close()
        if self._wake is not None and not self._wake.done():
            self._wake.set_exception(error)


@dataclass
class Answer:
    """An answer being read: its head, and its body to read whole (`read`) or as it comes
    (`chunks`)."""

    status: int
    headers: dict[str, str]
    _connection: _Connection
    _inflate: zlib._Decompress | None = field(default=None, repr=False)

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body as it comes (a stream's: never compressed, since vk does not ask)."""
        while (chunk := await self._connection.chunk()) is not None:
            yield chunk

    async def read(self, limit: int) -> bytes:
        """The whole body, or BodyTooLarge past `limit` bytes (bounded in time by the caller,
        not per chunk: the cost of a timer per chunk shows on every request)."""
        body, whole = await self._read_up_to(limit)
        if not whole:
            inflated = ", inflated" if self._inflate is not None else ""
            raise BodyTooLarge(f"an answer over {limit} bytes{inflated}")
        return body

    async def read_start(self, limit: int) -> bytes:
        """The body's first `limit` bytes at most (an error's: enough to say what it is); the
        rest is left unread, and the connection is then not used again."""
        body, _ = await self._read_up_to(limit)
        return body[:limit]

    async def _read_up_to(self, limit: int) -> tuple[bytes, bool]:
        """The body up to just past `limit` bytes, and whether that is all of it."""
        parts = []
        size = 0
        while (chunk := await self._connection.chunk()) is not None:
            if self._inflate is not None:
                try:
                    chunk = self._inflate.decompress(chunk, limit + 1 - size)
                except zlib.error as error:
                    raise ProtocolError(f"an answer said gzipped is not: {error}") from None
            size += len(chunk)
            parts.append(chunk)
            if size > limit or (self._inflate is not None and self._inflate.unconsumed_tail):
                return b"".join(parts), False
        return b"".join(parts), True


@dataclass(frozen=True)
class Proxy:
    host: str
    port: int
    tls: bool
    authorization: str | None  # Basic, from the URL's user and password


def proxy_of(url: str) -> Proxy:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"a proxy-url must be http:// or https://, not {url[:100]!r}")
    authorization = None
    if parts.username is not None:
        user_password = f"{unquote(parts.username)}:{unquote(parts.password or '')}"
        authorization = "Basic " + base64.b64encode(user_password.encode()).decode()
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return Proxy(parts.hostname, port, parts.scheme == "https", authorization)


class Endpoint:
    """Kept-alive HTTP/1.1 connections to one server (`base`: its URL, whose path, if any,
    prefixes every request's), through a proxy if given, over TLS if `ssl_context`; answers
    read whole refused past `max_body` bytes."""

    def __init__(
        self,
        base: str,
        *,
        ssl_context: ssl.SSLContext | None,
        server_hostname: str | None = None,
        proxy_url: str | None = None,
        max_requests_in_flight: int = MAX_REQUESTS_IN_FLIGHT,
        max_body: int = MAX_BODY_BYTES,
    ) -> None:
        parts = urlsplit(base)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http:// or https:// server: {base[:100]!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.authority = parts.netloc.rpartition("@")[2]
        if parts.scheme == "https" and ssl_context is None:
            ssl_context = ssl.create_default_context()  # https is never sent in the clear
        self.ssl_context = ssl_context if parts.scheme == "https" else None
        self.server_hostname = server_hostname or self.host
        self.proxy = proxy_of(proxy_url) if proxy_url else None
        self.max_body = max_body
        self._idle: list[_Connection] = []
        self._open: set[_Connection] = set()
        self._slots = asyncio.Semaphore(max_requests_in_flight)
        self._tls_generation = 0

    def renew_tls(self, ssl_context: ssl.SSLContext) -> None:
        """New connections handshake with `ssl_context` (a client certificate renewed). Those
        opened before presented the one before, which the server may refuse now: none carries
        another request (a watch on one runs on to its end)."""
        self.ssl_context = ssl_context
        self._tls_generation += 1
        for connection in self._idle:
            self._drop(connection)
        self._idle.clear()

    async def close(self) -> None:
        for connection in list(self._open):
            connection.close()
        self._open.clear()
        self._idle.clear()

    async def request(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        body: bytes | None,
    ) -> tuple[Answer, bytes]:
        """The answer to one request, read whole. `target`: the path and query. A caller
        bounds it in time (asyncio.timeout): the connection is closed if it is cut short."""
        async with self._slots:
            data = self._encode(method, target, headers, body, gzip=True)
            for attempt in range(2):
                connection = await self._connection(fresh=attempt > 0)
                try:
                    connection.send(data, bodiless=method == "HEAD")
                    head = await connection.head()
                    answer = self._answer(head, connection, gzip=True)
                    if head.status >= 400:
                        content = await answer.read_start(MAX_ERROR_BODY_BYTES)
                    else:
                        content = await answer.read(self.max_body)
                except BaseException as error:
                    self._drop(connection)
                    if attempt == 0 and self._may_send_again(method, connection, error):
                        continue
                    raise
                self._release(connection)
                return answer, content
        raise AssertionError("unreachable")

    @contextlib.asynccontextmanager
    async def stream(
        self,
        method: str,
        target: str,
        headers: dict[str, str],
        *,
        connect_timeout: float,
        read_timeout: float,
    ) -> AsyncIterator[Answer]:
        """An answer read as it comes (a watch), on a connection of its own until it ends.
        Not counted against `max_requests_in_flight`: a process has as many watches as
        informers, and a watch held must never keep a request waiting for a connection."""
        data = self._encode(method, target, headers, None, gzip=False)
        for attempt in range(2):
            async with asyncio.timeout(connect_timeout):
                connection = await self._connection(fresh=attempt > 0)
            connection.watch_reads(read_timeout)
            try:
                connection.send(data)
                head = await connection.head()
                answer = self._answer(head, connection, gzip=False)
            except BaseException as error:
                connection.watch_reads(None)
                self._drop(connection)
                if attempt == 0 and self._may_send_again(method, connection, error):
                    continue
                raise
            break
        try:
            yield answer
        except BaseException:
            self._drop(connection)
            raise
        finally:
            connection.watch_reads(None)
        parser = connection.parser
        if parser is not None and parser.done:
            self._release(connection)
        else:  # left before its end
            self._drop(connection)

    @staticmethod
    def _may_send_again(method: str, connection: _Connection, error: BaseException) -> bool:
        """Whether a request that failed may be sent again on a new connection: a kept-alive
        connection the server had closed just before, with nothing read back, so nothing
        done if the method may be sent twice (RFC 9110 §9.2.2)."""
        parser = connection.parser
        return (
            isinstance(error, ConnectionError)
            and connection.reused
            and method in IDEMPOTENT
            and (parser is None or not parser.started)
        )

    def _answer(self, head: Head, connection: _Connection, *, gzip: bool) -> Answer:
        inflate = None
        encoding = head.headers.get("content-encoding", "").lower()
        if encoding == "gzip" and gzip:
            inflate = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
        elif encoding not in ("", "identity"):
            raise ProtocolError(f"a content encoding vk did not ask for: {encoding[:100]!r}")
        return Answer(head.status, head.headers, connection, inflate)

    def _encode(
        self, method: str, target: str, headers: dict[str, str], body: bytes | None, *, gzip: bool
    ) -> bytes:
        for name, value in headers.items():
            if "\r" in name or "\n" in name or "\r" in value or "\n" in value:
                raise ValueError(f"a line break in the value of header {name[:100]!r}")
        lines = [f"{method} {self.prefix}{target} HTTP/1.1", f"Host: {self.authority}"]
        lines.extend(f"{name}: {value}" for name, value in headers.items())
        if gzip:
            lines.append("Accept-Encoding: gzip")
        if body is not None:
            lines.append(f"Content-Length: {len(body)}")
        head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
        return head + body if body else head

    async def _connection(self, *, fresh: bool = False) -> _Connection:
        """An idle connection still usable, or a new one (`fresh`: a new one)."""
        while self._idle and not fresh:
            connection = self._idle.pop()
            if connection.usable:
                connection.reused = True
                return connection
            self._drop(connection)
        connection = await self._connect()
        self._open.add(connection)
        return connection

    def _release(self, connection: _Connection) -> None:
        parser = connection.parser
        if (
            parser is not None
            and parser.keep_alive
            and connection.failure is None
            and connection.tls_generation == self._tls_generation
        ):
            connection.idle_since = time.monotonic()
            self._idle.append(connection)
        else:
            self._drop(connection)

    def _drop(self, connection: _Connection) -> None:
        connection.close()
        self._open.discard(connection)

    async def _connect(self) -> _Connection:
        """A new connection, or a ConnectionError that says where it could not go (a name
        not found and a certificate refused are OSErrors of other kinds)."""
        where = f"{self.host}:{self.port}"
        if self.proxy is not None:
            where += f" through the proxy {self.proxy.host}:{self.proxy.port}"
        try:
            connection = await self._opened()
        except OSError as error:
            raise ConnectionError(f"cannot connect to {where}: {error}") from error
        connection.idle_since = time.monotonic()
        connection.tls_generation = self._tls_generation
        return connection

    async def _opened(self) -> _Connection:
        loop = asyncio.get_running_loop()
        if self.proxy is None:
            _, connection = await loop.create_connection(
                _Connection,
                self.host,
                self.port,
                ssl=self.ssl_context,
                server_hostname=self.server_hostname if self.ssl_context else None,
            )
            return connection
        proxy = self.proxy
        _, connection = await loop.create_connection(
            _Connection,
            proxy.host,
            proxy.port,
            ssl=ssl.create_default_context() if proxy.tls else None,
        )
        try:
            await self._tunnel(loop, connection, proxy)
        except BaseException:
            connection.close()
            raise
        return connection

    async def _tunnel(
        self, loop: asyncio.AbstractEventLoop, connection: _Connection, proxy: Proxy
    ) -> None:
        """A CONNECT through the proxy to the server, then TLS to the server inside it."""
        authority = f"{self.host}:{self.port}"
        lines = [f"CONNECT {authority} HTTP/1.1", f"Host: {authority}"]
        if proxy.authorization:
            lines.append(f"Proxy-Authorization: {proxy.authorization}")
        connection.send(("\r\n".join(lines) + "\r\n\r\n").encode("latin-1"), bodiless=True)
        head = await connection.head()
        if not 200 <= head.status < 300:
            raise ConnectionRefusedError(
                f"the proxy {proxy.host}:{proxy.port} refused to connect to {authority}: "
                f"{head.status}"
            )
        connection.parser = None
        if self.ssl_context is not None:
            assert connection.transport is not None
            transport = await loop.start_tls(
                connection.transport,
                connection,
                self.ssl_context,
                server_hostname=self.server_hostname,
            )
            connection.transport = cast(asyncio.Transport, transport)
