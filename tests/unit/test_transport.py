"""vk's HTTP/1.1 transport (vk/kube/transport.py): the response parser on bytes cut every way,
and the connections against small local servers, hostile ones among them."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import gzip
import ssl
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from vk.kube import pki, transport
from vk.kube.client import KubeClient, request_target
from vk.kube.kubeconfig import ClusterConnection
from vk.kube.transport import (
    MAX_ERROR_BODY_BYTES,
    BodyTooLarge,
    Endpoint,
    ProtocolError,
    ResponseParser,
    parse_head,
)

# --- the parser --------------------------------------------------------------------------


def parsed(data: bytes, *, piece: int = 0, eof: bool = False) -> ResponseParser:
    """`data` fed whole, or `piece` bytes at a time."""
    parser = ResponseParser()
    step = piece or len(data) or 1
    for start in range(0, len(data), step):
        parser.feed(data[start : start + step])
    if eof:
        parser.feed_eof()
    return parser


CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"5;name=value\r\nhello\r\n1\r\n \r\n5\r\nworld\r\n0\r\nX-Trailer: t\r\n\r\n"
)


@pytest.mark.parametrize("piece", [0, 1, 2, 7])
def test_a_chunked_body_is_unframed_however_its_bytes_are_cut(piece: int) -> None:
    parser = parsed(CHUNKED, piece=piece)
    assert parser.done
    assert parser.keep_alive
    assert parser.head is not None
    assert parser.head.status == 200
    assert parser.take_body() == b"hello world"


@pytest.mark.parametrize("piece", [0, 1, 3])
def test_a_content_length_body_ends_at_its_length(piece: int) -> None:
    parser = parsed(b"HTTP/1.1 201 Created\r\nContent-Length: 4\r\n\r\n{}\r\n", piece=piece)
    assert parser.done
    assert parser.take_body() == b"{}\r\n"


def test_a_body_without_length_ends_with_the_connection_which_is_not_used_again() -> None:
    parser = parsed(b"HTTP/1.1 200 OK\r\n\r\nall of it", eof=True)
    assert parser.done
    assert parser.take_body() == b"all of it"
    assert not parser.keep_alive


def test_an_interim_answer_is_passed_over_and_a_204_has_no_body() -> None:
    parser = parsed(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n")
    assert parser.head is not None
    assert parser.head.status == 204
    assert parser.done
    assert parser.take_body() == b""


@pytest.mark.parametrize(
    ("head", "keep_alive"),
    [
        (b"HTTP/1.1 200 OK\r\nContent-Length: 0", True),
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 0", False),
        (b"HTTP/1.0 200 OK\r\nConnection: keep-alive\r\nContent-Length: 0", True),
    ],
)
def test_a_connection_is_kept_only_where_the_server_keeps_it(head: bytes, keep_alive: bool) -> None:
    assert parsed(head + b"\r\n\r\n").keep_alive is keep_alive


def test_header_names_are_lower_cased_and_repeated_ones_joined() -> None:
    head = parse_head(
        b"HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nWarning: a\r\nwarning: b"
    )
    assert head.status == 429
    assert head.headers == {"retry-after": "2", "warning": "a, b"}


@pytest.mark.parametrize(
    "data",
    [
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"HTTP/1.1 2000 OK\r\n\r\n",
        b"HTTP/1.1 abc OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon here\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n Folded: header\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
        "HTTP/1.1 200 OK\r\nContent-Length: \u00b2\r\n\r\n".encode("latin-1"),  # a digit to Python
        "HTTP/1.1 \u00b200 OK\r\n\r\n".encode("latin-1"),
        b"HTTP/1.1 200 OK\r\nContent-Length: 1, 2\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n-5\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0x5\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nabXY",
        b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n",  # smuggled
    ],
)
def test_what_is_not_http_is_refused(data: bytes) -> None:
    with pytest.raises(ProtocolError):
        parsed(data)


def test_a_head_without_end_is_refused_past_its_bound_before_it_is_held() -> None:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\n")
    filler = b"X-Filler: " + b"x" * 1014 + b"\r\n"
    for _ in range(transport.MAX_HEAD_BYTES // 1024 - 1):
        parser.feed(filler)  # not whole yet, and under the bound: kept
    with pytest.raises(ProtocolError, match="head over"):
        parser.feed(filler * 2)


def test_an_endless_chunk_size_line_is_refused() -> None:
    parser = parsed(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    with pytest.raises(ProtocolError, match="framing line"):
        parser.feed(b"1" * (transport.MAX_LINE_BYTES + 1))


def test_an_answer_cut_short_by_the_connection_is_an_error() -> None:
    with pytest.raises(ProtocolError, match="before the answer ended"):
        parsed(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nabc", eof=True)


@pytest.mark.parametrize(
    ("path", "params", "target"),
    [
        ("/api/v1/pods", None, "/api/v1/pods"),
        (
            "/api/v1/pods",
            {"labelSelector": "a=b,c!=d"},
            "/api/v1/pods?labelSelector=a%3Db%2Cc%21%3Dd",
        ),
        ("/api/v1/namespaces/a%2Fb/pods", None, "/api/v1/namespaces/a%2Fb/pods"),
        ("/x y\r\nHost: evil", None, "/x%20y%0D%0AHost:%20evil"),
    ],
)
def test_a_request_target_cannot_end_its_request_line(
    path: str, params: dict[str, str] | None, target: str
) -> None:
    assert request_target(path, params) == target


# --- connections, against local servers ----------------------------------------------------

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[bytes, bytes]:
    """One request: its head and its body (vk sends Content-Length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return head, await reader.readexactly(length)


class Server:
    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.requests: list[bytes] = []

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            await self.handler(reader, writer)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()


def answers(*responses: bytes) -> Callable[[Server], Handler]:
    """A handler answering each request with the next of `responses`, on whichever
    connection it comes."""

    def handler_of(server: Server) -> Handler:
        remaining = iter(responses)

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                head, body = await read_request(reader)
                server.requests.append(head + body)
                response = next(remaining, None)
                if response is None:
                    return
                writer.write(response)
                await writer.drain()

        return handle

    return handler_of


async def start(
    make: Callable[[Server], Handler], *, tls: ssl.SSLContext | None = None
) -> tuple[Server, str, asyncio.Server]:
    server = Server(lambda r, w: asyncio.sleep(0))
    server.handler = make(server)
    listening = await asyncio.start_server(server._serve, "127.0.0.1", 0, ssl=tls)
    scheme = "https" if tls else "http"
    return server, f"{scheme}://127.0.0.1:{listening.sockets[0].getsockname()[1]}", listening


NOW = datetime.datetime.now(datetime.UTC)
OK = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
UNAUTHORIZED = b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\n{}"


async def test_requests_share_one_kept_alive_connection() -> None:
    server, base, listening = await start(answers(OK, OK, OK))
    endpoint = Endpoint(base, ssl_context=None)
    for _ in range(3):
        answer, body = await endpoint.request("GET", "/api", {"Accept": "application/json"}, None)
        assert (answer.status, body) == (200, b"{}")
    assert server.connections == 1
    assert server.requests[0].startswith(b"GET /api HTTP/1.1\r\nHost: 127.0.0.1:")
    await endpoint.close()
    listening.close()


async def test_a_body_is_sent_with_its_length_and_a_prefix_of_the_servers_url_kept() -> None:
    server, base, listening = await start(answers(OK))
    endpoint = Endpoint(base + "/k8s/clusters/c-1/", ssl_context=None)
    await endpoint.request("POST", "/api/v1/pods", {}, b'{"a":1}')
    request = server.requests[0]
    assert request.startswith(b"POST /k8s/clusters/c-1/api/v1/pods HTTP/1.1\r\n")
    assert b"\r\nContent-Length: 7\r\n" in request
    assert request.endswith(b'\r\n\r\n{"a":1}')
    await endpoint.close()
    listening.close()


@pytest.mark.parametrize(("method", "sent_again"), [("GET", True), ("POST", False)])
async def test_a_kept_alive_connection_closed_by_the_server_is_retried_only_if_idempotent(
    method: str, sent_again: bool
) -> None:
    """The server answers once, then closes the connection on the next request unanswered,
    as an API server does with one idle past its timeout, just as vk sends on it."""

    def make(server: Server) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head, body = await read_request(reader)
            server.requests.append(head + body)
            writer.write(OK)
            await writer.drain()
            if server.connections == 1:
                head, body = await read_request(reader)  # and closes, unanswered
                server.requests.append(head + body)
            else:
                await reader.read()

        return handle

    server, base, listening = await start(make)
    endpoint = Endpoint(base, ssl_context=None)
    await endpoint.request(method, "/first", {}, b"" if method == "POST" else None)
    if sent_again:
        answer, _ = await endpoint.request(method, "/second", {}, None)
        assert answer.status == 200
        assert server.connections == 2
    else:
        with pytest.raises(ConnectionError):
            await endpoint.request(method, "/second", {}, b"")
        assert [r.split(b" ")[1] for r in server.requests] == [b"/first", b"/second"]
    await endpoint.close()
    listening.close()


async def test_a_watch_on_a_kept_alive_connection_the_server_closed_goes_on_a_new_one() -> None:
    def make(server: Server) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head, _ = await read_request(reader)
            server.requests.append(head)
            if server.connections == 1:
                writer.write(OK)
                await writer.drain()
                server.requests.append((await read_request(reader))[0])  # closes, unanswered
                return
            writer.write(
                b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nev\n\r\n0\r\n\r\n"
            )
            await writer.drain()
            await reader.read()

        return handle

    server, base, listening = await start(make)
    endpoint = Endpoint(base, ssl_context=None)
    await endpoint.request("GET", "/api", {}, None)
    async with endpoint.stream("GET", "/watch", {}, connect_timeout=5, read_timeout=5) as answer:
        assert [chunk async for chunk in answer.chunks()] == [b"ev\n"]
    assert server.connections == 2
    assert [request.split(b" ")[1] for request in server.requests] == [
        b"/api",
        b"/watch",
        b"/watch",
    ]
    await endpoint.close()
    listening.close()


async def test_an_answer_that_breaks_the_protocol_closes_its_connection() -> None:
    server, base, listening = await start(
        answers(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}EXTRA", OK)
    )
    endpoint = Endpoint(base, ssl_context=None)
    with pytest.raises(ProtocolError):
        await endpoint.request("GET", "/a", {}, None)
    answer, _ = await endpoint.request("GET", "/b", {}, None)
    assert answer.status == 200
    assert server.connections == 2
    await endpoint.close()
    listening.close()


async def test_a_gzipped_answer_is_inflated_and_a_bomb_or_a_body_over_its_cap_refused() -> None:
    packed = gzip.compress(b"{" + b" " * 100_000 + b"}")
    response = (
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(packed)
        + packed
    )
    plain = b"HTTP/1.1 200 OK\r\nContent-Length: 20000\r\n\r\n" + b" " * 20_000
    server, base, listening = await start(answers(response, response, plain))
    endpoint = Endpoint(base, ssl_context=None)
    _, body = await endpoint.request("GET", "/list", {}, None)
    assert len(body) == 100_002
    assert b"\r\nAccept-Encoding: gzip\r\n" in server.requests[0]
    await endpoint.close()
    endpoint = Endpoint(base, ssl_context=None, max_body=10_000)
    with pytest.raises(BodyTooLarge, match="inflated"):
        await endpoint.request("GET", "/list", {}, None)
    with pytest.raises(BodyTooLarge, match="over 10000 bytes"):
        await endpoint.request("GET", "/list", {}, None)
    await endpoint.close()
    listening.close()


async def test_an_answer_said_gzipped_that_is_not_is_a_protocol_error() -> None:
    _, base, listening = await start(
        answers(b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\nnope")
    )
    endpoint = Endpoint(base, ssl_context=None)
    with pytest.raises(ProtocolError, match="said gzipped"):
        await endpoint.request("GET", "/list", {}, None)
    await endpoint.close()
    listening.close()


async def test_a_header_value_with_a_line_break_is_never_sent() -> None:
    server, base, listening = await start(answers(OK))
    endpoint = Endpoint(base, ssl_context=None)
    with pytest.raises(ValueError, match="line break"):
        await endpoint.request("GET", "/", {"Authorization": "Bearer x\r\nX-Evil: 1"}, None)
    assert server.requests == []
    await endpoint.close()
    listening.close()


async def test_a_stream_comes_as_it_is_written_and_ends_when_the_server_goes_quiet() -> None:
    release = asyncio.Event()

    def make(server: Server) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await read_request(reader)
            writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
            writer.write(b"6\r\nfirst\n\r\n")
            await writer.drain()
            await release.wait()
            writer.write(b"7\r\nsecond\n\r\n")
            await writer.drain()
            await asyncio.sleep(10)  # then nothing

        return handle

    _, base, listening = await start(make)
    endpoint = Endpoint(base, ssl_context=None)
    received = []

    async def follow() -> None:
        async with endpoint.stream(
            "GET", "/watch", {}, connect_timeout=5, read_timeout=0.3
        ) as answer:
            async for chunk in answer.chunks():
                received.append(chunk)
                release.set()

    with pytest.raises(TimeoutError):
        await follow()
    assert received == [b"first\n", b"second\n"]
    await endpoint.close()
    listening.close()


async def test_a_stream_that_ends_leaves_its_connection_for_the_next_request() -> None:
    stream = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nab\n\r\n0\r\n\r\n"
    server, base, listening = await start(answers(stream, OK))
    endpoint = Endpoint(base, ssl_context=None)
    async with endpoint.stream("GET", "/w", {}, connect_timeout=5, read_timeout=5) as answer:
        assert [chunk async for chunk in answer.chunks()] == [b"ab\n"]
    await endpoint.request("GET", "/next", {}, None)
    assert server.connections == 1
    await endpoint.close()
    listening.close()


def tunnelling_proxy(target_base: str, tunnels: list[bytes]) -> Handler:
    """A proxy that takes any CONNECT (each one's head kept in `tunnels`) to `target_base`."""

    async def proxy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tunnels.append(await reader.readuntil(b"\r\n\r\n"))
        host, port = target_base.partition("://")[2].split(":")
        upstream_reader, upstream_writer = await asyncio.open_connection(host, int(port))
        writer.write(b"HTTP/1.1 200 Connection established\r\n\r\n")

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError):
                while data := await source.read(65536):
                    sink.write(data)
            sink.close()

        await asyncio.gather(pipe(reader, upstream_writer), pipe(upstream_reader, writer))

    return proxy


async def test_requests_go_through_a_proxy_by_connect_with_its_credentials() -> None:
    target, target_base, target_listening = await start(answers(OK))
    tunnels: list[bytes] = []
    proxy_listening = await asyncio.start_server(
        tunnelling_proxy(target_base, tunnels), "127.0.0.1", 0
    )
    proxy_port = proxy_listening.sockets[0].getsockname()[1]
    endpoint = Endpoint(
        target_base, ssl_context=None, proxy_url=f"http://vk:s%40cret@127.0.0.1:{proxy_port}"
    )
    answer, body = await endpoint.request("GET", "/api", {}, None)
    assert (answer.status, body) == (200, b"{}")
    authority = target_base.removeprefix("http://").encode()
    assert tunnels[0].startswith(b"CONNECT " + authority + b" HTTP/1.1\r\n")
    credentials = base64.b64encode(b"vk:s@cret")
    assert b"\r\nProxy-Authorization: Basic " + credentials + b"\r\n" in tunnels[0]
    assert target.requests[0].startswith(b"GET /api HTTP/1.1\r\n")
    await endpoint.close()
    proxy_listening.close()
    target_listening.close()


def serving_context(ca: x509.Certificate, ca_key: Any, name: str, where: Path) -> ssl.SSLContext:
    """A server's TLS context, its certificate for 127.0.0.1 issued by `ca`."""
    issued = pki.issue(ca, ca_key, name, NOW, ip_addresses=("127.0.0.1",), server=True)
    (where / f"{name}.crt").write_bytes(issued.cert_pem)
    (where / f"{name}.key").write_bytes(issued.key_pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(where / f"{name}.crt", where / f"{name}.key")
    return context


async def test_an_https_proxy_carries_tls_to_the_server_inside_its_own(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS to the proxy, then TLS to the API server inside the tunnel (the proxy sees none of
    it), on one connection kept alive; the proxy is trusted as the machine's CAs are."""
    ca, ca_key = pki.build_ca("test-ca", NOW)
    ca_file = tmp_path / "ca.pem"
    ca_file.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_file))  # the machine's CAs, for the proxy
    target, target_base, target_listening = await start(
        answers(OK, OK), tls=serving_context(ca, ca_key, "target", tmp_path)
    )
    tunnels: list[bytes] = []
    proxy_listening = await asyncio.start_server(
        tunnelling_proxy(target_base, tunnels),
        "127.0.0.1",
        0,
        ssl=serving_context(ca, ca_key, "proxy", tmp_path),
    )
    proxy_port = proxy_listening.sockets[0].getsockname()[1]
    endpoint = Endpoint(
        target_base,
        ssl_context=ssl.create_default_context(cafile=ca_file),
        proxy_url=f"https://127.0.0.1:{proxy_port}",
    )
    for _ in range(2):
        answer, body = await endpoint.request("GET", "/api", {}, None)
        assert (answer.status, body) == (200, b"{}")
    assert len(tunnels) == 1
    assert target.connections == 1
    assert [request.split(b"\r\n")[0] for request in target.requests] == [b"GET /api HTTP/1.1"] * 2
    await endpoint.close()
    proxy_listening.close()
    target_listening.close()


async def test_an_https_proxy_whose_certificate_is_not_trusted_is_not_used(
    tmp_path: Path,
) -> None:
    """A proxy in the middle with a certificate of its own making gets no request through it."""
    ca, ca_key = pki.build_ca("not-trusted", NOW)
    tunnels: list[bytes] = []
    proxy_listening = await asyncio.start_server(
        tunnelling_proxy("http://127.0.0.1:1", tunnels),
        "127.0.0.1",
        0,
        ssl=serving_context(ca, ca_key, "proxy", tmp_path),
    )
    proxy_port = proxy_listening.sockets[0].getsockname()[1]
    endpoint = Endpoint(
        "https://10.0.0.1:6443", ssl_context=None, proxy_url=f"https://127.0.0.1:{proxy_port}"
    )
    with pytest.raises(ConnectionError, match="certificate verify failed"):
        await endpoint.request("GET", "/api", {}, None)
    assert tunnels == []
    await endpoint.close()
    proxy_listening.close()


async def test_a_proxy_that_refuses_is_said_to_have_refused() -> None:
    _, proxy_base, proxy_listening = await start(
        answers(b"HTTP/1.1 407 Proxy Authentication Required\r\nContent-Length: 0\r\n\r\n")
    )
    endpoint = Endpoint("https://10.0.0.1:6443", ssl_context=None, proxy_url=proxy_base)
    with pytest.raises(ConnectionError, match=r"refused to connect to 10\.0\.0\.1:6443: 407"):
        await endpoint.request("GET", "/api", {}, None)
    await endpoint.close()
    proxy_listening.close()


async def test_a_server_that_cannot_be_reached_is_named_in_the_error() -> None:
    listening = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = listening.sockets[0].getsockname()[1]
    listening.close()
    await listening.wait_closed()
    endpoint = Endpoint(f"http://127.0.0.1:{port}", ssl_context=None)
    with pytest.raises(ConnectionError, match=f"127.0.0.1:{port}"):
        await endpoint.request("GET", "/", {}, None)


async def test_a_watch_held_open_keeps_no_request_waiting() -> None:
    def make(server: Server) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head, _ = await read_request(reader)
            if b"/watch" in head:
                writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                await writer.drain()
                await reader.read()  # held open
            else:
                writer.write(OK)
                await writer.drain()

        return handle

    _, base, listening = await start(make)
    endpoint = Endpoint(base, ssl_context=None, max_requests_in_flight=1)
    async with endpoint.stream("GET", "/watch", {}, connect_timeout=5, read_timeout=30):
        answer, _ = await asyncio.wait_for(endpoint.request("GET", "/api", {}, None), 5)
        assert answer.status == 200
    await endpoint.close()
    listening.close()


async def test_a_refused_token_is_read_again_from_its_file_and_the_request_sent_once_more(
    tmp_path: Path,
) -> None:
    """The token file rotated, and the old token revoked, within the minute its content is
    kept: one 401, then the new token."""
    accepted = [b"Bearer old\r\n"]

    def make(server: Server) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                head, body = await read_request(reader)
                server.requests.append(head + body)
                writer.write(OK if accepted[0] in head else UNAUTHORIZED)
                await writer.drain()

        return handle

    server, base, listening = await start(make)
    token = tmp_path / "token"
    token.write_text("old")
    async with KubeClient(ClusterConnection(server=base, token_file=token)) as client:
        assert await client.get("/api") == {}
        token.write_text("new")
        accepted[0] = b"Bearer new\r\n"
        assert await client.get("/api") == {}
    sent = [request.split(b"Authorization: Bearer ")[1][:3] for request in server.requests]
    assert sent == [b"old", b"old", b"new"]
    listening.close()


async def test_connections_opened_before_a_tls_renewal_carry_no_further_request(
    tmp_path: Path,
) -> None:
    """A client certificate renewed (`renew_tls`): neither the connection idle then nor the
    one busy then (which finishes its request) carries another: each presented the
    certificate before, which the server may refuse now."""
    ca, ca_key = pki.build_ca("test-ca", NOW)
    answer_slow = asyncio.Event()

    def make(server: Server) -> Handler:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            while True:
                head, body = await read_request(reader)
                server.requests.append(head + body)
                if head.startswith(b"GET /slow "):
                    await answer_slow.wait()
                writer.write(OK)
                await writer.drain()

        return handle

    server, base, listening = await start(make, tls=serving_context(ca, ca_key, "api", tmp_path))
    ca_pem = ca.public_bytes(serialization.Encoding.PEM).decode()
    endpoint = Endpoint(base, ssl_context=ssl.create_default_context(cadata=ca_pem))
    slow = asyncio.create_task(endpoint.request("GET", "/slow", {}, None))
    while not server.requests:
        await asyncio.sleep(0.01)
    await endpoint.request("GET", "/fast", {}, None)  # a second connection, idle after
    assert server.connections == 2
    renewed = ssl.create_default_context(cadata=ca_pem)
    endpoint.renew_tls(renewed)
    answer_slow.set()
    assert (await slow)[0].status == 200
    await asyncio.gather(*(endpoint.request("GET", "/after", {}, None) for _ in range(2)))
    assert server.connections == 4
    assert endpoint.ssl_context is renewed
    await endpoint.close()
    listening.close()


def test_a_content_length_of_thousands_of_digits_is_a_protocol_error() -> None:
    # Python reads no int of over 4300 digits: its ValueError must not escape the parser.
    with pytest.raises(ProtocolError, match="not a Content-Length"):
        parsed(b"HTTP/1.1 200 OK\r\nContent-Length: " + b"1" * 5000 + b"\r\n\r\n")
    with pytest.raises(ProtocolError, match="not a Content-Length"):
        parsed(b"HTTP/1.1 200 OK\r\nContent-Length: " + b"1" * 20 + b"\r\n\r\n")


async def test_an_answer_with_a_content_length_of_thousands_of_digits_fails_its_connection() -> (
    None
):
    huge = b"HTTP/1.1 200 OK\r\nContent-Length: " + b"9" * 5000 + b"\r\n\r\n"
    _, base, listening = await start(answers(huge))
    endpoint = Endpoint(base, ssl_context=None)
    with pytest.raises(ProtocolError):
        await endpoint.request("GET", "/a", {}, None)
    await endpoint.close()
    listening.close()


async def test_only_the_start_of_an_error_answer_is_read_and_its_connection_not_kept() -> None:
    body = b"x" * (1024 * 1024)
    error = b"HTTP/1.1 500 Oops\r\nContent-Length: %d\r\n\r\n" % len(body) + body
    server, base, listening = await start(answers(error, OK))
    endpoint = Endpoint(base, ssl_context=None)
    answer, content = await endpoint.request("GET", "/a", {}, None)
    assert (answer.status, len(content)) == (500, MAX_ERROR_BODY_BYTES)
    answer, content = await endpoint.request("GET", "/b", {}, None)
    assert (answer.status, content, server.connections) == (200, b"{}", 2)
    await endpoint.close()
    listening.close()


async def test_a_retry_after_of_digits_not_ascii_is_waited_as_a_second() -> None:
    # "²" (latin-1 0xb2) is a digit to str.isdigit, and no float.
    busy = b"HTTP/1.1 429 Busy\r\nRetry-After: \xb2\r\nContent-Length: 2\r\n\r\n{}"
    _, base, listening = await start(answers(busy, OK))
    async with KubeClient(ClusterConnection(server=base)) as client:
        assert await client.get("/api/v1/pods") == {}
    listening.close()
