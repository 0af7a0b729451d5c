"""The provider webhook's Quota ledger: what judging a batch of ShadowPod admissions costs as
the reservations not yet counted grow (they do while the provider is busy: every pod in flight
holds one). It compares, in one run, parsing the whole ledger again for each pod (vk before the
`Ledger`) with reading it once per batch and adding each admission to it (`Ledger`, what the
webhook does), on the same ledgers and pods, and checks that both admit the same.

With `--api-server`, what a ledger write costs the provider's API server instead, on a
playground cluster of its own: its CPU per status PUT of a Quota with some reservations held,
`status.reservations` an atomic map as vk's CRD has it (its managed fields one entry) against
the same schema with the map granular (an entry per reservation), as twins of vk's Quota CRD
under a group of the benchmark's; writes alternate between the webhook adding a reservation and
the recount folding the oldest, each as its own field manager, the two schemas interleaved in
rounds against the machine's drift.

    .venv/bin/python -m bench.ledger [--reservations 100,1000,5000] [--batch 10]
    .venv/bin/python -m bench.ledger --api-server [--held 5,40] [--writes 200] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

from bench.virtual_node import proc_stats, scratch_directory, scratch_playground
from vk.api.crds import CUSTOM_RESOURCES, crd_manifest
from vk.api.offloading import Quota
from vk.api.usage import Ledger, Resources, forge_reserved_status, ledger_usage
from vk.kube.client import JSON, KubeClient, NotFound
from vk.kube.kubeconfig import load_kubeconfig_file
from vk.playground.spec import ClusterSpec

NOW = datetime(2026, 11, 25, tzinfo=UTC)
POD_USAGE: Resources = {"cpu": Decimal("0.1"), "memory": Decimal(128 * 2**20), "pods": Decimal(1)}


def ledger_status(reservations: int) -> dict[str, object]:
    """A Quota's status with `reservations` pods admitted and not counted yet."""
    status: dict[str, object] = {"used": {"cpu": "20", "memory": "40Gi", "pods": "200"}}
    for i in range(reservations):
        status = forge_reserved_status(status, f"ns/held-{i}", f"uid-{i}", POD_USAGE, NOW)
    return status


def judge_reading_again(status: dict[str, object], batch: list[str]) -> list[Resources]:
    """Each pod judged on the whole ledger parsed again, its reservation forged into it."""
    seen = []
    for key in batch:
        seen.append(ledger_usage(status, excluding=key))
        status = forge_reserved_status(status, key, f"uid-{key}", POD_USAGE, NOW)
    return seen


def judge_reading_once(status: dict[str, object], batch: list[str]) -> list[Resources]:
    """Each pod judged on the ledger parsed once for the batch, its reservation added."""
    ledger = Ledger(status)
    seen = []
    for key in batch:
        seen.append(ledger.usage(excluding=key))
        ledger.reserve(key, f"uid-{key}", POD_USAGE, NOW)
    ledger.status()
    return seen


Judge = Callable[[dict[str, object], list[str]], list[Resources]]


def best_of(
    runs: int, judge: Judge, status: dict[str, object], batch: list[str]
) -> tuple[float, list[Resources]]:
    """The shortest of `runs` timings of `judge`, and what it saw."""
    best, seen = float("inf"), []
    for _ in range(runs):
        started = time.perf_counter()
        seen = judge(status, batch)
        best = min(best, time.perf_counter() - started)
    return best, seen


# --- What a ledger write costs the API server -------------------------------------------------

BENCH_GROUP = "bench.vk.io"
CLUSTER = "ledger"
# The two schemas measured: vk's (reservations atomic) and the same with the map granular.
SCHEMAS = {"atomic": "atomicquotas", "granular": "granularquotas"}
NAMESPACE = "default"
CAPACITY = {"cpu": "4", "memory": "8Gi", "pods": "110"}


def kind_of(plural: str) -> str:
    """A twin's kind, from its plural: `atomicquotas` is `Atomicquota`."""
    return plural.capitalize()[:-1]


