"""vk's CRDs on a real kube-apiserver: Liqo's own YAML examples are accepted unchanged, and
`kubectl get` prints the tables of Liqo's pages, header and rows, character for character."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Clusters
from vk.api.crds import crd_manifests

REPOSITORY = Path(__file__).resolve().parents[2]
REFERENCE_YAML = REPOSITORY / "tests" / "data" / "reference"
CRDS = REPOSITORY / "deploy" / "crds"
# Not a peered cluster's: the tables are checked on objects written by hand, which vk's
# controllers (stopped meanwhile) would otherwise answer.
CLUSTER = "florence"


def ensure_namespace(clusters: Clusters, name: str) -> None:
    metadata: dict[str, Any] = {"name": name}
    if name.startswith("liqo-tenant-"):  # a tenant namespace, as peering makes it
        metadata["labels"] = {"liqo.io/tenant-namespace": "true"}
    manifest = {"apiVersion": "v1", "kind": "Namespace", "metadata": metadata}
    clusters.kubectl(CLUSTER, "apply", "-f", "-", input=json.dumps(manifest))


REFERENCE_NAMESPACES = ("liqo-tenant-cool-firefly", "liqo-tenant-wispy-firefly", "liqo-demo")


@pytest.fixture(scope="module")
def reference_namespaces_removed(without_vk_controllers: Clusters) -> Iterator[Clusters]:
    """The pages' namespaces are gone from florence after this module: a later test (the
    tutorial) checks that florence has no `liqo-demo`."""
    yield without_vk_controllers
    without_vk_controllers.kubectl(
        CLUSTER, "delete", "namespace", *REFERENCE_NAMESPACES, "--ignore-not-found", "--wait=false"
    )


@pytest.fixture
def reference_namespaces(reference_namespaces_removed: Clusters) -> Iterator[Clusters]:
    without_vk_controllers = reference_namespaces_removed
    names = REFERENCE_NAMESPACES
    for name in names:
        ensure_namespace(without_vk_controllers, name)
    yield without_vk_controllers
    for kind in (
        "resourceslices.authentication.liqo.io",
        "virtualnodes.offloading.liqo.io",
        "quotas.offloading.liqo.io",
        "namespaceoffloadings.offloading.liqo.io",
    ):
        for name in names:
            without_vk_controllers.kubectl(
                CLUSTER, "delete", kind, "--all", "-n", name, "--wait=false"
            )
    without_vk_controllers.kubectl(
        CLUSTER,
        "delete",
        "foreignclusters.core.liqo.io",
        "florence",
        "naples",
        "--ignore-not-found",
        "--wait=false",
    )


@pytest.mark.parametrize(
    "example",
    [
        "resourceslice_mypool.yaml",
        "resourceslice_mypool_custom_class.yaml",
        "virtualnode_mynode_from_resourceslice.yaml",
        "virtualnode_mynode_from_secret.yaml",
        "namespaceoffloading_liqo_demo.yaml",
    ],
)
def test_reference_yaml_passes_server_side_dry_run_unchanged(
    reference_namespaces: Clusters, example: str
) -> None:
    text = (REFERENCE_YAML / example).read_text()
    result = reference_namespaces.kubectl(
        CLUSTER, "apply", "--dry-run=server", "-f", "-", input=text
    )
    assert "(server dry run)" in result.stdout


def test_reference_kubeconfig_secret_passes_server_side_dry_run(
    reference_namespaces: Clusters,
) -> None:
    # The page's Secret as printed, except its placeholder `<base64-encoded-kubeconfig>`,
    # which no API server accepts as base64: it gets a real kubeconfig, as a user would put.
    text = (REFERENCE_YAML / "secret_kubeconfig_resourceslice_mypool.yaml").read_text()
    assert "<base64-encoded-kubeconfig>" in text
    kubeconfig = base64.b64encode(reference_namespaces.kubeconfig("naples").read_bytes())
    text = text.replace("<base64-encoded-kubeconfig>", kubeconfig.decode())
    result = reference_namespaces.kubectl(
        CLUSTER, "apply", "--dry-run=server", "-f", "-", input=text
    )
    assert "secret/kubeconfig-resourceslice-mypool created (server dry run)" in result.stdout


def without_age(table: str) -> list[str]:
    """The lines of a `kubectl get` table with the AGE column (the last one) cut off."""
    lines = table.strip("\n").splitlines()
    assert lines[0].endswith("AGE")
    return [line.rsplit(None, 1)[0] for line in lines]


def apply(clusters: Clusters, manifest: dict) -> None:
    clusters.kubectl(CLUSTER, "apply", "--server-side", "-f", "-", input=json.dumps(manifest))


def set_status(
    clusters: Clusters, resource: str, name: str, status: dict, namespace: str | None = None
) -> None:
    scope = ["-n", namespace] if namespace else []
    clusters.kubectl(
        CLUSTER,
        *scope,
        "patch",
        resource,
        name,
        "--subresource=status",
        "--type=merge",
        "-p",
        json.dumps({"status": status}),
    )


def test_resourceslice_table_is_the_reference_pages(reference_namespaces: Clusters) -> None:
    clusters = reference_namespaces
    clusters.kubectl(CLUSTER, "apply", "-f", str(REFERENCE_YAML / "resourceslice_mypool.yaml"))
    accepted = [{"type": t, "status": "Accepted"} for t in ("Authentication", "Resources")]
    set_status(
        clusters,
        "resourceslices.authentication.liqo.io",
        "mypool",
        {"conditions": accepted},
        "liqo-tenant-cool-firefly",
    )
    table = clusters.kubectl(CLUSTER, "get", "resourceslices.authentication.liqo.io", "-A").stdout
    assert without_age(table) == without_age("""
