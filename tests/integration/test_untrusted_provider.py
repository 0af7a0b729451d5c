"""The consumer is safe from its providers (issue 19), tried as a provider turned attacker would
on the playground: venice peered with naples, naples writing whatever it likes into what it
reports back to venice."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Clusters
from tests.integration.conftest import installed_controller_manager_stopped
from tests.integration.polling import wait_until
from tests.integration.test_namespace_offloading import apply, deployment, vkctl
from vk.api.constants import PROVIDER_STATUS_BURST, PROVIDER_STATUS_INTERVAL_SECONDS
from vk.reflection.event.events import EVENT_WRITE_INTERVAL_SECONDS, MAX_EVENTS_PER_OBJECT

CONSUMER, PROVIDER = "venice", "naples"


@pytest.fixture
def offloaded(naples_peered: Clusters) -> Iterator[str]:
    """A namespace of venice offloaded to naples under its own name, its pods all there."""
    namespace = f"ut-{uuid.uuid4().hex[:8]}"
    naples_peered.kubectl(CONSUMER, "create", "namespace", namespace)
    done = vkctl(
        naples_peered, "offload", "namespace", namespace,
        "--namespace-mapping-strategy", "EnforceSameName", "--pod-offloading-strategy", "Remote",
        "--selector=topology.liqo.io/region=south",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    try:
        yield namespace
    finally:
        vkctl(naples_peered, "unoffload", "namespace", namespace, "--timeout=120s")
        naples_peered.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def items(clusters: Clusters, cluster: str, *args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(
        clusters.kubectl(cluster, "get", *args, "-o", "json").stdout
    )["items"]
    return found


def web_running(clusters: Clusters, namespace: str, cluster: str) -> dict[str, Any]:
    """The Deployment `web`'s one pod, once Running (and with its IP) in `cluster`."""

    def running() -> dict[str, Any] | None:
        pods = items(clusters, cluster, "pods", "-n", namespace, "-l", "app=web")
        status = pods[0]["status"] if pods else {}
        return pods[0] if status.get("phase") == "Running" and status.get("podIP") else None

    found: dict[str, Any] = wait_until(running, f"the offloaded pod Running at {cluster}", 60)
    return found


def pod_warning(clusters: Clusters, namespace: str, pod: str, reason: str) -> str:
    """The message of venice's Warning `reason` about `pod`, once there is one."""

    def said() -> str | None:
        selector = f"--field-selector=reason={reason},involvedObject.name={pod}"
        events = items(clusters, CONSUMER, "events", "-n", namespace, selector)
        return events[0]["message"] if events else None

    message: str = wait_until(said, f"venice's {reason} Event")
    return message


def controller_manager_metrics(clusters: Clusters, cluster: str) -> str:
    ports = json.loads(clusters.playground.paths(cluster).ports_file.read_text())
    url = f"http://127.0.0.1:{ports['vk-controller-manager']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text: str = response.read().decode()
    return text


