"""`vk controller-manager`: one process per cluster running vk's reconcilers (for now the
serving-certificate approver), leader-elected, with metrics and health."""

from __future__ import annotations

import asyncio
import os
import socket

import structlog

from vk.api.constants import VK_NAMESPACE
from vk.controllers.csr import ServingCSRApprover
from vk.kube.client import KubeClient
from vk.kube.kubeconfig import default_connection
from vk.kube.leaderelection import LeaderElector, run_while_leading
from vk.kube.observability import MetricsServer, configure_logging

log = structlog.get_logger("vk.controllers.manager")


async def run_manager(kubeconfig: str | None, metrics_address: str, namespace: str) -> int:
    client = KubeClient(default_connection(kubeconfig), name="home")
    identity = os.environ.get("POD_NAME") or f"{socket.gethostname()}-{os.getpid()}"
    elector = LeaderElector(
        client, namespace=namespace, name="vk-controller-manager", identity=identity
    )
    working = asyncio.Event()
    metrics = MetricsServer(metrics_address, ready=working.is_set)

    async def work() -> None:
        working.set()
        await ServingCSRApprover(client).run()

    try:
        return await run_while_leading(elector, work, background=[metrics.run()])
    finally:
        await client.close()


def main(kubeconfig: str | None, metrics_address: str, namespace: str = VK_NAMESPACE) -> int:
    configure_logging("info", component="controller-manager")
    return asyncio.run(run_manager(kubeconfig, metrics_address, namespace))
