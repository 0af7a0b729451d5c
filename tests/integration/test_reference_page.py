"""Liqo's "Offloading in depth" page, end to end: its YAMLs applied with kubectl exactly as
printed, against a playground of its own whose provider is `cool-firefly` (and whose consumer
is `wispy-firefly`, the page's Quota namespace), authenticated but with no slice yet, as the
page assumes. Its tables are read back from what the real controllers made, row for row (AGE
and VERSION aside), and the resources asked for are the ones every layer grants.

The steps build on each other, in the page's order: the slice `mypool`, a VirtualNode on its
identity, one on its kubeconfig Secret, the slices `vkctl create resourceslice` makes, and the
slice given back.
"""

from __future__ import annotations

import base64
import json
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import NameOID

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from vk.api.constants import REGION_LABEL
from vk.playground.playground import Playground
from vk.playground.spec import ClusterSpec

REFERENCE_YAML = Path(__file__).resolve().parents[1] / "data" / "reference"
VKCTL = str(Path(sys.executable).parent / "vkctl")

CONSUMER, PROVIDER = "wispy-firefly", "cool-firefly"
CLUSTERS = (
    ClusterSpec(CONSUMER, "consumer", 1, {REGION_LABEL: "north"}),
    ClusterSpec(PROVIDER, "provider", 1, {REGION_LABEL: "east"}),
)
TENANT = f"liqo-tenant-{PROVIDER}"  # on the consumer
PROVIDER_TENANT = f"liqo-tenant-{CONSUMER}"  # on the provider
RSLICES = "resourceslices.authentication.liqo.io"
VIRTUALNODES = "virtualnodes.offloading.liqo.io"
QUOTAS = "quotas.offloading.liqo.io"
KUBECONFIG_SECRET = "kubeconfig-resourceslice-mypool"

# The provider's default class, as the page's VirtualNode "with existing ResourceSlice" has it.
DEFAULT_CLASS = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"}
# The page's VirtualNode "with existing Secret".
FROM_SECRET = {"cpu": "2", "memory": "4Gi", "pods": "110"}

# A slice that asks for resources gets exactly those (Liqo's default class would add the
# defaults of what was not asked for, ephemeral-storage 20Gi).
NOT_EXACTLY_ASKED = "granted other than asked: {granted}"

# The page's tables, as printed there.
PAGE_SLICES = """\
NAMESPACE                  NAME     AUTHENTICATION   RESOURCES   AGE
liqo-tenant-cool-firefly   mypool   Accepted         Accepted    19s
"""
PAGE_QUOTAS = """\
NAMESPACE                   NAME                  ENFORCEMENT   CORDONED   AGE
liqo-tenant-wispy-firefly   mypool-c34af51dd912   None                     36s
"""
PAGE_VIRTUALNODES_MYPOOL = """\
NAMESPACE                  NAME     CLUSTERID      CREATE NODE   AGE
liqo-tenant-cool-firefly   mypool   cool-firefly   true          59s
"""
PAGE_NODES_MYPOOL = """\
NAME                            STATUS   ROLES           AGE   VERSION
cluster-1-control-plane-fsvkj   Ready    control-plane   30m   v1.27.4
cluster-1-md-0-dzl4s            Ready    <none>          29m   v1.27.4
mypool                          Ready    agent           67s   v1.27.4
"""
PAGE_VIRTUALNODES_MYNODE = """\
NAMESPACE                  NAME     CLUSTERID      CREATE NODE   AGE
liqo-tenant-cool-firefly   mynode   cool-firefly   true          7s
"""
PAGE_NODES_MYNODE = """\
NAME                            STATUS   ROLES           AGE   VERSION
cluster-1-control-plane-fsvkj   Ready    control-plane   52m   v1.27.4
cluster-1-md-0-dzl4s            Ready    <none>          52m   v1.27.4
mynode                          Ready    agent           22s   v1.27.4
"""