def test_a_namespace_the_provider_reports_that_was_never_offloaded_reflects_nothing(
    naples_peered: Clusters, offloaded: str
) -> None:
    clusters = naples_peered
    bait = f"bait-{uuid.uuid4().hex[:6]}"
    loot = f"loot-{uuid.uuid4().hex[:6]}"
    clusters.kubectl(CONSUMER, "create", "secret", "generic", bait, "-n", "kube-system",
                     "--from-literal=password=hunter2")  # fmt: skip
    clusters.kubectl(PROVIDER, "create", "namespace", loot)
    tenant = f"liqo-tenant-{CONSUMER}"
    try:
        with installed_controller_manager_stopped(clusters, PROVIDER):
            # naples' own controller no longer rewrites the status: naples says what it likes.
            twin = items(clusters, PROVIDER, "namespacemaps.offloading.liqo.io", "-n", tenant)[0]
            injected = {"kube-system": {"remoteNamespace": loot, "phase": "Accepted"}}
            clusters.kubectl(
                PROVIDER, "patch", "namespacemaps.offloading.liqo.io", twin["metadata"]["name"],
                "-n", tenant, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"currentMapping": injected}}),
            )  # fmt: skip

            def said() -> str | None:
                events = items(
                    clusters, CONSUMER, "events", "-n", f"liqo-tenant-{PROVIDER}",
                    "--field-selector=reason=UntrustedMapping",
                )  # fmt: skip
                return next((e["message"] for e in events if loot in e["message"]), None)

            message = wait_until(said, "venice's Event on the untrusted entry")
            assert f"kube-system -> {loot}" in message
            assert "ignored" in message
            metrics = controller_manager_metrics(clusters, CONSUMER)
            assert f'vk_untrusted_mappings_total{{provider="{PROVIDER}"}}' in metrics
            # The entry never reaches venice's NamespaceMap, whose own entry stays.
            local = items(
                clusters, CONSUMER, "namespacemaps.offloading.liqo.io", "-n",
                f"liqo-tenant-{PROVIDER}",
            )[0]  # fmt: skip
            current = local["status"]["currentMapping"]
            assert "kube-system" not in current
            assert current[offloaded]["phase"] == "Accepted"
            # What reflection would have copied by now: nothing of venice's kube-system.
            time.sleep(5)  # reflection starts within a second of a mapping: give it five
            for kind in ("secrets", "configmaps"):
                names = [o["metadata"]["name"] for o in items(clusters, PROVIDER, kind, "-n", loot)]
                assert bait not in names
                assert "extension-apiserver-authentication" not in names
                assert set(names) <= {"kube-root-ca.crt"}, names
    finally:
        clusters.kubectl(CONSUMER, "delete", "secret", bait, "-n", "kube-system")
        clusters.kubectl(PROVIDER, "delete", "namespace", loot, "--wait=false")


def untrusted_mappings_counted(clusters: Clusters) -> float:
    for family in text_string_to_metric_families(controller_manager_metrics(clusters, CONSUMER)):
        for sample in family.samples:
            if sample.name == "vk_untrusted_mappings_total" and sample.labels == {
                "provider": PROVIDER
            }:
                return sample.value
    return 0.0


def test_unoffloading_a_namespace_raises_no_untrusted_mapping_alarm(
    naples_peered: Clusters, offloaded: str
) -> None:
    """naples answers the unoffload a moment after venice asks: meanwhile its status still says
    Accepted. That is no lie, and no one alerting on the metric is paged for it."""
    clusters = naples_peered
    counted = untrusted_mappings_counted(clusters)
    done = vkctl(clusters, "unoffload", "namespace", offloaded, "--timeout=120s")
    assert done.returncode == 0, done.stderr

    def unmapped() -> bool:
        local = items(
            clusters, CONSUMER, "namespacemaps.offloading.liqo.io", "-n", f"liqo-tenant-{PROVIDER}"
        )[0]
        return offloaded not in ((local.get("status") or {}).get("currentMapping") or {})

    wait_until(unmapped, "the unoffloaded namespace gone from venice's NamespaceMap status")
    events = items(
        clusters, CONSUMER, "events", "-n", f"liqo-tenant-{PROVIDER}",
        "--field-selector=reason=UntrustedMapping",
    )  # fmt: skip
    assert [e["message"] for e in events if offloaded in e["message"]] == []
    assert untrusted_mappings_counted(clusters) == counted


