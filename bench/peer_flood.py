"""A consumer flooding its provider's API server, and what the provider's own users feel of it,
in one run: the priority level `vk-peers` against the same flood with vk's FlowSchema rules
removed (the consumer then in `global-default`, where every user and tool of the cluster that
is no ServiceAccount waits).

home peers with far. The flood: `--workers` concurrent loops, for `--seconds`, each listing
the `--configmaps` ConfigMaps of 32 KiB of home's twin namespace on far as home's slice
identity (an allowed request that holds the API server a while). The victim: alice, a user of
far's own (a client certificate of far's CSR API, no group), asking for `/api` in turn. In
`--rounds` rounds, the three phases in turn (vk's rules written and removed by the benchmark):
no flood (the baseline), the flood in `vk-peers`, the flood in `global-default`. Prints alice's
latency in each, against the baseline and between the two floods, the flood's own rate, and
far's API Priority and Fairness: how long requests waited in each level's queues. On two
cores the flood takes the CPU too, which no priority level shares out: what alice still feels
in `vk-peers` is that.

    .venv/bin/python -m bench.peer_flood [--workers 120] [--seconds 10] [--configmaps 300]
        [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import statistics
import time
from pathlib import Path

import yaml

from bench.offload import percentile
from bench.virtual_node import (
    REMOTE_NAMESPACE,
    SECRET,
    TENANT,
    BenchVirtualNode,
    Sample,
    kubectl,
    samples,
)
from vk.cli.peering import sign_client_certificate
from vk.controllers.peer_flowschemas import TENANTS_FLOW_SCHEMA
from vk.kube.client import KubeClient, resource_path
from vk.kube.kubeconfig import SECRET_KUBECONFIG_KEY, load_kubeconfig_file, parse_secret_kubeconfig
from vk.kube.pki import forge_client_csr, forge_kubeconfig, new_private_key, private_key_pem

VICTIM = "alice"
CONFIGMAP_BYTES = 32 * 1024
# Within the 500 ConfigMaps a twin namespace holds by default, with room for reflection's.
MAX_CONFIGMAPS = 400
WAIT_METRIC = "apiserver_flowcontrol_request_wait_duration_seconds"


async def victim_kubeconfig(far: Path) -> dict[str, object]:
    """alice's kubeconfig on far: a client certificate of far's own CSR API, no group."""
    admin = load_kubeconfig_file(far)
    assert admin.ca_pem is not None
    key = new_private_key()
    async with KubeClient(admin) as client:
        certificate = await sign_client_certificate(
            client, f"bench-{VICTIM}", forge_client_csr(key, VICTIM, ())
        )
    return forge_kubeconfig(
        "far", admin.server, admin.ca_pem, certificate, private_key_pem(key), VICTIM
    )


def slice_identity(home: Path) -> bytes:
    """home's slice identity on far: the kubeconfig its virtual kubelet uses."""
    secret = json.loads(kubectl(home, "get", "secret", SECRET, "-n", TENANT, "-o", "json"))
    return base64.b64decode(secret["data"][SECRET_KUBECONFIG_KEY])


def fill_twin_namespace(far: Path, count: int) -> None:
    filler = "x" * CONFIGMAP_BYTES
    items = [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"flood-{index}", "namespace": REMOTE_NAMESPACE},
            "data": {"filler": filler},
        }
        for index in range(count)
    ]
    for start in range(0, count, 50):
        batch = {"apiVersion": "v1", "kind": "List", "items": items[start : start + 50]}
        kubectl(far, "apply", "-f", "-", input=json.dumps(batch))


async def victim_latencies(client: KubeClient, until: float) -> list[float]:
    latencies = []
    while time.monotonic() < until:
        started = time.monotonic()
        await client.get_text("/api")
        latencies.append(time.monotonic() - started)
    return latencies


async def flood(client: KubeClient, workers: int, until: float) -> int:
    path = resource_path("v1", "configmaps", namespace=REMOTE_NAMESPACE)
    lists = 0

    async def worker() -> None:
        nonlocal lists
        while time.monotonic() < until:
            await client.get(path)
            lists += 1

    await asyncio.gather(*(worker() for _ in range(workers)))
    return lists


async def phase(
    victim: Path, flooder: bytes | None, workers: int, seconds: float
) -> tuple[list[float], int]:
    """alice's latencies for `seconds`, with the flood meanwhile if `flooder` is given, and how
    many lists the flood made."""
    until = time.monotonic() + seconds
    async with KubeClient(load_kubeconfig_file(victim), name="victim") as alice:
        if flooder is None:
            return await victim_latencies(alice, until), 0
        async with KubeClient(parse_secret_kubeconfig(flooder), name="flood") as consumer:
            latencies, lists = await asyncio.gather(
                victim_latencies(alice, until), flood(consumer, workers, until)
            )
    return latencies, lists


