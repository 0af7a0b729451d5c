"""The seeds' tutorial end to end on real containers (issue 22): naples' only node is a real
kubelet with containerd, so what a user does first with an offloaded pod behaves as on real
clusters. From venice, through naples' virtual node: app-south (the tutorial's nginx, the local
web-server image substituted, see conftest.py) answers through `kubectl port-forward`; a Job
completes; `kubectl exec` returns the container's own exit code with stdin ending; `kubectl cp`
copies into and out of the pod; `kubectl attach` feeds stdin until it ends; `kubectl logs -f`
follows a container printing over time; `kubectl top pod` shows an idle container's real usage.

Every workload here asks for the south region, as app-south does: in the LocalAndRemote
namespace that is naples' virtual node only.
"""

from __future__ import annotations

import json
import re
import subprocess
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.test_namespace_offloading import CONSUMER, REGION, get_json, wide
from vk.playground.images import SHELL_IMAGE, WEB_IMAGE
from vk.playground.realnode import cgroup_dirs, node_name

NAMESPACE = "liqo-demo"
NAPLES_NODE = node_name("naples")
SOUTH = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": REGION, "operator": "In", "values": ["south"]}]}
            ]
        }
    }
}


def kubectl(clusters: Clusters, *args: str, **options: Any) -> subprocess.CompletedProcess[str]:
    return clusters.kubectl(CONSUMER, "-n", NAMESPACE, *args, **options)


def remote_pod(clusters: Clusters, name: str) -> dict[str, Any]:
    """The pod running at naples for venice's pod `name` (it keeps the name)."""
    pod: dict[str, Any] = get_json(clusters, "naples", "pod", name, "-n", NAMESPACE)
    return pod


def app_south_pod(clusters: Clusters) -> str:
    pods = get_json(clusters, CONSUMER, "pods", "-n", NAMESPACE, "-l", "app=app-south")["items"]
    running = [p["metadata"]["name"] for p in pods if p["status"].get("phase") == "Running"]
    assert running, wide(clusters, NAMESPACE)
    return running[0]


def run_south_pod(clusters: Clusters, name: str, command: str, **container: Any) -> None:
    """A pod of the shell image running `command`, offloaded to naples, left Running (or
    finished) before this returns."""
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "affinity": SOUTH,
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 1,
            "containers": [
                {
                    "name": "main",
                    "image": SHELL_IMAGE,
                    "command": ["sh", "-c", command],
                    **container,
                }
            ],
        },
    }
    kubectl(clusters, "apply", "-f", "-", input=json.dumps(pod))
    wait_until(
        lambda: (
            (get_json(clusters, CONSUMER, "pod", name, "-n", NAMESPACE) or {})
            .get("status", {})
            .get("phase")
            in ("Running", "Succeeded")
        ),
        f"{name} Running on naples",
        timeout=120,
        explain=lambda: wide(clusters, NAMESPACE),
    )


def test_app_south_is_a_container_of_naples_real_node_and_answers_a_port_forward(
    liqo_demo: Clusters,
) -> None:
    pod = app_south_pod(liqo_demo)
    remote = remote_pod(liqo_demo, pod)
    assert remote["spec"]["nodeName"] == NAPLES_NODE  # the real node, not a kwok one
    (status,) = remote["status"]["containerStatuses"]
    assert status["containerID"].startswith("containerd://")
    assert status["image"] == WEB_IMAGE

    forward = subprocess.Popen(
        [
            "kubectl",
            f"--kubeconfig={liqo_demo.kubeconfig(CONSUMER)}",
            "port-forward",
            "-n",
            NAMESPACE,
            f"pod/{pod}",
            ":80",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()
        match = re.search(r"127\.0\.0\.1:(\d+) -> 80", line)
        assert match, f"port-forward said {line!r}"
        with urllib.request.urlopen(f"http://127.0.0.1:{match.group(1)}/", timeout=20) as answer:
            page = answer.read().decode()
    finally:
        forward.terminate()
        forward.wait(10)
    assert "Welcome to nginx" in page
    # nginx's access log is the container's stdout: the request is in `kubectl logs`.
    logs = wait_until(
        lambda: (out := kubectl(liqo_demo, "logs", pod).stdout) and "GET / HTTP/1.1" in out and out,
        "the request in app-south's logs",
        timeout=30,
    )
    assert '"GET / HTTP/1.1" 200' in logs


def processes_in_cgroup(name: str) -> dict[int, str]:
    """The command line of every process in the cgroup `name` or below, in any hierarchy."""
    found = {}
    for directory in cgroup_dirs(name):
        for pid in (directory / "cgroup.procs").read_text().split():
            try:
                command = Path(f"/proc/{pid}/cmdline").read_bytes()
            except FileNotFoundError:  # exited meanwhile
                continue
            found[int(pid)] = command.replace(b"\0", b" ").decode(errors="replace")
    return found


def test_each_real_node_keeps_its_pods_in_its_own_cgroup_parent(liqo_demo: Clusters) -> None:
    """naples' containers (app-south's nginx) are under naples' cgroup parent, venice's virtual
    kubelets' pods under venice's, and no process is in both: `down` kills each node's pods by
    its own cgroups."""
    networks = liqo_demo.playground.node_networks(liqo_demo.specs)
    venice = processes_in_cgroup(networks[CONSUMER].cgroup_parent)
    naples = processes_in_cgroup(networks["naples"].cgroup_parent)
    assert not venice.keys() & naples.keys()
    assert any(c.startswith("nginx: master process") for c in naples.values()), naples
    assert not any("nginx" in c for c in venice.values()), venice
    assert any("vk" in c and " kubelet " in c for c in venice.values()), venice
    assert not any("vk" in c and " kubelet " in c for c in naples.values()), naples


def test_an_offloaded_job_completes(liqo_demo: Clusters) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "count"},
        "spec": {
            "backoffLimit": 0,
            "template": {
                "spec": {
                    "affinity": SOUTH,
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "count",
                            "image": SHELL_IMAGE,
                            "command": ["sh", "-c", "seq 1 3; echo counted"],
                        }
                    ],
                }
            },
        },
    }
    kubectl(liqo_demo, "apply", "-f", "-", input=json.dumps(job))
    waited = kubectl(
        liqo_demo, "wait", "--for=condition=Complete", "job/count", "--timeout=120s", check=False
    )
    assert waited.returncode == 0, waited.stderr + wide(liqo_demo, NAMESPACE)
    (pod,) = get_json(
        liqo_demo, CONSUMER, "pods", "-n", NAMESPACE, "-l", "batch.kubernetes.io/job-name=count"
    )["items"]
    assert pod["spec"]["nodeName"] == "naples"
    remote = remote_pod(liqo_demo, pod["metadata"]["name"])
    assert remote["spec"]["nodeName"] == NAPLES_NODE
    terminated = remote["status"]["containerStatuses"][0]["state"]["terminated"]
    assert terminated["exitCode"] == 0
    assert kubectl(liqo_demo, "logs", "job/count").stdout.split() == ["1", "2", "3", "counted"]


