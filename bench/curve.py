"""The virtual kubelet's memory and CPU as its pods grow: the curve (issue 20).

On one scene (bench/virtual_node.py: home peered with far, one virtual kubelet run by the
benchmark), the benchmark binds pods to the virtual node itself, step by step (by default to
1000, 3000 and 10,000), and after each step waits until every pod is Ready at home, then reads
the virtual kubelet's resident memory (and its peak) and CPU seconds. Each step binds most of
its pods at once, and its last ones (100 by default, at most half the step) paced, at a steady
rate once the others are Ready and the virtual kubelet's work queues are empty: their startup
(created -> Ready at home) is the per-pod startup with that many pods running, which a burst
cannot show, since its pods wait their turn behind each other. It prints a table with the
bytes each pod adds over the idle virtual kubelet, each burst's rate (pods bound -> all
Ready), the paced pods' startup p50/p99, the virtual kubelet's CPU per paced pod (the machine
not saturated, unlike in a burst), its reconciles per pod in the burst and paced, and its CPU
idle afterwards, each second of IDLE_SECONDS with nothing changing; then `kill -9` of the
virtual kubelet with them all running, and how a new one converges.

    .venv/bin/python -m bench.curve [--steps 1000,3000,10000] [--paced-pods 100]
        [--paced-rate 10] [--heap | --profile]

`--heap`: the virtual kubelet runs under tracemalloc (bench/probe.py, slower), and the bench
prints where its bytes per pod go at the last step, and how much of its RSS the Python heap is.
`--profile`: the virtual kubelets run under cProfile, and the bench prints where the restarted
one's CPU went, from its start to its convergence (its timings are not the product's).
"""

from __future__ import annotations

import argparse
import asyncio
import time
from dataclasses import dataclass
from typing import Any

from bench.offload import (
    BACKLOG_LABEL,
    CREATE_CONCURRENCY,
    TARGETS,
    bound_pod,
    counted_between,
    is_ready,
    percentile,
    print_heap,
    print_profile,
)
from bench.probe import HEAP, PROFILE
from bench.virtual_node import LOCAL_NAMESPACE, BenchVirtualNode, Sample, proc_stats
from vk.kube.client import KubeClient, resource_path
from vk.kube.informer import Informer
from vk.kube.kubeconfig import load_kubeconfig_file

STEP_TIMEOUT_SECONDS = 1800
# How long the virtual kubelet is watched idle after each step: two of metrics-server's scrapes
# of its node (every 15 s), its Lease renewed three times.
IDLE_SECONDS = 30
SETTLE_TIMEOUT_SECONDS = 60


@dataclass(frozen=True)
class Point:
    pods: int
    rss: float  # MiB, once all are Ready
    peak: float  # MiB, the most it held until then
    cpu: float  # CPU seconds since the virtual kubelet started
    burst: int  # pods bound at once in this step
    seconds: float  # this step's burst: first pod bound -> all Ready
    startup: list[float]  # this step's paced pods: each one's created -> Ready at home
    # The virtual kubelet's CPU seconds while the paced pods came (from the first one's creation
    # to their status writes landed): what a pod costs it when the machine is not saturated.
    paced_cpu: float
    idle_cpu: float  # its CPU seconds per second afterwards, with nothing changing (IDLE_SECONDS)
    # Its reconciles (keys its work queues took) per pod: in the burst, and while the paced
    # pods came. Pods that come alone share no reconcile, where a burst's queue merges keys.
    burst_reconciles: float
    paced_reconciles: float

    @property
    def paced_cpu_ms(self) -> float | None:
        """The virtual kubelet's CPU milliseconds per paced pod (None: none paced)."""
        return self.paced_cpu / len(self.startup) * 1000 if self.startup else None


@dataclass(frozen=True)
class Pacing:
    pods: int  # the last pods of each step, at most half of it
    rate: float  # pods created per second


def reconciles(before: Sample, after: Sample) -> float:
    """The keys the virtual kubelet's work queues took between two samples of its metrics."""
    return sum(counted_between(before, after, "vk_workqueue_adds_total", ()).values())