def test_a_providers_slice_status_cannot_relabel_the_node_nor_hang_the_consumer(
    naples_peered: Clusters,
) -> None:
    clusters = naples_peered
    here = f"liqo-tenant-{PROVIDER}"  # venice's tenant namespace for naples
    virtual_node = ("virtualnodes.offloading.liqo.io", PROVIDER, "-n", here)

    def spec() -> dict[str, Any]:
        found: dict[str, Any] = json.loads(
            clusters.kubectl(CONSUMER, "get", *virtual_node, "-o", "json").stdout
        )["spec"]
        return found

    def events(reason: str) -> str:
        return " ".join(
            e["message"]
            for e in items(clusters, CONSUMER, "events", "-n", here,
                           f"--field-selector=reason={reason}")
        )  # fmt: skip

    granted = spec()["resourceQuota"]["hard"]
    # venice's administrator puts a label of its own on the VirtualNode.
    clusters.kubectl(CONSUMER, "patch", *virtual_node, "--type=merge",
                     "-p", json.dumps({"spec": {"labels": {"tier": "gold"}}}))  # fmt: skip
    injected = {
        "tier": "bronze",
        "kubernetes.io/hostname": "control-plane-1",
        "node-role.kubernetes.io/control-plane": "",
        "liqo.io/remote-cluster-id": "florence",
        "provider-team": "ops",
    }
    twin = ("resourceslices.authentication.liqo.io", PROVIDER, "-n", f"liqo-tenant-{CONSUMER}")
    original = json.loads(clusters.kubectl(PROVIDER, "get", *twin, "-o", "json").stdout)["status"]

    def write_status(status: dict[str, Any]) -> None:
        clusters.kubectl(PROVIDER, "patch", *twin, "--subresource=status", "--type=merge",
                         "-p", json.dumps({"status": status}))  # fmt: skip

    try:
        with installed_controller_manager_stopped(clusters, PROVIDER):
            write_status({"nodeLabels": injected})
            labels = wait_until(
                lambda: (found := spec()["labels"]).get("provider-team") == "ops" and found,
                "the provider's own label on the VirtualNode",
            )
            assert labels["tier"] == "gold"
            assert labels["liqo.io/remote-cluster-id"] == PROVIDER
            assert "kubernetes.io/hostname" not in labels
            assert "node-role.kubernetes.io/control-plane" not in labels
            said = wait_until(lambda: events("NodeLabelsIgnored"), "venice's Event")
            for key in ("kubernetes.io/hostname", "liqo.io/remote-cluster-id", "tier"):
                assert key in said

            # A quantity no cluster keeps, and an API server that is not https.
            write_status(
                {
                    "resources": {**original["resources"], "cpu": "1e30000000"},
                    "authParams": {"apiServer": "http://naples.example:6443"},
                }
            )
            refused = wait_until(lambda: events("UntrustedStatus"), "venice's refusal Event")
            assert "'1e30000000' is out of range" in refused
            assert "is not an https URL" in refused
            assert spec()["resourceQuota"]["hard"] == granted
            info = vkctl(clusters, "info", "peer", PROVIDER)
            assert info.returncode == 0, info.stderr
    finally:
        with installed_controller_manager_stopped(clusters, PROVIDER):
            write_status(
                {
                    "nodeLabels": {key: None for key in injected},
                    "resources": original["resources"],
                    "authParams": original["authParams"],
                }
            )
        clusters.kubectl(CONSUMER, "patch", *virtual_node, "--type=merge",
                         "-p", json.dumps({"spec": {"labels": {"tier": None}}}))  # fmt: skip


def test_a_provider_rewriting_a_slices_status_on_and_on_has_it_copied_home_at_a_pace(
    naples_peered: Clusters,
) -> None:
    """The provider writes its copy of venice's ResourceSlice's status as it likes, on and on:
    each change was a status written at venice. Past a burst, one is copied every
    PROVIDER_STATUS_INTERVAL_SECONDS, and the last the provider wrote is what venice shows."""
    clusters = naples_peered
    twin = ("resourceslices.authentication.liqo.io", PROVIDER, "-n", f"liqo-tenant-{CONSUMER}")
    local = ("resourceslices.authentication.liqo.io", PROVIDER, "-n", f"liqo-tenant-{PROVIDER}")

    def write_status(status: dict[str, Any]) -> None:
        clusters.kubectl(PROVIDER, "patch", *twin, "--subresource=status", "--type=merge",
                         "-p", json.dumps({"status": status}))  # fmt: skip

    def copies() -> float:
        metrics = controller_manager_metrics(clusters, CONSUMER)
        return requests_made(metrics, "home", "PATCH", "resourceslices/status")

    def team_at_venice() -> str | None:
        status = json.loads(clusters.kubectl(CONSUMER, "get", *local, "-o", "json").stdout)
        team: str | None = (status["status"].get("nodeLabels") or {}).get("provider-team")
        return team

    rewrites = 30
    try:
        with installed_controller_manager_stopped(clusters, PROVIDER):
            before, started = copies(), time.monotonic()
            for rewrite in range(rewrites):
                write_status({"nodeLabels": {"provider-team": f"ops-{rewrite}"}})
            elapsed = time.monotonic() - started
            last = f"ops-{rewrites - 1}"
            wait_until(lambda: team_at_venice() == last, "the provider's last word at venice")
            copied = copies() - before
            paced = PROVIDER_STATUS_BURST + elapsed / PROVIDER_STATUS_INTERVAL_SECONDS + 1
            assert copied <= paced < rewrites, (copied, elapsed)
    finally:
        with installed_controller_manager_stopped(clusters, PROVIDER):
            write_status({"nodeLabels": {"provider-team": None}})


