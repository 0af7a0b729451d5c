"""The kubelet API through the virtual kubelet against the same directly on the provider, in
one run (issue 5's benchmark): port-forward throughput (an echo, both ways) and exec round trip
(the Python client over WebSocket, so no kubectl start-up hides the difference), then the
virtual kubelet's memory with 50 concurrent `kubectl logs -f` streams.

    .venv/bin/python -m bench.kubelet_api [--megabytes 20] [--execs 20] [--streams 50]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--megabytes", type=int, default=20)
    parser.add_argument("--execs", type=int, default=20)
    parser.add_argument("--streams", type=int, default=50)
    arguments = parser.parse_args()
    with BenchVirtualNode(pods_capacity=110, name="kubelet-api") as scene:
        process = scene.process
        assert process is not None
        scene.wait_node_ready()
        apply(scene.home, deployment("echo", LOCAL_NAMESPACE, 1, NODE, virtual=True))
        local_pod = wait_running_pod(scene.home, LOCAL_NAMESPACE)
        remote_pod = wait_running_pod(scene.far, REMOTE_NAMESPACE)

        direct_mbps = port_forward_throughput(
            scene.far, REMOTE_NAMESPACE, remote_pod, arguments.megabytes
        )
        # Who spends the CPU on the relayed path (two cores for all of it).
        processes = {
            "virtual kubelet": process.pid,
            "consumer kube-apiserver": scene.component_pid("home", "kube-apiserver"),
            "provider kube-apiserver": scene.component_pid("far", "kube-apiserver"),
            "provider kwok": scene.component_pid("far", "kwok"),
        }
        cpu_before = {name: proc_stats(pid)[2] for name, pid in processes.items()}
        relayed_mbps = port_forward_throughput(
            scene.home, LOCAL_NAMESPACE, local_pod, arguments.megabytes
        )
        relayed_cpu = {
            name: proc_stats(pid)[2] - cpu_before[name] for name, pid in processes.items()
        }
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

    ratio = relayed_mbps / direct_mbps
    direct_median, relayed_median = statistics.median(direct_exec), statistics.median(relayed_exec)
    print(f"\n== results ({arguments.megabytes} MB echoed, {arguments.execs} execs)")
    print(f"port-forward, direct on the provider:   {direct_mbps:7.1f} MB/s")
    print(
        f"port-forward, through the virtual node: {relayed_mbps:7.1f} MB/s   "
        f"ratio {ratio:.2f} (goal >= 0.8: {'met' if ratio >= 0.8 else 'MISSED'})"
    )
    print("CPU seconds spent during the relayed port-forward:")
    for name, seconds in relayed_cpu.items():
        print(f"  {name:<24} {seconds:6.2f} s")
    print(f"exec round trip, direct (median):       {direct_median * 1000:7.1f} ms")
    print(
        f"exec round trip, through (median):      {relayed_median * 1000:7.1f} ms   "
        f"+{(relayed_median - direct_median) * 1000:.1f} ms"
    )
    print(f"virtual kubelet RSS idle:               {idle_rss:7.1f} MiB")
    print(f"virtual kubelet RSS, {alive} logs -f:      {streaming_rss:7.1f} MiB")


if __name__ == "__main__":
    main()
