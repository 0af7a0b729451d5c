"""vk deployed for real (issue 9): `vkctl playground up --real-node` gives venice a node run by
a real kubelet and containerd, builds vk's image from the Dockerfile, and installs vk with its
Helm chart; the VirtualNode controller's Deployment launcher runs every virtual kubelet as a
pod of that image. On it: the tutorial's offloading flow, `kubectl logs` and `exec` on a
virtual-kubelet pod, the pod killed and replaced with no offloaded pod re-created, every
request of vk's ServiceAccounts in venice's audit log allowed, Prometheus scraping vk's pods
through Kubernetes service discovery, and `down` leaving no trace on the machine. (naples has a
real node too: the pods offloaded there are containers, test_real_containers.py.)

Needs root and Debian's containerd, runc, containernetworking-plugins, iptables, debootstrap
and buildah (`.ci/run` installs them): without them the playground says what is missing, and
these tests fail with that message rather than being skipped.
"""

from __future__ import annotations

import json
import subprocess
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.test_namespace_offloading import (
    CONSUMER,
    get_json,
    running_on,
)
from vk.api.constants import VIRTUAL_NODE_LABEL, VK_NAMESPACE
from vk.playground.realnode import (
    HOST_ADDRESS,
    NodeNetwork,
    cgroup_dirs,
    mounts_under,
    node_name,
)

REAL_NODE = node_name(CONSUMER)
VK_SERVICE_ACCOUNTS = "system:serviceaccount:"


def node_network_of(clusters: Clusters, cluster: str) -> NodeNetwork:
    return clusters.playground.node_networks(clusters.specs)[cluster]


def pods_of(clusters: Clusters, namespace: str, selector: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = get_json(
        clusters, CONSUMER, "pods", "-n", namespace, "-l", selector
    )["items"]
    return found


def vk_image(clusters: Clusters) -> str:
    """The image the chart was installed with (the controller manager's)."""
    deployment = get_json(clusters, CONSUMER, "deployment", "vk-controller-manager", "-n", "vk")
    image: str = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    return image


def virtual_kubelet_pod(clusters: Clusters, provider: str) -> dict[str, Any]:
    running = [
        p
        for p in pods_of(clusters, f"liqo-tenant-{provider}", f"{VIRTUAL_NODE_LABEL}={provider}")
        if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
    ]
    assert len(running) == 1, [p["metadata"]["name"] for p in running]
    return running[0]


def node_ready(clusters: Clusters, name: str) -> bool:
    node = get_json(clusters, CONSUMER, "node", name)
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])


def test_vk_runs_as_pods_of_its_image_on_the_real_node(real: Clusters) -> None:
    node = get_json(real, CONSUMER, "node", REAL_NODE)
    assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
    assert node["status"]["addresses"][0]["address"] == node_network_of(real, CONSUMER).node_address
    image = vk_image(real)
    assert image.startswith("localhost/vk:dev-")
    for component in ("vk-controller-manager", "vk-webhook"):
        pods = pods_of(real, VK_NAMESPACE, f"app.kubernetes.io/component={component[3:]}")
        assert [p["spec"]["nodeName"] for p in pods] == [REAL_NODE], component
        assert [p["status"]["phase"] for p in pods] == ["Running"], component
        assert pods[0]["spec"]["serviceAccountName"] == component
        assert pods[0]["status"]["containerStatuses"][0]["image"].endswith(image.split("/")[-1])
    # The image's own user, not root.
    uid = real.kubectl(CONSUMER, "exec", "-n", "vk", "deploy/vk-webhook", "--", "id", "-u")
    assert uid.stdout.strip() == "65532"