def waits(before: Sample, after: Sample, priority_level: str) -> tuple[float, float]:
    """Requests that waited in `priority_level`'s queues between two samples, and their mean
    wait (s)."""

    def total(sample: Sample, suffix: str) -> float:
        return sum(
            value
            for (name, labels), value in sample.items()
            if name == f"{WAIT_METRIC}_{suffix}"
            and dict(labels).get("priority_level") == priority_level
        )

    count = total(after, "count") - total(before, "count")
    seconds = total(after, "sum") - total(before, "sum")
    return count, seconds / count if count else 0.0


def vk_rules(far: Path, within: float = 60.0) -> list[dict[str, object]]:
    """far's rules for its consumers, once its controller manager has named home there."""
    deadline = time.monotonic() + within
    while True:
        schema = json.loads(kubectl(far, "get", "flowschema", TENANTS_FLOW_SCHEMA, "-o", "json"))
        if rules := schema["spec"].get("rules"):
            return list(rules)
        if time.monotonic() > deadline:
            raise RuntimeError(f"far's {TENANTS_FLOW_SCHEMA} named no consumer in {within:g} s")
        time.sleep(0.5)


def set_rules(far: Path, rules: list[dict[str, object]] | None) -> None:
    patch = json.dumps({"spec": {"rules": rules}})
    kubectl(far, "patch", "flowschema", TENANTS_FLOW_SCHEMA, "--type=merge", "-p", patch)


def far_metrics(far: Path) -> Sample:
    return samples(kubectl(far, "get", "--raw", "/metrics"))


def percentiles(latencies: list[float]) -> tuple[float, float]:
    """p50 and p99, in ms."""
    return percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, default=120, help="concurrent lists of the flood")
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each phase")
    parser.add_argument("--configmaps", type=int, default=300, help="32 KiB each, listed")
    parser.add_argument("--rounds", type=int, default=3, help="of the three phases in turn")
    args = parser.parse_args()
    if min(args.workers, args.seconds, args.configmaps, args.rounds) <= 0:
        parser.error("--workers, --seconds, --configmaps and --rounds must be positive")
    if args.configmaps > MAX_CONFIGMAPS:
        parser.error(f"--configmaps: at most {MAX_CONFIGMAPS}, within a twin namespace's quota")

    with BenchVirtualNode(pods_capacity=110, name="peer-flood") as scene:
        fill_twin_namespace(scene.far, args.configmaps)
        victim = scene.scratch / "alice.kubeconfig"
        victim.write_text(yaml.safe_dump(asyncio.run(victim_kubeconfig(scene.far))))
        flooder = slice_identity(scene.home)
        rules = vk_rules(scene.far)
        # vk's rules on and off in turn, by the benchmark: far's controller manager, which
        # would write them again, stopped.
        scene.playground.stop_component("far", "vk-controller-manager")
        results: dict[str, list[tuple[list[float], int, Sample, Sample]]] = {}
        for round_ in range(args.rounds):
            print(f"round {round_ + 1} of {args.rounds}", flush=True)
            for name, who, written in (
                ("no flood", None, rules),
                ("flood in vk-peers", flooder, rules),
                ("flood in global-default", flooder, None),
            ):
                set_rules(scene.far, written)
                before = far_metrics(scene.far)
                latencies, lists = asyncio.run(phase(victim, who, args.workers, args.seconds))
                measured = (latencies, lists, before, far_metrics(scene.far))
                results.setdefault(name, []).append(measured)

    def median_p50(name: str) -> float:
        return statistics.median(percentiles(latencies)[0] for latencies, *_ in results[name])

    baseline = median_p50("no flood")
    print(
        f"\n== results ({args.workers} listing at once, {args.configmaps} ConfigMaps of "
        f"{CONFIGMAP_BYTES // 1024} KiB each, {args.seconds:g} s a phase, {args.rounds} rounds "
        "of the three in turn)"
    )
    print(
        f"{VICTIM} (far's own user, global-default), GET /api: p50 and p99 of each round, the "
        "median p50 against no flood; the flood's lists a second"
    )
    for name, rounds in results.items():
        shown = "  ".join(
            "{:.1f}/{:.1f}".format(*percentiles(latencies)) for latencies, *_ in rounds
        )
        lists = statistics.median(made for _, made, *_ in rounds) / args.seconds
        print(
            f"  {name:24s} {shown} ms   x{median_p50(name) / baseline:6.1f}   {lists:5.1f} lists/s"
        )
        for level in ("global-default", "vk-peers"):
            waited = [waits(before, after, level) for _, _, before, after in rounds]
            count = sum(c for c, _ in waited)
            if count:
                mean = sum(c * m for c, m in waited) / count
                print(
                    f"      far's {level:15s} queues: {count:6.0f} requests, "
                    f"mean wait {mean * 1000:7.2f} ms"
                )
    isolated, shared = median_p50("flood in vk-peers"), median_p50("flood in global-default")
    print(
        f"the consumer's flood in global-default over in vk-peers, {VICTIM}'s median p50: "
        f"{shared:.1f} / {isolated:.1f} ms = x{shared / isolated:.1f}"
    )


if __name__ == "__main__":
    main()
