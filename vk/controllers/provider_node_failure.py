"""The provider's node-failure controller, off by default (`vk controller-manager
--enable-node-failure-controller`, Liqo's flag of the same name): a Pod made of a ShadowPod that
is being deleted on a Node that is not Ready is deleted at once (grace period 0), so that the
ShadowPod controller makes it again on a Node that works.

Without it, such a Pod stays Terminating for as long as its Node is down: no kubelet is there
to confirm that its containers stopped, so the API server keeps it, and the offloaded workload
has a pod less (a Deployment at home sees its pod still there, and makes none). With it, the
containers may in fact still run on a Node that is only cut off: two copies for a while, which
is why it is opt-in, as in Liqo. Only the Pods vk made (`SHADOW_POD_OWNED_LABEL`) are touched.
"""

from __future__ import annotations

import contextlib

import structlog

from vk.controllers.provider_caches import pods_made_of_shadow_pods
from vk.controllers.virtualnodes import node_ready
from vk.kube.client import JSON, KubeClient, NotFound, delete_options
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.informer import object_key, shared_informer
from vk.reflection.workload.pods import pod_path

log = structlog.get_logger("vk.controllers.provider_node_failure")


def node_readiness_as_read(node: JSON) -> JSON:
    """What this controller keeps of a Node, all it reads (`node_ready`): its name and its
    Ready condition. The rest of a Node (its images, its nodeInfo, its other conditions) was
    most of it, and is written by every kubelet heartbeat."""
    metadata = node.get("metadata") or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    return {
        "metadata": {
            key: metadata[key] for key in ("name", "uid", "resourceVersion") if key in metadata
        },
        "status": {
            "conditions": [
                c for c in conditions if isinstance(c, dict) and c.get("type") == "Ready"
            ]
        },
    }


class ProviderNodeFailure(Reconciler):
    """Keys are the Pods' `namespace/name`."""

    name = "provider-node-failure"

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        # The ShadowPod controller's informer: one cache of these Pods per process.
        self.pods = pods_made_of_shadow_pods(client)
        self.nodes = shared_informer(client, "v1", "nodes", keep=node_readiness_as_read)
        self.controller = Controller(self)
        self._ready: dict[str, bool] = {}  # node -> its readiness when last seen

    def _on_pod(self, _: str, pod: JSON, __: JSON | None) -> None:
        if pod["metadata"].get("deletionTimestamp"):
            self.controller.enqueue(object_key(pod))

    def _on_node(self, _: str, node: JSON, __: JSON | None) -> None:
        name = node["metadata"]["name"]
        ready = node_ready(node)
        if self._ready.get(name) == ready:
            return  # a heartbeat, not a change
        self._ready[name] = ready
        if ready:
            return
        for pod in self.pods.store.objects():
            if (pod.get("spec") or {}).get("nodeName") == name:
                self._on_pod("", pod, None)

    async def run(self) -> None:
        self.pods.add_handler(self._on_pod)
        self.nodes.add_handler(self._on_node)
        await run_with_informers(self.controller, self.pods, self.nodes)

    async def reconcile(self, key: str) -> Result:
        pod = self.pods.store.get(key)
        if pod is None or not pod["metadata"].get("deletionTimestamp"):
            return Result()
        node_name = (pod.get("spec") or {}).get("nodeName")
        node = self.nodes.store.get(node_name) if node_name else None
        if node is None or node_ready(node):
            return Result()  # its kubelet finishes it (a Node deleted: the pod GC does)
        metadata = pod["metadata"]
        options: JSON = delete_options(uid=metadata["uid"], grace_period=0)
        with contextlib.suppress(NotFound):
            await self.client.delete(
                pod_path(metadata["namespace"], metadata["name"]), body=options
            )
        log.warning(
            "deleted a terminating pod of a node that is not Ready, to be made again",
            pod=key,
            node=node_name,
        )
        return Result()
