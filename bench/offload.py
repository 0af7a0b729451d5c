"""Offloading against running locally, in one run (issue 4's benchmark; DESIGN §7 targets).

On a playground of its own (consumer `home` peered with provider `far` by `vkctl peer`, the
namespace offloaded by `vkctl offload namespace`: see bench/virtual_node.py; both clusters'
controller managers and schedulers unthrottled, so that no client's rate limit paces either run),
it times a Deployment of N replicas on home's local kwok node (the baseline), then the same
Deployment offloaded through one virtual kubelet, on the real path: ShadowPods written with home's
slice identity, admitted by far's webhook against the Quota's ledger, turned into Pods by far's
controller manager. It prints: time to all Ready for each, their rates (DESIGN §7 wants a baseline
of at least 200 pods/s) and their ratio; per-pod startup p50/p99 in that burst (first seen ->
Ready, watched: each pod waits its turn behind those before it, so bench.curve's pods paced are the
ones to read for the startup of one); when each pod's ServiceAccount token Secret reached the
provider, against its ShadowPod (a real kubelet waits for it); the virtual kubelet's peak RSS and
CPU seconds; the virtual kubelet's API writes per offloaded pod on the pod path (its heartbeats,
the Events it reflects and the ServiceAccount token path counted apart, each said why), the
informers each vk process runs (one watch each), and, apart from them, the provider's own writes
(its controller manager's and its webhook's); then `kill -9` of the virtual kubelet with N pods
running, a new one started, the time until it has converged and the number of remote pods
re-created (must be 0); then the throughput of one virtual kubelet (pods bound while none runs,
then one started), with where the machine's CPU went in that phase, the rates that CPU per pod
allows (the whole path on this machine; the virtual kubelet on a core of its own), and what far's
API server did (its requests, webhook calls, their wait for a seat in API Priority and Fairness
by priority level, and watch events per pod, from its own metrics).
Last, what its requests and watch events per pod cost alone, at the price of vk's API client
timed in the bench's own process (`client_costs`): the floor under its CPU per pod. `--heap`,
`--profile` and `--stages`: where the virtual kubelet's bytes and CPU per pod go (bench/probe.py;
`--stages` at the cost of a few per cent of its CPU, where cProfile triples it). `--pin`: the
virtual kubelet alone on a core, every other process on the rest, so that its CPU per pod is
measured without the clusters' processes on its core.

    .venv/bin/python -m bench.offload [--pods 1000] [--pin]
"""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import uvloop

import vk
from bench.probe import HEAP, PROFILE, STAGES
from bench.virtual_node import (
    LOCAL_NAMESPACE,
    NODE,
    REMOTE_NAMESPACE,
    BenchVirtualNode,
    Sample,
    apply,
    kubectl,
    proc_stats,
    samples,
)
from vk.api.constants import SERVICE_ACCOUNT_NAME_LABEL
from vk.api.offloading import ShadowPod
from vk.kube.client import JSON, KubeClient, resource_path
from vk.kube.informer import ADDED, Informer
from vk.kube.kubeconfig import load_kubeconfig_file
from vk.reflection.forge.tokens import POD_NAME_ANNOTATION

# DESIGN §7, and issue 20 for the memory: half of what Liqo reports for 10,000 pods.
TARGETS = {
    "baseline": 200.0,  # pods/s: what the ratio is taken against
    "ratio": 1.25,
    "p99": 5.0,
    "rss": 250.0,
    "writes": 3.0,
    "restart": 10.0,
    "throughput": 200.0,
    "cpu_ms": 3.0,
}
BACKLOG_LABEL = "bench-backlog"
CREATE_CONCURRENCY = 32


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


# How long the offloaded phase waits, once all pods are Ready at home, for the token Secrets
# still missing on the provider.
TOKENS_WAIT = 300.0


@dataclass(frozen=True)
class TokenArrivals:
    """When each offloaded pod's ServiceAccount token Secret came to the provider, against its
    ShadowPod. kwok marks a pod Ready whatever its volumes, so the pods' startup does not show
    it; a real kubelet starts no container before the Secret it mounts is there."""

    at_ready: int  # pods whose token Secret was on the provider when all were Ready at home
    lags: list[float]  # each pod's token Secret written after its ShadowPod, in seconds
    missing: int  # pods whose token Secret had not come within TOKENS_WAIT after that


