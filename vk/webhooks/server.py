"""`vk webhook`: vk's admission webhook process, in every cluster. HTTPS (aiohttp) serving the
AdmissionReview v1 endpoints of `vk.webhooks.admission` over informer caches of the Quotas, the
namespaces made for consumers, and the ResourceSlices and NamespaceMaps (provider) and of the
NamespaceOffloadings (consumer), with `/healthz`, `/readyz` and `/metrics` on the same port
(and, if asked, on a plain-HTTP metrics port as the other daemons have).

Every replica answers on its own (no leader election): the one thing admissions write, a Quota's
ledger, is written in the API server with a resourceVersion precondition, so any number of
replicas admit no more than the Quota under any burst.

The port is open to the whole pod network, tenants' offloaded pods included, and failurePolicy
Fail makes it the gate of every pod of offloaded namespaces: what a peer can hold of it is
bounded (`vk.kube.serving`, with the limits below), connections counted from accept and each
stage with its deadline, so that sockets and memory (384Mi) outlast a flood and the API server
still gets answered.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import shutil
import signal
import ssl
import tempfile
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, Counter, Histogram, generate_latest

from vk.api.constants import (
    CLUSTER_IDENTITY_CONFIGMAP,
    DEFAULT_MAX_RESOURCE_SLICES,
    REMOTE_CLUSTER_ID_LABEL,
)
from vk.api.identity import InvalidClusterIdentity, parse_cluster_identity
from vk.api.offloading import NamespaceOffloading
from vk.kube import daemon
from vk.kube.client import JSON, ApiError, KubeClient, resource_path
from vk.kube.informer import Informer, Store
from vk.kube.kubeconfig import default_connection
from vk.kube.observability import MetricsServer, configure_logging
from vk.kube.serving import ConnectionLimits, connection_of, read_body, serve, split_address
from vk.kube.supervision import supervise
from vk.webhooks.admission import (
    Answer,
    OffloadingAdmission,
    ShadowPodAdmission,
    TenantObjectAdmission,
    forge_review_response,
    quota_informer,
    tenant_object_informers,
)
from vk.webhooks.certificates import (
    CertificateError,
    WebhookCertificate,
    ensure_ca_bundle,
    ensure_certificate,
    write_certificate_files,
)
from vk.webhooks.configuration import (
    MUTATE_PATH,
    PLACE_POD_PATH,
    VALIDATE_OFFLOADING_PATH,
    VALIDATE_PATH,
    VALIDATE_TENANT_OBJECT_PATH,
)
from vk.webhooks.metrics_agent import (
    MetricsAgent,
    agent_ssl_context,
    read_request_header_authentication,
)
from vk.webhooks.shadowpods import TenantPodPolicy

log = structlog.get_logger("vk.webhooks.server")

# The largest AdmissionReview the API server sends here: two objects of etcd's 1.5 MiB at most
# (the object and, on UPDATE, its old version: ShadowPods and NamespaceOffloadings are stored as
# JSON, so that is their size here; pods come on CREATE alone, and one larger than its ShadowPod
# may be could not be offloaded anyway) and the review around them (kind, user, groups: a few
# KiB). A larger one is of an object etcd would refuse: 413, on its Content-Length, unread.
MAX_REVIEW_BYTES = 2 * 1536 * 1024 + 256 * 1024
# Reviews larger than this (rare: a pod with a long env or large annotations) are large: the
# listener reads at most REVIEW_BUDGET // SMALL_REVIEW_BYTES of them at once.
SMALL_REVIEW_BYTES = 128 * 1024
# The bytes of reviews read and answered at once (a larger one alone), the others waiting
# within their deadline, counted by size, not number: JSON decodes to some 24 times its size in
# Python objects (`[{},{},...]`, which a ShadowPod's spec.pod may hold), kept while the review
# waits on its Quota's ledger. Four of the largest were 320 MiB next to the process's 140 MiB
# (its limit: 384Mi), and 128 connections' reviews of 128 KiB would have been 440; this decodes
# to 100 at most. Reviews of a pod or ShadowPod are a few KiB: hundreds fit.
REVIEW_BUDGET = 4 * 1024 * 1024
CERTIFICATE_CHECK_INTERVAL = 60.0
# How often a webhook keeping its own certificate checks it and the configurations' CA.
OWN_CERTIFICATE_INTERVAL = 300.0

# Connections of one port in all, counted from accept (TLS buffers come before the handshake):
# 128 sending heads at the limits below hold 100 MiB (measured on uvloop). At the cap the one
# waiting longest (in its handshake, idle, or sending its request) is closed to make room: the
# API server's requests wait milliseconds, so a flood closes the flood's. A new connection is
# refused only when every other is being answered, 128 reviews at once, more than bursts bring
# (controllers create pods at their client's rate, 20/s by default). No cap per source address:
# the API server connects from one (through konnectivity, every API server from one agent's),
# a connection per review in flight, so a cap per source low enough to matter would refuse it
# first under a burst, and failurePolicy Fail its pods.
MAX_CONNECTIONS = 128
# From a request's first byte to its body's last: the API server sends them at once.
REQUEST_SECONDS = 10.0
# A little longer than the API server's client keeps an idle connection (Go's IdleConnTimeout,
# 90 s): it closes its idle ones first, so never sends a review on one being closed here.
IDLE_SECONDS = 100.0
# Request heads: the API server sends ten-odd headers, a bearer token the longest (a few KiB).
MAX_HEADERS = 32
WEBHOOK_LIMITS = ConnectionLimits(
    connections=MAX_CONNECTIONS,
    request_seconds=REQUEST_SECONDS,
    idle_seconds=IDLE_SECONDS,
    max_headers=MAX_HEADERS,
    large_body_bytes=SMALL_REVIEW_BYTES,
    # The budget decides: no more of them than it lets in at once.
    large_bodies=REVIEW_BUDGET // SMALL_REVIEW_BYTES,
)
# The metrics agent's handshake wants the front proxy's client certificate, so none but the API
# server sends it heads, and these carry an X-Remote-Group header per group of the user: aiohttp's
# default count.
AGENT_LIMITS = replace(WEBHOOK_LIMITS, max_headers=128)

ADMISSIONS = Counter(
    "vk_webhook_admissions_total",
    "Admission reviews answered, by webhook endpoint and result (allowed, stamped, denied)",
    ["webhook", "result"],
)
ADMISSION_SECONDS = Histogram(
    "vk_webhook_admission_seconds",
    "Time to answer an admission review, by webhook endpoint",
    ["webhook"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0),
)


def serving_ssl_context(
    cert_file: Path, key_file: Path, caller_ca_file: Path | None = None
) -> ssl.SSLContext:
    """The server's TLS: its certificate, and with `caller_ca_file` the client certificates it
    verifies (optional at the handshake: the probes of /healthz and /readyz present none)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    if caller_ca_file is not None:
        context.load_verify_locations(cafile=str(caller_ca_file))
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def caller_name(peer_certificate: Mapping[str, Any] | None) -> str | None:
    """The common name of a verified client certificate (`SSLSocket.getpeercert()`), if any."""
    for rdn in (peer_certificate or {}).get("subject", ()):
        for key, value in rdn:
            if key == "commonName":
                return str(value)
    return None


