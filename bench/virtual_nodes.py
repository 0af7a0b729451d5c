"""Many virtual nodes on one consumer: what each costs idle (issue 20).

A consumer runs one virtual kubelet per VirtualNode, so its idle cost multiplies with every
peering and every ResourceSlice. On a playground of its own (consumer `home`, provider `far`),
`vkctl peer` and then `vkctl create resourceslice` make N ResourceSlices to far, each with its
virtual node, whose virtual kubelets home's controller manager starts (as processes: the
playground's launcher). Once all are Ready and settled, it prints their total PSS (what N
processes really cost together: the interpreter's shared pages counted once between them) and
idle CPU, and each one's RSS against the floor its third-party imports set: a fresh interpreter
importing just the third-party modules the virtual kubelet imports, measured in the same run.

`--home-nodes M` first gives home M more Nodes as a real kubelet writes them (50 images each,
their conditions and nodeInfo): every virtual kubelet caches the home cluster's Nodes, and what
it keeps of each is paid once per peering.

    .venv/bin/python -m bench.virtual_nodes [--nodes 10] [--idle-seconds 30] [--home-nodes 0]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from bench.virtual_node import (
    VKCTL,
    kubectl,
    proc_stats,
    scratch_directory,
    scratch_playground,
)
from vk.controllers.virtualnodes import VIRTUAL_KUBELET_PYTHON_ENV
from vk.playground.playground import Playground
from vk.playground.spec import ClusterSpec

CAPACITY = {"cpu": "1000", "memory": "4000Gi", "pods": "1000"}
TARGET_ABOVE_FLOOR_MIB = 10.0  # issue 20
BUSY_NODE = "bench.vk.io/busy-node"  # the label and taint of the Nodes --home-nodes adds

# The third-party modules the virtual kubelet's code imports, as a fresh interpreter finds
# them: imported alone, they are the floor no change to vk's own code can go below.
FLOOR_PROBE = """
import importlib, json, sys
importlib.import_module("vk.cli.components")  # the virtual kubelet's entry point
importlib.import_module("vk.virtualkubelet.process")
top = lambda name: name.split(".")[0]
print(json.dumps([
    name for name in sys.modules
    if top(name) not in sys.stdlib_module_names and top(name) != "vk" and not name.startswith("_")
]))
"""
FLOOR_IMPORTS = """
import importlib, sys, time
for name in sys.argv[1:]:
    try:
        importlib.import_module(name)
    except ImportError:  # an alias a package puts in sys.modules, not a module of its own
        pass
print("ready", flush=True)
time.sleep(3600)
"""


def pss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
        if line.startswith("Pss:"):
            return int(line.split()[1]) / 1024
    return 0.0


def import_floor() -> tuple[list[str], float]:
    """The virtual kubelet's third-party modules (packages and submodules, in the order it
    imports them), and the RSS of an interpreter that imports those alone, run as vk's
    launchers run the virtual kubelet's (PYTHONOPTIMIZE: third-party docstrings go too)."""
    env = {**os.environ, **dict(VIRTUAL_KUBELET_PYTHON_ENV)}
    probe = subprocess.run(
        [sys.executable, "-c", FLOOR_PROBE], capture_output=True, text=True, check=True, env=env
    )
    modules: list[str] = json.loads(probe.stdout)
    floor = subprocess.Popen(
        [sys.executable, "-c", FLOOR_IMPORTS, *modules], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert floor.stdout is not None
        floor.stdout.readline()
        rss, _, _ = proc_stats(floor.pid)
    finally:
        floor.kill()
        floor.wait()
    return modules, rss


def virtual_kubelet_pids(playground: Playground) -> list[int]:
    root = playground.paths("home").virtual_kubelets
    return [int(p.read_text()) for p in sorted(root.glob("*/*/pid"))]


def wait_ready(home: Path, count: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while True:
        nodes = json.loads(
            kubectl(home, "get", "nodes", "-l", "liqo.io/type=virtual-node", "-o", "json")
        )["items"]
        ready = [
            n
            for n in nodes
            if any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in n.get("status", {}).get("conditions", [])
            )
        ]
        if len(ready) >= count:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{len(ready)} of {count} virtual nodes Ready after {timeout} s")
        time.sleep(1)


def busy_node(index: int) -> dict[str, Any]:
    """A Node as a real kubelet writes it, unschedulable (no kubelet runs it): its own pod range
    and address, and mostly what no virtual kubelet reads (images, nodeInfo)."""
    name = f"busy-node-{index}"
    pod_range = f"10.{100 + index // 250}.{index % 250}.0/24"
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, BUSY_NODE: "true"}},
        "spec": {
            "podCIDR": pod_range,
            "podCIDRs": [pod_range],
            "taints": [{"key": BUSY_NODE, "effect": "NoSchedule"}],
        },
        # Nodes take their status on create.
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": f"172.30.{index // 250}.{index % 250 + 1}"},
                {"type": "Hostname", "address": name},
            ],
            "images": [
                {
                    "names": [
                        f"registry.example/team-{image}/service@sha256:{index:064x}",
                        f"registry.example/team-{image}/service:v1.{index}",
                    ],
                    "sizeBytes": 10_000_000 + image,
                }
                for image in range(50)
            ],
            "nodeInfo": {
                "machineID": f"{index:032x}",
                "systemUUID": f"{index:032x}",
                "bootID": f"{index:032x}",
                "kernelVersion": "6.1.0",
                "osImage": "Debian GNU/Linux 13",
                "containerRuntimeVersion": "containerd://2.0.0",
                "kubeletVersion": "v1.36.4",
                "kubeProxyVersion": "",
                "operatingSystem": "linux",
                "architecture": "amd64",
            },
        },
    }