async def offloaded_with_tokens(
    scene: BenchVirtualNode, n: int, start: Any
) -> tuple[float, list[float], TokenArrivals]:
    """`time_to_ready` of the offloaded rollout, watching the provider meanwhile for each pod's
    ShadowPod and token Secret (the Secret named by the pod it is for)."""
    async with KubeClient(load_kubeconfig_file(scene.far)) as far:
        shadow_pods = Informer(
            far, ShadowPod.group_version(), ShadowPod.PLURAL, namespace=REMOTE_NAMESPACE
        )
        secrets = Informer(
            far,
            "v1",
            "secrets",
            namespace=REMOTE_NAMESPACE,
            label_selector=SERVICE_ACCOUNT_NAME_LABEL,
        )
        shadow_pod_at: dict[str, float] = {}
        token_at: dict[str, float] = {}
        all_tokens = asyncio.Event()

        def on_shadow_pod(event: str, shadow_pod: JSON, _: JSON | None) -> None:
            if event == ADDED:
                shadow_pod_at.setdefault(shadow_pod["metadata"]["name"], time.monotonic())

        def on_secret(event: str, secret: JSON, _: JSON | None) -> None:
            pod = (secret["metadata"].get("annotations") or {}).get(POD_NAME_ANNOTATION)
            if event == ADDED and pod:
                token_at.setdefault(pod, time.monotonic())
                if len(token_at) >= n:
                    all_tokens.set()

        shadow_pods.add_handler(on_shadow_pod)
        secrets.add_handler(on_secret)
        following = [asyncio.create_task(i.run()) for i in (shadow_pods, secrets)]
        await shadow_pods.synced.wait()
        await secrets.synced.wait()
        elapsed, startup = await time_to_ready(scene.home, LOCAL_NAMESPACE, n, start)
        at_ready = len(token_at)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(all_tokens.wait(), TOKENS_WAIT)
        for task in following:
            task.cancel()
    lags = [token_at[pod] - at for pod, at in shadow_pod_at.items() if pod in token_at]
    return elapsed, startup, TokenArrivals(at_ready, lags, n - len(token_at))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")


# The virtual kubelet's writes that are not on the pod path, by what they are for: counted and
# printed apart (issue 20), each with why it is there.
HEARTBEAT, EVENTS, TOKENS, POD_PATH = "heartbeat", "events", "tokens", "pod path"
APART = {
    ("home", "leases"): HEARTBEAT,
    ("home", "nodes"): HEARTBEAT,
    ("home", "nodes/status"): HEARTBEAT,
    ("home", "events"): EVENTS,
    ("home", "serviceaccounts/token"): TOKENS,
    ("provider", "secrets"): TOKENS,
}
WHY = {
    EVENTS: "the provider's Events about each remote pod (its scheduler's), reflected home "
    "for `kubectl describe pod`",
    TOKENS: "each pod's ServiceAccount token: a TokenRequest at home, written to the provider "
    "as the Secret the remote pod mounts (as Liqo does)",
}


def purpose(labels: dict[str, str]) -> str:
    return APART.get((labels["client"], labels["resource"]), POD_PATH)


def writes(sample: Sample, what: str | None = None) -> float:
    """Write requests in a metrics sample: all of them (`what` None), or those of one purpose
    (HEARTBEAT, EVENTS, TOKENS, POD_PATH)."""
    total = 0.0
    for (name, labels), value in sample.items():
        label = dict(labels)
        if name != "vk_api_requests_total" or label["verb"] not in WRITE_VERBS:
            continue
        if what is None or purpose(label) == what:
            total += value
    return total


def write_breakdown(before: Sample, after: Sample) -> dict[tuple[tuple[str, str], ...], float]:
    """The write requests made between two samples, by their labels."""
    return {
        labels: value - before.get((name, labels), 0)
        for (name, labels), value in after.items()
        if name == "vk_api_requests_total"
        and dict(labels)["verb"] in WRITE_VERBS
        and value - before.get((name, labels), 0) > 0
    }


def print_watch_events(before: Sample, after: Sample, n: int) -> None:
    """The watch events the virtual kubelet took in between two samples, per pod, by client
    and resource: each is decoded, compacted and handed to its handlers, its share of the CPU
    per pod."""
    taken = counted_between(before, after, "vk_watch_events_total", ("client", "resource"))
    print(f"watch events per offloaded pod:        {sum(taken.values()) / n:7.2f}")
    for (client, resource), value in sorted(taken.items(), key=lambda item: -item[1]):
        if value / n >= 0.01:
            print(f"    {value / n:5.2f} per pod  {client:8s} {resource}")


def print_reconciles(before: Sample, after: Sample, n: int) -> None:
    """The reconciles the virtual kubelet ran between two samples, per pod, by queue (a key
    added to its queue while not waiting there already is one reconcile): each reads the
    caches and forges what it would write, the rest of the CPU per pod."""
    ran = counted_between(before, after, "vk_workqueue_adds_total", ("name",))
    print(f"reconciles per offloaded pod:          {sum(ran.values()) / n:7.2f}")
    for (queue,), value in sorted(ran.items(), key=lambda item: -item[1]):
        if value / n >= 0.01:
            print(f"    {value / n:5.2f} per pod  {queue}")


def counted_between(
    before: Sample, after: Sample, metric: str, by: tuple[str, ...]
) -> dict[tuple[str, ...], float]:
    """How much a counter grew between two samples, by the values of the labels `by` (the
    series that did not grow left out)."""
    grown: dict[tuple[str, ...], float] = {}
    for (name, labels), value in after.items():
        if name == metric and value > before.get((name, labels), 0.0):
            label = dict(labels)
            key = tuple(label[label_name] for label_name in by)
            grown[key] = grown.get(key, 0.0) + value - before.get((name, labels), 0.0)
    return grown


