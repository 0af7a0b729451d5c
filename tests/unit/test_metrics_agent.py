"""The provider's metrics agent: who may ask (only the API server's front proxy, for a tenant's
own twin namespaces), where it reads kubelets, and what of a kubelet's rows it hands out."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from vk.api.constants import (
    REMOTE_CLUSTER_ID_LABEL,
    RESOURCE_METRICS_PATH_ANNOTATION,
    TENANT_NAMESPACE_LABEL,
    tenant_group,
)
from vk.kube.client import ApiError, NotFound
from vk.kube.informer import Store
from vk.kube.kubeconfig import ClusterConnection
from vk.webhooks.metrics_agent import (
    MetricsAgent,
    MetricsUnreadable,
    RequestHeaderAuthentication,
    caller_problem,
    forge_pod_usage_list,
    kubelet_endpoint,
    parse_request_header_authentication,
    parse_resource_metrics,
    reader_problem,
    rfc3339_ms,
    running_pods_by_node,
)


def row(series: str, container: str, namespace: str, pod: str, value: str, ms: str = "") -> str:
    labels = f'container="{container}",namespace="{namespace}",pod="{pod}"'
    return f"{series}{{{labels}}} {value} {ms}".rstrip() + "\n"


CPU, MEMORY, START = (
    "container_cpu_usage_seconds_total",
    "container_memory_working_set_bytes",
    "container_start_time_seconds",
)
KUBELET_TEXT = "".join(
    [
        f"# HELP {CPU} [STABLE] Cumulative cpu time consumed by the container\n",
        f"# TYPE {CPU} counter\n",
        row(CPU, "nginx", "shop-venice", "web", "0.041", "1764126000123"),
        row(CPU, "nginx", "shop-venice", "other", "9", "1764126000123"),
        row(CPU, "db", "bank-rome", "web", "7", "1764126000123"),
        row(CPU, "side", "shop-venice", "web", "NaN", "1764126000123"),
        f"# HELP {MEMORY} [STABLE] Current working set of the container in bytes\n",
        f"# TYPE {MEMORY} gauge\n",
        row(MEMORY, "nginx", "shop-venice", "web", "4.21888e+06", "1764126000456"),
        row(MEMORY, "side", "shop-venice", "web", "-1"),
        f"# HELP {START} [STABLE] Start time of the container since unix epoch in seconds\n",
        f"# TYPE {START} gauge\n",
        row(START, "nginx", "shop-venice", "web", "1.7641259e+09", "1764126000123"),
        "# HELP node_cpu_usage_seconds_total [STABLE] Cumulative cpu time consumed by the node\n",
        "# TYPE node_cpu_usage_seconds_total counter\n",
        "node_cpu_usage_seconds_total 1234.5 1764126000123\n",
    ]
)

AUTHENTICATION = RequestHeaderAuthentication(
    client_ca_pem=b"-----BEGIN CERTIFICATE-----\n",
    allowed_names=frozenset({"front-proxy-client"}),
    username_headers=("X-Remote-User",),
    group_headers=("X-Remote-Group",),
)


def twin(name: str, consumer: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {REMOTE_CLUSTER_ID_LABEL: consumer}}}


def test_front_proxy_settings_as_the_api_server_publishes_them() -> None:
    configmap = {
        "data": {
            "requestheader-client-ca-file": "PEM",
            "requestheader-allowed-names": '["front-proxy-client"]',
            "requestheader-username-headers": '["X-Remote-User"]',
            "requestheader-group-headers": '["X-Remote-Group"]',
        }
    }
    parsed = parse_request_header_authentication(configmap)
    assert parsed.client_ca_pem == b"PEM"
    assert parsed.allowed_names == {"front-proxy-client"}
    assert parsed.group_headers == ("X-Remote-Group",)


def test_an_api_server_without_an_aggregation_layer_is_said_so() -> None:
    with pytest.raises(ValueError, match="--requestheader-client-ca-file"):
        parse_request_header_authentication({"data": {"client-ca-file": "PEM"}})
    with pytest.raises(ValueError, match="JSON list"):
        parse_request_header_authentication(
            {"data": {"requestheader-client-ca-file": "PEM", "requestheader-allowed-names": "{}"}}
        )


@pytest.mark.parametrize(
    ("name", "allowed", "refused"),
    [
        (None, frozenset({"front-proxy-client"}), True),  # no certificate: a direct caller
        ("mallory", frozenset({"front-proxy-client"}), True),  # the CA's, but not the proxy
        ("front-proxy-client", frozenset({"front-proxy-client"}), False),
        ("anything", frozenset(), False),  # no names published: any certificate of the CA
    ],
)
def test_only_the_front_proxy_speaks_for_users(
    name: str | None, allowed: frozenset[str], refused: bool
) -> None:
    assert (caller_problem(name, allowed) is not None) is refused


def test_a_tenant_reads_only_its_own_twin_namespaces() -> None:
    venice = [tenant_group("venice"), "system:authenticated"]
    labels = {REMOTE_CLUSTER_ID_LABEL: "venice"}
    assert reader_problem("shop-venice", labels, venice) is None
    problem = reader_problem("bank-rome", {REMOTE_CLUSTER_ID_LABEL: "rome"}, venice)
    assert problem is not None
    assert "venice" in problem
    # Not made for a consumer at all: kube-system, or its tenant namespace itself.
    assert reader_problem("kube-system", None, venice) is not None
    assert reader_problem("kube-system", {}, venice) is not None
    tenant_namespace = {REMOTE_CLUSTER_ID_LABEL: "venice", TENANT_NAMESPACE_LABEL: "true"}
    assert reader_problem("vk-tenant-venice", tenant_namespace, venice) is not None


def test_whom_else_the_providers_rbac_let_through_reads_any_namespace() -> None:
    """An administrator, or an identity the provider bound by hand: RBAC was its judge."""
    assert reader_problem("bank-rome", {REMOTE_CLUSTER_ID_LABEL: "rome"}, ["admins"]) is None
    assert reader_problem("kube-system", None, ["system:masters"]) is None


def test_a_kubelet_is_found_as_metrics_server_finds_it() -> None:
    node: dict[str, Any] = {
        "metadata": {"name": "naples-node"},
        "status": {
            "addresses": [
                {"type": "Hostname", "address": "naples-node"},
                {"type": "InternalIP", "address": "10.201.1.2"},
            ],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }
    assert kubelet_endpoint(node) == ("https://10.201.1.2:10250", "/metrics/resource")
    node["metadata"]["annotations"] = {
        RESOURCE_METRICS_PATH_ANNOTATION: "/metrics/nodes/naples-worker-1/metrics/resource"
    }
    node["status"]["addresses"] = [{"type": "InternalIP", "address": "fd00::2"}]
    node["status"]["daemonEndpoints"] = {"kubeletEndpoint": {"Port": "10250; rm -rf /"}}
    assert kubelet_endpoint(node) == (
        "https://[fd00::2]:10250",
        "/metrics/nodes/naples-worker-1/metrics/resource",
    )
    assert kubelet_endpoint({"metadata": {}, "status": {"addresses": []}}) is None


def test_only_the_asked_pods_rows_leave_a_kubelet() -> None:
    usage = parse_resource_metrics(KUBELET_TEXT, "shop-venice", {"web"}, scraped_at=1.0)
    assert set(usage) == {"web"}  # not "other" (not asked), not bank-rome's "web"
    nginx = usage["web"]["nginx"]
    assert (nginx.cpu_seconds, nginx.cpu_time) == (0.041, 1764126000.123)
    assert (nginx.memory_bytes, nginx.memory_time) == (4218880, 1764126000.456)
    assert nginx.start_time == 1764125900.0
    side = usage["web"].get("side")
    assert side is None or (side.cpu_seconds is None and side.memory_bytes is None)


def test_a_row_without_a_timestamp_is_stamped_when_scraped() -> None:
    text = 'container_cpu_usage_seconds_total{container="c",namespace="n",pod="p"} 2\n'
    assert parse_resource_metrics(text, "n", {"p"}, scraped_at=42.5)["p"]["c"].cpu_time == 42.5


def test_text_that_is_not_the_prometheus_format_is_unreadable() -> None:
    with pytest.raises(MetricsUnreadable):
        parse_resource_metrics('container_cpu_usage_seconds_total{pod="p" 1\n', "n", {"p"}, 0.0)


def test_the_answer_keeps_the_kubelets_own_times() -> None:
    usage = parse_resource_metrics(KUBELET_TEXT, "shop-venice", {"web"}, scraped_at=1.0)
    answer = forge_pod_usage_list("shop-venice", usage)
    assert answer["kind"] == "PodUsageList"
    (item,) = answer["items"]
    assert item["metadata"] == {"name": "web", "namespace": "shop-venice"}
    nginx = next(c for c in item["containers"] if c["name"] == "nginx")
    assert nginx == {
        "name": "nginx",
        "startTime": "2025-11-26T02:58:20.000Z",
        "cpu": {"time": "2025-11-26T03:00:00.123Z", "usageCoreNanoSeconds": 41000000},
        "memory": {"time": "2025-11-26T03:00:00.456Z", "workingSetBytes": 4218880},
    }
    assert rfc3339_ms(0.0015) == "1970-01-01T00:00:00.001Z"


def test_finished_and_unbound_pods_have_no_kubelet_to_ask() -> None:
    pods = [
        {"metadata": {"name": "a"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "b"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Pending"}},
        {"metadata": {"name": "c"}, "spec": {"nodeName": "n2"}, "status": {"phase": "Succeeded"}},
        {"metadata": {"name": "d"}, "spec": {}, "status": {"phase": "Pending"}},
    ]
    assert running_pods_by_node(pods) == {"n1": {"a", "b"}}


class FakeApi:
    def __init__(self, objects: dict[str, Any]) -> None:
        self.objects = objects
        self.asked: list[str] = []

    async def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        self.asked.append(path)
        if path not in self.objects:
            raise NotFound(404, "NotFound", path)
        answer = self.objects[path]
        if isinstance(answer, Exception):
            raise answer
        return answer


class FakeKubelet:
    def __init__(self, text: str | Exception) -> None:
        self.text = text
        self.asked = 0

    async def get_text(self, path: str) -> str:
        self.asked += 1
        if isinstance(self.text, Exception):
            raise self.text
        return self.text


def make_agent(
    api: FakeApi,
    peer: str | None,
    kubelets: dict[str, FakeKubelet],
    now: Callable[[], float] = lambda: 1.0,
) -> MetricsAgent:
    namespaces = Store()
    for namespace in (twin("shop-venice", "venice"), twin("bank-rome", "rome")):
        namespaces.upsert(namespace)
    agent = MetricsAgent(
        api,  # type: ignore[arg-type]
        namespaces,
        ClusterConnection(server="https://127.0.0.1:6443"),
        AUTHENTICATION,
        kubelet_ca_pem=None,
        peer_name=lambda _: peer,
        now=now,
    )
    agent._kubelet = lambda server: kubelets[server]  # type: ignore[method-assign,assignment,return-value]
    return agent


def node(name: str, address: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "status": {
            "addresses": [{"type": "InternalIP", "address": address}],
            "daemonEndpoints": {"kubeletEndpoint": {"Port": 10250}},
        },
    }


def cluster_api() -> FakeApi:
    web = {"metadata": {"name": "web"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    job = {"metadata": {"name": "job"}, "spec": {"nodeName": "n2"}, "status": {"phase": "Running"}}
    return FakeApi(
        {
            "/api/v1/namespaces/shop-venice/pods": {"items": [web, job]},
            "/api/v1/nodes/n1": node("n1", "10.0.0.1"),
            "/api/v1/nodes/n2": node("n2", "10.0.0.2"),
        }
    )


USAGE_PATH = "/apis/metrics.vk.io/v1alpha1/namespaces/{}/pods"
VENICE = {"X-Remote-User": "slice-1", "X-Remote-Group": tenant_group("venice")}


async def test_a_tenant_gets_its_pods_rows_from_every_kubelet_that_answers(
    aiohttp_client: Any,
) -> None:
    kubelets = {
        "https://10.0.0.1:10250": FakeKubelet(KUBELET_TEXT),
        "https://10.0.0.2:10250": FakeKubelet(OSError("connection refused")),
    }
    client = await aiohttp_client(make_agent(cluster_api(), "front-proxy-client", kubelets).app())
    response = await client.get(USAGE_PATH.format("shop-venice"), headers=VENICE)
    assert response.status == 200
    answer = await response.json()
    assert [item["metadata"]["name"] for item in answer["items"]] == ["web"]
    discovery = await client.get("/apis/metrics.vk.io/v1alpha1")
    assert (await discovery.json())["resources"][0]["name"] == "pods"


async def test_another_tenants_namespace_is_forbidden(aiohttp_client: Any) -> None:
    api = cluster_api()
    client = await aiohttp_client(make_agent(api, "front-proxy-client", {}).app())
    for namespace in ("bank-rome", "kube-system", "vk-tenant-venice"):
        response = await client.get(USAGE_PATH.format(namespace), headers=VENICE)
        assert response.status == 403
        assert (await response.json())["reason"] == "Forbidden"
    assert api.asked == []  # nothing read on a refused request


async def test_a_caller_that_is_not_the_front_proxy_is_refused(aiohttp_client: Any) -> None:
    api = cluster_api()
    for peer in (None, "mallory"):
        client = await aiohttp_client(make_agent(api, peer, {}).app())
        # The headers claim to be venice: without the proxy's certificate they mean nothing.
        response = await client.get(USAGE_PATH.format("shop-venice"), headers=VENICE)
        assert response.status == 401
        assert (await client.get("/apis/metrics.vk.io/v1alpha1")).status == 401
    assert api.asked == []


async def test_pods_that_cannot_be_listed_are_an_outage(aiohttp_client: Any) -> None:
    api = FakeApi({"/api/v1/namespaces/shop-venice/pods": ApiError(500, "", "etcd")})
    client = await aiohttp_client(make_agent(api, "front-proxy-client", {}).app())
    response = await client.get(USAGE_PATH.format("shop-venice"), headers=VENICE)
    assert response.status == 503


async def test_a_kubelet_is_read_once_for_the_requests_of_a_few_seconds(
    aiohttp_client: Any,
) -> None:
    """Every twin namespace on a node asks for the same kubelet answer: read once, not once a
    namespace (and a failure is not kept)."""
    api = cluster_api()
    pod = {"metadata": {"name": "web"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}}
    api.objects["/api/v1/namespaces/bank-rome/pods"] = {"items": [pod]}
    kubelet = FakeKubelet(KUBELET_TEXT)
    clock = [100.0]
    kubelets = {"https://10.0.0.1:10250": kubelet, "https://10.0.0.2:10250": FakeKubelet("")}
    agent = make_agent(api, "front-proxy-client", kubelets, now=lambda: clock[0])
    client = await aiohttp_client(agent.app())
    rome = {"X-Remote-User": "slice-2", "X-Remote-Group": tenant_group("rome")}
    assert (await client.get(USAGE_PATH.format("shop-venice"), headers=VENICE)).status == 200
    answer = await client.get(USAGE_PATH.format("bank-rome"), headers=rome)
    (item,) = (await answer.json())["items"]  # rome's web, from the same kubelet answer
    assert (item["metadata"]["namespace"], item["containers"][0]["name"]) == ("bank-rome", "db")
    assert kubelet.asked == 1
    clock[0] += 5.0
    await client.get(USAGE_PATH.format("shop-venice"), headers=VENICE)
    assert kubelet.asked == 2
    kubelet.text = OSError("connection refused")
    clock[0] += 5.0
    await client.get(USAGE_PATH.format("shop-venice"), headers=VENICE)
    await client.get(USAGE_PATH.format("shop-venice"), headers=VENICE)
    assert kubelet.asked == 4
