"""API Priority and Fairness for peers, on the playground's real API servers: which FlowSchema
and priority level took a request is what the API server says in its response headers
(`X-Kubernetes-PF-FlowSchema-UID`, `-PriorityLevel-UID`), read through the real kubectl.

On naples (provider), venice's identities wait in `vk-peers`; on venice (consumer), its
virtual kubelet does; nobody else does on either, and a Tenant names its own consumer's
identities only, while it lasts."""

from __future__ import annotations

import json
import re
import subprocess
import uuid
from pathlib import Path

import yaml

from tests.conftest import Clusters
from tests.integration.kubeconfigs import token_kubeconfig
from tests.integration.polling import wait_until
from tests.integration.test_peering import get_json
from tests.integration.test_vkctl_resources import vkctl
from vk.api.constants import CONTROLLER_MANAGER, VK_NAMESPACE, tenant_group
from vk.cli.peering import forge_tenant, forge_tenant_namespace
from vk.controllers.peer_flowschemas import (
    PEERS_PRIORITY_LEVEL,
    TENANTS_FLOW_SCHEMA,
    VIRTUAL_KUBELETS_FLOW_SCHEMA,
    forge_flow_schema_rules,
)

CONSUMER, PROVIDER = "venice", "naples"
TENANT = f"liqo-tenant-{PROVIDER}"  # the consumer's, where its virtual kubelet runs
CONTROLLER_MANAGER_USER = f"system:serviceaccount:{VK_NAMESPACE}:{CONTROLLER_MANAGER}"


def uid(clusters: Clusters, cluster: str, kind: str, name: str) -> str:
    return str(get_json(clusters, cluster, kind, name)["metadata"]["uid"])


