"""The provider webhook's Quota ledger: what judging a batch of ShadowPod admissions costs as
the reservations not yet counted grow (they do while the provider is busy: every pod in flight
holds one). It compares, in one run, parsing the whole ledger again for each pod (vk before the
`Ledger`) with reading it once per batch and adding each admission to it (`Ledger`, what the
webhook does), on the same ledgers and pods, and checks that both admit the same.

    .venv/bin/python -m bench.ledger [--reservations 100,1000,5000] [--batch 10]
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal

from vk.api.usage import Ledger, Resources, forge_reserved_status, ledger_usage

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reservations", default="100,1000,5000")
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
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
