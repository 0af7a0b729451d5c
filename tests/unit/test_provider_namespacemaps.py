"""Twin namespaces and the tenant's rights in them, as the provider makes them."""

from __future__ import annotations

from vk.controllers.provider_namespacemaps import (
    VIRTUAL_KUBELET_REMOTE_ROLE,
    forge_tenant_binding,
    forge_twin_namespace,
    forge_virtual_kubelet_remote_role,
    managed_by,
)


def test_a_twin_namespace_says_whose_it_is_and_the_pod_security_it_enforces() -> None:
    twin = forge_twin_namespace("shop-venice", "venice", "liqo-tenant-venice/naples", "shop")
    assert twin["metadata"]["labels"] == {
        "liqo.io/remote-cluster-id": "venice",
        "pod-security.kubernetes.io/enforce": "baseline",
        "pod-security.kubernetes.io/enforce-version": "latest",
        "pod-security.kubernetes.io/warn": "baseline",
        "pod-security.kubernetes.io/warn-version": "latest",
    }
    strict = forge_twin_namespace("s", "venice", "liqo-tenant-venice/naples", "s", "restricted")
    assert strict["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert managed_by(twin) == "liqo-tenant-venice/naples"
    assert managed_by({"metadata": {"name": "someone-elses"}}) is None
    assert managed_by(None) is None


def test_the_consumers_slice_identities_are_bound_in_the_twin_only() -> None:
    binding = forge_tenant_binding("shop-venice", "venice")
    assert binding["kind"] == "RoleBinding"
    assert binding["metadata"]["namespace"] == "shop-venice"
    assert binding["roleRef"]["name"] == VIRTUAL_KUBELET_REMOTE_ROLE
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "vk-tenant:venice"}
    ]


def test_the_remote_role_grants_shadow_pods_and_reading_pods_never_writing_them() -> None:
    rules = forge_virtual_kubelet_remote_role()["rules"]
    granted = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    for verb in ("create", "update", "patch", "delete", "get", "list", "watch"):
        assert ("shadowpods", verb) in granted
    assert {v for r, v in granted if r == "pods"} == {"get", "list", "watch"}
    assert not any(r in ("pods/ephemeralcontainers", "pods/status", "pods/eviction") and v != "get"
                   for r, v in granted)  # fmt: skip
    for needed in [
        ("pods/log", "get"),
        ("pods/exec", "create"),
        ("pods/attach", "create"),
        ("pods/portforward", "create"),
        ("pods", "list"),
    ]:
        assert needed in granted, needed
    assert not any(
        r in ("namespaces", "nodes", "quotas", "certificatesigningrequests") for r, _ in granted
    )
