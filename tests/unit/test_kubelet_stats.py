"""The offloaded pods' usage as the kubelet reports it: the provider kubelets' own counters,
read through vk's metrics agent and checked as the other party's word, or, from a provider
without the agent, its metrics.k8s.io rates integrated into counters."""

from __future__ import annotations

import math
from typing import Any, cast

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vk.api.duration import parse_go_duration
from vk.kube.client import ApiError, KubeClient, NotFound
from vk.kube.transport import ProtocolError
from vk.kubelet import stats
from vk.kubelet.stats import (
    ContainerSample,
    ContainerUsage,
    OffloadedPod,
    PodSample,
    PodUsage,
    ResourceUsage,
    UnreadableUsage,
    UsageCounters,
    declared_containers,
    forge_summary,
    pod_sample,
    pod_usages,
    render_cadvisor_metrics,
    render_resource_metrics,
)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("15s", 15.0), ("15.023s", 15.023), ("1m0s", 60.0), ("1h2m3.5s", 3723.5), ("250ms", 0.25)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "15", "s", "15sx", "-1s"])
def test_not_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="is not a duration"):
        parse_go_duration(text)


def test_a_provider_pod_metrics_object_becomes_a_sample_of_the_local_pod() -> None:
    metrics = {
        "metadata": {"name": "web-1", "namespace": "shop-venice"},
        "timestamp": "2026-11-22T08:00:00Z",
        "window": "15.5s",
        "containers": [{"name": "app", "usage": {"cpu": "250123456n", "memory": "96Mi"}}],
    }
    sample = pod_sample(metrics, OffloadedPod("shop", "web-1", "uid-1", "shop-venice"))
    assert sample == PodSample(
        namespace="shop",
        name="web-1",
        uid="uid-1",
        timestamp=1795334400.0,
        window=15.5,
        containers=(ContainerSample("app", 0.250123456, 96 * 2**20),),
    )


def sample(timestamp: float, cores: float, memory: int = 100, name: str = "web-1") -> PodSample:
    return PodSample(
        "shop", name, f"uid-{name}", timestamp, 10.0, (ContainerSample("app", cores, memory),)
    )


PRESENT = {("shop", "web-1", "uid-web-1"), ("shop", "web-2", "uid-web-2")}


def test_counters_integrate_the_rate_between_provider_samples() -> None:
    counters = UsageCounters()
    counters.update([sample(1000.0, 0.25)], PRESENT)
    first = counters.containers[("shop", "web-1", "uid-web-1", "app")]
    # The first window starts the counter: metrics-server drops a pod whose counter reads 0.
    assert first.cpu_seconds == pytest.approx(2.5)
    assert first.start_time == 990.0
    counters.update([sample(1015.0, 0.5)], PRESENT)
    assert first.cpu_seconds == pytest.approx(2.5 + 0.5 * 15)
    # What metrics-server computes between two scrapes is the provider's rate.
    before = (first.cpu_seconds, first.timestamp)
    counters.update([sample(1030.0, 0.5)], PRESENT)
    rate = (first.cpu_seconds - before[0]) / (first.timestamp - before[1])
    assert rate == pytest.approx(0.5)
    assert first.start_time == 990.0  # unchanged, so metrics-server keeps pairing the points


def test_a_sample_no_newer_than_the_last_changes_nothing() -> None:
    counters = UsageCounters()
    counters.update([sample(1000.0, 0.25)], PRESENT)
    counters.update([sample(1000.0, 0.9, memory=999)], PRESENT)
    counters.update([sample(990.0, 0.9)], PRESENT)
    counter = counters.containers[("shop", "web-1", "uid-web-1", "app")]
    assert (counter.cpu_seconds, counter.memory_bytes) == (pytest.approx(2.5), 100)
    assert counters.node_cpu_seconds == pytest.approx(2.5)


def test_a_pod_without_a_sample_keeps_its_counter_and_a_gone_pod_loses_it() -> None:
    counters = UsageCounters()
    counters.update([sample(1000.0, 0.25), sample(1000.0, 0.25, name="web-2")], PRESENT)
    counters.update([sample(1015.0, 0.25)], PRESENT)
    assert ("shop", "web-2", "uid-web-2", "app") in counters.containers
    node_before = counters.node_cpu_seconds
    counters.update([sample(1030.0, 0.25)], {("shop", "web-1", "uid-web-1")})
    assert list(counters.containers) == [("shop", "web-1", "uid-web-1", "app")]
    # The node's counter never goes back, pods leaving or not.
    assert counters.node_cpu_seconds == pytest.approx(node_before + 0.25 * 15)


