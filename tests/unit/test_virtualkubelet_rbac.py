"""A virtual kubelet's home rights: Secrets and ConfigMaps only where its provider is
offloaded, and roles the controller manager can make without escalate (the API server refuses
a role granting a right its maker does not hold) or bind by name, with the rights the chart
gives it (deploy/vk.yaml)."""

from __future__ import annotations

from tests.plain_manifests import (
    CONTROLLER_MANAGER_ACCOUNT,
    covers,
    granted_rules,
    installed,
    may_bind,
    plain_manifests,
)
from vk.controllers.virtualkubelet_rbac import (
    AUTHENTICATION_READER_ROLE,
    VIRTUAL_KUBELET_OFFLOADED_ROLE,
    VIRTUAL_KUBELET_ROLE,
    VIRTUAL_KUBELET_TENANT_ROLE,
    forge_offloaded_namespace_binding,
    forge_virtual_kubelet_rbac,
    offloaded_namespaces,
)
from vk.controllers.virtualnodes import flag_value
from vk.kube.client import JSON

SHIPPED_ROLES = (VIRTUAL_KUBELET_ROLE, VIRTUAL_KUBELET_TENANT_ROLE, VIRTUAL_KUBELET_OFFLOADED_ROLE)


def shipped_rules(name: str) -> list[JSON]:
    """The rules of one of the ClusterRoles the chart ships for virtual kubelets."""
    rules: list[JSON] = installed("ClusterRole", name)["rules"]
    return rules


def test_only_the_offloaded_role_reads_secrets_and_configmaps() -> None:
    for name in (VIRTUAL_KUBELET_ROLE, VIRTUAL_KUBELET_TENANT_ROLE):
        for resource in ("secrets", "configmaps", "serviceaccounts/token"):
            assert not any(resource in r.get("resources", []) for r in shipped_rules(name))
    offloaded = shipped_rules(VIRTUAL_KUBELET_OFFLOADED_ROLE)
    for resource in ("secrets", "configmaps"):
        assert covers(offloaded, {"apiGroups": [""], "resources": [resource], "verbs": ["list"]})


def test_the_per_node_roles_name_its_own_objects_and_its_own_secret() -> None:
    objects = forge_virtual_kubelet_rbac("naples", "liqo-tenant-naples", "kubeconfig-naples")
    roles = [o for o in objects if o["kind"] in ("Role", "ClusterRole")]
    for role in roles:
        for rule in role["rules"]:
            named = "create" in rule["verbs"] and rule["resources"] == ["leases"]
            assert rule.get("resourceNames") or named, rule
    [tenant] = [r for r in roles if r["metadata"].get("namespace") == "liqo-tenant-naples"]
    [secrets] = [r for r in tenant["rules"] if r["resources"] == ["secrets"]]
    assert secrets["resourceNames"] == ["kubeconfig-naples"]


def test_the_controller_manager_holds_every_right_it_grants_or_may_bind_the_role() -> None:
    documents = plain_manifests()
    cluster_wide = granted_rules(documents, CONTROLLER_MANAGER_ACCOUNT)
    assert not any("escalate" in rule["verbs"] for rule in cluster_wide)
    assert all(rule.get("resourceNames") for rule in cluster_wide if "bind" in rule["verbs"]), (
        "bind by name only"
    )
    for role in (*SHIPPED_ROLES, AUTHENTICATION_READER_ROLE):
        kind = "Role" if role == AUTHENTICATION_READER_ROLE else "ClusterRole"
        assert may_bind(cluster_wide, {"kind": kind, "name": role}), role
    objects = forge_virtual_kubelet_rbac("naples", "liqo-tenant-naples", "kubeconfig-naples")
    objects.append(forge_offloaded_namespace_binding("naples", "liqo-tenant-naples", "demo"))
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        held = granted_rules(documents, CONTROLLER_MANAGER_ACCOUNT, namespace)
        if obj["kind"] in ("Role", "ClusterRole"):
            for rule in obj["rules"]:
                if "nonResourceURLs" not in rule:
                    assert covers(held, rule), (obj["metadata"]["name"], rule)
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            ref = obj["roleRef"]
            made_here = any(
                o["kind"] == ref["kind"] and o["metadata"]["name"] == ref["name"] for o in objects
            )
            assert made_here or may_bind(held, ref), ref["name"]


def test_the_roles_bound_by_name_are_the_charts() -> None:
    for name in SHIPPED_ROLES:
        assert shipped_rules(name), name


def test_offloaded_namespaces_are_this_clusters_own_mapping_never_the_providers_status() -> None:
    namespace_map = {
        "spec": {"desiredMapping": {"demo": "demo-venice"}},
        "status": {
            "currentMapping": {"kube-system": {"remoteNamespace": "loot", "phase": "Accepted"}}
        },
    }
    assert offloaded_namespaces([namespace_map, {"spec": {}}]) == {"demo"}


def test_the_kubeconfig_secret_is_the_last_flag_given() -> None:
    args = ("--foreign-kubeconfig-secret-name=a", "--x=1", "--foreign-kubeconfig-secret-name=b")
    assert flag_value(args, "--foreign-kubeconfig-secret-name") == "b"
    assert flag_value(("--x=1",), "--foreign-kubeconfig-secret-name") == ""
