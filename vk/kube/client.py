"""A small asyncio client for the Kubernetes REST API that works on the API's own JSON.

Objects stay dicts (DESIGN §5: decoding into generated model classes costs ~19x the CPU on every
list and watch event). Errors come back typed from the API's Status object, so callers branch on
`NotFound` or `Conflict` instead of parsing messages.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any
from urllib.parse import quote, urlencode

import orjson
import structlog
from prometheus_client import Counter

from vk.kube.kubeconfig import ClusterConnection, ExecCredential
from vk.kube.transport import MAX_BODY_BYTES, MAX_ERROR_BODY_BYTES, BodyTooLarge, Endpoint
from vk.kube.workqueue import TokenBucket

log = structlog.get_logger("vk.kube.client")

JSON = dict[str, Any]
FIELD_MANAGER = "vk"

API_REQUESTS = Counter(
    "vk_api_requests_total",
    "Requests to Kubernetes API servers, by client (home or provider), verb, resource and "
    "HTTP code",
    ["client", "verb", "resource", "code"],
)


def resource_of(path: str) -> str:
    """`pods`, `pods/status`, `leases`... of a REST path (`-` for non-resource paths)."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if parts[0] == "api":
        rest = parts[2:]
    elif parts[0] == "apis":
        rest = parts[3:]
    else:
        return "-"
    if len(rest) >= 2 and rest[0] == "namespaces" and len(rest) > 2:
        rest = rest[2:]
    if not rest:
        return "-"
    return f"{rest[0]}/{rest[2]}" if len(rest) > 2 else rest[0]


# The most one call takes, its retries and their sleeps included, unless the client is given
# another (`vk kubelet --client-timeout`): a server that never answers holds no worker for ever.
DEFAULT_REQUEST_TIMEOUT = 30.0
# How often a 429 is retried before it is an error (client-go: 10), within the client's
# timeout, which bounds the whole call, retries and their sleeps included.
TOO_MANY_REQUESTS_RETRIES = 10
# One watch event carries one object, which the API server stores in at most 1.5 MiB (etcd's
# request limit; its JSON may be larger): a line longer than this is not an event, and is not
# read on into memory (the provider's API server is the other party's).
MAX_WATCH_EVENT_BYTES = 8 * 1024 * 1024
# The most a provider's API server may send in one answer or one watch line (the home one's:
# transport.MAX_BODY_BYTES). A body is decoded whole, and orjson makes of `[{},{},...]` 24
# times its size in Python objects: 193 MiB at this cap (measured; `[0,0,...]` 32 MiB), where a
# 100 KB gzip bomb of 100 MiB took a process past its 512 MiB limit. One object (1.5 MiB in
# etcd, up to twice that as JSON: base64, escapes) still fits; a page of many does not, and is
# asked for again in smaller pages (`list_pages`).
PROVIDER_MAX_BODY_BYTES = MAX_WATCH_EVENT_BYTES
# An error's message is cut to this (a log line, a condition, /readyz: a server's page of text
# in each would drown them).
MAX_ERROR_MESSAGE_CHARS = 4096
# Pages of one list at most: a server that answers every page with a new continue token would
# be asked forever (24,018 pages in 2 s, seen). Ten times 10,000 objects at the smallest page.
MAX_PAGES_PER_LIST = 100_000
# Watch events taken in a row before the event loop runs others: a flood of small events, all
# in the bytes at hand, would hold it (928k events in 5 s; a 10 ms sleep woke 278 ms late).
EVENTS_BETWEEN_YIELDS = 100
WATCH_EVENT_TYPES = frozenset({"ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR"})


class ApiError(Exception):
    """The API server answered with an error Status."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


class NotFound(ApiError):
    pass


class AlreadyExists(ApiError):
    pass


class Conflict(ApiError):
    pass


class Gone(ApiError):
    """410: the resourceVersion asked for is too old; list again."""


# The annotation of the bookmark that ends a streamed list: every object there was is sent.
INITIAL_EVENTS_END_ANNOTATION = "k8s.io/initial-events-end"


def initial_events_end(bookmark: JSON) -> bool:
    """Whether a BOOKMARK event's object ends a streamed list."""
    annotations = (bookmark.get("metadata") or {}).get("annotations") or {}
    return annotations.get(INITIAL_EVENTS_END_ANNOTATION) == "true"


