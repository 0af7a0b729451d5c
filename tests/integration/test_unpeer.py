"""Unpeering venice from florence, both ways the tutorial and liqoctl take it: `vkctl unpeer
out-of-band florence` with venice's kubeconfig only (florence cleans up after itself once
venice's Tenant there is deleted), and `vkctl unpeer --remote-kubeconfig` (which ends the same
way). Either leaves no vk object, namespace, identity or process of the peering on either side;
and a provider out of reach stops it, unless --force: then the local side goes, and what the
provider keeps is said, with how to remove it there."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Clusters
from tests.integration.polling import wait_until

VKCTL = str(Path(sys.executable).parent / "vkctl")
CONSUMER, PROVIDER = "venice", "florence"
CONSUMER_TENANT, PROVIDER_TENANT = "liqo-tenant-florence", "liqo-tenant-venice"
TENANTS = "tenants.authentication.liqo.io"
RSLICE = "resourceslices.authentication.liqo.io"
NAMESPACE_MAPS = "namespacemaps.offloading.liqo.io"
VIRTUAL_NODES = "virtualnodes.offloading.liqo.io"
QUOTAS = "quotas.offloading.liqo.io"
FOREIGN_CLUSTERS = "foreignclusters.core.liqo.io"


def get_json(clusters: Clusters, cluster: str, *args: str) -> Any:
    result = clusters.kubectl(cluster, "get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def names(clusters: Clusters, cluster: str, *args: str) -> list[str]:
    found = get_json(clusters, cluster, *args) or {}
    return [
        "/".join(filter(None, (i["metadata"].get("namespace"), i["metadata"]["name"])))
        for i in found.get("items", [])
    ]


def vkctl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([VKCTL, *args], capture_output=True, text=True, env=env, timeout=400)


def consumer_only_env(clusters: Clusters) -> dict[str, str]:
    """A shell that knows venice's kubeconfig and nothing of florence."""
    return {
        "PATH": os.environ["PATH"],
        "HOME": os.environ.get("HOME", "/tmp"),
        "KUBECONFIG": str(clusters.kubeconfig(CONSUMER)),
    }


def peer(clusters: Clusters) -> None:
    peered = vkctl(
        "peer",
        f"--kubeconfig={clusters.kubeconfig(CONSUMER)}",
        f"--remote-kubeconfig={clusters.kubeconfig(PROVIDER)}",
        "--timeout=120s",
        env=dict(os.environ),
    )
    assert peered.returncode == 0, peered.stderr


def virtual_kubelets(clusters: Clusters) -> list[str]:
    """Virtual kubelet processes of this playground (another may run on this machine) for
    florence's virtual node."""
    root = str(clusters.playground.root)
    processes = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [p for p in processes.splitlines() if "--nodename=florence" in p and root in p]


def consumer_leftovers(clusters: Clusters) -> list[str]:
    c = CONSUMER
    return [
        *(
            ["namespace liqo-tenant-florence"]
            if get_json(clusters, c, "namespace", CONSUMER_TENANT)
            else []
        ),
        # florence's only: venice may be peered with naples too (the README's first command).
        *names(clusters, c, FOREIGN_CLUSTERS, "--field-selector=metadata.name=florence"),
        *names(clusters, c, RSLICE, "-n", CONSUMER_TENANT),
        *names(clusters, c, NAMESPACE_MAPS, "-n", CONSUMER_TENANT),
        *names(clusters, c, VIRTUAL_NODES, "-n", CONSUMER_TENANT),
        *names(clusters, c, TENANTS, "-n", CONSUMER_TENANT),
        *names(clusters, c, "nodes", "--selector=liqo.io/remote-cluster-id=florence"),
        *names(clusters, c, "secrets", "-A", "--selector=liqo.io/remote-cluster-id=florence"),
        *names(
            clusters,
            c,
            "clusterroles,clusterrolebindings",
            "--selector=offloading.liqo.io/nodename=florence",
        ),
        *virtual_kubelets(clusters),
    ]