def read_table(text: str) -> tuple[list[str], list[dict[str, str]]]:
    """The titles and rows of a `kubectl get` table. Cells are cut at the titles' offsets, so
    an empty cell reads "" and a title may hold a space (`CREATE NODE`)."""
    header, *lines = text.strip("\n").splitlines()
    titles = [(m.start(), m.group()) for m in re.finditer(r"\S+(?: \S+)*", header)]
    ends = [start for start, _ in titles[1:]] + [None]
    rows = [
        {title: line[start:end].strip() for (start, title), end in zip(titles, ends, strict=True)}
        for line in lines
    ]
    return [title for _, title in titles], rows


def get_table(
    clusters: Clusters, cluster: str, *args: str
) -> tuple[list[str], list[dict[str, str]]]:
    """`kubectl get` as a user reads it (printed, for the report of a failure)."""
    table = clusters.kubectl(cluster, "get", *args).stdout
    print(f"$ kubectl --kubeconfig <{cluster}> get {' '.join(args)}\n{table}")
    return read_table(table)


def without(row: dict[str, str], *columns: str) -> dict[str, str]:
    return {title: cell for title, cell in row.items() if title not in columns}


def row_named(rows: list[dict[str, str]], name: str) -> dict[str, str]:
    [row] = [r for r in rows if r["NAME"] == name]
    return row


@pytest.fixture(scope="module")
def playground(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Clusters]:
    """The page's clusters, with vk installed in both; every process gone afterwards."""
    playground = Playground(root=tmp_path_factory.mktemp("reference-playground"))
    try:
        yield Clusters(playground, playground.up(CLUSTERS))
    finally:
        playground.down()


