"""The provider's metrics agent: each consumer's pods' usage as the provider's kubelets count it,
served to that consumer alone as an aggregated API of the provider's API server,
`GET /apis/metrics.vk.io/v1alpha1/namespaces/<twin namespace>/pods`.

Why: a consumer's virtual kubelet serves `/metrics/resource` for its offloaded pods, and
metrics-server (so `kubectl top`, HPA) reads CPU there as a cumulative counter. metrics.k8s.io
on the provider gives only rates over a window, so a counter built from them misses whatever a
container used before the first window seen; an idle container's then reads 0, and
metrics-server drops a pod with a counter of 0. The kubelet's own counter (cAdvisor's, from
the container's start) is the real one, but reading a kubelet takes `nodes/metrics` on every
node, which no tenant may have. So the provider reads its kubelets, as metrics-server does, and
hands each consumer the rows of its own pods: Liqo's metric agent does the same for every
cluster ID to anyone allowed the path; here a namespace at a time, to the consumer the namespace
was made for.

Who is asking: the API server authorizes the request (RBAC: `list` on `pods.metrics.vk.io` in
the namespace, which providers bind to a consumer's slice identities in its twin namespaces
only) and proxies it with its front-proxy client certificate and the requester in headers
(`X-Remote-User`, `X-Remote-Group`). The agent listens apart from the admission webhook, where
only that client certificate is accepted (`requestheader-client-ca-file` of the
`extension-apiserver-authentication` ConfigMap), and checks again that a tenant asks only for
its own twin namespaces.

It is served by `vk webhook` because that is the provider's HTTPS endpoint the API server
already reaches, with the namespaces of the consumers already cached.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime
import math
import ssl
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import structlog
from aiohttp import web
from prometheus_client import Counter
from prometheus_client.parser import text_string_to_metric_families

from vk.api.constants import (
    REMOTE_CLUSTER_ID_LABEL,
    RESOURCE_METRICS_PATH_ANNOTATION,
    TENANT_NAMESPACE_LABEL,
)
from vk.api.meta import forge_failure_status
from vk.kube.client import JSON, ApiError, KubeClient, resource_path
from vk.kube.informer import Store
from vk.kube.kubeconfig import ClusterConnection
from vk.webhooks.shadowpods import tenant_of

log = structlog.get_logger("vk.webhooks.metrics_agent")

GROUP = "metrics.vk.io"
VERSION = "v1alpha1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
USAGE_LIST_KIND = "PodUsageList"
AUTHENTICATION_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")
DEFAULT_KUBELET_PORT = 10250
KUBELET_TIMEOUT = 10.0
KUBELET_REUSE_SECONDS = 5.0
_CONTAINER_SERIES = (
    "container_cpu_usage_seconds_total",
    "container_memory_working_set_bytes",
    "container_start_time_seconds",
)

AGENT_REQUESTS = Counter(
    "vk_metrics_agent_requests_total",
    "Usage requests the metrics agent answered, by result (served, unauthenticated, forbidden)",
    ["result"],
)


class MetricsUnreadable(ValueError):
    """A kubelet's `/metrics/resource` is not the Prometheus text format."""


@dataclass(frozen=True)
class RequestHeaderAuthentication:
    """How this API server proxies requests to aggregated APIs: the CA of its front-proxy
    client certificate, the names that certificate may bear (any, when empty) and the headers
    naming the requester."""

    client_ca_pem: bytes
    allowed_names: frozenset[str]
    username_headers: tuple[str, ...]
    group_headers: tuple[str, ...]


def _json_list(data: Mapping[str, Any], key: str, default: Sequence[str]) -> tuple[str, ...]:
    raw = data.get(key)
    if not raw:
        return tuple(default)
    values = orjson.loads(raw)
    if not isinstance(values, list) or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{key} is not a JSON list of strings")
    return tuple(values)


def parse_request_header_authentication(
    configmap: Mapping[str, Any],
) -> RequestHeaderAuthentication:
    """The front-proxy settings the API server publishes in `extension-apiserver-authentication`."""
    data = configmap.get("data") or {}
    ca = data.get("requestheader-client-ca-file")
    if not ca:
        raise ValueError(
            "the API server publishes no requestheader-client-ca-file: it has no aggregation "
            "layer (start it with --requestheader-client-ca-file and --proxy-client-cert-file)"
        )
    return RequestHeaderAuthentication(
        client_ca_pem=str(ca).encode(),
        allowed_names=frozenset(_json_list(data, "requestheader-allowed-names", ())),
        username_headers=_json_list(data, "requestheader-username-headers", ("X-Remote-User",)),
        group_headers=_json_list(data, "requestheader-group-headers", ("X-Remote-Group",)),
    )