def print_breakdown(breakdown: dict[tuple[tuple[str, str], ...], float], n: int) -> None:
    for labels, value in sorted(breakdown.items(), key=lambda item: -item[1]):
        label = dict(labels)
        print(
            f"    {value / n:5.2f} per pod  {label['client']:8s} {label['verb']:6s} "
            f"{label['resource']:22s} {label['code']}"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pods", type=int, default=1000)
    parser.add_argument(
        "--pod-workers",
        type=int,
        default=None,
        help="the virtual kubelet's --pod-reflection-workers (default: the product's)",
    )
    parser.add_argument(
        "--serviceaccount-workers",
        type=int,
        default=None,
        help="the virtual kubelet's --serviceaccount-reflection-workers, the token path "
        "(default: the product's)",
    )
    probes = parser.add_mutually_exclusive_group()
    probes.add_argument(
        "--heap",
        action="store_const",
        const=HEAP,
        dest="probe",
        help="run the virtual kubelet under tracemalloc and print where its bytes per pod go "
        "(slower: its timings are not the product's)",
    )
    probes.add_argument(
        "--profile",
        action="store_const",
        const=PROFILE,
        dest="probe",
        help="run the virtual kubelet under cProfile and print where its CPU per pod goes in "
        "the offloaded phase (slower: its timings are not the product's)",
    )
    probes.add_argument(
        "--stages",
        action="store_const",
        const=STAGES,
        dest="probe",
        help="time the virtual kubelet's stages (each controller's reconciles; each watch "
        "event's decode, keep and handlers; the bytes read) and print their CPU per pod in "
        "the offloaded phase",
    )
    parser.add_argument(
        "--pin",
        action="store_true",
        help="run the virtual kubelet alone on the last core, everything else on the others: "
        "its CPU per pod without the clusters' processes on its core",
    )
    arguments = parser.parse_args()
    n = arguments.pods
    probed: dict[str, Any] | None = None
    # The Deployment's pods and as many bound by the benchmark itself.
    # Each pod's ServiceAccount token is a Secret in far's twin namespace, which far bounds
    # (2000 and one per pod granted, up to 10,000, by default): room for all 2N at any N, or
    # the benchmark measures refusals.
    with BenchVirtualNode(
        pods_capacity=2 * n + 100,
        twin_namespace_quota=f"secrets={2 * n + 100}",
        name="offload",
        probe=arguments.probe,
        workers={
            resource: count
            for resource, count in (
                ("pod", arguments.pod_workers),
                ("serviceaccount", arguments.serviceaccount_workers),
            )
            if count is not None
        },
        pin=arguments.pin,
    ) as scene:
        home = scene.home
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

        process = scene.process
        assert process is not None
        scene.wait_node_ready()
        held = {0: scene.stats_by_process()}
        before = scene.metrics()
        provider_before = scene.provider_metrics()
        _, _, cpu_before = proc_stats(process.pid)
        # The probe's report before the pods: their bytes and CPU are what it adds.
        probed_before = scene.probe_report() if arguments.probe else None
        print(f"\n== the same {n} replicas offloaded through one virtual kubelet")
        remote_time, startup, tokens = asyncio.run(
            offloaded_with_tokens(
                scene,
                n,
                lambda: apply(home, deployment("bench", LOCAL_NAMESPACE, n, NODE, virtual=True)),
            )
        )
        time.sleep(2)  # let the last status writes land before counting
        after = scene.metrics()
        provider_after = scene.provider_metrics()
        _, peak_rss, cpu_after = proc_stats(process.pid)
        held[n] = scene.stats_by_process()
        cpu = cpu_after - cpu_before
        per_pod = {
            what: (writes(after, what) - writes(before, what)) / n
            for what in (POD_PATH, EVENTS, TOKENS)
        }
        heartbeat_writes = writes(after, HEARTBEAT) - writes(before, HEARTBEAT)
        breakdown = write_breakdown(before, after)
        provider = {
            component: write_breakdown(provider_before[component], provider_after[component])
            for component in provider_after
        }
        provider_writes = {
            component: (writes(provider_after[component]) - writes(provider_before[component])) / n
            for component in provider_after
        }
        print(f"all Ready in {remote_time:.1f}s")
        informers = {
            "virtual kubelet": after.get(("vk_informers", ()), 0),
            **{
                f"far's {component}": sample.get(("vk_informers", ()), 0)
                for component, sample in provider_after.items()
            },
        }
        if arguments.probe:
            probed = scene.probe_report()

        print(f"\n== kill -9 with {n} pods running, and a new virtual kubelet")
        restart = scene.restart(n)

        print(
            f"\n== throughput: {n} more pods bound to the virtual node by the benchmark itself "
            "(no ReplicaSet controller, no scheduler: nothing of home's paces them) while no "
            "virtual kubelet runs, then a new one started"
        )
        scene.kill()
        backlog = asyncio.run(offload_backlog(scene, n))
        held[2 * n] = scene.stats_by_process()
        print(
            f"home took the {n} pods in {backlog.created:.1f} s; the new virtual kubelet "
            f"wrote their ShadowPods in {backlog.offloaded:.1f} s after it started "
            f"(first to last: {backlog.first_to_last:.1f} s)"
        )
        # Last: its namespace's deletion must not be in the way of what is timed before. On
        # uvloop, the virtual kubelet's event loop (vk/kube/daemon.py): the price it pays.
        costs = uvloop.run(
            client_costs(scene.home, max(3 * CREATE_CONCURRENCY, min(n, COSTS_PODS)))
        )

    throughput = n / backlog.first_to_last if backlog.first_to_last > 0 else float("inf")
    ratio = remote_time / local_time
    p50, p99 = percentile(startup, 0.50), percentile(startup, 0.99)

    def verdict(ok: bool) -> str:
        return "met" if ok else "MISSED"

    print(f"\n== results ({n} pods)")
    if scene.cores is not None:
        print(
            f"pinned (--pin): the virtual kubelet alone on core "
            f"{', '.join(map(str, sorted(scene.cores.virtual_kubelet)))}, every other process "
            f"on {', '.join(map(str, sorted(scene.cores.others)))}"
        )
    baseline_rate = n / local_time
    print(
        f"time to all Ready, local kwok node:    {local_time:7.1f} s   ({baseline_rate:.0f} "
        f"pods/s; DESIGN §7 wants a baseline of >= 200: "
        f"{verdict(baseline_rate >= TARGETS['baseline'])})"
    )
    print(
        f"time to all Ready, offloaded:          {remote_time:7.1f} s   "
        f"({n / remote_time:.0f} pods/s)"
    )
    print(
        f"ratio offloaded / local:               {ratio:7.2f}    target <= 1.25: "
        f"{verdict(ratio <= TARGETS['ratio'])}"
    )
    print(
        f"per-pod startup p50 / p99:             {p50:7.2f} s / {p99:.2f} s   (a burst of {n}) "
        f"target p99 <= 5 s: {verdict(p99 <= TARGETS['p99'])}"
    )
    print(
        f"virtual kubelet peak RSS:              {peak_rss:7.1f} MiB   target <= 250: "
        f"{verdict(peak_rss <= TARGETS['rss'])}"
    )
    print(
        f"virtual kubelet CPU, offloaded phase:  {cpu:7.1f} s   ({cpu / n * 1000:.1f} ms per pod)"
    )
    print(
        f"throughput of one virtual kubelet:     {throughput:7.1f} pods/s (bound at home -> "
        f"ShadowPod written, {n} pods)   target >= 200: "
        f"{verdict(throughput >= TARGETS['throughput'])}"
    )
    print(
        f"virtual kubelet CPU, throughput phase: {backlog.cpu:7.1f} s   "
        f"({backlog.cpu / n * 1000:.1f} ms per pod, its start and resync of the {n} running "
        f"included)   target <= 3 ms: {verdict(backlog.cpu / n * 1000 <= TARGETS['cpu_ms'])}"
    )
    print_machine_cpu(backlog)
    print_ceilings(backlog, n)
    print_far_apiserver(backlog, n)
    print(
        f"  the virtual kubelet's API writes in that phase: "
        f"{writes(backlog.kubelet_metrics) / n:.2f} per pod"
    )
    print_breakdown(write_breakdown({}, backlog.kubelet_metrics), n)
    print(
        f"API writes per offloaded pod:          {per_pod[POD_PATH]:7.2f}    on the pod path, "
        f"target <= 3: {verdict(per_pod[POD_PATH] <= TARGETS['writes'])}   "
        f"(+ {heartbeat_writes:.0f} heartbeat writes in all)"
    )
    for what in (EVENTS, TOKENS):
        print(f"  and apart, {what}: {per_pod[what]:5.2f} per pod: {WHY[what]}")
    print_breakdown(breakdown, n)
    print_token_arrivals(tokens, n)
    print_watch_events(before, after, n)
    print_reconciles(before, after, n)
    print_io_floor(before, after, n, costs, cpu)
    print(
        "informers (one watch each): "
        + ", ".join(f"{name} {count:.0f}" for name, count in informers.items())
    )
    for component, per_pod in provider_writes.items():
        print(f"far's {component} API writes per pod: {per_pod:7.2f}    (the provider's own)")
        print_breakdown(provider[component], n)
    print_provider_memory(held)
    print(
        f"restart with {n} pods: converged in    {restart.converged:7.1f} s   target <= 10: "
        f"{verdict(restart.converged <= TARGETS['restart'])}"
    )
    print(
        f"remote pods re-created by the restart: {restart.recreated:7d}    target 0: "
        f"{verdict(restart.recreated == 0)}"
    )
    if probed is not None and probed_before is not None and probed["mode"] == HEAP:
        print_heap(probed_before, probed, n)
    if probed is not None and probed_before is not None and probed["mode"] == PROFILE:
        print_profile(probed_before["functions"], probed["functions"], n)
    if probed is not None and probed_before is not None and probed["mode"] == STAGES:
        print_stages(probed_before, probed, n)


def print_token_arrivals(tokens: TokenArrivals, n: int) -> None:
    if not tokens.lags:
        print("token Secrets on the provider:         none came")
        return
    print(
        f"token Secrets on the provider:         {tokens.at_ready} of {n} when all were Ready "
        f"at home; each written after its ShadowPod (negative: before), p50 / p99 / max "
        f"{percentile(tokens.lags, 0.50):.2f} / {percentile(tokens.lags, 0.99):.2f} / "
        f"{max(tokens.lags):.2f} s"
        + (f"; {tokens.missing} still missing {TOKENS_WAIT:.0f} s later" if tokens.missing else "")
        + " (a real kubelet starts a pod's containers only once its token Secret is there)"
    )


def print_stages(before: dict[str, Any], after: dict[str, Any], n: int) -> None:
    """The CPU of the virtual kubelet's stages in a phase with `n` pods (bench/probe.py's
    `stages` reports before and after it), per pod, the costliest first; and what is left of
    its CPU: its event loop, work queues, timers and metrics."""
    process_cpu = after["process_cpu"] - before["process_cpu"]
    phase = {}
    for stage, (count, seconds) in after["stages"].items():
        count_before, seconds_before = before["stages"].get(stage, (0, 0.0))
        phase[stage] = (count - count_before, seconds - seconds_before)
    # The collector runs inside the other stages: its time is theirs already.
    staged = sum(seconds for stage, (_, seconds) in phase.items() if not stage.startswith("("))
    print(
        f"\n== the virtual kubelet's CPU by stage in the offloaded phase: {staged / n * 1000:.2f} "
        f"ms per pod of its {process_cpu / n * 1000:.2f} (the rest: its event loop, work "
        "queues, timers, metrics)"
    )
    print("    ms/pod   runs/pod   us each  stage")
    for stage, (count, seconds) in sorted(phase.items(), key=lambda item: -item[1][1]):
        if seconds / n >= 0.000005:
            each = seconds / max(count, 1) * 1e6
            print(f"    {seconds / n * 1000:6.3f}  {count / n:9.2f}  {each:8.0f}  {stage}")


def print_provider_memory(held: dict[int, dict[str, tuple[float, float, float]]]) -> None:
    """What the provider's own vk processes hold with no pod, N and 2N pods offloaded to it
    (every ShadowPod and Pod is in their caches): their cost grows with the consumers' pods,
    in a cluster whose owner pays for it."""
    counts = sorted(held)
    print(
        "the provider's vk processes' RSS (MiB) with "
        + ", ".join(f"{count} pods" for count in counts)
        + ", and KiB per pod:"
    )
    for name in ("far vk-controller-manager", "far vk-webhook"):
        if not all(name in held[count] for count in counts):
            continue
        rss = [held[count][name][0] for count in counts]
        per_pod = (rss[-1] - rss[0]) * 1024 / counts[-1] if counts[-1] else 0.0
        peak = held[counts[-1]][name][1]
        print(
            "    "
            + " / ".join(f"{value:6.1f}" for value in rss)
            + f"   {per_pod:5.1f} KiB per pod   (peak {peak:.1f})  {name.removeprefix('far ')}"
        )


def print_machine_cpu(backlog: Backlog) -> None:
    """Where the machine's CPU went in the throughput phase: both clusters share its cores, so
    the rate one virtual kubelet reaches is bounded by what the rest of the path costs too."""
    total = sum(backlog.machine_cpu.values())
    cores = os.cpu_count() or 1
    print(
        f"  the machine's CPU in that phase: {total:.1f} s over {backlog.offloaded:.1f} s on "
        f"{cores} cores ({total / (backlog.offloaded * cores):.0%} busy), by process:"
    )
    for name, seconds in sorted(backlog.machine_cpu.items(), key=lambda item: -item[1]):
        if seconds >= 0.05:
            print(f"    {seconds:7.1f} s  {name}")


def request_kind(verb: str, resource: str, subresource: str) -> str:
    return f"{verb} {resource}" + (f"/{subresource}" if subresource else "")


def print_ceilings(backlog: Backlog, n: int) -> None:
    """The rates the CPU per pod allows: of the whole path on this machine's cores (what the
    throughput above cannot pass), and of the virtual kubelet alone on a core of its own (one
    event loop: what it could reach if the API servers ran elsewhere and kept up). Both
    include, as the CPU above does, the virtual kubelet's start and its resync of the pods
    running."""
    cores = os.cpu_count() or 1
    path = sum(backlog.machine_cpu.values()) / n
    kubelet = backlog.cpu / n
    print(
        f"  the rates that CPU per pod allows: the whole path {path * 1000:.1f} ms per pod, at "
        f"most {cores / path:.0f} pods/s on these {cores} cores; the virtual kubelet alone "
        f"{kubelet * 1000:.1f} ms, at most {1 / kubelet:.0f} pods/s on a core of its own"
    )


def print_far_apiserver(backlog: Backlog, n: int) -> None:
    """What far's API server did in the throughput phase, from its own metrics: its requests
    by kind (each one's time includes the admission webhooks and etcd it waited for), the
    webhooks it called, and the watch events it sent. Watches are left out of the requests:
    one lasts as long as it is open."""
    before, after = backlog.far_apiserver
    metric, by_kind = "apiserver_request_duration_seconds", ("verb", "resource", "subresource")
    counts = counted_between(before, after, f"{metric}_count", by_kind)
    seconds = counted_between(before, after, f"{metric}_sum", by_kind)
    kinds = sorted(
        (kind for kind, count in counts.items() if count >= 1 and kind[0] != "WATCH"),
        key=lambda kind: -counts[kind],
    )
    print(
        f"  far's API server in that phase: {sum(counts[k] for k in kinds) / n:.2f} requests "
        f"per pod (not counting watches), by kind (per pod, ms each):"
    )
    for kind in kinds[:12]:
        each = seconds.get(kind, 0.0) / counts[kind] * 1000
        print(f"    {counts[kind] / n:7.2f}  {each:6.1f} ms  {request_kind(*kind)}")
    webhook = "apiserver_admission_webhook_admission_duration_seconds"
    calls = counted_between(before, after, f"{webhook}_count", ("name",))
    took = counted_between(before, after, f"{webhook}_sum", ("name",))
    for name in sorted(calls, key=lambda name: -calls[name]):
        print(
            f"    its webhook {name[0]}: {calls[name] / n:.2f} calls per pod, "
            f"{took.get(name, 0.0) / calls[name] * 1000:.1f} ms each"
        )
    # API Priority and Fairness: how long requests waited for a seat, by priority level (the
    # consumer's requests are in vk-peers, whose seats are a share of the server's), so that a
    # throughput held by queueing there is told from one held by the CPU.
    wait = "apiserver_flowcontrol_request_wait_duration_seconds"
    queued = counted_between(before, after, f"{wait}_count", ("priority_level",))
    waited = counted_between(before, after, f"{wait}_sum", ("priority_level",))
    levels = sorted(
        (level for level, count in queued.items() if count >= 1),
        key=lambda level: -waited.get(level, 0.0),
    )
    print(
        "    its requests' wait for a seat (API Priority and Fairness), by priority level: "
        + ", ".join(
            f"{level[0]} {queued[level] / n:.2f} per pod, "
            f"{waited.get(level, 0.0) / queued[level] * 1000:.1f} ms each"
            for level in levels[:4]
        )
    )
    events = counted_between(before, after, "apiserver_watch_events_total", ("resource",))
    sizes = counted_between(before, after, "apiserver_watch_events_sizes_sum", ("resource",))
    sent = sorted(events, key=lambda resource: -events[resource])
    print(
        f"    watch events it sent: {sum(events.values()) / n:.1f} per pod, "
        f"{sum(sizes.values()) / n / 1024:.1f} KiB per pod: "
        + ", ".join(
            f"{r[0]} {events[r] / n:.1f} ({sizes.get(r, 0.0) / events[r] / 1024:.1f} KiB each)"
            for r in sent[:6]
        )
    )


def print_profile(
    before: dict[str, list[float]],
    after: dict[str, list[float]],
    n: int,
    phase_name: str = "the offloaded phase",
) -> None:
    """Where the virtual kubelet's CPU went in a phase with `n` pods: the functions with the
    most of their own, per pod."""
    phase = {
        function: [
            now - was for now, was in zip(totals, before.get(function, [0, 0, 0]), strict=True)
        ]
        for function, totals in after.items()
    }
    total = sum(own for _, own, _ in phase.values())
    print(
        f"\n== the virtual kubelet's CPU in {phase_name} (cProfile on CPU time, its "
        f"overhead in): {total:.1f} s, {total / n * 1000:.2f} ms per pod"
    )
    print("    own ms/pod  cumulative ms/pod  calls/pod  function")
    for function, (calls, own, cumulative) in sorted(phase.items(), key=lambda i: -i[1][1])[:30]:
        print(
            f"    {own / n * 1000:10.3f}  {cumulative / n * 1000:17.3f}  {calls / n:9.1f}  "
            f"{function}"
        )
    print("  own CPU by where the functions are (ms/pod):")
    for where, own in sorted(own_cpu_by_package(phase).items(), key=lambda i: -i[1])[:8]:
        print(f"    {own / n * 1000:10.3f}  {where}")
    # What each of vk's functions costs with all it calls: which of its steps to make cheaper
    # (a coroutine's time counts only while it runs, not while it awaits).
    ours = {function: totals for function, totals in phase.items() if is_vk_function(function)}
    print("  vk's functions by cumulative CPU (with what they call):")
    print("    cumulative ms/pod  calls/pod  function")
    for function, (calls, _, cumulative) in sorted(ours.items(), key=lambda i: -i[1][2])[:25]:
        print(f"    {cumulative / n * 1000:17.3f}  {calls / n:9.1f}  {function}")


def own_cpu_by_package(phase: dict[str, list[float]]) -> dict[str, float]:
    """Own CPU seconds by where each function is: vk's own modules (what compiling them could
    speed up), each library, the standard library, and the interpreter's built-ins."""
    totals: dict[str, float] = {}
    for function, (_, own, _) in phase.items():
        if is_vk_function(function):
            where = "vk"
        elif function.startswith("~"):
            where = "built-ins (C)"
        elif function.startswith("/"):
            where = "standard library"
        else:
            where = function.split("/", 1)[0].split(":", 1)[0]
        totals[where] = totals.get(where, 0.0) + own
    return totals


def is_vk_function(function: str) -> bool:
    """Whether a profile's function (named as bench/probe.py names it: its path below vk/ or
    below site-packages/) is one of vk's."""
    return function.split("/", 1)[0] in VK_PACKAGES


VK_PACKAGES = frozenset(
    path.name for path in Path(vk.__file__).parent.iterdir() if (path / "__init__.py").exists()
)


def print_heap(before: dict[str, Any], after: dict[str, Any], n: int) -> None:
    """Where the virtual kubelet's Python heap went with `n` pods offloaded: what it holds
    then less what it held before them (its connections' buffers, its imports are no pod's)."""
    mib = 1024 * 1024
    added = after["traced"] - before["traced"]
    print(
        f"\n== the virtual kubelet's Python heap with {n} pods (tracemalloc): "
        f"{after['traced'] / mib:.1f} MiB, {before['traced'] / mib:.1f} before them: "
        f"{added / n / 1024:.1f} KiB per pod"
    )
    print("caches (bytes kept alive by each, per pod):")
    for cache in after["caches"]:
        if cache["bytes"]:
            print(
                f"    {cache['bytes'] / n / 1024:6.1f} KiB  {cache['objects']:6d} objects  "
                f"{cache['informer']}"
            )
    print("allocation sites alive, added by the pods (per pod):")
    was = {site["site"]: site for site in before["sites"]}
    grown = [
        (
            site["bytes"] - was.get(site["site"], {}).get("bytes", 0),
            site["blocks"] - was.get(site["site"], {}).get("blocks", 0),
            site["site"],
        )
        for site in after["sites"]
    ]
    for size, blocks, where in sorted(grown, reverse=True)[:20]:
        if size > 0:
            print(f"    {size / n / 1024:6.1f} KiB  {blocks:8d} blocks  {where}")


# Pods created to time vk's client (at most: the bench's own size if smaller, and at least
# three times as many as it creates at a time).
COSTS_PODS = 300
COSTS_NAMESPACE = "bench-client-costs"


@dataclass(frozen=True)
class ClientCosts:
    request: float  # CPU seconds of one request of vk's client (a pod created)
    watch_event: float  # CPU seconds of one watch event of a pod taken into an informer


async def client_costs(kubeconfig: str, n: int) -> ClientCosts:
    """What vk's API client costs this process's CPU (the same code as the virtual kubelet's),
    in a namespace of its own: first an informer following it while another process creates
    `n` pods there, one watch event each as they come (decoded, compacted, cached, handed to a
    handler); then `n` pods created here, a request each (once as many as it creates at a time
    have opened their connections). The pods are bound to no node there is, so nothing else
    acts on them; the namespace goes with them."""
    namespace = f"{COSTS_NAMESPACE}-{os.getpid()}-{time.monotonic_ns() % 10**6}"
    async with KubeClient(load_kubeconfig_file(kubeconfig)) as client:
        await client.create("/api/v1/namespaces", {"metadata": {"name": namespace}})
        pods = Informer(client, "v1", "pods", namespace=namespace)
        all_seen = asyncio.Event()
        pods.add_handler(lambda *_: all_seen.set() if len(pods.store) >= n else None)
        following = asyncio.create_task(pods.run())
        await pods.synced.wait()
        loop = asyncio.get_running_loop()
        with concurrent.futures.ProcessPoolExecutor(1) as other:
            # The other process started first: forking this one, as large as the bench has
            # grown by then, costs it more than a few hundred watch events do.
            await loop.run_in_executor(other, int)
            began = time.process_time()
            await loop.run_in_executor(other, create_costs_pods, kubeconfig, namespace, range(n))
        await asyncio.wait_for(all_seen.wait(), 300)
        watch_event = (time.process_time() - began) / n
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)

        await create_pods(client, namespace, range(n, n + 2 * CREATE_CONCURRENCY))
        began = time.process_time()
        await create_pods(client, namespace, range(n + 2 * CREATE_CONCURRENCY, 2 * n))
        request = (time.process_time() - began) / (n - 2 * CREATE_CONCURRENCY)
        await client.delete(f"/api/v1/namespaces/{namespace}")
    return ClientCosts(request=request, watch_event=watch_event)