NAMESPACE                  NAME     AUTHENTICATION   RESOURCES   AGE
liqo-tenant-cool-firefly   mypool   Accepted         Accepted    19s
""")


def test_quota_table_is_the_reference_pages(reference_namespaces: Clusters) -> None:
    clusters = reference_namespaces
    apply(
        clusters,
        {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "Quota",
            "metadata": {"name": "mypool-c34af51dd912", "namespace": "liqo-tenant-wispy-firefly"},
            "spec": {
                "user": "liqo-wispy-firefly-mypool",
                "limitsEnforcement": "None",
                "resources": {"cpu": "4", "memory": "8Gi"},
            },
        },
    )
    table = clusters.kubectl(CLUSTER, "get", "quotas.offloading.liqo.io", "-A").stdout
    assert without_age(table) == without_age("""
NAMESPACE                   NAME                  ENFORCEMENT   CORDONED   AGE
liqo-tenant-wispy-firefly   mypool-c34af51dd912   None                     36s
""")


def test_virtualnode_table_is_the_reference_pages(reference_namespaces: Clusters) -> None:
    clusters = reference_namespaces
    apply(
        clusters,
        {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "VirtualNode",
            "metadata": {"name": "mypool", "namespace": "liqo-tenant-cool-firefly"},
            "spec": {
                "clusterID": "cool-firefly",
                "createNode": True,
                "kubeconfigSecretRef": {"name": "kubeconfig-resourceslice-mypool"},
                "resourceQuota": {"hard": {"cpu": "4", "memory": "8Gi", "pods": "110"}},
            },
        },
    )
    table = clusters.kubectl(CLUSTER, "get", "virtualnodes.offloading.liqo.io", "-A").stdout
    assert without_age(table) == without_age("""
NAMESPACE                  NAME     CLUSTERID      CREATE NODE   AGE
liqo-tenant-cool-firefly   mypool   cool-firefly   true          59s
""")


def test_foreigncluster_table_is_the_tutorials(reference_namespaces: Clusters) -> None:
    clusters = reference_namespaces
    for name in ("florence", "naples"):
        apply(
            clusters,
            {
                "apiVersion": "core.liqo.io/v1beta1",
                "kind": "ForeignCluster",
                "metadata": {"name": name},
                "spec": {"clusterID": name},
            },
        )
        set_status(
            clusters,
            "foreignclusters.core.liqo.io",
            name,
            {
                "role": "Provider",
                "modules": {
                    "offloading": {
                        "enabled": True,
                        "conditions": [
                            {"type": "OffloadingVirtualNodeStatus", "status": "Established"}
                        ],
                    },
                    "authentication": {
                        "enabled": True,
                        "conditions": [
                            {"type": "AuthIdentityControlPlaneStatus", "status": "Established"},
                            {"type": "AuthTenantStatus", "status": "None"},
                        ],
                    },
                    "networking": {
                        "enabled": True,
                        "conditions": [
                            {"type": "NetworkConnectionStatus", "status": "Established"}
                        ],
                    },
                },
            },
        )
    table = clusters.kubectl(CLUSTER, "get", "foreignclusters").stdout
    assert without_age(table) == without_age("""
NAME       OUTGOING PEERING   INCOMING PEERING   NETWORKING    AUTHENTICATION   AGE
florence   Established        None               Established   Established      111s
naples     Established        None               Established   Established      98s
""")


def test_short_names_reach_every_kind(installed: Clusters) -> None:
    for short in (
        "rslice",
        "vn",
        "vnode",
        "virno",
        "vno",
        "nso",
        "nsof",
        "nsoff",
        "nsoffloading",
        "nm",
        "nsmap",
        "qt",
        "fc",
    ):
        result = installed.kubectl(CLUSTER, "get", short, "-A", check=False)
        assert result.returncode == 0, f"{short}: {result.stderr}"


def test_every_crd_is_structural_according_to_the_api_server(
    installed: Clusters,
) -> None:
    for crd in crd_manifests():
        live = json.loads(
            installed.kubectl(CLUSTER, "get", "crd", crd["metadata"]["name"], "-o", "json").stdout
        )
        conditions = {c["type"]: c["status"] for c in live["status"]["conditions"]}
        assert conditions.get("NonStructuralSchema", "False") == "False", crd["metadata"]["name"]
        assert conditions["Established"] == "True"
        assert yaml.safe_dump(live["spec"]["names"]["shortNames"])