def agent_ssl_context(
    cert_file: Path, key_file: Path, authentication: RequestHeaderAuthentication
) -> ssl.SSLContext:
    """Serving with the webhook's certificate; a client certificate from the front-proxy CA
    required at the handshake (nobody else has business on this port)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_file, key_file)
    context.load_verify_locations(cadata=authentication.client_ca_pem.decode())
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def caller_problem(common_name: str | None, allowed_names: frozenset[str]) -> str | None:
    """Why a verified client certificate may not speak for users here, if it may not."""
    if common_name is None:
        return "present the API server's front-proxy client certificate"
    if allowed_names and common_name not in allowed_names:
        return f"{common_name} is not among the API server's requestheader-allowed-names"
    return None


def reader_problem(
    namespace: str, labels: Mapping[str, str] | None, groups: Sequence[str]
) -> str | None:
    """Why the requester may not read the usage of the pods of `namespace`, if it may not: a
    tenant (a slice identity, by its group) reads only the twin namespaces made for it; anyone
    else the API server let through is someone the provider's RBAC chose, as the ShadowPod
    webhook judges it too."""
    consumer = tenant_of(groups)
    if consumer is None:
        return None
    owner = (labels or {}).get(REMOTE_CLUSTER_ID_LABEL)
    if labels is None or owner != consumer or TENANT_NAMESPACE_LABEL in labels:
        return f"namespace {namespace} is not a namespace this provider made for {consumer}"
    return None


def kubelet_endpoint(node: Mapping[str, Any]) -> tuple[str, str] | None:
    """Where a node's kubelet serves its resource metrics, as metrics-server finds it: the
    InternalIP, the port the node reports, and the path a node may name in its annotation
    (kwok's simulated nodes do)."""
    status = node.get("status") or {}
    addresses = [
        a.get("address")
        for a in status.get("addresses") or []
        if a.get("type") == "InternalIP" and a.get("address")
    ]
    if not addresses:
        return None
    port = ((status.get("daemonEndpoints") or {}).get("kubeletEndpoint") or {}).get("Port")
    if not isinstance(port, int) or not 0 < port < 65536:
        port = DEFAULT_KUBELET_PORT
    host = str(addresses[0])
    if ":" in host:
        host = f"[{host}]"
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    path = annotations.get(RESOURCE_METRICS_PATH_ANNOTATION) or "/metrics/resource"
    if not str(path).startswith("/"):
        path = f"/{path}"
    return f"https://{host}:{port}", str(path)


@dataclass
class ContainerUsage:
    """One container's series from a kubelet (seconds since the epoch, core-seconds, bytes)."""

    cpu_seconds: float | None = None
    cpu_time: float | None = None
    memory_bytes: float | None = None
    memory_time: float | None = None
    start_time: float | None = None


PodUsage = dict[str, ContainerUsage]  # by container name


def parse_resource_metrics(
    text: str, namespace: str, pods: set[str], scraped_at: float
) -> dict[str, PodUsage]:
    """The containers of `pods` in `namespace` in a kubelet's `/metrics/resource`; a series
    without a timestamp is stamped `scraped_at`."""
    found: dict[str, PodUsage] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name not in _CONTAINER_SERIES:
                    continue
                labels = sample.labels
                pod, container = labels.get("pod", ""), labels.get("container", "")
                if labels.get("namespace") != namespace or pod not in pods or not container:
                    continue
                if not math.isfinite(sample.value) or sample.value < 0:
                    continue
                usage = found.setdefault(pod, {}).setdefault(container, ContainerUsage())
                stamp = sample.timestamp if sample.timestamp is not None else scraped_at
                if sample.name == "container_cpu_usage_seconds_total":
                    usage.cpu_seconds, usage.cpu_time = sample.value, float(stamp)
                elif sample.name == "container_memory_working_set_bytes":
                    usage.memory_bytes, usage.memory_time = sample.value, float(stamp)
                else:
                    usage.start_time = sample.value
    except (ValueError, TypeError, IndexError) as error:
        raise MetricsUnreadable(str(error)) from error
    return found


def rfc3339_ms(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"


def forge_pod_usage_list(namespace: str, usage: Mapping[str, PodUsage]) -> JSON:
    """The answer: per pod, per container, the kubelet's cumulative CPU, working set and start,
    each at the kubelet's own time (stats/v1alpha1's names, so metrics-server's rate math on
    the consumer is the provider's)."""
    items = []
    for pod in sorted(usage):
        containers = []
        for name in sorted(usage[pod]):
            point = usage[pod][name]
            container: JSON = {"name": name}
            if point.start_time is not None:
                container["startTime"] = rfc3339_ms(point.start_time)
            if point.cpu_seconds is not None and point.cpu_time is not None:
                container["cpu"] = {
                    "time": rfc3339_ms(point.cpu_time),
                    "usageCoreNanoSeconds": round(point.cpu_seconds * 1e9),
                }
            if point.memory_bytes is not None and point.memory_time is not None:
                container["memory"] = {
                    "time": rfc3339_ms(point.memory_time),
                    "workingSetBytes": round(point.memory_bytes),
                }
            containers.append(container)
        items.append({"metadata": {"name": pod, "namespace": namespace}, "containers": containers})
    return {"apiVersion": GROUP_VERSION, "kind": USAGE_LIST_KIND, "items": items}


def forge_api_resource_list() -> JSON:
    return {
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {
                "name": "pods",
                "singularName": "",
                "namespaced": True,
                "kind": "PodUsage",
                "verbs": ["list"],
            }
        ],
    }


def forge_api_group() -> JSON:
    version = {"groupVersion": GROUP_VERSION, "version": VERSION}
    return {
        "kind": "APIGroup",
        "apiVersion": "v1",
        "name": GROUP,
        "versions": [version],
        "preferredVersion": version,
    }


def running_pods_by_node(pods: Sequence[Mapping[str, Any]]) -> dict[str, set[str]]:
    """The pods a kubelet runs, by node: those bound and not finished."""
    by_node: dict[str, set[str]] = {}
    for pod in pods:
        node = (pod.get("spec") or {}).get("nodeName")
        phase = (pod.get("status") or {}).get("phase")
        if node and phase not in ("Succeeded", "Failed"):
            by_node.setdefault(str(node), set()).add(str(pod["metadata"]["name"]))
    return by_node


class MetricsAgent:
    """The aggregated API. `namespaces` is the webhook's cache of the namespaces made for
    consumers; `client` reads pods and nodes as the webhook; `connection` (its identity)
    reads the kubelets, whose serving certificates `kubelet_ca_pem` signed."""

    def __init__(
        self,
        client: KubeClient,
        namespaces: Store,
        connection: ClusterConnection,
        authentication: RequestHeaderAuthentication,
        *,
        kubelet_ca_pem: bytes | None,
        peer_name: Callable[[web.Request], str | None],
        now: Callable[[], float],
    ) -> None:
        self.client = client
        self.namespaces = namespaces
        self.connection = connection
        self.authentication = authentication
        self.kubelet_ca_pem = kubelet_ca_pem
        self.peer_name = peer_name
        self.now = now
        self._kubelets: dict[str, KubeClient] = {}
        # A kubelet's answer, by URL: shared by the requests of every namespace on its node
        # for a few seconds (each consumer's virtual kubelet asks once a scrape per twin
        # namespace; the kubelet's answer covers them all).
        self._recent: dict[str, tuple[float, asyncio.Future[str]]] = {}

    def app(self) -> web.Application:
        app = web.Application()
        base = f"/apis/{GROUP_VERSION}"
        app.router.add_get(
            "/apis",
            self._discovery(
                lambda: {"kind": "APIGroupList", "apiVersion": "v1", "groups": [forge_api_group()]}
            ),
        )
        app.router.add_get(f"/apis/{GROUP}", self._discovery(forge_api_group))
        app.router.add_get(base, self._discovery(forge_api_resource_list))
        app.router.add_get(f"{base}/namespaces/{{namespace}}/pods", self._pod_usage)
        return app

    async def close(self) -> None:
        for kubelet in self._kubelets.values():
            await kubelet.close()
        self._kubelets.clear()

    def _unauthenticated(self, request: web.Request) -> web.Response | None:
        problem = caller_problem(self.peer_name(request), self.authentication.allowed_names)
        if problem is None:
            return None
        AGENT_REQUESTS.labels("unauthenticated").inc()
        log.warning("usage request refused", reason=problem, remote=request.remote)
        return web.json_response(forge_failure_status(401, "Unauthorized", problem), status=401)

    def _discovery(self, forge: Callable[[], JSON]) -> Callable[[web.Request], Any]:
        async def handler(request: web.Request) -> web.Response:
            return self._unauthenticated(request) or web.json_response(forge())

        return handler

    async def _pod_usage(self, request: web.Request) -> web.Response:
        refused = self._unauthenticated(request)
        if refused is not None:
            return refused
        namespace = request.match_info["namespace"]
        groups = [
            group
            for header in self.authentication.group_headers
            for group in request.headers.getall(header, [])
        ]
        found = self.namespaces.get(namespace)
        labels = (found or {}).get("metadata", {}).get("labels") if found else None
        problem = reader_problem(namespace, labels, groups)
        if problem is not None:
            AGENT_REQUESTS.labels("forbidden").inc()
            return web.json_response(forge_failure_status(403, "Forbidden", problem), status=403)
        try:
            pods = await self.client.get(resource_path("v1", "pods", namespace=namespace))
        except (ApiError, OSError, TimeoutError) as error:
            AGENT_REQUESTS.labels("unavailable").inc()
            message = f"cannot list the pods of {namespace}: {error}"
            return web.json_response(
                forge_failure_status(503, "ServiceUnavailable", message), status=503
            )
        by_node = running_pods_by_node(pods.get("items") or [])
        scraped = await asyncio.gather(
            *(self._scrape(node, namespace, members) for node, members in by_node.items())
        )
        usage: dict[str, PodUsage] = {}
        for part in scraped:
            usage.update(part)
        AGENT_REQUESTS.labels("served").inc()
        return web.json_response(forge_pod_usage_list(namespace, usage))

    async def _scrape(self, node_name: str, namespace: str, pods: set[str]) -> dict[str, PodUsage]:
        """The rows of `pods` from `node_name`'s kubelet; nothing if it cannot be read (the
        other nodes' pods are still served, as metrics-server serves the nodes it reads)."""
        try:
            node = await self.client.get(resource_path("v1", "nodes", name=node_name))
            endpoint = kubelet_endpoint(node)
            if endpoint is None:
                raise MetricsUnreadable("the node reports no InternalIP")
            server, path = endpoint
            text = await self._kubelet_text(server, path)
            return parse_resource_metrics(text, namespace, pods, self.now())
        except (ApiError, OSError, TimeoutError, MetricsUnreadable) as error:
            log.warning(
                "cannot read a kubelet's resource metrics", node=node_name, error=str(error)
            )
            return {}

    async def _kubelet_text(self, server: str, path: str) -> str:
        """The kubelet's resource metrics, fetched once for the requests of the next
        KUBELET_REUSE_SECONDS (a failure is not kept)."""
        url, now = server + path, self.now()
        recent = self._recent.get(url)
        if recent is None or now - recent[0] >= KUBELET_REUSE_SECONDS:
            fetching = asyncio.ensure_future(self._kubelet(server).get_text(path))
            self._recent = {
                u: r for u, r in self._recent.items() if now - r[0] < KUBELET_REUSE_SECONDS
            }
            self._recent[url] = recent = (now, fetching)
        try:
            return await asyncio.shield(recent[1])
        except BaseException:
            if self._recent.get(url) is recent and recent[1].done():
                del self._recent[url]
            raise

    def _kubelet(self, server: str) -> KubeClient:
        kubelet = self._kubelets.get(server)
        if kubelet is None:
            connection = dataclasses.replace(
                self.connection,
                server=server,
                ca_pem=self.kubelet_ca_pem or self.connection.ca_pem,
                insecure_skip_tls_verify=False,
                tls_server_name=None,
                proxy_url=None,
            )
            kubelet = self._kubelets[server] = KubeClient(
                connection, name="kubelet", timeout=KUBELET_TIMEOUT
            )
        return kubelet


async def read_request_header_authentication(client: KubeClient) -> RequestHeaderAuthentication:
    namespace, name = AUTHENTICATION_CONFIGMAP
    configmap = await client.get(resource_path("v1", "configmaps", namespace=namespace, name=name))
    return parse_request_header_authentication(configmap)
