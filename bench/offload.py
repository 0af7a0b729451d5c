"""Offloading against running locally, in one run (issue 4's benchmark; DESIGN §7 targets).

On a playground of its own (consumer `home` and provider `far`, nodes sized for N pods), it
times a Deployment of N replicas on home's local kwok node (the baseline), then the same
Deployment offloaded through one virtual kubelet, and prints: time to all Ready for each and
their ratio; per-pod startup p50/p99 (first seen -> Ready, watched); the virtual kubelet's peak
RSS and CPU seconds; API writes per offloaded pod (home + provider, heartbeats apart); then
`kill -9` of the virtual kubelet with N pods running, a new one started, the time until it has
converged and the number of remote pods re-created (must be 0).

    .venv/bin/python -m bench.offload [--pods 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from bench.virtual_node import (
    LOCAL_NAMESPACE,
    NODE,
    REMOTE_NAMESPACE,
    BenchVirtualNode,
    apply,
    kubectl,
    proc_stats,
)
from vk.kube.client import KubeClient
from vk.kube.informer import Informer
from vk.kube.kubeconfig import load_kubeconfig_file

TARGETS = {"ratio": 1.25, "p99": 5.0, "rss": 150.0, "writes": 3.0, "restart": 10.0}


def deployment(name: str, namespace: str, replicas: int, node: str, virtual: bool) -> dict:
    spec: dict[str, Any] = {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{"name": "app", "image": "nginx"}],
        "terminationGracePeriodSeconds": 1,
    }
    if virtual:
        spec["tolerations"] = [
            {"key": "virtual-node.liqo.io/not-allowed", "operator": "Exists", "effect": "NoExecute"}
        ]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": spec},
        },
    }


def is_ready(pod: dict) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in pod.get("status", {}).get("conditions", [])
    )


async def time_to_ready(
    kubeconfig: Path, namespace: str, count: int, start: Any
) -> tuple[float, list[float]]:
    """Starts the rollout (`start()`), watches the namespace's pods; returns the time until
    `count` are Ready and each pod's startup (first seen -> Ready)."""
    async with KubeClient(load_kubeconfig_file(kubeconfig)) as client:
        informer = Informer(client, "v1", "pods", namespace=namespace)
        first_seen: dict[str, float] = {}
        startup: dict[str, float] = {}
        done = asyncio.Event()

        def on_event(_: str, pod: dict, __: Any) -> None:
            name = pod["metadata"]["name"]
            now = time.monotonic()
            first_seen.setdefault(name, now)
            if name not in startup and is_ready(pod):
                startup[name] = now - first_seen[name]
                if len(startup) >= count:
                    done.set()

        informer.add_handler(on_event)
        task = asyncio.create_task(informer.run())
        await informer.synced.wait()
        began = time.monotonic()
        start()
        await asyncio.wait_for(done.wait(), 900)
        elapsed = time.monotonic() - began
        task.cancel()
        return elapsed, list(startup.values())


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def writes(sample: dict, *, heartbeat: bool) -> float:
    """Write requests in a metrics sample; the heartbeat's (node Lease, Node status, the HA
    Lease) or all the others."""
    total = 0.0
    for (name, labels), value in sample.items():
        label = dict(labels)
        if name != "vk_api_requests_total" or label["verb"] not in (
            "POST",
            "PUT",
            "PATCH",
            "DELETE",
        ):
            continue
        is_heartbeat = label["resource"] in ("leases", "nodes", "nodes/status")
        if is_heartbeat == heartbeat:
            total += value
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    n = parser.parse_args().pods
    with BenchVirtualNode(pods_capacity=n + 100, name="offload") as scene:
        home, far = scene.home, scene.far
        kubectl(home, "create", "namespace", "bench-local")
        print(f"\n== {n} replicas on home's local kwok node (baseline)")
        local_time, _ = asyncio.run(
            time_to_ready(
                home,
                "bench-local",
                n,
                lambda: apply(
                    home, deployment("bench", "bench-local", n, "home-worker-1", virtual=False)
                ),
            )
        )
        print(f"all Ready in {local_time:.1f}s")
        kubectl(home, "delete", "namespace", "bench-local", "--wait=false")

        process = scene.start_kubelet()
        scene.wait_node_ready()
        before = scene.metrics()
        print(f"\n== the same {n} replicas offloaded through one virtual kubelet")
        remote_time, startup = asyncio.run(
            time_to_ready(
                home,
                LOCAL_NAMESPACE,
                n,
                lambda: apply(home, deployment("bench", LOCAL_NAMESPACE, n, NODE, virtual=True)),
            )
        )
        time.sleep(2)  # let the last status writes land before counting
        after = scene.metrics()
        _, peak_rss, cpu = proc_stats(process.pid)
        pod_writes = (writes(after, heartbeat=False) - writes(before, heartbeat=False)) / n
        heartbeat_writes = writes(after, heartbeat=True) - writes(before, heartbeat=True)
        breakdown = {
            labels: value - before.get((name, labels), 0)
            for (name, labels), value in after.items()
            if name == "vk_api_requests_total"
            and dict(labels)["verb"] in ("POST", "PUT", "PATCH", "DELETE")
            and value - before.get((name, labels), 0) > 0
        }
        print(f"all Ready in {remote_time:.1f}s")

        print(f"\n== kill -9 with {n} pods running, and a new virtual kubelet")
        remote_uids = remote_pod_uids(far)
        scene.kill()
        started = time.monotonic()
        scene.start_kubelet()
        while True:  # converged: every pod reconciled once and nothing left to do
            sample = scene.metrics()
            adds = sample.get(("vk_workqueue_adds_total", (("name", "pods"),)), 0)
            depth = sample.get(("vk_workqueue_depth", (("name", "pods"),)), 1)
            if adds >= n and depth == 0:
                break
            time.sleep(0.1)
        converged = time.monotonic() - started
        after_restart = remote_pod_uids(far)
        recreated = sum(1 for name, uid in remote_uids.items() if after_restart.get(name) != uid)

    ratio = remote_time / local_time
    p50, p99 = percentile(startup, 0.50), percentile(startup, 0.99)

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    print(f"\n== results ({n} pods)")
    print(f"time to all Ready, local kwok node:    {local_time:7.1f} s")
    print(f"time to all Ready, offloaded:          {remote_time:7.1f} s")
    print(
        f"ratio offloaded / local:               {ratio:7.2f}    target <= 1.25: "
        f"{verdict(ratio <= TARGETS['ratio'])}"
    )
    print(
        f"per-pod startup p50 / p99:             {p50:7.2f} s / {p99:.2f} s   "
        f"target p99 <= 5 s: {verdict(p99 <= TARGETS['p99'])}"
    )
    print(
        f"virtual kubelet peak RSS:              {peak_rss:7.1f} MiB   target <= 150: "
        f"{verdict(peak_rss <= TARGETS['rss'])}"
    )
    print(f"virtual kubelet CPU during the run:    {cpu:7.1f} s")
    print(
        f"API writes per offloaded pod:          {pod_writes:7.2f}    target <= 3: "
        f"{verdict(pod_writes <= TARGETS['writes'])}   (+ {heartbeat_writes:.0f} "
        "heartbeat writes in all)"
    )
    for labels, value in sorted(breakdown.items(), key=lambda item: -item[1]):
        label = dict(labels)
        print(
            f"    {value / n:5.2f} per pod  {label['client']:8s} {label['verb']:6s} "
            f"{label['resource']:14s} {label['code']}"
        )
    print(
        f"restart with {n} pods: converged in    {converged:7.1f} s   target <= 10: "
        f"{verdict(converged <= TARGETS['restart'])}"
    )
    print(
        f"remote pods re-created by the restart: {recreated:7d}    target 0: "
        f"{verdict(recreated == 0)}"
    )


def remote_pod_uids(far: Path) -> dict[str, str]:
    pods = json.loads(kubectl(far, "get", "pods", "-n", REMOTE_NAMESPACE, "-o", "json"))["items"]
    return {p["metadata"]["name"]: p["metadata"]["uid"] for p in pods}


if __name__ == "__main__":
    main()