def test_exec_returns_the_containers_own_exit_code_and_stdin_ends(liqo_demo: Clusters) -> None:
    pod = app_south_pod(liqo_demo)
    failed = kubectl(
        liqo_demo, "exec", "-i", pod, "--", "sh", "-c", "cat; exit 7",
        input="from stdin\n", check=False, timeout=60,
    )  # fmt: skip
    assert failed.returncode == 7, failed.stderr
    assert failed.stdout == "from stdin\n"
    # The command ran in the container (Debian's nginx there), not on this machine.
    inside = kubectl(liqo_demo, "exec", pod, "--", "sh", "-c", "command -v nginx; hostname")
    assert inside.stdout.split() == ["/usr/sbin/nginx", pod]


def test_cp_into_and_out_of_an_offloaded_pod(liqo_demo: Clusters, tmp_path: Path) -> None:
    pod = app_south_pod(liqo_demo)
    sent = tmp_path / "sent.txt"
    sent.write_text("copied into naples\n" * 1000)
    target = f"/tmp/sent-{uuid.uuid4().hex}.txt"
    kubectl(liqo_demo, "cp", str(sent), f"{pod}:{target}")
    inside = kubectl(liqo_demo, "exec", pod, "--", "cat", target)
    assert inside.stdout == sent.read_text()
    assert not Path(target).exists(), "the copy landed on this machine, not in the container"
    # Out: the file sent, and one of the image's (bookworm is Debian 12).
    returned = tmp_path / "returned.txt"
    kubectl(liqo_demo, "cp", f"{pod}:{target}", str(returned))
    assert returned.read_text() == sent.read_text()
    version = tmp_path / "debian_version"
    kubectl(liqo_demo, "cp", f"{pod}:/etc/debian_version", str(version))
    assert version.read_text().startswith("12.")


def test_attach_feeds_stdin_until_it_ends(liqo_demo: Clusters) -> None:
    run_south_pod(
        liqo_demo,
        "reader",
        'while read -r line; do echo "got $line"; done; echo "stdin ended"',
        stdin=True,
        stdinOnce=True,
    )
    attached = kubectl(
        liqo_demo, "attach", "-i", "reader", "-c", "main",
        input="one\ntwo\n", check=False, timeout=60,
    )  # fmt: skip
    assert attached.returncode == 0, attached.stderr
    finished = wait_until(
        lambda: (
            (remote := remote_pod(liqo_demo, "reader"))["status"].get("phase") == "Succeeded"
            and remote
        ),
        "reader finished once its stdin ended",
        timeout=60,
    )
    assert finished["spec"]["nodeName"] == NAPLES_NODE
    logs = kubectl(liqo_demo, "logs", "reader").stdout
    assert logs.splitlines() == ["got one", "got two", "stdin ended"]


@pytest.fixture
def ticking(liqo_demo: Clusters) -> Iterator[str]:
    run_south_pod(
        liqo_demo,
        "ticker",
        "for i in 1 2 3 4 5 6; do echo tick $i; sleep 1; done; sleep 3600",
    )
    yield "ticker"
    kubectl(liqo_demo, "delete", "pod", "ticker", "--wait=false", check=False)


