"""Reflection of shared objects, in one run (issue 8's benchmark).

On a playground of its own (consumer `home`, provider `far`), with one virtual kubelet:

1. 1000 ConfigMaps and 200 Services applied in the offloaded namespace: the time until all are
   in the provider, against the time `kubectl apply` took to create them at home (the
   baseline, same run); API writes per object to the provider (goal <= 1).
2. The virtual kubelet killed and started again: API writes of the resync that follows, which
   finds everything reflected already (goal 0).
3. More ConfigMaps, to 5000 reflected objects, then the virtual kubelet left idle: its CPU
   seconds and the API requests it makes over `--idle-seconds` (goal: Lease renewals only).
4. A Deployment of `--pods` pods offloaded: API writes per pod on the pod path (pods,
   pods/status; goal <= 3), and apart from them the ServiceAccount token writes (TokenRequests
   at home, token Secrets in the provider).

    .venv/bin/python -m bench.reflection [--configmaps 1000] [--services 200]
        [--total 5000] [--idle-seconds 300] [--pods 100]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench.offload import deployment, is_ready
from bench.virtual_node import (
    LOCAL_NAMESPACE,
    NODE,
    REMOTE_NAMESPACE,
    BenchVirtualNode,
    Sample,
    kubectl,
    proc_stats,
)
from vk.kube.client import KubeClient
from vk.kube.informer import Informer
from vk.kube.kubeconfig import load_kubeconfig_file

WRITES = ("POST", "PUT", "PATCH", "DELETE")
# The node's Lease and status, the two elections' Leases, the provider ping (`/livez`).
HEARTBEAT = ("leases", "nodes", "nodes/status", "-")
TOKENS = ("serviceaccounts/token", "secrets")
# The pod path: ShadowPods on the provider, the pods' status at home.
POD_PATH = ("pods", "pods/status", "shadowpods")


def configmaps(first: int, count: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"settings-{i:05d}", "labels": {"app": "bench"}},
            "data": {"index": str(i), "payload": "x" * 200},
        }
        for i in range(first, first + count)
    ]


def services(count: int) -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": f"svc-{i:04d}", "labels": {"app": "bench"}},
            "spec": {"selector": {"app": f"svc-{i}"}, "ports": [{"port": 80, "targetPort": 8080}]},
        }
        for i in range(count)
    ]


def create(kubeconfig: Path, objects: list[dict[str, Any]]) -> float:
    """`kubectl create` of `objects` in the offloaded namespace, 500 per call; its seconds."""
    started = time.monotonic()
    for i in range(0, len(objects), 500):
        kubectl(
            kubeconfig,
            "create",
            "-n",
            LOCAL_NAMESPACE,
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": objects[i : i + 500]}),
        )
    return time.monotonic() - started


async def wait_reflected(far: Path, kinds: dict[str, int], limit: float = 900) -> float:
    """Watches the provider's twin namespace until it holds `kinds` (plural -> count) of our
    objects; the seconds it took."""
    started = time.monotonic()
    async with KubeClient(load_kubeconfig_file(far)) as client:
        informers = {
            plural: Informer(
                client,
                "v1",
                plural,
                namespace=REMOTE_NAMESPACE,
                label_selector="offloading.liqo.io/origin=home,app=bench",
            )
            for plural in kinds
        }
        tasks = [asyncio.create_task(i.run()) for i in informers.values()]
        try:
            while any(len(informers[p].store) < n for p, n in kinds.items()):
                if time.monotonic() - started > limit:
                    counts = {p: len(i.store) for p, i in informers.items()}
                    raise TimeoutError(f"reflected so far: {counts}")
                await asyncio.sleep(0.05)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
    return time.monotonic() - started


def requests(
    sample: Sample, *, client: str | None = None, verbs: tuple[str, ...] = WRITES
) -> dict[str, float]:
    """Requests in a metrics sample by resource."""
    counts: dict[str, float] = {}
    for (name, labels), value in sample.items():
        label = dict(labels)
        if name != "vk_api_requests_total" or label["verb"] not in verbs:
            continue
        if client is not None and label["client"] != client:
            continue
        counts[label["resource"]] = counts.get(label["resource"], 0) + value
    return counts


def difference(after: dict[str, float], before: dict[str, float]) -> dict[str, float]:
    return {k: v - before.get(k, 0) for k, v in after.items() if v - before.get(k, 0)}


def settle(scene: BenchVirtualNode, seconds: float = 3.0) -> Sample:
    """Metrics once the virtual kubelet's queues are empty and stay so for `seconds`."""
    quiet_since = None
    while True:
        sample = scene.metrics()
        depth = sum(v for (n, _), v in sample.items() if n == "vk_workqueue_depth")
        now = time.monotonic()
        if depth:
            quiet_since = None
        elif quiet_since is None:
            quiet_since = now
        elif now - quiet_since >= seconds:
            return sample
        time.sleep(0.2)