async def settled(scene: BenchVirtualNode) -> None:
    """Waits until the virtual kubelet's work queues are all empty (SETTLE_TIMEOUT_SECONDS at
    most), then a second more."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_SECONDS
    while time.monotonic() < deadline:  # polled: the queues are in another process
        depth = scene.metrics()
        if not any(value for (name, _), value in depth.items() if name == "vk_workqueue_depth"):
            break
        await asyncio.sleep(0.2)
    else:
        print(
            f"the virtual kubelet's work queues were not empty after {SETTLE_TIMEOUT_SECONDS} s: "
            "the paced pods come anyway, its work left counted as theirs",
            flush=True,
        )
    await asyncio.sleep(1)


async def climb(scene: BenchVirtualNode, steps: list[int], pacing: Pacing) -> list[Point]:
    process = scene.process
    assert process is not None
    rss, peak, cpu = proc_stats(process.pid)
    await asyncio.sleep(IDLE_SECONDS)
    idle = (proc_stats(process.pid)[2] - cpu) / IDLE_SECONDS
    points = [
        Point(
            pods=0,
            rss=rss,
            peak=peak,
            cpu=cpu,
            burst=0,
            seconds=0.0,
            startup=[],
            paced_cpu=0.0,
            idle_cpu=idle,
            burst_reconciles=0.0,
            paced_reconciles=0.0,
        )
    ]
    async with KubeClient(load_kubeconfig_file(scene.home)) as home:
        pods = Informer(
            home, "v1", "pods", namespace=LOCAL_NAMESPACE, label_selector=f"{BACKLOG_LABEL}=true"
        )
        ready: dict[str, float] = {}  # pod name -> when it was first seen Ready
        changed = asyncio.Event()

        def on_event(_: str, pod: Any, __: Any) -> None:
            name = pod["metadata"]["name"]
            if name not in ready and is_ready(pod):
                ready[name] = time.monotonic()
                changed.set()

        async def all_ready(count: int) -> None:
            async with asyncio.timeout(STEP_TIMEOUT_SECONDS):
                while len(ready) < count:
                    changed.clear()
                    await changed.wait()

        pods.add_handler(on_event)
        following = asyncio.create_task(pods.run())
        await pods.synced.wait()
        limit = asyncio.Semaphore(CREATE_CONCURRENCY)
        path = resource_path("v1", "pods", namespace=LOCAL_NAMESPACE)

        async def create(index: int) -> None:
            async with limit:
                await home.create(path, bound_pod(index))

        for target in steps:
            first = points[-1].pods
            paced = min(pacing.pods, (target - first) // 2)
            burst = target - first - paced
            before_burst = scene.metrics()
            began = time.monotonic()
            await asyncio.gather(*(create(i) for i in range(first, first + burst)))
            await all_ready(first + burst)
            seconds = time.monotonic() - began
            # The burst's last work done (its Events reflected, its statuses' echoes), so that
            # none of it is counted as the paced pods'.
            await settled(scene)
            before_paced = scene.metrics()
            # One pod at a time, on a fixed schedule, each timed from just before its creation.
            created: dict[str, float] = {}
            _, _, cpu_before_paced = proc_stats(process.pid)
            pacing_began = time.monotonic()
            for number, index in enumerate(range(first + burst, target)):
                await asyncio.sleep(
                    max(0.0, pacing_began + number / pacing.rate - time.monotonic())
                )
                created[bound_pod(index)["metadata"]["name"]] = time.monotonic()
                await create(index)
            await all_ready(target)
            startup = [ready[name] - at for name, at in created.items()]
            await asyncio.sleep(2)  # the last status writes land
            rss, peak, cpu = proc_stats(process.pid)
            after_paced = scene.metrics()
            await asyncio.sleep(IDLE_SECONDS)
            idle = (proc_stats(process.pid)[2] - cpu) / IDLE_SECONDS
            points.append(
                Point(
                    pods=target,
                    rss=rss,
                    peak=peak,
                    cpu=cpu,
                    burst=burst,
                    seconds=seconds,
                    startup=startup,
                    paced_cpu=cpu - cpu_before_paced,
                    idle_cpu=idle,
                    burst_reconciles=(
                        reconciles(before_burst, before_paced) / burst if burst else 0.0
                    ),
                    paced_reconciles=(
                        reconciles(before_paced, after_paced) / paced if paced else 0.0
                    ),
                )
            )
            print(
                f"{target} pods Ready ({burst} at once in {seconds:.1f} s, then {paced} paced): "
                f"RSS {rss:.1f} MiB (peak {peak:.1f})",
                flush=True,
            )
        following.cancel()
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", default="1000,3000,10000")
    parser.add_argument(
        "--paced-pods",
        type=int,
        default=100,
        help="the last pods of each step (at most half of it), created at a steady rate once "
        "the others are Ready, whose startup is timed",
    )
    parser.add_argument(
        "--paced-rate", type=float, default=10.0, help="the paced pods created per second"
    )
    probes = parser.add_mutually_exclusive_group()
    probes.add_argument(
        "--heap",
        action="store_const",
        const=HEAP,
        dest="probe",
        help="run the virtual kubelet under tracemalloc and print where its bytes per pod go",
    )
    probes.add_argument(
        "--profile",
        action="store_const",
        const=PROFILE,
        dest="probe",
        help="run the virtual kubelets under cProfile and print where the restarted one's CPU "
        "went until it converged",
    )
    arguments = parser.parse_args()
    steps = sorted(int(step) for step in arguments.steps.split(","))
    heap = arguments.probe == HEAP
    # Each pod's ServiceAccount token is a Secret in far's twin namespace, which far's default
    # quota makes room for: a Secret per pod the Quota grants (up to 10,000) beside 2000.
    with BenchVirtualNode(
        pods_capacity=steps[-1] + 100, name="curve", probe=arguments.probe
    ) as scene:
        scene.wait_node_ready()
        heap_before = scene.probe_report() if heap else None
        points = asyncio.run(
            climb(scene, steps, Pacing(arguments.paced_pods, arguments.paced_rate))
        )
        heap_after = scene.probe_report() if heap else None
        print(f"\n== kill -9 with {steps[-1]} pods running, and a new virtual kubelet")
        restart = scene.restart(steps[-1])
        restarted = scene.probe_report() if arguments.probe == PROFILE else None

    idle = points[0]
    print(f"\n== results (the virtual kubelet with its pods all Ready, up to {steps[-1]})")
    print(
        "| pods | RSS (MiB) | peak RSS (MiB) | CPU (s, since start) | KiB per pod over idle "
        "| burst: pods/s | paced pods | their startup p50 / p99 (s) | CPU per paced pod (ms) "
        "| reconciles per pod: burst / paced | idle CPU (ms/s) |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for point in points:
        idle_cpu = f"{point.idle_cpu * 1000:.1f}"
        if not point.pods:
            print(
                f"| 0 | {point.rss:.1f} | {point.peak:.1f} | {point.cpu:.1f} | - | - | - | - | - "
                f"| - | {idle_cpu} |"
            )
            continue
        per_pod = (point.rss - idle.rss) * 1024 / point.pods
        rate = point.burst / point.seconds if point.seconds else 0.0
        startup = (
            f"{percentile(point.startup, 0.5):.2f} / {percentile(point.startup, 0.99):.2f}"
            if point.startup
            else "-"
        )
        paced_cpu = "-" if point.paced_cpu_ms is None else f"{point.paced_cpu_ms:.1f}"
        print(
            f"| {point.pods} | {point.rss:.1f} | {point.peak:.1f} | {point.cpu:.1f} | "
            f"{per_pod:.1f} | {rate:.0f} | {len(point.startup)} | {startup} | {paced_cpu} | "
            f"{point.burst_reconciles:.1f} / {point.paced_reconciles:.1f} | {idle_cpu} |"
        )
    last = points[-1]
    if last.startup:
        p99 = percentile(last.startup, 0.99)
        print(
            f"per-pod startup p99 with {last.pods} pods running: {p99:.2f} s ({len(last.startup)} "
            f"pods paced, {arguments.paced_rate:g} per second)   target <= {TARGETS['p99']:g} s: "
            + ("met" if p99 <= TARGETS["p99"] else "MISSED")
        )
    if last.paced_cpu_ms is not None:
        per_pod = last.paced_cpu_ms
        print(
            f"virtual kubelet CPU per paced pod with {last.pods} running: {per_pod:.1f} ms, "
            f"{last.paced_reconciles:.1f} reconciles each ({last.burst_reconciles:.1f} per pod "
            f"of the burst before them; its idle work in those seconds included; bench.offload "
            f"gives the CPU in bursts, the machine saturated)   target <= {TARGETS['cpu_ms']:g} "
            "ms: " + ("met" if per_pod <= TARGETS["cpu_ms"] else "MISSED")
        )
    print(
        f"restart with {steps[-1]} pods: converged in {restart.converged:.1f} s (target <= 10), "
        f"{restart.recreated} remote pods re-created (target 0); the new virtual kubelet's RSS "
        f"{restart.rss:.1f} MiB, peak {restart.peak:.1f} (its first list of every pod in)"
    )
    if heap_before is not None and heap_after is not None:
        print_heap(heap_before, heap_after, steps[-1])
        print(
            f"the Python heap traced is {heap_after['traced'] / 2**20:.1f} MiB of the virtual "
            f"kubelet's {points[-1].rss:.1f} MiB RSS then"
        )
    if restarted is not None:
        print_profile(
            {}, restarted["functions"], steps[-1], "its restart, from its start to converged"
        )


if __name__ == "__main__":
    main()
