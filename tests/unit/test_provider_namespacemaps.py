"""Twin namespaces and the tenant's rights in them, as the provider makes them."""

from __future__ import annotations

from tests.plain_manifests import (
    CONTROLLER_MANAGER_ACCOUNT,
    granted_rules,
    installed,
    may_bind,
    plain_manifests,
)
from vk.controllers.provider_namespacemaps import (
    DEFAULT_TWIN_NAMESPACE_QUOTA,
    MAX_TOKEN_SECRETS,
    RESERVED_NAMESPACES,
    TENANT_POD_SECURITY_LABEL,
    VIRTUAL_KUBELET_REMOTE_ROLE,
    ProviderNamespaceMaps,
    forge_tenant_binding,
    forge_twin_namespace,
    forge_twin_resource_quota,
    granted_pods,
    managed_by,
    reserved_by,
    tenant_pod_security,
    twin_quota_hard,
)
from vk.kube.informer import ADDED, DELETED, MODIFIED


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
    # The chart's role, which the controller manager may bind by name.
    held = granted_rules(plain_manifests(), CONTROLLER_MANAGER_ACCOUNT, "shop-venice")
    assert may_bind(held, binding["roleRef"])


def test_the_remote_role_grants_shadow_pods_and_reading_pods_never_writing_them() -> None:
    rules = installed("ClusterRole", VIRTUAL_KUBELET_REMOTE_ROLE)["rules"]
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


def test_names_the_provider_reserves_are_never_a_twin_namespace() -> None:
    reserved = (*RESERVED_NAMESPACES, "team-*", "billing")
    for name, pattern in (
        ("default", "default"),
        ("kube-system", "kube-*"),
        ("kube-anything", "kube-*"),
        ("vk", "vk"),
        ("liqo-tenant-florence", "liqo-tenant-*"),
        ("team-a", "team-*"),
        ("billing", "billing"),
    ):
        assert reserved_by(name, reserved) == pattern, name
    for name in ("shop", "kubeflow", "defaults", "billing-eu", "vk-demo"):
        assert reserved_by(name, reserved) is None, name


def test_a_tenant_namespace_may_name_its_consumers_level_and_nothing_else() -> None:
    def tenant(**labels: str) -> dict[str, object]:
        return {"metadata": {"name": "liqo-tenant-venice", "labels": labels}}

    assert tenant_pod_security(None, "baseline") == ("baseline", None)
    assert tenant_pod_security(tenant(), "baseline") == ("baseline", None)
    chosen = tenant(**{TENANT_POD_SECURITY_LABEL: "restricted"})
    assert tenant_pod_security(chosen, "baseline") == ("restricted", None)
    level, problem = tenant_pod_security(tenant(**{TENANT_POD_SECURITY_LABEL: "root"}), "baseline")
    assert level == "baseline"
    assert problem is not None
    assert "names no Pod Security level" in problem


def test_a_twin_namespace_is_bounded_by_a_core_resource_quota() -> None:
    quota = forge_twin_resource_quota("shop-venice", DEFAULT_TWIN_NAMESPACE_QUOTA)
    assert quota["kind"] == "ResourceQuota"
    assert quota["metadata"] == {"name": "vk-tenant-objects", "namespace": "shop-venice"}
    hard = quota["spec"]["hard"]
    assert hard["services.nodeports"] == hard["services.loadbalancers"] == "0"
    for bounded in ("configmaps", "secrets", "services", "persistentvolumeclaims"):
        assert int(hard[bounded]) > 0
    assert "requests.storage" in hard


def quota(namespace: str, pods: object | None) -> dict[str, object]:
    resources = {"cpu": "4"} if pods is None else {"cpu": "4", "pods": pods}
    return {
        "metadata": {"name": "slice", "namespace": namespace},
        "spec": {"user": "venice", "resources": resources},
    }


def test_the_pods_granted_are_summed_over_the_tenants_quotas_only() -> None:
    quotas = [
        quota("liqo-tenant-venice", "110"),
        quota("liqo-tenant-venice", "2k"),
        quota("liqo-tenant-venice", None),  # no pod count: adds none
        quota("liqo-tenant-venice", "many"),  # does not parse: adds none
        quota("liqo-tenant-venice", "-5"),  # negative: adds none
        quota("liqo-tenant-florence", "500"),  # another consumer's
    ]
    assert granted_pods(quotas, "liqo-tenant-venice") == 2110
    assert granted_pods(quotas, "liqo-tenant-florence") == 500
    assert granted_pods(quotas, "liqo-tenant-rome") == 0


def test_secrets_grow_by_one_token_secret_per_pod_granted_up_to_a_bound() -> None:
    configured = {"secrets": "2000", "configmaps": "500"}
    assert twin_quota_hard(configured, 0) == configured
    assert twin_quota_hard(configured, 3000) == {"secrets": "5000", "configmaps": "500"}
    assert twin_quota_hard({"secrets": "2k"}, 10) == {"secrets": "2010"}
    # A consumer granted an absurd pod count does not get unbounded Secrets.
    assert twin_quota_hard(configured, 10**15) == {
        "secrets": str(2000 + MAX_TOKEN_SECRETS),
        "configmaps": "500",
    }
    # No `secrets` limit configured: none is added; one that does not parse is left to the
    # API server to refuse.
    assert twin_quota_hard({"configmaps": "500"}, 3000) == {"configmaps": "500"}
    assert twin_quota_hard({"secrets": "lots"}, 3000) == {"secrets": "lots"}
    assert configured == {"secrets": "2000", "configmaps": "500"}  # not changed in place


def test_the_twins_quota_follows_a_quotas_pods_not_its_ledger() -> None:
    """Every admission writes the Quota's status (its ledger): only a change of the pods it
    grants, or a Quota made or gone, looks at the twin namespaces again."""
    granted = quota("liqo-tenant-venice", "110")
    ledger_written = {**granted, "status": {"reservations": {"ns/a": {}}}}
    more = quota("liqo-tenant-venice", "200")
    elsewhere = quota("liqo-tenant-florence", "200")

    def looks_again(event: str, obj: dict[str, object], old: dict[str, object] | None) -> bool:
        controller = ProviderNamespaceMaps(object())  # type: ignore[arg-type]
        controller.maps.store.upsert(
            {"metadata": {"name": "venice", "namespace": "liqo-tenant-venice", "uid": "m"}}
        )
        controller._on_quota(event, obj, old)
        return len(controller.controller.queue) == 1

    assert not looks_again(MODIFIED, ledger_written, granted)
    assert looks_again(MODIFIED, more, granted)
    assert looks_again(ADDED, granted, None)
    assert looks_again(DELETED, granted, granted)
    assert not looks_again(ADDED, elsewhere, None)  # another consumer's: no map of its own
