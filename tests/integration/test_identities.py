"""The README's table of identities is the truth (issue 19): each row, and nothing else, is
what `kubectl auth can-i --list` shows for that identity, on the playground, in every
namespace the table names and in one it does not name. And a virtual kubelet reads the Secrets
of a namespace only while it is offloaded to its provider."""

from __future__ import annotations

import json
import re
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.test_liqo_compatibility import deployment_on_naples, offloaded_namespace
from tests.integration.test_namespace_offloading import vkctl
from vk.api.constants import resource_slice_user, tenant_group
from vk.controllers.virtualkubelet_rbac import (
    IDENTITY_SELECTOR,
    NODE_NAME_LABEL,
    OFFLOADED_ACCESS_LABEL,
)

CONSUMER, PROVIDER = "venice", "naples"
GROUP = tenant_group(CONSUMER)
README = Path(__file__).resolve().parents[2] / "README.md"
Triple = tuple[str, str, str]  # resource, name ("" for any), verb
# Marks the rows of the chart with `localProcesses` only.
LOCAL_PROCESSES = "*local processes*"
# kube-apiserver's cache of the tokens it authenticated (its TokenSuccessCacheTTL).
TOKEN_CACHE_SECONDS = 10
LINE = re.compile(r"^(\S+)\s+\[(.*?)\]\s+\[(.*?)\]\s+\[(.*?)\]\s*$")


def identity_tables(
    text: str, local_processes: bool = True
) -> dict[str, tuple[str, dict[str, set[Triple]]]]:
    """Heading (up to its colon) -> (its first backticked name, where -> triples), from the
    section "Every identity vk creates", as the chart installs vk with its components as local
    processes (the playground's) or as pods: rows marked *local processes* are the former's
    only."""
    section = text.split("### Every identity vk creates", 1)[1].split("\n## ", 1)[0]
    tables: dict[str, tuple[str, dict[str, set[Triple]]]] = {}
    for block in section.split("\n#### ")[1:]:
        heading, _, body = block.partition("\n")
        title, _, rest = heading.partition(":")
        user = re.findall(r"`([^`]+)`", rest)[0]
        rows: dict[str, set[Triple]] = {}
        for line in body.splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if not line.startswith("| ") or len(cells) != 4 or cells[0] in ("where", "---"):
                continue
            where, resources, names, verbs = cells
            if LOCAL_PROCESSES in where and not local_processes:
                continue
            where = where.replace(LOCAL_PROCESSES, "").strip().strip("`")
            for resource in re.findall(r"`([^`]+)`", resources):
                for name in re.findall(r"`([^`]+)`", names) or [""]:
                    for verb in verbs.split(","):
                        rows.setdefault(where, set()).add((resource, name, verb.strip()))
        tables[title] = (user, rows)
    return tables


def parse_can_i(output: str) -> set[Triple]:
    """`kubectl auth can-i --list` as triples; non-resource URLs are left out (every
    authenticated user may read the ones vk's identities use)."""
    triples: set[Triple] = set()
    for line in output.splitlines()[1:]:
        match = LINE.match(line)
        if not match or match.group(2):
            continue
        resource, _, names, verbs = match.groups()
        for name in names.split() or [""]:
            for verb in verbs.split():
                triples.add((resource, name, verb))
    return triples


def substitute(text: str, values: dict[str, str]) -> str:
    for placeholder, value in values.items():
        text = text.replace(placeholder, value)
    return text


@dataclass
class Offloaded:
    namespace: str
    twin: str


@pytest.fixture
def offloaded(naples_peered: Clusters) -> Iterator[Offloaded]:
    namespace = f"id-{uuid.uuid4().hex[:8]}"
    naples_peered.kubectl(CONSUMER, "create", "namespace", namespace)
    done = vkctl(naples_peered, "offload", "namespace", namespace)
    assert done.returncode == 0, done.stderr
    try:
        yield Offloaded(namespace, f"{namespace}-{CONSUMER}")
    finally:
        vkctl(naples_peered, "unoffload", "namespace", namespace, "--timeout=120s")
        naples_peered.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def can_i(clusters: Clusters, cluster: str, namespace: str, *who: str) -> set[Triple]:
    listed = clusters.kubectl(cluster, "auth", "can-i", "--list", "-n", namespace, *who)
    return parse_can_i(listed.stdout)


