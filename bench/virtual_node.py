"""The scene every benchmark needs: a playground of its own (consumer `home`, provider `far`),
vk's CRDs, a VirtualNode `far` with its kubeconfig Secret, the namespace `bench-remote`
offloaded to `far` as `bench-remote-home`, and the virtual kubelet run as a process."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from vk.playground.playground import Playground
from vk.playground.processes import free_port
from vk.playground.progress import Progress
from vk.playground.spec import ClusterSpec

REPOSITORY = Path(__file__).resolve().parents[1]
VK = str(Path(sys.executable).parent / "vk")
TENANT = "liqo-tenant-far"
NODE = "far"
LOCAL_NAMESPACE, REMOTE_NAMESPACE = "bench-remote", "bench-remote-home"

Sample = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def kubectl(kubeconfig: Path, *args: str, input: str | None = None) -> str:
    return subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", *args],
        input=input,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def apply(kubeconfig: Path, *objects: dict[str, Any]) -> None:
    kubectl(
        kubeconfig,
        "apply",
        "-f",
        "-",
        input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
    )


class BenchVirtualNode:
    def __init__(self, *, pods_capacity: int, name: str) -> None:
        self.capacity = {"cpu": "1000", "memory": "4000Gi", "pods": str(pods_capacity)}
        self.scratch = Path(tempfile.mkdtemp(prefix=f"vk-bench-{name}-"))
        self.playground = Playground(self.scratch / "playground", Progress())
        self.process: subprocess.Popen[bytes] | None = None
        self.controller_manager: subprocess.Popen[bytes] | None = None
        self.metrics_port = 0
        self.kubelet_port = 0

    @property
    def home(self) -> Path:
        return self.playground.kubeconfig("home")

    @property
    def far(self) -> Path:
        return self.playground.kubeconfig("far")

    def __enter__(self) -> BenchVirtualNode:
        self.playground.up(
            (
                ClusterSpec("home", "consumer", 1, {}, self.capacity),
                ClusterSpec("far", "provider", 2, {}, self.capacity),
            )
        )
        home, far = self.home, self.far
        self._without_virtual_node_controller()
        kubectl(home, "apply", "--server-side", "-f", str(REPOSITORY / "deploy" / "crds"))
        kubectl(
            home,
            "wait",
            "--for=condition=Established",
            "crd/namespacemaps.offloading.liqo.io",
            "crd/virtualnodes.offloading.liqo.io",
        )
        for namespace in (TENANT, LOCAL_NAMESPACE):
            kubectl(home, "create", "namespace", namespace)
        kubectl(far, "create", "namespace", REMOTE_NAMESPACE)
        apply(
            home,
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": "kubeconfig-resourceslice-far", "namespace": TENANT},
                "data": {"kubeconfig": base64.b64encode(far.read_bytes()).decode()},
            },
            {
                "apiVersion": "offloading.liqo.io/v1beta1",
                "kind": "VirtualNode",
                "metadata": {"name": NODE, "namespace": TENANT},
                "spec": {
                    "clusterID": "far",
                    "createNode": True,
                    "kubeconfigSecretRef": {"name": "kubeconfig-resourceslice-far"},
                    "resourceQuota": {"hard": self.capacity},
                },
            },
            {
                "apiVersion": "offloading.liqo.io/v1beta1",
                "kind": "NamespaceMap",
                "metadata": {
                    "name": "far",
                    "namespace": TENANT,
                    "labels": {"liqo.io/remote-cluster-id": "far"},
                },
                "spec": {"desiredMapping": {LOCAL_NAMESPACE: REMOTE_NAMESPACE}},
            },
        )
        kubectl(
            home,
            "patch",
            "namespacemaps.offloading.liqo.io",
            "far",
            "-n",
            TENANT,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps(
                {
                    "status": {
                        "currentMapping": {
                            LOCAL_NAMESPACE: {
                                "remoteNamespace": REMOTE_NAMESPACE,
                                "phase": "Accepted",
                            }
                        }
                    }
                }
            ),
        )
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.kill()
        if self.controller_manager is not None:
            self.controller_manager.send_signal(signal.SIGTERM)
            self.controller_manager.wait(timeout=30)
        self.playground.down()

    def _without_virtual_node_controller(self) -> None:
        """home's controller manager without its VirtualNode controller, which would launch a
        virtual kubelet of its own for `far`: the benchmark runs and restarts its own. It
        still approves the virtual kubelet's serving certificate."""
        self.playground.stop_component("home", "vk-controller-manager")
        paths = self.playground.paths("home")
        env = {**os.environ, "KUBECONFIG": str(paths.component_kubeconfig("vk-controller-manager"))}
        with open(self.scratch / "controller-manager.log", "ab") as out:
            self.controller_manager = subprocess.Popen(
                [VK, "controller-manager", f"--metrics-address=127.0.0.1:{free_port()}"],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def start_kubelet(self) -> subprocess.Popen[bytes]:
        """The virtual kubelet, always as the same POD_NAME: a kill -9 then models a container
        restart in the same pod, which holds the HA Lease already."""
        self.metrics_port, self.kubelet_port = free_port(), free_port()
        env = {**os.environ, "KUBECONFIG": str(self.home), "POD_NAME": "bench-virtual-kubelet"}
        with open(self.scratch / "virtual-kubelet.log", "ab") as out:
            self.process = subprocess.Popen(
                [
                    VK,
                    "kubelet",
                    f"--nodename={NODE}",
                    f"--tenant-namespace={TENANT}",
                    "--home-cluster-id=home",
                    "--foreign-cluster-id=far",
                    "--foreign-kubeconfig-secret-name=kubeconfig-resourceslice-far",
                    f"--metrics-address=127.0.0.1:{self.metrics_port}",
                    f"--listen-port={self.kubelet_port}",
                    "--pod-reflection-workers=10",
                    # It runs as the admin, whose serving CSR vk's approver rightly refuses
                    # (only a virtual kubelet's own ServiceAccount may ask for its node).
                    "--certificate-type=self-signed",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        return self.process

    def component_pid(self, cluster: str, component: str) -> int:
        return int(self.playground.paths(cluster).pid(component).read_text())

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def wait_node_ready(self) -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            result = subprocess.run(
                [
                    "kubectl",
                    f"--kubeconfig={self.home}",
                    "get",
                    "node",
                    NODE,
                    "-o",
                    'jsonpath={.status.conditions[?(@.type=="Ready")].status}',
                ],
                capture_output=True,
                text=True,
            )
            if result.stdout == "True":
                return
            time.sleep(0.2)
        raise RuntimeError(f"the virtual node {NODE} did not become Ready")

    def metrics(self) -> Sample:
        deadline = time.monotonic() + 30
        while True:
            try:
                url = f"http://127.0.0.1:{self.metrics_port}/metrics"
                with urllib.request.urlopen(url, timeout=5) as response:
                    text = response.read().decode()
                return {
                    (s.name, tuple(sorted(s.labels.items()))): s.value
                    for family in text_string_to_metric_families(text)
                    for s in family.samples
                }
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)


def proc_stats(pid: int) -> tuple[float, float, float]:
    """(current RSS MiB, peak RSS MiB, CPU seconds) of a process."""
    rss = peak = 0.0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) / 1024
        if line.startswith("VmHWM:"):
            peak = int(line.split()[1]) / 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return rss, peak, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