class ByteBudget:
    """At most `limit` bytes taken at once, in the order asked (so that a large taker is not
    passed by smaller ones that fit), but for the small that fit (`small`): they pass those
    waiting, so a steady stream of them may hold a large one back until its deadline; one
    taking more than `limit` is let in alone."""

    def __init__(self, limit: int, small: int = 0) -> None:
        self.limit = limit
        self.small = small
        self.taken = 0
        self.waiting: deque[tuple[int, asyncio.Future[None]]] = deque()

    @asynccontextmanager
    async def take(self, size: int) -> AsyncIterator[None]:
        await self.acquire(size)
        try:
            yield
        finally:
            self.release(size)

    async def acquire(self, size: int) -> None:
        if (size <= self.small or not self.waiting) and self._fits(size):
            self.taken += size
            return
        turn = asyncio.get_running_loop().create_future()
        waiter = (size, turn)
        self.waiting.append(waiter)
        try:
            await turn
        except BaseException:
            if turn.done() and not turn.cancelled():
                self.release(size)  # given its turn as it was cancelled
            else:
                if waiter in self.waiting:
                    self.waiting.remove(waiter)
                self._wake()  # it may have held back those behind it
            raise

    def release(self, size: int) -> None:
        self.taken -= size
        self._wake()

    def _fits(self, size: int) -> bool:
        return self.taken == 0 or self.taken + size <= self.limit

    def _wake(self) -> None:
        while self.waiting:
            size, turn = self.waiting[0]
            if turn.done():  # cancelled, its taker not yet resumed
                self.waiting.popleft()
                continue
            if not self._fits(size):
                return
            self.waiting.popleft()
            self.taken += size
            turn.set_result(None)