def test_a_recreated_pod_gets_a_new_counter() -> None:
    counters = UsageCounters()
    counters.update([sample(1000.0, 0.25)], PRESENT)
    renewed = PodSample("shop", "web-1", "uid-new", 1015.0, 10.0, (ContainerSample("app", 0.1, 1),))
    counters.update([renewed], {("shop", "web-1", "uid-new")})
    assert list(counters.containers) == [("shop", "web-1", "uid-new", "app")]
    assert counters.containers[("shop", "web-1", "uid-new", "app")].start_time == 1005.0


def test_resource_metrics_are_what_metrics_server_reads() -> None:
    counters = UsageCounters()
    counters.update([sample(1000.0, 0.25, memory=2048)], PRESENT)
    text = render_resource_metrics(counters)
    labels = 'container="app",namespace="shop",pod="web-1"'
    assert f"container_cpu_usage_seconds_total{{{labels}}} 2.5 1000000" in text
    assert f"container_memory_working_set_bytes{{{labels}}} 2048 1000000" in text
    assert f"container_start_time_seconds{{{labels}}} 990.0 1000000" in text
    assert 'pod_cpu_usage_seconds_total{namespace="shop",pod="web-1"} 2.5 1000000' in text
    assert "node_cpu_usage_seconds_total 2.5 1000000" in text
    assert "node_memory_working_set_bytes 2048 1000000" in text
    assert "# TYPE container_cpu_usage_seconds_total counter" in text
    assert text.endswith("resource_scrape_error 0\n")


def test_no_usage_yet_means_no_node_sample_rather_than_a_zero() -> None:
    text = render_resource_metrics(UsageCounters())
    assert "\nnode_cpu_usage_seconds_total" not in text
    assert "\nnode_memory_working_set_bytes" not in text


def test_label_values_are_escaped() -> None:
    counters = UsageCounters()
    odd = PodSample('sh"op', "web\\1", "u", 1.0, 1.0, (ContainerSample("a", 1.0, 1),))
    counters.update([odd], {('sh"op', "web\\1", "u")})
    assert 'namespace="sh\\"op",pod="web\\\\1"' in render_resource_metrics(counters)


def test_summary_reports_pods_and_node_in_nanocores_and_bytes() -> None:
    counters = UsageCounters()
    counters.update([sample(1000.0, 0.25, memory=2048)], PRESENT)
    summary = forge_summary("vn-1", 0.0, counters)
    assert summary["node"]["nodeName"] == "vn-1"
    assert summary["node"]["cpu"]["usageNanoCores"] == 250_000_000
    assert summary["node"]["cpu"]["usageCoreNanoSeconds"] == 2_500_000_000
    assert summary["node"]["memory"]["workingSetBytes"] == 2048
    (pod,) = summary["pods"]
    assert pod["podRef"] == {"name": "web-1", "namespace": "shop", "uid": "uid-web-1"}
    assert pod["containers"][0]["cpu"]["usageNanoCores"] == 250_000_000
    assert pod["memory"] == {"time": "1970-01-01T00:16:40Z", "workingSetBytes": 2048}


def test_cadvisor_metrics_name_each_container_and_its_pod_as_cadvisor_does() -> None:
    counters = UsageCounters()
    two = PodSample(
        "shop", "web-1", "uid-web-1", 1000.0, 10.0,
        (ContainerSample("app", 0.25, 2048), ContainerSample("proxy", 0.05, 1024)),
    )  # fmt: skip
    counters.update([two], PRESENT)
    images = {("shop", "web-1", "app"): "nginx:1.27"}
    text = render_cadvisor_metrics(counters, lambda ns, pod, c: images.get((ns, pod, c)))
    app = (
        'container="app",id="/kubepods/poduid-web-1/app",image="nginx:1.27",name="",'
        'namespace="shop",pod="web-1"'
    )
    assert f"container_cpu_usage_seconds_total{{{app}}} 2.5 1000000" in text
    assert f"container_memory_working_set_bytes{{{app}}} 2048 1000000" in text
    assert f"container_start_time_seconds{{{app}}} 990.0 1000000" in text
    assert 'container="proxy",id="/kubepods/poduid-web-1/proxy",image=""' in text  # image unknown
    # The pod's own cgroup: container="", the sum of its containers.
    pod = 'container="",id="/kubepods/poduid-web-1",image="",name="",namespace="shop",pod="web-1"'
    assert f"container_cpu_usage_seconds_total{{{pod}}} 3.0 1000000" in text
    assert f"container_memory_working_set_bytes{{{pod}}} 3072 1000000" in text
    assert "# TYPE container_cpu_usage_seconds_total counter" in text
    # Parsed as Prometheus parses it.
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert len(families["container_cpu_usage_seconds"].samples) == 3