def test_every_identity_may_do_what_the_readme_says_and_nothing_else(
    naples_peered: Clusters, offloaded: Offloaded
) -> None:
    clusters = naples_peered
    virtual_node = json.loads(
        clusters.kubectl(
            CONSUMER, "get", "virtualnodes.offloading.liqo.io", PROVIDER,
            "-n", f"liqo-tenant-{PROVIDER}", "-o", "json",
        ).stdout
    )  # fmt: skip
    consumer_side = {
        "<tenant>": f"liqo-tenant-{PROVIDER}",
        "<node>": PROVIDER,
        "<kubeconfig secret>": virtual_node["spec"]["kubeconfigSecretRef"]["name"],
        "<offloaded>": offloaded.namespace,
    }
    provider_side = {
        "<tenant>": f"liqo-tenant-{CONSUMER}",
        "<consumer>": CONSUMER,
        "<twin>": offloaded.twin,
        "<slice>-<hash>": resource_slice_user(CONSUMER, PROVIDER),
    }
    tables = identity_tables(README.read_text())
    # title -> (clusters to look in, placeholder values, --as arguments after the user)
    checked = {
        "Controller manager": ([CONSUMER, PROVIDER], {}, []),
        "Webhook": ([CONSUMER, PROVIDER], {}, []),
        "Virtual kubelet": ([CONSUMER], consumer_side, []),
        "ResourceSlice identity": ([PROVIDER], provider_side, [f"--as-group={GROUP}"]),
        "Control-plane identity": ([PROVIDER], provider_side, []),
    }  # fmt: skip
    assert set(tables) == set(checked), "every identity in the README is checked"
    unnamed = f"unnamed-{uuid.uuid4().hex[:6]}"
    for cluster in (CONSUMER, PROVIDER):
        clusters.kubectl(cluster, "create", "namespace", unnamed)
    try:
        for title, (user, table) in tables.items():
            where_clusters, values, extra = checked[title]
            who = [f"--as={substitute(user, values)}", *extra]
            rows = {
                substitute(where, values): {
                    (r, substitute(name, values), verb) for r, name, verb in triples
                }
                for where, triples in table.items()
            }
            for cluster in where_clusters:
                for namespace in {*rows, unnamed} - {"cluster"}:
                    everyone = can_i(clusters, cluster, namespace, "--as=vk-nobody")
                    shown = can_i(clusters, cluster, namespace, *who) - everyone
                    expected = rows.get("cluster", set()) | rows.get(namespace, set())
                    assert shown == expected, (
                        f"{title} in {cluster}, namespace {namespace}: "
                        f"not in the README {sorted(shown - expected)}, "
                        f"not granted {sorted(expected - shown)}"
                    )
    finally:
        for cluster in (CONSUMER, PROVIDER):
            clusters.kubectl(cluster, "delete", "namespace", unnamed, "--wait=false")