def vkctl(clusters: Clusters, *args: str, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """vkctl as a user of the consumer runs it: KUBECONFIG names the consumer."""
    return subprocess.run(
        [VKCTL, *args],
        env={**os.environ, "KUBECONFIG": str(clusters.kubeconfig(CONSUMER))},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def get_json(clusters: Clusters, cluster: str, *args: str) -> Any:
    """The object, or None when there is none."""
    result = clusters.kubectl(cluster, "get", *args, "-o", "json", check=False)
    if result.returncode != 0:
        assert "NotFound" in result.stderr, result.stderr
        return None
    return json.loads(result.stdout)


def is_ready(node: dict[str, Any] | None) -> bool:
    return node is not None and any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in node.get("status", {}).get("conditions", [])
    )


def ready_node(clusters: Clusters, name: str) -> dict[str, Any]:
    def ready() -> dict[str, Any] | None:
        node = get_json(clusters, CONSUMER, "node", name)
        return node if is_ready(node) else None

    node = wait_until(ready, f"the node {name} Ready", timeout=120)
    assert isinstance(node, dict)
    return node


def accepted_slice(clusters: Clusters, name: str) -> dict[str, Any]:
    def accepted() -> dict[str, Any] | None:
        resource_slice = get_json(clusters, CONSUMER, RSLICES, name, "-n", TENANT)
        conditions = {
            c["type"]: c["status"]
            for c in ((resource_slice or {}).get("status") or {}).get("conditions") or []
        }
        both = conditions == {"Authentication": "Accepted", "Resources": "Accepted"}
        return resource_slice if both else None

    resource_slice = wait_until(accepted, f"the ResourceSlice {name} accepted", timeout=120)
    assert isinstance(resource_slice, dict)
    return resource_slice


def slice_quota(clusters: Clusters, name: str) -> dict[str, Any] | None:
    """The provider's Quota of the consumer's slice `name`."""
    quotas = get_json(
        clusters,
        PROVIDER,
        QUOTAS,
        "-n",
        PROVIDER_TENANT,
        f"--selector=liqo.io/resourceslice-name={name}",
    )
    items: list[dict[str, Any]] = quotas["items"]
    assert len(items) <= 1, [q["metadata"]["name"] for q in items]
    return items[0] if items else None


def granted_everywhere(clusters: Clusters, name: str) -> dict[str, dict[str, str]]:
    """What each layer holds for the slice `name`: the slice's status, the provider's Quota,
    the VirtualNode's quota and the Node's capacity."""
    quota = wait_until(lambda: slice_quota(clusters, name), f"the Quota of {name}")
    # The consumer makes the VirtualNode once the slice is accepted: it may come after the Quota.
    virtual_node = wait_until(
        lambda: get_json(clusters, CONSUMER, VIRTUALNODES, name, "-n", TENANT),
        f"the VirtualNode {name}",
    )
    return {
        "ResourceSlice status.resources": accepted_slice(clusters, name)["status"]["resources"],
        "Quota spec.resources": quota["spec"]["resources"],
        "VirtualNode spec.resourceQuota.hard": virtual_node["spec"]["resourceQuota"]["hard"],
        "Node status.capacity": ready_node(clusters, name)["status"]["capacity"],
    }


def identity_common_name(kubeconfig: bytes) -> str:
    """The user a kubeconfig's client certificate names."""
    [user] = yaml.safe_load(kubeconfig)["users"]
    certificate = x509.load_pem_x509_certificate(
        base64.b64decode(user["user"]["client-certificate-data"])
    )
    [common_name] = certificate.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(common_name.value)


def slice_kubeconfig(clusters: Clusters) -> bytes:
    """The kubeconfig of mypool's identity, as the consumer's controllers wrote it."""

    def written() -> str | None:
        secret = get_json(clusters, CONSUMER, "secret", KUBECONFIG_SECRET, "-n", TENANT)
        return ((secret or {}).get("data") or {}).get("kubeconfig")

    return base64.b64decode(wait_until(written, f"the kubeconfig in {KUBECONFIG_SECRET}"))


@pytest.fixture(scope="module")
def authenticated(playground: Clusters) -> Clusters:
    """The page's "authentication established" and nothing more: tenant namespaces and the
    control-plane identity on both sides, no ResourceSlice."""
    peered = vkctl(
        playground,
        "peer",
        "--remote-kubeconfig",
        str(playground.kubeconfig(PROVIDER)),
        "--create-resource-slice=false",
    )
    assert peered.returncode == 0, peered.stderr
    assert peered.stdout.strip() == "peered"
    assert get_json(playground, CONSUMER, "namespace", TENANT) is not None
    assert get_json(playground, CONSUMER, RSLICES, "-A")["items"] == []
    return playground


def test_the_resourceslice_yaml_gives_the_pages_slice_quota_virtualnode_and_node(
    authenticated: Clusters,
) -> None:
    clusters = authenticated
    applied = clusters.kubectl(
        CONSUMER, "apply", "-f", str(REFERENCE_YAML / "resourceslice_mypool.yaml")
    )
    assert applied.stdout.strip() == "resourceslice.authentication.liqo.io/mypool created"

    accepted_slice(clusters, "mypool")
    page_titles, page_rows = read_table(PAGE_SLICES)
    titles, rows = get_table(clusters, CONSUMER, RSLICES, "-A")
    assert titles == page_titles
    assert [without(r, "AGE") for r in rows] == [without(r, "AGE") for r in page_rows]

    # The provider's Quota: in the consumer's tenant namespace, named after the slice's
    # identity (`mypool-<hash>`, the page's hash being its own consumer's).
    wait_until(lambda: slice_quota(clusters, "mypool"), "the provider's Quota of mypool")
    page_titles, [page_row] = read_table(PAGE_QUOTAS)
    titles, [row] = get_table(clusters, PROVIDER, QUOTAS, "-A")
    assert titles == page_titles
    assert re.fullmatch(r"mypool-[0-9a-f]{12}", row["NAME"])
    assert row["NAME"] == identity_common_name(slice_kubeconfig(clusters))
    assert without(row, "NAME", "AGE") == without(page_row, "NAME", "AGE")

    virtual_node = wait_until(
        lambda: get_json(clusters, CONSUMER, VIRTUALNODES, "mypool", "-n", TENANT),
        "the VirtualNode mypool",
    )
    page_titles, page_rows = read_table(PAGE_VIRTUALNODES_MYPOOL)
    titles, rows = get_table(clusters, CONSUMER, VIRTUALNODES, "-A")
    assert titles == page_titles
    assert [without(r, "AGE") for r in rows] == [without(r, "AGE") for r in page_rows]

    node = ready_node(clusters, "mypool")
    page_titles, page_rows = read_table(PAGE_NODES_MYPOOL)
    titles, rows = get_table(clusters, CONSUMER, "nodes")
    assert titles == page_titles
    assert without(row_named(rows, "mypool"), "AGE", "VERSION") == without(
        row_named(page_rows, "mypool"), "AGE", "VERSION"
    )
    assert virtual_node["spec"]["resourceQuota"]["hard"] == DEFAULT_CLASS
    assert node["status"]["capacity"] == virtual_node["spec"]["resourceQuota"]["hard"]


def test_the_virtualnode_yaml_on_the_existing_resourceslice_gives_the_pages_node(
    authenticated: Clusters,
) -> None:
    clusters = authenticated
    manifest = str(REFERENCE_YAML / "virtualnode_mynode_from_resourceslice.yaml")
    applied = clusters.kubectl(CONSUMER, "apply", "-f", manifest)
    assert applied.stdout.strip() == "virtualnode.offloading.liqo.io/mynode created"

    node = ready_node(clusters, "mynode")
    page_titles, page_rows = read_table(PAGE_VIRTUALNODES_MYNODE)
    titles, rows = get_table(clusters, CONSUMER, VIRTUALNODES, "-A")
    assert titles == page_titles
    assert without(row_named(rows, "mynode"), "AGE") == without(page_rows[0], "AGE")
    page_titles, page_rows = read_table(PAGE_NODES_MYNODE)
    titles, rows = get_table(clusters, CONSUMER, "nodes")
    assert titles == page_titles
    assert without(row_named(rows, "mynode"), "AGE", "VERSION") == without(
        row_named(page_rows, "mynode"), "AGE", "VERSION"
    )
    # The resources of the ResourceSlice: the YAML's quota, which is the slice's VirtualNode's.
    slice_node = get_json(clusters, CONSUMER, VIRTUALNODES, "mypool", "-n", TENANT)
    assert node["status"]["capacity"] == slice_node["spec"]["resourceQuota"]["hard"]
    assert node["status"]["capacity"] == DEFAULT_CLASS

    # "Delete VirtualNode": the process reverted.
    clusters.kubectl(CONSUMER, "delete", "-f", manifest, timeout=180)
    assert get_json(clusters, CONSUMER, VIRTUALNODES, "mynode", "-n", TENANT) is None
    wait_until(
        lambda: get_json(clusters, CONSUMER, "node", "mynode") is None, "the node mynode gone"
    )


def test_the_virtualnode_yaml_on_the_existing_secret_gives_the_pages_node(
    authenticated: Clusters,
) -> None:
    clusters = authenticated
    # The page's Secret, its placeholder filled with the kubeconfig of the slice identity
    # (what the controllers wrote in that very Secret): applying it changes nothing they need.
    kubeconfig = slice_kubeconfig(clusters)
    text = (REFERENCE_YAML / "secret_kubeconfig_resourceslice_mypool.yaml").read_text()
    assert text.count("<base64-encoded-kubeconfig>") == 1
    text = text.replace("<base64-encoded-kubeconfig>", base64.b64encode(kubeconfig).decode())
    applied = clusters.kubectl(CONSUMER, "apply", "-f", "-", input=text)
    assert applied.stdout.strip() == f"secret/{KUBECONFIG_SECRET} configured"
    assert slice_kubeconfig(clusters) == kubeconfig

    manifest = str(REFERENCE_YAML / "virtualnode_mynode_from_secret.yaml")
    applied = clusters.kubectl(CONSUMER, "apply", "-f", manifest)
    assert applied.stdout.strip() == "virtualnode.offloading.liqo.io/mynode created"
    node = ready_node(clusters, "mynode")
    _, rows = get_table(clusters, CONSUMER, "nodes")
    assert without(row_named(rows, "mynode"), "AGE", "VERSION") == {
        "NAME": "mynode",
        "STATUS": "Ready",
        "ROLES": "agent",
    }
    assert node["status"]["capacity"] == FROM_SECRET

    clusters.kubectl(CONSUMER, "delete", "-f", manifest, timeout=180)
    wait_until(
        lambda: get_json(clusters, CONSUMER, "node", "mynode") is None, "the node mynode gone"
    )


def test_a_printed_resourceslice_edited_to_add_a_gpu_gets_exactly_what_it_asks(
    authenticated: Clusters,
) -> None:
    clusters = authenticated
    printed = vkctl(
        clusters, "create", "resourceslice", "gpupool", "--remote-cluster-id", PROVIDER,
        "--cpu", "2", "--memory", "2Gi", "--pods", "10", "-o", "yaml",
    )  # fmt: skip
    assert printed.returncode == 0, printed.stderr
    document = yaml.safe_load(printed.stdout)
    assert document["spec"]["resources"] == {"cpu": "2", "memory": "2Gi", "pods": "10"}
    # The page: "use the -o yaml flag ... and edit the ResourceSlice spec manifest".
    document["spec"]["resources"]["nvidia.com/gpu"] = "1"
    applied = clusters.kubectl(CONSUMER, "apply", "-f", "-", input=yaml.safe_dump(document))
    assert applied.stdout.strip() == "resourceslice.authentication.liqo.io/gpupool created"

    asked = {"cpu": "2", "memory": "2Gi", "pods": "10", "nvidia.com/gpu": "1"}
    granted = granted_everywhere(clusters, "gpupool")
    assert granted == dict.fromkeys(granted, asked), NOT_EXACTLY_ASKED.format(granted=granted)


def test_create_resourceslice_with_cpu_memory_pods_gets_exactly_those(
    authenticated: Clusters,
) -> None:
    clusters = authenticated
    created = vkctl(
        clusters, "create", "resourceslice", "smallpool", "--remote-cluster-id", PROVIDER,
        "--cpu", "1", "--memory", "1Gi", "--pods", "5",
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    assert created.stdout.strip() == (
        f"ResourceSlice {TENANT}/smallpool: Authentication Accepted, Resources Accepted; "
        "node smallpool Ready"
    )
    asked = {"cpu": "1", "memory": "1Gi", "pods": "5"}
    granted = granted_everywhere(clusters, "smallpool")
    assert granted == dict.fromkeys(granted, asked), NOT_EXACTLY_ASKED.format(granted=granted)


def test_deleting_the_resourceslice_reverts_the_process(authenticated: Clusters) -> None:
    clusters = authenticated
    assert slice_quota(clusters, "mypool") is not None
    others = {
        q["metadata"]["name"]
        for q in get_json(clusters, PROVIDER, QUOTAS, "-n", PROVIDER_TENANT)["items"]
        if q["metadata"]["labels"]["liqo.io/resourceslice-name"] != "mypool"
    }

    clusters.kubectl(
        CONSUMER, "delete", "-f", str(REFERENCE_YAML / "resourceslice_mypool.yaml"), timeout=180
    )
    wait_until(
        lambda: get_json(clusters, CONSUMER, VIRTUALNODES, "mypool", "-n", TENANT) is None,
        "the VirtualNode mypool gone",
        timeout=120,
    )
    wait_until(
        lambda: get_json(clusters, CONSUMER, "node", "mypool") is None,
        "the node mypool gone",
        timeout=120,
    )
    wait_until(lambda: slice_quota(clusters, "mypool") is None, "the Quota of mypool gone")
    wait_until(
        lambda: get_json(clusters, CONSUMER, "secret", KUBECONFIG_SECRET, "-n", TENANT) is None,
        f"the Secret {KUBECONFIG_SECRET} gone",
    )
    # The other slices keep theirs.
    left = {
        q["metadata"]["name"]
        for q in get_json(clusters, PROVIDER, QUOTAS, "-n", PROVIDER_TENANT)["items"]
    }
    assert left == others
