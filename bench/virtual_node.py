"""The scene every benchmark needs, made the way a user makes it: a playground of its own
(consumer `home`, provider `far`, each with vk installed), `vkctl peer` from home to far (the
ResourceSlice flow: far's Quota for home's slice identity, whose kubeconfig home gets in the
Secret `kubeconfig-resourceslice-far`, and the VirtualNode `far`), and the namespace
`bench-remote` offloaded with `vkctl offload namespace` (far makes its twin `bench-remote-home`
for that identity). So the offloaded pods take the real path: the virtual kubelet writes
ShadowPods as the slice identity, far's webhook admits them against the Quota's ledger, and
far's controller manager makes the Pods.

The one departure: home's controller manager runs without its VirtualNode launcher, and the
benchmark runs the virtual kubelet itself as a process (as home's admin at home), to measure
it, `kill -9` it and start it again. A scene that fails on the way up takes its clusters down
with it."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from bench.probe import REPORT_ENV as PROBE_REPORT_ENV
from vk.cli.progress import Progress
from vk.controllers.local_processes import free_port
from vk.controllers.virtualnodes import VIRTUAL_KUBELET_PYTHON_ENV
from vk.playground.cluster import COMPONENTS
from vk.playground.playground import Playground
from vk.playground.spec import ClusterSpec

REPOSITORY = Path(__file__).resolve().parents[1]
VK = str(Path(sys.executable).parent / "vk")
VKCTL = str(Path(sys.executable).parent / "vkctl")
# Where the benchmark's virtual kubelet keeps its modules' bytecode (`start_kubelet`).
NO_BYTECODE_ENV = "PYTHONDONTWRITEBYTECODE"
BYTECODE_CACHE = Path.home() / ".cache" / "vk" / "bytecode"
TENANT = "liqo-tenant-far"
NODE = "far"
SECRET = "kubeconfig-resourceslice-far"
LOCAL_NAMESPACE, REMOTE_NAMESPACE = "bench-remote", "bench-remote-home"

Sample = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def make_scratch(name: str) -> Path:
    """A directory of a benchmark's own in the system's temporary one: its playground, the
    logs of the processes it runs, its probe's reports (`leave_scratch`)."""
    return Path(tempfile.mkdtemp(prefix=f"vk-bench-{name}-"))


def leave_scratch(scratch: Path, *, failed: bool, keep: bool = False) -> None:
    """Removes a benchmark's scratch directory once it ended well (a run of every benchmark
    left a few of them, and they piled up); one that failed, or whose files are what was asked
    for (`keep`: a probe's reports), is kept, and said where."""
    if failed or keep:
        why = "it failed or was stopped; its logs are there" if failed else "its probe's reports"
        print(f"[bench] kept {scratch}: {why}", file=sys.stderr)
    else:
        shutil.rmtree(scratch, ignore_errors=True)


@contextlib.contextmanager
def scratch_directory(name: str) -> Iterator[Path]:
    """`make_scratch`, left with `leave_scratch` as the block ends."""
    scratch = make_scratch(name)
    try:
        yield scratch
    except BaseException:
        leave_scratch(scratch, failed=True)
        raise
    leave_scratch(scratch, failed=False)


def keep_cluster_logs(playground: Playground, scratch: Path) -> None:
    """The logs of `playground`'s clusters (their API servers', kwok's, vk's processes')
    copied into `scratch`'s `logs`, out of the playground, which `down` removes: a benchmark
    that failed keeps them there."""
    for cluster in playground.recorded_clusters() or ():
        logs = playground.paths(cluster.name).root / "logs"
        if logs.is_dir():
            shutil.copytree(logs, scratch / "logs" / cluster.name, dirs_exist_ok=True)


@contextlib.contextmanager
def scratch_playground(scratch: Path) -> Iterator[Playground]:
    """A playground in `scratch`, down as the block ends; its clusters' logs kept in
    `scratch` first if the block failed (`keep_cluster_logs`)."""
    playground = Playground(scratch / "playground", Progress())
    try:
        yield playground
    except BaseException:
        keep_cluster_logs(playground, scratch)
        raise
    finally:
        playground.down()


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


def vkctl(kubeconfig: Path, *args: str) -> None:
    """vkctl against `kubeconfig`; its output shown, a failure raised with it."""
    done = subprocess.run(
        [VKCTL, *args, f"--kubeconfig={kubeconfig}"], capture_output=True, text=True
    )
    if done.returncode != 0:
        raise RuntimeError(f"vkctl {' '.join(args)} failed: {done.stderr.strip()}")