def test_a_pod_ip_of_the_consumers_own_is_not_reflected(
    naples_peered: Clusters, offloaded: str
) -> None:
    clusters = naples_peered
    apply(clusters, offloaded, deployment("web", 1))

    local = web_running(clusters, offloaded, CONSUMER)
    name = local["metadata"]["name"]
    # venice's API server's ClusterIP: what naples would have venice's Services route to it.
    hijack = json.loads(
        clusters.kubectl(
            CONSUMER, "get", "service", "kubernetes", "-n", "default", "-o", "json"
        ).stdout
    )["spec"]["clusterIP"]
    clusters.kubectl(
        PROVIDER, "patch", "pod", name, "-n", offloaded, "--subresource=status", "--type=merge",
        "-p", json.dumps({"status": {"podIP": hijack, "podIPs": [{"ip": hijack}]}}),
    )  # fmt: skip

    message = pod_warning(clusters, offloaded, name, "PodIPRefused")
    assert hijack in message
    assert "service range" in message
    reflected = json.loads(
        clusters.kubectl(CONSUMER, "get", "pod", name, "-n", offloaded, "-o", "json").stdout
    )["status"]
    assert reflected.get("podIP") != hijack
    assert hijack not in [entry.get("ip") for entry in reflected.get("podIPs") or []]


def event_about(pod: dict[str, Any], name: str, reason: str, message: str) -> dict[str, Any]:
    """A Warning Event `name` the provider makes about its copy of an offloaded pod."""
    namespace = pod["metadata"]["namespace"]
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": namespace},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod["metadata"]["name"],
            "namespace": namespace,
            "uid": pod["metadata"]["uid"],
        },
        "reason": reason,
        "message": message,
        "type": "Warning",
        "source": {"component": "attacker"},
        "firstTimestamp": "2026-11-27T00:00:00Z",
        "lastTimestamp": "2026-11-27T00:00:00Z",
        "count": 1,
    }


def test_a_provider_flooding_events_about_a_pod_gets_25_copied_home_and_no_more(
    naples_peered: Clusters, offloaded: str
) -> None:
    """The provider makes Events about an offloaded pod without end, one of them a megabyte
    long: venice gets 25 about the pod at most (the provider's own among them), each no longer
    than an Event may be, and a Warning on the virtual node."""
    clusters = naples_peered
    apply(clusters, offloaded, deployment("web", 1))

    remote = web_running(clusters, offloaded, PROVIDER)
    name = remote["metadata"]["name"]

    def reflected() -> list[dict[str, Any]]:
        selector = f"--field-selector=involvedObject.name={name}"
        return [
            event
            for event in items(clusters, CONSUMER, "events", "-n", offloaded, selector)
            if event["source"].get("component", "").endswith("(remote)")
        ]

    # The provider's own Events about the pod (its scheduler's) copied home first.
    wait_until(lambda: reflected() or None, "the provider's own Events copied to venice")
    messages = ["m" * 1_000_000] + [f"flood {i}" for i in range(1, 40)]
    flood = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            event_about(remote, f"{name}.flood{i:03}", "Flood", message)
            for i, message in enumerate(messages)
        ],
    }
    clusters.kubectl(PROVIDER, "create", "-f", "-", input=json.dumps(flood))

    def refusal_said() -> str | None:
        events = items(
            clusters, CONSUMER, "events", "-n", "default",
            "--field-selector=reason=ProviderEventsRefused,involvedObject.name=" + PROVIDER,
        )  # fmt: skip
        said = [event["message"] for event in events if offloaded in event["message"]]
        return said[0] if said else None

    message = wait_until(refusal_said, "venice's ProviderEventsRefused Event on the virtual node")
    assert "more than 25 Events about one object" in message
    wait_until(lambda: len(reflected()) >= 25 or None, "25 Events about the pod at venice")
    time.sleep(3)  # room for any more to come: none may
    copied = reflected()
    assert len(copied) == 25, [event["metadata"]["name"] for event in copied]
    longest = max(copied, key=lambda event: len(event.get("message", "")))
    assert longest["message"] == "m" * 1024


