"""Resource usage of the offloaded pods, served as the kubelet serves its own: `/metrics/resource`
(what metrics-server scrapes), `/metrics/cadvisor` and `/stats/summary`.

The kubelet reports CPU as a counter cumulative from the container's start, and metrics-server
takes the rate between two scrapes of it. The counters served here are the provider's kubelets'
own, read through vk's metrics agent on the provider (`metrics.vk.io`, one twin namespace at a
time) and stamped with their sample time, so the consumer's metrics-server computes the rate the
provider's does. Integrating `metrics.k8s.io` rates instead, as is still done for a provider
without the agent (a Liqo provider), misses the CPU used before the first window seen and gives
an idle container a counter of 0, which metrics-server drops with its whole pod. The node's
counter adds up every container's increments, so it keeps rising when pods go away.

What the provider sends is the other party's word: it is checked field by field, and only the
pods this virtual kubelet offloaded are taken from it. Parsing and rendering are pure;
`ResourceUsage` does the fetching, on demand (a scrape), so a virtual kubelet nobody scrapes asks
the provider for nothing.
"""

from __future__ import annotations

import asyncio
import datetime
import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from vk.api.duration import parse_go_duration
from vk.api.quantity import parse_quantity
from vk.api.timestamps import kube_time
from vk.kube.client import JSON, ApiError, KubeClient, NotFound

log = structlog.get_logger("vk.kubelet.stats")

METRICS_CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

USAGE_API = "/apis/metrics.vk.io/v1alpha1/namespaces/{namespace}/pods"
RATES_API = "/apis/metrics.k8s.io/v1beta1/namespaces/{namespace}/pods"
# A provider without the agent answers 404 (no such API): its namespaces are read from
# metrics.k8s.io, and the agent asked again after this long (it may be installed since) rather
# than at every scrape, which would pay two requests each time.
AGENT_RETRY_SECONDS = 300.0
# The kubelet's counters are uint64, but nothing real comes near 2^63 (292 years of a core in
# nanoseconds, 8 EiB of memory): beyond is a provider's invention.
MAX_COUNT = 2**63
# The times a point may carry: a kubelet's are after 1970, and /stats/summary writes them back
# as dates, which end with year 9999.
_TIMES = (0.0, datetime.datetime(9999, 12, 31, 23, 59, 59, tzinfo=datetime.UTC).timestamp())
# A PodMetrics' window, at most (metrics-server's are its kubelets' housekeeping windows, 10 to
# 30 s), and the cores of a container, at most (more than any machine has).
MAX_WINDOW = 3600.0
MAX_CORES = 1e6
_CONTAINER_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")  # a DNS-1123 label
# A failed request for usage: the provider is away, refuses, or answers what is not JSON.
FETCH_ERRORS = (ApiError, OSError, TimeoutError, ValueError)


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
    # The containers the local pod declares (init containers too): the provider's rows of
    # any other are inventions, and would grow this kubelet's memory at the provider's will.
    # None where not known.
    containers: frozenset[str] | None = None


def declared_containers(pod: JSON) -> frozenset[str]:
    spec = pod.get("spec") or {}
    return frozenset(
        str(c.get("name"))
        for key in ("containers", "initContainers")
        for c in spec.get(key) or []
        if isinstance(c, dict)
    )


def pod_sample(pod_metrics: Any, offloaded: OffloadedPod) -> PodSample:
    """A provider PodMetrics object as a sample of the local pod it runs for, checked field by
    field as the agent's answer is (`container_usage`): UnreadableUsage if it is not one.
    Containers the pod does not declare are left out; of one listed twice, the first counts."""
    if not isinstance(pod_metrics, dict):
        raise UnreadableUsage("the pod's metrics are not an object")
    window = _window(pod_metrics.get("window"))
    entries = pod_metrics.get("containers") or []
    if not isinstance(entries, list):
        raise UnreadableUsage("its containers are not a list")
    containers: dict[str, ContainerSample] = {}
    for entry in entries:
        sample = container_sample(entry)
        if offloaded.containers is None or sample.name in offloaded.containers:
            containers.setdefault(sample.name, sample)
    return PodSample(
        namespace=offloaded.namespace,
        name=offloaded.name,
        uid=offloaded.uid,
        timestamp=_time(pod_metrics.get("timestamp"), "timestamp"),
        window=window,
        containers=tuple(containers.values()),
    )


