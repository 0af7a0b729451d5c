"""Resource usage of the offloaded pods, served as the kubelet serves its own: `/metrics/resource`
(what metrics-server scrapes) and `/stats/summary`.

The provider's `metrics.k8s.io` gives each container's CPU as a rate averaged over a window;
the kubelet reports CPU as a cumulative counter, and metrics-server takes the rate between two
scrapes of it. So the rates are integrated here into counters, one per container, advanced only
when the provider's sample is newer, and stamped with the provider's sample time: the rate
metrics-server computes on the consumer is then exactly the provider's. The node's counter adds
up every container's increments, so it keeps rising when pods go away.

Parsing and rendering are pure; `ResourceUsage` does the fetching, on demand (a scrape), so a
virtual kubelet nobody scrapes asks the provider for nothing.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from vk.api.duration import parse_go_duration
from vk.api.quantity import parse_quantity
from vk.kube.client import JSON, ApiError, KubeClient

log = structlog.get_logger("vk.kubelet.stats")

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


@dataclass(frozen=True)
class ContainerSample:
    name: str
    cpu_cores: float  # rate over the window
    memory_bytes: int  # working set


@dataclass(frozen=True)
class PodSample:
    namespace: str  # the local namespace: what the consumer's metrics-server knows
    name: str
    uid: str
    timestamp: float  # end of the provider's window, unix seconds
    window: float  # seconds
    containers: tuple[ContainerSample, ...]


@dataclass(frozen=True)
class OffloadedPod:
    namespace: str
    name: str
    uid: str
    remote_namespace: str


def parse_timestamp(value: str) -> float:
    return datetime.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def pod_sample(pod_metrics: JSON, offloaded: OffloadedPod) -> PodSample:
    """A provider PodMetrics object as a sample of the local pod it runs for."""
    containers = tuple(
        ContainerSample(
            name=container["name"],
            cpu_cores=float(parse_quantity(container["usage"]["cpu"])),
            memory_bytes=int(parse_quantity(container["usage"]["memory"])),
        )
        for container in pod_metrics.get("containers") or []
    )
    return PodSample(
        namespace=offloaded.namespace,
        name=offloaded.name,
        uid=offloaded.uid,
        timestamp=parse_timestamp(pod_metrics["timestamp"]),
        window=parse_go_duration(pod_metrics["window"]),
        containers=containers,
    )


@dataclass
class ContainerCounter:
    start_time: float  # constant for the counter's life: metrics-server pairs points by it
    cpu_seconds: float
    timestamp: float
    cpu_cores: float
    memory_bytes: int


ContainerKey = tuple[str, str, str, str]  # namespace, pod, pod uid, container


@dataclass
class UsageCounters:
    """Cumulative CPU counters and current memory, per container and for the node."""

    containers: dict[ContainerKey, ContainerCounter] = field(default_factory=dict)
    node_cpu_seconds: float = 0.0
    node_timestamp: float = 0.0

    def update(self, samples: list[PodSample], present: set[tuple[str, str, str]]) -> None:
        """Advances the counters with `samples`, and forgets the containers of pods no longer
        in `present` (namespace, name, uid). A pod present without a sample keeps its counter
        as it was: the provider's metrics lag a new pod by a scrape or two."""
        for pod in samples:
            for container in pod.containers:
                key = (pod.namespace, pod.name, pod.uid, container.name)
                counter = self.containers.get(key)
                if counter is None:
                    # The first window's usage starts the counter (metrics-server drops a pod
                    # whose counter reads 0).
                    increment = container.cpu_cores * pod.window
                    self.containers[key] = ContainerCounter(
                        start_time=pod.timestamp - pod.window,
                        cpu_seconds=increment,
                        timestamp=pod.timestamp,
                        cpu_cores=container.cpu_cores,
                        memory_bytes=container.memory_bytes,
                    )
                elif pod.timestamp > counter.timestamp:
                    increment = container.cpu_cores * (pod.timestamp - counter.timestamp)
                    counter.cpu_seconds += increment
                    counter.timestamp = pod.timestamp
                    counter.cpu_cores = container.cpu_cores
                    counter.memory_bytes = container.memory_bytes
                else:
                    continue
                self.node_cpu_seconds += increment
                self.node_timestamp = max(self.node_timestamp, pod.timestamp)
        for key in [k for k in self.containers if k[:3] not in present]:
            del self.containers[key]

    @property
    def node_memory_bytes(self) -> int:
        return sum(c.memory_bytes for c in self.containers.values())

    @property
    def node_cpu_cores(self) -> float:
        return sum(c.cpu_cores for c in self.containers.values())


