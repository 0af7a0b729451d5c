"""The offloaded pods' usage as the kubelet reports it: provider rates integrated into counters."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vk.api.duration import parse_go_duration
from vk.kubelet.stats import (
    ContainerSample,
    OffloadedPod,
    PodSample,
    UsageCounters,
    forge_summary,
    pod_sample,
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
