"""Which offloaded pods the controller manager marks unavailable, and when."""

from __future__ import annotations

from typing import Any

import pytest

from vk.controllers.offloaded_pod_availability import availability_patch
from vk.controllers.virtualnodes import node_ready


def node(*conditions: tuple[str, str]) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": t, "status": s} for t, s in conditions]}}


@pytest.mark.parametrize(
    ("the_node", "ready"),
    [
        (node(("Ready", "True")), True),
        (node(("Ready", "False")), False),
        (node(("Ready", "Unknown")), False),
        (node(("MemoryPressure", "False")), False),
        ({}, False),
    ],
)
def test_only_a_true_ready_condition_is_ready(the_node: dict[str, Any], ready: bool) -> None:
    assert node_ready(the_node) is ready


def pod(marked: bool, phase: str = "Running") -> dict[str, Any]:
    labels = {"app": "web", **({"liqo.io/remote-unavailable": "true"} if marked else {})}
    return {"metadata": {"labels": labels}, "status": {"phase": phase}}


def test_a_running_pod_of_a_node_not_ready_is_marked() -> None:
    assert availability_patch(pod(marked=False), available=False) == {
        "metadata": {"labels": {"liqo.io/remote-unavailable": "true"}}
    }


def test_a_marked_pod_of_a_ready_node_is_unmarked() -> None:
    assert availability_patch(pod(marked=True), available=True) == {
        "metadata": {"labels": {"liqo.io/remote-unavailable": None}}
    }


@pytest.mark.parametrize(("marked", "available"), [(True, False), (False, True)])
def test_a_pod_already_as_it_should_be_is_not_written(marked: bool, available: bool) -> None:
    assert availability_patch(pod(marked=marked), available=available) is None


@pytest.mark.parametrize("phase", ["Succeeded", "Failed"])
def test_a_finished_pod_is_not_marked_but_is_unmarked(phase: str) -> None:
    assert availability_patch(pod(marked=False, phase=phase), available=False) is None
    assert availability_patch(pod(marked=True, phase=phase), available=True) is not None