def _labels(namespace: str, pod: str, container: str | None = None) -> str:
    pairs = ([("container", container)] if container is not None else []) + [
        ("namespace", namespace),
        ("pod", pod),
    ]
    return ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs)


def escape_label_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render_resource_metrics(counters: UsageCounters) -> str:
    """The kubelet's `/metrics/resource` in the Prometheus text format, timestamps in ms."""
    families: list[tuple[str, str, str, list[str]]] = [
        (
            "container_cpu_usage_seconds_total",
            "counter",
            "Cumulative cpu time consumed by the container in core-seconds",
            [],
        ),
        (
            "container_memory_working_set_bytes",
            "gauge",
            "Current working set of the container in bytes",
            [],
        ),
        (
            "container_start_time_seconds",
            "gauge",
            "Start time of the container since unix epoch in seconds",
            [],
        ),
        (
            "pod_cpu_usage_seconds_total",
            "counter",
            "Cumulative cpu time consumed by the pod in core-seconds",
            [],
        ),
        ("pod_memory_working_set_bytes", "gauge", "Current working set of the pod in bytes", []),
        (
            "node_cpu_usage_seconds_total",
            "counter",
            "Cumulative cpu time consumed by the node in core-seconds",
            [],
        ),
        ("node_memory_working_set_bytes", "gauge", "Current working set of the node in bytes", []),
        (
            "resource_scrape_error",
            "gauge",
            "1 if there was an error while getting container metrics, 0 otherwise",
            ["resource_scrape_error 0"],
        ),
    ]
    lines = {name: samples for name, _, _, samples in families}
    pods: dict[tuple[str, str], list[ContainerCounter]] = {}
    for (namespace, pod, _, container), counter in sorted(counters.containers.items()):
        labels = _labels(namespace, pod, container)
        ms = int(counter.timestamp * 1000)
        lines["container_cpu_usage_seconds_total"].append(
            f"container_cpu_usage_seconds_total{{{labels}}} {counter.cpu_seconds!r} {ms}"
        )
        lines["container_memory_working_set_bytes"].append(
            f"container_memory_working_set_bytes{{{labels}}} {counter.memory_bytes} {ms}"
        )
        lines["container_start_time_seconds"].append(
            f"container_start_time_seconds{{{labels}}} {counter.start_time!r} {ms}"
        )
        pods.setdefault((namespace, pod), []).append(counter)
    for (namespace, pod), members in pods.items():
        labels = _labels(namespace, pod)
        ms = int(max(c.timestamp for c in members) * 1000)
        cpu = sum(c.cpu_seconds for c in members)
        memory = sum(c.memory_bytes for c in members)
        lines["pod_cpu_usage_seconds_total"].append(
            f"pod_cpu_usage_seconds_total{{{labels}}} {cpu!r} {ms}"
        )
        lines["pod_memory_working_set_bytes"].append(
            f"pod_memory_working_set_bytes{{{labels}}} {memory} {ms}"
        )
    if counters.node_timestamp:
        ms = int(counters.node_timestamp * 1000)
        lines["node_cpu_usage_seconds_total"].append(
            f"node_cpu_usage_seconds_total {counters.node_cpu_seconds!r} {ms}"
        )
        lines["node_memory_working_set_bytes"].append(
            f"node_memory_working_set_bytes {counters.node_memory_bytes} {ms}"
        )
    text = []
    for name, kind, help_text, _ in families:
        text += [f"# HELP {name} [STABLE] {help_text}", f"# TYPE {name} {kind}", *lines[name]]
    return "\n".join(text) + "\n"