def taken_by(kubeconfig: Path) -> tuple[str, str]:
    """The UIDs of the FlowSchema and the priority level that took a request made with
    `kubeconfig` (kubectl prints the response's headers at -v=8)."""
    done = subprocess.run(
        ["kubectl", f"--kubeconfig={kubeconfig}", "get", "--raw", "/api", "-v=8"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    headers = dict(
        re.findall(r"X-Kubernetes-Pf-(Flowschema|Prioritylevel)-Uid: (\S+)", done.stderr)
    )
    return headers["Flowschema"], headers["Prioritylevel"]


def service_account_kubeconfig(
    clusters: Clusters, cluster: str, namespace: str, account: str, path: Path
) -> Path:
    """A kubeconfig of the cluster's API server for a ServiceAccount's token, and no other
    credential."""
    admin = yaml.safe_load(Path(clusters.kubeconfig(cluster)).read_text())
    token = clusters.kubectl(
        cluster, "create", "token", account, "-n", namespace, "--duration=10m"
    ).stdout.strip()
    path.write_text(json.dumps(token_kubeconfig(admin, token)))
    return path


def identity_kubeconfig(clusters: Clusters, path: Path, *extra: str) -> Path:
    """One of the consumer's identities on the provider (`vkctl get kubeconfig`)."""
    printed = vkctl(clusters, "get", "kubeconfig", f"--remote-cluster-id={PROVIDER}", *extra)
    assert printed.returncode == 0, printed.stderr
    path.write_text(printed.stdout)
    return path


def subjects(clusters: Clusters, cluster: str, flow_schema: str) -> list[dict[str, object]]:
    rules = get_json(clusters, cluster, "flowschema", flow_schema)["spec"].get("rules") or []
    return [subject for rule in rules for subject in rule["subjects"]]


def test_each_peers_identities_wait_in_vk_peers_and_no_one_else_does(
    naples_peered: Clusters, tmp_path: Path
) -> None:
    clusters = naples_peered
    level = {
        c: uid(clusters, c, "prioritylevelconfiguration", PEERS_PRIORITY_LEVEL)
        for c in (CONSUMER, PROVIDER)
    }
    tenants = uid(clusters, PROVIDER, "flowschema", TENANTS_FLOW_SCHEMA)
    virtual_kubelets = uid(clusters, CONSUMER, "flowschema", VIRTUAL_KUBELETS_FLOW_SCHEMA)
    slice_name = get_json(
        clusters, CONSUMER, "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT
    )["metadata"]["labels"]["liqo.io/resourceslice-name"]

    # On the provider: the consumer's control-plane identity and its slice's identity.
    control_plane = identity_kubeconfig(clusters, tmp_path / "control-plane")
    resource_slice = identity_kubeconfig(
        clusters, tmp_path / "slice", f"--resource-slice-name={slice_name}"
    )
    assert taken_by(control_plane) == (tenants, level[PROVIDER])
    assert taken_by(resource_slice) == (tenants, level[PROVIDER])
    # On the consumer: its virtual kubelet.
    virtual_kubelet = service_account_kubeconfig(
        clusters, CONSUMER, TENANT, f"vk-{PROVIDER}", tmp_path / "virtual-kubelet"
    )
    assert taken_by(virtual_kubelet) == (virtual_kubelets, level[CONSUMER])
    # A workload of the tenant namespace, and one of the provider: their cluster's own.
    for cluster, namespace in ((CONSUMER, TENANT), (PROVIDER, "default")):
        other = service_account_kubeconfig(
            clusters, cluster, namespace, "default", tmp_path / "other"
        )
        flow_schema, priority_level = taken_by(other)
        assert priority_level != level[cluster], (cluster, namespace)
        assert flow_schema not in (tenants, virtual_kubelets), (cluster, namespace)


def test_a_peer_may_not_change_the_flowschemas_nor_the_controller_manager_any_other(
    naples_peered: Clusters, tmp_path: Path
) -> None:
    """The consumer's identity on the provider cannot take itself out of `vk-peers`; the
    controller manager cannot make a FlowSchema (one could exempt anyone) or touch the
    cluster's own."""
    clusters = naples_peered
    control_plane = identity_kubeconfig(clusters, tmp_path / "control-plane")
    patched = subprocess.run(
        ["kubectl", f"--kubeconfig={control_plane}", "patch", "flowschema", TENANTS_FLOW_SCHEMA,
         "--type=merge", "-p", '{"spec": {"priorityLevelConfiguration": {"name": "exempt"}}}'],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert patched.returncode != 0
    assert "forbidden" in patched.stderr.lower(), patched.stderr
    for verb, what in (
        ("create", "flowschemas.flowcontrol.apiserver.k8s.io"),
        ("patch", "flowschemas.flowcontrol.apiserver.k8s.io/global-default"),
        ("patch", "flowschemas.flowcontrol.apiserver.k8s.io/exempt"),
        ("patch", "prioritylevelconfigurations.flowcontrol.apiserver.k8s.io/vk-peers"),
        ("patch", f"flowschemas.flowcontrol.apiserver.k8s.io/{TENANTS_FLOW_SCHEMA}"),
    ):
        answer = clusters.kubectl(
            PROVIDER, "auth", "can-i", verb, what, f"--as={CONTROLLER_MANAGER_USER}", check=False
        ).stdout.strip()
        expected = "yes" if what.endswith(TENANTS_FLOW_SCHEMA) else "no"
        assert answer == expected, (verb, what, answer)


def test_a_tenant_names_its_consumer_while_it_lasts_and_a_misplaced_one_no_one(
    naples_peered: Clusters,
) -> None:
    """A Tenant made as `vkctl peer` makes it, and one in another consumer's tenant namespace;
    then both deleted. An administrator's edit of the rules is undone, and `helm upgrade` of
    vk's chart (`vkctl playground up` runs it) leaves them as they are."""
    clusters = naples_peered
    ghost = f"ghost{uuid.uuid4().hex[:6]}"
    elsewhere = f"elsewhere{uuid.uuid4().hex[:6]}"
    intruder = f"intruder{uuid.uuid4().hex[:6]}"
    group = {"kind": "Group", "group": {"name": tenant_group(ghost)}}
    for cluster_id in (ghost, elsewhere):
        namespace = forge_tenant_namespace(cluster_id, str(uuid.uuid4()))
        clusters.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(namespace))
    misplaced = forge_tenant(intruder)  # in another consumer's tenant namespace
    misplaced["metadata"]["namespace"] = f"liqo-tenant-{elsewhere}"
    try:
        clusters.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(forge_tenant(ghost)))
        clusters.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(misplaced))
        wait_until(
            lambda: group in subjects(clusters, PROVIDER, TENANTS_FLOW_SCHEMA),
            f"{tenant_group(ghost)} among {TENANTS_FLOW_SCHEMA}'s subjects",
            explain=lambda: str(subjects(clusters, PROVIDER, TENANTS_FLOW_SCHEMA)),
        )
        named = json.dumps(subjects(clusters, PROVIDER, TENANTS_FLOW_SCHEMA))
        assert named.count(ghost) == 2, named  # its user and its group, once
        assert intruder not in named
        assert tenant_group(CONSUMER) in named

        clusters.kubectl(
            PROVIDER, "patch", "flowschema", TENANTS_FLOW_SCHEMA, "--type=merge",
            "-p", '{"spec": {"rules": null}}',
        )  # fmt: skip
        wait_until(
            lambda: group in subjects(clusters, PROVIDER, TENANTS_FLOW_SCHEMA),
            "the rules written again after an edit",
        )
        generation = get_json(clusters, PROVIDER, "flowschema", TENANTS_FLOW_SCHEMA)["metadata"][
            "generation"
        ]
        clusters.playground.up()
        after = get_json(clusters, PROVIDER, "flowschema", TENANTS_FLOW_SCHEMA)
        assert after["metadata"]["generation"] == generation, "helm upgrade changed the spec"
        assert group in subjects(clusters, PROVIDER, TENANTS_FLOW_SCHEMA)
    finally:
        for tenant in (forge_tenant(ghost), misplaced):
            clusters.kubectl(
                PROVIDER, "delete", "tenants.authentication.liqo.io", tenant["metadata"]["name"],
                "-n", tenant["metadata"]["namespace"], "--ignore-not-found", "--wait=false",
            )  # fmt: skip
        for cluster_id in (ghost, elsewhere):
            clusters.kubectl(
                PROVIDER, "delete", "namespace", f"liqo-tenant-{cluster_id}",
                "--ignore-not-found", "--wait=false",
            )  # fmt: skip
    wait_until(
        lambda: ghost not in json.dumps(subjects(clusters, PROVIDER, TENANTS_FLOW_SCHEMA)),
        f"{ghost} gone from {TENANTS_FLOW_SCHEMA}'s subjects with its Tenant",
        timeout=60,
        explain=lambda: str(subjects(clusters, PROVIDER, TENANTS_FLOW_SCHEMA)),
    )
    assert tenant_group(CONSUMER) in json.dumps(subjects(clusters, PROVIDER, TENANTS_FLOW_SCHEMA))