def test_a_provider_bumping_an_events_count_on_and_on_has_it_copied_home_at_a_pace(
    naples_peered: Clusters, offloaded: str
) -> None:
    """The provider bumps the count of an Event about an offloaded pod on and on: each change
    was a write at venice. Past MAX_EVENTS_PER_OBJECT about the pod, one is written every
    EVENT_WRITE_INTERVAL_SECONDS, and the last count the provider wrote is what venice shows."""
    clusters = naples_peered
    apply(clusters, offloaded, deployment("web", 1))
    remote = web_running(clusters, offloaded, PROVIDER)
    name = f"{remote['metadata']['name']}.bumped"
    bumped = event_about(remote, name, "BackOff", "back-off")
    clusters.kubectl(PROVIDER, "create", "-f", "-", input=json.dumps(bumped))

    def count_at_venice() -> int | None:
        found = clusters.kubectl(CONSUMER, "get", "event", name, "-n", offloaded, "-o", "json",
                                 check=False)  # fmt: skip
        return json.loads(found.stdout).get("count") if found.returncode == 0 else None

    wait_until(count_at_venice, "the Event copied to venice")

    def writes() -> float:
        metrics = virtual_kubelet_metrics(clusters, PROVIDER)
        return sum(requests_made(metrics, "home", verb, "events") for verb in ("POST", "PATCH"))

    before, started = writes(), time.monotonic()
    bumps = 40
    for count in range(2, bumps + 2):
        clusters.kubectl(PROVIDER, "patch", "event", name, "-n", offloaded, "--type=merge",
                         "-p", json.dumps({"count": count}))  # fmt: skip
    elapsed = time.monotonic() - started
    wait_until(lambda: count_at_venice() == bumps + 1, "the provider's last count at venice")
    written = writes() - before
    paced = MAX_EVENTS_PER_OBJECT + elapsed / EVENT_WRITE_INTERVAL_SECONDS + 1
    assert written <= paced < bumps, (written, elapsed)


def virtual_kubelet_rss_mib(clusters: Clusters, node: str) -> float:
    """The resident memory of the playground's virtual kubelet of `node` at venice."""
    (pid_file,) = clusters.playground.paths(CONSUMER).virtual_kubelets.glob(f"*/{node}/pid")
    status = Path(f"/proc/{pid_file.read_text().strip()}/status").read_text()
    (line,) = [line for line in status.splitlines() if line.startswith("VmRSS:")]
    return int(line.split()[1]) / 1024


def test_a_provider_filling_the_twin_namespace_with_big_objects_grows_no_virtual_kubelet(
    naples_peered: Clusters, offloaded: str
) -> None:
    """The provider makes ConfigMaps of its own in the twin namespace, 59 MiB in all: the
    virtual kubelet keeps of each only whose it is (a conflict with a local one of the same name
    is still seen and said), and its memory does not grow by what they hold. (Measured: it
    grows about 12 MiB, what decoding megabyte events leaves with the allocator, whether 30 or
    90 of them come; keeping them whole, it grew 38 MiB for 30.)"""
    clusters = naples_peered
    count, size = 60, 1000 * 1024
    before = virtual_kubelet_rss_mib(clusters, PROVIDER)
    for i in range(count):
        manifest = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"ballast-{i:02}", "namespace": offloaded},
            "data": {"ballast": f"{i:02}" + "x" * size},  # each its own: none shared
        }
        clusters.kubectl(PROVIDER, "create", "-f", "-", input=json.dumps(manifest))
    # A local ConfigMap named as the last of them: once its conflict is said, the virtual
    # kubelet's cache has taken in every one before it.
    last = f"ballast-{count - 1:02}"
    clusters.kubectl(CONSUMER, "create", "configmap", last, "-n", offloaded, "--from-literal=a=b")

    def conflict_said() -> bool:
        selector = f"--field-selector=involvedObject.name={last},involvedObject.kind=ConfigMap"
        events = items(clusters, CONSUMER, "events", "-n", offloaded, selector)
        return any("was not created by vk" in event.get("message", "") for event in events)

    wait_until(conflict_said, "the conflict with the provider's ConfigMap said at venice")
    grown = virtual_kubelet_rss_mib(clusters, PROVIDER) - before
    print(f"the virtual kubelet's RSS grew {grown:.1f} MiB for {count * size / 2**20:.0f} MiB")
    assert grown < 25, f"{grown:.1f} MiB more for the provider's {count} ConfigMaps"