def test_the_tutorial_flow_with_virtual_kubelets_as_pods(liqo_demo: Clusters) -> None:
    clusters = liqo_demo
    image = vk_image(clusters)
    for provider in ("naples", "florence"):
        assert wait_until(lambda p=provider: node_ready(clusters, p), f"{provider} Ready", 60)
        pod = virtual_kubelet_pod(clusters, provider)
        assert pod["spec"]["nodeName"] == REAL_NODE
        assert pod["spec"]["containers"][0]["image"] == image
        assert pod["spec"]["serviceAccountName"] != "default"
        pod_cidr = node_network_of(clusters, CONSUMER).pod_cidr
        assert pod["status"]["podIP"].startswith(pod_cidr.rsplit(".", 1)[0])
        # The Node's address is the pod's: the API server reaches this kubelet API there.
        node = get_json(clusters, CONSUMER, "node", provider)
        assert node["status"]["addresses"][0]["address"] == pod["status"]["podIP"]

    remote = get_json(clusters, "naples", "pods", "-n", "liqo-demo", "-l", "app=app-south")
    assert [p["status"]["phase"] for p in remote["items"]] == ["Running"]
    # app-center asks for florence's region, which the namespace does not extend to.
    center = pods_of(clusters, "liqo-demo", "app=app-center")
    assert [p["status"]["phase"] for p in center] == ["Pending"]


def test_logs_and_exec_on_a_virtual_kubelet_pod(peered: Clusters) -> None:
    pod = virtual_kubelet_pod(peered, "naples")["metadata"]["name"]
    namespace = "liqo-tenant-naples"
    logs = peered.kubectl(CONSUMER, "logs", "-n", namespace, pod).stdout.splitlines()
    records = [json.loads(line) for line in logs if line.startswith("{")]
    assert records, "structured JSON log lines"
    assert any(r.get("msg") == "node registered" and r.get("node") == "naples" for r in records)
    version = peered.kubectl(CONSUMER, "exec", "-n", namespace, pod, "--", "vk", "--version")
    assert version.stdout.startswith("vk, version")
    failed = peered.kubectl(
        CONSUMER, "exec", "-i", "-n", namespace, pod, "--", "sh", "-c", "cat; exit 7",
        input="from stdin\n", check=False,
    )  # fmt: skip
    assert failed.returncode == 7
    assert failed.stdout == "from stdin\n"


def test_killing_the_virtual_kubelet_pod_replaces_it_and_recreates_no_offloaded_pod(
    liqo_demo: Clusters,
) -> None:
    clusters = liqo_demo
    namespace = "liqo-demo"

    def remote_pods() -> dict[str, str]:
        found = get_json(clusters, "naples", "pods", "-n", namespace)["items"]
        return {p["metadata"]["name"]: p["metadata"]["uid"] for p in found}

    local_before = {p["metadata"]["uid"] for p in pods_of(clusters, namespace, "app=app-south")}
    remote_before = remote_pods()
    assert remote_before
    killed = virtual_kubelet_pod(clusters, "naples")["metadata"]["name"]
    clusters.kubectl(
        CONSUMER, "delete", "pod", killed, "-n", "liqo-tenant-naples", "--grace-period=0", "--force"
    )
    replacement = wait_until(
        lambda: (
            (p := virtual_kubelet_pod_or_none(clusters, "naples"))
            and p["metadata"]["name"] != killed
            and all(c.get("ready") for c in p["status"].get("containerStatuses", []))
            and p
        ),
        "a new virtual-kubelet pod for naples, ready",
        timeout=90,
    )
    assert replacement["spec"]["nodeName"] == REAL_NODE
    wait_until(lambda: node_ready(clusters, "naples"), "naples Ready again", timeout=60)
    assert remote_pods() == remote_before, "no offloaded pod re-created in naples"
    local_after = {p["metadata"]["uid"] for p in pods_of(clusters, namespace, "app=app-south")}
    assert local_after == local_before
    assert running_on(clusters, namespace, "app=app-south") == ["naples"]


def virtual_kubelet_pod_or_none(clusters: Clusters, provider: str) -> dict[str, Any] | None:
    try:
        return virtual_kubelet_pod(clusters, provider)
    except AssertionError:
        return None