def test_no_usage_yet_means_no_cadvisor_series() -> None:
    text = render_cadvisor_metrics(UsageCounters(), lambda *_: None)
    assert "{" not in text


# The provider's metrics agent (metrics.vk.io): the kubelets' own cumulative counters.

WEB_1 = OffloadedPod("shop", "web-1", "uid-web-1", "shop-venice")
WEB_2 = OffloadedPod("shop", "web-2", "uid-web-2", "shop-venice")
MEMBERS = {"web-1": WEB_1, "web-2": WEB_2}
AGENT = "/apis/metrics.vk.io/v1alpha1/namespaces/shop-venice/pods"
RATES = "/apis/metrics.k8s.io/v1beta1/namespaces/shop-venice/pods"
T0 = 1795334400.0  # 2026-11-22T08:00:00Z
APP = 'container="app",namespace="shop",pod="web-1"'


def usage_container(
    *,
    name: Any = "app",
    start: Any = "2026-11-22T07:00:00.000Z",
    time: Any = "2026-11-22T08:00:00.000Z",
    cpu: Any = 40_000_000,
    memory: Any = 4096,
) -> dict[str, Any]:
    return {
        "name": name,
        "startTime": start,
        "cpu": {"time": time, "usageCoreNanoSeconds": cpu},
        "memory": {"time": time, "workingSetBytes": memory},
    }


def usage_item(name: str, *containers: Any, namespace: str = "shop-venice") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "containers": list(containers)}


def usage_list(*items: Any) -> dict[str, Any]:
    return {"apiVersion": "metrics.vk.io/v1alpha1", "kind": "PodUsageList", "items": list(items)}


class FakeProvider:
    """The provider's API server: an answer (or an error to raise) per path, and what was asked."""

    def __init__(self, answers: dict[str, Any]) -> None:
        self.answers = answers
        self.asked: list[str] = []

    async def get(self, path: str, params: dict[str, str] | None = None) -> Any:
        self.asked.append(path)
        answer = self.answers[path]
        if isinstance(answer, BaseException):
            raise answer
        return answer


class RecordedLog:
    def __init__(self) -> None:
        self.warnings: list[tuple[str, dict[str, Any]]] = []

    def warning(self, message: str, **fields: Any) -> None:
        self.warnings.append((message, fields))

    def info(self, message: str, **fields: Any) -> None:
        pass


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> RecordedLog:
    recorder = RecordedLog()
    monkeypatch.setattr(stats, "log", recorder)
    return recorder


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def resource_usage(provider: FakeProvider, clock: Clock | None = None) -> ResourceUsage:
    return ResourceUsage(
        lambda: cast(KubeClient, provider), lambda: [WEB_1], clock=clock or Clock()
    )


def test_the_agents_usage_list_becomes_the_usage_of_the_local_pods() -> None:
    body = usage_list(
        usage_item(
            "web-1",
            usage_container(
                start="2026-11-22T07:00:00Z", time="2026-11-22T08:00:05.250Z", cpu=123_456_789
            ),
        )
    )
    usages, skipped = pod_usages(body, "shop-venice", MEMBERS)
    assert usages == [
        PodUsage(
            "shop", "web-1", "uid-web-1",
            (ContainerUsage("app", T0 - 3600, T0 + 5.25, 0.123456789, 4096),),
        )
    ]  # fmt: skip
    assert skipped == []


