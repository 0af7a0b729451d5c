"""A virtual kubelet's home rights: Secrets and ConfigMaps only where its provider is
offloaded, and roles the controller manager can make without escalate (the API server refuses
a role granting a right its maker does not hold) or bind by name."""

from __future__ import annotations

from vk.controllers.installation import (
    forge_controller_manager_cluster_role,
    forge_controller_manager_node_lease_role,
    forge_installation,
)
from vk.controllers.virtualkubelet_rbac import (
    VIRTUAL_KUBELET_OFFLOADED_ROLE,
    VIRTUAL_KUBELET_ROLE,
    VIRTUAL_KUBELET_TENANT_ROLE,
    forge_offloaded_namespace_binding,
    forge_virtual_kubelet_cluster_roles,
    forge_virtual_kubelet_rbac,
    offloaded_namespaces,
)
from vk.controllers.virtualnodes import flag_value
from vk.kube.client import JSON


def covers(held: list[JSON], rule: JSON) -> bool:
    """Whether `held` grants everything `rule` does (RBAC's escalation check, by rule)."""
    names = rule.get("resourceNames") or [None]
    for group in rule.get("apiGroups", []):
        for resource in rule.get("resources", []):
            for verb in rule["verbs"]:
                for name in names:
                    if not any(
                        group in h.get("apiGroups", [])
                        and resource in h.get("resources", [])
                        and verb in h["verbs"]
                        and (not h.get("resourceNames") or name in h["resourceNames"])
                        for h in held
                    ):
                        return False
    return True


def cluster_roles() -> dict[str, JSON]:
    return {role["metadata"]["name"]: role for role in forge_virtual_kubelet_cluster_roles({})}


def test_only_the_offloaded_role_reads_secrets_and_configmaps() -> None:
    roles = cluster_roles()
    for name in (VIRTUAL_KUBELET_ROLE, VIRTUAL_KUBELET_TENANT_ROLE):
        for resource in ("secrets", "configmaps", "serviceaccounts/token"):
            assert not any(resource in r.get("resources", []) for r in roles[name]["rules"])
    offloaded = roles[VIRTUAL_KUBELET_OFFLOADED_ROLE]["rules"]
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
    held = [
        *forge_controller_manager_cluster_role()["rules"],
    ]
    lease_rules = forge_controller_manager_node_lease_role()["rules"]
    bindable = {
        name for rule in held if "bind" in rule["verbs"] for name in rule.get("resourceNames", [])
    }
    assert not any("escalate" in rule["verbs"] for rule in held)
    assert all(rule.get("resourceNames") for rule in held if "bind" in rule["verbs"]), (
        "bind by name only"
    )
    objects = forge_virtual_kubelet_rbac("naples", "liqo-tenant-naples", "kubeconfig-naples")
    objects.append(forge_offloaded_namespace_binding("naples", "liqo-tenant-naples", "demo"))
    for obj in objects:
        namespace = obj["metadata"].get("namespace")
        if obj["kind"] in ("Role", "ClusterRole"):
            rules = held + (lease_rules if namespace == "kube-node-lease" else [])
            for rule in obj["rules"]:
                if "nonResourceURLs" not in rule:
                    assert covers(rules, rule), (obj["metadata"]["name"], rule)
        if obj["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            ref = obj["roleRef"]["name"]
            made_here = any(
                o["kind"] == obj["roleRef"]["kind"] and o["metadata"]["name"] == ref
                for o in objects
            )
            assert made_here or ref in bindable, ref


def test_the_shipped_roles_are_installed() -> None:
    installed = {
        d["metadata"]["name"]
        for d in forge_installation("venice", {})
        if d["kind"] == "ClusterRole"
    }
    assert set(cluster_roles()) <= installed


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
