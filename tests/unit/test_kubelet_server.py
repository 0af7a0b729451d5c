"""The kubelet port driven as an attacker would drive it, on loopback with fakes of the home
API server's reviews and a provider that records what reaches it (no cluster): what a caller
sends never reaches the provider but as the request vk forges; connections waiting for their
admission are bounded, and the ones waiting longest make room; failed reviews get an answer.
The playground's real kubelet API is tested in tests/integration/test_kubelet_api.py."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import socket
import ssl
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from vk.controllers.local_processes import free_port
from vk.kube.client import ApiError
from vk.kube.kubeconfig import ClusterConnection
from vk.kube.pki import build_ca
from vk.kubelet import server as kubelet_server
from vk.kubelet.auth import User
from vk.kubelet.server import (
    KubeletServer,
    MalformedHead,
    forge_self_signed,
    parse_request_head,
    source_of,
)

TOKEN = "monitoring-token"
PROVIDER_TOKEN = "tenant-token"
LOGS = "/containerLogs/default/web/app"


class FakeAuth:
    """The home API server's reviews: TOKEN is a user, any other token none; `hold` keeps the
    TokenReviews waiting; `failing` makes the SubjectAccessReview fail."""

    home = None

    def __init__(self) -> None:
        ca, _ = build_ca("home-client-ca", datetime.datetime.now(datetime.UTC))
        self.ca_pem = ca.public_bytes(Encoding.PEM).decode()
        self.hold = asyncio.Event()
        self.hold.set()
        self.token_reviews = 0
        self.failing: Exception | None = None

    async def client_ca(self) -> str:
        return self.ca_pem

    async def user_from_token(self, token: str) -> User | None:
        self.token_reviews += 1
        await self.hold.wait()
        return User("monitoring") if token == TOKEN else None

    async def allowed(self, user: User, verb: str, subresource: str) -> bool:
        if self.failing is not None:
            raise self.failing
        return True


@dataclass
class Provider:
    """A provider API server that records the bytes of each connection and answers as told."""

    answer: bytes = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok"
    received: list[bytes] = field(default_factory=list)
    port: int = 0
    # How long the connection is held open after the answer, waiting for more bytes (vk writes
    # a head in one piece: what would ride after it came with it).
    linger: float = 0.2

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        got = bytearray()
        with contextlib.suppress(
            ConnectionError, TimeoutError, asyncio.IncompleteReadError, ssl.SSLError
        ):
            got += await reader.readuntil(b"\r\n\r\n")
            writer.write(self.answer)
            await writer.drain()
            while chunk := await asyncio.wait_for(reader.read(65536), self.linger):
                got += chunk
        self.received.append(bytes(got))
        writer.close()


@dataclass
class Scene:
    server: KubeletServer
    port: int
    auth: FakeAuth
    provider: Provider


@pytest.fixture
async def scene(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AsyncIterator[Scene]:
    async def no_client_ca_watch(*_: Any) -> None:
        await asyncio.Event().wait()

    monkeypatch.setattr(KubeletServer, "_follow_client_ca", no_client_ca_watch)
    provider = Provider()
    cert, key = forge_self_signed("provider", "127.0.0.1")
    (tmp_path / "tls.crt").write_bytes(cert)
    (tmp_path / "tls.key").write_bytes(key)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    provider_server = await asyncio.start_server(provider.serve, "127.0.0.1", 0, ssl=context)
    provider.port = provider_server.sockets[0].getsockname()[1]
    connection = ClusterConnection(
        server=f"https://127.0.0.1:{provider.port}",
        insecure_skip_tls_verify=True,
        token=PROVIDER_TOKEN,
    )
    auth = FakeAuth()
    port = free_port()
    server = KubeletServer(
        node_name="naples",
        address="127.0.0.1",
        port=port,
        auth=auth,  # type: ignore[arg-type]
        remote_namespace=lambda namespace, pod: f"{namespace}-venice",
        pods=list,
        provider=lambda: connection,
        usage=None,  # type: ignore[arg-type]
        probes=None,  # type: ignore[arg-type]
        certificate_type="self-signed",
    )
    running = asyncio.create_task(server.run())
    await asyncio.wait_for(server.ready.wait(), 10)
    yield Scene(server, port, auth, provider)
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    provider_server.close()


def client_tls() -> ssl.SSLContext:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def exchange(port: int, raw: bytes, *, source: str = "127.0.0.1") -> bytes:
    """`raw` sent on a new TLS connection from `source`; the answer, to the server's close."""
    reader, writer = await asyncio.open_connection(
        "127.0.0.1", port, ssl=client_tls(), local_addr=(source, 0)
    )
    writer.write(raw)
    await writer.drain()
    answer = await asyncio.wait_for(reader.read(), 10)
    writer.close()
    return answer


