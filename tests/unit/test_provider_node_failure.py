"""The provider's node-failure controller: what it keeps of the provider's Nodes and Pods."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.unit.kube_objects import a_real_node
from vk.controllers.provider_node_failure import ProviderNodeFailure, node_readiness_as_read
from vk.controllers.provider_shadowpods import ProviderShadowPods
from vk.controllers.virtualnodes import node_ready
from vk.kube.informer import Informer, informer_scope


@pytest.mark.parametrize(
    "conditions",
    [
        [{"type": "MemoryPressure", "status": "False"}, {"type": "Ready", "status": "True"}],
        [{"type": "Ready", "status": "False"}],
        [{"type": "Ready", "status": "Unknown"}],
        [{"type": "MemoryPressure", "status": "True"}],
        [],
    ],
)
def test_a_node_is_kept_as_its_readiness(conditions: list[dict[str, Any]]) -> None:
    node = a_real_node("naples-worker-1", conditions=conditions)
    kept = node_readiness_as_read(node)
    assert node_ready(kept) is node_ready(node)
    assert kept["metadata"]["name"] == "naples-worker-1"
    assert len(orjson.dumps(kept)) * 20 < len(orjson.dumps(node))


def test_the_pods_made_of_shadow_pods_are_one_cache_in_the_process() -> None:
    """Both controllers read the Pods as one keep trims them: one watch, one cache (two keeps
    of one informer are refused)."""
    with informer_scope():
        client: Any = object()
        quotas = Informer(client, "offloading.liqo.io/v1beta1", "quotas")
        shadow_pods = ProviderShadowPods(client, quotas)
        node_failure = ProviderNodeFailure(client)
    assert shadow_pods.pods is node_failure.pods