def samples(text: str) -> Sample:
    """Prometheus' text format as samples, by (name, sorted labels)."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(url: str, context: ssl.SSLContext | None = None) -> Sample:
    """A Prometheus endpoint's samples; retried for 30 s while the process comes up."""
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5, context=context) as response:
                return samples(response.read().decode())
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@dataclass(frozen=True)
class Restart:
    converged: float  # seconds from the new virtual kubelet's start to nothing left to do
    recreated: int  # remote pods that are not the ones running before
    rss: float  # MiB, the new virtual kubelet's once converged
    peak: float  # MiB, its most until then (its first list of every pod included)


# The rate of both clusters' controller managers and schedulers (DESIGN §7: a baseline of at
# least 200 pods/s): at Kubernetes' defaults, the ReplicaSet controller makes a Deployment's
# pods 20 a second, which would pace the baseline and the offloaded run alike (issue 20).
CONTROLLER_QPS = 1000


class BenchVirtualNode:
    def __init__(
        self,
        *,
        pods_capacity: int,
        name: str,
        twin_namespace_quota: str | None = None,
        probe: str | None = None,
        workers: Mapping[str, int] | None = None,
        pin: bool = False,
    ) -> None:
        """`twin_namespace_quota`: far's `--tenant-namespace-quota`, when the benchmark
        reflects more objects than the default allows; `probe`: the virtual kubelet runs under
        bench/probe.py's `heap`, `profile` or `stages`, for `probe_report()`; `workers`: its
        `--<resource>-reflection-workers` by resource (the product's defaults for the others);
        `pin`: the virtual kubelet alone on a core of its own, every other process of the scene
        on the others (`pinned_cores`)."""
        self.cores = pinned_cores() if pin else None
        self.twin_namespace_quota = twin_namespace_quota
        self.probe = probe
        self.workers = dict(workers or {})
        self.capacity = {"cpu": "1000", "memory": "4000Gi", "pods": str(pods_capacity)}
        self.scratch = make_scratch(name)
        self.playground = Playground(self.scratch / "playground", Progress())
        self.process: subprocess.Popen[bytes] | None = None
        # By cluster: the vk controller managers the benchmark runs instead of the playground.
        self.controller_managers: dict[str, subprocess.Popen[bytes]] = {}
        self.metrics_port = 0
        self.kubelet_port = 0

    @property
    def home(self) -> Path:
        return self.playground.kubeconfig("home")

    @property
    def far(self) -> Path:
        return self.playground.kubeconfig("far")

    def __enter__(self) -> BenchVirtualNode:
        # Stopped (a timeout, CI), the benchmark still tears its clusters down on the way out.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
        if self.cores is not None:
            # Before any process of the scene starts: each inherits the benchmark's cores.
            pin(os.getpid(), self.cores.others)
        try:
            self._set_up()
        except BaseException as error:
            # As failed: its scratch directory, which holds the playground's logs that the
            # error may point to, is kept.
            self.__exit__(type(error), error, error.__traceback__)
            raise
        return self

    def _set_up(self) -> None:
        self.playground.up(
            (
                ClusterSpec(
                    "home", "consumer", 1, {}, self.capacity, controller_qps=CONTROLLER_QPS
                ),
                ClusterSpec("far", "provider", 1, {}, self.capacity, controller_qps=CONTROLLER_QPS),
            )
        )
        # home's without its VirtualNode launcher, which would start a virtual kubelet of its
        # own for far: the benchmark runs and restarts its own. It still approves the virtual
        # kubelet's serving certificate.
        self._run_controller_manager("home")
        if self.twin_namespace_quota is not None:
            self._run_controller_manager(
                "far", f"--tenant-namespace-quota={self.twin_namespace_quota}"
            )
        print("peering home with far (vkctl peer), the virtual kubelet run by the benchmark")
        peering = subprocess.Popen(
            [VKCTL, "peer", f"--remote-kubeconfig={self.far}", f"--kubeconfig={self.home}",
             "--timeout=3m",
             # The whole node's worth: the provider's default slice is 110 pods, and a larger
             # benchmark would wait for ever for pods the Quota refuses.
             *(f"--{resource}={value}" for resource, value in self.capacity.items())],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            self._wait_for(
                lambda: (
                    self._exists("virtualnodes.offloading.liqo.io", NODE)
                    and self._exists("secret", SECRET)
                ),
                "the VirtualNode far and its kubeconfig Secret",
                peering,
            )
            self.start_kubelet()
            _, errors = peering.communicate(timeout=240)
        finally:
            if peering.poll() is None:
                peering.kill()
        if peering.returncode != 0:
            raise RuntimeError(f"vkctl peer failed: {errors.strip()}")
        kubectl(self.home, "create", "namespace", LOCAL_NAMESPACE)
        vkctl(self.home, "offload", "namespace", LOCAL_NAMESPACE, "--timeout=2m")
        offloading = json.loads(
            kubectl(self.home, "get", "namespaceoffloading", "offloading", "-n", LOCAL_NAMESPACE,
                    "-o", "json")
        )  # fmt: skip
        remote = offloading["status"]["remoteNamespaceName"]
        if remote != REMOTE_NAMESPACE:
            raise RuntimeError(
                f"{LOCAL_NAMESPACE} was offloaded as {remote}, not {REMOTE_NAMESPACE}"
            )

    def _exists(self, kind: str, name: str) -> bool:
        found = subprocess.run(
            ["kubectl", f"--kubeconfig={self.home}", "get", kind, name, "-n", TENANT],
            capture_output=True,
        )
        return found.returncode == 0

    @staticmethod
    def _wait_for(
        done: Any, what: str, peering: subprocess.Popen[str], timeout: float = 180
    ) -> None:
        deadline = time.monotonic() + timeout
        while not done():
            if peering.poll() is not None:
                raise RuntimeError(f"vkctl peer ended before {what}: {peering.communicate()[1]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"no {what} after {timeout:.0f} s")
            time.sleep(0.5)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        failed = kind is not None
        try:
            self.kill()
            for process in self.controller_managers.values():
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
                    process.wait(timeout=30)
        except BaseException:
            failed = True  # a process that would not stop: its log says why, so it is kept
            raise
        finally:
            if failed:
                keep_cluster_logs(self.playground, self.scratch)
            self.playground.down()
            leave_scratch(self.scratch, failed=failed, keep=self.probe is not None)

    def _run_controller_manager(self, cluster: str, *flags: str) -> subprocess.Popen[bytes]:
        """`cluster`'s vk controller manager run by the benchmark instead of the playground,
        with `flags`, on the same metrics port."""
        self.playground.stop_component(cluster, "vk-controller-manager")
        paths = self.playground.paths(cluster)
        port = json.loads(paths.ports_file.read_text())["vk-controller-manager"]
        env = {**os.environ, "KUBECONFIG": str(paths.component_kubeconfig("vk-controller-manager"))}
        with open(self.scratch / f"{cluster}-controller-manager.log", "ab") as out:
            process = subprocess.Popen(
                [VK, "controller-manager", f"--metrics-address=127.0.0.1:{port}", *flags],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        self.controller_managers[cluster] = process
        return process

    def start_kubelet(self) -> subprocess.Popen[bytes]:
        """The virtual kubelet, always as the same POD_NAME: a kill -9 then models a container
        restart in the same pod, which holds the HA Lease already. Never two at once: with one
        identity, both would lead, and each would create the other's ShadowPods again."""
        if self.process is not None and self.process.poll() is None:
            raise RuntimeError("a virtual kubelet runs already: kill() it first")
        self.metrics_port, self.kubelet_port = free_port(), free_port()
        env = {
            **{key: value for key, value in os.environ.items() if key != NO_BYTECODE_ENV},
            # Its modules' bytecode written once and read at every start after, as the image
            # has it compiled (Dockerfile): a start timed here is not a compile of all it
            # imports (0.6 s of CPU) because the environment asks for no bytecode written.
            "PYTHONPYCACHEPREFIX": str(BYTECODE_CACHE),
            "KUBECONFIG": str(self.home),
            "POD_NAME": "bench-virtual-kubelet",
            "POD_NAMESPACE": TENANT,
            "VIRTUALNODE_NAME": NODE,
            PROBE_REPORT_ENV: str(self.scratch / "probe.json"),
            **dict(VIRTUAL_KUBELET_PYTHON_ENV),  # the interpreter as vk's launchers run it
        }
        command = [sys.executable, "-m", "bench.probe", self.probe] if self.probe else [VK]
        with open(self.scratch / "virtual-kubelet.log", "ab") as out:
            self.process = subprocess.Popen(
                [
                    *command,
                    "kubelet",
                    f"--nodename={NODE}",
                    f"--tenant-namespace={TENANT}",
                    "--home-cluster-id=home",
                    "--foreign-cluster-id=far",
                    f"--foreign-kubeconfig-secret-name={SECRET}",
                    f"--metrics-address=127.0.0.1:{self.metrics_port}",
                    f"--listen-port={self.kubelet_port}",
                    *(
                        f"--{resource}-reflection-workers={count}"
                        for resource, count in self.workers.items()
                    ),
                    # It runs as the admin, whose serving CSR vk's approver rightly refuses
                    # (only a virtual kubelet's own ServiceAccount may ask for its node).
                    "--certificate-type=self-signed",
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=REPOSITORY,
            )
        if self.cores is not None:
            pin(self.process.pid, self.cores.virtual_kubelet)
        return self.process

    def probe_report(self) -> dict[str, Any]:
        """What the virtual kubelet's probe saw until now (bench/probe.py's report)."""
        assert self.probe, "a scene made without a probe"
        assert self.process is not None
        path = self.scratch / "probe.json"
        path.unlink(missing_ok=True)
        path.with_suffix(".wanted").touch()
        # A heap report walks every object and every live allocation: minutes, at 10,000 pods.
        deadline = time.monotonic() + 900
        while not path.exists():
            if time.monotonic() > deadline:
                raise RuntimeError(f"the virtual kubelet wrote no {self.probe} report")
            time.sleep(0.5)
        report: dict[str, Any] = json.loads(path.read_text())
        return report

    def component_pid(self, cluster: str, component: str) -> int:
        return int(self.playground.paths(cluster).pid(component).read_text())

    def processes(self) -> dict[str, int]:
        """The pid of every process of the scene running now, by `cluster component` (the
        virtual kubelet as `home virtual-kubelet`)."""
        pids: dict[str, int] = {}
        for cluster in ("home", "far"):
            for component in COMPONENTS:
                path = self.playground.paths(cluster).pid(component)
                if path.exists():
                    pids[f"{cluster} {component}"] = int(path.read_text())
        for cluster, process in self.controller_managers.items():
            if process.poll() is None:
                pids[f"{cluster} vk-controller-manager"] = process.pid
        if self.process is not None and self.process.poll() is None:
            pids["home virtual-kubelet"] = self.process.pid
        return pids

    def stats_by_process(self) -> dict[str, tuple[float, float, float]]:
        """`proc_stats` of every process of the scene now, by `cluster component`: where a
        phase's CPU went, on cores that the two clusters share, and what each holds."""
        stats = {}
        for name, pid in self.processes().items():
            try:
                stats[name] = proc_stats(pid)
            except (FileNotFoundError, ProcessLookupError):
                continue  # stopped meanwhile
        return stats

    def cpu_by_process(self) -> dict[str, float]:
        """CPU seconds of every process of the scene until now, by `cluster component`."""
        return {name: cpu for name, (_, _, cpu) in self.stats_by_process().items()}

    def restart(self, pods: int) -> Restart:
        """`kill -9` of the virtual kubelet with `pods` offloaded, and a new one: how long it
        takes to converge (every pod reconciled once, nothing left to do) and how many remote
        pods it made anew (none should be)."""
        before = self.remote_pod_uids()
        self.kill()
        started = time.monotonic()
        process = self.start_kubelet()
        while True:
            sample = self.metrics()
            adds = sample.get(("vk_workqueue_adds_total", (("name", "pods"),)), 0)
            depth = sample.get(("vk_workqueue_depth", (("name", "pods"),)), 1)
            if adds >= pods and depth == 0:
                break
            time.sleep(0.1)
        converged = time.monotonic() - started
        rss, peak, _ = proc_stats(process.pid)
        after = self.remote_pod_uids()
        recreated = sum(1 for name, uid in before.items() if after.get(name) != uid)
        return Restart(converged, recreated, rss, peak)

    def remote_pod_uids(self) -> dict[str, str]:
        """The UIDs of far's pods in the twin namespace, by name."""
        listed = kubectl(self.far, "get", "pods", "-n", REMOTE_NAMESPACE, "-o", "json")
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in json.loads(listed)["items"]}

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
        """The virtual kubelet's metrics."""
        return scrape(f"http://127.0.0.1:{self.metrics_port}/metrics")

    def provider_metrics(self) -> dict[str, Sample]:
        """The metrics of far's own vk components, by component: its controller manager and
        its webhook (served with its HTTPS port)."""
        paths = self.playground.paths("far")
        ports = json.loads(paths.ports_file.read_text())
        trust = ssl.create_default_context(cafile=str(paths.pki.ca_crt))
        return {
            "controller-manager": scrape(
                f"http://127.0.0.1:{ports['vk-controller-manager']}/metrics"
            ),
            "webhook": scrape(f"https://127.0.0.1:{ports['vk-webhook']}/metrics", trust),
        }


@dataclass(frozen=True)
class PinnedCores:
    virtual_kubelet: frozenset[int]
    others: frozenset[int]


def pinned_cores() -> PinnedCores:
    """The last core this process may run on for the virtual kubelet, the rest for everything
    else (both clusters, the benchmark): its CPU per pod measured without the other processes
    on its core, as on a node where it has a core of its own."""
    cores = sorted(os.sched_getaffinity(0))
    if len(cores) < 2:
        raise SystemExit(f"--pin needs 2 cores or more; this process may use {len(cores)}")
    return PinnedCores(frozenset(cores[-1:]), frozenset(cores[:-1]))


def pin(pid: int, cores: frozenset[int]) -> None:
    """Every thread of `pid` on `cores` (the threads and processes it starts later inherit
    them)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(ProcessLookupError):
            os.sched_setaffinity(int(task.name), cores)


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