async def pods_ready(home: Path, count: int) -> None:
    async with KubeClient(load_kubeconfig_file(home)) as client:
        informer = Informer(client, "v1", "pods", namespace=LOCAL_NAMESPACE)
        all_ready = asyncio.Event()

        def on_event(*_: Any) -> None:
            if sum(is_ready(p) for p in informer.store.objects()) >= count:
                all_ready.set()

        informer.add_handler(on_event)
        task = asyncio.create_task(informer.run())
        try:
            await all_ready.wait()
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configmaps", type=int, default=1000)
    parser.add_argument("--services", type=int, default=200)
    parser.add_argument("--total", type=int, default=5000)
    parser.add_argument("--idle-seconds", type=int, default=300)
    parser.add_argument("--pods", type=int, default=100)
    args = parser.parse_args()
    created = args.configmaps + args.services

    # far bounds a twin namespace's objects (the provider's default ResourceQuota): room for
    # what this benchmark reflects.
    room = f"configmaps={args.total + 100},services={args.services + 100},secrets={args.pods + 100}"
    with BenchVirtualNode(
        pods_capacity=max(args.pods, 110), name="reflection", twin_namespace_quota=room
    ) as scene:
        scene.wait_node_ready()
        before = settle(scene)

        # 1. Reflect ConfigMaps and Services as they are created.
        objects = configmaps(0, args.configmaps) + services(args.services)
        reflected = asyncio.run(
            _create_and_wait(
                scene, objects, {"configmaps": args.configmaps, "services": args.services}
            )
        )
        baseline, converged = reflected
        after = settle(scene)
        provider_writes = difference(
            requests(after, client="provider"), requests(before, client="provider")
        )
        per_object = sum(provider_writes.get(r, 0) for r in ("configmaps", "services")) / created

        # 2. Restart: the resync finds everything reflected.
        scene.kill()
        scene.start_kubelet()
        scene.wait_node_ready()
        restarted = settle(scene, seconds=10.0)
        resync = {
            r: n
            for r, n in requests(restarted, client="provider").items()
            if r in ("configmaps", "services")
        }
        relisted = sum(
            v
            for (n, labels), v in restarted.items()
            if n == "vk_workqueue_adds_total" and dict(labels)["name"] in ("configmaps", "services")
        )

        # 3. Idle with `total` reflected objects.
        more = max(0, args.total - created)
        if more:
            asyncio.run(
                _create_and_wait(
                    scene,
                    configmaps(args.configmaps, more),
                    {"configmaps": args.configmaps + more, "services": args.services},
                )
            )
        idle_start = settle(scene)
        assert scene.process is not None
        _, _, cpu_before = proc_stats(scene.process.pid)
        time.sleep(args.idle_seconds)
        _, peak_rss, cpu_after = proc_stats(scene.process.pid)
        idle_end = scene.metrics()
        idle_requests = difference(
            requests(idle_end, verbs=(*WRITES, "GET")), requests(idle_start, verbs=(*WRITES, "GET"))
        )
        idle_watches = sum(
            difference(
                requests(idle_end, verbs=("WATCH",)), requests(idle_start, verbs=("WATCH",))
            ).values()
        )

        # 4. Pods: the pod path's writes, and the token writes apart.
        pods_before = settle(scene)
        kubectl(
            scene.home,
            "apply",
            "-f",
            "-",
            input=json.dumps(deployment("tokens", LOCAL_NAMESPACE, args.pods, NODE, True)),
        )
        asyncio.run(pods_ready(scene.home, args.pods))
        pods_after = settle(scene)
        pod_writes = difference(requests(pods_after), requests(pods_before))
        pod_path = sum(pod_writes.get(r, 0) for r in POD_PATH) / args.pods
        token_writes = sum(pod_writes.get(r, 0) for r in TOKENS) / args.pods

    def verdict(ok: bool) -> str:
        return "met" if ok else "NOT met"

    idle_other = {r: n for r, n in idle_requests.items() if r not in HEARTBEAT}
    print()
    print(f"reflection: {args.configmaps} ConfigMaps + {args.services} Services")
    print(f"  kubectl create at home (baseline):   {baseline:7.2f} s")
    print(f"  all reflected in the provider:       {converged:7.2f} s   "
          f"ratio {converged / baseline:.2f}")  # fmt: skip
    print(f"  provider writes per object:          {per_object:7.2f}     goal <= 1: "
          f"{verdict(per_object <= 1)}   {provider_writes}")  # fmt: skip
    print(f"  writes of the resync after a restart: {sum(resync.values()):6.0f}     goal 0: "
          f"{verdict(not sum(resync.values()))}   ({relisted:.0f} keys reconciled)")  # fmt: skip
    print(f"idle, {args.configmaps + more + args.services} reflected objects, "
          f"{args.idle_seconds} s:")  # fmt: skip
    print(f"  virtual kubelet CPU:                 {cpu_after - cpu_before:7.2f} s "
          f"({100 * (cpu_after - cpu_before) / args.idle_seconds:.2f} % of a core), "
          f"peak RSS {peak_rss:.0f} MiB")  # fmt: skip
    print(f"  requests (GET and writes):           {idle_requests}")
    print(f"  watches re-opened (5 min timeout):   {idle_watches:7.0f}")
    print(f"  beyond the heartbeat:                {idle_other or 'none'}   goal none: "
          f"{verdict(not idle_other)}")  # fmt: skip
    print(f"pods: {args.pods} offloaded")
    print(f"  pod-path writes per pod:             {pod_path:7.2f}     goal <= 3: "
          f"{verdict(pod_path <= 3)}")  # fmt: skip
    print(f"  ServiceAccount token writes per pod: {token_writes:7.2f}     (apart)")
    print(f"  all writes: {pod_writes}")


async def _create_and_wait(
    scene: BenchVirtualNode, objects: list[dict[str, Any]], expected: dict[str, int]
) -> tuple[float, float]:
    """Creates `objects` at home while watching the provider; (create seconds, reflect
    seconds), both from the same start."""
    started = time.monotonic()
    waiting = asyncio.create_task(wait_reflected(scene.far, expected))
    baseline = await asyncio.to_thread(create, scene.home, objects)
    await waiting
    return baseline, time.monotonic() - started


if __name__ == "__main__":
    main()