def audit_events(clusters: Clusters) -> list[dict[str, Any]]:
    log = clusters.playground.paths(CONSUMER).audit_log
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def chart_rules(clusters: Clusters) -> list[tuple[str, str, dict[str, Any]]]:
    """(ServiceAccount user, role name, rule) for every rule the chart bound to vk's accounts."""
    rendered = clusters.kubectl(
        CONSUMER, "get", "clusterroles,roles,clusterrolebindings,rolebindings", "-A",
        "-l", "app.kubernetes.io/name=vk", "-o", "json",
    ).stdout  # fmt: skip
    items = json.loads(rendered)["items"]
    roles = {
        (i["kind"], i["metadata"].get("namespace"), i["metadata"]["name"]): i
        for i in items
        if i["kind"] in ("ClusterRole", "Role")
    }
    rules = []
    for binding in (i for i in items if i["kind"].endswith("Binding")):
        ref = binding["roleRef"]
        key = (ref["kind"], binding["metadata"].get("namespace") if ref["kind"] == "Role" else None)
        role = roles.get((*key, ref["name"]))
        if role is None:
            continue
        for subject in binding.get("subjects", []):
            if subject["kind"] != "ServiceAccount":
                continue
            user = f"{VK_SERVICE_ACCOUNTS}{subject['namespace']}:{subject['name']}"
            rules += [(user, ref["name"], rule) for rule in role.get("rules", [])]
    return rules


def exercised(rule: dict[str, Any], verb: str, event: dict[str, Any]) -> bool:
    ref = event.get("objectRef") or {}
    resource = ref.get("resource", "")
    if ref.get("subresource"):
        resource += "/" + ref["subresource"]
    return (
        event["verb"] == verb
        and ref.get("apiGroup", "") in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and (not rule.get("resourceNames") or ref.get("name") in rule["resourceNames"])
    )


def test_vk_components_authenticate_as_their_service_accounts_and_are_never_denied(
    peered: Clusters,
) -> None:
    events = audit_events(peered)
    users = {e["user"]["username"] for e in events}
    assert f"{VK_SERVICE_ACCOUNTS}vk:vk-controller-manager" in users
    assert f"{VK_SERVICE_ACCOUNTS}vk:vk-webhook" in users
    kubelets = {u for u in users if u.startswith(f"{VK_SERVICE_ACCOUNTS}liqo-tenant-")}
    assert {u.split(":")[2] for u in kubelets} == {"liqo-tenant-naples", "liqo-tenant-florence"}
    vk_users = {u for u in users if u.startswith(f"{VK_SERVICE_ACCOUNTS}vk:")} | kubelets
    denied = [
        f"{e['user']['username']} {e['verb']} {e.get('requestURI')}"
        for e in events
        if e["user"]["username"] in vk_users and e.get("responseStatus", {}).get("code") == 403
    ]
    assert denied == []

    # The chart's rules that this run never exercised (no request matched any of a rule's
    # verbs): printed for the closing note. vk applies objects server-side, so its
    # creations and updates are `patch` requests.
    mine = [e for e in events if e["user"]["username"] in vk_users]
    unexercised = sorted(
        f"{role}: {','.join(rule['verbs'])} {','.join(rule.get('apiGroups', [])) or 'core'}/"
        f"{','.join(rule.get('resources', []))}"
        for user, role, rule in chart_rules(peered)
        if not any(
            exercised(rule, verb, e)
            for verb in rule.get("verbs", [])
            for e in mine
            if e["user"]["username"] == user
        )
    )
    report = peered.playground.root / "unexercised-chart-rules.txt"
    report.write_text("\n".join(unexercised) + "\n")
    print(f"\nchart rules never exercised in this run ({len(unexercised)}), in {report}:")
    print("\n".join(unexercised))


def prometheus_api(clusters: Clusters, path: str, **query: str) -> Any:
    ports = json.loads(clusters.playground.paths(CONSUMER).ports_file.read_text())
    url = f"http://127.0.0.1:{ports['prometheus']}/api/v1/{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    with urllib.request.urlopen(url, timeout=10) as response:
        return json.load(response)["data"]