def test_logs_follow_a_container_printing_over_time(liqo_demo: Clusters, ticking: str) -> None:
    follow = subprocess.Popen(
        [
            "kubectl",
            f"--kubeconfig={liqo_demo.kubeconfig(CONSUMER)}",
            "logs",
            "-f",
            "-n",
            NAMESPACE,
            ticking,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    arrivals: list[tuple[float, str]] = []

    def read() -> None:
        assert follow.stdout is not None
        for line in follow.stdout:
            arrivals.append((time.monotonic(), line.strip()))
            if line.strip() == "tick 6":
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(60)
    follow.terminate()
    follow.wait(10)
    lines = [line for _, line in arrivals]
    assert lines[-1:] == ["tick 6"], lines
    assert lines == [f"tick {i}" for i in range(7 - len(lines), 7)], lines
    # Followed, not read at the end: the last lines came as they were printed, apart.
    if len(arrivals) >= 3:
        assert arrivals[-1][0] - arrivals[-3][0] > 1.0, arrivals


def served_cpu_seconds(clusters: Clusters, cluster: str, node: str, pod: str) -> float | None:
    """`container_cpu_usage_seconds_total` of `pod`'s container in `node`'s /metrics/resource,
    read through `cluster`'s API server."""
    served = clusters.kubectl(
        cluster, "get", "--raw", f"/api/v1/nodes/{node}/proxy/metrics/resource", check=False
    )
    for family in text_string_to_metric_families(served.stdout if served.returncode == 0 else ""):
        for sample in family.samples:
            if sample.name == "container_cpu_usage_seconds_total" and (
                sample.labels.get("pod") == pod and sample.labels.get("namespace") == NAMESPACE
            ):
                return float(sample.value)
    return None


@pytest.fixture
def idle(liqo_demo: Clusters) -> Iterator[str]:
    run_south_pod(liqo_demo, "idle", "sleep 3600")
    yield "idle"
    # Gone at naples too before the next test, which counts naples' pods.
    kubectl(liqo_demo, "delete", "pod", "idle", "--timeout=60s", check=False)
    wait_until(
        lambda: (
            liqo_demo.kubectl(
                "naples", "get", "pod", "idle", "-n", NAMESPACE, check=False
            ).returncode
            != 0
        ),
        "the idle pod gone at naples",
        timeout=60,
    )


def test_top_pod_shows_an_idle_containers_real_usage(liqo_demo: Clusters, idle: str) -> None:
    """A container that has been idle since it started: the CPU counter naples' virtual kubelet
    serves at venice is naples' kubelet's own (what starting it cost, never 0, which
    metrics-server would drop), so `kubectl top` shows it at venice as at naples."""

    def usage(cluster: str) -> tuple[str, str] | None:
        found = liqo_demo.kubectl(
            cluster, "top", "pod", idle, "-n", NAMESPACE, "--no-headers", check=False
        )
        fields = found.stdout.split()
        return (fields[1], fields[2]) if found.returncode == 0 and len(fields) >= 3 else None

    def explain() -> str:
        """What venice's top answers, and what naples' virtual kubelet serves of the pod."""
        top = liqo_demo.kubectl(CONSUMER, "top", "pod", idle, "-n", NAMESPACE, check=False)
        served = served_cpu_seconds(liqo_demo, CONSUMER, "naples", idle)
        log = liqo_demo.playground.paths(CONSUMER).log("metrics-server")
        return f"top: {top.stdout}{top.stderr}\nserved CPU: {served}\n" + (
            "".join(log.read_text().splitlines(keepends=True)[-8:]) if log.exists() else ""
        )

    kubelet = wait_until(
        lambda: served_cpu_seconds(liqo_demo, "naples", NAPLES_NODE, idle),
        "naples' kubelet counting the idle container's CPU",
        timeout=60,
    )
    # Idle: the counter stays what starting cost, which the virtual kubelet serves as it is.
    virtual = wait_until(
        lambda: served_cpu_seconds(liqo_demo, CONSUMER, "naples", idle),
        "naples' virtual kubelet serving the idle container's CPU",
        timeout=60,
    )
    assert virtual > 0
    assert virtual == pytest.approx(kubelet, abs=0.005), (virtual, kubelet)
    # naples' own metrics-server reads the real kubelet; venice's reads naples' virtual kubelet
    # (scraped every 15 s; its first figures need two scrapes of the virtual kubelet).
    remote = wait_until(lambda: usage("naples"), "kubectl top of the pod at naples", timeout=120)
    local = wait_until(
        lambda: usage(CONSUMER), "kubectl top of the pod at venice", timeout=120, explain=explain
    )
    # The same container measured: its working set (a sleep's, under a MiB) agrees. The CPU
    # figures are rates over whichever windows each metrics-server saw (naples' first one
    # reaches back to the container's start, and may show what starting it cost).
    memory = int(local[1].removesuffix("Mi"))
    assert abs(memory - int(remote[1].removesuffix("Mi"))) <= 8, (local, remote)