async def test_an_idle_container_reads_its_nonzero_counter_at_every_scrape() -> None:
    # metrics-server drops a pod whose counter reads 0: the provider kubelet's counter, from the
    # container's start, is what it reads on a real node.
    provider = FakeProvider({AGENT: usage_list(usage_item("web-1", usage_container()))})
    usage = resource_usage(provider)
    text = render_resource_metrics(await usage.refresh())
    assert f"container_cpu_usage_seconds_total{{{APP}}} 0.04 1795334400000" in text
    assert f"container_start_time_seconds{{{APP}}} {T0 - 3600!r} 1795334400000" in text
    assert f"container_memory_working_set_bytes{{{APP}}} 4096 1795334400000" in text
    provider.answers[AGENT] = usage_list(
        usage_item("web-1", usage_container(time="2026-11-22T08:00:15.000Z"))
    )
    text = render_resource_metrics(await usage.refresh())
    assert f"container_cpu_usage_seconds_total{{{APP}}} 0.04 1795334415000" in text
    assert "node_cpu_usage_seconds_total 0.04 1795334415000" in text
    assert provider.asked == [AGENT, AGENT]  # metrics.k8s.io is not asked
    summary = forge_summary("vn-1", 0.0, usage.counters)
    assert summary["pods"][0]["containers"][0]["cpu"] == {
        "time": "2026-11-22T08:00:15Z",
        "usageNanoCores": 0,
        "usageCoreNanoSeconds": 40_000_000,
    }


def point(
    timestamp: float, cpu_seconds: float, start: float = 900.0, memory: int = 100
) -> list[PodUsage]:
    return [
        PodUsage(
            "shop", "web-1", "uid-web-1",
            (ContainerUsage("app", start, timestamp, cpu_seconds, memory),),
        )
    ]  # fmt: skip


def test_a_second_point_gives_the_rate_and_a_restart_starts_a_new_counter() -> None:
    counters = UsageCounters()
    counters.observe(point(1000.0, 10.0), PRESENT)
    key = ("shop", "web-1", "uid-web-1", "app")
    assert counters.containers[key].cpu_cores == 0.0  # no rate from one point
    assert counters.node_cpu_seconds == pytest.approx(10.0)
    counters.observe(point(1015.0, 13.0, memory=200), PRESENT)
    counter = counters.containers[key]
    assert (counter.cpu_seconds, counter.cpu_cores, counter.memory_bytes) == (13.0, 0.2, 200)
    assert counters.node_cpu_seconds == pytest.approx(13.0)
    # Restarted: the provider's counter starts again from its new start time.
    counters.observe(point(1030.0, 0.5, start=1020.0), PRESENT)
    counter = counters.containers[key]
    assert (counter.start_time, counter.cpu_seconds, counter.timestamp) == (1020.0, 0.5, 1030.0)
    assert counter.cpu_cores == 0.2  # the last rate known, until the new counter's second point
    assert counters.node_cpu_seconds == pytest.approx(13.5)  # the node's never goes back
    counters.observe(point(1045.0, 2.0, start=1020.0), PRESENT)
    assert counters.containers[key].cpu_cores == pytest.approx(0.1)
    assert counters.node_cpu_seconds == pytest.approx(15.0)


def test_a_point_no_newer_or_a_counter_going_backwards_changes_nothing(
    recorded: RecordedLog,
) -> None:
    counters = UsageCounters()
    counters.observe(point(1000.0, 10.0), PRESENT)
    counters.observe(point(1000.0, 99.0, memory=999), PRESENT)
    counters.observe(point(990.0, 99.0, start=800.0), PRESENT)  # an older point, restart or not
    assert recorded.warnings == []
    counters.observe(point(1015.0, 9.0, memory=999), PRESENT)  # same start, less CPU
    counter = counters.containers[("shop", "web-1", "uid-web-1", "app")]
    assert (counter.cpu_seconds, counter.timestamp, counter.memory_bytes) == (10.0, 1000.0, 100)
    assert counters.node_cpu_seconds == pytest.approx(10.0)
    ((message, fields),) = recorded.warnings
    assert "backwards" in message
    assert fields["pod"] == "shop/web-1"


def test_observed_counters_of_a_gone_pod_are_forgotten() -> None:
    counters = UsageCounters()
    counters.observe(point(1000.0, 10.0), PRESENT)
    counters.observe([], {("shop", "web-2", "uid-web-2")})
    assert counters.containers == {}
    assert counters.node_cpu_seconds == pytest.approx(10.0)


