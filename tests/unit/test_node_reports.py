"""The node controller's Events: a provider problem found before the VirtualNode is in the
cache is still said, once, when it is (CI saw a bad kubeconfig go unreported that way)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from vk.kube.client import KubeClient
from vk.kube.informer import Informer
from vk.kube.kubeconfig import ClusterConnection
from vk.node.controller import NodeController, NodeOptions

VIRTUAL_NODE = {
    "apiVersion": "offloading.liqo.io/v1beta1",
    "kind": "VirtualNode",
    "metadata": {"name": "rome", "namespace": "liqo-tenant-rome", "uid": "u-1"},
    "spec": {"clusterID": "rome"},
}


class RecordedEvents:
    def __init__(self) -> None:
        self.reasons: list[tuple[str, str]] = []

    async def record(
        self, involved: dict[str, Any], event_type: str, reason: str, message: str
    ) -> None:
        self.reasons.append((involved["metadata"]["name"], reason))


def controller(events: RecordedEvents) -> NodeController:
    # Never contacted: only the ping loop runs, and its Events go to `events`.
    home = KubeClient(ClusterConnection(server="http://127.0.0.1:9"))
    return NodeController(
        home,
        NodeOptions(
            node_name="rome",
            node_ip="10.0.0.1",
            kubelet_port=10250,
            remote_cluster_id="rome",
            kubelet_version="v1.36.0",
            ping_interval=0.01,
        ),
        virtual_nodes=Informer(home, "offloading.liqo.io/v1beta1", "virtualnodes"),
        virtual_node_key="liqo-tenant-rome/rome",
        ping=lambda _: asyncio.sleep(0, "kubeconfig is not valid YAML"),
        events=events,  # type: ignore[arg-type]
    )


async def test_a_problem_found_before_the_virtual_node_is_cached_is_reported_once_it_is() -> None:
    events = RecordedEvents()
    node = controller(events)
    pinging = asyncio.create_task(node._ping_loop())
    try:
        await asyncio.sleep(0.05)  # several pings, all finding the problem
        assert events.reasons == []
        node.virtual_nodes.store.upsert(VIRTUAL_NODE)
        node.virtual_nodes.synced.set()
        async with asyncio.timeout(5):
            while not events.reasons:
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.05)  # and said once, not at every ping
        assert events.reasons == [("rome", "ProviderUnreachable")]
    finally:
        pinging.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pinging
        await node.home.close()