def add_busy_nodes(home: Path, count: int) -> float:
    """`count` busy Nodes made at home; their mean size as the API server holds them, in KiB."""
    nodes = [busy_node(index) for index in range(count)]
    listing = {"apiVersion": "v1", "kind": "List", "items": nodes}
    kubectl(home, "create", "-f", "-", input=json.dumps(listing))
    listed = json.loads(kubectl(home, "get", "nodes", "-l", f"{BUSY_NODE}=true", "-o", "json"))
    if len(listed["items"]) != count:
        raise RuntimeError(f"{len(listed['items'])} busy Nodes at home, not {count}")
    return statistics.mean(len(json.dumps(node)) for node in listed["items"]) / 1024


def vkctl(*args: str) -> None:
    done = subprocess.run([VKCTL, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"vkctl {' '.join(args)} failed: {done.stderr.strip()}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=10)
    parser.add_argument("--idle-seconds", type=float, default=30)
    parser.add_argument(
        "--home-nodes",
        type=int,
        default=0,
        help="Nodes added at home first, as a real kubelet writes them (each virtual kubelet "
        "caches them)",
    )
    arguments = parser.parse_args()
    n = arguments.nodes

    modules, floor = import_floor()
    packages = sorted({name.split(".")[0] for name in modules})
    print(f"the virtual kubelet's third-party packages: {', '.join(packages)}")

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    with scratch_directory("nodes") as scratch, scratch_playground(scratch) as playground:
        playground.up(
            (
                ClusterSpec("home", "consumer", 1, {}, CAPACITY),
                ClusterSpec("far", "provider", 1, {}, CAPACITY),
            )
        )
        home, far = playground.kubeconfig("home"), playground.kubeconfig("far")
        node_kib = add_busy_nodes(home, arguments.home_nodes) if arguments.home_nodes else 0.0
        print(f"peering home with far, then {n - 1} more ResourceSlices to far")
        vkctl("peer", f"--remote-kubeconfig={far}", f"--kubeconfig={home}", "--timeout=3m")
        for index in range(2, n + 1):
            vkctl(
                "create", "resourceslice", f"far-{index}", "--remote-cluster-id=far",
                "--cpu=1", "--memory=1Gi", "--pods=10", f"--kubeconfig={home}", "--timeout=3m",
            )  # fmt: skip
        wait_ready(home, n)
        pids = virtual_kubelet_pids(playground)
        if len(pids) != n:
            raise RuntimeError(f"{len(pids)} virtual kubelet processes for {n} virtual nodes")
        time.sleep(10)  # start-up allocations settle, the first heartbeats pass
        cpu_before = {pid: proc_stats(pid)[2] for pid in pids}
        time.sleep(arguments.idle_seconds)
        cpu = sum(proc_stats(pid)[2] - cpu_before[pid] for pid in pids)
        pss = sum(pss_mib(pid) for pid in pids)
        rss = statistics.median(proc_stats(pid)[0] for pid in pids)

    above = rss - floor
    print(f"\n== results ({n} virtual nodes on one consumer, idle)")
    print(
        f"home's Nodes besides its own:          {arguments.home_nodes:7d}    "
        f"({node_kib:.1f} KiB each, as a real kubelet writes them)"
    )
    print(f"import floor (those modules alone):    {floor:7.1f} MiB RSS")
    print(
        f"idle virtual kubelet RSS (median):     {rss:7.1f} MiB   {above:.1f} above the floor, "
        f"target <= {TARGET_ABOVE_FLOOR_MIB:.0f}: "
        f"{'met' if above <= TARGET_ABOVE_FLOOR_MIB else 'MISSED'}"
    )
    print(f"{n} virtual kubelets, total PSS:        {pss:7.1f} MiB   ({pss / n:.1f} MiB each)")
    print(
        f"{n} virtual kubelets, idle CPU:         {cpu / arguments.idle_seconds * 1000:7.1f} "
        f"ms per second in all ({cpu / arguments.idle_seconds * 1000 / n:.2f} each)"
    )


if __name__ == "__main__":
    main()
