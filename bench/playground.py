"""How fast the playground comes up and what it costs, measured in one run.

Prints: the time to bring up one cluster (the baseline) and the tutorial's three clusters from
nothing with the binaries cached, their ratio, the time of a second `up` on the running
playground, `down`, and the resident memory of every component. Runs in scratch directories of
its own, so a playground you have running is not touched.

    .venv/bin/python -m bench.playground
"""

from __future__ import annotations

import collections
import tempfile
import time
from pathlib import Path

from vk.cli.chart import default_cache_dir
from vk.cli.progress import Progress
from vk.controllers.local_processes import processes_with
from vk.playground.binaries import BinaryBuilder
from vk.playground.playground import Playground
from vk.playground.spec import DEFAULT_CLUSTERS

TARGET_WARM_UP_SECONDS = 15.0  # issue 3


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def component_of(pid: int) -> str:
    executable = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
    return Path(executable).name


def timed_up(root: Path, clusters: tuple) -> float:  # type: ignore[type-arg]
    start = time.monotonic()
    Playground(root, Progress(quiet=True)).up(clusters)
    return time.monotonic() - start


def main() -> None:
    quiet = Progress(quiet=True)
    build_start = time.monotonic()
    BinaryBuilder(default_cache_dir(), Progress()).ensure_all()
    print(f"binaries ready in {time.monotonic() - build_start:.1f}s (cache: {default_cache_dir()})")

    with tempfile.TemporaryDirectory(prefix="vk-bench-") as scratch:
        one_root, three_root = Path(scratch, "one"), Path(scratch, "three")
        one = timed_up(one_root, DEFAULT_CLUSTERS[:1])
        Playground(one_root, quiet).down()
        three = timed_up(three_root, DEFAULT_CLUSTERS)
        again = timed_up(three_root, DEFAULT_CLUSTERS)

        time.sleep(10)  # let start-up allocations settle before reading memory
        by_component: dict[str, float] = collections.defaultdict(float)
        pids = processes_with(str(three_root) + "/")
        for pid in pids:
            by_component[component_of(pid)] += rss_mib(pid)
        total = sum(by_component.values())

        down_start = time.monotonic()
        Playground(three_root, quiet).down()
        down = time.monotonic() - down_start

    print(f"up, 1 cluster (baseline):            {one:6.1f} s")
    print(
        f"up, 3 clusters:                      {three:6.1f} s   "
        f"ratio to 1 cluster {three / one:.2f}   target <= {TARGET_WARM_UP_SECONDS:.0f} s: "
        f"{'met' if three <= TARGET_WARM_UP_SECONDS else 'MISSED'}"
    )
    print(f"up again on the running playground:  {again:6.1f} s")
    print(f"down:                                {down:6.1f} s")
    print(f"RSS of the 3 clusters ({len(pids)} processes): {total:.0f} MiB")
    for component, mib in sorted(by_component.items(), key=lambda item: -item[1]):
        print(f"  {component:26s} {mib:7.0f} MiB  ({mib / 3:.0f} MiB a cluster)")


if __name__ == "__main__":
    main()
