"""The kubelet port: HTTPS on the node's IP, authenticated and authorized per request.

`kubectl logs`, `exec`, `attach` and `port-forward` arrive from the consumer's API server and
are relayed byte for byte to the provider's API server (DESIGN §4.8): the request head is
rewritten to the offloaded pod's subresource under the tenant identity, the provider's answer
(a `101 Switching Protocols` for the streaming ones) goes back unchanged, and from then on
bytes are copied both ways. SPDY/3.1, WebSocket v4/v5 and port-forward tunnelling all pass
alike, since nothing after the upgrade names a pod or a namespace. aiohttp cannot serve this
(it will not accept a SPDY upgrade), so the server reads request heads itself.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
import ssl
from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

import structlog
from cryptography import x509

from vk.kube.client import JSON, ApiError
from vk.kube.kubeconfig import ClusterConnection, load_key_pair
from vk.kube.pki import issue_self_signed
from vk.kubelet.auth import KubeletAuth, User
from vk.kubelet.certificates import ServingCertificateManager
from vk.kubelet.routes import (
    RELAYED,
    VERBS,
    Route,
    authorization_subresource,
    parse_route,
    provider_request_head,
    provider_target,
)
from vk.kubelet.stats import (
    METRICS_CONTENT_TYPE,
    ResourceUsage,
    forge_summary,
    render_resource_metrics,
)
from vk.kubelet.tls import (
    load_client_cas,
    user_from_certificate,
    verify_client_certificates_after_handshake,
)

log = structlog.get_logger("vk.kubelet.server")

# Go's http.DefaultMaxHeaderBytes, as the kubelet's server has it. It is also the StreamReader
# limit, which sets how much a relay reads ahead: 64 KiB held port-forward at 0.6 of direct.
MAX_HEAD = 1 << 20
MAX_ERROR_BODY = 64 * 1024
RELAY_CHUNK = 256 * 1024


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
    body = json.dumps(
        {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "message": message,
            "reason": reason,
            "code": code,
        }
    ).encode()
    titles = {
        401: "Unauthorized",
        403: "Forbidden",
        404: "Not Found",
        400: "Bad Request",
        502: "Bad Gateway",
        503: "Service Unavailable",
    }
    head = (
        f"HTTP/1.1 {code} {titles.get(code, 'Error')}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    )
    return head.encode() + body


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


async def read_request_head(reader: asyncio.StreamReader) -> Request | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
        return None
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3:
        return None
    headers = []
    for line in lines[1:]:
        if ":" in line:
            key, _, value = line.partition(":")
            headers.append((key.strip(), value.strip()))
    return Request(parts[0], parts[1], headers)


async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, ssl.SSLError, OSError):
        while chunk := await reader.read(RELAY_CHUNK):
            writer.write(chunk)
            await writer.drain()


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
        self.certificate_type = certificate_type
        self.certificates: ServingCertificateManager | None = None
        self.ready = asyncio.Event()
        self._log = log.bind(node=node_name)
        # One TLS context per provider identity: building one loads the key (and writes it to
        # a scratch file), too slow and too big to do for every exec or log stream.
        self._provider_tls: tuple[ClusterConnection, ssl.SSLContext] | None = None
        self._client_cas: list[x509.Certificate] = []

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
            renewal = asyncio.create_task(self.certificates.run())
        server = await asyncio.start_server(
            self._serve, self.address, self.port, ssl=context, limit=MAX_HEAD
        )
        self._log.info("kubelet API listening", address=f"{self.address}:{self.port}")
        self.ready.set()
        try:
            async with server:
                await server.serve_forever()
        finally:
            if renewal is not None:
                renewal.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await read_request_head(reader)
            if request is not None:
                await self._handle(request, reader, writer)
        except Exception:
            self._log.exception("kubelet API request failed")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

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

    async def _handle(
        self, request: Request, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        try:
            user = await self._authenticate(request, writer)
        except ApiError as error:
            writer.write(
                status_response(503, "ServiceUnavailable", f"cannot authenticate: {error}")
            )
            return
        if user is None:
            writer.write(status_response(401, "Unauthorized", "Unauthorized"))
            return
        verb = VERBS.get(request.method, "get")
        subresource = authorization_subresource(request.target)
        if not await self.auth.allowed(user, verb, subresource):
            writer.write(
                status_response(
                    403,
                    "Forbidden",
                    f'user "{user.name}" cannot {verb} nodes/{subresource} '
                    f"of node {self.node_name}",
                )
            )
            return
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
        elif route.kind == "stats/summary":
            summary = forge_summary(self.node_name, self.usage.started, await self.usage.refresh())
            writer.write(text_response(json.dumps(summary).encode(), "application/json"))
        elif route.kind in RELAYED:
            await self._relay(request, route, reader, writer)
        else:
            writer.write(status_response(404, "NotFound", f"{request.target} is not served"))

    async def _log_error_answered(
        self, upstream: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> bool:
        """Reads the provider's answer head to a logs request. An error is answered in plain
        text, as the kubelet answers it (the API server quotes the body in its own error, so a
        Status JSON would reach the user escaped); True then. Otherwise the head is passed on
        and the body follows through the relay."""
        try:
            head = await upstream.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            writer.write(
                status_response(
                    502,
                    "BadGateway",
                    "the provider API server closed the connection without answering",
                )
            )
            return True
        code = int(head.split(b" ", 2)[1])
        if code < 400:
            writer.write(head)
            return False
        body = b""  # up to the provider's close (we asked for Connection: close)
        while len(body) < MAX_ERROR_BODY and (chunk := await upstream.read(MAX_ERROR_BODY)):
            body += chunk
        writer.write(plain_error_response(code, log_error_message(body)))
        return True

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
            upstream_reader, upstream_writer = await asyncio.open_connection(
                host, port, ssl=self._tls_for(connection), server_hostname=host, limit=MAX_HEAD
            )
        except OSError as error:
            writer.write(
                status_response(
                    502,
                    "BadGateway",
                    f"cannot reach the provider API server {connection.server}: {error}",
                )
            )
            return
        target = provider_target(route, remote_namespace)
        upstream_writer.write(
            provider_request_head(
                request.method,
                target,
                request.headers,
                host=server.netloc,
                bearer_token=connection.bearer_token(),
            )
        )
        self._log.debug("relaying", route=route.kind, namespace=route.namespace, pod=route.pod)
        try:
            if route.kind == "containerLogs" and await self._log_error_answered(
                upstream_reader, writer
            ):
                return
            # Whatever comes first, the client's side closing (Ctrl-C on `logs -f`) or the
            # provider's, ends both: TLS cannot half-close, and nothing here needs it to.
            await _first_done(pipe(reader, upstream_writer), pipe(upstream_reader, writer))
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