class MalformedWatch(ValueError):
    """A watch stream carried something that is not an event: the watch is given up, and
    opened again from the last event that was one."""


class MalformedList(ValueError):
    """A list's pages never end (a continue token given twice, or pages past
    MAX_PAGES_PER_LIST): the list is given up, and made again."""


def is_named_object(obj: object) -> bool:
    """Whether `obj` is an object an informer can keep: a dict with a name, and a namespace if
    any, that are strings (what comes from a provider may be anything)."""
    if not isinstance(obj, dict):
        return False
    metadata = obj.get("metadata")
    if not isinstance(metadata, dict):
        return False
    name, namespace = metadata.get("name"), metadata.get("namespace")
    return isinstance(name, str) and bool(name) and isinstance(namespace, str | None)


def parse_watch_event(line: bytes) -> JSON:
    """One line of a watch stream as its event, checked for what the informers read: a known
    type and an object, named unless a bookmark or an error. Anything else is MalformedWatch,
    never an event half taken in."""
    try:
        event = orjson.loads(line)
    except ValueError as error:
        raise MalformedWatch(f"a watch line that is not JSON ({error}): {line[:100]!r}") from None
    if not isinstance(event, dict) or event.get("type") not in WATCH_EVENT_TYPES:
        raise MalformedWatch(f"a watch line that is not an event: {line[:100]!r}")
    obj = event.get("object")
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata", {}), dict):
        raise MalformedWatch(f"a {event['type']} watch event without an object: {line[:100]!r}")
    if event["type"] in ("ERROR", "BOOKMARK"):
        return event
    if not is_named_object(obj):
        raise MalformedWatch(f"a {event['type']} watch event of an unnamed object: {line[:100]!r}")
    return event


def _error_code(status: Mapping[str, Any]) -> int:
    """The HTTP code of a watch ERROR event's Status (500 when it names none sensibly)."""
    code = status.get("code")
    return code if isinstance(code, int) and 400 <= code <= 599 else 500


def _typed_error(status: int, body: str) -> ApiError:
    try:
        payload = orjson.loads(body)
        if not isinstance(payload, dict):
            raise ValueError("not a Status")  # an answer from the other side, any shape
        reason, message = str(payload.get("reason", "")), str(payload.get("message", body))
    except ValueError:
        reason, message = "", body
    reason, message = reason[:MAX_ERROR_MESSAGE_CHARS], message[:MAX_ERROR_MESSAGE_CHARS]
    if status == 410:
        return Gone(status, reason or "Expired", message)
    if status == 404:
        return NotFound(status, reason or "NotFound", message)
    if status == 409:
        if reason == "AlreadyExists":
            return AlreadyExists(status, reason, message)
        return Conflict(status, reason or "Conflict", message)
    return ApiError(status, reason, message)


def resource_path(
    api_version: str,
    plural: str,
    *,
    namespace: str | None = None,
    name: str | None = None,
    subresource: str | None = None,
) -> str:
    """The REST path of a collection or an object: `/api/v1/namespaces/ns/pods/p/status`."""
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    parts = [prefix]
    if namespace:
        parts.append(f"namespaces/{quote(namespace, safe='')}")
    parts.append(plural)
    if name:
        parts.append(quote(name, safe=""))
    if subresource:
        parts.append(subresource)
    return "/".join(parts)


def request_target(path: str, params: Mapping[str, str] | None) -> str:
    """The target of a request: `path` (quoted again where it holds what a path may not, so
    that no name can end the request line), and `params` as its query."""
    target = quote(path, safe="/%:@!$&'()*+,;=-._~")
    return f"{target}?{urlencode(params)}" if params else target