def test_a_pod_status_the_provider_makes_huge_is_not_reflected(
    naples_peered: Clusters, offloaded: str, tmp_path: Path
) -> None:
    """The provider writes a status of 200 KiB on an offloaded pod (no kubelet writes more than
    a few): venice's pod keeps the status it had, and says why."""
    clusters = naples_peered
    apply(clusters, offloaded, deployment("web", 1))

    local = web_running(clusters, offloaded, CONSUMER)
    name = local["metadata"]["name"]
    bloated = {"type": "Bloated", "status": "True", "message": "m" * 200 * 1024}
    patch = tmp_path / "status.json"
    patch.write_text(json.dumps({"status": {"conditions": [bloated]}}))
    clusters.kubectl(
        PROVIDER, "patch", "pod", name, "-n", offloaded, "--subresource=status",
        "--type=strategic", f"--patch-file={patch}",
    )  # fmt: skip

    message = pod_warning(clusters, offloaded, name, "PodStatusRefused")
    assert "over the 32 KiB a virtual kubelet reflects" in message
    local = json.loads(
        clusters.kubectl(CONSUMER, "get", "pod", name, "-n", offloaded, "-o", "json").stdout
    )
    assert local["status"]["phase"] == "Running"
    assert "Bloated" not in [c["type"] for c in local["status"].get("conditions") or []]


def virtual_kubelet_metrics(clusters: Clusters, node: str) -> str:
    """What the virtual kubelet of `node` at venice exports."""
    (ports_file,) = clusters.playground.paths(CONSUMER).virtual_kubelets.glob(
        f"*/{node}/ports.json"
    )
    port = json.loads(ports_file.read_text())["metrics"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text: str = response.read().decode()
    return text


def requests_made(metrics: str, client: str, verb: str, resource: str) -> float:
    """The requests a vk process counted (`vk_api_requests_total`) of one kind, all codes."""
    return sum(
        sample.value
        for family in text_string_to_metric_families(metrics)
        if family.name == "vk_api_requests"
        for sample in family.samples
        if (sample.labels["client"], sample.labels["verb"], sample.labels["resource"])
        == (client, verb, resource)
    )


def watch_events(clusters: Clusters, node: str, resource: str, event_type: str) -> float:
    """The watch events of `resource` the virtual kubelet of `node` at venice has taken in."""
    metrics = virtual_kubelet_metrics(clusters, node)
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("vk_watch_events_total{")
        and f'resource="{resource}"' in line
        and f'type="{event_type}"' in line
    )


