"""Waiting for what vk's controllers do after a vkctl command: a ResourceSlice accepted, a
virtual node Ready, an object gone. Each wait polls until the command's one deadline
(`--timeout`), reports every change it sees (a drain can take minutes: never silence), and ends
in a `PeeringError` that says what to look at."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from vk.api.authentication import ResourceSlice
from vk.api.offloading import VirtualNode
from vk.cli.peering import PeeringError
from vk.cli.progress import Progress
from vk.controllers.provider_resourceslices import (
    ACCEPTED,
    AUTHENTICATION,
    DENIED,
    REASON_COUNT_EXCEEDED,
    REASON_RATE_LIMITED,
    RESOURCES,
)
from vk.controllers.replication import REASON_REFUSED, REPLICATOR
from vk.kube.client import JSON, ApiError, KubeClient, NotFound, resource_path

POLL_SECONDS = 1.0


@dataclass(frozen=True)
class Deadline:
    """When a command gives up: `within` seconds after it started."""

    within: float
    at: float

    @classmethod
    def after(cls, within: float) -> Deadline:
        return cls(within, time.monotonic() + within)

    def passed(self) -> bool:
        return time.monotonic() > self.at

    def remaining(self) -> float:
        """Seconds until it passes (negative once it has)."""
        return self.at - time.monotonic()


def condition_statuses(obj: Mapping[str, Any] | None) -> dict[str, str]:
    """The status of each condition type of an object (`Authentication: Accepted`)."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return {c.get("type", ""): c.get("status", "") for c in conditions}


def node_is_ready(node: Mapping[str, Any]) -> bool:
    return condition_statuses(node).get("Ready") == "True"


def granted_by_vk(resource_slice: Mapping[str, Any]) -> bool:
    """vk's controller grants the resources of the default class; other classes are granted
    by their own controller on the provider, if it runs."""
    return ((resource_slice.get("spec") or {}).get("class") or "default") == "default"


def slice_state(resource_slice: Mapping[str, Any]) -> str:
    """`Authentication Accepted, Resources pending`: what the provider said so far."""
    statuses = condition_statuses(resource_slice)
    return ", ".join(
        f"{kind} {statuses.get(kind) or 'pending'}" for kind in (AUTHENTICATION, RESOURCES)
    )


def virtual_node_state(virtual_node: Mapping[str, Any] | None) -> str:
    """`VirtualKubelet Running, Node Draining`: what the VirtualNode controller is doing."""
    if virtual_node is None:
        return "no VirtualNode yet"
    statuses = condition_statuses(virtual_node)
    if not statuses:
        return "VirtualNode not handled yet"
    return ", ".join(f"{kind} {status}" for kind, status in statuses.items())


def held_by(obj: Mapping[str, Any]) -> str:
    """`held by crdreplicator.liqo.io/finalizer`: what a deleted object still waits for."""
    finalizers = obj.get("metadata", {}).get("finalizers") or []
    return f"held by {', '.join(finalizers)}" if finalizers else ""


def denial(resource_slice: Mapping[str, Any]) -> str | None:
    """Why the provider denied the slice (`Resources ResourceSliceResourcesDenied: ...`)."""
    for condition in (resource_slice.get("status") or {}).get("conditions") or []:
        if condition.get("status") == DENIED:
            reason = condition.get("reason") or "no reason given"
            message = condition.get("message")
            said = f"{condition.get('type')} {reason}" + (f": {message}" if message else "")
            return printable(said)
    return None


def printable(text: str) -> str:
    """`text` from the other cluster as a terminal may show it: its control characters (an
    escape sequence would move the cursor, or rewrite what was printed) as `?`."""
    return "".join(c if c.isprintable() else "?" for c in text)


async def refusal(client: KubeClient, obj: Mapping[str, Any]) -> str | None:
    """Why the provider refused to store `obj`, a replicated object, as the replicator said
    last on it in an Event; None if it did not (or the Events cannot be read)."""
    metadata = obj.get("metadata") or {}
    selector = (
        f"involvedObject.uid={metadata.get('uid', '')},reason={REASON_REFUSED},source={REPLICATOR}"
    )
    try:
        said = await client.get(
            resource_path("v1", "events", namespace=metadata.get("namespace")),
            {"fieldSelector": selector},
        )
    except ApiError:
        return None
    latest = max(
        said.get("items") or [],
        key=lambda e: e.get("lastTimestamp") or e.get("eventTime") or "",
        default=None,
    )
    return None if latest is None else printable(str(latest.get("message") or ""))


