"""The offloaded pods' `/metrics/probes`: failed probes counted from the provider kubelet's
`Unhealthy` Events, only for probes the local pod declares, never taken back."""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from vk.kubelet.probes import (
    ProbeCounters,
    ProbedPod,
    ProbeFailure,
    probe_failure,
    probed_pod,
    render_probe_metrics,
)

JSON = dict[str, Any]


def kubelet_event(
    message: str = "Readiness probe failed: HTTP probe failed with statuscode: 503",
    *,
    uid: str = "event-1",
    count: int | None = 3,
    field_path: str = "spec.containers{app}",
    pod_uid: str = "remote-uid-1",
    **overrides: Any,
) -> JSON:
    """An Event as the provider's kubelet records a failed probe."""
    event: JSON = {
        "metadata": {"name": "web-1.17f", "namespace": "shop-venice", "uid": uid},
        "involvedObject": {
            "kind": "Pod",
            "namespace": "shop-venice",
            "name": "web-1",
            "uid": pod_uid,
            "fieldPath": field_path,
        },
        "reason": "Unhealthy",
        "message": message,
        "source": {"component": "kubelet", "host": "node-a"},
        "type": "Warning",
        "count": count,
    }
    event.update(overrides)
    return event


def test_a_failed_probe_event_names_its_pod_container_probe_and_count() -> None:
    assert probe_failure(kubelet_event()) == ProbeFailure(
        event_uid="event-1",
        pod="web-1",
        pod_uid="remote-uid-1",
        container="app",
        probe_type="Readiness",
        count=3,
    )


@pytest.mark.parametrize(
    ("message", "probe_type"),
    [
        ("Liveness probe failed: dial tcp 10.0.0.1:80: connect: connection refused", "Liveness"),
        ("Startup probe failed: command exited 1", "Startup"),
        ("(combined from similar events): Readiness probe failed: timeout", "Readiness"),
    ],
)
def test_each_probe_type_and_the_recorders_combined_events(message: str, probe_type: str) -> None:
    failure = probe_failure(kubelet_event(message))
    assert failure is not None
    assert failure.probe_type == probe_type


def test_a_sidecars_probe_is_about_its_init_container_entry() -> None:
    failure = probe_failure(kubelet_event(field_path="spec.initContainers{proxy}"))
    assert failure is not None
    assert failure.container == "proxy"


@pytest.mark.parametrize(
    "event",
    [
        # Errored probes: the kubelet throws the result away and counts nothing.
        kubelet_event("Readiness probe errored and resulted in unknown state: rpc error"),
        kubelet_event("Readiness probe warning: redirect to another host"),
        kubelet_event("Gossip probe failed: made up"),
        kubelet_event("readiness probe failed: lower case is not the kubelet's"),
        kubelet_event(reason="BackOff"),
        kubelet_event(source={"component": "someone-else"}),
        kubelet_event(field_path=""),
        kubelet_event(field_path="spec.containers[0]"),
        kubelet_event(field_path="spec.containers{app}.extra"),
        kubelet_event(involvedObject={"kind": "Node", "name": "node-a"}),
        kubelet_event(message=None),
    ],
)
def test_events_that_record_no_failed_probe(event: JSON) -> None:
    assert probe_failure(event) is None


def test_the_new_events_api_reporting_component_counts_as_the_kubelet() -> None:
    event = kubelet_event(source={}, reportingComponent="kubelet", count=None)
    event["series"] = {"count": 7}
    failure = probe_failure(event)
    assert failure is not None
    assert failure.count == 7


@pytest.mark.parametrize("count", [None, 0, -5, True, "many"])
def test_a_count_that_is_no_positive_integer_is_one_occurrence(count: Any) -> None:
    failure = probe_failure(kubelet_event(count=count))
    assert failure is not None
    assert failure.count == 1


def local_pod(**probes: list[str]) -> JSON:
    """A local pod whose containers (`app`, and a sidecar `proxy`) declare `probes`."""
    fields = {"Liveness": "livenessProbe", "Readiness": "readinessProbe", "Startup": "startupProbe"}
    return {
        "metadata": {"namespace": "shop", "name": "web-1", "uid": "local-uid-1"},
        "spec": {
            "containers": [
                {"name": "app", **{fields[t]: {"tcpSocket": {"port": 80}} for t in probes["app"]}}
            ],
            "initContainers": [
                {
                    "name": "proxy",
                    "restartPolicy": "Always",
                    **{fields[t]: {"exec": {"command": ["true"]}} for t in probes["proxy"]},
                }
            ],
        },
    }


POD = probed_pod(
    local_pod(app=["Readiness", "Liveness"], proxy=["Startup"]), "shop-venice", "remote-uid-1"
)


def test_the_probes_a_local_pod_declares() -> None:
    assert (
        ProbedPod(
            namespace="shop",
            name="web-1",
            uid="local-uid-1",
            remote_namespace="shop-venice",
            remote_uid="remote-uid-1",
            probes=frozenset({("app", "Readiness"), ("app", "Liveness"), ("proxy", "Startup")}),
        )
        == POD
    )


