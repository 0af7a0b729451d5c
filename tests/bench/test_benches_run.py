"""Every benchmark in bench/ runs to its end at a small size, on playgrounds of its own, so that
none can stop working unseen. Their figures are printed, never judged here (performance is not
asserted in tests): a run passes when it exits 0 having printed each of its results lines."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

REPOSITORY = Path(__file__).resolve().parents[2]

BENCHES = [
    (
        "bench.offload",
        "--pods 20",
        [
            "ratio offloaded / local:",
            "per-pod startup p50 / p99:",
            "virtual kubelet peak RSS:",
            "API writes per offloaded pod:",
            "far's controller-manager API writes per pod:",
            "far's webhook API writes per pod:",
            "remote pods re-created by the restart:",
        ],
    ),
    (
        "bench.reflection",
        "--configmaps 20 --services 5 --total 40 --idle-seconds 5 --pods 5",
        ["all reflected in the provider:", "writes of the resync after a restart:"],
    ),
    (
        "bench.kubelet_api",
        "--megabytes 2 --execs 3 --streams 5 --slowloris 300",
        [
            "port-forward, through the virtual node:",
            "exec round trip, through (median):",
            "all closed by the server after:",
            "logs and exec served during it:",
        ],
    ),
    ("bench.playground", "", ["up, 3 clusters:", "down:"]),
]


@pytest.mark.parametrize(("module", "arguments", "results"), BENCHES, ids=[b[0] for b in BENCHES])
def test_the_benchmark_runs_at_a_small_size(
    module: str, arguments: str, results: list[str]
) -> None:
    run = subprocess.run(
        [sys.executable, "-m", module, *shlex.split(arguments)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, f"{module} failed:\n{run.stdout[-3000:]}\n{run.stderr[-3000:]}"
    missing = [line for line in results if line not in run.stdout]
    assert not missing, f"{module} printed no {missing}:\n{run.stdout[-3000:]}"
    print(run.stdout)  # the figures, for whoever reads the test log