def provider_leftovers(clusters: Clusters) -> list[str]:
    p = PROVIDER
    requests = get_json(clusters, p, "certificatesigningrequests") or {"items": []}
    roles = get_json(clusters, p, "roles,rolebindings", "-A") or {"items": []}
    cluster_rbac = get_json(clusters, p, "clusterroles,clusterrolebindings") or {"items": []}
    return [
        *names(clusters, p, "namespace", "--selector=liqo.io/remote-cluster-id=venice"),
        *(
            ["namespace liqo-tenant-venice"]
            if get_json(clusters, p, "namespace", PROVIDER_TENANT)
            else []
        ),
        *names(clusters, p, FOREIGN_CLUSTERS),
        *names(clusters, p, TENANTS, "-A"),
        *names(clusters, p, QUOTAS, "-A"),
        *names(clusters, p, RSLICE, "-A"),
        *names(clusters, p, NAMESPACE_MAPS, "-A"),
        *[
            f"csr {r['metadata']['name']}"
            for r in requests["items"]
            if (r["metadata"].get("labels") or {}).get("liqo.io/remote-cluster-id") == CONSUMER
            or r["metadata"]["name"] == "vk-control-plane-venice"
        ],
        *[
            f"{r['kind']} {r['metadata']['namespace']}/{r['metadata']['name']}"
            for r in roles["items"]
            if r["metadata"]["name"] == "vk-control-plane"
            or r["metadata"]["namespace"].endswith("-venice")
        ],
        *[
            f"{r['kind']} {r['metadata']['name']}"
            for r in cluster_rbac["items"]
            if "venice" in r["metadata"]["name"]
        ],
    ]


@pytest.fixture
def peered(installed: Clusters) -> Iterator[Clusters]:
    """venice peered with florence by `vkctl peer`; whatever a test leaves is removed after."""
    peer(installed)
    try:
        yield installed
    finally:
        if (
            installed.kubectl(CONSUMER, "get", "namespace", CONSUMER_TENANT, check=False).returncode
            == 0
        ):
            vkctl(
                "unpeer",
                f"--remote-kubeconfig={installed.kubeconfig(PROVIDER)}",
                "--timeout=150s",
                env=consumer_only_env(installed),
            )
        installed.kubectl(
            PROVIDER,
            "delete",
            TENANTS,
            "-n",
            PROVIDER_TENANT,
            CONSUMER,
            "--ignore-not-found",
            check=False,
        )


@pytest.fixture
def offloaded_namespace(peered: Clusters) -> Iterator[str]:
    """A namespace of venice mapped to a twin on florence (as namespace offloading will map
    it), with a pod running through florence's virtual node."""
    name = f"t-{uuid.uuid4().hex[:8]}"
    peered.kubectl(CONSUMER, "create", "namespace", name)
    try:
        namespace_map = {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "NamespaceMap",
            "metadata": {
                "name": PROVIDER,
                "namespace": CONSUMER_TENANT,
                "labels": {
                    "liqo.io/remote-cluster-id": PROVIDER,
                    "liqo.io/remoteID": PROVIDER,
                    "liqo.io/replication": "true",
                },
            },
            "spec": {"desiredMapping": {name: f"{name}-venice"}},
        }
        peered.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(namespace_map))
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "app", "namespace": name},
            "spec": {
                "nodeSelector": {"kubernetes.io/hostname": PROVIDER},
                "tolerations": [
                    {
                        "key": "virtual-node.liqo.io/not-allowed",
                        "operator": "Exists",
                        "effect": "NoExecute",
                    }
                ],
                "containers": [{"name": "app", "image": "nginx"}],
            },
        }
        peered.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(pod))
        wait_until(
            lambda: (
                (get_json(peered, PROVIDER, "pod", "app", "-n", f"{name}-venice") or {})
                .get("status", {})
                .get("phase")
                == "Running"
            ),
            "the pod running on florence",
            timeout=90,
        )
        yield name
    finally:
        peered.kubectl(CONSUMER, "delete", "namespace", name, "--wait=false", check=False)


