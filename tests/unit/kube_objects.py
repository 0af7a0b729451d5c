"""Kubernetes objects as the real components write them, for the unit tests of what vk's caches
keep of them."""

from __future__ import annotations

from typing import Any


def a_real_node(
    name: str,
    address: str = "172.18.0.3",
    heartbeat: str = "1",
    conditions: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """A Node as a real kubelet writes it: mostly images, conditions and info no one in vk
    reads. `conditions`: its own, else Ready since `heartbeat`."""
    return {
        "metadata": {
            "name": name,
            "uid": f"uid-{name}",
            "resourceVersion": heartbeat,
            "labels": {"kubernetes.io/hostname": name, "node-role.kubernetes.io/worker": ""},
            "annotations": {"node.alpha.kubernetes.io/ttl": "0"},
            "managedFields": [{"manager": "kubelet", "fieldsV1": {"f:status": {}}}],
        },
        "spec": {"podCIDR": "10.244.1.0/24", "podCIDRs": ["10.244.1.0/24"], "taints": []},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": address},
                {"type": "Hostname", "address": name},
            ],
            "conditions": (
                conditions
                if conditions is not None
                else [{"type": "Ready", "status": "True", "lastHeartbeatTime": heartbeat}]
            ),
            "images": [
                {"names": [f"registry.example/image-{i}@sha256:{'0' * 64}"], "sizeBytes": i}
                for i in range(50)
            ],
            "nodeInfo": {"kubeletVersion": "v1.36.4", "osImage": "Debian GNU/Linux 13"},
        },
    }
