"""Every benchmark in bench/ at a small size, one after the other, each on playgrounds of its
own: `.ci/run` runs this after the tests, so that no benchmark can stop working unseen. The
figures are printed as each benchmark prints them, never judged (performance is not asserted
anywhere); a benchmark passes when it exits 0 having printed each of its result lines, and
this exits 1 naming those that did not.

    .venv/bin/python -m bench.smoke [bench.offload ...]
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import time
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parents[1]
TIMEOUT_SECONDS = 900

# (module, arguments at a small size, the lines its results start with)
BENCHES = [
    (
        "bench.offload",
        "--pods 20",
        [
            "DESIGN §7 wants a baseline of >= 200:",
            "time to all Ready, offloaded:",
            "ratio offloaded / local:",
            "per-pod startup p50 / p99:",
            "token Secrets on the provider:",
            "virtual kubelet peak RSS:",
            "API writes per offloaded pod:",
            "watch events per offloaded pod:",
            "reconciles per offloaded pod:",
            "its requests and watch events alone:",
            "informers (one watch each):",
            "far's controller-manager API writes per pod:",
            "far's webhook API writes per pod:",
            "remote pods re-created by the restart:",
            "throughput of one virtual kubelet:",
            "the machine's CPU in that phase:",
            "far's API server in that phase:",
            "watch events it sent:",
            "the virtual kubelet's API writes in that phase:",
        ],
    ),
    (
        "bench.reflection",
        "--configmaps 20 --services 5 --total 40 --idle-seconds 5 --pods 5",
        ["all reflected in the provider:", "writes of the resync after a restart:"],
    ),
    (
        "bench.kubelet_api",
        "--megabytes 2 --rounds 2 --execs 3 --streams 5 --slowloris 300",
        [
            "port-forward, through the virtual node:",
            "exec round trip, through (median):",
            "all closed by the server after:",
            "logs and exec served during it:",
        ],
    ),
    (
        "bench.virtual_nodes",
        "--nodes 3 --idle-seconds 10 --home-nodes 20",
        [
            "home's Nodes besides its own:",
            "import floor (those modules alone):",
            "idle virtual kubelet RSS (median):",
            "3 virtual kubelets, total PSS:",
            "3 virtual kubelets, idle CPU:",
        ],
    ),
    (
        "bench.curve",
        "--steps 10,20",
        [
            "| pods | RSS (MiB) |",
            "| 20 |",
            "per-pod startup p99 with 20 pods running:",
            "virtual kubelet CPU per paced pod with 20 running:",
            "reconciles each (",
            "restart with 20 pods:",
        ],
    ),
    # The stages probe (bench/probe.py), whose report no other run reads, and the virtual
    # kubelet on a core of its own.
    (
        "bench.offload",
        "--pods 10 --stages --pin",
        ["the virtual kubelet's CPU by stage", "pinned (--pin):"],
    ),
    (
        "bench.peer_flood",
        "--workers 20 --seconds 3 --configmaps 50 --rounds 1",
        ["no flood", "flood in vk-peers", "the consumer's flood in global-default over"],
    ),
    ("bench.playground", "", ["up, 3 clusters:", "down:"]),
    ("bench.ledger", "--reservations 10,100 --runs 1", ["| 100 |"]),
    (
        "bench.ledger",
        "--api-server --held 5 --writes 20 --rounds 2",
        ["ledger writes on an API server:", "| 5 |"],
    ),
]


def run(module: str, arguments: str, results: list[str]) -> str | None:
    """Runs one benchmark, its output shown as it comes; what went wrong, or None."""
    print(f"\n==> {module} {arguments}", flush=True)
    started = time.monotonic()
    with subprocess.Popen(
        [sys.executable, "-u", "-m", module, *shlex.split(arguments)],
        cwd=REPOSITORY,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    ) as process:
        assert process.stdout is not None
        printed = []
        try:
            for line in process.stdout:
                print(line, end="", flush=True)
                printed.append(line)
            process.wait(timeout=max(1.0, TIMEOUT_SECONDS - (time.monotonic() - started)))
        except subprocess.TimeoutExpired:
            process.terminate()  # the benchmark tears its clusters down on SIGTERM
            process.wait(timeout=120)
            return f"still running after {TIMEOUT_SECONDS} s"
    print(f"<== {module}: exit {process.returncode} in {time.monotonic() - started:.0f} s")
    if process.returncode != 0:
        return f"exit {process.returncode}"
    output = "".join(printed)
    missing = [line for line in results if line not in output]
    return f"printed no {missing}" if missing else None


def main() -> None:
    chosen = set(sys.argv[1:])
    failed = {
        f"{module} {arguments}".strip(): problem
        for module, arguments, results in BENCHES
        if not chosen or module in chosen
        if (problem := run(module, arguments, results)) is not None
    }
    for module, problem in failed.items():
        print(f"FAILED {module}: {problem}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
