"""The pod reflector judges no pod before the ReflectionManager has said which namespaces are
offloaded: before, every pod would look not offloaded (a status write each), and a pod being
deleted would be finished at home with its remote pod left running."""

from __future__ import annotations

import asyncio
from typing import Any

from vk.kube.client import JSON, NotFound
from vk.kube.events import EventRecorder
from vk.reflection.workload.pods import PodReflector


class Home:
    """One pod bound to the node; its writes recorded; its watch quiet."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    async def list_pages(self, path: str, params: Any = None):  # type: ignore[no-untyped-def]
        pod = {
            "metadata": {"name": "web", "namespace": "shop", "uid": "u", "resourceVersion": "1"},
            "spec": {"nodeName": "far", "containers": [{"name": "app", "image": "nginx"}]},
            "status": {"phase": "Pending"},
        }
        yield [pod], "1"

    async def watch(self, path: str, params: Any = None, *, timeout_seconds: int = 300):  # type: ignore[no-untyped-def]
        await asyncio.Event().wait()
        yield {}

    async def merge_patch(self, path: str, body: JSON) -> JSON:
        self.writes.append(path)
        return {}

    async def get(self, path: str, params: Any = None) -> JSON:
        raise NotFound(404, "NotFound", "not found")

    async def create(self, path: str, body: JSON) -> JSON:
        self.writes.append(path)
        return body


async def test_no_pod_is_judged_before_the_offloaded_namespaces_are_known() -> None:
    home: Any = Home()
    mapped = asyncio.Event()
    pods = PodReflector(
        home,
        node_name="far",
        node_ip="10.0.0.1",
        home_cluster_id="home",
        remote_cluster_id="far",
        mappings=dict,  # none offloaded: the pod is reported so, once that is known
        mapped=mapped,
        workers=1,
        events=EventRecorder(home, "virtual-kubelet"),
    )
    running = asyncio.create_task(pods.run())
    try:
        await asyncio.wait_for(pods.local.synced.wait(), 1)
        await asyncio.sleep(0.2)
        assert home.writes == [], "a pod judged before the manager's first word"
        mapped.set()
        async with asyncio.timeout(2):
            while not home.writes:
                await asyncio.sleep(0.01)
        assert home.writes[0] == "/api/v1/namespaces/shop/pods/web/status"
    finally:
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