def patched_as_controller_manager(
    clusters: Clusters, cluster: str, flow_schema: str, spec: dict[str, object]
) -> subprocess.CompletedProcess[str]:
    """A merge patch of the FlowSchema's spec with the controller manager's identity, on a
    server-side dry run: admission judges it, nothing is kept."""
    patch = json.dumps({"spec": spec})
    return clusters.kubectl(
        cluster, "patch", "flowschema", flow_schema, "--type=merge", "-p", patch,
        "--dry-run=server", f"--as={CONTROLLER_MANAGER_USER}", check=False,
    )  # fmt: skip


def rules_of(*subjects: dict[str, object]) -> dict[str, object]:
    return {"rules": forge_flow_schema_rules(list(subjects))}


def test_the_controller_managers_patch_right_writes_a_peers_rules_and_nothing_else(
    naples_peered: Clusters,
) -> None:
    """Its token stolen: the API server (vk's ValidatingAdmissionPolicy) refuses it the
    FlowSchemas' level (`exempt`), precedence and distinguisher, and subjects that are no
    peer's; the rules the controller writes pass."""
    clusters = naples_peered
    tenant = {"kind": "Group", "group": {"name": tenant_group("ghost")}}
    account = {"kind": "ServiceAccount", "serviceAccount": {"namespace": TENANT, "name": "vk-x"}}
    every_account = {"kind": "ServiceAccount", "serviceAccount": {"namespace": TENANT, "name": "*"}}
    exempt = {"priorityLevelConfiguration": {"name": "exempt"}}
    attempts = {
        "exempt": (PROVIDER, TENANTS_FLOW_SCHEMA, exempt),
        "precedence": (PROVIDER, TENANTS_FLOW_SCHEMA, {"matchingPrecedence": 2}),
        "distinguisher": (CONSUMER, VIRTUAL_KUBELETS_FLOW_SCHEMA, {"distinguisherMethod": None}),
        "system:masters": (
            PROVIDER, TENANTS_FLOW_SCHEMA,
            rules_of(tenant, {"kind": "Group", "group": {"name": "system:masters"}}),
        ),
        "every user": (
            PROVIDER, TENANTS_FLOW_SCHEMA, rules_of({"kind": "User", "user": {"name": "*"}})
        ),
        "every ServiceAccount of a tenant namespace": (
            CONSUMER, VIRTUAL_KUBELETS_FLOW_SCHEMA,
            rules_of(every_account),
        ),
        "a controller of the cluster's own": (
            CONSUMER, VIRTUAL_KUBELETS_FLOW_SCHEMA,
            rules_of(account, {"kind": "ServiceAccount",
                               "serviceAccount": {"namespace": "kube-system", "name": "vk-x"}}),
        ),
    }  # fmt: skip
    for attempt, (cluster, flow_schema, spec) in attempts.items():
        refused = patched_as_controller_manager(clusters, cluster, flow_schema, spec)
        assert refused.returncode != 0, f"{attempt}: admitted"
        assert "vk-peer-flowschemas" in refused.stderr, (attempt, refused.stderr)
    for cluster, flow_schema, subject in (
        (PROVIDER, TENANTS_FLOW_SCHEMA, tenant),
        (CONSUMER, VIRTUAL_KUBELETS_FLOW_SCHEMA, account),
    ):
        admitted = patched_as_controller_manager(clusters, cluster, flow_schema, rules_of(subject))
        assert admitted.returncode == 0, (flow_schema, admitted.stderr)
    # An administrator's own edit is not the policy's to judge.
    admitted = clusters.kubectl(
        PROVIDER, "patch", "flowschema", TENANTS_FLOW_SCHEMA, "--type=merge", "--dry-run=server",
        "-p", json.dumps({"spec": {"matchingPrecedence": 1001}}), check=False,
    )  # fmt: skip
    assert admitted.returncode == 0, admitted.stderr