def test_prometheus_discovers_and_scrapes_vk_pods(liqo_demo: Clusters) -> None:
    peered = liqo_demo

    def targets_up() -> dict[str, str] | None:
        active = prometheus_api(peered, "targets")["activeTargets"]
        health = {
            t["labels"].get("pod", ""): t["health"]
            for t in active
            if t["labels"].get("job") == "kubernetes-pods"
        }
        vk_pods = [p for p in health if p.startswith(("vk-controller-manager", "vk-webhook"))]
        kubelets = [p for p in health if p.startswith(("vk-naples", "vk-florence"))]
        if len(vk_pods) == 2 and len(kubelets) >= 2 and set(health.values()) == {"up"}:
            return health
        return None

    health = wait_until(targets_up, "Prometheus: vk's pods discovered and up", timeout=60)
    assert all(t == "up" for t in health.values())
    # A pod offloaded now, so that naples' current virtual kubelet (its pod may have been
    # replaced by an earlier test) observes an offload.
    peered.kubectl(CONSUMER, "scale", "deployment", "app-south", "-n", "liqo-demo", "--replicas=2")
    wait_until(
        lambda: running_on(peered, "liqo-demo", "app=app-south") == ["naples", "naples"],
        "a second app-south pod Running on naples",
        timeout=60,
    )
    result = wait_until(
        lambda: prometheus_api(
            peered, "query", query='sum by (le) (vk_pod_offload_seconds_bucket{node="naples"})'
        )["result"],
        "the offload-latency histogram of naples' virtual kubelet in Prometheus",
        timeout=60,
    )
    buckets = {r["metric"]["le"]: float(r["value"][1]) for r in result}
    assert "+Inf" in buckets, buckets
    assert buckets["+Inf"] >= 1, buckets


DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "vk-dashboard.json"


def test_every_panel_of_vks_dashboard_has_data_and_offloaded_containers_are_scraped(
    liqo_demo: Clusters,
) -> None:
    """vk's Grafana dashboard against the playground's Prometheus: each panel's query returns
    series, and the offloaded containers' usage comes from naples' virtual kubelet's
    /metrics/cadvisor, scraped through the API server as nodes are."""
    peered = liqo_demo
    dashboard = json.loads(DASHBOARD.read_text())
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            query = target["expr"].replace("$node", ".*")
            wait_until(
                lambda q=query: prometheus_api(peered, "query", query=q)["result"],
                f"data for the panel {panel['title']!r} ({query})",
                timeout=120,
            )
    cpu = prometheus_api(
        peered,
        "query",
        query='container_cpu_usage_seconds_total{node="naples",namespace="liqo-demo",'
        'container!=""}',
    )["result"]
    assert any(r["metric"]["pod"].startswith("app-south") for r in cpu), (
        "no cAdvisor series of app-south's containers offloaded to naples",
        cpu,
    )


def test_down_removes_every_trace(real: Clusters) -> None:
    """Of both real nodes (venice's and naples'): namespaces, links, addresses, routes, mounts,
    cgroups and iptables chains."""
    root = real.playground.root
    networks = real.playground.node_networks(real.specs)
    assert set(networks) == {"venice", "naples"}
    for network in networks.values():
        assert Path(network.namespace_path).exists()
        assert cgroup_dirs(network.cgroup_parent)
    real.playground.down()
    assert not root.exists()
    links = subprocess.run(["ip", "-j", "link"], capture_output=True, text=True, check=True)
    addresses = subprocess.run(["ip", "-4", "addr"], capture_output=True, text=True, check=True)
    routes = subprocess.run(["ip", "route"], capture_output=True, text=True, check=True)
    assert HOST_ADDRESS not in addresses.stdout
    for network in networks.values():
        assert not Path(network.namespace_path).exists()
        assert network.host_link not in {link["ifname"] for link in json.loads(links.stdout)}
        assert network.host_address not in addresses.stdout
        assert network.pod_cidr not in routes.stdout
        assert cgroup_dirs(network.cgroup_parent) == []
    assert mounts_under(root.parent) == []
    chains = subprocess.run(["iptables-save"], capture_output=True, text=True, check=True).stdout
    assert "KUBE-" not in chains
