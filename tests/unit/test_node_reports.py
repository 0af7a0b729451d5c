"""The node controller's Events and Node writes: a provider problem found before the
VirtualNode is in the cache is still said, once, when it is (CI saw a bad kubeconfig go
unreported that way); labels the API server would refuse are left off the Node and said; a
label an administrator set on the Node over one of ours stays theirs."""

from __future__ import annotations

import asyncio
import contextlib
import copy
from typing import Any

import pytest

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


class FakeNodeServer:
    """The API server as `sync` sees it before the provider answers: it applies the Node's
    metadata, patches its taints, and hands the Node out with its managedFields."""

    def __init__(self, node: dict[str, Any] | None = None) -> None:
        self.node = node
        self.applied: list[dict[str, str]] = []  # the labels of each metadata apply

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.applied.append(dict(body["metadata"]["labels"]))
        node = copy.deepcopy(self.node) or {"metadata": {"name": "rome", "labels": {}}}
        node["metadata"].update(uid="n-1", resourceVersion="1")
        node["metadata"]["labels"].update(body["metadata"]["labels"])
        return node

    async def get(self, path: str) -> dict[str, Any]:
        assert self.node is not None
        return copy.deepcopy(self.node)

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        return {"metadata": {"name": "rome", "uid": "n-1", "resourceVersion": "2"}}


def syncing(
    events: RecordedEvents, server: FakeNodeServer, labels: dict[str, str], monkeypatch: Any
) -> NodeController:
    node = controller(events)
    for method in ("apply", "get", "merge_patch"):
        monkeypatch.setattr(node.home, method, getattr(server, method))
    node.virtual_nodes.store.upsert(
        {**VIRTUAL_NODE, "spec": {**VIRTUAL_NODE["spec"], "labels": labels}}
    )
    if server.node is not None:
        node.nodes.store.upsert(copy.deepcopy(server.node))
    return node


async def test_labels_the_api_server_would_refuse_are_left_off_the_node_and_said_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    events, server = RecordedEvents(), FakeNodeServer()
    node = syncing(events, server, {"team": "ops", "bad key": "x", "zone": "v" * 64}, monkeypatch)
    try:
        await node.sync()
        await node.sync()
        assert server.applied
        assert all(labels["team"] == "ops" for labels in server.applied)
        assert not any("bad key" in labels or "zone" in labels for labels in server.applied)
        assert events.reasons == [("rome", "InvalidNodeLabels")]
    finally:
        await node.home.close()


async def test_a_label_an_administrator_set_on_the_node_over_ours_is_not_put_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`kubectl label node rome tier=untrusted --overwrite` against the provider's `tier=trusted`
    stays, until the administrator removes it."""
    labelled = {
        "metadata": {
            "name": "rome",
            "uid": "n-1",
            "resourceVersion": "7",
            "labels": {"tier": "untrusted", "liqo.io/type": "virtual-node"},
            "managedFields": [
                {"manager": "vk", "fieldsV1": {"f:metadata": {"f:labels": {"f:liqo.io/type": {}}}}},
                {
                    "manager": "kubectl-label",
                    "operation": "Update",
                    "fieldsV1": {"f:metadata": {"f:labels": {"f:tier": {}}}},
                },
            ],
        }
    }
    events, server = RecordedEvents(), FakeNodeServer(labelled)
    node = syncing(events, server, {"tier": "trusted"}, monkeypatch)
    try:
        await node.sync()
        assert server.applied  # the rest of our labels are applied
        assert not any("tier" in labels for labels in server.applied)

        # The administrator removes it: the provider's word is back.
        removed = copy.deepcopy(labelled)
        del removed["metadata"]["labels"]["tier"]
        removed["metadata"]["managedFields"].pop()
        server.node = removed
        node.nodes.store.upsert(copy.deepcopy(removed))
        await node.sync()
        assert server.applied[-1]["tier"] == "trusted"
    finally:
        await node.home.close()