def render_cadvisor_metrics(
    counters: UsageCounters, images: Callable[[str, str, str], str | None]
) -> str:
    """The kubelet's `/metrics/cadvisor` for the offloaded pods, as cAdvisor names and labels
    them (`container`, `id`, `image`, `name`, `namespace`, `pod`), so that the dashboards and
    queries written for real nodes (`container_cpu_usage_seconds_total{container!=""}`,
    `container_memory_working_set_bytes`) work for them. Built from what the provider's
    metrics.k8s.io says of each container, which the tenant may read: cumulative CPU, working
    set and start time; a pod's own series (`container=""`, its cgroup) sums its containers.
    `images(namespace, pod, container)` is the image the local pod names."""
    families = {
        "container_cpu_usage_seconds_total": (
            "counter",
            "Cumulative cpu time consumed in seconds.",
        ),
        "container_memory_working_set_bytes": ("gauge", "Current working set in bytes."),
        "container_start_time_seconds": (
            "gauge",
            "Start time of the container since unix epoch in seconds.",
        ),
    }
    lines: dict[str, list[str]] = {name: [] for name in families}
    pods: dict[tuple[str, str, str], list[ContainerCounter]] = {}
    for (namespace, pod, uid, container), counter in sorted(counters.containers.items()):
        cgroup = f"/kubepods/pod{uid}"
        labels = _cadvisor_labels(
            container,
            f"{cgroup}/{container}",
            images(namespace, pod, container) or "",
            namespace,
            pod,
        )
        ms = int(counter.timestamp * 1000)
        lines["container_cpu_usage_seconds_total"].append(
            f"container_cpu_usage_seconds_total{{{labels}}} {counter.cpu_seconds!r} {ms}"
        )
        lines["container_memory_working_set_bytes"].append(
            f"container_memory_working_set_bytes{{{labels}}} {counter.memory_bytes} {ms}"
        )
        lines["container_start_time_seconds"].append(
            f"container_start_time_seconds{{{labels}}} {counter.start_time!r} {ms}"
        )
        pods.setdefault((namespace, pod, uid), []).append(counter)
    for (namespace, pod, uid), members in pods.items():
        labels = _cadvisor_labels("", f"/kubepods/pod{uid}", "", namespace, pod)
        ms = int(max(c.timestamp for c in members) * 1000)
        cpu = sum(c.cpu_seconds for c in members)
        memory = sum(c.memory_bytes for c in members)
        lines["container_cpu_usage_seconds_total"].append(
            f"container_cpu_usage_seconds_total{{{labels}}} {cpu!r} {ms}"
        )
        lines["container_memory_working_set_bytes"].append(
            f"container_memory_working_set_bytes{{{labels}}} {memory} {ms}"
        )
    text = []
    for name, (kind, help_text) in families.items():
        text += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}", *lines[name]]
    return "\n".join(text) + "\n"


def _cadvisor_labels(container: str, cgroup: str, image: str, namespace: str, pod: str) -> str:
    pairs = (
        ("container", container),
        ("id", cgroup),
        ("image", image),
        ("name", ""),
        ("namespace", namespace),
        ("pod", pod),
    )
    return ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs)


