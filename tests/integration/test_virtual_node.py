"""The virtual kubelet's Node (issue 4): registered from the VirtualNode as Liqo's is, kept in
line with it, Ready only while the provider answers, and run active/passive."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.virtual_kubelets import VirtualNodeSetup


@pytest.fixture
def setup(hand_made_virtual_kubelets: Clusters, tmp_path: Path) -> Iterator[VirtualNodeSetup]:
    virtual_node = VirtualNodeSetup(hand_made_virtual_kubelets, tmp_path)
    yield virtual_node
    virtual_node.cleanup()


@pytest.fixture
def running(setup: VirtualNodeSetup) -> VirtualNodeSetup:
    setup.create()
    setup.start()
    wait_until(setup.ready, "the virtual node Ready")
    return setup


def test_virtual_node_registers_a_ready_node_as_liqo_does(running: VirtualNodeSetup) -> None:
    node = running.node_object()
    assert node is not None
    assert node["status"]["capacity"] == {
        "cpu": "4",
        "memory": "8Gi",
        "pods": "110",
        "ephemeral-storage": "20Gi",
    }
    assert node["status"]["allocatable"] == node["status"]["capacity"]
    labels = node["metadata"]["labels"]
    for key, value in {
        "liqo.io/type": "virtual-node",
        "liqo.io/remote-cluster-id": "naples",
        "kubernetes.io/role": "agent",
        "topology.liqo.io/region": "south",
        "kubernetes.io/hostname": running.node,
        "type": "virtual-kubelet",
    }.items():
        assert labels[key] == value
    assert {
        "key": "virtual-node.liqo.io/not-allowed",
        "value": "true",
        "effect": "NoExecute",
    } in node["spec"]["taints"]
    assert node["status"]["addresses"] == [{"type": "InternalIP", "address": "127.0.0.1"}]
    port = running.replicas[0].kubelet_port
    assert node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"] == port
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["reason"] == "KubeletReady"
    # `kubectl get node` as on the reference page: Ready, ROLES agent, the cluster's version.
    table = running.kubectl("get", "node", running.node).stdout.splitlines()
    assert table[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    name, status, roles, _, version = table[1].split()
    assert (name, status, roles, version) == (running.node, "Ready", "agent", "v1.36.4")
    lease = json.loads(
        running.kubectl("get", "lease", "-n", "kube-node-lease", running.node, "-o", "json").stdout
    )
    assert lease["spec"]["holderIdentity"] == running.node
    assert lease["metadata"]["ownerReferences"][0]["uid"] == node["metadata"]["uid"]


def test_deleted_node_is_recreated(running: VirtualNodeSetup) -> None:
    uid = running.node_object()["metadata"]["uid"]  # type: ignore[index]
    running.kubectl("delete", "node", running.node)
    wait_until(
        lambda: (running.node_object() or {}).get("metadata", {}).get("uid") not in (None, uid),
        "a new Node",
    )
    wait_until(running.ready, "the new Node Ready")


def test_virtual_node_edits_show_on_the_node_and_admin_changes_survive(
    running: VirtualNodeSetup,
) -> None:
    running.kubectl("label", "node", running.node, "admin=added")
    running.kubectl("taint", "node", running.node, "admin=added:NoSchedule")
    running.apply(
        running.virtual_node(
            labels={"topology.liqo.io/region": "east", "tier": "gold"},
            taints=[{"key": "gpu", "value": "true", "effect": "NoSchedule"}],
            resourceQuota={"hard": {"cpu": "8", "memory": "16Gi", "pods": "200"}},
        )
    )

    def edited() -> bool:
        node = running.node_object() or {}
        labels = node.get("metadata", {}).get("labels", {})
        taint_keys = {t["key"] for t in node.get("spec", {}).get("taints", [])}
        return (
            labels.get("topology.liqo.io/region") == "east"
            and labels.get("tier") == "gold"
            and "gpu" in taint_keys
            and node.get("status", {}).get("capacity")
            == {"cpu": "8", "memory": "16Gi", "pods": "200"}
        )

    wait_until(edited, "the VirtualNode's edits on the Node", timeout=5)
    node = running.node_object() or {}
    assert node["metadata"]["labels"]["admin"] == "added"
    taints = {(t["key"], t["effect"]) for t in node["spec"]["taints"]}
    assert taints >= {
        ("admin", "NoSchedule"),
        ("gpu", "NoSchedule"),
        ("virtual-node.liqo.io/not-allowed", "NoExecute"),
    }
    # Taken away from the VirtualNode, our taint goes; the administrator's stays.
    running.apply(running.virtual_node())
    wait_until(
        lambda: "gpu" not in {t["key"] for t in (running.node_object() or {})["spec"]["taints"]},
        "the gpu taint removed",
        timeout=5,
    )
    node = running.node_object() or {}
    assert ("admin", "NoSchedule") in {(t["key"], t["effect"]) for t in node["spec"]["taints"]}
    assert "tier" not in node["metadata"]["labels"]
    assert node["metadata"]["labels"]["admin"] == "added"


def test_metrics_parse_as_prometheus_text(running: VirtualNodeSetup) -> None:
    families = {f.name: f for f in text_string_to_metric_families(running.replicas[0].metrics())}
    assert "vk_api_requests" in families
    clients = {s.labels["client"] for s in families["vk_api_requests"].samples}
    assert clients == {"home", "provider"}
    reachable = families["vk_node_provider_reachable"].samples
    assert [(s.labels["node"], s.value) for s in reachable] == [(running.node, 1.0)]


def ready_condition(setup: VirtualNodeSetup) -> dict[str, Any]:
    node = setup.node_object() or {}
    conditions = (node.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Ready"), {})


def test_missing_secret_is_reported_and_creating_it_recovers_without_restart(
    setup: VirtualNodeSetup, tmp_path: Path
) -> None:
    setup.create(with_secret=False)
    replica = setup.start()
    events = wait_until(lambda: setup.events("ProviderUnreachable"), "an Event")
    assert f"Secret {setup.namespace}/{setup.secret} does not exist" in events[0]["message"]
    assert not setup.ready()
    setup.write_secret(b"")
    wait_until(
        lambda: any(
            "has no `kubeconfig` key, or it is empty" in e["message"]
            for e in setup.events("ProviderUnreachable")
        ),
        "the empty one reported",
    )
    setup.write_secret(b"garbage")
    wait_until(
        lambda: any(
            "not a YAML mapping" in e["message"] for e in setup.events("ProviderUnreachable")
        ),
        "the garbage reported",
    )
    # Whoever writes the Secret must not run commands or read files in the virtual kubelet:
    # an exec plugin (or a token file: its own ServiceAccount token) is refused, not run.
    marker = tmp_path / "the-plugin-ran"
    hostile = yaml.safe_load(setup.clusters.kubeconfig(setup.provider).read_text())
    hostile["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "/bin/sh",
            "args": ["-c", f"touch {marker}"],
        }
    }
    setup.write_secret(yaml.safe_dump(hostile).encode())
    wait_until(
        lambda: any(
            "inline credentials only" in e["message"] for e in setup.events("ProviderUnreachable")
        ),
        "the exec plugin refused",
    )
    # Said where a user looks first: the Node's Ready condition (the Lease renewed meanwhile,
    # so the node controller does not cover it with "Kubelet stopped posting node status").
    wait_until(
        lambda: "inline credentials only" in ready_condition(setup).get("message", ""),
        "the refusal in the Node's Ready condition",
    )
    assert ready_condition(setup)["status"] == "False"
    hostile["users"][0]["user"] = {
        "tokenFile": "/var/run/secrets/kubernetes.io/serviceaccount/token"
    }
    setup.write_secret(yaml.safe_dump(hostile).encode())
    wait_until(
        lambda: any(
            "users[" in e["message"] and ".tokenFile" in e["message"]
            for e in setup.events("ProviderUnreachable")
        ),
        "the token file refused",
    )
    assert not marker.exists()
    setup.write_secret(setup.clusters.kubeconfig(setup.provider).read_bytes())
    wait_until(setup.ready, "the Node Ready once the Secret is right")
    assert replica.process.poll() is None  # the same process, never restarted


def test_a_secret_turned_invalid_or_deleted_drops_the_identity_until_it_is_fixed(
    setup: VirtualNodeSetup,
) -> None:
    setup.create()
    replica = setup.start()
    wait_until(setup.ready, "the virtual node Ready")
    setup.write_secret(b"garbage")
    wait_until(lambda: not setup.ready(), "the node NotReady once its Secret is garbage")
    # The Node says it at once (its Ready condition); the Event follows at the next ping.
    assert "not a YAML mapping" in ready_condition(setup)["message"]
    wait_until(
        lambda: any(
            "not a YAML mapping" in e["message"] for e in setup.events("ProviderUnreachable")
        ),
        "the garbage reported",
    )
    setup.write_secret(setup.clusters.kubeconfig(setup.provider).read_bytes())
    wait_until(setup.ready, "the node Ready again")
    setup.kubectl("delete", "secret", setup.secret, "-n", setup.namespace)
    wait_until(lambda: not setup.ready(), "the node NotReady once its Secret is gone")
    wait_until(
        lambda: any("does not exist" in e["message"] for e in setup.events("ProviderUnreachable")),
        "the deletion reported",
    )
    setup.write_secret(setup.clusters.kubeconfig(setup.provider).read_bytes())
    wait_until(setup.ready, "the node Ready once the Secret is back")
    assert replica.process.poll() is None  # the same process, never restarted


def test_a_virtual_node_outside_a_tenant_namespace_is_refused(setup: VirtualNodeSetup) -> None:
    # Whoever may create VirtualNodes in a namespace of theirs would get a virtual kubelet, and
    # its rights at home, launched for it.
    namespace = setup.local_namespace()
    virtual_node = setup.virtual_node()
    virtual_node["metadata"]["namespace"] = namespace
    refused = setup.kubectl("apply", "-f", "-", input=json.dumps(virtual_node), check=False)
    assert refused.returncode != 0
    assert "a VirtualNode lives in a tenant namespace" in refused.stderr
    assert f"and {namespace} is none" in refused.stderr


def test_unparsable_quantity_is_refused_with_a_clear_message(setup: VirtualNodeSetup) -> None:
    setup.create()
    broken = setup.virtual_node(resourceQuota={"hard": {"cpu": "four"}})
    result = setup.kubectl("apply", "-f", "-", input=json.dumps(broken), check=False)
    assert result.returncode != 0
    assert "spec.resourceQuota.hard.cpu" in result.stderr


def test_only_the_lease_holder_works_and_a_standby_takes_over(setup: VirtualNodeSetup) -> None:
    setup.create()
    namespace = setup.local_namespace()
    remote = setup.offload_namespace(namespace)
    first = setup.start("replica-a")
    wait_until(setup.ready, "the virtual node Ready")
    setup.apply(setup.deployment("web", namespace, 5))
    owned = "offloading.liqo.io/origin=venice"
    wait_until(
        lambda: (
            len(
                [
                    p
                    for p in setup.pods("naples", remote, owned)
                    if p.get("status", {}).get("phase") == "Running"
                ]
            )
            == 5
        ),
        "5 pods offloaded",
    )
    uids = {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in setup.pods("naples", remote, owned)
    }
    second = setup.start("replica-b")
    time.sleep(3)

    def writes(replica_metrics: str) -> float:
        return sum(
            s.value
            for f in text_string_to_metric_families(replica_metrics)
            for s in f.samples
            if f.name == "vk_api_requests"
            and s.labels["client"] == "home"
            and s.labels["verb"] in ("POST", "PATCH", "PUT")
        )

    assert writes(second.metrics()) == 0  # the standby only watches the Lease

    def lease_holder() -> str | None:
        lease = setup.kubectl("get", "lease", "-n", setup.namespace, setup.node, "-o", "json")
        holder: str | None = json.loads(lease.stdout)["spec"].get("holderIdentity")
        return holder

    assert lease_holder() == "replica-a"
    first.signal(signal.SIGKILL)
    killed_at = time.monotonic()
    wait_until(lambda: lease_holder() == "replica-b", "replica-b to hold the lease", timeout=30)
    assert time.monotonic() - killed_at <= 15 + 5 + 2  # lease duration, retry period, slack
    wait_until(lambda: writes(second.metrics()) > 0, "replica-b writing")
    # The lease expires (15 s) and is retried (5 s) past the playground's node-monitor grace
    # period (20 s): the node controller may have marked the node Unknown meanwhile, and the
    # new holder's next status post makes it Ready again.
    wait_until(setup.ready, "the virtual node Ready under replica-b", timeout=30)
    after = {
        p["metadata"]["name"]: p["metadata"]["uid"] for p in setup.pods("naples", remote, owned)
    }
    assert after == uids  # the takeover re-created no remote pod


def test_sigterm_releases_the_lease_and_exits_cleanly(running: VirtualNodeSetup) -> None:
    replica = running.replicas[0]
    replica.signal(signal.SIGTERM)
    assert replica.wait(timeout=20) == 0
    lease = json.loads(
        running.kubectl("get", "lease", "-n", running.namespace, running.node, "-o", "json").stdout
    )
    assert not lease["spec"].get("holderIdentity")
    assert '"released the lease"' in replica.logs()


def requests_made(metrics: str) -> dict[str, float]:
    """Every request the virtual kubelet made so far (watches and retries too), by client."""
    made: dict[str, float] = {}
    for family in text_string_to_metric_families(metrics):
        if family.name == "vk_api_requests":
            for sample in family.samples:
                if sample.name == "vk_api_requests_total":
                    client = sample.labels["client"]
                    made[client] = made.get(client, 0.0) + sample.value
    return made


def test_client_qps_holds_each_client_to_its_rate_from_the_start(setup: VirtualNodeSetup) -> None:
    """Liqo's --client-qps and --client-max-burst: at start a virtual kubelet lists and watches
    some thirty things on each side at once; rate limited, no client makes more than its burst
    and its rate's worth since the process started, and the node still comes Ready."""
    qps, burst = 5, 5
    setup.create()
    replica = setup.start("replica-1", f"--client-qps={qps}", f"--client-max-burst={burst}")
    started = time.monotonic()
    wait_until(setup.ready, "the virtual node Ready, rate limited", timeout=90)
    for _ in range(3):
        made = requests_made(replica.metrics())
        allowed = burst + qps * (time.monotonic() - started)
        assert set(made) == {"home", "provider"}, made
        assert all(count <= allowed for count in made.values()), (made, allowed)
        time.sleep(2)
    # The informers' lists and watches alone were more than the burst: the limit was met.
    assert made["home"] > burst
