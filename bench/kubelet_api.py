"""The kubelet API through the virtual kubelet against the same directly on the provider, in
one run (issue 5's benchmark): port-forward throughput (an echo, both ways) and exec round trip
(the Python client over WebSocket, so no kubectl start-up hides the difference; the
port-forwards in rounds, direct then through in turn, their medians compared), then the
virtual kubelet's memory with 50 concurrent `kubectl logs -f` streams; then 1000 slowloris
connections on the kubelet port (no credentials, 900 KiB of unfinished request head each, issue
19's probe): how many get through TLS, when the server has closed them all, the virtual
kubelet's memory over idle, the node Ready, and logs and exec served meanwhile.

    .venv/bin/python -m bench.kubelet_api [--megabytes 20] [--rounds 5] [--execs 20]
        [--streams 50] [--slowloris 1000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import socket
import ssl
import statistics
import subprocess
import sys
import time
from pathlib import Path

from bench.offload import deployment
from bench.virtual_node import (
    LOCAL_NAMESPACE,
    NODE,
    REMOTE_NAMESPACE,
    BenchVirtualNode,
    apply,
    kubectl,
    proc_stats,
)


def wait_running_pod(kubeconfig: Path, namespace: str) -> str:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        names = kubectl(
            kubeconfig,
            "get",
            "pods",
            "-n",
            namespace,
            "--field-selector",
            "status.phase=Running",
            "-o",
            "name",
        ).split()
        if names:
            return names[0].split("/", 1)[1]
        time.sleep(0.2)
    raise RuntimeError(f"no Running pod in {namespace}")


def port_forward_throughput(kubeconfig: Path, namespace: str, pod: str, megabytes: int) -> float:
    """MB/s of `megabytes` sent to the pod's echo and read back, through `kubectl port-forward`."""
    forward = subprocess.Popen(
        [
            "kubectl",
            f"--kubeconfig={kubeconfig}",
            "-n",
            namespace,
            "port-forward",
            f"pod/{pod}",
            ":8080",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert forward.stdout is not None
        port = int(forward.stdout.readline().split("127.0.0.1:")[1].split()[0])
        payload = os.urandom(1024 * 1024)
        with socket.create_connection(("127.0.0.1", port), timeout=60) as connection:
            started = time.monotonic()
            received = 0
            for _ in range(megabytes):
                connection.sendall(payload)
                goal = received + len(payload)
                while received < goal:
                    chunk = connection.recv(1024 * 1024)
                    if not chunk:
                        raise RuntimeError("the port-forward closed early")
                    received += len(chunk)
            elapsed = time.monotonic() - started
        return 2 * megabytes / elapsed  # bytes went there and came back
    finally:
        forward.terminate()
        forward.wait(timeout=10)


async def exec_round_trips(kubeconfig: Path, namespace: str, pod: str, count: int) -> list[float]:
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.stream import WsApiClient

    configuration = client.Configuration()
    await config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    times = []
    async with WsApiClient(configuration=configuration) as ws:
        api = client.CoreV1Api(api_client=ws)
        for _ in range(count):
            started = time.monotonic()
            await api.connect_get_namespaced_pod_exec(
                pod, namespace, command=["true"], stderr=True, stdin=False, stdout=True, tty=False
            )
            times.append(time.monotonic() - started)
    return times


ATTACKER_ADDRESS = "127.0.0.2"


async def slowloris(port: int, count: int, head_bytes: int) -> tuple[int, int, float]:
    """`count` connections to the kubelet port, no credentials, each sending `head_bytes` of an
    unfinished request head and nothing more, all at once. Returns (how many got through the
    TLS handshake, how many were turned away before or during it, seconds until the last one
    was closed by the server)."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    started = time.monotonic()

    async def one() -> tuple[bool, float]:
        try:
            # From another address than the API server's (as a pod elsewhere would attack):
            # the per-source cap is what turns most of them away.
            reader, writer = await asyncio.open_connection(
                "127.0.0.1", port, ssl=context, local_addr=(ATTACKER_ADDRESS, 0)
            )
        except (OSError, ssl.SSLError):
            return False, time.monotonic() - started
        try:
            writer.write(b"GET /pods HTTP/1.1\r\nX-Slow: " + b"a" * head_bytes)
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.drain()
                while await reader.read(65536):
                    pass
            return True, time.monotonic() - started
        finally:
            writer.close()

    results = await asyncio.gather(*(one() for _ in range(count)))
    held = sum(1 for through, _ in results if through)
    return held, count - held, max(elapsed for _, elapsed in results)


def node_ready(kubeconfig: Path) -> bool:
    jsonpath = '{.status.conditions[?(@.type=="Ready")].status}'
    return kubectl(kubeconfig, "get", "node", NODE, "-o", f"jsonpath={jsonpath}") == "True"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=20)
    parser.add_argument("--execs", type=int, default=20)
    parser.add_argument("--streams", type=int, default=50)
    parser.add_argument("--slowloris", type=int, default=1000)
    parser.add_argument(
        "--rounds",
        type=int,
        default=5,
        help="port-forward runs, direct then through in turn: the medians are compared, so a "
        "moment of the shared machine's weighs on neither side alone",
    )
    arguments = parser.parse_args()
    if arguments.rounds < 1:
        parser.error("--rounds must be 1 or more")
    with BenchVirtualNode(pods_capacity=110, name="kubelet-api") as scene:
        process = scene.process
        assert process is not None
        scene.wait_node_ready()
        apply(scene.home, deployment("echo", LOCAL_NAMESPACE, 1, NODE, virtual=True))
        local_pod = wait_running_pod(scene.home, LOCAL_NAMESPACE)
        remote_pod = wait_running_pod(scene.far, REMOTE_NAMESPACE)

        # Who spends the CPU on the relayed path (two cores for all of it).
        processes = {
            "virtual kubelet": process.pid,
            "consumer kube-apiserver": scene.component_pid("home", "kube-apiserver"),
            "provider kube-apiserver": scene.component_pid("far", "kube-apiserver"),
            "provider kwok": scene.component_pid("far", "kwok"),
        }
        relayed_cpu = dict.fromkeys(processes, 0.0)
        direct_runs, relayed_runs = [], []
        for _ in range(arguments.rounds):
            direct_runs.append(
                port_forward_throughput(
                    scene.far, REMOTE_NAMESPACE, remote_pod, arguments.megabytes
                )
            )
            cpu_before = {name: proc_stats(pid)[2] for name, pid in processes.items()}
            relayed_runs.append(
                port_forward_throughput(scene.home, LOCAL_NAMESPACE, local_pod, arguments.megabytes)
            )
            for name, pid in processes.items():
                relayed_cpu[name] += proc_stats(pid)[2] - cpu_before[name]
        direct_mbps, relayed_mbps = statistics.median(direct_runs), statistics.median(relayed_runs)
        direct_exec = asyncio.run(
            exec_round_trips(scene.far, REMOTE_NAMESPACE, remote_pod, arguments.execs)
        )
        relayed_exec = asyncio.run(
            exec_round_trips(scene.home, LOCAL_NAMESPACE, local_pod, arguments.execs)
        )

        idle_rss, _, _ = proc_stats(process.pid)
        streams = [
            subprocess.Popen(
                [
                    "kubectl",
                    f"--kubeconfig={scene.home}",
                    "logs",
                    "-f",
                    "-n",
                    LOCAL_NAMESPACE,
                    local_pod,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            for _ in range(arguments.streams)
        ]
        time.sleep(5)
        streaming_rss, _, _ = proc_stats(process.pid)
        alive = sum(1 for s in streams if s.poll() is None)
        for stream in streams:
            stream.terminate()
        for stream in streams:
            stream.wait(timeout=10)

        # Slowloris on the kubelet port, while logs and exec are asked through the API server.
        time.sleep(2)
        before_attack, _, _ = proc_stats(process.pid)
        attack_started = time.monotonic()
        attack = subprocess.Popen(
            [sys.executable, "-c", SLOWLORIS_PROCESS, str(scene.kubelet_port),
             str(arguments.slowloris)],
            stdout=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        time.sleep(2)
        served = []
        for _ in range(3):
            logs = subprocess.run(
                ["kubectl", f"--kubeconfig={scene.home}", "logs", "-n", LOCAL_NAMESPACE, local_pod,
                 "--request-timeout=10s"],
                capture_output=True,
            )  # fmt: skip
            execed = subprocess.run(
                ["kubectl", f"--kubeconfig={scene.home}", "exec", "-n", LOCAL_NAMESPACE, local_pod,
                 "--request-timeout=10s", "--", "true"],
                capture_output=True,
            )  # fmt: skip
            served.append(logs.returncode == 0 and execed.returncode == 0)
        attacked_rss, _, _ = proc_stats(process.pid)
        stays_ready = node_ready(scene.home)
        held, turned_away, closed_after = json.loads(attack.communicate(timeout=120)[0])
        attack_seconds = time.monotonic() - attack_started

    ratio = relayed_mbps / direct_mbps
    direct_median, relayed_median = statistics.median(direct_exec), statistics.median(relayed_exec)
    print(
        f"\n== results ({arguments.megabytes} MB echoed {arguments.rounds} times each way, "
        f"{arguments.execs} execs)"
    )
    print(
        f"port-forward, direct on the provider:   {direct_mbps:7.1f} MB/s   (median; "
        f"{min(direct_runs):.1f} to {max(direct_runs):.1f})"
    )
    print(
        f"port-forward, through the virtual node: {relayed_mbps:7.1f} MB/s   "
        f"ratio {ratio:.2f} (goal >= 0.8: {'met' if ratio >= 0.8 else 'MISSED'}; median; "
        f"{min(relayed_runs):.1f} to {max(relayed_runs):.1f})"
    )
    print(f"CPU seconds spent during the relayed port-forwards ({arguments.rounds}):")
    for name, seconds in relayed_cpu.items():
        print(f"  {name:<24} {seconds:6.2f} s")
    print(f"exec round trip, direct (median):       {direct_median * 1000:7.1f} ms")
    print(
        f"exec round trip, through (median):      {relayed_median * 1000:7.1f} ms   "
        f"+{(relayed_median - direct_median) * 1000:.1f} ms"
    )
    print(f"virtual kubelet RSS idle:               {idle_rss:7.1f} MiB")
    print(f"virtual kubelet RSS, {alive} logs -f:      {streaming_rss:7.1f} MiB")
    growth = attacked_rss - before_attack
    print(
        f"slowloris, {arguments.slowloris} connections of 900 KiB unfinished heads "
        f"({attack_seconds:.0f} s):"
    )
    print(f"  got through TLS / turned away:        {held} / {turned_away}")
    print(
        f"  all closed by the server after:       {closed_after:7.1f} s   goal <= head "
        f"timeout (10 s) + handshake (5 s): {'met' if closed_after <= 15 else 'MISSED'}"
    )
    print(
        f"  virtual kubelet RSS under it:         {attacked_rss:7.1f} MiB   +{growth:.1f} over "
        f"idle, goal <= +50: {'met' if growth <= 50 else 'MISSED'}"
    )
    print(f"  node Ready during it:                 {'yes' if stays_ready else 'NO'}")
    print(f"  logs and exec served during it:       {sum(served)} of {len(served)}")


# The attack in a process of its own, so its CPU and sockets are not the benchmark's.
SLOWLORIS_PROCESS = """
import asyncio, json, sys
from bench.kubelet_api import slowloris
print(json.dumps(asyncio.run(slowloris(int(sys.argv[1]), int(sys.argv[2]), 900 * 1024))))
"""


if __name__ == "__main__":
    main()
