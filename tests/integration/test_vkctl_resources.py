"""vkctl's commands of the reference page, against the playground with vk installed in every
cluster: venice peers with florence as the tutorial does (`generate peer-command` on florence,
its output run from venice), then asks for more with `create resourceslice` and
`create virtualnode`, reads it all back with `info`, and gives it back with `delete`."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Clusters
from tests.integration.polling import wait_until

VKCTL = str(Path(sys.executable).parent / "vkctl")
CONSUMER, PROVIDER = "venice", "florence"
TENANT = f"liqo-tenant-{PROVIDER}"
RSLICE = "resourceslices.authentication.liqo.io"


def vkctl(clusters: Clusters, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """vkctl as a user of venice runs it: KUBECONFIG names venice."""
    return subprocess.run(
        [VKCTL, *args],
        env={**os.environ, "KUBECONFIG": str(clusters.kubeconfig(CONSUMER))},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def get_json(clusters: Clusters, *args: str) -> Any:
    result = clusters.kubectl(CONSUMER, "get", *args, "-o", "json", check=False)
    return json.loads(result.stdout) if result.returncode == 0 else None


def is_ready(node: dict[str, Any] | None) -> bool:
    return node is not None and any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


@pytest.fixture(scope="module")
def peered(installed: Clusters) -> Iterator[Clusters]:
    """venice peered with florence as the tutorial does it, unpeered afterwards (and peered
    again if it was before)."""
    was_peered = (
        installed.kubectl(
            CONSUMER, "get", "foreignclusters.core.liqo.io", PROVIDER, check=False
        ).returncode
        == 0
    )
    generated = subprocess.run(
        [
            VKCTL,
            "generate",
            "peer-command",
            "--only-command",
            "--kubeconfig",
            str(installed.kubeconfig(PROVIDER)),
        ],
        capture_output=True,
        text=True,
    )
    assert generated.returncode == 0, generated.stderr
    command = generated.stdout.strip()
    # It names the context it was generated with: another one made current meanwhile does not
    # change the cluster it peers with.
    current = yaml.safe_load(installed.kubeconfig(PROVIDER).read_text())["current-context"]
    assert command == shlex.join(
        [
            "vkctl", "peer", "--remote-kubeconfig", str(installed.kubeconfig(PROVIDER).absolute()),
            "--remote-context", current,
        ]
    )  # fmt: skip
    try:
        # The tutorial: `echo "$PEER_FLORENCE" | bash`, with KUBECONFIG naming the consumer.
        peering = subprocess.run(
            ["bash"],
            input=command,
            env={**os.environ, "KUBECONFIG": str(installed.kubeconfig(CONSUMER))},
            capture_output=True,
            text=True,
            timeout=240,
        )
        assert peering.returncode == 0, peering.stderr
        assert peering.stdout.strip() == "peered"
        yield installed
    finally:
        # What a failed test left goes first: a VirtualNode of no slice would hold `unpeer`,
        # which removes the slices and waits for every virtual node to go.
        for kind, name in (
            ("virtualnode", "bysecret"),
            ("virtualnode", "mynode"),
            ("resourceslice", "mypool"),
        ):
            vkctl(installed, "delete", kind, name, "--remote-cluster-id", PROVIDER)
        remote = ("--remote-kubeconfig", str(installed.kubeconfig(PROVIDER)))
        unpeered = vkctl(installed, "unpeer", *remote)
        assert unpeered.returncode == 0, unpeered.stderr
        if was_peered:
            assert vkctl(installed, "peer", *remote).returncode == 0


def test_generate_peer_command_explains_the_command_without_only_command(
    installed: Clusters,
) -> None:
    result = subprocess.run(
        [VKCTL, "generate", "peer-command", "--kubeconfig", str(installed.kubeconfig(PROVIDER))],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].endswith(f"to peer it with {PROVIDER}:")
    assert lines[2].startswith("vkctl peer --remote-kubeconfig ")


@pytest.mark.parametrize(("cluster", "region"), [("florence", "center"), ("naples", "south")])
def test_status_takes_the_kubeconfig_before_the_command_as_the_tutorial_runs_it(
    installed: Clusters, cluster: str, region: str
) -> None:
    """`liqoctl --kubeconfig $KUBECONFIG_NAPLES status`: the flag before the command wins over
    KUBECONFIG (venice's here)."""
    result = vkctl(installed, "--kubeconfig", str(installed.kubeconfig(cluster)), "status")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert f"Cluster ID: {cluster}" in lines
    assert f"Cluster labels: topology.liqo.io/region={region}" in lines


def test_info_shows_this_cluster_its_controller_manager_and_the_peering(
    peered: Clusters,
) -> None:
    result = vkctl(peered, "info", "-o", "json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["clusterID"] == CONSUMER
    assert report["clusterLabels"] == {"topology.liqo.io/region": "north"}
    assert report["controllerManager"]["running"] is True
    florence = next(p for p in report["peerings"] if p["clusterID"] == PROVIDER)
    assert florence["role"] == "Provider"
    assert florence["authentication"] == "Established"
    wait_until(
        lambda: (
            (out := vkctl(peered, "info", "-o", "json")).returncode == 0
            and next(p for p in json.loads(out.stdout)["peerings"] if p["clusterID"] == PROVIDER)[
                "outgoingPeering"
            ]
            == "Established"
        ),
        "florence's outgoing peering Established",
    )
    human = vkctl(peered, "info").stdout.splitlines()
    assert human[0] == f"Cluster ID: {CONSUMER}"
    assert "  Running: yes" in human
    # The components' health: the webhook registered, each virtual kubelet and its Node.
    report = json.loads(vkctl(peered, "info", "-o", "json").stdout)
    assert report["webhook"]["registered"] is True
    kubelet = next(k for k in report["virtualKubelets"] if k["name"] == f"{TENANT}/{PROVIDER}")
    assert (kubelet["virtualKubelet"], kubelet["nodeReady"]) == ("Running", True)


def test_create_resourceslice_o_yaml_creates_nothing(peered: Clusters) -> None:
    result = vkctl(
        peered, "create", "resourceslice", "printed", "--remote-cluster-id", PROVIDER, "-o", "yaml"
    )
    assert result.returncode == 0, result.stderr
    assert "kind: ResourceSlice" in result.stdout
    assert get_json(peered, RSLICE, "printed", "-n", TENANT) is None


def test_a_slice_then_a_virtual_node_on_it_then_both_given_back(peered: Clusters) -> None:
    created = vkctl(
        peered, "create", "resourceslice", "mypool", "--remote-cluster-id", PROVIDER,
        "--cpu", "2", "--timeout", "2m",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == (
        f"ResourceSlice {TENANT}/mypool: Authentication Accepted, Resources Accepted; "
        "node mypool Ready"
    )
    assert "waiting for florence to accept the ResourceSlice mypool" in created.stderr
    table = peered.kubectl(CONSUMER, "get", RSLICE, "mypool", "-n", TENANT).stdout
    assert table.splitlines()[1].split()[:3] == ["mypool", "Accepted", "Accepted"]
    node = get_json(peered, "node", "mypool")
    assert is_ready(node)
    assert node["status"]["capacity"]["cpu"] == "2"
    assert node["metadata"]["labels"]["topology.liqo.io/region"] == "center"

    on_slice = vkctl(
        peered, "create", "virtualnode", "mynode", "--remote-cluster-id", PROVIDER,
        "--resource-slice-name", "mypool", "--pods", "20",
    )  # fmt: skip
    assert on_slice.returncode == 0, on_slice.stderr
    assert on_slice.stdout.strip() == f"VirtualNode {TENANT}/mynode created; node mynode Ready"
    node = get_json(peered, "node", "mynode")
    assert node["status"]["capacity"]["pods"] == "20"
    assert node["status"]["capacity"]["cpu"] == "2"  # the slice's

    # The slice's own virtual node is the slice's to remove.
    refused = vkctl(peered, "delete", "virtualnode", "mypool", "--remote-cluster-id", PROVIDER)
    assert refused.returncode == 1
    assert "delete the slice (`vkctl delete resourceslice mypool" in refused.stderr
    assert is_ready(get_json(peered, "node", "mypool"))

    deleted = vkctl(peered, "delete", "virtualnode", "mynode", "--remote-cluster-id", PROVIDER)
    assert deleted.returncode == 0, deleted.stderr
    assert deleted.stdout.strip() == f"VirtualNode {TENANT}/mynode deleted"
    assert get_json(peered, "node", "mynode") is None

    given_back = vkctl(peered, "delete", "resourceslice", "mypool", "--remote-cluster-id", PROVIDER)
    assert given_back.returncode == 0, given_back.stderr
    assert given_back.stdout.strip() == (
        f"ResourceSlice {TENANT}/mypool deleted, with its virtual nodes mypool"
    )
    assert get_json(peered, RSLICE, "mypool", "-n", TENANT) is None
    assert get_json(peered, "node", "mypool") is None


def test_a_virtual_node_of_the_slice_goes_with_the_slice(peered: Clusters) -> None:
    assert vkctl(
        peered, "create", "resourceslice", "mypool", "--remote-cluster-id", PROVIDER,
        "--no-virtual-node",
    ).returncode == 0  # fmt: skip
    assert get_json(peered, "virtualnodes.offloading.liqo.io", "mypool", "-n", TENANT) is None
    on_slice = vkctl(
        peered, "create", "virtualnode", "mynode", "--remote-cluster-id", PROVIDER,
        "--resource-slice-name", "mypool",
    )  # fmt: skip
    assert on_slice.returncode == 0, on_slice.stderr
    given_back = vkctl(peered, "delete", "resourceslice", "mypool", "--remote-cluster-id", PROVIDER)
    assert given_back.returncode == 0, given_back.stderr
    assert given_back.stdout.strip().endswith("with its virtual nodes mynode")
    assert get_json(peered, "node", "mynode") is None


def test_a_virtual_node_from_a_kubeconfig_secret_offers_liqoctls_defaults(
    peered: Clusters, tmp_path: Path
) -> None:
    peered.kubectl(
        CONSUMER, "-n", TENANT, "create", "secret", "generic", "florence-admin",
        f"--from-file=kubeconfig={peered.kubeconfig(PROVIDER)}",
    )  # fmt: skip
    try:
        created = vkctl(
            peered, "create", "virtualnode", "bysecret", "--remote-cluster-id", PROVIDER,
            "--kubeconfig-secret-name", "florence-admin",
        )  # fmt: skip
        assert created.returncode == 0, created.stderr
        capacity = get_json(peered, "node", "bysecret")["status"]["capacity"]
        assert {k: capacity[k] for k in ("cpu", "memory", "pods")} == {
            "cpu": "2",
            "memory": "4Gi",
            "pods": "110",
        }
        deleted = vkctl(
            peered, "delete", "virtualnode", "bysecret", "--remote-cluster-id", PROVIDER
        )
        assert deleted.returncode == 0, deleted.stderr
    finally:
        peered.kubectl(CONSUMER, "-n", TENANT, "delete", "secret", "florence-admin", check=False)


def test_info_peer_shows_what_was_acquired_what_pods_use_and_the_nodes(
    peered: Clusters, namespace_name: str
) -> None:
    wait_until(lambda: is_ready(get_json(peered, "node", PROVIDER)), "the node florence Ready")
    peered.kubectl(CONSUMER, "create", "namespace", namespace_name)
    try:
        # Bound to the virtual node by hand: the pod holds its requests whether or not it is
        # offloaded (its namespace is not mapped: it waits, Pending).
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "user", "namespace": namespace_name},
            "spec": {
                "nodeName": PROVIDER,
                "tolerations": [{"key": "virtual-node.liqo.io/not-allowed", "operator": "Exists"}],
                "containers": [
                    {
                        "name": "app",
                        "image": "app",
                        "resources": {"requests": {"cpu": "250m", "memory": "64Mi"}},
                    }
                ],
            },
        }
        peered.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(pod))
        result = vkctl(peered, "info", "peer", PROVIDER, "-o", "json")
        assert result.returncode == 0, result.stderr
        report = json.loads(result.stdout)
        assert report["clusterID"] == PROVIDER
        assert report["role"] == "Provider"
        assert report["peering"]["authentication"] == "Established"
        [own] = [s for s in report["resourceSlices"] if s["name"] == PROVIDER]
        assert own["accepted"] is True
        assert own["action"] == "Consuming"
        assert report["resources"]["acquired"] == {
            "cpu": "4",
            "ephemeral-storage": "20Gi",
            "memory": "8Gi",
            "pods": "110",
        }
        assert report["resources"]["used"] == {"cpu": "250m", "memory": "64Mi", "pods": "1"}
        [node] = [v for v in report["virtualNodes"] if v["name"] == PROVIDER]
        assert node["ready"] is True
        assert node["resourceSlice"] == PROVIDER
        human = vkctl(peered, "info", "peer", PROVIDER).stdout.splitlines()
        assert "  Used: cpu=250m, memory=64Mi, pods=1" in human
    finally:
        peered.kubectl(CONSUMER, "delete", "namespace", namespace_name, "--wait=false")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["create", "resourceslice", "x", "--remote-cluster-id", "rome"],
            "not peered with rome (no namespace liqo-tenant-rome): run `vkctl peer",
        ),
        (
            ["create", "virtualnode", "x", "--remote-cluster-id", PROVIDER,
             "--resource-slice-name", "missing"],
            f"no ResourceSlice missing in {TENANT}: create it first",
        ),
        (
            ["delete", "resourceslice", "missing", "--remote-cluster-id", PROVIDER],
            f"no ResourceSlice missing in {TENANT}",
        ),
        (["info", "peer", "rome"], "this cluster is not peered with rome"),
        (["info", "--context", "nowhere"], "kubeconfig has no context named 'nowhere'"),
    ],
)  # fmt: skip
def test_failures_exit_non_zero_with_what_to_do(
    peered: Clusters, args: list[str], message: str
) -> None:
    result = vkctl(peered, *args)
    assert result.returncode == 1
    assert result.stderr.startswith(f"Error: {message}")
    assert "Traceback" not in result.stderr
