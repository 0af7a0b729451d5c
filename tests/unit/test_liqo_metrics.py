"""Liqo's virtual-kubelet metrics, which Liqo's dashboards query, under Liqo's names."""

from __future__ import annotations

import asyncio

from prometheus_client import REGISTRY

from vk.kube.controller import Controller, Reconciler, Result
from vk.reflection.generic import liqo_observer


def sample(name: str, namespace: str) -> float:
    labels = {
        "namespace": namespace,
        "reflector_resource": "configmap",
        "cluster_id": "naples",
        "node_name": "vn-metrics",
    }
    return REGISTRY.get_sample_value(name, labels) or 0.0


class FailsOnce(Reconciler):
    name = "configmaps"

    def __init__(self) -> None:
        self.calls = 0
        self.done = asyncio.Event()

    async def reconcile(self, key: str) -> Result:
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("the provider answered 500")
        self.done.set()
        return Result()


def test_each_reconcile_counts_as_an_item_or_an_error_of_its_namespace() -> None:
    items, errors = (
        "liqo_virtual_kubelet_reflection_item_counter",
        ("liqo_virtual_kubelet_reflection_error_counter"),
    )
    before = sample(items, "shop"), sample(errors, "shop")

    async def run() -> None:
        reconciler = FailsOnce()
        controller = Controller(
            reconciler, observe=liqo_observer("configmap", "naples", "vn-metrics")
        )
        task = asyncio.create_task(controller.run())
        controller.enqueue("shop/settings")
        await asyncio.wait_for(reconciler.done.wait(), 10)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)

    asyncio.run(run())
    assert sample(items, "shop") - before[0] == 1
    assert sample(errors, "shop") - before[1] == 1