def plural_of(kind: str) -> str:
    """The resource name of a kind, as the API server derives it for built-in kinds and for
    CRDs that do not choose their own (Quota -> quotas, Ingress -> ingresses,
    NetworkPolicy -> networkpolicies)."""
    lower = kind.lower()
    if lower.endswith(("s", "x", "ch", "sh")):
        return f"{lower}es"
    if lower.endswith("y") and lower[-2:-1] not in ("a", "e", "i", "o", "u"):
        return f"{lower[:-1]}ies"
    return f"{lower}s"


def object_path(obj: Mapping[str, Any]) -> str:
    """The REST path of a whole object (its apiVersion, kind, namespace and name)."""
    return listed_object_path(obj["apiVersion"], plural_of(obj["kind"]), obj)


def listed_object_path(api_version: str, plural: str, obj: Mapping[str, Any]) -> str:
    """The REST path of an object from its metadata alone: one from a list, or a cache filled
    by one, has no apiVersion or kind."""
    metadata = obj["metadata"]
    return resource_path(
        api_version, plural, namespace=metadata.get("namespace"), name=metadata["name"]
    )


def delete_options(
    *, uid: str | None = None, grace_period: int | None = None, propagation: str | None = None
) -> JSON:
    """The DeleteOptions body of a deletion. `uid`: a precondition, so that what is deleted is
    the object looked at, never another made since under its name (the API server answers 409
    then); `grace_period`: seconds, 0 for at once; `propagation`: what becomes of its
    dependents (`Orphan`, `Background`, `Foreground`)."""
    options: JSON = {"apiVersion": "v1", "kind": "DeleteOptions"}
    if uid is not None:
        options["preconditions"] = {"uid": uid}
    if grace_period is not None:
        options["gracePeriodSeconds"] = grace_period
    if propagation is not None:
        options["propagationPolicy"] = propagation
    return options