@pytest.mark.parametrize(
    "container",
    [
        usage_container(cpu=-1),
        usage_container(cpu=math.nan),
        usage_container(cpu=4e7),  # a count is an integer
        usage_container(cpu="40000000"),
        usage_container(cpu=True),
        usage_container(cpu=2**63),
        usage_container(memory=-4096),
        usage_container(memory=2**64),
        usage_container(memory=None),
        usage_container(start="yesterday"),
        usage_container(start="2026-11-22T07:00:00"),  # no offset: whose clock?
        usage_container(start=1795330800),
        usage_container(time="2026-13-01T00:00:00Z"),
        usage_container(time="1969-12-31T23:59:59Z"),
        usage_container(time="9999-12-31T23:59:59-01:00"),  # year 10000 in UTC
        usage_container(time="2026-11-22T08:00:00Z" + " " * 100),
        usage_container(name="../app"),
        usage_container(name="a" * 64),
        usage_container(name=["app"]),
        {"name": "app", "startTime": "2026-11-22T07:00:00Z", "cpu": "lots", "memory": {}},
        {"name": "app", "startTime": "2026-11-22T07:00:00Z", "cpu": {}, "memory": {}},
        "app",
        None,
    ],
)
def test_an_unreadable_container_is_skipped_and_named(container: Any) -> None:
    body = usage_list(usage_item("web-1", container, usage_container(name="proxy")))
    usages, skipped = pod_usages(body, "shop-venice", MEMBERS)
    assert [c.name for c in usages[0].containers] == ["proxy"]
    assert [pod for pod, _ in skipped] == ["web-1"]


def test_a_container_without_cpu_memory_or_start_series_is_skipped_quietly() -> None:
    no_cpu = {k: v for k, v in usage_container().items() if k != "cpu"}
    no_memory = {**usage_container(name="proxy"), "memory": None}
    no_start = {k: v for k, v in usage_container(name="sidecar").items() if k != "startTime"}
    usages, skipped = pod_usages(
        usage_list(usage_item("web-1", no_cpu, no_memory, no_start)), "shop-venice", MEMBERS
    )
    assert usages == [PodUsage("shop", "web-1", "uid-web-1", ())]
    assert skipped == []


def test_only_the_offloaded_pods_of_the_namespace_asked_are_taken_first_come_first_served() -> None:
    huge = usage_container(cpu=2**62)
    body = usage_list(
        "web-1",
        None,
        {"metadata": "web-1"},
        {"metadata": {"name": ["web-1"], "namespace": "shop-venice"}},  # unhashable
        {"metadata": {"name": "web-1"}},  # no namespace
        usage_item("web-1", huge, namespace="bank-venice"),
        usage_item("web-9", huge),  # not a pod this virtual kubelet offloaded
        usage_item("web-1", usage_container(cpu=7)),
        usage_item("web-1", huge),  # already listed
        usage_item("web-2", usage_container(), usage_container(cpu=2**62)),
        {"metadata": {"name": "web-2", "namespace": "shop-venice"}, "containers": "app"},
    )
    usages, skipped = pod_usages(body, "shop-venice", MEMBERS)
    assert [(u.name, [c.cpu_seconds for c in u.containers]) for u in usages] == [
        ("web-1", [7e-9]),
        ("web-2", [0.04]),
    ]
    assert skipped == []


def test_containers_that_are_not_a_list_are_named() -> None:
    body = usage_list({"metadata": {"name": "web-1", "namespace": "shop-venice"}, "containers": {}})
    usages, skipped = pod_usages(body, "shop-venice", MEMBERS)
    assert usages == [PodUsage("shop", "web-1", "uid-web-1", ())]
    assert [pod for pod, _ in skipped] == ["web-1"]


@pytest.mark.parametrize("body", [[], "PodUsageList", None, {"items": {"web-1": {}}}, {}])
def test_an_answer_that_is_no_list_is_unreadable(body: Any) -> None:
    with pytest.raises(UnreadableUsage):
        pod_usages(body, "shop-venice", MEMBERS)


