"""Event forging: the provider's Events about offloaded objects → Events at home."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from vk.api.constants import DESTINATION_LABEL, ORIGIN_LABEL, SKIP_REFLECTION_ANNOTATION
from vk.reflection.forge.events import (
    MAX_MESSAGE_CHARS,
    MAX_SHORT_FIELD_CHARS,
    REFLECTED_EVENT_KINDS,
    event_needs_update,
    forge_local_event,
    involved_local_name,
    involved_object_key,
    involved_remote_name,
    remote_event_as_read,
)

JSON = dict[str, Any]

HOME = "venice"
PROVIDER = "cool-firefly"
REMOTE_NAMESPACE = "demo-venice"
POD = "web-7c9f8d6b5-x2k4q"
LOCAL_POD_UID = "5f0c7a3e-9a51-4a43-8f0e-3b1f1b7d2c11"
REMOTE_POD_UID = "d41d8cd9-8f00-4b20-9e98-0998ecf8427e"
OURS = {ORIGIN_LABEL: HOME, DESTINATION_LABEL: PROVIDER}

LOCAL_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {
        "name": POD,
        "namespace": "demo",
        "uid": LOCAL_POD_UID,
        "resourceVersion": "48213",
        "labels": {"app": "web"},
    },
    "spec": {"nodeName": "cool-firefly"},
}
LOCAL_POD_REFERENCE = {
    "apiVersion": "v1",
    "kind": "Pod",
    "name": POD,
    "namespace": "demo",
    "uid": LOCAL_POD_UID,
}


def kubelet_event() -> JSON:
    """A repeated kubelet Event about an offloaded pod's container, as `kubectl get event -o
    json` shows it in the provider."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{POD}.1879c2e4a5b6c7d8",
            "namespace": REMOTE_NAMESPACE,
            "uid": "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            "resourceVersion": "9188",
            "creationTimestamp": "2026-11-22T13:00:05Z",
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": POD,
            "namespace": REMOTE_NAMESPACE,
            "uid": REMOTE_POD_UID,
            "resourceVersion": "9101",
            "fieldPath": "spec.containers{web}",
        },
        "reason": "BackOff",
        "message": 'Back-off pulling image "nginx:1.27"',
        "source": {"component": "kubelet", "host": "provider-worker-2"},
        "firstTimestamp": "2026-11-22T13:00:05Z",
        "lastTimestamp": "2026-11-22T13:02:40Z",
        "count": 7,
        "type": "Warning",
        "eventTime": None,
        "reportingComponent": "kubelet",
        "reportingInstance": "provider-worker-2",
    }


def scheduler_event() -> JSON:
    """The scheduler's Event (written through events.k8s.io) as core/v1 shows it."""
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{POD}.1879c2e4a0000001",
            "namespace": REMOTE_NAMESPACE,
            "uid": "1b2c3d4e-5f60-4b7c-9d8e-0f1a2b3c4d5e",
            "resourceVersion": "9102",
            "creationTimestamp": "2026-11-22T13:00:00Z",
        },
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": POD,
            "namespace": REMOTE_NAMESPACE,
            "uid": REMOTE_POD_UID,
            "resourceVersion": "9100",
        },
        "reason": "Scheduled",
        "message": f"Successfully assigned {REMOTE_NAMESPACE}/{POD} to provider-worker-2",
        "source": {},
        "firstTimestamp": None,
        "lastTimestamp": None,
        "type": "Normal",
        "eventTime": "2026-11-22T13:00:00.123456Z",
        "action": "Binding",
        "reportingComponent": "default-scheduler",
        "reportingInstance": "default-scheduler-provider-control-plane",
    }


def forge(remote_event: JSON, local_involved: JSON = LOCAL_POD) -> JSON:
    return forge_local_event(
        remote_event,
        local_namespace="demo",
        local_involved=local_involved,
        local_cluster_id=HOME,
        remote_cluster_id=PROVIDER,
    )


# --- Which Events --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("api_version", "kind", "name", "local_name"),
    [
        pytest.param("v1", "Pod", POD, POD, id="pod"),
        pytest.param("v1", "ConfigMap", "kube-root-ca.crt.venic", "kube-root-ca.crt", id="root-ca"),
        pytest.param("v1", "ConfigMap", "web-config", "web-config", id="configmap"),
        pytest.param("v1", "Secret", "db-credentials", "db-credentials", id="secret"),
        pytest.param("v1", "Service", "web", "web", id="service"),
        pytest.param("networking.k8s.io/v1", "Ingress", "web", "web", id="ingress"),
        pytest.param("v1", "PersistentVolumeClaim", "data-db-0", "data-db-0", id="claim"),
        pytest.param(None, "Pod", POD, POD, id="no-api-version"),
        pytest.param("apps/v1", "ReplicaSet", "web-7c9f8d6b5", None, id="provider-replicaset"),
        pytest.param("v1", "Node", "provider-worker-2", None, id="node"),
        pytest.param("discovery.k8s.io/v1", "EndpointSlice", "web-abcde", None, id="endpoints"),
        pytest.param("serving.knative.dev/v1", "Service", "web", None, id="other-group-service"),
    ],
)
def test_only_events_about_reflected_objects_have_a_local_object(
    api_version: str | None, kind: str, name: str, local_name: str | None
) -> None:
    event = kubelet_event()
    involved = {"kind": kind, "name": name, "namespace": REMOTE_NAMESPACE}
    if api_version is not None:
        involved["apiVersion"] = api_version
    event["involvedObject"] = involved
    assert involved_local_name(event, HOME) == local_name


def test_reflected_kinds_are_those_vk_puts_in_the_provider() -> None:
    assert {
        "Pod",
        "ConfigMap",
        "Secret",
        "Service",
        "Ingress",
        "PersistentVolumeClaim",
    } == REFLECTED_EVENT_KINDS


# --- Forging -------------------------------------------------------------------------------


def test_kubelet_event_is_copied_about_the_local_pod() -> None:
    assert forge(kubelet_event()) == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{POD}.1879c2e4a5b6c7d8",
            "namespace": "demo",
            "labels": OURS,
        },
        "involvedObject": {**LOCAL_POD_REFERENCE, "fieldPath": "spec.containers{web}"},
        "reason": "BackOff",
        "message": 'Back-off pulling image "nginx:1.27"',
        "source": {"component": "kubelet (remote)", "host": "provider-worker-2"},
        "firstTimestamp": "2026-11-22T13:00:05Z",
        "lastTimestamp": "2026-11-22T13:02:40Z",
        "count": 7,
        "type": "Warning",
    }


def test_scheduler_event_becomes_a_core_event_timed_to_the_second() -> None:
    assert forge(scheduler_event()) == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {
            "name": f"{POD}.1879c2e4a0000001",
            "namespace": "demo",
            "labels": OURS,
        },
        "involvedObject": LOCAL_POD_REFERENCE,
        "reason": "Scheduled",
        "message": f"Successfully assigned {REMOTE_NAMESPACE}/{POD} to provider-worker-2",
        "source": {"component": "default-scheduler (remote)"},
        "firstTimestamp": "2026-11-22T13:00:00Z",
        "lastTimestamp": "2026-11-22T13:00:00Z",
        "count": 1,
        "type": "Normal",
    }


def test_repeated_scheduler_event_counts_its_series() -> None:
    event = scheduler_event()
    event.update(
        reason="FailedScheduling",
        message="0/3 nodes are available: 3 Insufficient memory.",
        type="Warning",
        action="Scheduling",
        series={"count": 4, "lastObservedTime": "2026-11-22T13:05:00.654321Z"},
    )
    forged = forge(event)
    assert (forged["count"], forged["firstTimestamp"], forged["lastTimestamp"]) == (
        4,
        "2026-11-22T13:00:00Z",
        "2026-11-22T13:05:00Z",
    )


@pytest.mark.parametrize(
    "field",
    ["eventTime", "series", "action", "related", "reportingComponent", "reportingInstance"],
)
def test_local_event_carries_none_of_the_new_event_fields(field: str) -> None:
    event = scheduler_event()
    event["series"] = {"count": 2, "lastObservedTime": "2026-11-22T13:01:00.000001Z"}
    event["related"] = {"apiVersion": "v1", "kind": "Node", "name": "provider-worker-2"}
    forged = forge(event)
    assert field not in forged
    assert "reportingController" not in forged


@pytest.mark.parametrize(
    ("source", "reporting", "component"),
    [
        pytest.param({"component": "kubelet"}, {}, "kubelet (remote)", id="source"),
        pytest.param(
            {"component": "kubelet"},
            {"reportingComponent": "other"},
            "kubelet (remote)",
            id="source-wins",
        ),
        pytest.param(
            {}, {"reportingComponent": "default-scheduler"}, "default-scheduler (remote)", id="core"
        ),
        pytest.param(
            {},
            {"reportingController": "kueue.x-k8s.io"},
            "kueue.x-k8s.io (remote)",
            id="events-api",
        ),
        pytest.param({}, {}, "(remote)", id="nobody"),
    ],
)
def test_source_says_the_event_comes_from_the_provider(
    source: JSON, reporting: JSON, component: str
) -> None:
    event = scheduler_event()
    del event["reportingComponent"]
    event.update(source=source, **reporting)
    assert forge(event)["source"] == {"component": component}


@pytest.mark.parametrize(
    ("event_time", "expected"),
    [
        pytest.param("2026-11-22T13:00:00.123456Z", "2026-11-22T13:00:00Z", id="micro"),
        pytest.param("2026-11-22T13:00:00.999999Z", "2026-11-22T13:00:00Z", id="truncated"),
        pytest.param("2026-11-22T13:00:00Z", "2026-11-22T13:00:00Z", id="whole-second"),
        pytest.param("2026-11-22T13:00:00.5+01:00", "2026-11-22T13:00:00+01:00", id="offset"),
    ],
)
def test_event_time_is_truncated_to_the_second(event_time: str, expected: str) -> None:
    event = scheduler_event()
    event["eventTime"] = event_time
    forged = forge(event)
    assert (forged["firstTimestamp"], forged["lastTimestamp"]) == (expected, expected)


def test_event_about_the_root_ca_names_the_local_configmap() -> None:
    event = kubelet_event()
    event["involvedObject"] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "kube-root-ca.crt.venic",
        "namespace": REMOTE_NAMESPACE,
        "uid": "f00dfeed-0000-4000-8000-000000000001",
    }
    local_ca = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "kube-root-ca.crt",
            "namespace": "demo",
            "uid": "0e6bf1f4-65a3-4c69-9d43-1f3a4b2f9a07",
        },
    }
    assert forge(event, local_ca)["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "name": "kube-root-ca.crt",
        "namespace": "demo",
        "uid": "0e6bf1f4-65a3-4c69-9d43-1f3a4b2f9a07",
    }


def test_forging_leaves_the_remote_event_alone() -> None:
    event = kubelet_event()
    forge(event)["involvedObject"]["name"] = "other"
    assert event == kubelet_event()


# --- Drift ---------------------------------------------------------------------------------


def as_home_returns(forged: JSON) -> JSON:
    stored = copy.deepcopy(forged)
    stored["metadata"].update(
        uid="aa11bb22-cc33-4d44-8e55-ff6677889900",
        resourceVersion="48400",
        creationTimestamp="2026-11-22T13:00:06Z",
    )
    stored["eventTime"] = None
    stored["reportingComponent"] = ""
    stored["reportingInstance"] = ""
    return stored


def _repeated(event: JSON) -> None:
    event.update(count=8, lastTimestamp="2026-11-22T13:07:40Z")


def _new_message(event: JSON) -> None:
    event["message"] = 'Failed to pull image "nginx:1.27": not found'


def _new_type(event: JSON) -> None:
    event["type"] = "Normal"


def _same(event: JSON) -> None:
    pass


@pytest.mark.parametrize(
    ("change", "needs_update"),
    [
        pytest.param(_same, False, id="unchanged"),
        pytest.param(_repeated, True, id="repeated"),
        pytest.param(_new_message, True, id="message"),
        pytest.param(_new_type, True, id="type"),
    ],
)
def test_local_event_follows_the_remote_one(
    change: Callable[[JSON], None], needs_update: bool
) -> None:
    current = as_home_returns(forge(kubelet_event()))
    remote = kubelet_event()
    change(remote)
    assert event_needs_update(forge(remote), current) is needs_update


def test_local_event_with_changed_labels_needs_update() -> None:
    desired = forge(kubelet_event())
    current = as_home_returns(desired)
    current["metadata"]["labels"] = {ORIGIN_LABEL: HOME}
    assert event_needs_update(desired, current)


@pytest.mark.parametrize("remote_event", [kubelet_event(), scheduler_event()])
def test_what_a_cache_keeps_of_a_provider_event_is_all_the_forge_reads(remote_event: JSON) -> None:
    kept = remote_event_as_read(copy.deepcopy(remote_event))
    assert forge(kept) == forge(remote_event)
    assert involved_local_name(kept, HOME) == involved_local_name(remote_event, HOME)
    assert "reportingInstance" not in kept
    assert "creationTimestamp" not in kept["metadata"]


def test_a_provider_event_is_kept_no_longer_than_an_event_may_be_copied_home() -> None:
    """A provider writes its Events as it likes: what a virtual kubelet holds of one, and copies
    home, is bounded whatever it wrote."""
    hostile = kubelet_event()
    hostile["message"] = "m" * 1_000_000
    hostile["reason"] = "r" * 10_000
    hostile["reportingController"] = "c" * 10_000
    hostile["source"] = {"component": "k" * 10_000, "host": "h", "junk": "j" * 10_000}
    hostile["metadata"]["annotations"] = {
        SKIP_REFLECTION_ANNOTATION: "true",
        "padding": "p" * 1_000_000,
    }
    hostile["metadata"]["labels"] = {"padding": "p" * 60}
    hostile["involvedObject"]["fieldPath"] = "f" * 100_000
    hostile["involvedObject"]["resourceVersion"] = ["not", "a", "string"]
    hostile["type"] = "t" * 10_000
    hostile["lastTimestamp"] = "2" * 10_000
    hostile["count"] = ["c"] * 100_000
    hostile["series"] = {"count": 3, "lastObservedTime": "2026-11-27T06:00:00.000001Z", "x": "y"}
    hostile["metadata"]["annotations"][SKIP_REFLECTION_ANNOTATION] = "true" + "e" * 10_000
    hostile["managedFields"] = [{"padding": "p" * 100_000}]
    kept = remote_event_as_read(hostile)
    assert len(kept["message"]) == MAX_MESSAGE_CHARS
    assert len(kept["reason"]) == len(kept["reportingController"]) == MAX_SHORT_FIELD_CHARS
    assert kept["source"] == {"component": "k" * MAX_SHORT_FIELD_CHARS, "host": "h"}
    assert kept["metadata"]["annotations"] == {
        SKIP_REFLECTION_ANNOTATION: ("true" + "e" * 10_000)[:MAX_SHORT_FIELD_CHARS]
    }
    assert len(kept["type"]) == MAX_SHORT_FIELD_CHARS
    assert "lastTimestamp" not in kept
    assert "count" not in kept
    assert kept["series"] == {"count": 3, "lastObservedTime": "2026-11-27T06:00:00.000001Z"}
    assert "labels" not in kept["metadata"]
    assert "managedFields" not in kept
    assert set(kept["involvedObject"]) == {"apiVersion", "kind", "name", "uid"}
    assert len(repr(kept)) < 2 * MAX_MESSAGE_CHARS + 5 * MAX_SHORT_FIELD_CHARS + 1024
    forged = forge(kept)
    assert len(forged["message"]) == MAX_MESSAGE_CHARS
    assert "fieldPath" not in forged["involvedObject"]


@pytest.mark.parametrize(
    "involved",
    [
        None,
        "a string",
        {"kind": ["Pod"], "name": POD},
        {"kind": "Pod", "name": {"not": "a name"}},
        {"kind": "Pod", "apiVersion": 1, "name": ""},
        {"kind": "Namespace", "name": "demo"},
    ],
)
def test_a_provider_event_about_nothing_vk_reflects_names_no_object(involved: Any) -> None:
    remote_event = {**kubelet_event(), "involvedObject": involved}
    kept = remote_event_as_read(remote_event)
    assert involved_remote_name(kept) is None
    assert involved_local_name(kept, HOME) is None


def test_the_events_about_one_object_are_found_by_its_kind_and_name() -> None:
    assert involved_object_key(kubelet_event()) == f"Pod/{POD}"
    assert involved_object_key(scheduler_event()) == involved_object_key(kubelet_event())


def test_a_provider_event_of_the_wrong_shapes_is_kept_as_one_the_forge_can_read() -> None:
    """Every field of another type than the API's is left out: the forge of the local Event
    never fails on what a provider wrote (a reconcile failing on it would be retried for ever)."""
    odd = {
        **kubelet_event(),
        "source": "a string",
        "series": ["a", "list"],
        "count": "many",
        "firstTimestamp": {"a": "map"},
        "message": 42,
    }
    kept = remote_event_as_read(odd)
    assert kept["source"] == {}
    assert kept["series"] == {}
    assert "count" not in kept
    assert "firstTimestamp" not in kept
    assert "message" not in kept
    forged = forge(kept)
    assert forged["count"] == 1
    assert forged["source"] == {"component": "kubelet (remote)"}