def failed(counters: ProbeCounters, container: str, probe_type: str) -> int:
    return counters.failed[("shop", "web-1", "local-uid-1", container, probe_type)]


def failures(*events: JSON) -> dict[str, list[ProbeFailure]]:
    return {"shop-venice": [f for e in events if (f := probe_failure(e)) is not None]}


def test_every_declared_probe_starts_at_zero_failed() -> None:
    counters = ProbeCounters()
    counters.update([POD], failures())
    assert counters.failed == {
        ("shop", "web-1", "local-uid-1", "app", "Liveness"): 0,
        ("shop", "web-1", "local-uid-1", "app", "Readiness"): 0,
        ("shop", "web-1", "local-uid-1", "proxy", "Startup"): 0,
    }


def test_an_event_adds_its_count_and_then_what_its_count_grows_by() -> None:
    counters = ProbeCounters()
    counters.update([POD], failures(kubelet_event(count=3)))
    assert failed(counters, "app", "Readiness") == 3
    counters.update([POD], failures(kubelet_event(count=3)))
    assert failed(counters, "app", "Readiness") == 3
    counters.update(
        [POD],
        failures(
            kubelet_event(count=5),
            kubelet_event("Liveness probe failed: refused", uid="event-2", count=1),
        ),
    )
    assert failed(counters, "app", "Readiness") == 5
    assert failed(counters, "app", "Liveness") == 1


def test_an_expired_or_lowered_event_takes_nothing_back() -> None:
    counters = ProbeCounters()
    counters.update([POD], failures(kubelet_event(count=4)))
    counters.update([POD], failures())  # the Event expired
    assert failed(counters, "app", "Readiness") == 4
    counters.update([POD], failures(kubelet_event(uid="event-3", count=2)))
    assert failed(counters, "app", "Readiness") == 6
    counters.update([POD], failures(kubelet_event(uid="event-3", count=1)))  # lowered
    assert failed(counters, "app", "Readiness") == 6
    counters.update([POD], failures(kubelet_event(uid="event-3", count=2)))
    assert failed(counters, "app", "Readiness") == 7


def test_a_provider_cannot_invent_probes_or_pin_failures_on_another_pod() -> None:
    """Events about a probe the local pod does not declare, a container it does not have, an
    earlier remote pod of that name, or another pod, count for nothing."""
    counters = ProbeCounters()
    counters.update(
        [POD],
        failures(
            kubelet_event("Startup probe failed: x", uid="a", count=9),
            kubelet_event(field_path="spec.containers{miner}", uid="b", count=9),
            kubelet_event(pod_uid="an-earlier-remote-pod", uid="c", count=9),
            kubelet_event(
                involvedObject={
                    "kind": "Pod",
                    "name": "web-2",
                    "uid": "remote-uid-1",
                    "fieldPath": "spec.containers{app}",
                },
                uid="d",
                count=9,
            ),
        ),
    )
    assert set(counters.failed.values()) == {0}
    assert len(counters.failed) == 3


def test_an_event_seen_before_its_remote_pod_was_cached_counts_once_it_is() -> None:
    counters = ProbeCounters()
    uncached = probed_pod(local_pod(app=["Readiness"], proxy=[]), "shop-venice", "")
    counters.update([uncached], failures(kubelet_event(count=2)))
    assert failed(counters, "app", "Readiness") == 0
    cached = probed_pod(local_pod(app=["Readiness"], proxy=[]), "shop-venice", "remote-uid-1")
    counters.update([cached], failures(kubelet_event(count=2)))
    assert failed(counters, "app", "Readiness") == 2


def test_a_namespace_that_did_not_answer_keeps_its_counts_and_a_pod_gone_is_forgotten() -> None:
    counters = ProbeCounters()
    counters.update([POD], failures(kubelet_event(count=2)))
    counters.update([POD], {})  # the provider did not answer: nothing listed
    counters.update([POD], failures(kubelet_event(count=2)))
    assert failed(counters, "app", "Readiness") == 2  # not added twice
    counters.update([], failures(kubelet_event(count=2)))
    assert counters.failed == {}


def test_the_rendering_is_the_kubelets_family_with_its_labels() -> None:
    counters = ProbeCounters()
    pod = probed_pod(local_pod(app=["Readiness"], proxy=[]), "shop-venice", "remote-uid-1")
    counters.update([pod], failures(kubelet_event(count=3)))
    text = render_probe_metrics(counters)
    families = list(text_string_to_metric_families(text))
    assert [(f.name, f.type) for f in families] == [("prober_probe", "counter")]
    [sample] = families[0].samples
    assert sample.name == "prober_probe_total"
    assert sample.labels == {
        "container": "app",
        "namespace": "shop",
        "pod": "web-1",
        "pod_uid": "local-uid-1",
        "probe_type": "Readiness",
        "result": "failed",
    }
    assert sample.value == 3
    assert 'container="app",namespace="shop",pod="web-1",pod_uid="local-uid-1"' in text


def test_no_offloaded_probes_render_an_empty_family() -> None:
    families = list(text_string_to_metric_families(render_probe_metrics(ProbeCounters())))
    assert [f.samples for f in families] == [[]]