def twin_quota_crd(plural: str, atomic: bool) -> JSON:
    """vk's Quota CRD under the benchmark's group as `plural`, its `status.reservations` atomic
    as vk's is, or granular (the marker taken out): the same objects validate either way."""
    manifest = crd_manifest(next(r for r in CUSTOM_RESOURCES if r.model is Quota))
    kind = kind_of(plural)
    manifest["metadata"]["name"] = f"{plural}.{BENCH_GROUP}"
    spec = manifest["spec"]
    spec["group"] = BENCH_GROUP
    spec["names"] = {"kind": kind, "listKind": f"{kind}List", "plural": plural}
    for version in spec["versions"]:
        status = version["schema"]["openAPIV3Schema"]["properties"]["status"]
        reservations = status["properties"]["reservations"]
        if not atomic:
            reservations.pop("x-kubernetes-map-type")
        elif reservations.get("x-kubernetes-map-type") != "atomic":
            raise SystemExit("vk's Quota CRD no longer has its reservations atomic")
    return manifest


def collection(plural: str) -> str:
    return f"/apis/{BENCH_GROUP}/{Quota.VERSION}/namespaces/{NAMESPACE}/{plural}"


async def create_twin(client: KubeClient, plural: str, atomic: bool) -> None:
    """The twin CRD, once served."""
    await client.create(
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", twin_quota_crd(plural, atomic)
    )
    for _ in range(100):  # served a moment after it is created
        try:
            await client.get(collection(plural))
            return
        except NotFound:
            await asyncio.sleep(0.1)
    raise SystemExit(f"the CRD {plural}.{BENCH_GROUP} is not served")


async def create_quota(client: KubeClient, plural: str, name: str) -> JSON:
    kind = kind_of(plural)
    quota = {
        "apiVersion": f"{BENCH_GROUP}/{Quota.VERSION}",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {"user": "consumer", "resources": {"cpu": "1000", "memory": "4000Gi"}},
    }
    return await client.create(collection(plural), quota)


class LedgerWriter:
    """Writes one twin Quota's ledger as vk's webhook and recount do: the webhook's writes
    add a reservation, the recount's fold the oldest."""

    def __init__(self, client: KubeClient, plural: str, quota: JSON) -> None:
        self.client, self.plural, self.quota = client, plural, quota
        self.path = f"{collection(plural)}/{quota['metadata']['name']}/status"
        self.admitted = 0
        self.cpu = 0.0
        self.writes = 0

    async def write(self, fold: bool) -> None:
        status: dict[str, Any] = dict(self.quota.get("status") or {"used": {"pods": "0"}})
        reservations = dict(status.get("reservations") or {})
        if fold and reservations:
            reservations.pop(min(reservations))  # keys sort by admission
            status["reservations"] = reservations
        else:
            self.admitted += 1
            status = forge_reserved_status(
                status,
                f"demo-home/web-{self.admitted:07d}",
                f"4f1c2a9e-7d3b-4e8f-9a6c-{self.admitted:012d}",
                POD_USAGE,
                datetime.now(UTC),
            )
        self.quota = await self.client.request(
            "PUT",
            self.path,
            params={"fieldManager": "vk-controller-manager" if fold else "vk-webhook"},
            body={**self.quota, "status": status},
        )

    async def hold(self, held: int) -> None:
        """Writes until `held` reservations are held."""
        while len((self.quota.get("status") or {}).get("reservations") or {}) < held:
            await self.write(fold=False)

    async def timed(self, writes: int, apiserver: int) -> None:
        """`writes` writes, alternately the webhook's and the recount's, the API server's CPU
        counted."""
        before = proc_stats(apiserver)[2]
        for index in range(writes):
            await self.write(fold=index % 2 == 1)
        self.cpu += proc_stats(apiserver)[2] - before
        self.writes += writes

    def sizes(self) -> tuple[float, float]:
        """The Quota's size and its managed fields', in KiB, as the API server returned it."""
        whole = len(json.dumps(self.quota))
        managed = len(json.dumps(self.quota["metadata"].get("managedFields") or []))
        return whole / 1024, managed / 1024


