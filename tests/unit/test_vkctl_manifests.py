"""What vkctl builds before it talks to a cluster: the manifests of `create ... -o yaml|json`
(the reference page's YAML), the options every command shares, and the kubeconfig it picks."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from vk.api.identity import ClusterIdentity
from vk.cli import generate, peer
from vk.cli.generate import forge_peer_command
from vk.cli.peering import PeeringError
from vk.cli.resources import (
    controlling_slice,
    forge_secret_virtual_node,
    forge_slice_virtual_node,
    read_accepted_slice,
)
from vk.cli.vkctl import vkctl
from vk.kube.kubeconfig import ClusterConnection, kubeconfig_files


def run(*args: str) -> Any:
    return CliRunner().invoke(vkctl, list(args))


def test_create_resourceslice_o_yaml_prints_the_reference_pages_slice() -> None:
    result = run(
        "create", "resourceslice", "mypool", "--remote-cluster-id", "cool-firefly", "-o", "yaml"
    )
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout) == {
        "apiVersion": "authentication.liqo.io/v1beta1",
        "kind": "ResourceSlice",
        "metadata": {
            "name": "mypool",
            "namespace": "liqo-tenant-cool-firefly",
            "labels": {
                "liqo.io/remote-cluster-id": "cool-firefly",
                "liqo.io/remoteID": "cool-firefly",
                "liqo.io/replication": "true",
            },
            "annotations": {"liqo.io/create-virtual-node": "true"},
        },
        "spec": {"class": "default", "providerClusterID": "cool-firefly"},
    }


def test_create_resourceslice_o_json_carries_the_class_and_every_resource_asked() -> None:
    result = run(
        "create", "resourceslice", "mypool", "--remote-cluster-id", "cool-firefly",
        "--class", "custom-class", "--cpu", "4", "--memory", "8Gi", "--pods", "30",
        "--resource", "nvidia.com/gpu=2", "--no-virtual-node", "-o", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    printed = json.loads(result.stdout)
    assert printed["spec"] == {
        "class": "custom-class",
        "providerClusterID": "cool-firefly",
        "resources": {"cpu": "4", "memory": "8Gi", "pods": "30", "nvidia.com/gpu": "2"},
    }
    assert "annotations" not in printed["metadata"]


def test_create_virtualnode_from_a_secret_o_yaml_is_the_reference_pages_node() -> None:
    result = run(
        "create", "virtualnode", "mynode", "--remote-cluster-id", "cool-firefly",
        "--kubeconfig-secret-name", "kubeconfig-resourceslice-mypool", "-o", "yaml",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout) == {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "VirtualNode",
        "metadata": {
            "name": "mynode",
            "namespace": "liqo-tenant-cool-firefly",
            "labels": {"liqo.io/remote-cluster-id": "cool-firefly"},
        },
        "spec": {
            "clusterID": "cool-firefly",
            "createNode": True,
            "kubeconfigSecretRef": {"name": "kubeconfig-resourceslice-mypool"},
            "labels": {"liqo.io/remote-cluster-id": "cool-firefly"},
            "resourceQuota": {"hard": {"cpu": "2", "memory": "4Gi", "pods": "110"}},
        },
    }


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["create", "virtualnode", "n", "--remote-cluster-id", "naples"],
            "give exactly one of --resource-slice-name and --kubeconfig-secret-name",
        ),
        (
            ["create", "virtualnode", "n", "--remote-cluster-id", "naples",
             "--resource-slice-name", "s", "--kubeconfig-secret-name", "k"],
            "give exactly one of --resource-slice-name and --kubeconfig-secret-name",
        ),
        (["create", "resourceslice", "s"], "Missing option '--remote-cluster-id'"),
        (
            ["create", "resourceslice", "s", "--remote-cluster-id", "Naples_1"],
            "is not a DNS-1123 label",
        ),
        (
            ["create", "resourceslice", "s", "--remote-cluster-id", "naples", "--memory", "lots"],
            "'lots' is not a Kubernetes quantity",
        ),
        (
            ["create", "resourceslice", "s", "--remote-cluster-id", "naples", "--resource", "gpu"],
            "'gpu' is not NAME=QUANTITY",
        ),
        (
            ["create", "resourceslice", "s", "--remote-cluster-id", "naples", "-o", "table"],
            "'table' is not one of 'yaml', 'json'",
        ),
        (
            ["delete", "virtualnode", "n", "--remote-cluster-id", "naples", "--timeout", "soon"],
            "'soon' is not a duration like 10s or 2m",
        ),
    ],
)  # fmt: skip
def test_wrong_arguments_are_usage_errors(args: list[str], message: str) -> None:
    result = run(*args)
    assert result.exit_code == 2
    assert message in result.stderr


LONG_NAME = "a" * 64  # as a virtual node's, a label value: at most 63


def test_an_object_that_exists_is_named_as_whoever_made_it_named_it(tmp_path: Path) -> None:
    """A VirtualNode made with kubectl may be `my.node`: vkctl deletes it (here it reaches for
    the cluster, which is not there), though it makes only DNS-1123 labels itself."""
    nowhere = tmp_path / "nowhere.yaml"
    nowhere.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    for args in (
        ["delete", "virtualnode", "my.node"],
        ["delete", "resourceslice", "my.pool"],
        ["cordon", "resourceslice", "my.pool"],
    ):
        result = run(*args, "--remote-cluster-id", "naples", "--kubeconfig", str(nowhere))
        assert result.exit_code == 1, result.output
        assert "cannot connect to 127.0.0.1:1" in result.stderr
    refused = run("delete", "virtualnode", "My_Node", "--remote-cluster-id", "naples")
    assert refused.exit_code == 2
    assert "'My_Node' is not a VirtualNode name" in refused.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["info", "peer", ""], "Invalid value for 'CLUSTER_ID': cluster ID is empty"),
        (
            ["delete", "virtualnode", "", "--remote-cluster-id", "naples"],
            "Invalid value for 'NAME': VirtualNode name is empty",
        ),
        (
            ["delete", "resourceslice", "", "--remote-cluster-id", "naples"],
            "Invalid value for 'NAME': ResourceSlice name is empty",
        ),
        (["drain", "tenant", ""], "Invalid value for 'CONSUMER_CLUSTER_ID': cluster ID is empty"),
        (["cordon", "tenant", ""], "Invalid value for 'CONSUMER_CLUSTER_ID': cluster ID is empty"),
        (
            ["uncordon", "tenant", "Venice"],
            "Invalid value for 'CONSUMER_CLUSTER_ID': cluster ID 'Venice' is not a DNS-1123 label",
        ),
        (["cordon", "resourceslice", ""], "ResourceSlice name is empty"),
        (
            ["create", "resourceslice", "BAD_NAME", "--remote-cluster-id", "naples", "-o", "yaml"],
            "'BAD_NAME' is not a DNS-1123 label, as a ResourceSlice name must be: use lower-case "
            "letters, digits and '-'",
        ),
        (
            ["create", "resourceslice", LONG_NAME, "--remote-cluster-id", "naples", "-o", "yaml"],
            "is 64 characters long: a ResourceSlice name is at most 63",
        ),
        (
            ["create", "virtualnode", "my_node", "--remote-cluster-id", "naples",
             "--kubeconfig-secret-name", "k", "-o", "yaml"],
            "'my_node' is not a DNS-1123 label, as a VirtualNode name must be",
        ),
        (
            ["create", "virtualnode", "n", "--remote-cluster-id", "naples",
             "--kubeconfig-secret-name", "", "-o", "yaml"],
            "Invalid value for '--kubeconfig-secret-name': Secret's name is empty",
        ),
        (
            ["get", "kubeconfig", "--remote-cluster-id", "naples", "--resource-slice-name", ""],
            "Invalid value for '--resource-slice-name': ResourceSlice name is empty",
        ),
        (
            ["get", "kubeconfig", "--remote-cluster-id", "Naples"],
            "Invalid value for '--remote-cluster-id': cluster ID 'Naples' is not a DNS-1123 label",
        ),
        (
            ["create", "resourceslice", "s", "--remote-cluster-id", "naples", "--cpu", "-1",
             "-o", "yaml"],
            "Invalid value for '--cpu': cpu is negative",
        ),
        (
            ["create", "resourceslice", "s", "--remote-cluster-id", "naples", "--pods", "1.5",
             "-o", "yaml"],
            "Invalid value for '--pods': pods: '1.5' is not a whole number",
        ),
        (
            ["create", "virtualnode", "n", "--remote-cluster-id", "naples",
             "--kubeconfig-secret-name", "k", "--resource", "bad name=1", "-o", "yaml"],
            "Invalid value for '--resource': 'bad name' is not a resource name",
        ),
        (
            ["create", "resourceslice", "s", "--remote-cluster-id", "naples",
             "--resource", "nvidia.com/gpu=-2", "-o", "yaml"],
            "nvidia.com/gpu is negative",
        ),
        (
            ["create", "resourceslice", "s", "--remote-cluster-id", "naples",
             "--resource", "nvidia.com/gpu=0.5", "-o", "yaml"],
            "nvidia.com/gpu: '0.5' is not a whole number",
        ),
    ],
)  # fmt: skip
def test_names_ids_and_quantities_no_cluster_takes_are_usage_errors_saying_the_rule(
    monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")  # never reached
    result = run(*args)
    assert result.exit_code == 2, result.output
    assert message in result.stderr
    assert result.stdout == ""


@pytest.mark.parametrize("timeout", ["-5", "nan", "inf", "1e400"])
def test_a_timeout_is_a_finite_duration_of_zero_or_more(
    monkeypatch: pytest.MonkeyPatch, timeout: str
) -> None:
    monkeypatch.setenv("KUBECONFIG", "/nonexistent/kubeconfig")  # never reached
    result = run("drain", "tenant", "venice", "--timeout", timeout)
    assert result.exit_code == 2
    assert f"Invalid value for '--timeout': {timeout!r} is not a duration of 0 or more" in (
        result.stderr
    )


def accepted_slice() -> dict[str, Any]:
    return {
        "metadata": {"name": "mypool", "namespace": "liqo-tenant-naples", "uid": "u-1"},
        "status": {
            "resources": {"cpu": "4", "memory": "8Gi", "pods": "110"},
            "nodeLabels": {"topology.liqo.io/region": "south"},
        },
    }


def test_a_virtual_node_of_a_slice_is_owned_by_it_but_not_its_own() -> None:
    node = forge_slice_virtual_node("mynode", accepted_slice(), "naples", {"pods": "30"})
    assert node["metadata"]["name"] == "mynode"
    assert node["metadata"]["namespace"] == "liqo-tenant-naples"
    [owner] = node["metadata"]["ownerReferences"]
    assert (owner["uid"], owner["controller"]) == ("u-1", False)
    assert controlling_slice(node) is None  # so `delete virtualnode` may delete it
    assert node["spec"]["resourceQuota"]["hard"] == {"cpu": "4", "memory": "8Gi", "pods": "30"}
    assert node["spec"]["labels"]["topology.liqo.io/region"] == "south"


def test_the_slices_own_virtual_node_is_controlled_by_it() -> None:
    from vk.controllers.consumer_resourceslices import forge_virtual_node

    assert controlling_slice(forge_virtual_node(accepted_slice(), "naples", {})) == "mypool"


def test_a_virtual_node_of_a_secret_takes_liqoctls_defaults_or_the_given_resources() -> None:
    node = forge_secret_virtual_node("n", "naples", "k", {"memory": "16Gi", "nvidia.com/gpu": "1"})
    assert node["spec"]["resourceQuota"]["hard"] == {
        "cpu": "2",
        "memory": "16Gi",
        "pods": "110",
        "nvidia.com/gpu": "1",
    }


@pytest.mark.parametrize(
    ("path", "context", "command"),
    [
        (Path("/k/florence"), None, "vkctl peer --remote-kubeconfig /k/florence"),
        (
            Path("/my configs/florence's"),
            "admin@florence",
            "vkctl peer --remote-kubeconfig '/my configs/florence'\"'\"'s' "
            "--remote-context admin@florence",
        ),
    ],
)
def test_the_peer_command_is_quoted_for_the_shell(
    path: Path, context: str | None, command: str
) -> None:
    assert forge_peer_command(path, context) == command


def test_the_kubeconfig_files_are_the_flag_else_kubeconfigs_else_home(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", "/a/first:/b/second")
    assert kubeconfig_files("/given") == [Path("/given")]
    assert kubeconfig_files() == [Path("/a/first"), Path("/b/second")]  # merged, as kubectl
    monkeypatch.delenv("KUBECONFIG")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert kubeconfig_files() == [tmp_path / ".kube" / "config"]
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "10.0.0.1")
    assert kubeconfig_files() is None  # in a pod: in-cluster


def kubeconfig(path: Path, *servers: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "current-context": servers[0],
                "contexts": [{"name": s, "context": {"cluster": s, "user": "u"}} for s in servers],
                "clusters": [
                    {"name": s, "cluster": {"server": f"https://{s}:6443"}} for s in servers
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    return path


def test_peer_talks_to_the_contexts_given(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    seen: list[tuple[ClusterConnection, ClusterConnection]] = []

    async def fake_peer(consumer: ClusterConnection, provider: ClusterConnection, **_: Any) -> None:
        seen.append((consumer, provider))

    monkeypatch.setattr(peer, "peer", fake_peer)
    consumer = kubeconfig(tmp_path / "consumer", "venice", "venice-admin")
    provider = kubeconfig(tmp_path / "provider", "naples", "naples-admin")
    monkeypatch.setenv("KUBECONFIG", str(consumer))
    result = run("peer", "--remote-kubeconfig", str(provider))
    assert result.exit_code == 0, result.output
    result = run(
        "peer", "--context", "venice-admin",
        "--remote-kubeconfig", str(provider), "--remote-context", "naples-admin",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert [(c.server, p.server) for c, p in seen] == [
        ("https://venice:6443", "https://naples:6443"),
        ("https://venice-admin:6443", "https://naples-admin:6443"),
    ]


@pytest.mark.parametrize(
    ("args", "context"),
    [
        (["generate", "peer-command", "--only-command"], "florence"),  # its current context
        (["--context", "florence-admin", "generate", "peer-command", "--only-command"],
         "florence-admin"),
    ],
)  # fmt: skip
def test_the_generated_peer_command_names_the_context_it_was_generated_with(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, args: list[str], context: str
) -> None:
    """Else, the provider's current context switched before it runs, it peers another cluster."""
    reached: list[str] = []

    async def identity(connection: ClusterConnection) -> ClusterIdentity:
        reached.append(connection.server)
        return ClusterIdentity("florence")

    monkeypatch.setattr(generate, "_identity", identity)
    provider = kubeconfig(tmp_path / "florence", "florence", "florence-admin")
    result = run(*args, "--kubeconfig", str(provider))
    assert result.exit_code == 0, result.output
    assert result.stdout == (
        f"vkctl peer --remote-kubeconfig {provider} --remote-context {context}\n"
    )
    assert reached == [f"https://{context}:6443"]


class OneSliceClient:
    """A cluster holding one ResourceSlice, accepted, with the status `status`."""

    def __init__(self, status: dict[str, Any]) -> None:
        self.slice = {
            **accepted_slice(),
            "status": {
                **status,
                "conditions": [{"type": "Authentication", "status": "Accepted"}],
            },
        }

    async def get(self, path: str) -> dict[str, Any]:
        assert path.endswith("/resourceslices/mypool"), path
        return self.slice


def test_a_virtual_node_is_not_made_of_a_slice_status_the_consumer_refuses() -> None:
    refused = OneSliceClient({"authParams": {"apiServer": "http://10.0.0.1:6443"}})
    with pytest.raises(PeeringError, match=r"refused: authParams.apiServer 'http://10.0.0.1:6443'"):
        asyncio.run(read_accepted_slice(refused, "naples", "mypool"))  # type: ignore[arg-type]

    usable = OneSliceClient({"authParams": {"apiServer": "https://10.0.0.1:6443"}})
    assert asyncio.run(read_accepted_slice(usable, "naples", "mypool")) is usable.slice  # type: ignore[arg-type]
