"""The kubelet's paths: what authorizes them and where each goes in the provider."""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest

from vk.kubelet.routes import (
    Route,
    asks_upgrade,
    authorization_subresource,
    parse_route,
    provider_request_head,
    provider_target,
)


@pytest.mark.parametrize(
    ("target", "route"),
    [
        (
            "/containerLogs/shop/web/app?follow=true",
            Route("containerLogs", "shop", "web", "app", (("follow", "true"),)),
        ),
        (
            "/exec/shop/web/app?command=ls",
            Route("exec", "shop", "web", "app", (("command", "ls"),)),
        ),
        ("/exec/shop/web/uid-1/app", Route("exec", "shop", "web", "app")),
        ("/attach/shop/web/app", Route("attach", "shop", "web", "app")),
        ("/portForward/shop/web", Route("portForward", "shop", "web")),
        ("/portForward/shop/web/uid-1", Route("portForward", "shop", "web")),
        ("/pods", Route("pods")),
        ("/runningpods/", Route("runningpods")),
        ("/healthz", Route("healthz")),
        (
            "/stats/summary?only_cpu_and_memory=true",
            Route("stats/summary", query=(("only_cpu_and_memory", "true"),)),
        ),
        ("/metrics/resource", Route("metrics/resource")),
        ("/metrics/cadvisor", Route("metrics/cadvisor")),
        ("/metrics/probes", Route("metrics/probes")),
        ("/metrics/probes/extra", Route("unknown:metrics")),
        ("/containerLogs/shop/web", Route("unknown:containerLogs")),
        ("/", Route("")),
    ],
)
def test_routes(target: str, route: Route) -> None:
    assert parse_route(target) == route


@pytest.mark.parametrize(
    ("path", "subresource"),
    [
        ("/containerLogs/a/b/c", "proxy"),
        ("/exec/a/b/c", "proxy"),
        ("/portForward/a/b", "proxy"),
        ("/pods", "proxy"),
        ("/runningpods/", "proxy"),
        ("/healthz", "proxy"),
        ("/stats/summary", "stats"),
        ("/metrics/resource", "metrics"),
        ("/metrics", "metrics"),
        ("/logs/syslog", "log"),
    ],
)
def test_subresources_as_the_kubelet_maps_them(path: str, subresource: str) -> None:
    assert authorization_subresource(path) == subresource


@pytest.mark.parametrize(
    ("target", "expected"),
    [
        (
            "/containerLogs/shop/web/app?follow=true&tailLines=3&timestamps=1&unknown=x",
            "/api/v1/namespaces/shop-venice/pods/web/log?container=app&follow=true&tailLines=3&timestamps=1",
        ),
        (
            "/exec/shop/web/app?command=sh&command=-c&command=echo+hi&input=1&output=1&error=0&tty=1",
            "/api/v1/namespaces/shop-venice/pods/web/exec?container=app&command=sh&command=-c"
            "&command=echo+hi&stdin=true&stdout=true&tty=true",
        ),
        (
            "/attach/shop/web/app?output=1&command=ignored",
            "/api/v1/namespaces/shop-venice/pods/web/attach?container=app&stdout=true",
        ),
        ("/portForward/shop/web", "/api/v1/namespaces/shop-venice/pods/web/portforward"),
        (
            "/portForward/shop/web?port=8080,9090",
            "/api/v1/namespaces/shop-venice/pods/web/portforward?ports=8080&ports=9090",
        ),
    ],
)
def test_provider_targets(target: str, expected: str) -> None:
    assert provider_target(parse_route(target), "shop-venice") == expected


@pytest.mark.parametrize(
    ("query", "tail_lines"),
    [
        ("tailLines=3", ["3"]),
        ("tail=5", ["5"]),
        ("tailLines=3&tail=5", ["5"]),  # the kubelet's `tail` replaces `tailLines`
        ("tail=all&tailLines=3", []),  # and `all` means every line
        ("tail=&tailLines=3", ["3"]),
    ],
)
def test_tail_replaces_tail_lines_as_in_the_kubelet(query: str, tail_lines: list[str]) -> None:
    target = provider_target(parse_route(f"/containerLogs/shop/web/app?{query}"), "shop-venice")
    assert [v for k, v in parse_qsl(urlsplit(target).query) if k == "tailLines"] == tail_lines


def test_only_relayed_routes_have_a_provider_target() -> None:
    with pytest.raises(ValueError, match="is not relayed"):
        provider_target(parse_route("/pods"), "shop-venice")


def test_an_upgrade_keeps_its_negotiation_headers_in_order() -> None:
    head = provider_request_head(
        "POST",
        "/api/v1/namespaces/ns/pods/p/exec",
        [
            ("Connection", "Upgrade"),
            ("Upgrade", "SPDY/3.1"),
            ("X-Stream-Protocol-Version", "v5.channel.k8s.io"),
            ("X-Stream-Protocol-Version", "v4.channel.k8s.io"),
            ("X-Forwarded-For", "10.0.0.1"),
            ("Authorization", "Bearer consumer-token"),
        ],
        host="127.0.0.1:6443",
        bearer_token="tenant-token",
        upgrade=True,
    ).decode()
    assert head == (
        "POST /api/v1/namespaces/ns/pods/p/exec HTTP/1.1\r\nHost: 127.0.0.1:6443\r\n"
        "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n"
        "X-Stream-Protocol-Version: v5.channel.k8s.io\r\n"
        "X-Stream-Protocol-Version: v4.channel.k8s.io\r\n"
        "Authorization: Bearer tenant-token\r\n\r\n"
    )


def test_a_plain_request_asks_the_provider_to_close_when_done() -> None:
    head = provider_request_head(
        "GET",
        "/log",
        [("Connection", "keep-alive, Upgrade"), ("Upgrade", "h2c"), ("Content-Length", "99")],
        host="h",
        bearer_token=None,
        upgrade=False,
    ).decode()
    # Neither the client's Connection nor its Upgrade, nor a body's length: one request, closed.
    assert head == "GET /log HTTP/1.1\r\nHost: h\r\nConnection: close\r\n\r\n"


@pytest.mark.parametrize("value", ["*/*\nGET /secrets HTTP/1.1", "*/*\rX: y", "a\x00b"])
def test_a_forwarded_header_that_would_end_its_line_is_never_written(value: str) -> None:
    # The server refuses such heads before (parse_request_head): the forge holds on its own.
    with pytest.raises(ValueError, match="line break"):
        provider_request_head(
            "GET", "/log", [("Accept", value)], host="h", bearer_token="t", upgrade=False
        )


@pytest.mark.parametrize(
    ("path", "headers", "upgrade"),
    [
        ("/exec/ns/p/c?command=sh", [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")], True),
        (
            "/portForward/ns/p",
            [("connection", "keep-alive, upgrade"), ("upgrade", "websocket")],
            True,
        ),
        # Logs never switch protocols, whatever the client asks.
        ("/containerLogs/ns/p/c", [("Connection", "Upgrade"), ("Upgrade", "SPDY/3.1")], False),
        ("/exec/ns/p/c?command=sh", [("Upgrade", "SPDY/3.1")], False),
        ("/exec/ns/p/c?command=sh", [("Connection", "Upgrade")], False),
        ("/attach/ns/p/c", [("Connection", "Upgrade"), ("Upgrade", " ")], False),
    ],
)
def test_only_a_genuine_upgrade_on_a_streaming_route_is_one(
    path: str, headers: list[tuple[str, str]], upgrade: bool
) -> None:
    assert asks_upgrade(parse_route(path), headers) is upgrade