def test_the_provider_keeps_a_tenant_for_the_consumer_which_may_only_read_and_delete_it(
    peered: Clusters, tmp_path: Path
) -> None:
    tenant = wait_until(
        lambda: (
            (t := get_json(peered, PROVIDER, TENANTS, CONSUMER, "-n", PROVIDER_TENANT))
            and (t.get("status") or {}).get("tenantNamespace")
            and t
        ),
        "florence's Tenant of venice handled",
    )
    assert tenant["spec"] == {"clusterID": CONSUMER, "tenantCondition": "Active"}
    assert tenant["metadata"]["finalizers"] == ["tenant.liqo.io/finalizer"]
    assert tenant["status"] == {"tenantNamespace": PROVIDER_TENANT}
    table = peered.kubectl(PROVIDER, "get", "tn", "-n", PROVIDER_TENANT).stdout.splitlines()
    assert table[0].split() == ["NAME", "CONDITION", "AGE"]
    assert table[1].split()[:2] == [CONSUMER, "Active"]

    secret = get_json(
        peered, CONSUMER, "secret", "vk-control-plane-florence", "-n", CONSUMER_TENANT
    )
    identity = tmp_path / "control-plane"
    identity.write_bytes(base64.b64decode(secret["data"]["kubeconfig"]))
    for check, expected in [
        (("get", f"{TENANTS}/venice", "-n", PROVIDER_TENANT), "yes"),
        (("delete", f"{TENANTS}/venice", "-n", PROVIDER_TENANT), "yes"),
        (("get", f"{TENANTS}/naples", "-n", PROVIDER_TENANT), "no"),
        (("list", TENANTS, "-n", PROVIDER_TENANT), "no"),
        (("create", TENANTS, "-n", PROVIDER_TENANT), "no"),
        (("patch", f"{TENANTS}/venice", "-n", PROVIDER_TENANT), "no"),
    ]:
        answer = subprocess.run(
            ["kubectl", f"--kubeconfig={identity}", "auth", "can-i", *check],
            capture_output=True,
            text=True,
        ).stdout.strip()
        assert answer == expected, check


def test_unpeer_out_of_band_with_the_consumers_kubeconfig_only_leaves_nothing_on_either_side(
    peered: Clusters, offloaded_namespace: str
) -> None:
    twin = f"{offloaded_namespace}-venice"
    assert get_json(peered, PROVIDER, "namespace", twin)
    assert names(peered, PROVIDER, QUOTAS, "-n", PROVIDER_TENANT)

    unpeered = vkctl("unpeer", "out-of-band", PROVIDER, env=consumer_only_env(peered))

    assert unpeered.returncode == 0, unpeered.stderr
    assert unpeered.stdout.strip() == "unpeered"
    assert "ending the peering on florence" in unpeered.stderr
    # Drained: the pod was evicted from the virtual node (a bare pod is not recreated).
    assert get_json(peered, CONSUMER, "pod", "app", "-n", offloaded_namespace) is None
    assert consumer_leftovers(peered) == []
    # The provider's Tenant is gone when the command returns; its namespace may still be
    # finishing its deletion, which venice's identity can no longer see.
    assert get_json(peered, PROVIDER, TENANTS, CONSUMER, "-n", PROVIDER_TENANT) is None
    wait_until(lambda: provider_leftovers(peered) == [], "nothing of venice left on florence")


def test_unpeer_with_the_remote_kubeconfig_ends_the_same_way_through_the_tenant(
    peered: Clusters, offloaded_namespace: str
) -> None:
    unpeered = vkctl(
        "unpeer",
        f"--remote-kubeconfig={peered.kubeconfig(PROVIDER)}",
        env=consumer_only_env(peered),
    )

    assert unpeered.returncode == 0, unpeered.stderr
    assert unpeered.stdout.strip() == "unpeered"
    assert "ending the peering on florence" in unpeered.stderr
    assert consumer_leftovers(peered) == []
    assert provider_leftovers(peered) == []


def test_a_provider_out_of_reach_is_said_and_cleans_up_once_its_tenant_is_deleted_there(
    peered: Clusters,
) -> None:
    # venice's identity on florence now points nowhere, as if florence were down.
    secret = get_json(
        peered, CONSUMER, "secret", "vk-control-plane-florence", "-n", CONSUMER_TENANT
    )
    kubeconfig = yaml.safe_load(base64.b64decode(secret["data"]["kubeconfig"]))
    kubeconfig["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    peered.kubectl(
        CONSUMER,
        "patch",
        "secret",
        "vk-control-plane-florence",
        "-n",
        CONSUMER_TENANT,
        "--type=merge",
        "-p",
        json.dumps(
            {"data": {"kubeconfig": base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()}}
        ),
    )

    # Without --force nothing is removed: the identity there is the only way left to end it.
    stopped = vkctl("unpeer", "out-of-band", PROVIDER, env=consumer_only_env(peered))
    assert stopped.returncode == 1
    assert "florence did not answer, or refused, at https://127.0.0.1:1" in stopped.stderr
    assert "nothing was removed" in stopped.stderr
    assert get_json(peered, CONSUMER, "secret", "vk-control-plane-florence", "-n", CONSUMER_TENANT)

    unpeered = vkctl("unpeer", "out-of-band", PROVIDER, "--force", env=consumer_only_env(peered))

    assert unpeered.returncode != 0
    assert "florence cannot be reached" in unpeered.stderr
    assert "removing the peering on this side only" in unpeered.stderr
    assert "florence was not reached" in unpeered.stderr
    assert (
        "`kubectl delete tenants.authentication.liqo.io -n liqo-tenant-venice venice`"
        in unpeered.stderr
    )
    assert consumer_leftovers(peered) == []
    assert get_json(peered, PROVIDER, TENANTS, CONSUMER, "-n", PROVIDER_TENANT)

    # florence's administrator does what the message says: florence removes the rest.
    peered.kubectl(PROVIDER, "delete", TENANTS, "-n", PROVIDER_TENANT, CONSUMER, "--timeout=60s")
    wait_until(lambda: provider_leftovers(peered) == [], "nothing of venice left on florence")


