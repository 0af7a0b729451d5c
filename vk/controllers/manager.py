"""`vk controller-manager`: one process per cluster running vk's reconcilers (for now the
serving-certificate approver), leader-elected, with metrics and health."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
from typing import Any

import structlog

from vk.api.constants import VK_NAMESPACE
from vk.controllers.csr import ServingCSRApprover
from vk.kube.client import KubeClient
from vk.kube.kubeconfig import default_connection
from vk.kube.leaderelection import LeaderElector
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
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    tasks = [asyncio.create_task(metrics.run()), asyncio.create_task(elector.run())]
    work: asyncio.Task[None] | None = None
    try:
        waiting: list[asyncio.Task[Any]] = [
            asyncio.create_task(elector.is_leader.wait()),
            asyncio.create_task(stop.wait()),
        ]
        await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
        for task in waiting:
            task.cancel()
        if elector.is_leader.is_set() and not stop.is_set():
            log.info("leading: starting controllers")
            work = asyncio.create_task(ServingCSRApprover(client).run())
            working.set()
            ending = [
                asyncio.create_task(stop.wait()),
                asyncio.create_task(elector.lost.wait()),
                work,
            ]
            await asyncio.wait(ending, return_when=asyncio.FIRST_COMPLETED)
            for task in ending[:2]:
                task.cancel()
            if elector.lost.is_set():
                return 1
        return 0
    finally:
        for task in [*tasks, *([work] if work else [])]:
            task.cancel()
        await asyncio.gather(*tasks, *([work] if work else []), return_exceptions=True)
        await elector.release()
        await client.close()


def main(kubeconfig: str | None, metrics_address: str, namespace: str = VK_NAMESPACE) -> int:
    configure_logging("info", component="controller-manager")
    return asyncio.run(run_manager(kubeconfig, metrics_address, namespace))
