"""`kubectl top` on offloaded pods (issue 5): the provider's kwok simulates the pods' usage as a
kubelet counts it, the provider's metrics agent hands the consumer its pods' counters, the
virtual kubelet serves them as its `/metrics/resource`, and venice's metrics-server scrapes that,
as it scrapes any kubelet. The same virtual kubelet's `/metrics/cadvisor` and
`/metrics/probes`, as a Prometheus scraping nodes reads them."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.test_kubelet_api import kubelet_get
from tests.integration.virtual_kubelets import VirtualNodeSetup
from vk.api.quantity import parse_quantity

USAGE_CPU, USAGE_MEMORY = "250m", "96Mi"


def top(setup: VirtualNodeSetup, *args: str) -> dict[str, tuple[str, str]]:
    """`kubectl top` rows as name -> (CPU, memory); empty while metrics are not there yet."""
    result = setup.kubectl("top", *args, "--no-headers", check=False)
    rows = [line.split() for line in result.stdout.splitlines() if line.strip()]
    return {row[0]: (row[1], row[-2] if args[0] == "node" else row[2]) for row in rows}


def within_ten_percent(measured: str, simulated: str) -> bool:
    value, expected = parse_quantity(measured), parse_quantity(simulated)
    return abs(value - expected) <= expected * Decimal("0.1")


@pytest.fixture(scope="module")
def offloaded_with_usage(
    hand_made_virtual_kubelets: Clusters,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[VirtualNodeSetup, str]]:
    setup = VirtualNodeSetup(hand_made_virtual_kubelets, tmp_path_factory.mktemp("top"))
    setup.create()
    namespace = setup.local_namespace()
    setup.offload_namespace(namespace)
    setup.start()  # a kubelet-serving certificate, which venice's metrics-server verifies
    wait_until(setup.ready, "the virtual node Ready")
    deployment = setup.deployment("busy", namespace, 2)
    deployment["spec"]["template"]["metadata"]["annotations"] = {
        "kwok.x-k8s.io/usage-cpu": USAGE_CPU,
        "kwok.x-k8s.io/usage-memory": USAGE_MEMORY,
    }
    setup.apply(deployment)
    setup.running_pod(namespace, "busy")
    yield setup, namespace
    setup.cleanup()


def test_kubectl_top_pod_shows_the_usage_the_provider_measures(
    offloaded_with_usage: tuple[VirtualNodeSetup, str],
) -> None:
    setup, namespace = offloaded_with_usage
    pods = {p["metadata"]["name"] for p in setup.pods("venice", namespace, "app=busy")}
    rows = wait_until(
        lambda: (found := top(setup, "pod", "-n", namespace)) and set(found) == pods and found,
        "kubectl top pod listing both offloaded pods",
        timeout=150,
    )
    for name, (cpu, memory) in rows.items():
        assert within_ten_percent(cpu, USAGE_CPU), (name, cpu)
        assert within_ten_percent(memory, USAGE_MEMORY), (name, memory)
    # The provider's own metrics-server measures the same pods; venice's figures no longer wait
    # for it (they are the provider's kubelets' counters, read through its metrics agent).
    provider = wait_until(
        lambda: (
            found := setup.clusters.kubectl(
                setup.provider, "top", "pod", "-n", f"{namespace}-venice", "--no-headers",
                check=False,
            )
        ).returncode == 0 and found.stdout,
        "kubectl top pod at the provider",
        timeout=90,
    )  # fmt: skip
    assert {line.split()[0] for line in provider.splitlines()} == pods


def test_kubectl_top_node_lists_the_virtual_node(
    offloaded_with_usage: tuple[VirtualNodeSetup, str],
) -> None:
    setup, _ = offloaded_with_usage

    def virtual_node_row() -> tuple[str, str] | None:
        row = top(setup, "node").get(setup.node)
        return row if row and row[0] != "<unknown>" else None

    cpu, memory = wait_until(virtual_node_row, "the virtual node in kubectl top node", timeout=150)
    # Two pods of the simulated usage each; the node's percentages are of its quota.
    assert within_ten_percent(cpu, "500m"), cpu
    assert within_ten_percent(memory, "192Mi"), memory


def test_cadvisor_metrics_of_the_offloaded_pods_through_the_api_server(
    offloaded_with_usage: tuple[VirtualNodeSetup, str],
) -> None:
    """`/metrics/cadvisor`, as the API server's proxy reads it for a Prometheus scraping
    nodes (with its kubelet client certificate): each offloaded container's CPU and working set
    under cAdvisor's names and labels, its image the local pod's."""
    setup, namespace = offloaded_with_usage
    pods = {p["metadata"]["name"] for p in setup.pods("venice", namespace, "app=busy")}

    # The API server refuses to proxy to 127.0.0.1, where the playground's virtual kubelets
    # listen: called as it calls kubelets, with its kubelet client certificate.
    pki = setup.clusters.playground.paths("venice").pki
    cert = (pki.path("apiserver-kubelet-client.crt"), pki.path("apiserver-kubelet-client.key"))

    # Whoever can reach the port without the API server's certificate (or a user allowed
    # nodes/metrics) reads nothing of the offloaded pods.
    assert kubelet_get(setup.replicas[0].kubelet_port, "/metrics/cadvisor")[0] == 401

    def scraped() -> dict[str, dict[str, float]]:
        code, text = kubelet_get(setup.replicas[0].kubelet_port, "/metrics/cadvisor", cert=cert)
        assert code == 200, text
        series: dict[str, dict[str, float]] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = sample.labels
                if labels.get("namespace") == namespace and labels.get("container") == "app":
                    assert labels["image"] == "nginx"
                    series.setdefault(labels["pod"], {})[sample.name] = sample.value
        return series

    series = wait_until(
        lambda: (found := scraped()) and set(found) == pods and found,
        "cAdvisor series for both offloaded pods",
        timeout=150,
    )
    for values in series.values():
        assert values["container_cpu_usage_seconds_total"] > 0
        assert within_ten_percent(
            str(int(values["container_memory_working_set_bytes"])), USAGE_MEMORY
        )


def test_probe_metrics_count_the_provider_kubelets_failed_probes(
    offloaded_with_usage: tuple[VirtualNodeSetup, str],
) -> None:
    """`/metrics/probes`: each probe an offloaded pod declares, its failures counted from the
    `Unhealthy` Events the provider's kubelet records (written here by naples' admin, as its
    kubelet writes them: kwok runs no probes). Events about probes the pod does not declare,
    or a container it does not have, count for nothing."""
    setup, namespace = offloaded_with_usage
    remote_namespace = f"{namespace}-venice"
    deployment = setup.deployment("probed", namespace, 1)
    probe = {"tcpSocket": {"port": 80}, "periodSeconds": 10}
    deployment["spec"]["template"]["spec"]["containers"][0].update(
        readinessProbe=probe, livenessProbe=probe
    )
    setup.apply(deployment)
    pod = setup.running_pod(namespace, "probed")
    [remote] = [
        p for p in setup.pods(setup.provider, remote_namespace) if p["metadata"]["name"] == pod
    ]
    pki = setup.clusters.playground.paths("venice").pki
    cert = (pki.path("apiserver-kubelet-client.crt"), pki.path("apiserver-kubelet-client.key"))
    assert kubelet_get(setup.replicas[0].kubelet_port, "/metrics/probes")[0] == 401

    def failed() -> dict[tuple[str, str], float]:
        code, text = kubelet_get(setup.replicas[0].kubelet_port, "/metrics/probes", cert=cert)
        assert code == 200, text
        return {
            (sample.labels["container"], sample.labels["probe_type"]): sample.value
            for family in text_string_to_metric_families(text)
            for sample in family.samples
            if sample.labels["pod"] == pod
            and sample.labels["namespace"] == namespace
            and sample.labels["result"] == "failed"
        }

    def event(name: str, message: str, count: int, container: str = "app") -> dict[str, object]:
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": remote_namespace},
            "involvedObject": {
                "apiVersion": "v1",
                "kind": "Pod",
                "namespace": remote_namespace,
                "name": pod,
                "uid": remote["metadata"]["uid"],
                "fieldPath": f"spec.containers{{{container}}}",
            },
            "reason": "Unhealthy",
            "message": message,
            "source": {"component": "kubelet", "host": remote["spec"].get("nodeName", "")},
            "type": "Warning",
            "count": count,
            "firstTimestamp": "2026-11-25T00:00:00Z",
            "lastTimestamp": "2026-11-25T00:00:00Z",
        }

    expected = {("app", "Readiness"): 0.0, ("app", "Liveness"): 0.0}
    wait_until(lambda: failed() == expected, "both declared probes at 0 failed", timeout=60)

    def naples_apply(*events: dict[str, object]) -> None:
        setup.clusters.kubectl(
            setup.provider,
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(events)}),
        )

    naples_apply(
        event(
            f"{pod}.readiness", "Readiness probe failed: HTTP probe failed with statuscode: 503", 3
        ),
        # What a hostile provider might add: a probe the pod does not declare, a container it
        # does not have.
        event(f"{pod}.startup", "Startup probe failed: invented", 50),
        event(f"{pod}.miner", "Liveness probe failed: invented", 50, container="miner"),
    )
    expected[("app", "Readiness")] = 3.0
    wait_until(lambda: failed() == expected, "3 failed readiness probes, nothing else", timeout=30)
    naples_apply(
        event(
            f"{pod}.readiness", "Readiness probe failed: HTTP probe failed with statuscode: 503", 5
        )
    )
    expected[("app", "Readiness")] = 5.0
    wait_until(lambda: failed() == expected, "the Event's count grown to 5", timeout=30)
