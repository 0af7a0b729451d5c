"""Twin namespaces and the tenant's rights in them, as the provider makes them."""

from __future__ import annotations

from vk.controllers.provider_namespacemaps import (
    VIRTUAL_KUBELET_REMOTE_ROLE,
    forge_tenant_binding,
    forge_twin_namespace,
    forge_virtual_kubelet_remote_role,
    managed_by,
)


def test_a_twin_namespace_says_whose_it_is() -> None:
    twin = forge_twin_namespace("shop-venice", "venice", "liqo-tenant-venice/naples", "shop")
    assert twin["metadata"]["labels"] == {"liqo.io/remote-cluster-id": "venice"}
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


def test_the_remote_role_grants_what_the_kubelet_api_needs_and_nothing_cluster_wide() -> None:
    rules = forge_virtual_kubelet_remote_role()["rules"]
    granted = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    for needed in [
        ("pods", "create"),
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