class WebhookServer:
    """The HTTPS endpoints. `run()` until cancelled; `ready` is set once it listens."""

    def __init__(
        self,
        admission: ShadowPodAdmission,
        offloading: OffloadingAdmission,
        tenant_objects: TenantObjectAdmission,
        address: str,
        context: ssl.SSLContext,
        *,
        healthy: Callable[[], bool],
        callers: frozenset[str] | None = None,
        limits: ConnectionLimits = WEBHOOK_LIMITS,
    ) -> None:
        self.admission = admission
        self.offloading = offloading
        self.tenant_objects = tenant_objects
        self.host, self.port = split_address(address)
        self.context = context
        self.healthy = healthy
        # The client certificate names that may send reviews (None: anyone, for API servers
        # that cannot authenticate to webhooks, as managed control planes).
        self.callers = callers
        self.limits = limits
        # A pod's review (a few KiB) does not wait behind a large one that does not fit yet.
        self.reviews = ByteBudget(REVIEW_BUDGET, small=SMALL_REVIEW_BYTES)
        self.ready = asyncio.Event()

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_REVIEW_BYTES)
        app.router.add_post(MUTATE_PATH, self._mutate)
        app.router.add_post(VALIDATE_PATH, self._validate)
        app.router.add_post(PLACE_POD_PATH, self._place_pod)
        app.router.add_post(VALIDATE_OFFLOADING_PATH, self._validate_offloading)
        app.router.add_post(VALIDATE_TENANT_OBJECT_PATH, self._validate_tenant_object)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        app.router.add_get("/metrics", self._metrics)
        return app

    async def run(self) -> None:
        await serve(
            self.app(),
            f"{self.host}:{self.port}",
            self.context,
            "webhook",
            self.ready,
            limits=self.limits,
        )

    async def _mutate(self, request: web.Request) -> web.Response:
        return await self._review(request, "mutate-shadowpod", self.admission.mutate)

    async def _validate(self, request: web.Request) -> web.Response:
        return await self._review(request, "validate-shadowpod", self.admission.validate)

    async def _place_pod(self, request: web.Request) -> web.Response:
        return await self._review(request, "mutate-pod-offloading", self.offloading.place_pod)

    async def _validate_offloading(self, request: web.Request) -> web.Response:
        return await self._review(
            request, "validate-namespaceoffloading", self.offloading.validate_offloading
        )

    async def _validate_tenant_object(self, request: web.Request) -> web.Response:
        return await self._review(request, "validate-tenant-object", self.tenant_objects.validate)

    async def _review(
        self,
        http: web.Request,
        webhook: str,
        handle: Callable[[JSON], Answer] | Callable[[JSON], Awaitable[Answer]],
    ) -> web.Response:
        started = time.perf_counter()
        if self.callers is not None:
            caller = caller_name(
                http.transport.get_extra_info("peercert") if http.transport else None
            )
            if caller not in self.callers:
                ADMISSIONS.labels(webhook, "unauthenticated").inc()
                log.warning("review refused", webhook=webhook, caller=caller, remote=http.remote)
                return web.json_response(
                    {
                        "message": "only the API server sends admission reviews here: "
                        "present its webhook client certificate"
                    },
                    status=403,
                )
        async with self._review_turn(http):
            body = await read_body(http, MAX_REVIEW_BYTES)
            # Decoded in `_answer` alone: none of the review outlives its answer (and its turn).
            return await self._answer(body, webhook, handle, started)

    @asynccontextmanager
    async def _review_turn(self, http: web.Request) -> AsyncIterator[None]:
        """A review's share of REVIEW_BUDGET, waited for within its request's deadline, as its
        body would be (a review of no stated length counts as the largest)."""
        length = http.content_length
        # Too large a one is refused at once (`read_body`), waiting for nothing.
        if length is not None and length > MAX_REVIEW_BYTES:
            yield
            return
        size = MAX_REVIEW_BYTES if length is None else length
        connection = connection_of(http)
        try:
            async with asyncio.timeout_at(connection.deadline if connection else None):
                await self.reviews.acquire(size)
        except TimeoutError as error:
            raise web.HTTPRequestTimeout(text="the request did not come in time") from error
        try:
            yield
        finally:
            self.reviews.release(size)

    async def _answer(
        self,
        body: bytes,
        webhook: str,
        handle: Callable[[JSON], Answer] | Callable[[JSON], Awaitable[Answer]],
        started: float,
    ) -> web.Response:
        try:
            review = json.loads(body)
            request = review["request"]
            uid = str(request["uid"])
        except (ValueError, KeyError, TypeError):
            ADMISSIONS.labels(webhook, "malformed").inc()
            return web.json_response(
                {"message": "expected an admission.k8s.io/v1 AdmissionReview with a request"},
                status=400,
            )
        answered = handle(request)
        answer = await answered if inspect.isawaitable(answered) else answered
        result = (
            "denied" if not answer.decision.allowed else "stamped" if answer.patch else "allowed"
        )
        ADMISSIONS.labels(webhook, result).inc()
        ADMISSION_SECONDS.labels(webhook).observe(time.perf_counter() - started)
        metadata = (request.get("object") or {}).get("metadata") or {}
        event = log.info if result == "denied" else log.debug
        event(
            "admission",
            webhook=webhook,
            result=result,
            operation=request.get("operation"),
            namespace=request.get("namespace"),
            kind=(request.get("kind") or {}).get("kind"),
            name=request.get("name") or metadata.get("name") or metadata.get("generateName"),
            user=(request.get("userInfo") or {}).get("username"),
            reason=answer.decision.message or None,
        )
        return web.json_response(forge_review_response(uid, answer))

    async def _healthz(self, _: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def _readyz(self, _: web.Request) -> web.Response:
        if self.healthy():
            return web.Response(text="ok")
        return web.Response(status=503, text="caches not synced")

    async def _metrics(self, _: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(REGISTRY), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )


async def reload_certificate_when_changed(
    contexts: Sequence[ssl.SSLContext], cert_file: Path, key_file: Path, interval: float
) -> None:
    """Loads a renewed serving certificate (cert-manager, a rotated Secret) into every listener's
    context, for the connections that follow, without a restart."""

    def stamp() -> tuple[float, float]:
        return cert_file.stat().st_mtime, key_file.stat().st_mtime

    last = stamp()
    while True:
        await asyncio.sleep(interval)
        try:
            current = stamp()
            if current != last:
                for context in contexts:
                    context.load_cert_chain(cert_file, key_file)
                last = current
                log.info("serving certificate reloaded", cert_file=str(cert_file))
        except (OSError, ssl.SSLError) as error:  # half-written: next time
            log.warning("cannot reload the serving certificate", error=str(error))


@dataclass(frozen=True)
class WebhookOptions:
    # Files of a certificate managed elsewhere, or else the Secret the webhook keeps its own
    # in (in `namespace`, for the Service `service_name`).
    tls_cert_file: Path | None = None
    tls_private_key_file: Path | None = None
    certificate_secret: str | None = None
    service_name: str = "vk-webhook"
    namespace: str = "vk"
    kubeconfig: str | None = None
    listen_address: str = ":9443"
    metrics_address: str | None = None
    enforcement_enabled: bool = True
    # Where the API server can authenticate to webhooks: the CA of its client certificate and
    # the names it may bear; reviews from anyone else are refused.
    caller_ca_file: Path | None = None
    caller_names: frozenset[str] = frozenset()
    # What tenants' pods may name besides the defaults (scheduling fields).
    policy: TenantPodPolicy = field(default_factory=TenantPodPolicy)
    # The provider's metrics agent (`vk.webhooks.metrics_agent`), when given an address; the
    # CA of the kubelets it reads (None: the cluster's).
    metrics_agent_address: str | None = None
    kubelet_ca_file: Path | None = None
    # A consumer's ResourceSlices answered at once (the controller manager's figure), of
    # which its control plane may keep twice as many.
    max_resource_slices: int = DEFAULT_MAX_RESOURCE_SLICES
    log_level: str = "info"


async def keep_own_certificate(
    client: KubeClient,
    options: WebhookOptions,
    directory: Path,
    certificate: WebhookCertificate,
    interval: float,
) -> None:
    """Keep the CA of the served `certificate` in the webhook configurations and, every
    `interval`, renew the Secret's certificate when due; a new certificate is written to the
    files the TLS context reloads from."""
    assert options.certificate_secret
    while True:
        try:
            await ensure_ca_bundle(client, certificate.ca_pem)
            await asyncio.sleep(interval)
            current = await ensure_certificate(
                client, options.namespace, options.certificate_secret, options.service_name
            )
            if current != certificate:
                write_certificate_files(current, directory)
                certificate = current
        except (ApiError, CertificateError) as error:
            log.warning("cannot check the webhook certificate", error=str(error))
            await asyncio.sleep(interval)


async def run_webhook(options: WebhookOptions) -> int:
    client = KubeClient(default_connection(options.kubeconfig), name="home")
    own_certificate: list[Callable[[], Coroutine[Any, Any, None]]] = []
    own_directory: Path | None = None
    if options.certificate_secret:
        directory = own_directory = Path(tempfile.mkdtemp(prefix="vk-webhook-"))
        certificate = await ensure_certificate(
            client, options.namespace, options.certificate_secret, options.service_name
        )
        cert_file, key_file = write_certificate_files(certificate, directory)
        own_certificate.append(
            lambda: keep_own_certificate(
                client, options, directory, certificate, OWN_CERTIFICATE_INTERVAL
            )
        )
    elif options.tls_cert_file and options.tls_private_key_file:
        cert_file, key_file = options.tls_cert_file, options.tls_private_key_file
    else:
        raise ValueError(
            "the webhook needs --tls-cert-file and --tls-private-key-file, or --certificate-secret"
        )
    context = serving_ssl_context(cert_file, key_file, options.caller_ca_file)
    quotas = quota_informer(client)
    # Tenant and twin namespaces: whose they are, and their Pod Security level.
    namespaces = Informer(client, "v1", "namespaces", label_selector=REMOTE_CLUSTER_ID_LABEL)
    offloadings = Informer(client, NamespaceOffloading.group_version(), NamespaceOffloading.PLURAL)
    tenant_objects = tenant_object_informers(client)

    def synced() -> bool:
        informers = (quotas, namespaces, offloadings, *tenant_objects.values())
        return all(i.synced.is_set() for i in informers)

    admission = ShadowPodAdmission(
        quotas.store,
        namespaces.store,
        client,
        enforcement_enabled=options.enforcement_enabled,
        synced=synced,
        policy=options.policy,
    )
    offloading = OffloadingAdmission(
        offloadings.store,
        synced=offloadings.synced.is_set,
        home_cluster_id=await home_cluster_id(client, options.namespace),
        vk_namespace=options.namespace,
    )
    tenant_object_admission = TenantObjectAdmission(
        {plural: informer.store for plural, informer in tenant_objects.items()},
        namespaces.store,
        following=lambda: all(
            i.synced.is_set() and i.failing_since is None
            for i in (namespaces, *tenant_objects.values())
        ),
        max_resource_slices=options.max_resource_slices,
    )
    for plural, informer in tenant_objects.items():
        informer.add_handler(tenant_object_admission.shown(plural))
    server = WebhookServer(
        admission,
        offloading,
        tenant_object_admission,
        options.listen_address,
        context,
        healthy=synced,
        callers=options.caller_names if options.caller_ca_file else None,
    )
    if options.caller_ca_file is None:
        log.warning(
            "admission reviews are answered whoever sends them: anyone who reaches this port "
            "(a consumer's offloaded pod among them) may hold a share of a consumer's Quota "
            "with made-up ShadowPod reviews; where the API server authenticates to webhooks, "
            "give --admission-caller-ca-file and --admission-caller-names (chart values "
            "webhook.admissionCallers)"
        )
    contexts = [context]
    agent: MetricsAgent | None = None
    if options.metrics_agent_address:
        try:
            agent, agent_context = await start_metrics_agent(
                client, namespaces.store, options, cert_file, key_file
            )
            contexts.append(agent_context)
        except (ApiError, OSError, ValueError, ssl.SSLError) as error:
            # Admission goes on without it: the consumers' `kubectl top` is what waits.
            log.error("the metrics agent cannot start", error=str(error))
    running = [
        asyncio.create_task(quotas.run(), name="quotas"),
        asyncio.create_task(namespaces.run(), name="namespaces"),
        asyncio.create_task(offloadings.run(), name="namespaceoffloadings"),
        *(asyncio.create_task(i.run(), name=plural) for plural, i in tenant_objects.items()),
        asyncio.create_task(server.run(), name="server"),
        asyncio.create_task(
            supervise(
                "certificate-reload",
                lambda: reload_certificate_when_changed(
                    contexts,
                    cert_file,
                    key_file,
                    CERTIFICATE_CHECK_INTERVAL,
                ),
            ),
            name="certificate",
        ),
        *(
            asyncio.create_task(supervise("own-certificate", keep), name="own-certificate")
            for keep in own_certificate
        ),
    ]
    if agent is not None:
        assert options.metrics_agent_address
        agent_server = serve(
            agent.app(), options.metrics_agent_address, contexts[-1], "agent", limits=AGENT_LIMITS
        )
        running.append(asyncio.create_task(agent_server, name="metrics-agent"))
    if options.metrics_address:
        metrics = MetricsServer(options.metrics_address, ready=synced)
        running.append(asyncio.create_task(metrics.run(), name="metrics"))
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    stopping = asyncio.create_task(stop.wait(), name="stop")
    log.info(
        "webhook starting",
        enforcement_enabled=options.enforcement_enabled,
        address=options.listen_address,
    )
    try:
        done, _ = await asyncio.wait([stopping, *running], return_when=asyncio.FIRST_COMPLETED)
        for task in done:
            if task is not stopping:
                task.result()  # a crash surfaces here (each task runs until cancelled)
        return 0
    finally:
        for task in [stopping, *running]:
            task.cancel()
        await asyncio.gather(stopping, *running, return_exceptions=True)
        if agent is not None:
            await agent.close()
        await client.close()
        if own_directory is not None:  # the private key goes with the process
            shutil.rmtree(own_directory, ignore_errors=True)
        log.info("webhook stopped")


async def start_metrics_agent(
    client: KubeClient, namespaces: Store, options: WebhookOptions, cert_file: Path, key_file: Path
) -> tuple[MetricsAgent, ssl.SSLContext]:
    """The metrics agent and its TLS context, once the API server's front-proxy settings are
    read (without them no request could be told to come from the API server)."""
    authentication = await read_request_header_authentication(client)
    context = agent_ssl_context(cert_file, key_file, authentication)
    kubelet_ca = options.kubelet_ca_file.read_bytes() if options.kubelet_ca_file else None

    def peer_name(request: web.Request) -> str | None:
        return caller_name(
            request.transport.get_extra_info("peercert") if request.transport else None
        )

    agent = MetricsAgent(
        client,
        namespaces,
        client.connection,
        authentication,
        kubelet_ca_pem=kubelet_ca,
        peer_name=peer_name,
        now=time.time,
    )
    return agent, context


async def home_cluster_id(client: KubeClient, namespace: str) -> str | None:
    """This cluster's ID, from its identity ConfigMap; None, said, if there is none to read (a
    provider-only installation may have none: a consumer's NamespaceOffloadings need it)."""
    path = resource_path("v1", "configmaps", namespace=namespace, name=CLUSTER_IDENTITY_CONFIGMAP)
    try:
        return parse_cluster_identity(await client.get(path)).cluster_id
    except (ApiError, InvalidClusterIdentity) as error:
        log.warning(
            "no cluster identity: a NamespaceOffloading's DefaultName is judged by the "
            "controller manager alone",
            error=str(error)[:500],
        )
        return None


def main(options: WebhookOptions) -> int:
    configure_logging(options.log_level, component="webhook")
    return daemon.run(run_webhook(options))