def test_a_provider_bloating_its_shadow_pods_grows_no_virtual_kubelet(
    naples_peered: Clusters, offloaded: str, tmp_path: Path
) -> None:
    """The provider rewrites the ShadowPod of each of 40 offloaded pods with 750 KB of labels
    and annotations of its own: the virtual kubelet keeps of each only what its local pod asks
    of it, and its memory does not grow by what they hold. Home's pods stay Running; a label
    added at home still reaches the provider, which keeps its own. (Measured: it grows about
    20 MiB, what decoding those events, and their Pods' as naples copies the labels there,
    leaves with the allocator, whether 20 or 40 come; keeping them whole, it grew 37 MiB for
    20 and 57 MiB for 40.)"""
    clusters = naples_peered
    count = 40
    apply(clusters, offloaded, deployment("web", count))

    def all_running() -> bool:
        pods = items(clusters, CONSUMER, "pods", "-n", offloaded, "-l", "app=web")
        return len(pods) == count and all(p["status"].get("phase") == "Running" for p in pods)

    wait_until(all_running, f"{count} offloaded pods Running at venice", 120)
    before = virtual_kubelet_rss_mib(clusters, PROVIDER)
    modified = watch_events(clusters, PROVIDER, "shadowpods", "MODIFIED")
    shadow_pods = items(clusters, PROVIDER, "shadowpods", "-n", offloaded)
    assert len(shadow_pods) == count
    for i, shadow_pod in enumerate(shadow_pods):
        ballast = {
            "metadata": {
                # Each its own, so that no cache could share them.
                "labels": {f"ballast.example/{n}": f"{i:02}" + "x" * 61 for n in range(6000)},
                "annotations": {"ballast.example/annotation": f"{i:02}" + "x" * 250_000},
            }
        }
        patch = tmp_path / "ballast.json"
        patch.write_text(json.dumps(ballast))
        name = shadow_pod["metadata"]["name"]
        clusters.kubectl(
            PROVIDER, "patch", "shadowpod", name, "-n", offloaded,
            "--type=merge", f"--patch-file={patch}",
        )  # fmt: skip

    wait_until(
        lambda: watch_events(clusters, PROVIDER, "shadowpods", "MODIFIED") >= modified + count,
        "the virtual kubelet to take in every ShadowPod the provider rewrote",
    )
    grown = virtual_kubelet_rss_mib(clusters, PROVIDER) - before
    print(f"the virtual kubelet's RSS grew {grown:.1f} MiB for {count} bloated ShadowPods")
    assert grown < 30, f"{grown:.1f} MiB more for the provider's {count} bloated ShadowPods"
    assert all_running()
    clusters.kubectl(CONSUMER, "label", "pods", "-n", offloaded, "-l", "app=web", "tier=gold")

    def labelled_at_the_provider() -> bool:
        found = items(clusters, PROVIDER, "shadowpods", "-n", offloaded)
        return all(s["metadata"]["labels"].get("tier") == "gold" for s in found)

    # Each a write of a ShadowPod of 750 KB at naples, and its Pod's by naples' controller.
    wait_until(labelled_at_the_provider, "the label added at venice on naples' ShadowPods", 120)
    for shadow_pod in items(clusters, PROVIDER, "shadowpods", "-n", offloaded):
        assert len(shadow_pod["metadata"]["labels"]) > 6000  # the provider's own are left alone


def test_a_provider_piling_finalizers_on_a_copy_of_ours_has_all_but_16_dropped(
    naples_peered: Clusters, offloaded: str, tmp_path: Path
) -> None:
    """The provider puts 2000 finalizers on the copy of a ConfigMap vk reflected there (each a
    string the virtual kubelet would keep, and send back in its every write of the copy): the
    virtual kubelet keeps 16, and its next write of the copy leaves those 16, the first the
    provider put among them."""
    clusters = naples_peered
    clusters.kubectl(
        CONSUMER, "create", "configmap", "settings", "-n", offloaded, "--from-literal=a=1"
    )

    def copied(value: str) -> dict[str, Any] | None:
        found = items(clusters, PROVIDER, "configmaps", "-n", offloaded)
        copy = next((c for c in found if c["metadata"]["name"] == "settings"), None)
        return copy if copy and (copy.get("data") or {}).get("a") == value else None

    wait_until(lambda: copied("1"), "the ConfigMap copied to naples")
    finalizers = ["backup.example/keep", *(f"pile.example/f{i}" for i in range(1999))]
    patch = tmp_path / "finalizers.json"
    patch.write_text(json.dumps({"metadata": {"finalizers": finalizers}}))
    clusters.kubectl(
        PROVIDER, "patch", "configmap", "settings", "-n", offloaded,
        "--type=merge", f"--patch-file={patch}",
    )  # fmt: skip
    try:
        clusters.kubectl(
            CONSUMER, "patch", "configmap", "settings", "-n", offloaded,
            "--type=merge", "--patch", '{"data": {"a": "2"}}',
        )  # fmt: skip
        copy = wait_until(lambda: copied("2"), "the change copied to naples")
        assert copy["metadata"]["finalizers"] == finalizers[:16]
    finally:
        clusters.kubectl(
            PROVIDER, "patch", "configmap", "settings", "-n", offloaded,
            "--type=merge", "--patch", '{"metadata": {"finalizers": null}}',
        )  # fmt: skip
