"""Marks the pods of a virtual node that is not Ready `liqo.io/remote-unavailable=true`, and
unmarks them once it is Ready again (Liqo's pod-status controller, on the consumer).

A virtual node turns NotReady when its virtual kubelet finds the provider unreachable (or
stops renewing the node's Lease). Its pods must not stay Ready meanwhile: home's Services would
send traffic to them. The virtual kubelet reports a marked pod not Ready (the status forge) and
leaves its remote copy alone; unmarking it makes the virtual kubelet report the provider's
status again, which it would otherwise keep from before the outage.

Only readiness transitions cost anything: a virtual node's pods are listed (by node, and by
whether they carry the mark) when its Ready condition changes, and again every
`RECHECK_SECONDS` while it is not Ready, for pods bound to it meanwhile. No cache of pods.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import structlog

from vk.api.constants import (
    POD_TERMINAL_PHASES,
    REMOTE_UNAVAILABLE_LABEL,
    TYPE_LABEL,
    TYPE_VIRTUAL_NODE,
)
from vk.controllers.virtualnodes import node_ready
from vk.kube.client import JSON, KubeClient, NotFound, listed_object_path, resource_path
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.informer import shared_informer

log = structlog.get_logger("vk.controllers.offloaded_pod_availability")

RECHECK_SECONDS = 30.0
# Nodes brought in line at once, each by its own worker: one provider's outage, ten thousand
# pods to mark, must not hold back the marking of another's (its pods Ready in Services
# meanwhile).
WORKERS = 4
# Pods of one node patched at once: its pods go on taking traffic until they are marked.
PATCHES_AT_ONCE = 16
MARKED = f"{REMOTE_UNAVAILABLE_LABEL}=true"


def availability_patch(pod: Mapping[str, Any], available: bool) -> JSON | None:
    """The merge patch marking (`available` False) or unmarking a pod, None if it is already
    as it should be. A finished pod is left alone: nothing runs that could be unavailable."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    marked = labels.get(REMOTE_UNAVAILABLE_LABEL) == "true"
    if available == (not marked):
        return None
    if not available and (pod.get("status") or {}).get("phase") in POD_TERMINAL_PHASES:
        return None
    return {"metadata": {"labels": {REMOTE_UNAVAILABLE_LABEL: None if available else "true"}}}


class OffloadedPodAvailability(Reconciler):
    name = "offloaded-pod-availability"

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.nodes = shared_informer(
            client, "v1", "nodes", label_selector=f"{TYPE_LABEL}={TYPE_VIRTUAL_NODE}"
        )
        self.controller = Controller(self, workers=WORKERS)
        # node -> readiness its pods were last brought in line with: a Node's status changes
        # every few seconds, its readiness seldom, and only a change lists its pods.
        self._done: dict[str, bool] = {}

    def _on_node(self, _: str, node: JSON, __: JSON | None) -> None:
        name = node["metadata"]["name"]
        if self._done.get(name) != node_ready(node):
            self.controller.enqueue(name)

    async def run(self) -> None:
        self.nodes.add_handler(self._on_node)
        await run_with_informers(self.controller, self.nodes)

    async def reconcile(self, key: str) -> Result:
        node = self.nodes.store.get(key)
        if node is None:
            # Gone: its pods are deleted or rebound by whoever deleted it.
            self._done.pop(key, None)
            return Result()
        ready = node_ready(node)
        # Ready: the marked ones are unmarked. Not Ready: the unmarked ones are marked.
        selector = MARKED if ready else f"{REMOTE_UNAVAILABLE_LABEL}!=true"
        params = {"fieldSelector": f"spec.nodeName={key}", "labelSelector": selector}
        changed = 0
        async for page, _ in self.client.list_pages(resource_path("v1", "pods"), params):
            patches = [(pod, patch) for pod in page if (patch := availability_patch(pod, ready))]
            for start in range(0, len(patches), PATCHES_AT_ONCE):
                done = await asyncio.gather(
                    *(
                        self._patch(pod, patch)
                        for pod, patch in patches[start : start + PATCHES_AT_ONCE]
                    ),
                    return_exceptions=True,  # each one's outcome taken, the first error raised
                )
                for outcome in done:
                    if isinstance(outcome, BaseException):
                        raise outcome
                changed += sum(done)  # type: ignore[arg-type]
        if changed:
            log.info(
                "offloaded pods marked" if not ready else "offloaded pods unmarked",
                node=key,
                pods=changed,
                label=REMOTE_UNAVAILABLE_LABEL,
            )
        self._done[key] = ready
        return Result() if ready else Result(requeue_after=RECHECK_SECONDS)

    async def _patch(self, pod: JSON, patch: JSON) -> bool:
        """Whether `pod` was patched (False: gone meanwhile)."""
        path = listed_object_path("v1", "pods", pod)
        try:
            await self.client.merge_patch(path, patch)
        except NotFound:
            return False
        return True