async def api_server_costs(
    kubeconfig: Path, apiserver: int, held: list[int], writes: int, rounds: int
) -> dict[int, dict[str, LedgerWriter]]:
    """By reservations held, by schema: the writers, with what their writes cost."""
    async with KubeClient(load_kubeconfig_file(kubeconfig)) as client:
        for schema, plural in SCHEMAS.items():
            await create_twin(client, plural, atomic=schema == "atomic")
        results = {}
        for count in held:
            writers = {}
            for schema, plural in SCHEMAS.items():
                quota = await create_quota(client, plural, f"held-{count}")
                writers[schema] = LedgerWriter(client, plural, quota)
                await writers[schema].hold(count)
            for round_ in range(rounds):
                order = list(writers.values())
                for writer in order if round_ % 2 == 0 else reversed(order):
                    await writer.timed(writes, apiserver)
            results[count] = writers
        return results


def measure_api_server(held: list[int], writes: int, rounds: int) -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    with scratch_directory("ledger") as scratch, scratch_playground(scratch) as playground:
        playground.up((ClusterSpec(CLUSTER, "provider", 1, {}, CAPACITY),))
        apiserver = int(playground.paths(CLUSTER).pid("kube-apiserver").read_text())
        results = asyncio.run(
            api_server_costs(playground.kubeconfig(CLUSTER), apiserver, held, writes, rounds)
        )
    print(
        f"\nledger writes on an API server: its CPU per Quota status PUT ({writes * rounds} "
        "writes each, half adding a reservation, half folding one)"
    )
    print(
        "| reservations held | granular (ms) | atomic, vk's (ms) | granular / atomic "
        "| object KiB granular / atomic | managed fields KiB granular / atomic |"
    )
    print("|---:|---:|---:|---:|---:|---:|")
    for count, writers in results.items():
        granular, atomic = writers["granular"], writers["atomic"]
        cost = {name: w.cpu / w.writes * 1000 for name, w in writers.items()}
        (granular_size, granular_managed), (atomic_size, atomic_managed) = (
            granular.sizes(),
            atomic.sizes(),
        )
        print(
            f"| {count} | {cost['granular']:.2f} | {cost['atomic']:.2f} | "
            f"{cost['granular'] / cost['atomic']:.2f} | {granular_size:.1f} / {atomic_size:.1f} "
            f"| {granular_managed:.1f} / {atomic_managed:.1f} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reservations", default="100,1000,5000")
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument(
        "--api-server",
        action="store_true",
        help="measure a ledger write's CPU in the API server instead, on a playground cluster",
    )
    parser.add_argument("--held", default="5,40", help="reservations held, with --api-server")
    parser.add_argument("--writes", type=int, default=200, help="writes a round, each schema")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.api_server:
        measure_api_server([int(h) for h in args.held.split(",")], args.writes, args.rounds)
        return
    batch = [f"ns/new-{i}" for i in range(args.batch)]
    print(f"a batch of {args.batch} ShadowPod admissions judged on one Quota's ledger")
    print("| reservations | parsed again per pod (ms) | parsed once (ms) | ratio |")
    print("|---:|---:|---:|---:|")
    for reservations in (int(r) for r in args.reservations.split(",")):
        status = ledger_status(reservations)
        again, seen_again = best_of(args.runs, judge_reading_again, status, batch)
        once, seen_once = best_of(args.runs, judge_reading_once, status, batch)
        if seen_again != seen_once:
            raise SystemExit(f"the two ways judged differently at {reservations} reservations")
        print(f"| {reservations} | {again * 1000:.1f} | {once * 1000:.1f} | {again / once:.1f} |")


if __name__ == "__main__":
    main()
