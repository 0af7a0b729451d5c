"""The kubelet's `/metrics/probes` for the offloaded pods: `prober_probe_total`, the failed
liveness, readiness and startup probes of each container, counted from the `Unhealthy` Events
the provider's kubelet records for them. Those Events are the only trace of its prober that the
tenant may read: the provider's own `/metrics/probes` sits behind `nodes/metrics`, which a tenant
never gets.

The kubelet records an Event for each failed probe (`Readiness probe failed: <output>`) and
counts it up when it repeats; a successful probe leaves no trace, so only `result="failed"` is
served, from 0 for every probe the local pod declares (the kubelet's series appear only at the
first failure, which `increase()` then misses). The count is a lower bound of the provider
kubelet's: its Event recorder drops repeats past its rate limit. Nothing here trusts the
provider: an Event counts only for a probe the local pod declares, on the remote pod running
for it now.

Parsing, counting and rendering are pure; `ProbeResults` fetches on demand (a scrape).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import structlog

from vk.kube.client import JSON, ApiError, KubeClient
from vk.kubelet.stats import NamespaceOutages, escape_label_value

log = structlog.get_logger("vk.kubelet.probes")

# The kubelet's names for its probe types (`probeType.String()`) and the pod spec fields.
PROBE_FIELDS = {
    "Liveness": "livenessProbe",
    "Readiness": "readinessProbe",
    "Startup": "startupProbe",
}
UNHEALTHY = "Unhealthy"
# The kubelet's Event recorder aggregates similar Events past ten into one with this prefix.
_COMBINED = "(combined from similar events): "
_CONTAINER_FIELD_PATH = re.compile(r"spec\.(?:containers|initContainers)\{([^{}]+)\}")


@dataclass(frozen=True)
class ProbedPod:
    """An offloaded pod as the prober counts go: its identity at home, where it runs, and
    the probes its local spec declares, as (container, probe type)."""

    namespace: str
    name: str
    uid: str
    remote_namespace: str
    remote_uid: str  # the remote pod running for it now ("": none yet)
    probes: frozenset[tuple[str, str]]


def probed_pod(local_pod: JSON, remote_namespace: str, remote_uid: str) -> ProbedPod:
    metadata = local_pod.get("metadata") or {}
    spec = local_pod.get("spec") or {}
    probes = frozenset(
        (str(container.get("name")), probe_type)
        for container in [*(spec.get("containers") or []), *(spec.get("initContainers") or [])]
        for probe_type, spec_field in PROBE_FIELDS.items()
        if container.get(spec_field)
    )
    return ProbedPod(
        namespace=str(metadata.get("namespace")),
        name=str(metadata.get("name")),
        uid=str(metadata.get("uid")),
        remote_namespace=remote_namespace,
        remote_uid=remote_uid,
        probes=probes,
    )


@dataclass(frozen=True)
class ProbeFailure:
    """A provider Event recording failed probes: which Event, which remote pod and container,
    which probe, how many times."""

    event_uid: str
    pod: str
    pod_uid: str
    container: str
    probe_type: str
    count: int


def probe_failure(event: JSON) -> ProbeFailure | None:
    """What a provider Event says of a failed probe, or None when it says nothing of one: the
    kubelet records `<Type> probe failed: <output>` with reason `Unhealthy` about the container
    (`spec.containers{name}`). Errored probes (`... probe errored ...`) are not failures: the
    kubelet throws their result away and counts nothing."""
    if event.get("reason") != UNHEALTHY or not _from_kubelet(event):
        return None
    message = str(event.get("message") or "").removeprefix(_COMBINED)
    probe_type = message.split(" ", 1)[0]
    if probe_type not in PROBE_FIELDS or not message.startswith(f"{probe_type} probe failed"):
        return None
    involved = event.get("involvedObject") or {}
    container = _CONTAINER_FIELD_PATH.fullmatch(str(involved.get("fieldPath") or ""))
    if involved.get("kind") != "Pod" or container is None:
        return None
    return ProbeFailure(
        event_uid=str((event.get("metadata") or {}).get("uid") or ""),
        pod=str(involved.get("name") or ""),
        pod_uid=str(involved.get("uid") or ""),
        container=container.group(1),
        probe_type=probe_type,
        count=_times(event),
    )


def _from_kubelet(event: JSON) -> bool:
    source = (event.get("source") or {}).get("component")
    return "kubelet" in (source, event.get("reportingComponent"))


def _times(event: JSON) -> int:
    """How many times an Event happened: `count`, or its series' (events.k8s.io), at least 1."""
    counts = [event.get("count"), (event.get("series") or {}).get("count")]
    valid = [c for c in counts if isinstance(c, int) and not isinstance(c, bool) and c > 0]
    return max(valid, default=1)