@pytest.mark.parametrize(
    "body",
    [
        [],
        "PodUsageList",
        {"items": {}},
        {"items": [1, None, "x", {"metadata": []}]},
        usage_list({"metadata": {"name": "web-1", "namespace": "shop-venice"}, "containers": 5}),
        usage_list(usage_item("web-1", usage_container(cpu=-40_000_000))),
        usage_list(usage_item("web-1", usage_container(cpu=math.inf))),
        usage_list(usage_item("web-1", "app", ["app"], {"name": {}})),
        usage_list(usage_item("web-1", usage_container(), namespace="bank-venice")),
        usage_list(usage_item("web-9", usage_container())),
    ],
)
async def test_whatever_the_provider_answers_reaches_no_counter_and_raises_nothing(
    body: Any, recorded: RecordedLog
) -> None:
    usage = resource_usage(FakeProvider({AGENT: body}))
    counters = await usage.refresh()
    assert counters.containers == {}
    assert counters.node_cpu_seconds == 0.0


async def test_an_unreadable_container_is_logged_naming_its_pod(recorded: RecordedLog) -> None:
    body = usage_list(usage_item("web-1", usage_container(cpu="a lot")))
    await resource_usage(FakeProvider({AGENT: body})).refresh()
    ((_, fields),) = recorded.warnings
    assert (fields["namespace"], fields["pod"]) == ("shop-venice", "web-1")


RATES_LIST = {
    "items": [
        {
            "metadata": {"name": "web-1", "namespace": "shop-venice"},
            "timestamp": "2026-11-22T08:00:00Z",
            "window": "10s",
            "containers": [{"name": "app", "usage": {"cpu": "250m", "memory": "2Ki"}}],
        }
    ]
}


async def test_a_provider_without_the_agent_is_read_from_metrics_k8s_io_and_asked_again_later() -> (
    None
):
    clock = Clock()
    provider = FakeProvider(
        {AGENT: NotFound(404, "NotFound", "the server could not find it"), RATES: RATES_LIST}
    )
    usage = resource_usage(provider, clock=clock)
    counters = await usage.refresh()
    assert provider.asked == [AGENT, RATES]
    assert counters.containers[("shop", "web-1", "uid-web-1", "app")].cpu_seconds == pytest.approx(
        2.5
    )
    clock.now = 299.0
    await usage.refresh()
    assert provider.asked == [AGENT, RATES, RATES]  # one request a scrape, not two
    # The agent is installed since: its counters replace the integrated one.
    provider.answers[AGENT] = usage_list(
        usage_item("web-1", usage_container(time="2026-11-22T08:00:30Z"))
    )
    clock.now = 301.0
    counters = await usage.refresh()
    assert provider.asked == [AGENT, RATES, RATES, AGENT]
    counter = counters.containers[("shop", "web-1", "uid-web-1", "app")]
    assert (counter.cpu_seconds, counter.start_time) == (0.04, T0 - 3600)
    assert counters.node_cpu_seconds == pytest.approx(2.54)


def rates_item(
    *containers: Any,
    name: Any = "web-1",
    namespace: Any = "shop-venice",
    window: Any = "10s",
    timestamp: Any = "2026-11-22T08:00:00Z",
) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "namespace": namespace},
        "timestamp": timestamp,
        "window": window,
        "containers": list(containers),
    }


def rates_container(name: Any = "app", cpu: Any = "250m", memory: Any = "2Ki") -> Any:
    return {"name": name, "usage": {"cpu": cpu, "memory": memory}}