def test_a_virtual_kubelet_reads_a_namespaces_secrets_only_while_it_is_offloaded_there(
    naples_peered: Clusters,
) -> None:
    clusters = naples_peered
    namespace = f"id-{uuid.uuid4().hex[:8]}"
    virtual_kubelet = f"--as=system:serviceaccount:liqo-tenant-{PROVIDER}:vk-{PROVIDER}"

    def may_read() -> bool:
        answer = clusters.kubectl(
            CONSUMER, "auth", "can-i", "list", "secrets", "-n", namespace, virtual_kubelet,
            check=False,
        )  # fmt: skip
        return answer.stdout.strip() == "yes"

    clusters.kubectl(CONSUMER, "create", "namespace", namespace)
    try:
        assert not may_read(), "not offloaded yet"
        kube_system = clusters.kubectl(
            CONSUMER, "auth", "can-i", "get", "secrets", "-n", "kube-system", virtual_kubelet,
            check=False,
        )  # fmt: skip
        assert kube_system.stdout.strip() == "no"
        assert vkctl(clusters, "offload", "namespace", namespace).returncode == 0
        wait_until(may_read, "the virtual kubelet bound in the offloaded namespace", 30)

        # Its binding deleted by someone else: bound again (it stayed gone, before, until the
        # controller manager restarted, and the namespace's objects were reflected no more).
        def bindings() -> set[str]:
            found = clusters.kubectl(
                CONSUMER, "get", "rolebindings", "-n", namespace, "-l", OFFLOADED_ACCESS_LABEL,
                "-o", "jsonpath={.items[*].metadata.uid}",
            )  # fmt: skip
            return set(found.stdout.split())

        deleted = bindings()
        assert deleted
        clusters.kubectl(
            CONSUMER, "delete", "rolebindings", "-n", namespace, "-l", OFFLOADED_ACCESS_LABEL
        )
        wait_until(
            lambda: bindings() - deleted, "its binding made again once deleted by someone", 30
        )
        wait_until(may_read, "the virtual kubelet bound again", 30)
        assert (
            vkctl(clusters, "unoffload", "namespace", namespace, "--timeout=120s").returncode == 0
        )
        wait_until(lambda: not may_read(), "unbound once the namespace is unoffloaded", 30)
    finally:
        clusters.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def test_a_virtual_kubelets_identity_deleted_by_someone_is_made_again_and_it_runs_on(
    naples_peered: Clusters,
) -> None:
    """Its ServiceAccount, roles and bindings, all deleted by someone (they stayed gone until
    the controller manager restarted): made again, and the virtual kubelet, whose token the
    ServiceAccount's deletion voided, runs pods again with a token of the new one."""
    clusters = naples_peered
    selector = f"{IDENTITY_SELECTOR},{NODE_NAME_LABEL}={PROVIDER}"
    where = (
        (f"liqo-tenant-{PROVIDER}", "serviceaccounts,roles,rolebindings"),
        ("kube-node-lease", "roles,rolebindings"),
        ("kube-system", "rolebindings"),
        ("", "clusterroles,clusterrolebindings"),
    )

    def identity() -> dict[str, str]:
        """kind/namespace/name -> UID, of what vk made for naples' virtual kubelet."""
        found: dict[str, str] = {}
        for namespace, kinds in where:
            scope = ["-n", namespace] if namespace else []
            listed = clusters.kubectl(CONSUMER, "get", kinds, *scope, "-l", selector, "-o", "json")
            for item in json.loads(listed.stdout)["items"]:
                metadata = item["metadata"]
                key = f"{item['kind']}/{metadata.get('namespace', '')}/{metadata['name']}"
                found[key] = metadata["uid"]
        return found

    before = identity()
    assert len(before) == 10, sorted(before)  # forge_virtual_kubelet_rbac's, all of them
    for namespace, kinds in where:
        scope = ["-n", namespace] if namespace else []
        clusters.kubectl(CONSUMER, "delete", kinds, *scope, "-l", selector, "--wait=false")

    def made_again() -> bool:
        now = identity()
        return now.keys() == before.keys() and not set(now.values()) & set(before.values())

    wait_until(made_again, "everything made again, with new UIDs", 30)
    # The API server takes a token it accepted as valid for 10 s more (its authentication
    # cache): only past that is a token of the deleted ServiceAccount refused.
    time.sleep(TOKEN_CACHE_SECONDS + 5)
    namespace, twin = offloaded_namespace(clusters, "again")
    try:
        clusters.kubectl(
            CONSUMER, "apply", "-f", "-", input=json.dumps(deployment_on_naples(namespace))
        )
        wait_until(
            lambda: clusters.kubectl(
                CONSUMER, "get", "pods", "-n", namespace, "-l", "app=web",
                "-o", "jsonpath={.items[*].status.phase}",
            ).stdout == "Running",
            "the virtual kubelet running a new pod with its new identity",
            120,
        )  # fmt: skip
        assert clusters.kubectl(PROVIDER, "get", "pods", "-n", twin, "-o", "name").stdout
    finally:
        vkctl(clusters, "unoffload", "namespace", namespace, "--timeout=120s")
        clusters.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def test_a_virtual_kubelet_writes_only_what_is_its_own_nodes(naples_peered: Clusters) -> None:
    """Its rights on pods, Nodes and volumes are cluster-wide; the policy
    vk-virtual-kubelets-own-node keeps it to those of its node, as NodeRestriction keeps a
    kubelet: a pod bound to another node, another Node, a volume not made for its node are
    refused; its own Node is not."""
    clusters = naples_peered
    as_virtual_kubelet = f"--as=system:serviceaccount:liqo-tenant-{PROVIDER}:vk-{PROVIDER}"
    namespace = f"id-{uuid.uuid4().hex[:8]}"
    local_node = "venice-worker-1"

    def as_it(*args: str, input: str | None = None) -> str:
        """What the API server refused of it (the command's stderr), or "" if it did it."""
        done = clusters.kubectl(CONSUMER, *args, as_virtual_kubelet, input=input, check=False)
        return done.stderr if done.returncode != 0 else ""

    clusters.kubectl(CONSUMER, "create", "namespace", namespace)
    stray_volume = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": f"stray-{namespace}"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "hostPath": {"path": "/tmp/stray"},
        },
    }
    try:
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "home", "namespace": namespace},
            "spec": {"nodeName": local_node, "containers": [{"name": "app", "image": "nginx"}]},
        }
        clusters.kubectl(CONSUMER, "create", "-f", "-", input=json.dumps(pod))
        clusters.kubectl(CONSUMER, "create", "-f", "-", input=json.dumps(stray_volume))
        status = '{"status":{"podIP":"10.0.0.9"}}'
        refusals = {
            "a pod's status": as_it(
                "patch", "pod", "home", "-n", namespace, "--subresource=status",
                "--type=merge", "-p", status,
            ),
            "a pod's deletion": as_it("delete", "pod", "home", "-n", namespace, "--wait=false"),
            "another Node": as_it(
                "create", "-f", "-",
                input=json.dumps({"apiVersion": "v1", "kind": "Node",
                                  "metadata": {"name": f"not-{PROVIDER}"}}),
            ),
            "a volume": as_it("delete", "pv", stray_volume["metadata"]["name"], "--wait=false"),
        }  # fmt: skip
        for what, refused in refusals.items():
            assert "vk-virtual-kubelets-own-node" in refused, (what, refused)
        assert (
            f"writes only the pods bound to its node, and {namespace}/home"
            in refusals["a pod's status"]
        )
        pod_now = json.loads(
            clusters.kubectl(CONSUMER, "get", "pod", "home", "-n", namespace, "-o", "json").stdout
        )
        assert pod_now["status"].get("podIP") != "10.0.0.9"
        # Its own Node it still writes.
        assert as_it("annotate", "node", PROVIDER, "vk.test/own=yes") == ""
    finally:
        clusters.kubectl(CONSUMER, "annotate", "node", PROVIDER, "vk.test/own-", check=False)
        clusters.kubectl(
            CONSUMER, "delete", "pv", stray_volume["metadata"]["name"], "--wait=false",
            check=False,
        )  # fmt: skip
        clusters.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")