ProbeKey = tuple[str, str, str, str, str]  # namespace, pod, pod uid, container, probe type


@dataclass
class ProbeCounters:
    """Failed-probe counters per container probe, each only ever rising: an Event adds what
    its count grew by since it was last seen, so an Event that expires (or a provider that
    lowers a count) takes nothing back."""

    failed: dict[ProbeKey, int] = field(default_factory=dict)
    # (remote namespace, Event uid) -> the count already added
    _added: dict[tuple[str, str], int] = field(default_factory=dict)

    def update(
        self,
        pods: list[ProbedPod],
        failures: dict[str, list[ProbeFailure]],
    ) -> None:
        """Advances the counters with the failures listed in each remote namespace that
        answered (`failures`), keeps those of namespaces that did not as they were, and forgets
        the probes of pods no longer offloaded."""
        wanted: dict[ProbeKey, None] = {}
        running: dict[tuple[str, str, str], ProbedPod] = {}
        for pod in pods:
            for container, probe_type in sorted(pod.probes):
                wanted[(pod.namespace, pod.name, pod.uid, container, probe_type)] = None
            if pod.remote_uid:
                running[(pod.remote_namespace, pod.name, pod.remote_uid)] = pod
        self.failed = {key: self.failed.get(key, 0) for key in wanted}
        for remote_namespace, listed in failures.items():
            seen = set()
            for failure in listed:
                event = (remote_namespace, failure.event_uid)
                seen.add(event)
                about = running.get((remote_namespace, failure.pod, failure.pod_uid))
                if about is None:
                    continue  # another pod's, an earlier remote pod's, or one not cached yet
                key = (
                    about.namespace,
                    about.name,
                    about.uid,
                    failure.container,
                    failure.probe_type,
                )
                if key not in self.failed:
                    continue  # a probe the local pod does not declare
                before = self._added.get(event, 0)
                self._added[event] = failure.count
                self.failed[key] += max(failure.count - before, 0)
            for event in [e for e in self._added if e[0] == remote_namespace and e not in seen]:
                del self._added[event]
        offloaded_to = {pod.remote_namespace for pod in pods}
        for event in [e for e in self._added if e[0] not in offloaded_to]:
            del self._added[event]


def render_probe_metrics(counters: ProbeCounters) -> str:
    """The kubelet's `/metrics/probes` in the Prometheus text format, its labels in its order."""
    name = "prober_probe_total"
    lines = [
        f"# HELP {name} [BETA] Cumulative number of a liveness, readiness or startup probe "
        "for a container by result.",
        f"# TYPE {name} counter",
    ]
    for (namespace, pod, uid, container, probe_type), value in sorted(counters.failed.items()):
        labels = ",".join(
            f'{k}="{escape_label_value(v)}"'
            for k, v in (
                ("container", container),
                ("namespace", namespace),
                ("pod", pod),
                ("pod_uid", uid),
                ("probe_type", probe_type),
                ("result", "failed"),
            )
        )
        lines.append(f"{name}{{{labels}}} {value}")
    return "\n".join(lines) + "\n"


class ProbeResults:
    """Lists the provider kubelet's `Unhealthy` Events, one list per twin namespace, when asked
    (a scrape), and keeps the counters."""

    def __init__(
        self, provider: Callable[[], KubeClient | None], offloaded: Callable[[], list[ProbedPod]]
    ) -> None:
        self.provider = provider
        self.offloaded = offloaded
        self.counters = ProbeCounters()
        self._lock = asyncio.Lock()
        self._outages = NamespaceOutages(
            log, "cannot read the offloaded pods' probe Events from the provider"
        )

    async def refresh(self) -> ProbeCounters:
        async with self._lock:
            pods = self.offloaded()
            client = self.provider()
            failures: dict[str, list[ProbeFailure]] = {}
            if client is not None:
                for remote_namespace in sorted({p.remote_namespace for p in pods if p.probes}):
                    listed = await self._fetch(client, remote_namespace)
                    if listed is not None:
                        failures[remote_namespace] = listed
            self.counters.update(pods, failures)
            return self.counters

    async def _fetch(self, client: KubeClient, remote_namespace: str) -> list[ProbeFailure] | None:
        try:
            items, _ = await client.list_all(
                f"/api/v1/namespaces/{remote_namespace}/events",
                {"fieldSelector": f"reason={UNHEALTHY},involvedObject.kind=Pod"},
            )
        except (ApiError, OSError, TimeoutError) as error:
            self._outages.failed(remote_namespace, error)
            return None
        self._outages.answered(remote_namespace)
        return [failure for item in items if (failure := probe_failure(item)) is not None]
