"""The client-side rate limit (`vk kubelet --client-qps`, `--client-max-burst`, as Liqo's):
requests, watches and retries each wait for a token, in the order asked, within their own
deadline (`--client-timeout`). Served by a small HTTP server of the test's that notes when each
request came."""

from __future__ import annotations

import asyncio
import base64
import datetime
import time

import pytest
import yaml
from aiohttp import web

from tests.unit.test_hostile_provider import PATH, Handler, client_of
from vk.kube.client import JSON, KubeClient
from vk.kube.kubeconfig import SECRET_KUBECONFIG_KEY, ClusterConnection
from vk.kube.pki import forge_kubeconfig, issue_self_signed
from vk.kube.workqueue import TokenBucket
from vk.virtualkubelet.provider import ProviderConnection


def noting(arrivals: list[float]) -> Handler:
    async def handle(request: web.Request) -> web.Response:
        arrivals.append(time.monotonic())
        if request.query.get("watch") == "true":
            return web.Response(body=b"", content_type="application/json")
        return web.json_response({"kind": "ConfigMapList", "items": []})

    return handle


async def test_requests_past_the_burst_come_at_the_rate_in_the_order_asked() -> None:
    arrivals: list[float] = []
    client, serve = await client_of(noting(arrivals), rate=TokenBucket(20, 2))
    started = time.monotonic()
    asked = [asyncio.create_task(client.get(PATH, {"n": str(n)})) for n in range(8)]
    await asyncio.gather(*asked)
    await serve.aclose()
    # Two at once, the six others 50 ms apart: the last no sooner than 300 ms after the start.
    assert arrivals[7] - started >= 0.29, [round(a - started, 3) for a in arrivals]
    assert arrivals[1] - started < 0.2


async def test_a_watch_waits_for_its_token_too() -> None:
    arrivals: list[float] = []
    client, serve = await client_of(noting(arrivals), rate=TokenBucket(5, 1))
    started = time.monotonic()
    await client.get(PATH)
    async for _ in client.watch(PATH, timeout_seconds=1):
        pass
    await serve.aclose()
    assert arrivals[1] - started >= 0.19, [round(a - started, 3) for a in arrivals]


async def test_a_token_past_the_deadline_times_the_request_out() -> None:
    """The wait is the request's: a client whose next token comes after its timeout gives up
    at the timeout, as client-go's limiter does past its context's deadline."""
    arrivals: list[float] = []
    client, serve = await client_of(noting(arrivals), rate=TokenBucket(1, 1), timeout=0.3)
    await client.get(PATH)
    with pytest.raises(TimeoutError):
        await client.get(PATH)
    await serve.aclose()
    assert len(arrivals) == 1


def self_contained_kubeconfig(server: str) -> JSON:
    """A kubeconfig for `server`, with a certificate of its own."""
    issued = issue_self_signed("provider", datetime.datetime.now(datetime.UTC))
    return forge_kubeconfig(
        "far", server, issued.cert_pem, issued.cert_pem, issued.key_pem, "consumer"
    )


def kubeconfig_secret(server: str) -> JSON:
    """A provider kubeconfig Secret for `server`."""
    kubeconfig = self_contained_kubeconfig(server)
    encoded = base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()
    return {
        "metadata": {"name": "kubeconfig", "namespace": "tenant"},
        "data": {SECRET_KUBECONFIG_KEY: encoded},
    }


async def test_each_provider_client_gets_the_timeout_and_one_budget_across_a_rotation() -> None:
    """`--client-timeout` and `--client-qps` reach every client the provider's kubeconfig
    Secret makes: a Secret rotated gives a new client with the same timeout and the same
    budget (a new budget per rotation would let a rotating provider lift the limit)."""
    budget = TokenBucket(5, 5)
    home = KubeClient(ClusterConnection(server="https://127.0.0.1:1"))
    provider = ProviderConnection(
        home, namespace="tenant", secret_name="kubeconfig", rate=budget, timeout=2.5
    )
    clients = []
    for server in ("https://127.0.0.1:6443", "https://127.0.0.2:6443"):
        provider.secrets.store.upsert(kubeconfig_secret(server))
        provider.secrets.synced.set()
        provider._reload()  # as the Secret's informer does at each event
        assert provider.client is not None, provider.problem
        clients.append(provider.client)
    assert [c.connection.server for c in clients] == [
        "https://127.0.0.1:6443",
        "https://127.0.0.2:6443",
    ]
    assert [(c.timeout, c.rate) for c in clients] == [(2.5, budget), (2.5, budget)]