class KubeClient:
    """One API server, one identity. Use as `async with KubeClient(conn) as client:`.
    `max_body`: the largest answer, or watch line, taken from the server (a provider's:
    PROVIDER_MAX_BODY_BYTES); `timeout`: the most one request takes, its retries (429, 401)
    and the waits before them included, past which it raises TimeoutError (watches aside);
    `rate`: client-go's client-side rate limit (`--client-qps`, `--client-max-burst`), a token
    each request and each retry of one waits for (None: no limit)."""

    def __init__(
        self,
        connection: ClusterConnection,
        *,
        name: str = "api",
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        max_body: int = MAX_BODY_BYTES,
        rate: TokenBucket | None = None,
    ) -> None:
        self.connection = connection
        self.name = name  # the `client` label of vk_api_requests_total
        self.max_body = max_body
        self.rate = rate
        self._max_watch_line = min(max_body, MAX_WATCH_EVENT_BYTES)
        self._timeout = timeout
        self._endpoint: Endpoint | None = None
        # The exec plugin's credential whose client certificate the endpoint presents, if so.
        self._exec_certificate: ExecCredential | None = None
        # Whether the API server streams lists (a watch that sends the objects there are
        # first): None until asked, False once it refused.
        self._streams_lists: bool | None = None

    @property
    def timeout(self) -> float:
        return self._timeout

    async def __aenter__(self) -> KubeClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._endpoint is not None:
            await self._endpoint.close()
            self._endpoint = None
            self._exec_certificate = None

    def _headers(self, content_type: str | None, accept: str) -> dict[str, str]:
        headers = {"Accept": accept, "User-Agent": "vk"}
        if content_type:
            headers["Content-Type"] = content_type
        token = self.connection.bearer_token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def _wait_for_rate(self) -> None:
        """A request's token, when the client is rate limited: reserved in the order asked
        (none jumps the queue), and waited for within the request's own deadline."""
        if self.rate is not None and (wait := self.rate.reserve()) > 0:
            await asyncio.sleep(wait)

    def _endpoint_or_new(self) -> Endpoint:
        """The connections to the server (vk/kube/transport.py), opened as requests need them,
        with the kubeconfig's TLS, tls-server-name and proxy-url; and with the client
        certificate an exec plugin gives, if it does, renewed as it is (before it expires, or
        after the server refused it: `forget_credential`)."""
        endpoint = self._endpoint
        if endpoint is None:
            https = self.connection.server.startswith("https")
            if https:
                self._exec_certificate = self.connection.exec_certificate()
            endpoint = self._endpoint = Endpoint(
                self.connection.server,
                ssl_context=self.connection.ssl_context() if https else None,
                server_hostname=self.connection.tls_server_name,
                proxy_url=self.connection.proxy_url,
                max_body=self.max_body,
            )
        elif self._exec_certificate is not None:
            renewed = self.connection.exec_certificate()
            if renewed is not self._exec_certificate:
                self._exec_certificate = renewed
                endpoint.renew_tls(self.connection.ssl_context())
        return endpoint

    async def request(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
    ) -> JSON:
        raw = await self._send(method, path, params=params, body=body, content_type=content_type)
        result: JSON = orjson.loads(raw) if raw else {}
        return result

    async def get_text(self, path: str) -> str:
        """A non-JSON endpoint, such as `/livez`, `/version` or a kubelet's metrics (whose
        Prometheus handler answers 406 to an Accept of JSON alone)."""
        raw = await self._send("GET", path, accept="text/plain, */*")
        return raw.decode("utf-8", errors="replace")

    async def _send(
        self,
        method: str,
        path: str,
        *,
        params: dict[str, str] | None = None,
        body: Any = None,
        content_type: str = "application/json",
        accept: str = "application/json",
    ) -> bytes:
        # orjson both ways, bytes never decoded to text first: every write of every pod is
        # encoded here and its answer decoded (the json module encodes several times slower).
        data = None if body is None else orjson.dumps(body)
        attempt = 0
        refreshed = False
        # One deadline for the whole call, retries and their sleeps included: a server that
        # answers 429 just before each attempt's end would otherwise hold the caller (a worker
        # shared with every other provider) for minutes.
        async with asyncio.timeout(self._timeout) as deadline:
            while True:
                await self._wait_for_rate()
                answer, raw = await self._endpoint_or_new().request(
                    method,
                    request_target(path, params),
                    self._headers(content_type if data is not None else None, accept),
                    data,
                )
                status = answer.status
                API_REQUESTS.labels(self.name, method, resource_of(path), str(status)).inc()
                retry_after = answer.headers.get("retry-after", "1")
                # 429 (priority and fairness, or a watch cache still initializing, as right
                # after a CRD is created) asks the client to come back: client-go does, after
                # Retry-After, within the deadline.
                if status == 429 and attempt < TOO_MANY_REQUESTS_RETRIES:
                    attempt += 1
                    seconds = min(
                        float(retry_after)
                        if retry_after.isascii() and retry_after.isdigit()
                        else 1,
                        5.0,
                    )
                    ends = deadline.when()
                    # One that would end past the deadline is not waited for: the caller gets
                    # the 429 (an eviction a PodDisruptionBudget holds back), not a timeout.
                    if ends is None or asyncio.get_running_loop().time() + seconds < ends:
                        await asyncio.sleep(seconds)
                        continue
                if status == 401 and self.connection.renewable and not refreshed:
                    # The credential was revoked, or expired early, or its file was rotated
                    # since it was read: taken afresh, once.
                    refreshed = True
                    self.connection.forget_credential()
                    continue
                if status >= 400:
                    raise _typed_error(status, raw.decode("utf-8", errors="replace"))
                return raw

    async def get(self, path: str, params: dict[str, str] | None = None) -> JSON:
        return await self.request("GET", path, params=params)

    async def list_all(
        self, path: str, params: dict[str, str] | None = None, *, page_size: int = 500
    ) -> tuple[list[JSON], str]:
        """Every item of a collection, page by page; and the list's resourceVersion, from
        which a watch continues."""
        items: list[JSON] = []
        version = ""
        async for page, page_version in self.list_pages(path, params, page_size=page_size):
            items.extend(page)
            version = page_version
        return items, version

    async def list_pages(
        self, path: str, params: dict[str, str] | None = None, *, page_size: int = 500
    ) -> AsyncIterator[tuple[list[JSON], str]]:
        """A collection page by page, each with the resourceVersion of the list (set on the
        last page, from which a watch continues): a caller that keeps part of each object
        holds one page whole at a time, not ten thousand objects. A page over `max_body` is
        asked for again half as long, down to one object, and the rest of the list in pages
        that long; items that are not named objects are left out (logged)."""
        query = {**(params or {}), "limit": str(page_size)}
        tokens_seen: set[str] = set()
        skipped = 0
        for _ in range(MAX_PAGES_PER_LIST):
            try:
                page = await self.get(path, query)
            except BodyTooLarge:
                limit = int(query["limit"])
                if limit == 1:
                    raise
                query["limit"] = str(limit // 2)
                continue
            if not isinstance(page, dict):
                raise MalformedList(f"a page of {path} that is not a list object")
            metadata = page.get("metadata")
            metadata = metadata if isinstance(metadata, dict) else {}
            items = page.get("items")
            items = items if isinstance(items, list) else []
            named = [item for item in items if is_named_object(item)]
            skipped += len(items) - len(named)
            continue_token = metadata.get("continue")
            if continue_token and not isinstance(continue_token, str):
                raise MalformedList(f"a list of {path} with a continue token not a string")
            if not continue_token:
                if skipped:
                    log.warning(
                        "list items that are not named objects left out", path=path, skipped=skipped
                    )
                yield named, str(metadata.get("resourceVersion") or "")
                return
            yield named, ""
            if continue_token in tokens_seen:
                raise MalformedList(f"a list of {path} gave the same continue token twice")
            tokens_seen.add(continue_token)
            query["continue"] = continue_token
        raise MalformedList(f"a list of {path} not ended in {MAX_PAGES_PER_LIST} pages")

    async def current_objects(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ) -> AsyncIterator[tuple[list[JSON], str]]:
        """The objects of a collection now, for an informer: in batches, the last one with the
        resourceVersion a watch goes on from. Streamed where the API server can (Kubernetes'
        streaming lists: a watch sending the objects there are, then a bookmark; on by default
        from 1.34), else listed page by page (`list_pages`). Streamed, ten thousand ShadowPods
        came three times as fast as in pages of 500 (bench: the API server pays for every
        page), and they come one at a time. Needs the right to watch, as an informer has."""
        if self._streams_lists is not False:
            query = {
                **(params or {}),
                "sendInitialEvents": "true",
                "resourceVersionMatch": "NotOlderThan",
            }
            try:
                async for event in self.watch(path, query, timeout_seconds=timeout_seconds):
                    obj = event["object"]
                    if event["type"] == "ADDED":
                        yield [obj], ""
                    elif event["type"] != "BOOKMARK":
                        raise MalformedWatch(f"a {event['type']} event in a streamed list")
                    elif initial_events_end(obj):
                        self._streams_lists = True
                        yield [], str((obj.get("metadata") or {}).get("resourceVersion") or "")
                        return
                raise MalformedWatch("a streamed list ended before its last object was sent")
            except ApiError as error:
                # An API server before 1.27 forbids resourceVersionMatch on a watch; 1.33 with
                # the WatchList feature off, sendInitialEvents: both answer 400 or 422, before
                # any object. Anything else is a failure of the list itself.
                if self._streams_lists is not None or error.status not in (400, 422):
                    raise
                self._streams_lists = False
                log.info("the API server streams no lists: listing page by page", path=path)
        async for page in self.list_pages(path, params):
            yield page

    async def watch(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ) -> AsyncIterator[JSON]:
        """The watch events of a collection from `params["resourceVersion"]`, with bookmarks,
        until the server ends the stream. An ERROR event is raised as its typed ApiError."""
        query = {
            **(params or {}),
            "watch": "true",
            "allowWatchBookmarks": "true",
            "timeoutSeconds": str(timeout_seconds),
        }
        await self._wait_for_rate()
        async with self._endpoint_or_new().stream(
            "GET",
            request_target(path, query),
            self._headers(None, "application/json"),
            connect_timeout=10,
            read_timeout=timeout_seconds + 30,
        ) as response:
            API_REQUESTS.labels(self.name, "WATCH", resource_of(path), str(response.status)).inc()
            if response.status >= 400:
                body = await response.read_start(MAX_ERROR_BODY_BYTES)
                raise _typed_error(response.status, body.decode("utf-8", errors="replace"))
            # One event per line, split here as chunks come: an event carries a whole object
            # (a ConfigMap may hold 1 MiB), bounded by MAX_WATCH_EVENT_BYTES or max_body.
            pending = bytearray()
            max_line = self._max_watch_line
            events = 0
            async for chunk in response.chunks():
                pending += chunk
                while (end := pending.find(b"\n")) >= 0:
                    if end > max_line:
                        raise MalformedWatch(f"a watch line over {max_line} bytes: not an event")
                    line = bytes(pending[:end])
                    del pending[: end + 1]
                    if not line.strip():
                        continue
                    event = parse_watch_event(line)
                    if event["type"] == "ERROR":
                        status = event["object"]
                        raise _typed_error(_error_code(status), json.dumps(status))
                    yield event
                    events += 1
                    if events % EVENTS_BETWEEN_YIELDS == 0:
                        await asyncio.sleep(0)
                if len(pending) > max_line:
                    raise MalformedWatch(f"a watch line over {max_line} bytes: not an event")
            if pending.strip():
                raise MalformedWatch("the watch stream ended in the middle of an event")

    async def create(self, path: str, body: JSON) -> JSON:
        return await self.request("POST", path, body=body)

    async def apply(self, path: str, body: JSON, *, force: bool = True) -> JSON:
        """Server-side apply of `body` to the object at `path`, as field manager `vk`."""
        params = {"fieldManager": FIELD_MANAGER, "force": "true" if force else "false"}
        return await self.request(
            "PATCH", path, params=params, body=body, content_type="application/apply-patch+yaml"
        )

    async def replace(self, path: str, body: JSON) -> JSON:
        """PUT: fails with Conflict if `body`'s resourceVersion is no longer current."""
        return await self.request("PUT", path, body=body)

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        return await self.request(
            "PATCH", path, body=patch, content_type="application/merge-patch+json"
        )

    async def set_finalizer(
        self, path: str, obj: Mapping[str, Any], finalizer: str, *, present: bool
    ) -> bool:
        """Adds (`present`) or removes `finalizer` on the object at `path`, whose current copy
        is `obj`; True when that took a write. Guarded by the copy's resourceVersion, so a
        concurrent change fails with Conflict (and a retry) instead of losing another
        controller's finalizer."""
        finalizers = list(obj["metadata"].get("finalizers") or [])
        if (finalizer in finalizers) == present:
            return False
        finalizers = (
            [*finalizers, finalizer] if present else [f for f in finalizers if f != finalizer]
        )
        await self.merge_patch(
            path,
            {
                "metadata": {
                    "finalizers": finalizers,
                    "resourceVersion": obj["metadata"]["resourceVersion"],
                }
            },
        )
        return True

    async def delete(self, path: str, *, body: JSON | None = None) -> JSON:
        return await self.request("DELETE", path, body=body)


class AppliedObjects:
    """What this process last applied, by path, so that an apply that would change nothing is
    not sent: reconciles run on every event, most of them our own writes echoing back. After a
    restart each object is applied once again; drift by someone else is corrected then, or when
    the desired body changes. Each body is held as a digest of its JSON (32 bytes), not as its
    JSON: an EndpointSlice of a thousand endpoints held 63 KiB and more. Its users forget the
    path of an object that goes, or each one created and deleted stays held; and, where they
    watch what they apply, of one deleted by someone else, which would otherwise stay gone
    until a restart."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self._applied: dict[str, bytes] = {}

    @staticmethod
    def _digest(body: JSON) -> bytes:
        return hashlib.sha256(json.dumps(body, sort_keys=True).encode()).digest()

    async def apply(self, path: str, body: JSON) -> bool:
        """Applies `body` unless it is what was applied last; True when it was sent."""
        digest = self._digest(body)
        if self._applied.get(path) == digest:
            return False
        await self.client.apply(path, body)
        self._applied[path] = digest
        return True

    def forget(self, path: str) -> None:
        self._applied.pop(path, None)

    def __contains__(self, path: object) -> bool:
        """Whether it holds what was applied at `path`."""
        return path in self._applied
