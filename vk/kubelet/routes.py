"""The kubelet's paths, what authorizes them, and where each goes in the provider: pure.

The rewrite follows the API server's own translation (`pkg/registry/core/pod/strategy.go`)
in reverse: the kubelet's `input/output/error` become the pods API's `stdin/stdout/stderr`,
`port` becomes `ports`, and the path names the pod in its remote namespace.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qsl, quote, urlencode, urlsplit

RELAYED = ("containerLogs", "exec", "attach", "portForward")

# The kubelet's own verb mapping (pkg/kubelet/server/auth.go).
VERBS = {
    "GET": "get",
    "HEAD": "get",
    "POST": "create",
    "PUT": "update",
    "PATCH": "patch",
    "DELETE": "delete",
}

_EXEC_PARAMS = {"input": "stdin", "output": "stdout", "error": "stderr", "tty": "tty"}
_LOG_PARAMS = (
    "follow",
    "previous",
    "timestamps",
    "sinceSeconds",
    "sinceTime",
    "tailLines",
    "limitBytes",
    "stream",
)


@dataclass(frozen=True)
class Route:
    kind: str  # containerLogs, exec, attach, portForward, pods, runningpods, healthz,
    # stats/summary, metrics/resource, metrics/cadvisor, metrics/probes; `unknown:<first part>`
    # otherwise
    namespace: str = ""
    pod: str = ""
    container: str = ""
    query: tuple[tuple[str, str], ...] = ()


def parse_route(target: str) -> Route:
    """The route of a request target (`/exec/ns/pod/c?command=ls`)."""
    split = urlsplit(target)
    parts = [p for p in split.path.split("/") if p]
    query = tuple(parse_qsl(split.query, keep_blank_values=True))
    if not parts:
        return Route("", query=query)
    kind = parts[0]
    if kind == "containerLogs" and len(parts) == 4:
        return Route(kind, parts[1], parts[2], parts[3], query)
    if kind in ("exec", "attach") and len(parts) in (4, 5):
        return Route(kind, parts[1], parts[2], parts[-1], query)  # with or without the uid
    if kind == "portForward" and len(parts) in (3, 4):
        return Route(kind, parts[1], parts[2], "", query)
    if kind in ("pods", "runningpods", "healthz") and len(parts) == 1:
        return Route(kind, query=query)
    if parts in (
        ["stats", "summary"],
        ["metrics", "resource"],
        ["metrics", "cadvisor"],
        ["metrics", "probes"],
    ):
        return Route("/".join(parts), query=query)
    return Route("unknown:" + kind, query=query)


def authorization_subresource(path: str) -> str:
    """The subresource of `nodes/<node>` a request needs, as the kubelet maps it."""
    first = urlsplit(path).path.strip("/").split("/", 1)[0]
    return {"stats": "stats", "metrics": "metrics", "logs": "log"}.get(first, "proxy")


def _flag(value: str) -> bool:
    return value.lower() in ("1", "true")


def provider_target(route: Route, remote_namespace: str) -> str:
    """Path and query of the provider API server's pods subresource serving `route`."""
    base = f"/api/v1/namespaces/{quote(remote_namespace, safe='')}/pods/{quote(route.pod, safe='')}"
    params: list[tuple[str, str]] = []
    if route.kind == "containerLogs":
        params.append(("container", route.container))
        query = list(route.query)
        # The kubelet's older `tail` replaces `tailLines`, and `all` means none (as its
        # containerLogs handler reads them).
        tail = next((v for k, v in query if k == "tail"), "")
        if tail:
            query = [(k, v) for k, v in query if k != "tailLines"]
            query += [("tailLines", tail)] if tail != "all" else []
        params += [(k, v) for k, v in query if k in _LOG_PARAMS]
        return f"{base}/log?{urlencode(params)}"
    if route.kind in ("exec", "attach"):
        params.append(("container", route.container))
        for key, value in route.query:
            if key == "command" and route.kind == "exec":
                params.append(("command", value))
            elif key in _EXEC_PARAMS and _flag(value):
                params.append((_EXEC_PARAMS[key], "true"))
        return f"{base}/{route.kind}?{urlencode(params)}"
    if route.kind == "portForward":
        for key, value in route.query:
            if key == "port":
                params += [("ports", port) for port in value.split(",") if port]
        suffix = f"?{urlencode(params)}" if params else ""
        return f"{base}/portforward{suffix}"
    raise ValueError(f"{route.kind} is not relayed to the provider")


# Request headers that travel to the provider: the upgrade negotiation, untouched and in order.
# No body ever does (none of the relayed requests has one), so neither does its length.
FORWARDED_HEADERS = (
    "upgrade",
    "connection",
    "x-stream-protocol-version",
    "sec-websocket-key",
    "sec-websocket-version",
    "sec-websocket-protocol",
    "sec-websocket-extensions",
    "content-type",
    "accept",
)
# The routes whose answer is a protocol switch (101), after which bytes go both ways.
UPGRADABLE = ("exec", "attach", "portForward")
_UPGRADE_ONLY = ("upgrade", "connection")
_ENDS_A_LINE = re.compile(r"[\r\n\x00]")


def asks_upgrade(route: Route, headers: list[tuple[str, str]]) -> bool:
    """Whether a request is a genuine protocol upgrade: on exec, attach or portForward, with an
    `Upgrade` header and `upgrade` among its `Connection` tokens. Anything else is one plain
    request, whatever headers it carries."""
    if route.kind not in UPGRADABLE:
        return False
    upgrade = any(k.lower() == "upgrade" and v.strip() for k, v in headers)
    connection = {
        token.strip().lower()
        for k, v in headers
        if k.lower() == "connection"
        for token in v.split(",")
    }
    return upgrade and "upgrade" in connection


def provider_request_head(
    method: str,
    target: str,
    headers: list[tuple[str, str]],
    *,
    host: str,
    bearer_token: str | None,
    upgrade: bool,
) -> bytes:
    """The request head sent to the provider: the forwarded headers, its Host, our identity
    (a bearer token when the kubeconfig has one; a client certificate travels in TLS). An
    upgrade (`asks_upgrade`) keeps its negotiation; a plain request drops the client's
    `Connection` and `Upgrade` and asks the provider to close when done (`Connection: close`), so
    that nothing else can ride the tenant identity's connection after it."""
    lines = [f"{method} {target} HTTP/1.1", f"Host: {host}"]
    for key, value in headers:
        name = key.lower()
        if name in FORWARDED_HEADERS and (upgrade or name not in _UPGRADE_ONLY):
            if _ENDS_A_LINE.search(value):
                # The server refuses such a head already (parse_request_head); here too, since
                # forwarded, it would end the header and start whatever came after it.
                raise ValueError(f"a {key} header holding a line break is not forwarded")
            lines.append(f"{key}: {value}")
    if not upgrade:
        lines.append("Connection: close")
    if bearer_token:
        lines.append(f"Authorization: Bearer {bearer_token}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
