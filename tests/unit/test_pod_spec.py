"""The shape of a consumer's pod spec (a ShadowPod's `spec.pod`, free JSON to the API server)
that the provider's webhook and ShadowPod controller read: each problem named by its field."""

from __future__ import annotations

from typing import Any

import pytest

from vk.api.podspec import MAX_PROBLEMS_TOLD, describe_problems, pod_spec_problems
from vk.api.usage import pod_requests

JSON = dict[str, Any]
APP = {"name": "app", "image": "nginx"}


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param({"containers": [APP]}, id="one container"),
        pytest.param({}, id="nothing vk reads (the API server judges a pod without containers)"),
        pytest.param(
            {
                "containers": [
                    {**APP, "resources": {"requests": {"cpu": "1"}, "limits": {"cpu": "2"}}}
                ],
                "initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
                "ephemeralContainers": [{"name": "debugger"}],
                "tolerations": [{"key": "gpu", "operator": "Exists"}, {"operator": "Exists"}],
                "resources": {"requests": {"cpu": "1"}},
                "overhead": {"cpu": "10m"},
                "nodeName": "",
                "priorityClassName": "tenant",
                "schedulerName": "default-scheduler",
                "runtimeClassName": "liqo",
            },
            id="every field vk reads",
        ),
        pytest.param(
            {
                "containers": [{**APP, "resources": {"requests": None, "limits": None}}],
                "initContainers": None,
                "ephemeralContainers": None,
                "tolerations": [{"key": None}],
                "resources": None,
                "overhead": None,
                "priorityClassName": None,
            },
            id="null is a field left out, as Kubernetes reads it",
        ),
        pytest.param(
            {"containers": [{**APP, "image": 7, "ports": "http", "env": {"A": "1"}}]},
            id="what vk does not read is the API server's to judge",
        ),
    ],
)
def test_a_pod_spec_of_the_shape_vk_reads_has_no_problem(spec: JSON) -> None:
    assert pod_spec_problems(spec) == []


@pytest.mark.parametrize(
    ("spec", "problems"),
    [
        (None, ["spec.pod: must be an object, not null"]),
        ([APP], ["spec.pod: must be an object, not a list"]),
        (
            {"containers": [APP, {"image": "nginx"}]},
            ["spec.pod.containers[1].name: required"],
        ),
        ({"containers": [{"name": ""}]}, ["spec.pod.containers[0].name: required"]),
        (
            {"containers": [{"name": ["app"]}]},
            ["spec.pod.containers[0].name: must be a string, not a list"],
        ),
        ({"containers": {"app": APP}}, ["spec.pod.containers: must be a list, not an object"]),
        ({"containers": "app"}, ["spec.pod.containers: must be a list, not a string"]),
        ({"containers": [APP, "app"]}, ["spec.pod.containers[1]: must be an object, not a string"]),
        (
            {"containers": [APP], "initContainers": [{"image": "busybox"}]},
            ["spec.pod.initContainers[0].name: required"],
        ),
        (
            {"containers": [APP], "ephemeralContainers": [{"name": 1}]},
            ["spec.pod.ephemeralContainers[0].name: must be a string, not a number"],
        ),
        (
            {"containers": [{**APP, "resources": "lots"}]},
            ["spec.pod.containers[0].resources: must be an object, not a string"],
        ),
        (
            {"containers": [{**APP, "resources": {"requests": ["cpu"]}}]},
            ["spec.pod.containers[0].resources.requests: must be an object, not a list"],
        ),
        (
            {"containers": [APP], "resources": {"limits": 4}},
            ["spec.pod.resources.limits: must be an object, not a number"],
        ),
        (
            {"containers": [APP], "overhead": "10m"},
            ["spec.pod.overhead: must be an object, not a string"],
        ),
        (
            {"containers": [APP], "tolerations": "gpu"},
            ["spec.pod.tolerations: must be a list, not a string"],
        ),
        (
            {"containers": [APP], "tolerations": [{"key": "gpu"}, True]},
            ["spec.pod.tolerations[1]: must be an object, not a boolean"],
        ),
        (
            {"containers": [APP], "tolerations": [{"key": ["gpu"]}]},
            ["spec.pod.tolerations[0].key: must be a string, not a list"],
        ),
        (
            {"containers": [APP], "priorityClassName": {"name": "high"}},
            ["spec.pod.priorityClassName: must be a string, not an object"],
        ),
        (
            {"containers": [APP], "schedulerName": ["default-scheduler"]},
            ["spec.pod.schedulerName: must be a string, not a list"],
        ),
        (
            {"containers": [{}, {"name": "b", "resources": []}], "runtimeClassName": 1},
            [
                "spec.pod.runtimeClassName: must be a string, not a number",
                "spec.pod.containers[0].name: required",
                "spec.pod.containers[1].resources: must be an object, not a list",
            ],
        ),
    ],
)
def test_a_pod_spec_vk_cannot_read_is_refused_naming_each_field(
    spec: Any, problems: list[str]
) -> None:
    assert pod_spec_problems(spec) == problems


def test_a_spec_with_a_thousand_problems_is_told_in_a_few() -> None:
    problems = pod_spec_problems({"containers": [{}] * 1000})
    assert len(problems) == 1000
    told = describe_problems(problems)
    assert told.count("name: required") == MAX_PROBLEMS_TOLD
    assert told.endswith(f"(and {1000 - MAX_PROBLEMS_TOLD} more)")
    assert describe_problems(problems[:1]) == "spec.pod.containers[0].name: required"


@pytest.mark.parametrize(
    ("spec", "asked"),
    [
        ({"containers": "app"}, {}),
        (
            {"containers": ["app", {"name": "a", "resources": {"requests": {"cpu": "1"}}}]},
            {"cpu": 1},
        ),
        ({"containers": [{"name": "a", "resources": "lots"}], "initContainers": {"a": 1}}, {}),
        ({"containers": [{"name": "a", "resources": {"requests": ["cpu"], "limits": 1}}]}, {}),
        ({"resources": "lots", "overhead": ["10m"]}, {}),
        ("a pod", {}),
    ],
)
def test_what_a_pod_asks_for_is_read_as_far_as_its_spec_is_well_formed(
    spec: Any, asked: JSON
) -> None:
    """A ShadowPod changed past the webhook (down) into one of another shape stops no Quota's
    recount: a part of another shape asks for nothing (its controller reports it)."""
    assert pod_requests({"spec": spec}) == asked