def unpeer_leaving_nothing(peered: Clusters) -> None:
    """`vkctl unpeer --remote-kubeconfig` succeeds, and nothing of the peering is left."""
    unpeered = vkctl(
        "unpeer",
        f"--remote-kubeconfig={peered.kubeconfig(PROVIDER)}",
        "--timeout=120s",
        env=consumer_only_env(peered),
    )
    assert unpeered.returncode == 0, unpeered.stderr
    assert consumer_leftovers(peered) == []
    wait_until(lambda: provider_leftovers(peered) == [], "nothing of venice left on florence")


def test_the_tenant_namespace_deleted_by_hand_goes_with_the_twins_on_the_provider(
    peered: Clusters, offloaded_namespace: str
) -> None:
    """Deleting the tenant namespace deletes the control-plane identity with the slices and
    maps that need it to let their twins go: they waited for ever, the namespace Terminating
    with them. The identity now outlives them; unpeering afterwards ends the rest. And the
    virtual kubelet's ServiceAccount goes with it too: a pod whose deletion it had not finished
    (held here by florence's administrator) held its VirtualNode draining for ever."""
    twin = f"{offloaded_namespace}-venice"
    held = ("pod", "app", "-n", twin)
    hold = '{"metadata":{"finalizers":["test.vk.io/hold"]}}'
    peered.kubectl(PROVIDER, "patch", *held, "--type=merge", "-p", hold)
    try:
        peered.kubectl(CONSUMER, "delete", "namespace", CONSUMER_TENANT, "--wait=false")
        wait_until(
            lambda: get_json(peered, CONSUMER, "node", PROVIDER) is None,
            "the virtual node gone, its pod still held",
            timeout=90,
        )
    finally:
        release = '{"metadata":{"finalizers":null}}'
        peered.kubectl(PROVIDER, "patch", *held, "--type=merge", "-p", release, check=False)
    wait_until(
        lambda: get_json(peered, CONSUMER, "namespace", CONSUMER_TENANT) is None,
        "the tenant namespace gone",
        timeout=90,
    )
    wait_until(
        lambda: get_json(peered, CONSUMER, "pod", "app", "-n", offloaded_namespace) is None,
        "the pod gone with its node",
        timeout=90,
    )
    assert names(peered, PROVIDER, RSLICE, "-n", PROVIDER_TENANT) == []
    assert names(peered, PROVIDER, QUOTAS, "-n", PROVIDER_TENANT) == []
    wait_until(
        lambda: get_json(peered, PROVIDER, "namespace", twin) is None, "the twin namespace gone"
    )
    unpeer_leaving_nothing(peered)


def test_unpeer_ends_a_peering_whose_identity_someone_took_away(peered: Clusters) -> None:
    """The control-plane identity forced away (its finalizer taken off): no controller can let
    the slices' twins go, so `vkctl unpeer` releases them, and the Tenant's end removes them
    on the provider. It waited for the replication controller until its timeout, before."""
    identity = ("secret", "vk-control-plane-florence", "-n", CONSUMER_TENANT)
    peered.kubectl(CONSUMER, "delete", *identity, "--wait=false")
    peered.kubectl(
        CONSUMER, "patch", *identity, "--type=merge", "-p", '{"metadata":{"finalizers":null}}'
    )
    wait_until(lambda: get_json(peered, CONSUMER, *identity) is None, "the identity gone")
    unpeer_leaving_nothing(peered)
