"""Which offloaded pods the controller manager marks unavailable, and when."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from vk.controllers.offloaded_pod_availability import (
    PATCHES_AT_ONCE,
    OffloadedPodAvailability,
    availability_patch,
)
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


class SlowHome:
    """Home's API server, where marking the pods of `slow` takes as long as the test likes."""

    name = "home"

    def __init__(self, slow: str, pods_of: dict[str, int]) -> None:
        self.slow, self.pods_of = slow, pods_of
        self.release = asyncio.Event()
        self.patched: dict[str, int] = {}
        self.at_once: dict[str, int] = {}  # patches in flight, by node
        self.most_at_once: dict[str, int] = {}

    async def list_pages(self, path: str, params: dict[str, str]) -> Any:
        node = params["fieldSelector"].removeprefix("spec.nodeName=")
        yield (
            [
                {"metadata": {"name": f"{node}-{i}", "namespace": "shop"}, "status": {}}
                for i in range(self.pods_of[node])
            ],
            "1",
        )

    async def merge_patch(self, path: str, patch: Any) -> Any:
        node = path.rsplit("/", 1)[1].rsplit("-", 1)[0]
        self.at_once[node] = self.at_once.get(node, 0) + 1
        self.most_at_once[node] = max(self.most_at_once.get(node, 0), self.at_once[node])
        try:
            if node == self.slow:
                await self.release.wait()
            else:
                await asyncio.sleep(0.001)
        finally:
            self.at_once[node] -= 1
        self.patched[node] = self.patched.get(node, 0) + 1
        return patch


async def test_one_nodes_pods_being_marked_do_not_hold_back_anothers() -> None:
    """One provider's outage, many pods to mark, held back the marking of another's: their
    pods stayed Ready in home's Services meanwhile."""
    home = SlowHome("naples", {"naples": 100, "venice": 40})
    availability = OffloadedPodAvailability(home)  # type: ignore[arg-type]
    for name in ("naples", "venice"):
        availability.nodes.store.upsert({"metadata": {"name": name}, **node(("Ready", "False"))})
    running = asyncio.create_task(availability.controller.run())
    try:
        availability.controller.enqueue("naples")
        availability.controller.enqueue("venice")
        async with asyncio.timeout(5):
            while home.patched.get("venice", 0) < 40:
                await asyncio.sleep(0.01)
        # A node's pods are marked several at once, never all of a page at once.
        assert home.most_at_once == {"naples": PATCHES_AT_ONCE, "venice": PATCHES_AT_ONCE}
        home.release.set()
        async with asyncio.timeout(5):
            while home.patched.get("naples", 0) < 100:
                await asyncio.sleep(0.01)
    finally:
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