def slice_path(namespace: str, name: str) -> str:
    return resource_path(
        ResourceSlice.group_version(), ResourceSlice.PLURAL, namespace=namespace, name=name
    )


def virtual_node_path(namespace: str, name: str | None = None) -> str:
    return resource_path(
        VirtualNode.group_version(), VirtualNode.PLURAL, namespace=namespace, name=name
    )


async def get_or_none(client: KubeClient, path: str) -> JSON | None:
    """The object at `path`, or None if there is none."""
    try:
        return await client.get(path)
    except NotFound:
        return None


async def wait_for_resource_slice(
    client: KubeClient, namespace: str, name: str, *, deadline: Deadline, progress: Progress
) -> JSON:
    """Until the provider has accepted the slice's identity and, for the default class, its
    resources; the slice as it is then."""
    reported = ""
    while True:
        current = await client.get(slice_path(namespace, name))
        why = denial(current)
        if why:
            if REASON_COUNT_EXCEEDED in why:
                advice = "it is answered on its own once there is room"
            elif REASON_RATE_LIMITED in why:
                advice = "it is answered on its own when its turn comes"
            else:
                advice = "ask its administrator, then delete the slice and create it again"
            raise PeeringError(
                f"the provider denied the ResourceSlice {namespace}/{name} ({why}): {advice}"
            )
        statuses = condition_statuses(current)
        if statuses.get(AUTHENTICATION) == ACCEPTED and (
            statuses.get(RESOURCES) == ACCEPTED or not granted_by_vk(current)
        ):
            return current
        state = slice_state(current)
        if not statuses and (refused := await refusal(client, current)):
            # Not stored there yet: the provider's word why (vk asks again on its own).
            state = f"{state}; {refused}"
        if state != reported:
            progress.info(f"ResourceSlice {name}: {state}")
            reported = state
        if deadline.passed():
            controller = (
                "is vk controller-manager running in both clusters (`vkctl info`)?"
                if granted_by_vk(current)
                else "does a controller for its class run on the provider?"
            )
            raise PeeringError(
                f"the ResourceSlice {namespace}/{name} was not accepted within "
                f"{deadline.within:.0f}s ({state}): {controller}"
            )
        await asyncio.sleep(POLL_SECONDS)


async def wait_for_node_ready(
    client: KubeClient, namespace: str, name: str, *, deadline: Deadline, progress: Progress
) -> None:
    """Until the Node of the VirtualNode `namespace/name` is Ready."""
    reported = ""
    while True:
        node = await get_or_none(client, resource_path("v1", "nodes", name=name))
        if node is not None and node_is_ready(node):
            return
        state = virtual_node_state(await get_or_none(client, virtual_node_path(namespace, name)))
        if node is not None:
            state = f"{state}; Node NotReady"
        if state != reported:
            progress.info(f"virtual node {name}: {state}")
            reported = state
        if deadline.passed():
            raise PeeringError(
                f"the node {name} was not Ready within {deadline.within:.0f}s ({state}): look "
                f"at `kubectl get virtualnodes.offloading.liqo.io -n {namespace} {name} -o yaml` "
                "(its conditions) and `vkctl info`"
            )
        await asyncio.sleep(POLL_SECONDS)


async def wait_until_gone(
    client: KubeClient,
    path: str,
    what: str,
    *,
    deadline: Deadline,
    progress: Progress,
    describe: Callable[[JSON], str] | None = None,
) -> None:
    """Until the object at `path` is gone, reporting `describe(it)` as it changes."""
    reported = ""
    while True:
        current = await get_or_none(client, path)
        if current is None:
            return
        state = describe(current) if describe else ""
        if state and state != reported:
            progress.info(f"{what}: {state}")
            reported = state
        if deadline.passed():
            raise PeeringError(
                f"{what} is still there after {deadline.within:.0f}s"
                + (f" ({state})" if state else "")
                + ": look at its finalizers and conditions (`kubectl get -o yaml`), then run "
                "the command again"
            )
        await asyncio.sleep(POLL_SECONDS)