def _rfc3339(timestamp: float) -> str:
    moment = datetime.datetime.fromtimestamp(timestamp, datetime.UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def _cpu_stats(timestamp: float, cores: float, seconds: float) -> JSON:
    return {
        "time": _rfc3339(timestamp),
        "usageNanoCores": round(cores * 1e9),
        "usageCoreNanoSeconds": round(seconds * 1e9),
    }


def _memory_stats(timestamp: float, working_set: int) -> JSON:
    return {"time": _rfc3339(timestamp), "workingSetBytes": working_set}


def forge_summary(node_name: str, node_start: float, counters: UsageCounters) -> JSON:
    """The kubelet's `/stats/summary` (stats/v1alpha1 Summary), CPU and memory only."""
    pods: dict[tuple[str, str, str], list[tuple[str, ContainerCounter]]] = {}
    for (namespace, pod, uid, container), counter in sorted(counters.containers.items()):
        pods.setdefault((namespace, pod, uid), []).append((container, counter))
    pod_stats = []
    for (namespace, pod, uid), members in pods.items():
        timestamp = max(c.timestamp for _, c in members)
        pod_stats.append(
            {
                "podRef": {"name": pod, "namespace": namespace, "uid": uid},
                "startTime": _rfc3339(min(c.start_time for _, c in members)),
                "containers": [
                    {
                        "name": name,
                        "startTime": _rfc3339(c.start_time),
                        "cpu": _cpu_stats(c.timestamp, c.cpu_cores, c.cpu_seconds),
                        "memory": _memory_stats(c.timestamp, c.memory_bytes),
                    }
                    for name, c in members
                ],
                "cpu": _cpu_stats(
                    timestamp,
                    sum(c.cpu_cores for _, c in members),
                    sum(c.cpu_seconds for _, c in members),
                ),
                "memory": _memory_stats(timestamp, sum(c.memory_bytes for _, c in members)),
            }
        )
    node_time = counters.node_timestamp or time.time()
    return {
        "node": {
            "nodeName": node_name,
            "startTime": _rfc3339(node_start),
            "cpu": _cpu_stats(node_time, counters.node_cpu_cores, counters.node_cpu_seconds),
            "memory": _memory_stats(node_time, counters.node_memory_bytes),
        },
        "pods": pod_stats,
    }


class NamespaceOutages:
    """Says a twin namespace's fetch failing once per outage, not at every scrape."""

    def __init__(self, logger: Any, message: str) -> None:
        self.log = logger
        self.message = message
        self._failing: set[str] = set()

    def failed(self, remote_namespace: str, error: Exception) -> None:
        if remote_namespace not in self._failing:
            self.log.warning(self.message, namespace=remote_namespace, error=str(error))
            self._failing.add(remote_namespace)

    def answered(self, remote_namespace: str) -> None:
        self._failing.discard(remote_namespace)


class ResourceUsage:
    """Fetches the offloaded pods' usage from the provider's metrics.k8s.io, one list per twin
    namespace, when asked (a scrape), and keeps the counters."""

    def __init__(
        self,
        provider: Callable[[], KubeClient | None],
        offloaded: Callable[[], list[OffloadedPod]],
    ) -> None:
        self.provider = provider
        self.offloaded = offloaded
        self.counters = UsageCounters()
        self.started = time.time()
        self._lock = asyncio.Lock()
        self._outages = NamespaceOutages(
            log, "cannot read the offloaded pods' usage from the provider"
        )

    async def refresh(self) -> UsageCounters:
        async with self._lock:  # two scrapes at once would fetch twice for nothing
            pods = self.offloaded()
            client = self.provider()
            samples: list[PodSample] = []
            if client is not None:
                by_namespace: dict[str, dict[str, OffloadedPod]] = {}
                for pod in pods:
                    by_namespace.setdefault(pod.remote_namespace, {})[pod.name] = pod
                for remote_namespace, members in by_namespace.items():
                    samples += await self._fetch(client, remote_namespace, members)
            self.counters.update(samples, {(p.namespace, p.name, p.uid) for p in pods})
            return self.counters

    async def _fetch(
        self, client: KubeClient, remote_namespace: str, members: dict[str, OffloadedPod]
    ) -> list[PodSample]:
        path = f"/apis/metrics.k8s.io/v1beta1/namespaces/{remote_namespace}/pods"
        try:
            items = (await client.get(path)).get("items") or []
        except (ApiError, OSError, TimeoutError) as error:
            self._outages.failed(remote_namespace, error)
            return []
        self._outages.answered(remote_namespace)
        samples = []
        for item in items:
            pod = members.get(item.get("metadata", {}).get("name", ""))
            if pod is None:
                continue
            try:
                samples.append(pod_sample(item, pod))
            except (KeyError, ValueError) as error:  # InvalidQuantity is a ValueError
                log.warning("unreadable pod metrics", pod=pod.name, error=str(error))
        return samples
