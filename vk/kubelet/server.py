"""The kubelet port: HTTPS on the node's IP, authenticated and authorized per request.

`kubectl logs`, `exec`, `attach` and `port-forward` arrive from the consumer's API server and
are relayed byte for byte to the provider's API server (DESIGN §4.8): the request head is
rewritten to the offloaded pod's subresource under the tenant identity, the provider's answer
(a `101 Switching Protocols` for the streaming ones) goes back unchanged, and from then on
bytes are copied both ways. SPDY/3.1, WebSocket v4/v5 and port-forward tunnelling all pass
alike, since nothing after the upgrade names a pod or a namespace. aiohttp cannot serve this
(it will not accept a SPDY upgrade), so the server reads request heads itself.

Anyone who can reach the node reaches this port, so it holds against them: connections beyond
a cap (in all, and per source address) are closed before TLS starts; the handshake and the
request head each have a deadline, and the head a size far below the kubelet's 1 MiB; unknown
methods get 405. Only a genuine upgrade (exec, attach, portForward) is relayed as one, and
only once the provider has answered 101 do the client's bytes reach the provider: anything
else is one request on a connection the provider closes, so nothing can be smuggled onto the
tenant identity's connection after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import ipaddress
import json
import re
import socket
import ssl
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

import structlog
from cryptography import x509
from prometheus_client import Counter

from vk.api.addresses import routed_address
from vk.api.meta import forge_failure_status
from vk.kube.client import JSON, ApiError
from vk.kube.informer import Informer
from vk.kube.kubeconfig import ClusterConnection, load_key_pair
from vk.kube.pki import issue_self_signed
from vk.kube.supervision import BackgroundTasks, supervise
from vk.kubelet.auth import CLIENT_CA_CONFIGMAP, KubeletAuth, User
from vk.kubelet.certificates import ServingCertificateManager
from vk.kubelet.probes import ProbeResults, render_probe_metrics
from vk.kubelet.routes import (
    RELAYED,
    VERBS,
    Route,
    asks_upgrade,
    authorization_subresource,
    parse_route,
    provider_request_head,
    provider_target,
)
from vk.kubelet.stats import (
    METRICS_CONTENT_TYPE,
    ResourceUsage,
    forge_summary,
    render_cadvisor_metrics,
    render_resource_metrics,
)
from vk.kubelet.tls import (
    load_client_cas,
    user_from_certificate,
    verify_client_certificates_after_handshake,
)

log = structlog.get_logger("vk.kubelet.server")

# The kubelet port is open to anyone who can reach the node: everything before authentication
# is bounded, in time and in memory, tighter than the kubelet's own server (1 MiB heads, no
# head timeout). kubectl's requests through the API server carry heads of a few hundred bytes.
MAX_REQUEST_HEAD = 16 * 1024
# Set on the client's StreamReader: a head longer than this is refused. The provider's side
# keeps a large one, which is how much a relay reads ahead (64 KiB held port-forward at 0.6 of
# direct).
PROVIDER_READ_AHEAD = 1 << 20
TLS_HANDSHAKE_SECONDS = 5.0
REQUEST_HEAD_SECONDS = 10.0
# Connections not yet authenticated and authorized, in all and from one source (an IPv4
# address, an IPv6 /64: one host has a whole /64): beyond the first, the one waiting longest is
# closed to make room, so that idle connections, renewed as their deadlines close them, cannot
# keep the API server out (it is unauthenticated only for the milliseconds its handshake and
# head take); beyond the second, the new one is closed before its TLS handshake (each TLS
# connection costs buffers of its own).
MAX_UNAUTHENTICATED = 512
MAX_UNAUTHENTICATED_PER_SOURCE = 128
# Authentication and authorization (a TokenReview, a SubjectAccessReview) of one request.
ADMISSION_SECONDS = 10.0
# Authenticated relays at once (logs -f, exec, attach, port-forward), never closed for idling.
MAX_STREAMS = 2048
# How long the provider's API server may take to answer a relayed request's head.
PROVIDER_ANSWER_SECONDS = 30.0
# Connecting to the provider's API server, TLS included.
PROVIDER_CONNECT_SECONDS = 10.0
MAX_ERROR_BODY = 64 * 1024
RELAY_CHUNK = 256 * 1024
# After a failed accept (no file descriptor left), the pause before the next one.
ACCEPT_RETRY = 0.1

CONNECTIONS_REFUSED = Counter(
    "vk_kubelet_connections_refused_total",
    "Connections to the kubelet port closed before authentication, by why",
    ["reason"],
)


def forge_self_signed(node_name: str, node_ip: str) -> tuple[bytes, bytes]:
    """A serving certificate for `--certificate-type self-signed` (CN system:node:<node>,
    SANs the node name and IP, as the kubelet's own)."""
    issued = issue_self_signed(
        f"system:node:{node_name}",
        datetime.datetime.now(datetime.UTC),
        organizations=("system:nodes",),
        dns_names=(node_name,),
        ip_addresses=(node_ip,),
    )
    return issued.cert_pem, issued.key_pem


def server_ssl_context(cert_pem: bytes, key_pem: bytes, client_ca_pem: str) -> ssl.SSLContext:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    load_key_pair(context, cert_pem, key_pem)
    # Optional, not required: a bearer token is the other way in (TokenReview).
    context.verify_mode = ssl.CERT_OPTIONAL
    context.load_verify_locations(cadata=client_ca_pem)
    verify_client_certificates_after_handshake(context)
    return context


def status_response(code: int, reason: str, message: str) -> bytes:
    """A complete HTTP response carrying a metav1.Status, as the kubelet and the API server
    answer errors (kubectl prints its message)."""
    body = json.dumps(forge_failure_status(code, reason, message)).encode()
    titles = {
        401: "Unauthorized",
        403: "Forbidden",
        404: "Not Found",
        400: "Bad Request",
        405: "Method Not Allowed",
        429: "Too Many Requests",
        500: "Internal Server Error",
        502: "Bad Gateway",
        503: "Service Unavailable",
    }
    head = (
        f"HTTP/1.1 {code} {titles.get(code, 'Error')}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


def source_of(address: str) -> str:
    """Whom a connection from `address` is counted against: an IPv4 address, or an IPv6
    address's /64 (a host is given a whole /64, and picks an address in it at will)."""
    try:
        ip = routed_address(address.split("%", 1)[0])  # an IPv4 client of a dual-stack socket
    except ValueError:
        return address
    if isinstance(ip, ipaddress.IPv6Address):
        return str(ipaddress.ip_network(f"{ip}/64", strict=False))
    return str(ip)


def keep_alive_probes(connection: socket.socket) -> None:
    """TCP keepalive on a relay's connection, as Go sets it on every connection (15 s idle,
    probes every 15 s): a peer whose host vanished mid-stream (`exec` idle, `logs -f` quiet)
    sends no FIN, and its relay would hold its slot and sockets for ever."""
    connection.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    for option, value in _KEEPALIVE_OPTIONS:
        if hasattr(socket, option):
            connection.setsockopt(socket.IPPROTO_TCP, getattr(socket, option), value)


_KEEPALIVE_OPTIONS = (("TCP_KEEPIDLE", 15), ("TCP_KEEPINTVL", 15), ("TCP_KEEPCNT", 9))


def text_response(body: bytes, content_type: str = "text/plain") -> bytes:
    return (
        f"HTTP/1.1 200 OK\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}"
        "\r\nConnection: close\r\n\r\n"
    ).encode() + body


class Request:
    def __init__(self, method: str, target: str, headers: list[tuple[str, str]]) -> None:
        self.method, self.target, self.headers = method, target, headers

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)


class MalformedHead(ValueError):
    """A request head that is not well-formed HTTP/1.1: answered 400, as Go's server does."""


# RFC 9110 §5.6.2: a method and a header's name are tokens.
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+\Z")
# A request target: visible ASCII, nothing else (RFC 9112 §3.2).
_TARGET = re.compile(r"[\x21-\x7e]+\Z")
# What no header value may hold (RFC 9110 §5.5): control characters but the tab. A bare CR or
# LF above all: split on CRLF alone, it stayed in the value, and a value forwarded to the
# provider ended its header there; what followed was read there as headers, or as a second
# request riding on the tenant identity's connection, under its Authorization.
_FORBIDDEN_IN_VALUE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")


def parse_request_head(head: bytes) -> Request:
    """A request head (its blank line included), checked as strictly as Go's server checks
    it: MalformedHead if it is not well-formed."""
    lines = head.decode("latin-1").split("\r\n")[:-2]
    parts = lines[0].split(" ")
    if (
        len(parts) != 3
        or not _TOKEN.match(parts[0])
        or not _TARGET.match(parts[1])
        or parts[2] not in ("HTTP/1.1", "HTTP/1.0")
    ):
        raise MalformedHead(f"not an HTTP/1.1 request line: {lines[0][:100]!r}")
    headers = []
    for line in lines[1:]:
        key, colon, value = line.partition(":")
        if not colon or not _TOKEN.match(key) or _FORBIDDEN_IN_VALUE.search(value):
            # No name, a space before the colon, a line folded onto the one before, a control
            # character in the value.
            raise MalformedHead(f"not a header line: {line[:100]!r}")
        headers.append((key, value.strip(" \t")))
    return Request(parts[0], parts[1], headers)


async def read_request_head(reader: asyncio.StreamReader) -> Request | None:
    """The request head, or None when there is none within the reader's limit
    (MAX_REQUEST_HEAD) or the connection ends first; MalformedHead if it is not well-formed."""
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (
        asyncio.IncompleteReadError,
        asyncio.LimitOverrunError,
        ConnectionError,
        ssl.SSLError,
    ):
        return None
    return parse_request_head(head)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
        while chunk := await reader.read(RELAY_CHUNK):
            writer.write(chunk)
            await writer.drain()


async def until_closed(reader: asyncio.StreamReader) -> None:
    """Until the client closes its side; what it sends meanwhile goes nowhere (a plain request
    has no body, and nothing may follow it onto the provider's connection)."""
    with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
        while await reader.read(RELAY_CHUNK):
            pass


def status_code(head: bytes) -> int:
    """The status code of an HTTP response head; 0 if it has none."""
    parts = head.split(b" ", 2)
    return int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0


class KubeletServer:
    """Serves the kubelet API of one virtual node. `remote_namespace(ns, pod)` says where an
    offloaded pod lives in the provider (None: not offloaded here); `pods()` lists the pods
    bound to the node; `provider()` is the current provider connection (None: unusable)."""

    def __init__(
        self,
        *,
        node_name: str,
        address: str,
        port: int,
        auth: KubeletAuth,
        remote_namespace: Callable[[str, str], str | None],
        pods: Callable[[], list[JSON]],
        provider: Callable[[], ClusterConnection | None],
        usage: ResourceUsage,
        probes: ProbeResults,
        certificate_type: str = "kubelet",
    ) -> None:
        self.node_name = node_name
        self.address = address
        self.port = port
        self.auth = auth
        self.remote_namespace = remote_namespace
        self.pods = pods
        self.provider = provider
        self.usage = usage
        self.probes = probes
        self.certificate_type = certificate_type
        self.certificates: ServingCertificateManager | None = None
        self.ready = asyncio.Event()
        self._log = log.bind(node=node_name)
        # One TLS context per provider identity: building one loads the key (and writes it to
        # a scratch file), too slow and too big to do for every exec or log stream.
        self._provider_tls: tuple[ClusterConnection, ssl.SSLContext] | None = None
        self._client_cas: list[x509.Certificate] = []
        self._tls: ssl.SSLContext | None = None
        self._unauthenticated: dict[str, int] = {}  # by source (source_of)
        # The connections not admitted yet, the one waiting longest first -> its source.
        self._waiting: dict[asyncio.Task[Any], str] = {}
        self._streams = 0

    def _images(self) -> dict[tuple[str, str, str], str]:
        """(namespace, pod, container) -> the image the local pod names (cAdvisor's `image`
        label): read once per scrape, not once per container."""
        images: dict[tuple[str, str, str], str] = {}
        for bound in self.pods():
            metadata = bound.get("metadata") or {}
            spec = bound.get("spec") or {}
            for entry in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]:
                if entry.get("image"):
                    key = (
                        str(metadata.get("namespace")),
                        str(metadata.get("name")),
                        str(entry.get("name")),
                    )
                    images[key] = str(entry["image"])
        return images

    def _tls_for(self, connection: ClusterConnection) -> ssl.SSLContext:
        if self._provider_tls is None or self._provider_tls[0] != connection:
            self._provider_tls = (connection, connection.ssl_context())
        return self._provider_tls[1]

    async def run(self) -> None:
        # Self-signed from the start; with `kubelet` certificates, swapped for the cluster-signed
        # one as soon as it is issued (the API server does not verify kubelet serving
        # certificates unless told to, so logs and exec work meanwhile).
        cert, key = forge_self_signed(self.node_name, self.address)
        client_ca = await self.auth.client_ca()
        self._client_cas = load_client_cas(client_ca)
        context = server_ssl_context(cert, key, client_ca)
        renewal: asyncio.Task[None] | None = None
        if self.certificate_type == "kubelet":
            self.certificates = ServingCertificateManager(
                self.auth.home,
                self.node_name,
                self.address,
                install=lambda cert_pem, key_pem: load_key_pair(context, cert_pem, key_pem),
            )
            renewal = asyncio.create_task(supervise("serving-certificate", self.certificates.run))
        self._tls = context
        client_ca_watch = asyncio.create_task(
            supervise("client-ca", lambda: self._follow_client_ca(context, client_ca))
        )
        # The listening socket is ours: each connection is counted against the caps when it is
        # accepted, before any TLS (an asyncio server would start TLS on its own first).
        listener = socket.create_server((self.address, self.port), backlog=1024)
        listener.setblocking(False)
        self._log.info("kubelet API listening", address=f"{self.address}:{self.port}")
        self.ready.set()
        connections = BackgroundTasks("kubelet-api-connections")
        loop = asyncio.get_running_loop()
        try:
            while True:
                try:
                    connection, peer = await loop.sock_accept(listener)
                except OSError as error:
                    # Out of file descriptors (a flood), or a connection reset before it was
                    # accepted: the port stays open for the next one.
                    CONNECTIONS_REFUSED.labels("accept-failed").inc()
                    self._log.warning("cannot accept a connection", error=str(error))
                    await asyncio.sleep(ACCEPT_RETRY)
                    continue
                connections.start(self._serve(connection, str(peer[0])))
        finally:
            listener.close()
            connections.cancel()
            client_ca_watch.cancel()
            if renewal is not None:
                renewal.cancel()

    async def _follow_client_ca(self, context: ssl.SSLContext, current: str) -> None:
        """The client CA re-read whenever the cluster's `extension-apiserver-authentication`
        changes (a rotation): certificates of the new CA are let in without a restart, those of
        a CA removed no longer are. A CA that does not parse is reported and the one in use
        kept."""
        namespace, name = CLIENT_CA_CONFIGMAP
        configmaps = Informer(
            self.auth.home,
            "v1",
            "configmaps",
            namespace=namespace,
            field_selector=f"metadata.name={name}",
        )

        def changed(_: str, configmap: JSON, __: JSON | None) -> None:
            nonlocal current
            pem = (configmap.get("data") or {}).get("client-ca-file") or ""
            if not pem or pem == current:
                return
            try:
                cas = load_client_cas(pem)
                context.load_verify_locations(cadata=pem)  # the CA names offered in TLS
            except (ValueError, ssl.SSLError) as error:
                self._log.warning("the new client CA does not parse: keeping the one in use",
                                  error=str(error))  # fmt: skip
                return
            current, self._client_cas = pem, cas
            self._log.info("client CA reloaded", certificates=len(cas))

        configmaps.add_handler(changed)
        await configmaps.run()

    async def _serve(self, connection: socket.socket, address: str) -> None:
        """One connection, from accept to close: turned away beyond its source's cap (or
        making room beyond the cap of all), else its TLS handshake, request head and admission
        within their limits, then the request."""
        source = source_of(address)
        if self._unauthenticated.get(source, 0) >= MAX_UNAUTHENTICATED_PER_SOURCE:
            CONNECTIONS_REFUSED.labels("too-many-from-source").inc()
            connection.close()
            return
        if len(self._waiting) >= MAX_UNAUTHENTICATED:
            longest = next(iter(self._waiting))
            self._admitted(longest)  # out of the count now: the count stays within the cap
            longest.cancel()
            CONNECTIONS_REFUSED.labels("waited-longest").inc()
        this = asyncio.current_task()
        assert this is not None
        self._waiting[this] = source
        self._unauthenticated[source] = self._unauthenticated.get(source, 0) + 1
        writer: asyncio.StreamWriter | None = None
        try:
            keep_alive_probes(connection)
            opened = await self._open_tls(connection)
            if opened is None:
                return
            reader, writer = opened
            request = await self._read_head(reader, writer)
            if request is None:
                return
            # Still counted while the reviews run: they are bounded by the caps too.
            admitted = await self._admit(request, writer)
            self._admitted(this)
            if admitted:
                await self._handle(request, reader, writer)
        except Exception:
            self._log.exception("kubelet API request failed")
        finally:
            self._admitted(this)
            if writer is not None:
                writer.close()
                with contextlib.suppress(Exception):
                    await writer.wait_closed()
            else:
                connection.close()

    def _admitted(self, connection: asyncio.Task[Any]) -> None:
        """The connection leaves the count of those not admitted (once: again does nothing)."""
        source = self._waiting.pop(connection, None)
        if source is None:
            return
        left = self._unauthenticated.get(source, 0) - 1
        if left > 0:
            self._unauthenticated[source] = left
        else:
            self._unauthenticated.pop(source, None)

    async def _open_tls(
        self, connection: socket.socket
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """Streams over the connection once its TLS handshake is done within its deadline."""
        assert self._tls is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=MAX_REQUEST_HEAD, loop=loop)
        protocol = asyncio.StreamReaderProtocol(reader, loop=loop)
        try:
            transport, _ = await loop.connect_accepted_socket(
                lambda: protocol,
                connection,
                ssl=self._tls,
                ssl_handshake_timeout=TLS_HANDSHAKE_SECONDS,
            )
        except (TimeoutError, ssl.SSLError, ConnectionError, OSError):
            CONNECTIONS_REFUSED.labels("tls-handshake").inc()
            return None
        return reader, asyncio.StreamWriter(transport, protocol, reader, loop)

    async def _read_head(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Request | None:
        try:
            request = await asyncio.wait_for(read_request_head(reader), REQUEST_HEAD_SECONDS)
        except TimeoutError:
            CONNECTIONS_REFUSED.labels("request-head-timeout").inc()
            return None
        except MalformedHead as error:
            CONNECTIONS_REFUSED.labels("malformed-request-head").inc()
            writer.write(status_response(400, "BadRequest", str(error)))
            return None
        if request is None:
            CONNECTIONS_REFUSED.labels("request-head").inc()
        return request

    async def _authenticate(self, request: Request, writer: asyncio.StreamWriter) -> User | None:
        tls = writer.get_extra_info("ssl_object")
        user = user_from_certificate(
            tls.getpeercert(binary_form=True) if tls else None,
            self._client_cas,
            datetime.datetime.now(datetime.UTC),
        )
        authorization = request.header("Authorization") or ""
        if user is None and authorization.lower().startswith("bearer "):
            user = await self.auth.user_from_token(authorization[7:].strip())
        return user

    async def _admit(self, request: Request, writer: asyncio.StreamWriter) -> bool:
        """Whether the request is authenticated and authorized, as the kubelet judges it;
        if not, its answer is written: 405, 401, 403, or 503 and 500 when the reviews fail
        (the API server away, a review not answered within ADMISSION_SECONDS)."""
        if request.method not in VERBS:
            writer.write(
                status_response(
                    405, "MethodNotAllowed", f"method {request.method[:32]!r} is not served"
                )
            )
            return False
        try:
            user = await asyncio.wait_for(self._authenticate(request, writer), ADMISSION_SECONDS)
        except (ApiError, OSError, TimeoutError) as error:
            why = str(error) or f"no answer within {ADMISSION_SECONDS:.0f} s"
            writer.write(status_response(503, "ServiceUnavailable", f"cannot authenticate: {why}"))
            return False
        if user is None:
            writer.write(status_response(401, "Unauthorized", "Unauthorized"))
            return False
        verb = VERBS[request.method]
        subresource = authorization_subresource(request.target)
        try:
            allowed = await asyncio.wait_for(
                self.auth.allowed(user, verb, subresource), ADMISSION_SECONDS
            )
        except (ApiError, OSError, TimeoutError) as error:
            why = str(error) or f"no answer within {ADMISSION_SECONDS:.0f} s"
            writer.write(
                status_response(
                    500,
                    "InternalError",
                    f'authorization error (user "{user.name}", verb {verb}, nodes/{subresource} '
                    f"of node {self.node_name}): {why}",
                )
            )
            return False
        if not allowed:
            writer.write(
                status_response(
                    403,
                    "Forbidden",
                    f'user "{user.name}" cannot {verb} nodes/{subresource} '
                    f"of node {self.node_name}",
                )
            )
        return allowed

    async def _handle(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """An admitted request: answered here, or relayed to the provider."""
        route = parse_route(request.target)
        if route.kind == "healthz":
            writer.write(text_response(b"ok"))
        elif route.kind in ("pods", "runningpods"):
            body = json.dumps(
                {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": self.pods()}
            ).encode()
            writer.write(text_response(body, "application/json"))
        elif route.kind == "metrics/resource":
            text = render_resource_metrics(await self.usage.refresh())
            writer.write(text_response(text.encode(), METRICS_CONTENT_TYPE))
        elif route.kind == "metrics/cadvisor":
            images = self._images()
            text = render_cadvisor_metrics(
                await self.usage.refresh(), lambda *container: images.get(container)
            )
            writer.write(text_response(text.encode(), METRICS_CONTENT_TYPE))
        elif route.kind == "metrics/probes":
            text = render_probe_metrics(await self.probes.refresh())
            writer.write(text_response(text.encode(), METRICS_CONTENT_TYPE))
        elif route.kind == "stats/summary":
            summary = forge_summary(self.node_name, self.usage.started, await self.usage.refresh())
            writer.write(text_response(json.dumps(summary).encode(), "application/json"))
        elif route.kind in RELAYED:
            if self._streams >= MAX_STREAMS:
                writer.write(
                    status_response(
                        429,
                        "TooManyRequests",
                        f"virtual node {self.node_name} relays {MAX_STREAMS} streams already: "
                        "retry when some have ended",
                    )
                )
                return
            self._streams += 1
            try:
                await self._relay(request, route, reader, writer)
            finally:
                self._streams -= 1
        else:
            writer.write(status_response(404, "NotFound", f"{request.target} is not served"))

    async def _answer_logs_error(
        self, code: int, upstream: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        """A logs request the provider refused is answered in plain text, as the kubelet
        answers it (the API server quotes the body in its own error, so a Status JSON would
        reach the user escaped)."""
        body = b""  # up to the provider's close (we asked for Connection: close)

        async def read_body() -> None:
            nonlocal body
            while len(body) < MAX_ERROR_BODY and (chunk := await upstream.read(MAX_ERROR_BODY)):
                body += chunk

        # Within the time its head had: a provider that sends a head and then nothing would
        # hold the relay, its slot and its sockets, after the client had gone.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(read_body(), PROVIDER_ANSWER_SECONDS)
        writer.write(plain_error_response(code, log_error_message(body[:MAX_ERROR_BODY])))

    async def _relay(
        self,
        request: Request,
        route: Route,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        remote_namespace = self.remote_namespace(route.namespace, route.pod)
        if remote_namespace is None:
            writer.write(
                status_response(
                    404,
                    "NotFound",
                    f'pod "{route.pod}" in namespace "{route.namespace}" is not offloaded by the '
                    f"virtual node {self.node_name}",
                )
            )
            return
        connection = self.provider()
        if connection is None:
            writer.write(
                status_response(
                    503,
                    "ServiceUnavailable",
                    f"the provider of virtual node {self.node_name} cannot be reached now",
                )
            )
            return
        server = urlsplit(connection.server)
        host, port = server.hostname or "", server.port or 443
        try:
            # Bounded as a whole: a frozen provider accepts TCP and never finishes TLS (asyncio
            # would wait 60 s for the handshake alone), and requests must not pile up on it.
            upstream_reader, upstream_writer = await asyncio.wait_for(
                asyncio.open_connection(
                    host,
                    port,
                    ssl=self._tls_for(connection),
                    server_hostname=connection.tls_server_name or host,
                    limit=PROVIDER_READ_AHEAD,
                    ssl_handshake_timeout=PROVIDER_CONNECT_SECONDS,
                ),
                PROVIDER_CONNECT_SECONDS,
            )
        except (OSError, TimeoutError) as error:
            why = str(error) or f"no connection within {PROVIDER_CONNECT_SECONDS:.0f} s"
            writer.write(
                status_response(
                    502,
                    "BadGateway",
                    f"cannot reach the provider API server {connection.server}: {why}",
                )
            )
            return
        upstream_socket = upstream_writer.get_extra_info("socket")
        if upstream_socket is not None:
            keep_alive_probes(upstream_socket)
        target = provider_target(route, remote_namespace)
        upgrade = asks_upgrade(route, request.headers)
        upstream_writer.write(
            provider_request_head(
                request.method,
                target,
                request.headers,
                host=server.netloc,
                bearer_token=connection.bearer_token(),
                upgrade=upgrade,
            )
        )
        self._log.debug("relaying", route=route.kind, namespace=route.namespace, pod=route.pod)
        try:
            try:
                head = await asyncio.wait_for(
                    upstream_reader.readuntil(b"\r\n\r\n"), PROVIDER_ANSWER_SECONDS
                )
            except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
                writer.write(
                    status_response(
                        502,
                        "BadGateway",
                        f"the provider API server {connection.server} gave no answer",
                    )
                )
                return
            code = status_code(head)
            if route.kind == "containerLogs" and code >= 400:
                await self._answer_logs_error(code, upstream_reader, writer)
                return
            writer.write(head)
            if upgrade and code == 101:
                # Whatever comes first, the client's side closing or the provider's, ends both:
                # TLS cannot half-close, and nothing here needs it to.
                await _first_done(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
            else:
                # One answer, to the provider's close (or the client's: Ctrl-C on `logs -f`);
                # nothing the client sends reaches the provider's connection.
                await _first_done(until_closed(reader), pipe(upstream_reader, writer))
        finally:
            upstream_writer.close()
            with contextlib.suppress(Exception):
                await upstream_writer.wait_closed()


def log_error_message(body: bytes) -> str:
    """The message of a provider's error answer: a Status's `message`, or the text itself."""
    text = body.decode("utf-8", errors="replace").strip()
    try:
        status = json.loads(text)
    except ValueError:
        return text
    message = status.get("message") if isinstance(status, dict) else None
    return message if isinstance(message, str) else text


def plain_error_response(code: int, message: str) -> bytes:
    body = message.encode()
    return (
        f"HTTP/1.1 {code} Error\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode() + body


async def _first_done(*coroutines: Coroutine[Any, Any, None]) -> None:
    tasks = [asyncio.ensure_future(c) for c in coroutines]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