def container_sample(entry: Any) -> ContainerSample:
    """One container of a PodMetrics: UnreadableUsage unless its name is a container's and its
    usage two quantities within the counters' bounds."""
    if not isinstance(entry, dict):
        raise UnreadableUsage("a container is not an object")
    name = entry.get("name")
    if not isinstance(name, str) or not _CONTAINER_NAME.fullmatch(name):
        raise UnreadableUsage(f"a container's name is not a container name: {str(name)[:64]!r}")
    usage = entry.get("usage")
    if not isinstance(usage, dict):
        raise UnreadableUsage(f"container {name}: its usage is not an object")
    cpu_cores = _quantity(usage.get("cpu"), f"container {name}: cpu", MAX_CORES)
    memory = _quantity(usage.get("memory"), f"container {name}: memory", MAX_COUNT)
    return ContainerSample(name, cpu_cores, int(memory))


def _quantity(value: Any, field_name: str, limit: float) -> float:
    """A quantity's value, at least 0 (a negative one would run the counters backwards) and
    below `limit`."""
    if isinstance(value, str) and len(value) <= 64:
        try:
            number = float(parse_quantity(value))
        except (ValueError, ArithmeticError):
            pass
        else:
            if 0 <= number < limit:
                return number
    raise UnreadableUsage(f"{field_name} is not a usage: {str(value)[:64]!r}")


def _window(value: Any) -> float:
    """A PodMetrics' window: a Go duration, above 0 and at most MAX_WINDOW (the first window of
    a counter is its CPU's span: an endless one would make the node's counter infinite)."""
    if isinstance(value, str) and len(value) <= 64:
        try:
            seconds = parse_go_duration(value)
        except ValueError:
            pass
        else:
            if 0 < seconds <= MAX_WINDOW:
                return seconds
    raise UnreadableUsage(f"the window is not a duration of a scrape: {str(value)[:64]!r}")


@dataclass(frozen=True)
class ContainerUsage:
    """A container's usage as the provider's kubelet counts it: CPU from the container's start."""

    name: str
    start_time: float  # unix seconds
    timestamp: float  # of the CPU point
    cpu_seconds: float
    memory_bytes: int  # working set


@dataclass(frozen=True)
class PodUsage:
    namespace: str  # the local namespace
    name: str
    uid: str
    containers: tuple[ContainerUsage, ...]


class UnreadableUsage(ValueError):
    """The agent's answer, or a container's entry in it, is not what the contract says."""


def _time(value: Any, field_name: str) -> float:
    if isinstance(value, str) and len(value) <= 64:
        try:
            moment = datetime.datetime.fromisoformat(value)
            if moment.tzinfo is not None:  # RFC 3339 always has an offset
                timestamp = moment.timestamp()
                if _TIMES[0] <= timestamp <= _TIMES[1]:
                    return timestamp
        except (ValueError, OverflowError):
            pass
    raise UnreadableUsage(f"{field_name} is not an RFC 3339 time: {str(value)[:64]!r}")


