"""Moving a pod through the Eviction API, as `kubectl drain` does: its PodDisruptionBudgets have
their say, and its controller, if any, recreates it wherever the scheduler now puts it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import structlog

from vk.kube.client import ApiError, KubeClient, NotFound, resource_path

log = structlog.get_logger("vk.kube.eviction")


async def evict(client: KubeClient, pod: Mapping[str, Any], why: str) -> bool:
    """Asks to evict `pod`; True once asked (or the pod is gone), False when refused for now
    (429: a disruption budget says not yet), which the caller retries later."""
    metadata = pod["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": namespace},
    }
    try:
        await client.create(
            resource_path("v1", "pods", namespace=namespace, name=name, subresource="eviction"),
            eviction,
        )
    except NotFound:
        return True
    except ApiError as error:
        log.info("eviction refused, retrying", namespace=namespace, pod=name, error=str(error))
        return False
    log.info("pod evicted", namespace=namespace, pod=name, why=why)
    return True