def logs_request(*headers: str) -> bytes:
    lines = [f"GET {LOGS} HTTP/1.1", "Host: naples", f"Authorization: Bearer {TOKEN}", *headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def test_a_request_is_relayed_to_the_provider_as_vk_forges_it(scene: Scene) -> None:
    answer = await exchange(scene.port, logs_request("Accept: */*"))
    assert answer.endswith(b"ok")
    [received] = scene.provider.received
    head = received.decode("latin-1")
    assert head.startswith("GET /api/v1/namespaces/default-venice/pods/web/log?container=app ")
    assert f"Authorization: Bearer {PROVIDER_TOKEN}\r\n" in head
    assert head.count("\r\n\r\n") == 1  # one request, its head whole
    assert head.endswith("\r\n\r\n")


@pytest.mark.parametrize(
    "smuggled",
    [
        # A bare LF: the provider's Go server ends a header line there.
        "Accept: */*\n\nGET /api/v1/namespaces/default-venice/secrets HTTP/1.1\nHost: p",
        "Content-Type: text/plain\nAuthorization: Bearer stolen",
        "Accept: */*\rX-Injected: 1",
        "Accept: a\x00b",
    ],
)
async def test_a_header_breaking_its_line_is_refused_and_nothing_reaches_the_provider(
    scene: Scene, smuggled: str
) -> None:
    answer = await exchange(scene.port, logs_request(smuggled))
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b"not a header line" in answer
    assert scene.provider.received == []
    assert scene.auth.token_reviews == 0  # refused before any review


@pytest.mark.parametrize(
    "head",
    [
        b"GET /pods HTTP/1.1\r\nHost: x\r\n\r\n",
        b"GET /containerLogs/ns/pod/c?follow=true HTTP/1.1\r\nHost: x\r\nUser-Agent: kube\t1\r\n"
        b"X-Stream-Protocol-Version: v4.channel.k8s.io\r\n\r\n",
    ],
)
def test_a_well_formed_head_parses(head: bytes) -> None:
    request = parse_request_head(head)
    assert request.method == "GET"
    assert request.header("host") == "x"


@pytest.mark.parametrize(
    "head",
    [
        b"GET /pods HTTP/1.1\r\nHost: x\nX-Other: y\r\n\r\n",  # a bare LF in a value
        b"GET /pods HTTP/1.1\r\nHost : x\r\n\r\n",  # a space before the colon
        b"GET /pods HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",  # a line folded (obs-fold)
        b"GET /pods HTTP/1.1\r\nno colon\r\n\r\n",
        b"GET /po\x01ds HTTP/1.1\r\nHost: x\r\n\r\n",  # a control character in the target
        b"G(T /pods HTTP/1.1\r\nHost: x\r\n\r\n",  # a method that is no token
        b"GET /pods HTTP/2.0\r\nHost: x\r\n\r\n",
        b"GET  /pods HTTP/1.1\r\nHost: x\r\n\r\n",
    ],
)
def test_a_malformed_head_is_refused(head: bytes) -> None:
    with pytest.raises(MalformedHead):
        parse_request_head(head)


async def test_connections_stay_counted_until_their_reviews_are_done(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One source with made-up tokens, closing at once: its reviews still count against it.
    monkeypatch.setattr(kubelet_server, "MAX_UNAUTHENTICATED_PER_SOURCE", 4)
    scene.auth.hold.clear()
    refused = 0
    for _ in range(10):
        with_made_up_token = logs_request().replace(TOKEN.encode(), b"made-up")
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", scene.port, ssl=client_tls())
        except (ConnectionError, ssl.SSLError):
            refused += 1  # closed before TLS: its source has 4 waiting already
            continue
        writer.write(with_made_up_token)
        await writer.drain()
        writer.close()
    await asyncio.sleep(0.5)
    assert scene.auth.token_reviews == 4
    assert refused == 6
    scene.auth.hold.set()
    await asyncio.sleep(0.2)
    assert scene.server._unauthenticated == {}
    assert scene.server._waiting == {}


async def test_beyond_the_cap_the_connection_waiting_longest_makes_room(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle connections from several sources fill the cap, as they would be renewed at each
    # deadline: the API server's request still gets through.
    monkeypatch.setattr(kubelet_server, "MAX_UNAUTHENTICATED", 6)
    monkeypatch.setattr(kubelet_server, "MAX_UNAUTHENTICATED_PER_SOURCE", 3)
    idle = []
    for source in ("127.0.0.2", "127.0.0.3"):
        for _ in range(3):
            idle.append(
                await asyncio.open_connection("127.0.0.1", scene.port, local_addr=(source, 0))
            )
    await asyncio.sleep(0.2)
    assert len(scene.server._waiting) == 6
    answer = await exchange(scene.port, logs_request())
    assert answer.endswith(b"ok")
    # The first idle connection was closed to make room; the others wait on.
    first_reader, _ = idle[0]
    assert await asyncio.wait_for(first_reader.read(), 5) == b""
    assert len(scene.server._waiting) == 5
    assert sum(scene.server._unauthenticated.values()) == 5
    for _, writer in idle:
        writer.close()


async def test_a_failing_authorization_review_is_answered_500(scene: Scene) -> None:
    scene.auth.failing = ApiError(503, "ServiceUnavailable", "etcd is away")
    answer = await exchange(scene.port, logs_request())
    assert answer.startswith(b"HTTP/1.1 500 ")
    assert b"authorization error" in answer
    assert b"etcd is away" in answer
    scene.auth.failing = ConnectionResetError("the API server hung up")
    assert (await exchange(scene.port, logs_request())).startswith(b"HTTP/1.1 500 ")
    assert scene.provider.received == []


async def test_an_authentication_review_past_its_deadline_is_answered_503(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubelet_server, "ADMISSION_SECONDS", 0.2)
    scene.auth.hold.clear()
    answer = await exchange(scene.port, logs_request())
    assert answer.startswith(b"HTTP/1.1 503 ")
    assert b"no answer within" in answer
    scene.auth.hold.set()


async def test_a_logs_error_whose_body_never_ends_is_answered_within_the_deadline(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(kubelet_server, "PROVIDER_ANSWER_SECONDS", 0.5)
    # A head promising a body, and then nothing, the connection held open.
    scene.provider.answer = (
        b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100000\r\n\r\nthe start"
    )
    scene.provider.linger = 30
    started = asyncio.get_running_loop().time()
    answer = await exchange(scene.port, logs_request())
    assert asyncio.get_running_loop().time() - started < 5
    assert answer.startswith(b"HTTP/1.1 500 ")
    assert answer.endswith(b"the start")
    assert scene.server._streams == 0


@pytest.mark.parametrize(
    ("address", "source"),
    [
        ("10.0.0.7", "10.0.0.7"),
        ("2001:db8:1:2:aaaa::1", "2001:db8:1:2::/64"),
        ("2001:db8:1:2:bbbb::9", "2001:db8:1:2::/64"),
        ("::ffff:10.0.0.7", "10.0.0.7"),
        ("fe80::1%eth0", "fe80::/64"),
    ],
)
def test_a_connection_counts_against_its_address_or_its_ipv6_64(address: str, source: str) -> None:
    assert source_of(address) == source


async def test_relayed_connections_probe_their_peers(
    scene: Scene, monkeypatch: pytest.MonkeyPatch
) -> None:
    probed: list[int] = []
    original = kubelet_server.keep_alive_probes

    def recording(connection: Any) -> None:
        original(connection)
        probed.append(connection.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE))

    monkeypatch.setattr(kubelet_server, "keep_alive_probes", recording)
    assert (await exchange(scene.port, logs_request())).endswith(b"ok")
    assert probed == [1, 1]  # the client's connection, and the provider's
