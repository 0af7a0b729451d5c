"""The fault suite (issue 19): the faults real clusters meet, on a playground of its own (rome
consuming from milan, nothing else running there), each with its outcome measured: the
provider's API server frozen, and down past the eviction of a pod at home; `kill -9` of the
virtual kubelet and both controller managers mid-burst; the provider's webhook down, failing
closed and failing open; a client CA rotation; malformed and truncated watch lines through a
fault-injecting proxy; the consumer's API server down past the lease deadlines. (A provider
writing status it should not is `tests/integration/test_untrusted_provider.py`.)

For every fault: no offloaded pod is lost (the local pods keep their remote ones, by UID), none
is duplicated (never two remote pods for one local pod, sampled throughout), no remote pod
outlives its local pod once things settle, no object vk does not own is touched, and the
recovery time is printed at the end of the run (`pytest_terminal_summary`).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.serialization import Encoding

from tests.conftest import Clusters
from tests.faults.figures import record
from tests.faults.watch_proxy import FAULTS as WATCH_FAULTS
from tests.faults.watch_proxy import WatchFaultProxy
from tests.integration.polling import wait_until
from tests.integration.test_kubelet_api import kubelet_get
from tests.integration.test_namespace_offloading import deployment
from vk.api.constants import LOCAL_POD_UID_ANNOTATION
from vk.controllers.local_processes import processes_with, read_pid
from vk.kube.client import KubeClient, NotFound, resource_path
from vk.kube.informer import Informer
from vk.kube.kubeconfig import ClusterConnection, load_kubeconfig_file
from vk.kube.pki import build_ca, issue
from vk.playground.playground import Playground
from vk.playground.spec import ClusterSpec

CONSUMER, PROVIDER = "rome", "milan"
NAMESPACE = "faults"  # offloaded to milan under its own name
WATCHED = "watch-faults"  # milan's, watched through a fault-injecting proxy
REGION = "topology.liqo.io/region"
VKCTL = str(Path(sys.executable).parent / "vkctl")
# How long a request to a frozen provider may take to fail: the kubelet API gives the provider
# 30 s to answer (PROVIDER_ANSWER_SECONDS); kubectl and the home API server add their part.
FROZEN_BOUND = 45.0


@dataclass
class Faults:
    clusters: Clusters
    root: Path
    duplicates: list[str] = field(default_factory=list)

    def kubectl(self, cluster: str, *args: str, check: bool = True, timeout: float = 120) -> Any:
        return self.clusters.kubectl(cluster, *args, check=check, timeout=timeout)

    def items(self, cluster: str, *args: str) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = json.loads(
            self.kubectl(cluster, "get", *args, "-o", "json").stdout
        )["items"]
        return found

    def component_pid(self, cluster: str, component: str) -> int:
        pid = read_pid(self.clusters.playground.paths(cluster).pid(component))
        assert pid is not None, f"{cluster}'s {component} runs"
        return pid

    def virtual_kubelet_pid(self) -> int | None:
        for pid in processes_with(str(self.root)):
            try:
                argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"kubelet" in argv and any(a.endswith(b"/vk") for a in argv[:2]):
                return pid
        return None

    def open_files(self, pid: int) -> dict[str, str]:
        """`pid`'s open files, by descriptor: what each is, a TCP socket by its two ends and
        state (so a failure can say what piled up)."""
        connections = tcp_connections(pid)
        files = {}
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                inode = target.removeprefix("socket:[").removesuffix("]")
                files[fd] = connections.get(inode, target)
        return files

    def local_pods(self) -> list[dict[str, Any]]:
        return self.items(CONSUMER, "pods", "-n", NAMESPACE)

    def remote_pods(self) -> list[dict[str, Any]]:
        return self.items(PROVIDER, "pods", "-n", NAMESPACE)

    def problems(self) -> list[str]:
        """What is wrong between the local pods and the remote ones now; duplicates are also
        kept in `duplicates`, for the test to fail on even if they go away later."""
        local = {p["metadata"]["uid"]: p for p in self.local_pods()}
        owners = Counter(
            (p["metadata"].get("annotations") or {}).get(LOCAL_POD_UID_ANNOTATION, "")
            for p in self.remote_pods()
            if not p["metadata"].get("deletionTimestamp")
        )
        found = [f"two remote pods for local pod {uid}" for uid, n in owners.items() if n > 1]
        self.duplicates += found
        found += [f"remote pod of a local pod gone ({uid})" for uid in owners if uid not in local]
        found += [
            f"local pod {pod['metadata']['name']} has no remote pod"
            for uid, pod in local.items()
            if uid not in owners and not pod["metadata"].get("deletionTimestamp")
        ]
        return found

    def settled(self, what: str, timeout: float = 120) -> None:
        wait_until(lambda: not self.problems(), what, timeout, explain=lambda: str(self.problems()))
        assert not self.duplicates, self.duplicates

    def remote_pods_of(self, selector: str) -> int:
        """How many local pods of `selector` have a remote pod (by UID)."""
        local = {p["metadata"]["uid"] for p in self.items(CONSUMER, "pods", "-n", NAMESPACE,
                                                          "-l", selector)}  # fmt: skip
        return sum(
            (p["metadata"].get("annotations") or {}).get(LOCAL_POD_UID_ANNOTATION) in local
            for p in self.remote_pods()
        )

    def running(self, selector: str) -> list[str]:
        """Names of the local pods of `selector` Running (on the virtual node)."""
        return [
            p["metadata"]["name"]
            for p in self.items(CONSUMER, "pods", "-n", NAMESPACE, "-l", selector)
            if (p.get("status") or {}).get("phase") == "Running"
            and not p["metadata"].get("deletionTimestamp")
        ]

    def pods_ready(self, selector: str, cluster: str = CONSUMER) -> dict[str, bool]:
        """Whether each pod of `selector` is Ready (at home: as home's Services see it), by
        name."""
        return {
            p["metadata"]["name"]: any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in (p.get("status") or {}).get("conditions") or []
            )
            for p in self.items(cluster, "pods", "-n", NAMESPACE, "-l", selector)
        }

    def node_ready(self) -> bool:
        node = json.loads(self.kubectl(CONSUMER, "get", "node", PROVIDER, "-o", "json").stdout)
        return any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in (node.get("status") or {}).get("conditions") or []
        )

    def api_server_answers(self, cluster: str) -> bool:
        # The kubeconfig's path, not the playground's record of it: `up` rewrites that.
        kubeconfig = self.clusters.playground.paths(cluster).kubeconfig
        try:
            answer = subprocess.run(
                ["kubectl", f"--kubeconfig={kubeconfig}", "get", "--raw=/readyz"],
                capture_output=True,
                timeout=5,
            )
        except subprocess.TimeoutExpired:
            return False
        return answer.returncode == 0

    def request(self, args: list[str]) -> tuple[float, Any]:
        """`kubectl args` against rome: (seconds it took, its result)."""
        return timed(lambda: self.kubectl(CONSUMER, *args, check=False, timeout=150))

    def restart(self, cluster: str) -> float:
        """`playground up`, which starts again whatever was stopped or died; returns the
        monotonic time `cluster`'s API server first answered (recoveries count from then,
        not from when `up` is done with everything else)."""
        answered: list[float] = []
        done = threading.Event()

        def watch() -> None:
            while not done.is_set() and not answered:
                if self.api_server_answers(cluster):
                    answered.append(time.monotonic())
                time.sleep(0.1)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            self.clusters.playground.up()
            wait_until(lambda: answered, f"{cluster}'s API server back", 60)
        finally:
            done.set()
            watcher.join()
        return answered[0]

    def apply(self, obj: dict[str, Any]) -> None:
        self.clusters.kubectl(CONSUMER, "apply", "-n", NAMESPACE, "-f", "-", input=json.dumps(obj))


def vkctl(clusters: Clusters, *args: str) -> None:
    done = subprocess.run(
        [VKCTL, *args, f"--kubeconfig={clusters.kubeconfig(CONSUMER)}"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr


@pytest.fixture(scope="module")
def faults(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Faults]:
    root = tmp_path_factory.mktemp("faults")
    playground = Playground(root=root)
    specs = (
        ClusterSpec(CONSUMER, "consumer", 1, {REGION: "north"}),
        ClusterSpec(PROVIDER, "provider", 2, {REGION: "south"}),
    )
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    try:
        with capture.global_and_fixture_disabled():
            playground.up(specs)
        clusters = Clusters(playground, specs)
        vkctl(
            clusters, "peer", f"--remote-kubeconfig={clusters.kubeconfig(PROVIDER)}",
            "--pods=300",  # room for the 200-pod burst
        )  # fmt: skip
        clusters.kubectl(CONSUMER, "create", "namespace", NAMESPACE)
        vkctl(
            clusters, "offload", "namespace", NAMESPACE,
            "--namespace-mapping-strategy=EnforceSameName", "--pod-offloading-strategy=Remote",
        )  # fmt: skip
        state = Faults(clusters, root)
        bystanders = Bystanders(state)
        yield state
        bystanders.check_untouched()
    finally:
        keep_logs(root, tmp_path_factory.mktemp("faults-logs"))
        playground.down()


def keep_logs(root: Path, into: Path) -> None:
    """The components' and virtual kubelets' logs, kept past `down` for whoever debugs a
    failure (pytest keeps the last runs' temporary directories)."""
    for log in [*root.glob("*/logs/*.log"), *root.rglob("virtual-kubelets/**/log")]:
        target = into / log.relative_to(root)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(log, target)


class Bystanders:
    """Objects vk does not own, one in each cluster, next to what it does own: never touched."""

    def __init__(self, faults: Faults) -> None:
        self.faults = faults
        faults.kubectl(CONSUMER, "create", "secret", "generic", "bystander", "-n", "kube-system",
                       "--from-literal=a=1")  # fmt: skip
        faults.kubectl(PROVIDER, "create", "configmap", "bystander", "-n", NAMESPACE,
                       "--from-literal=a=1")  # fmt: skip
        self.versions = self.current()

    def current(self) -> dict[str, str]:
        secret = self.faults.kubectl(CONSUMER, "get", "secret", "bystander", "-n", "kube-system",
                                     "-o", "jsonpath={.metadata.resourceVersion}")  # fmt: skip
        configmap = self.faults.kubectl(PROVIDER, "get", "configmap", "bystander",
                                        "-n", NAMESPACE,
                                        "-o", "jsonpath={.metadata.resourceVersion}")  # fmt: skip
        return {"secret": secret.stdout, "configmap": configmap.stdout}

    def check_untouched(self) -> None:
        assert self.current() == self.versions


TCP_STATES = {"01": "ESTABLISHED", "02": "SYN_SENT", "06": "TIME_WAIT", "08": "CLOSE_WAIT"}


def tcp_connections(pid: int) -> dict[str, str]:
    """The TCP sockets in `pid`'s network namespace, by inode: `local -> remote STATE`."""
    connections = {}
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
                ports = f"{int(local.rsplit(':')[1], 16)} -> {int(remote.rsplit(':')[1], 16)}"
                connections[inode] = f"tcp {ports} {TCP_STATES.get(state, state)}"
    return connections


def timed(action: Callable[[], Any]) -> tuple[float, Any]:
    started = time.monotonic()
    result = action()
    return time.monotonic() - started, result


def wait_timed(condition: Callable[[], Any], what: str, timeout: float, since: float) -> float:
    """Waits for `condition`; returns the seconds from `since` (a monotonic time)."""
    wait_until(condition, what, timeout)
    return time.monotonic() - since


def test_a_frozen_provider_fails_each_request_within_a_bound_without_piling_up(
    faults: Faults,
) -> None:
    faults.apply(deployment("steady", 2))
    wait_until(lambda: len(faults.running("app=steady")) == 2, "steady Running offloaded", 60)
    pod = faults.running("app=steady")[0]
    virtual_kubelet = faults.virtual_kubelet_pid()
    assert virtual_kubelet is not None
    files_before = faults.open_files(virtual_kubelet)
    api_server = faults.component_pid(PROVIDER, "kube-apiserver")
    os.kill(api_server, signal.SIGSTOP)
    frozen = time.monotonic()
    try:
        requests = {
            "kubectl logs": ["logs", pod, "-n", NAMESPACE],
            "kubectl exec": ["exec", pod, "-n", NAMESPACE, "--", "true"],
            "/stats/summary": ["get", "--raw", f"/api/v1/nodes/{PROVIDER}/proxy/stats/summary"],
        }
        with ThreadPoolExecutor(max_workers=16) as pool:
            futures = {
                (name, i): pool.submit(faults.request, args)
                for name, args in requests.items()
                for i in range(5)
            }
            not_ready = wait_timed(
                lambda: not faults.node_ready(), "the node NotReady", 60, since=frozen
            )
            outcomes = {key: future.result() for key, future in futures.items()}
        for (name, _), (seconds, result) in outcomes.items():
            assert result.returncode != 0, f"{name} answered from a frozen provider"
            assert seconds < FROZEN_BOUND, f"{name} took {seconds:.0f} s to fail"
        for name in requests:
            slowest = max(s for (n, _), (s, _) in outcomes.items() if n == name)
            record("provider API server frozen", f"{name} failed (slowest of 5) after", slowest)
        record("provider API server frozen", "node NotReady after", not_ready)
        # The controller manager marks the node's pods unavailable, the virtual kubelet reports
        # them not Ready: home's Services stop sending them traffic.
        unready = wait_timed(
            lambda: list(faults.pods_ready("app=steady").values()) == [False, False],
            "the offloaded pods not Ready",
            60,
            since=frozen,
        )
        record("provider API server frozen", "offloaded pods not Ready after", unready)
        # Still frozen: whatever the requests opened is closed within their bounds (a socket
        # closed mid-way may linger while its TLS shutdown waits on the frozen peer), so the
        # virtual kubelet's descriptors come back near where they were, and stay bounded.
        opened: list[str] = []

        def settled() -> bool:
            files_now = faults.open_files(virtual_kubelet)
            opened[:] = sorted(files_now[fd] for fd in files_now.keys() - files_before.keys())
            return len(files_now) - len(files_before) < 10

        wait_until(
            settled,
            "the virtual kubelet's descriptors released",
            FROZEN_BOUND,
            explain=lambda: f"requests to a frozen provider pile up, still open: {opened}",
        )
    finally:
        os.kill(api_server, signal.SIGCONT)
    thawed = time.monotonic()
    # The provider's controller manager could not renew its Lease while the API server was
    # frozen, and exited for a fresh replica to take over: started again, as its pod would be.
    faults.clusters.playground.up()
    ready = wait_timed(faults.node_ready, "the node Ready again", 60, since=thawed)
    record("provider API server frozen", "node Ready again after thawing", ready)
    # As Ready as the provider's pods: its own node controller may have marked them not Ready
    # too (kwok's nodes missed their heartbeats while it was frozen, and kwok leaves them so).
    ready = wait_timed(
        lambda: (
            faults.pods_ready("app=steady") == faults.pods_ready("app=steady", cluster=PROVIDER)
        ),
        "the offloaded pods as Ready as the provider's",
        60,
        since=thawed,
    )
    record(
        "provider API server frozen",
        "offloaded pods as Ready as the provider's after thawing",
        ready,
    )
    logs = faults.kubectl(CONSUMER, "logs", pod, "-n", NAMESPACE, check=False)
    assert logs.returncode == 0, logs.stderr
    faults.settled("steady offloaded as before")


def test_pods_made_during_a_two_minute_provider_outage_are_offloaded_once_it_is_back(
    faults: Faults,
) -> None:
    """And a pod evicted at home meanwhile (a short tolerationSeconds) has its remote pod
    deleted once the provider is back: it never outlives its local pod."""
    tolerations = [
        {"key": f"node.kubernetes.io/{taint}", "operator": "Exists", "effect": "NoExecute",
         "tolerationSeconds": 10}
        for taint in ("not-ready", "unreachable")
    ]  # fmt: skip
    faults.apply(deployment("evictable", 1, tolerations=tolerations))
    wait_until(lambda: faults.running("app=evictable"), "evictable Running offloaded", 60)
    faults.clusters.playground.stop_component(PROVIDER, "kube-apiserver")
    down = time.monotonic()
    not_ready = wait_timed(lambda: not faults.node_ready(), "the node NotReady", 60, since=down)
    record("provider API server down 2 min", "node NotReady after", not_ready)
    faults.apply(deployment("during-outage", 5))
    time.sleep(max(0.0, 120 - (time.monotonic() - down)))
    back = faults.restart(PROVIDER)  # its API server, and whatever died with it
    ready = wait_timed(faults.node_ready, "the node Ready again", 60, since=back)
    record("provider API server down 2 min", "node Ready again after its return", ready)
    scheduled = wait_timed(
        lambda: all(
            (p.get("spec") or {}).get("nodeName") == PROVIDER
            for p in faults.items(CONSUMER, "pods", "-n", NAMESPACE, "-l", "app=during-outage")
        ),
        "the pods made during the outage scheduled",
        120,
        since=back,
    )
    record("provider API server down 2 min", "pods made meanwhile scheduled after its return",
           scheduled)  # fmt: skip
    offloaded = wait_timed(
        lambda: faults.remote_pods_of("app=during-outage") == 5,
        "the pods made during the outage offloaded (their remote pods made)",
        120,
        since=back,
    )
    record("provider API server down 2 min",
           "pods made meanwhile offloaded (remote pods made) after its return",
           offloaded)  # fmt: skip
    # Running is up to the provider's own control plane from there (its scheduler, back
    # from the outage too, elects a leader first).
    running = wait_timed(
        lambda: len(faults.running("app=during-outage")) == 5 and not faults.problems(),
        "the pods made during the outage Running offloaded",
        120,
        since=back,
    )
    record("provider API server down 2 min", "pods made meanwhile Running after its return",
           running)  # fmt: skip
    faults.settled("every pod offloaded once, none left over")
    record("provider API server down 2 min", "settled (evicted pods' remote copies gone) after",
           time.monotonic() - back)  # fmt: skip


def test_killing_the_virtual_kubelet_and_both_controller_managers_mid_burst(
    faults: Faults,
) -> None:
    replicas = 200
    started = time.monotonic()
    faults.apply(deployment("burst", replicas))
    wait_until(lambda: len(faults.remote_pods()) >= 60, "a third of the burst offloaded", 120)
    virtual_kubelet = faults.virtual_kubelet_pid()
    assert virtual_kubelet is not None
    os.kill(virtual_kubelet, signal.SIGKILL)
    faults.problems()  # sampled for duplicates
    wait_until(lambda: len(faults.remote_pods()) >= 120, "more of the burst offloaded", 120)
    faults.problems()
    for cluster in (PROVIDER, CONSUMER):
        os.kill(faults.component_pid(cluster, "vk-controller-manager"), signal.SIGKILL)
    faults.clusters.playground.up()  # as their Deployments would start them again

    def all_offloaded() -> bool:
        problems = faults.problems()  # sampled for duplicates on every look
        return not problems and len(faults.running("app=burst")) == replicas

    done = wait_timed(
        all_offloaded,
        "the whole burst Running offloaded",
        300,
        since=started,
    )
    record("kill -9 of the virtual kubelet and of both controller managers",
           f"{replicas}-pod burst all Running offloaded after", done)  # fmt: skip
    faults.settled("one remote pod per local pod")
    faults.kubectl(CONSUMER, "delete", "deployment", "burst", "-n", NAMESPACE)
    wait_until(lambda: len(faults.remote_pods()) <= 10, "the burst's remote pods deleted", 180)


def set_failure_policy(faults: Faults, cluster: str, policy: str) -> None:
    """Every vk webhook of `cluster` failing `policy` (Fail: closed, Ignore: open)."""
    for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
        configuration = json.loads(faults.kubectl(cluster, "get", kind, "vk", "-o", "json").stdout)
        for webhook in configuration["webhooks"]:
            webhook["failurePolicy"] = policy
        faults.clusters.kubectl(cluster, "replace", "-f", "-", input=json.dumps(configuration))


def told_at_home(faults: Faults, selector: str, words: str) -> bool:
    """Whether every local pod of `selector` says `words` in its status (why it waits)."""
    pods = faults.items(CONSUMER, "pods", "-n", NAMESPACE, "-l", selector)
    return bool(pods) and all(words in ((p.get("status") or {}).get("message") or "") for p in pods)


def no_remote_pod_meanwhile(faults: Faults, selector: str, seconds: float) -> None:
    """Sampled for `seconds`: no local pod of `selector` has a remote pod."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert faults.remote_pods_of(selector) == 0, "a pod ran unadmitted by the provider"
        time.sleep(2)


def offloaded_from_now(faults: Faults, selector: str, replicas: int) -> float:
    """Seconds from now until the `replicas` pods of `selector` are Running offloaded."""
    return wait_timed(
        lambda: (
            faults.remote_pods_of(selector) == replicas
            and len(faults.running(selector)) == replicas
        ),
        f"the {replicas} pods of {selector} Running offloaded",
        180,
        since=time.monotonic(),
    )


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_the_providers_webhook_down_admits_nothing_unchecked_and_loses_nothing(
    faults: Faults, policy: str
) -> None:
    """Under Fail the provider refuses the ShadowPods (said at home, asked again every few
    seconds); under Ignore it stores them unstamped and unreserved, and makes no Pod of them
    (said at home; the virtual kubelet withdraws each and asks again). Once the webhook is
    back (and its configuration with it), every pod is offloaded once."""
    selector = f"app=webhook-{policy.lower()}"
    faults.clusters.playground.stop_component(PROVIDER, "vk-webhook")
    if policy == "Ignore":
        set_failure_policy(faults, PROVIDER, "Ignore")
    try:
        faults.apply(deployment(f"webhook-{policy.lower()}", 3))
        why = "could not take the pod now" if policy == "Fail" else "NotReserved"
        wait_until(lambda: told_at_home(faults, selector, why), f"the pods say {why!r}", 60)
        no_remote_pod_meanwhile(faults, selector, 20)
    finally:
        faults.clusters.playground.up()  # the webhook, and its configurations (Fail)
    offloaded = offloaded_from_now(faults, selector, 3)
    record(f"provider's webhook down ({policy})", "pods made meanwhile Running after its return",
           offloaded)  # fmt: skip
    faults.settled("one remote pod per local pod")
    faults.kubectl(CONSUMER, "delete", "deployment", f"webhook-{policy.lower()}", "-n", NAMESPACE)


@pytest.mark.parametrize("policy", ["Fail", "Ignore"])
def test_the_consumers_webhook_down_places_no_pod_against_its_namespace(
    faults: Faults, policy: str
) -> None:
    """The namespace says Remote. Under Fail the API server refuses the pods (the webhook
    does not answer); under Ignore it refuses them too, by vk's own ValidatingAdmissionPolicy
    (the webhook did not place them): none runs at home meanwhile. Once the webhook is back,
    the ReplicaSet controller's retries make them, placed, and they are offloaded."""
    name = f"home-webhook-{policy.lower()}"
    selector = f"app={name}"
    faults.clusters.playground.stop_component(CONSUMER, "vk-webhook")
    if policy == "Ignore":
        set_failure_policy(faults, CONSUMER, "Ignore")
    try:
        faults.apply(deployment(name, 3))
        why = "failed calling webhook" if policy == "Fail" else "run on virtual nodes only"

        def refused() -> bool:
            events = faults.items(CONSUMER, "events", "-n", NAMESPACE,
                                  "--field-selector=reason=FailedCreate")  # fmt: skip
            return any(why in (e.get("message") or "") and name in
                       e["involvedObject"]["name"] for e in events)  # fmt: skip

        wait_until(refused, f"the ReplicaSet told {why!r}", 60)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            assert not faults.items(CONSUMER, "pods", "-n", NAMESPACE, "-l", selector)
            time.sleep(2)
    finally:
        faults.clusters.playground.up()  # the webhook, and its configurations (Fail)
    offloaded = offloaded_from_now(faults, selector, 3)
    record(f"consumer's webhook down ({policy})",
           "pods made and Running offloaded after its return (the ReplicaSet's back-off)",
           offloaded)  # fmt: skip
    faults.settled("one remote pod per local pod")
    faults.kubectl(CONSUMER, "delete", "deployment", name, "-n", NAMESPACE)


def test_a_client_ca_rotation_is_followed_without_a_restart(faults: Faults, tmp_path: Path) -> None:
    """rome's client CA rotated as a cluster's PKI is: a new CA beside the old one in the API
    server's --client-ca-file (which it reloads, and publishes in
    extension-apiserver-authentication), then the API server's kubelet client certificate
    issued by the new CA. The virtual kubelet follows each step without a restart."""
    faults.apply(deployment("rotation", 1))
    wait_until(lambda: faults.running("app=rotation"), "rotation Running offloaded", 60)
    pod = faults.running("app=rotation")[0]
    pki = faults.clusters.playground.paths(CONSUMER).pki
    now = datetime.now(UTC)
    new_ca, new_ca_key = build_ca(f"{CONSUMER}-ca-2", now)
    kubelet_client = issue(new_ca, new_ca_key, "kube-apiserver-kubelet-client", now,
                           organizations=("system:masters",), client=True)  # fmt: skip
    new_client = (tmp_path / "client.crt", tmp_path / "client.key")
    new_client[0].write_bytes(kubelet_client.cert_pem)
    new_client[1].write_bytes(kubelet_client.key_pem)
    node = json.loads(faults.kubectl(CONSUMER, "get", "node", PROVIDER, "-o", "json").stdout)
    port = int(node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"])
    virtual_kubelet = faults.virtual_kubelet_pid()
    assert kubelet_get(port, "/pods", cert=new_client)[0] == 401

    pki.client_ca.write_bytes(pki.client_ca.read_bytes() + new_ca.public_bytes(Encoding.PEM))
    added = time.monotonic()
    trusted = wait_timed(
        lambda: kubelet_get(port, "/pods", cert=new_client)[0] == 200,
        "the new CA trusted by the kubelet API",
        120,
        since=added,
    )
    record("client CA rotation", "new CA trusted by the kubelet API after the file changed",
           trusted)  # fmt: skip
    assert faults.virtual_kubelet_pid() == virtual_kubelet, "the virtual kubelet restarted"

    pki.path("apiserver-kubelet-client.crt").write_bytes(kubelet_client.cert_pem)
    pki.path("apiserver-kubelet-client.key").write_bytes(kubelet_client.key_pem)
    faults.clusters.playground.stop_component(CONSUMER, "kube-apiserver")
    back = faults.restart(CONSUMER)
    served = wait_timed(
        lambda: faults.kubectl(CONSUMER, "logs", pod, "-n", NAMESPACE, check=False).returncode == 0,
        "kubectl logs through the new kubelet client certificate",
        60,
        since=back,
    )
    record("client CA rotation",
           "kubectl logs served with the new kubelet client certificate after the API server's "
           "restart", served)  # fmt: skip
    execed = faults.kubectl(CONSUMER, "exec", pod, "-n", NAMESPACE, "--", "true", check=False)
    assert execed.returncode == 0, execed.stderr
    faults.settled("every local pod with its remote pod")
    faults.kubectl(CONSUMER, "delete", "deployment", "rotation", "-n", NAMESPACE)


async def test_malformed_and_truncated_watch_lines_lose_nothing(faults: Faults) -> None:
    """vk's informer (what every component of vk watches with) through a proxy spoiling one
    watch after another in front of milan's API server, objects changing all the while: each
    spoiled line is refused whole (never half an object in the cache), the watch resumes from
    the last real event (no list again), and the cache ends equal to the API server's."""
    faults.kubectl(PROVIDER, "create", "namespace", WATCHED)
    connection = load_kubeconfig_file(faults.clusters.kubeconfig(PROVIDER))
    proxy = WatchFaultProxy(connection, list(WATCH_FAULTS))
    await proxy.start()
    direct = KubeClient(connection, name="direct")
    informer = Informer(
        KubeClient(ClusterConnection(server=proxy.url), name="through-proxy"),
        "v1",
        "configmaps",
        namespace=WATCHED,
    )
    names: list[str] = []
    informer.add_handler(lambda _, obj, __: names.append(obj["metadata"]["name"]))
    watching = asyncio.create_task(informer.run())
    changing = asyncio.create_task(keep_changing_configmaps(direct))
    problems: set[str] = set()

    async def note_problems() -> None:
        while True:
            if informer.problem:
                problems.add(informer.problem)
            await asyncio.sleep(0.05)

    noting = asyncio.create_task(note_problems())
    try:
        await asyncio.wait_for(informer.synced.wait(), 30)
        deadline = time.monotonic() + 180
        while len(proxy.served) < len(WATCH_FAULTS):
            assert time.monotonic() < deadline, f"faults served: {proxy.served}"
            assert not watching.done(), "the informer stopped"
            await asyncio.sleep(0.05)
        last_fault = time.monotonic()
        # The last fault noticed (the problem is kept until a watch works again).
        while not any("bytes: not an event" in problem for problem in problems):
            assert time.monotonic() - last_fault < 30, problems
            await asyncio.sleep(0.05)
        changing.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await changing

        async def server_copy() -> dict[str, str]:
            listed = await direct.get(resource_path("v1", "configmaps", namespace=WATCHED))
            return {
                c["metadata"]["name"]: c["metadata"]["resourceVersion"] for c in listed["items"]
            }

        def cache_copy() -> dict[str, str]:
            return {c["metadata"]["name"]: c["metadata"]["resourceVersion"]
                    for c in informer.store.objects()}  # fmt: skip

        while cache_copy() != await server_copy():
            assert time.monotonic() - last_fault < 60, "the cache never caught up"
            await asyncio.sleep(0.1)
        record("malformed and truncated watch lines (9 kinds, through a proxy)",
               "informer's cache equal to the API server's after the last",
               time.monotonic() - last_fault)  # fmt: skip
        assert proxy.served == list(WATCH_FAULTS)
        assert informer.lists == 1, "a spoiled line made the informer list everything again"
        made = {f"watched-{i}" for i in range(10)} | {"kube-root-ca.crt"}
        assert set(names) <= made, f"half an object cached: {set(names) - made}"
        for said in ("not JSON", "not an event", "without an object", "unnamed object",
                     "in the middle of an event", "bytes: not an event"):  # fmt: skip
            assert any(said in problem for problem in problems), (said, problems)
    finally:
        for task in (changing, watching, noting):
            task.cancel()
        await asyncio.gather(changing, watching, noting, return_exceptions=True)
        await informer.client.close()
        await direct.close()
        await proxy.stop()
        faults.kubectl(PROVIDER, "delete", "namespace", WATCHED, "--wait=false")


async def keep_changing_configmaps(client: KubeClient) -> None:
    """ConfigMaps of WATCHED made, changed and deleted, one every 0.2 s."""
    for step in itertools.count():
        name = f"watched-{step % 10}"
        path = resource_path("v1", "configmaps", namespace=WATCHED, name=name)
        if step % 7 == 6:
            with contextlib.suppress(NotFound):
                await client.delete(path)
        else:
            body = {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": WATCHED},
                "data": {"step": str(step)},
            }
            await client.apply(path, body)
        await asyncio.sleep(0.2)


def test_the_consumer_api_server_down_past_the_lease_deadlines_loses_nothing(
    faults: Faults,
) -> None:
    before = {p["metadata"]["uid"] for p in faults.remote_pods()}
    assert before
    faults.clusters.playground.stop_component(CONSUMER, "kube-apiserver")
    time.sleep(30)  # past the virtual kubelet's and the controller manager's renew deadline
    back = faults.restart(CONSUMER)
    ready = wait_timed(faults.node_ready, "the virtual node Ready again", 120, since=back)
    record("consumer API server down 30 s", "virtual node Ready again after its return", ready)
    faults.settled("every local pod with its remote pod")
    after = {p["metadata"]["uid"] for p in faults.remote_pods()}
    assert after == before, "remote pods re-created or lost"