def _count(value: Any, field_name: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < MAX_COUNT:
        return value
    raise UnreadableUsage(f"{field_name} is not a count: {str(value)[:64]!r}")


def container_usage(entry: Any) -> ContainerUsage | None:
    """One container of the agent's PodUsage; None when the kubelet has no CPU, memory or start
    time series for it (metrics-server would drop it), UnreadableUsage when it is unreadable."""
    if not isinstance(entry, dict):
        raise UnreadableUsage("a container is not an object")
    name = entry.get("name")
    if not isinstance(name, str) or not _CONTAINER_NAME.fullmatch(name):
        raise UnreadableUsage(f"a container's name is not a container name: {str(name)[:64]!r}")
    cpu, memory, start = entry.get("cpu"), entry.get("memory"), entry.get("startTime")
    if cpu is None or memory is None or start is None:
        return None
    if not isinstance(cpu, dict) or not isinstance(memory, dict):
        raise UnreadableUsage(f"container {name}: cpu or memory is not an object")
    return ContainerUsage(
        name=name,
        start_time=_time(start, f"container {name}: startTime"),
        timestamp=_time(cpu.get("time"), f"container {name}: cpu.time"),
        cpu_seconds=_count(cpu.get("usageCoreNanoSeconds"), f"container {name}: CPU") / 1e9,
        memory_bytes=_count(memory.get("workingSetBytes"), f"container {name}: memory"),
    )


def pod_usages(
    body: Any, remote_namespace: str, members: dict[str, OffloadedPod]
) -> tuple[list[PodUsage], list[tuple[str, str]]]:
    """The agent's PodUsageList for `remote_namespace` as the usage of the local pods in
    `members` (by remote name), and what was skipped as (pod, why); UnreadableUsage if `body`
    is no list at all. Items of another namespace or pod are no business of this virtual
    kubelet's; of a pod or container listed twice, the first counts."""
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise UnreadableUsage("the answer is not a PodUsageList")
    found: dict[str, PodUsage] = {}
    skipped: list[tuple[str, str]] = []
    for item in items:
        if len(found) == len(members):
            break  # whatever else the list holds is not ours
        metadata = item.get("metadata") if isinstance(item, dict) else None
        if not isinstance(metadata, dict) or metadata.get("namespace") != remote_namespace:
            continue
        name = metadata.get("name")
        if not isinstance(name, str) or name not in members or name in found:
            continue
        containers: dict[str, ContainerUsage] = {}
        entries = item.get("containers")
        if not isinstance(entries, list):
            skipped.append((name, "its containers are not a list"))
            entries = []
        for entry in entries:
            try:
                usage = container_usage(entry)
            except UnreadableUsage as error:
                skipped.append((name, str(error)))
                continue
            if usage is None:
                continue
            declared = members[name].containers
            if declared is not None and usage.name not in declared:
                skipped.append((name, f"container {usage.name} is not the pod's"))
                continue
            containers.setdefault(usage.name, usage)
        pod = members[name]
        found[name] = PodUsage(pod.namespace, pod.name, pod.uid, tuple(containers.values()))
    return list(found.values()), skipped


@dataclass
class ContainerCounter:
    start_time: float  # constant for the counter's life: metrics-server pairs points by it
    cpu_seconds: float
    timestamp: float
    cpu_cores: float
    memory_bytes: int
    # The provider's kubelet's own counter (the agent's), not one integrated from rates: the
    # two do not continue one another.
    kubelets: bool = False


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
        self._forget_absent(present)

    def _forget_absent(self, present: set[tuple[str, str, str]]) -> None:
        for key in [k for k in self.containers if k[:3] not in present]:
            del self.containers[key]

    def observe(self, pods: list[PodUsage], present: set[tuple[str, str, str]]) -> None:
        """Sets the counters to the provider's cumulative values in `pods`, and forgets the
        containers of pods no longer in `present` (namespace, name, uid), as `update` does."""
        for pod in pods:
            for container in pod.containers:
                key = (pod.namespace, pod.name, pod.uid, container.name)
                counter = self.containers.get(key)
                if counter is not None and container.timestamp <= counter.timestamp:
                    continue
                # The same counter unless it started after the last point (restarted, as
                # metrics-server judges it: not by any change of the start time, as kwok's
                # moves at every scrape) or the last point was integrated from rates.
                if (
                    counter is not None
                    and counter.kubelets
                    and container.start_time <= counter.timestamp
                ):
                    if container.cpu_seconds < counter.cpu_seconds:
                        # Prometheus' rate() would read a reset, and the node's counter would
                        # have to go back: a provider does not get to run a counter backwards.
                        log.warning(
                            "the provider's CPU counter went backwards; ignored",
                            pod=f"{pod.namespace}/{pod.name}",
                            container=container.name,
                        )
                        continue
                    increment = container.cpu_seconds - counter.cpu_seconds
                    cpu_cores = increment / (container.timestamp - counter.timestamp)
                    start_time = counter.start_time  # metrics-server pairs points by it
                else:
                    # A new container, or a restarted one: a new counter, whose rate is not
                    # known until its second point.
                    increment = container.cpu_seconds
                    cpu_cores = counter.cpu_cores if counter is not None else 0.0
                    start_time = container.start_time
                self.containers[key] = ContainerCounter(
                    kubelets=True,
                    start_time=start_time,
                    cpu_seconds=container.cpu_seconds,
                    timestamp=container.timestamp,
                    cpu_cores=cpu_cores,
                    memory_bytes=container.memory_bytes,
                )
                self.node_cpu_seconds += increment
                self.node_timestamp = max(self.node_timestamp, container.timestamp)
        self._forget_absent(present)

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
    `container_memory_working_set_bytes`) work for them. Built from what the provider
    reports of each container, which the tenant may read: cumulative CPU, working set and
    start time; a pod's own series (`container=""`, its cgroup) sums its containers.
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
    return kube_time(datetime.datetime.fromtimestamp(timestamp, datetime.UTC))


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
    """Fetches the offloaded pods' usage from the provider when asked (a scrape), one list per
    twin namespace: from vk's metrics agent, or from metrics.k8s.io where the provider has no
    agent; and keeps the counters."""

    def __init__(
        self,
        provider: Callable[[], KubeClient | None],
        offloaded: Callable[[], list[OffloadedPod]],
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.provider = provider
        self.offloaded = offloaded
        self.counters = UsageCounters()
        self.started = time.time()
        self._clock = clock
        self._lock = asyncio.Lock()
        self._outages = NamespaceOutages(
            log, "cannot read the offloaded pods' usage from the provider"
        )
        # Remote namespace -> when to ask its agent again, for those whose provider has none.
        self._agentless: dict[str, float] = {}

    async def refresh(self) -> UsageCounters:
        async with self._lock:  # two scrapes at once would fetch twice for nothing
            pods = self.offloaded()
            client = self.provider()
            samples: list[PodSample] = []
            usages: list[PodUsage] = []
            if client is not None:
                by_namespace: dict[str, dict[str, OffloadedPod]] = {}
                for pod in pods:
                    by_namespace.setdefault(pod.remote_namespace, {})[pod.name] = pod
                self._agentless = {
                    ns: when for ns, when in self._agentless.items() if ns in by_namespace
                }
                for remote_namespace, members in by_namespace.items():
                    counted = None
                    if self._clock() >= self._agentless.get(remote_namespace, -math.inf):
                        counted = await self._fetch_usage(client, remote_namespace, members)
                    if counted is None:
                        samples += await self._fetch_rates(client, remote_namespace, members)
                    else:
                        usages += counted
            present = {(p.namespace, p.name, p.uid) for p in pods}
            self.counters.update(samples, present)
            self.counters.observe(usages, present)
            return self.counters

    async def _fetch_usage(
        self, client: KubeClient, remote_namespace: str, members: dict[str, OffloadedPod]
    ) -> list[PodUsage] | None:
        """The agent's counters; None if the provider has no agent."""
        try:
            body = await client.get(USAGE_API.format(namespace=remote_namespace))
        except NotFound:
            if remote_namespace not in self._agentless:
                log.info(
                    "the provider has no vk metrics agent: reading its metrics.k8s.io",
                    namespace=remote_namespace,
                )
            self._agentless[remote_namespace] = self._clock() + AGENT_RETRY_SECONDS
            return None
        except FETCH_ERRORS as error:
            self._outages.failed(remote_namespace, error)
            return []
        self._agentless.pop(remote_namespace, None)
        try:
            usages, skipped = pod_usages(body, remote_namespace, members)
        except UnreadableUsage as error:  # said once, as an outage, not at every scrape
            self._outages.failed(remote_namespace, error)
            return []
        self._outages.answered(remote_namespace)
        for pod, why in skipped:
            log.warning(
                "unreadable pod usage from the provider",
                namespace=remote_namespace,
                pod=pod,
                error=why,
            )
        return usages

    async def _fetch_rates(
        self, client: KubeClient, remote_namespace: str, members: dict[str, OffloadedPod]
    ) -> list[PodSample]:
        try:
            body = await client.get(RATES_API.format(namespace=remote_namespace))
        except FETCH_ERRORS as error:
            self._outages.failed(remote_namespace, error)
            return []
        self._outages.answered(remote_namespace)
        items = body.get("items") if isinstance(body, dict) else None
        samples: dict[str, PodSample] = {}
        for item in items if isinstance(items, list) else []:
            metadata = item.get("metadata") if isinstance(item, dict) else None
            if not isinstance(metadata, dict) or metadata.get("namespace") != remote_namespace:
                continue  # another namespace's pod of the same name is not ours
            name = metadata.get("name")
            if not isinstance(name, str) or name not in members or name in samples:
                continue
            pod = members[name]
            try:
                samples[name] = pod_sample(item, pod)
            except UnreadableUsage as error:
                log.warning("unreadable pod metrics", pod=pod.name, error=str(error))
        return list(samples.values())