async def create_pods(client: KubeClient, namespace: str, indexes: range) -> None:
    """Pods `costs-<index>`, bound to a node there is not, CREATE_CONCURRENCY at a time."""
    path = resource_path("v1", "pods", namespace=namespace)
    limit = asyncio.Semaphore(CREATE_CONCURRENCY)
    template = bound_pod(0)

    async def create(index: int) -> None:
        pod = {
            **template,
            "metadata": {"name": f"costs-{index}"},
            "spec": {**template["spec"], "nodeName": "bench-no-such-node"},
        }
        async with limit:
            await client.create(path, pod)

    await asyncio.gather(*(create(i) for i in indexes))


def create_costs_pods(kubeconfig: str, namespace: str, indexes: range) -> None:
    """`create_pods` in a process of its own."""

    async def creating() -> None:
        async with KubeClient(load_kubeconfig_file(kubeconfig)) as client:
            await create_pods(client, namespace, indexes)

    asyncio.run(creating())


def print_io_floor(before: Sample, after: Sample, n: int, costs: ClientCosts, cpu: float) -> None:
    """What the virtual kubelet's requests and watch events per pod cost at vk's client's price
    (`client_costs`): the floor under its CPU per pod that no reconcile can go below."""
    requests = (
        sum(
            counted_between(before, after, "vk_api_requests_total", ("verb",)).get((verb,), 0.0)
            for verb in ("GET", "POST", "PUT", "PATCH", "DELETE")
        )
        / n
    )
    events = sum(counted_between(before, after, "vk_watch_events_total", ()).values()) / n
    floor = requests * costs.request + events * costs.watch_event
    print(
        f"its requests and watch events alone:   {floor * 1000:7.1f} ms per pod, of its "
        f"{cpu / n * 1000:.1f}   ({requests:.2f} requests at {costs.request * 1000:.2f} ms, "
        f"{events:.2f} watch events at {costs.watch_event * 1000:.2f} ms: vk's client timed "
        "in this process against home's API server)"
    )