@pytest.mark.parametrize(
    "item",
    [
        rates_item(rates_container(name=5)),  # raised in rendering, at every scrape
        rates_item(rates_container(name="../app")),
        rates_item(rates_container(), window="9" * 40 + "h"),  # an infinite counter, for ever
        rates_item(rates_container(), window="0s"),
        rates_item(rates_container(), window=15),
        rates_item(rates_container(cpu="1e400")),
        rates_item(rates_container(cpu="-1")),
        rates_item(rates_container(memory="9" * 30)),
        rates_item(rates_container(), timestamp="1969-12-31T23:59:59Z"),
        rates_item(rates_container(), timestamp=1795334400),
        rates_item({"name": "app", "usage": "lots"}),
        rates_item(rates_container(), namespace="bank-venice"),  # another namespace's web-1
        rates_item(rates_container(), name="web-9"),
        rates_item(rates_container(name="sidecar")),  # a container web-1 does not declare
        {"metadata": {"name": "web-1", "namespace": "shop-venice"}, "containers": "app"},
        "web-1",
    ],
)
async def test_whatever_a_provider_without_the_agent_answers_reaches_no_counter(
    item: Any, recorded: RecordedLog
) -> None:
    declared = OffloadedPod("shop", "web-1", "uid-web-1", "shop-venice", frozenset({"app"}))
    provider = FakeProvider(
        {AGENT: NotFound(404, "NotFound", "no agent"), RATES: {"items": [item]}}
    )
    usage = ResourceUsage(lambda: cast(KubeClient, provider), lambda: [declared], clock=Clock())
    counters = await usage.refresh()
    assert counters.containers == {}
    assert counters.node_cpu_seconds == 0.0
    render_resource_metrics(counters)
    forge_summary("vn-1", 0.0, counters)


async def test_of_a_pods_metrics_listed_twice_the_first_counts(recorded: RecordedLog) -> None:
    provider = FakeProvider(
        {
            AGENT: NotFound(404, "NotFound", "no agent"),
            RATES: {
                "items": [
                    rates_item(rates_container(cpu="1"), rates_container(cpu="3")),
                    rates_item(rates_container(cpu="500")),
                ]
            },
        }
    )
    counters = await resource_usage(provider).refresh()
    [counter] = counters.containers.values()
    assert counter.cpu_cores == 1.0


@pytest.mark.parametrize(
    "error",
    [
        ApiError(503, "ServiceUnavailable", "the agent is not ready"),
        ApiError(403, "Forbidden", "no"),
        TimeoutError(),
        ProtocolError("not an HTTP/1.1 status line"),  # what vk's transport refuses
        ConnectionResetError("the server closed the connection"),
        ValueError("unexpected character"),  # an answer that is not JSON, as orjson says it
    ],
)
async def test_an_agent_outage_keeps_the_counters_says_so_once_and_does_not_fall_back(
    error: Exception, recorded: RecordedLog
) -> None:
    provider = FakeProvider({AGENT: usage_list(usage_item("web-1", usage_container()))})
    usage = resource_usage(provider)
    before = dict((await usage.refresh()).containers)
    provider.answers[AGENT] = error
    await usage.refresh()
    counters = await usage.refresh()
    assert provider.asked == [AGENT, AGENT, AGENT]
    assert counters.containers == before
    assert counters.containers[("shop", "web-1", "uid-web-1", "app")].cpu_seconds == 0.04
    assert [fields["namespace"] for _, fields in recorded.warnings] == ["shop-venice"]


def test_a_container_the_local_pod_does_not_declare_is_an_invention() -> None:
    """A provider cannot grow this kubelet's memory with rows of containers nobody declared."""
    declared = OffloadedPod("shop", "web-1", "uid-web-1", "shop-venice", frozenset({"app"}))
    invented = [usage_container(name=f"fake-{i}") for i in range(50)]
    body = usage_list(usage_item("web-1", usage_container(), *invented))
    usages, skipped = pod_usages(body, "shop-venice", {"web-1": declared})
    assert [c.name for c in usages[0].containers] == ["app"]
    assert len(skipped) == 50
    assert "is not the pod's" in skipped[0][1]


def test_the_declared_containers_are_the_pods_and_init_containers() -> None:
    pod = {
        "spec": {
            "initContainers": [{"name": "setup"}, {"name": "proxy", "restartPolicy": "Always"}],
            "containers": [{"name": "app"}],
        }
    }
    assert declared_containers(pod) == {"setup", "proxy", "app"}


def test_a_start_time_that_moves_before_the_last_point_is_no_restart() -> None:
    """kwok reports a start time that changes at every scrape; a container restarted is one
    that started after the last point, as metrics-server judges it."""
    counters = UsageCounters()
    counters.observe(point(1000.0, 10.0, start=54.0), PRESENT)
    counters.observe(point(1015.0, 13.0, start=69.0), PRESENT)
    counter = counters.containers[("shop", "web-1", "uid-web-1", "app")]
    assert (counter.start_time, counter.cpu_seconds, counter.cpu_cores) == (54.0, 13.0, 0.2)
    assert counters.node_cpu_seconds == pytest.approx(13.0)