@dataclass(frozen=True)
class Backlog:
    created: float  # seconds home took to accept the pods
    offloaded: float  # from the virtual kubelet's start to the last ShadowPod written
    first_to_last: float  # from the first ShadowPod written to the last
    cpu: float  # the virtual kubelet's CPU seconds until then
    # Every process's CPU seconds from the virtual kubelet's start to the last ShadowPod.
    machine_cpu: dict[str, float]
    # far's API server's own metrics, before and after.
    far_apiserver: tuple[Sample, Sample]
    kubelet_metrics: Sample  # the new virtual kubelet's, at the last ShadowPod


def bound_pod(index: int) -> JSON:
    """A pod bound to the virtual node by its creator, as the scheduler would bind it."""
    spec = deployment("backlog", LOCAL_NAMESPACE, 1, NODE, virtual=True)["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"backlog-{index}", "labels": {BACKLOG_LABEL: "true"}},
        "spec": {**spec["spec"], "nodeName": NODE},
    }


async def offload_backlog(scene: BenchVirtualNode, n: int) -> Backlog:
    """Creates `n` pods bound to the virtual node (none running it), then starts a virtual
    kubelet and waits for the n ShadowPods on the provider."""
    began = time.monotonic()
    async with KubeClient(load_kubeconfig_file(scene.home)) as home:
        limit = asyncio.Semaphore(CREATE_CONCURRENCY)
        path = resource_path("v1", "pods", namespace=LOCAL_NAMESPACE)

        async def create(index: int) -> None:
            async with limit:
                await home.create(path, bound_pod(index))

        await asyncio.gather(*(create(i) for i in range(n)))
    created = time.monotonic() - began
    async with KubeClient(load_kubeconfig_file(scene.far)) as far:
        shadows = Informer(
            far,
            ShadowPod.group_version(),
            ShadowPod.PLURAL,
            namespace=REMOTE_NAMESPACE,
            label_selector=f"{BACKLOG_LABEL}=true",
        )
        written: list[float] = []
        done = asyncio.Event()

        def on_event(event: str, _: JSON, __: JSON | None) -> None:
            if event == ADDED:
                written.append(time.monotonic())
                if len(written) >= n:
                    done.set()

        shadows.add_handler(on_event)
        following = asyncio.create_task(shadows.run())
        await shadows.synced.wait()
        apiserver_before = samples(await far.get_text("/metrics"))
        machine_before = scene.cpu_by_process()
        started = time.monotonic()
        process = scene.start_kubelet()
        _, _, cpu_before = proc_stats(process.pid)
        await asyncio.wait_for(done.wait(), 900)
        _, _, cpu_after = proc_stats(process.pid)
        machine_after = scene.cpu_by_process()
        kubelet_metrics = scene.metrics()
        apiserver_after = samples(await far.get_text("/metrics"))
        following.cancel()
    machine_cpu = {
        name: seconds - machine_before.get(name, 0.0) for name, seconds in machine_after.items()
    }
    return Backlog(
        created,
        written[-1] - started,
        written[-1] - written[0],
        cpu_after - cpu_before,
        machine_cpu,
        (apiserver_before, apiserver_after),
        kubelet_metrics,
    )


if __name__ == "__main__":
    main()
