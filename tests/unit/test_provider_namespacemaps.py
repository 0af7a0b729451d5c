"""Twin namespaces and the tenant's rights in them, as the provider makes them: the forges, and
the controller over hand-filled caches and a fake API server."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pytest

from tests.plain_manifests import (
    CONTROLLER_MANAGER_ACCOUNT,
    granted_rules,
    installed,
    may_bind,
    plain_manifests,
)
from vk.api.constants import (
    CREATOR_USER_LABEL,
    REMOTE_CLUSTER_ID_LABEL,
    TENANT_MAX_TWIN_NAMESPACES_LABEL,
    consumer_of_namespace,
    tenant_limit,
    tenant_of_namespace,
)
from vk.api.usage import creator_label_value
from vk.controllers.provider_namespacemaps import (
    DEFAULT_MAX_TWIN_NAMESPACES,
    DEFAULT_TWIN_NAMESPACE_QUOTA,
    FINALIZER,
    MAX_API_MESSAGE,
    MAX_TOKEN_SECRETS,
    REFUSED_RETRY,
    RESERVED_NAMESPACES,
    RETRY,
    TENANT_POD_SECURITY_LABEL,
    TWIN_ROLES,
    VIRTUAL_KUBELET_DRAINING_ROLE,
    VIRTUAL_KUBELET_REMOTE_ROLE,
    ProviderNamespaceMaps,
    TwinUsers,
    binding_users,
    default_name_of_another,
    forge_tenant_binding,
    forge_twin_namespace,
    forge_twin_resource_quota,
    granted_pods,
    managed_by,
    quota_users,
    refuses_entry,
    reserved_by,
    tenant_pod_security,
    twin_binding_path,
    twin_quota_hard,
    users_bound,
)
from vk.kube.client import JSON, AlreadyExists, ApiError, NotFound
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
    """By user, those its Quotas name: not by its tenant group, which every certificate ever
    signed for the consumer carries, its deleted slices' too."""
    users = quota_users(
        [
            {"metadata": {"namespace": "liqo-tenant-venice"}, "spec": {"user": "pool-1a2b"}},
            {"metadata": {"namespace": "liqo-tenant-venice"}, "spec": {"user": "naples-3c4d"}},
            {"metadata": {"namespace": "liqo-tenant-venice"}, "spec": {"user": ""}},
            {"metadata": {"namespace": "liqo-tenant-venice"}, "spec": {"user": ["not", "one"]}},
            {"metadata": {"namespace": "liqo-tenant-florence"}, "spec": {"user": "other-5e6f"}},
        ],
        "liqo-tenant-venice",
    )
    assert users == ["pool-1a2b", "naples-3c4d"]
    binding = forge_tenant_binding("shop-venice", users)
    assert binding["kind"] == "RoleBinding"
    assert binding["metadata"]["namespace"] == "shop-venice"
    assert binding["roleRef"]["name"] == VIRTUAL_KUBELET_REMOTE_ROLE
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "naples-3c4d"},
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "pool-1a2b"},
    ]
    assert forge_tenant_binding("shop-venice", [])["subjects"] == []  # no slice answered
    # The chart's roles, which the controller manager may bind by name.
    held = granted_rules(plain_manifests(), CONTROLLER_MANAGER_ACCOUNT, "shop-venice")
    assert may_bind(held, binding["roleRef"])
    draining = forge_tenant_binding("shop-venice", users, VIRTUAL_KUBELET_DRAINING_ROLE)
    assert draining["metadata"]["name"] == draining["roleRef"]["name"]
    assert may_bind(held, draining["roleRef"])


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


def test_a_draining_identity_may_only_delete_and_follow_its_pods() -> None:
    """What a slice's kubeconfig is worth once its slice is deleted, until its pods are gone:
    no Secret (the pods' tokens), no exec, no write but deleting the consumer's own ShadowPods."""
    rules = installed("ClusterRole", VIRTUAL_KUBELET_DRAINING_ROLE)["rules"]
    granted = {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]}
    assert granted == {
        *((kind, verb) for kind in ("shadowpods", "shadowendpointslices")
          for verb in ("get", "list", "watch", "delete")),
        ("pods", "get"), ("pods", "list"), ("pods", "watch"),
    }  # fmt: skip


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
    grants or of its user, or a Quota made or gone, looks at the twin namespaces again."""
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
    # Another identity: who has the consumer's rights in its twins changes.
    assert looks_again(MODIFIED, {**granted, "spec": {**granted["spec"], "user": "other"}}, granted)
    assert looks_again(ADDED, granted, None)
    assert looks_again(DELETED, granted, granted)
    assert not looks_again(ADDED, elsewhere, None)  # another consumer's: no map of its own


# --- The controller over hand-filled caches and a fake API server ----------------------------

MAP_KEY = "liqo-tenant-venice/venice"
QUOTA = "/api/v1/namespaces/{}/resourcequotas/vk-tenant-objects"


class ProviderApi:
    """The provider's API server as the controller writes to it: the namespaces it holds (some
    made since the controller's cache listed), the names it refuses, what it was sent."""

    name = "provider"

    def __init__(
        self, namespaces: Iterable[JSON] = (), refused: Mapping[str, ApiError] | None = None
    ) -> None:
        self.namespaces = {n["metadata"]["name"]: n for n in namespaces}
        self.refused = dict(refused or {})
        self.created: list[str] = []
        self.deleted: list[str] = []
        self.applied: dict[str, JSON] = {}
        self.statuses: list[JSON] = []
        self.events: list[JSON] = []

    async def set_finalizer(self, *_: Any, **__: Any) -> bool:
        return False  # the map has it

    async def create(self, path: str, body: JSON) -> JSON:
        if body["kind"] == "Event":
            self.events.append(body)
            return body
        assert path == "/api/v1/namespaces"
        name = body["metadata"]["name"]
        self.created.append(name)
        if name in self.refused:
            raise self.refused[name]
        if name in self.namespaces:
            raise AlreadyExists(409, "AlreadyExists", f'namespaces "{name}" already exists')
        self.namespaces[name] = body
        return body

    async def get(self, path: str, params: dict[str, str] | None = None) -> JSON:
        name = path.rsplit("/", 1)[1]
        if path.startswith("/api/v1/namespaces/") and name in self.namespaces:
            return self.namespaces[name]
        raise NotFound(404, "NotFound", f"{path} not found")

    async def apply(self, path: str, body: JSON, *, force: bool = True) -> JSON:
        self.applied[path] = body
        return body

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        assert path.endswith("/status")
        self.statuses.append(patch["status"]["currentMapping"])
        return patch

    async def delete(self, path: str, *, body: JSON | None = None) -> JSON:
        name = path.rsplit("/", 1)[1]
        if name in self.refused:
            raise self.refused[name]
        self.deleted.append(name)
        return {}


def namespace_map(desired: dict[str, str], current: dict[str, JSON] | None = None) -> JSON:
    return {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "NamespaceMap",
        "metadata": {
            "name": "venice",
            "namespace": "liqo-tenant-venice",
            "uid": "map-uid",
            "resourceVersion": "1",
            "labels": {"liqo.io/remote-cluster-id": "venice", "liqo.io/replication": "true"},
            "finalizers": [FINALIZER],
        },
        "spec": {"desiredMapping": desired},
        "status": {"currentMapping": current or {}},
    }


def controller_of(
    api: ProviderApi, the_map: JSON, cached: Iterable[JSON] = (), **options: Any
) -> Any:
    """The controller, its caches holding `the_map` and the namespaces `cached`."""
    controller = ProviderNamespaceMaps(api, **options)  # type: ignore[arg-type]
    controller.maps.store.upsert(the_map)
    for namespace in cached:
        controller.namespaces.store.upsert(namespace)
    return controller


def event_messages(api: ProviderApi, reason: str) -> list[str]:
    return [e["message"] for e in api.events if e["reason"] == reason]


async def test_a_namespace_made_by_another_since_the_cache_listed_gets_no_tenant_rights() -> None:
    """Creating the twin answers AlreadyExists (the cache is behind): the namespace found is
    read, and only one this map made for that same namespace gets the tenant's rights."""
    admins = {"metadata": {"name": "shop-venice"}}
    others = forge_twin_namespace("web-venice", "florence", "liqo-tenant-florence/f", "web")
    own = forge_twin_namespace("blog-venice", "venice", MAP_KEY, "blog")
    api = ProviderApi([admins, others, own])
    desired = {"shop": "shop-venice", "web": "web-venice", "blog": "blog-venice"}
    result = await controller_of(api, namespace_map(desired)).reconcile(MAP_KEY)
    assert api.statuses[-1] == {
        "shop": {"remoteNamespace": "shop-venice", "phase": "CreationLoopBackOff"},
        "web": {"remoteNamespace": "web-venice", "phase": "CreationLoopBackOff"},
        "blog": {"remoteNamespace": "blog-venice", "phase": "Accepted"},
    }
    assert set(api.applied) == {
        *(twin_binding_path("blog-venice", role) for role in TWIN_ROLES),
        QUOTA.format("blog-venice"),
    }
    refusals = event_messages(api, "CreationLoopBackOff")
    assert len(refusals) == 2
    assert all("was not created by vk for liqo-tenant-venice/venice" in m for m in refusals)
    # Looked at again when a name taken is freed (below), not every few seconds.
    assert result.requeue_after == REFUSED_RETRY


def test_a_name_freed_by_another_maps_namespace_brings_back_the_maps_that_want_it() -> None:
    controller = controller_of(ProviderApi(), namespace_map({"web": "web-venice"}))
    others = forge_twin_namespace("web-venice", "florence", "liqo-tenant-florence/f", "web")
    controller._on_namespace(MODIFIED, others, None)
    assert len(controller.controller.queue) == 1  # florence's map alone
    controller._on_namespace(DELETED, others, others)
    assert len(controller.controller.queue) == 2  # and venice's


async def test_a_name_the_api_server_refuses_fails_that_entry_alone() -> None:
    """A webhook of the provider's refuses one name: the other entries are made, a removed one
    deleted, the status written, the refusal told (its message bounded), asked again later."""
    said = "admission webhook denied the request: " + "no " * 2000
    refusal = ApiError(403, "Forbidden", said)
    gone = forge_twin_namespace("old-venice", "venice", MAP_KEY, "old")
    api = ProviderApi(refused={"shop-venice": refusal})
    the_map = namespace_map(
        {"shop": "shop-venice", "web": "web-venice"},
        {"old": {"remoteNamespace": "old-venice", "phase": "Accepted"}},
    )
    controller = controller_of(api, the_map, [gone])
    result = await controller.reconcile(MAP_KEY)
    assert api.statuses[-1] == {
        "shop": {"remoteNamespace": "shop-venice", "phase": "CreationLoopBackOff"},
        "web": {"remoteNamespace": "web-venice", "phase": "Accepted"},
        "old": {"remoteNamespace": "old-venice", "phase": "Terminating"},
    }
    assert api.deleted == ["old-venice"]
    assert twin_binding_path("web-venice", VIRTUAL_KUBELET_REMOTE_ROLE) in api.applied
    [told] = event_messages(api, "CreationLoopBackOff")
    assert "the API server refused namespace shop-venice" in told
    assert "403 Forbidden: admission webhook denied the request" in told
    assert len(told) < MAX_API_MESSAGE + 200
    assert result.requeue_after == RETRY  # old-venice going
    await controller.reconcile(MAP_KEY)
    assert len(event_messages(api, "CreationLoopBackOff")) == 1  # told once
    # Refused alone, the entry is asked again later: the same request gets the same answer.
    api = ProviderApi(refused={"shop-venice": refusal})
    alone = await controller_of(api, namespace_map({"shop": "shop-venice"})).reconcile(MAP_KEY)
    assert alone.requeue_after == REFUSED_RETRY
    # A passing trouble (503: etcd away) is no refusal: the whole map is retried with back-off.
    api = ProviderApi(refused={"shop-venice": ApiError(503, "ServiceUnavailable", "etcd")})
    with pytest.raises(ApiError):
        await controller_of(api, namespace_map({"shop": "shop-venice"})).reconcile(MAP_KEY)
    assert api.statuses == []


async def test_a_remote_name_that_is_no_namespace_name_is_refused_without_asking() -> None:
    too_long = "shop-" + "x" * 60
    api = ProviderApi()
    the_map = namespace_map({"shop": too_long, "web": "Web_Venice", "blog": "blog-venice"})
    result = await controller_of(api, the_map).reconcile(MAP_KEY)
    assert api.created == ["blog-venice"]
    assert api.statuses[-1]["shop"]["phase"] == "CreationLoopBackOff"
    assert api.statuses[-1]["web"]["phase"] == "CreationLoopBackOff"
    assert api.statuses[-1]["blog"]["phase"] == "Accepted"
    told = event_messages(api, "CreationLoopBackOff")
    assert any("65 characters long, over the 63 of a namespace name" in m for m in told)
    assert any("'Web_Venice' is not a valid namespace name" in m for m in told)
    # Looked at again when the map changes, not every few seconds.
    assert result.requeue_after == REFUSED_RETRY


def test_only_refusals_of_the_entry_itself_fail_it_alone() -> None:
    for status in (400, 403, 413, 422):
        assert refuses_entry(ApiError(status, "", "")), status
    for status in (401, 404, 408, 409, 429, 500, 503):
        assert not refuses_entry(ApiError(status, "", "")), status


async def test_a_map_labelled_as_another_consumers_makes_namespaces_of_its_own_tenant() -> None:
    """venice labelling its map as florence's had namespaces made that were said to be
    florence's (out of florence's teardown, in the way of its names) and bound florence's group
    in them."""
    the_map = namespace_map({"shop": "shop-venice"})
    the_map["metadata"]["labels"]["liqo.io/remote-cluster-id"] = "florence"
    api = ProviderApi()
    controller = controller_of(api, the_map)
    controller.quotas.store.upsert(slice_quota("liqo-tenant-venice", "pool-1a2b"))
    controller.quotas.store.upsert(slice_quota("liqo-tenant-florence", "other-5e6f"))
    await controller.reconcile(MAP_KEY)
    assert api.created == ["shop-venice"]
    made = api.namespaces["shop-venice"]
    assert made["metadata"]["labels"]["liqo.io/remote-cluster-id"] == "venice"
    assert bound_users(api, "shop-venice") == ["pool-1a2b"]


def slice_quota(namespace: str, user: str) -> JSON:
    return {
        "metadata": {"name": user, "namespace": namespace, "uid": f"uid-{user}"},
        "spec": {"user": user, "resources": {"cpu": "4", "pods": "110"}},
    }


def bound_users(api: ProviderApi, twin: str, role: str = VIRTUAL_KUBELET_REMOTE_ROLE) -> list[str]:
    return [subject["name"] for subject in api.applied[twin_binding_path(twin, role)]["subjects"]]


def draining_users(api: ProviderApi, twin: str) -> list[str]:
    return bound_users(api, twin, VIRTUAL_KUBELET_DRAINING_ROLE)


async def test_a_slice_gone_takes_its_identitys_rights_in_the_twins_with_it() -> None:
    """The attack: a ResourceSlice's kubeconfig leaks, and the consumer deletes the slice. Its
    certificate stays valid for a year, and bound by the consumer's group, kept every right in
    every twin namespace (the pods' token Secrets among them) for as long. Bound by user, its
    Quota gone takes them: the twins' bindings name the users of the Quotas there now."""
    accepted = {"shop": {"remoteNamespace": "shop-venice", "phase": "Accepted"}}
    made = forge_twin_namespace("shop-venice", "venice", MAP_KEY, "shop")
    api = ProviderApi([made])
    controller = controller_of(api, namespace_map({"shop": "shop-venice"}, accepted), [made])
    for user in ("naples-3c4d", "leaked-1a2b"):
        controller.quotas.store.upsert(slice_quota("liqo-tenant-venice", user))
    await controller.reconcile(MAP_KEY)
    assert bound_users(api, "shop-venice") == ["leaked-1a2b", "naples-3c4d"]
    gone = controller.quotas.store.delete("liqo-tenant-venice/leaked-1a2b")
    controller._on_quota(DELETED, gone, gone)
    assert await controller.controller.queue.get() == MAP_KEY  # looked at again
    await controller.reconcile(MAP_KEY)
    assert bound_users(api, "shop-venice") == ["naples-3c4d"]


async def twin_shop_venice_made() -> tuple[ProviderApi, Any]:
    """The twin shop-venice made and Accepted, naples-3c4d's Quota granted: its ResourceQuota
    and bindings applied."""
    accepted = {"shop": {"remoteNamespace": "shop-venice", "phase": "Accepted"}}
    made = forge_twin_namespace("shop-venice", "venice", MAP_KEY, "shop")
    api = ProviderApi([made])
    controller = controller_of(api, namespace_map({"shop": "shop-venice"}, accepted), [made])
    controller.quotas.store.upsert(slice_quota("liqo-tenant-venice", "naples-3c4d"))
    await controller.reconcile(MAP_KEY)
    return api, controller


async def test_a_twin_deleted_by_someone_else_is_made_again_with_its_quota_and_bindings() -> None:
    """The provider's administrator deletes a twin namespace: made again, it had neither its
    ResourceQuota nor the tenant's RoleBindings (this process had applied them once, and did
    not again), so the virtual kubelet could do nothing there and its pods waited for ever."""
    api, controller = await twin_shop_venice_made()
    twin_objects = {
        *(twin_binding_path("shop-venice", role) for role in TWIN_ROLES),
        QUOTA.format("shop-venice"),
    }
    assert set(api.applied) == twin_objects
    # Gone, with what was in it; the cache sees it go.
    del api.namespaces["shop-venice"]
    api.applied.clear()
    controller._on_namespace(DELETED, controller.namespaces.store.delete("shop-venice"), None)
    await controller.reconcile(MAP_KEY)
    assert api.created == ["shop-venice"]
    assert set(api.applied) == twin_objects
    assert bound_users(api, "shop-venice") == ["naples-3c4d"]


async def test_a_tenants_binding_deleted_by_someone_else_is_made_again() -> None:
    api, controller = await twin_shop_venice_made()
    role = TWIN_ROLES[0]
    path = twin_binding_path("shop-venice", role)
    binding = api.applied.pop(path)
    api.applied.clear()
    controller._on_binding(DELETED, binding, None)
    assert await controller.controller.queue.get() == MAP_KEY  # looked at again
    await controller.reconcile(MAP_KEY)
    assert set(api.applied) == {path}  # that one alone: the rest is as applied
    assert bound_users(api, "shop-venice") == ["naples-3c4d"]


async def test_a_twins_resource_quota_deleted_by_someone_else_is_made_again() -> None:
    api, controller = await twin_shop_venice_made()
    path = QUOTA.format("shop-venice")
    quota = api.applied.pop(path)
    api.applied.clear()
    controller._on_twin_quota(MODIFIED, quota, quota)  # its usage counted: nothing to do
    assert not controller.controller.queue
    assert path in controller.applied
    controller._on_twin_quota(DELETED, quota, None)
    assert await controller.controller.queue.get() == MAP_KEY  # looked at again
    await controller.reconcile(MAP_KEY)
    assert set(api.applied) == {path}  # that one alone: the rest is as applied


def stamped_shadow_pod(twin: str, name: str, user: str) -> JSON:
    labels = {CREATOR_USER_LABEL: creator_label_value(user)}
    return {"metadata": {"name": name, "namespace": twin, "labels": labels}}


def test_an_identity_whose_quota_is_gone_stays_bound_while_its_pods_are_in_the_twin() -> None:
    """Its slice deleted first, a virtual kubelet drains its node afterwards: it must still
    delete its ShadowPods. One never bound there is not bound for pods of its name."""
    left = {"draining-3c4d", "pool-1a2b"}
    bound = users_bound(
        ["pool-1a2b"], ["pool-1a2b", "draining-3c4d", "leaked-5e6f"], left.__contains__
    )
    assert bound == TwinUsers(answered=["pool-1a2b"], draining=["draining-3c4d"])
    assert users_bound([], ["intruder-7a8b"], lambda _: False) == TwinUsers([], [])
    assert users_bound(["pool-1a2b"], [], lambda _: True) == TwinUsers(["pool-1a2b"], [])
    assert binding_users(
        {
            "subjects": [
                {"kind": "User", "name": "pool-1a2b"},
                {"kind": "Group", "name": "vk-tenant:venice"},  # bound by an older vk
                {"kind": "User"},
            ]
        }
    ) == ["pool-1a2b"]
    assert binding_users(None) == []


async def test_a_draining_identity_keeps_its_rights_until_its_last_shadow_pod_is_gone() -> None:
    """The slice of a virtual node deleted (its Quota at once), its virtual kubelet drains it:
    bound, even by a controller that restarted meanwhile (it reads the binding as it is), until
    the last ShadowPod it created in the twin is deleted, which looks at the map again."""
    accepted = {"shop": {"remoteNamespace": "shop-venice", "phase": "Accepted"}}
    made = forge_twin_namespace("shop-venice", "venice", MAP_KEY, "shop")
    api = ProviderApi([made])
    controller = controller_of(api, namespace_map({"shop": "shop-venice"}, accepted), [made])
    controller.quotas.store.upsert(slice_quota("liqo-tenant-venice", "pool-1a2b"))
    # As a controller that restarted finds them: one draining already, one answered before.
    controller.bindings[VIRTUAL_KUBELET_REMOTE_ROLE].store.upsert(
        forge_tenant_binding("shop-venice", ["pool-1a2b", "leaked-5e6f"])
    )
    controller.bindings[VIRTUAL_KUBELET_DRAINING_ROLE].store.upsert(
        forge_tenant_binding("shop-venice", ["draining-3c4d"], VIRTUAL_KUBELET_DRAINING_ROLE)
    )
    controller.shadow_pods.store.upsert(stamped_shadow_pod("shop-venice", "a", "draining-3c4d"))
    controller.shadow_pods.store.upsert(stamped_shadow_pod("shop-venice", "b", "draining-3c4d"))
    # Its pods elsewhere keep it bound there, not here.
    controller.shadow_pods.store.upsert(stamped_shadow_pod("cart-venice", "c", "leaked-5e6f"))
    await controller.reconcile(MAP_KEY)
    assert bound_users(api, "shop-venice") == ["pool-1a2b"]
    assert draining_users(api, "shop-venice") == ["draining-3c4d"]
    for name, looked_at_again in (("a", 0), ("b", 1)):  # at its last one
        gone = controller.shadow_pods.store.delete(f"shop-venice/{name}")
        controller._on_shadow_pod(DELETED, gone, gone)
        assert len(controller.controller.queue) == looked_at_again
    assert await controller.controller.queue.get() == MAP_KEY
    await controller.reconcile(MAP_KEY)
    assert draining_users(api, "shop-venice") == []
    # Gone for good: its stamp's pods elsewhere, or the old binding still cached, bring it
    # back no more.
    await controller.reconcile(MAP_KEY)
    assert draining_users(api, "shop-venice") == []
    assert bound_users(api, "shop-venice") == ["pool-1a2b"]


def test_only_a_tenant_namespace_has_a_tenant() -> None:
    assert tenant_of_namespace("liqo-tenant-venice") == "venice"
    assert tenant_of_namespace("liqo-tenant-") is None
    assert tenant_of_namespace("shop") is None


def test_a_namespace_names_its_consumer_by_the_label_the_provider_wrote() -> None:
    def labelled(labels: JSON) -> JSON:
        return {"metadata": {"name": "shop-venice", "labels": labels}}

    assert consumer_of_namespace(labelled({REMOTE_CLUSTER_ID_LABEL: "venice"})) == "venice"
    assert consumer_of_namespace(labelled({REMOTE_CLUSTER_ID_LABEL: ""})) is None
    assert consumer_of_namespace(labelled({"app": "shop"})) is None
    assert consumer_of_namespace({"metadata": {"name": "shop"}}) is None
    assert consumer_of_namespace(None) is None


# --- How many twin namespaces a consumer may have ---------------------------------------------


def test_a_tenant_namespace_may_set_its_consumers_twin_count_and_nothing_else() -> None:
    def labelled(value: str) -> JSON:
        return {"metadata": {"labels": {TENANT_MAX_TWIN_NAMESPACES_LABEL: value}}}

    def limit(tenant: JSON | None) -> tuple[int, str | None]:
        return tenant_limit(tenant, TENANT_MAX_TWIN_NAMESPACES_LABEL, 256)

    assert limit(None) == (256, None)
    assert limit({"metadata": {}}) == (256, None)
    assert limit(labelled("3")) == (3, None)
    assert limit(labelled("0")) == (0, None)
    for bad in ("-1", "lots", "1e9", "²", "9999999999", ""):
        allowed, problem = limit(labelled(bad))
        assert allowed == 256
        assert problem is not None, bad
        assert "the provider's default 256 applies" in problem, bad


def twins_of_venice(count: int, first: int = 0) -> list[JSON]:
    """Twin namespaces another map of venice's made (not in the controller's cache)."""
    return [
        forge_twin_namespace(f"other{i}-venice", "venice", "liqo-tenant-venice/old", f"other{i}")
        for i in range(first, first + count)
    ]


async def test_past_its_twin_count_a_consumers_new_entries_are_refused_and_its_twins_kept() -> None:
    """The attack: a tenant asks for more twin namespaces than the provider makes for it (each
    a namespace, a quota and a binding here, and a dozen watches of its virtual kubelets). Its
    twins (those of its other maps too) fill the room: the twin it has stays Accepted, new
    entries are refused and told why; another consumer's twins count for nothing."""
    own = forge_twin_namespace("blog-venice", "venice", MAP_KEY, "blog")
    florences = forge_twin_namespace("web-florence", "florence", "liqo-tenant-florence/f", "web")
    cached = [own, florences, *twins_of_venice(DEFAULT_MAX_TWIN_NAMESPACES - 2)]
    api = ProviderApi(cached)
    desired = {"blog": "blog-venice", "shop": "shop-venice", "web": "web-venice"}
    controller = controller_of(api, namespace_map(desired), cached=cached)
    result = await controller.reconcile(MAP_KEY)
    assert api.created == ["shop-venice"]  # the last room
    assert api.statuses[-1] == {
        "blog": {"remoteNamespace": "blog-venice", "phase": "Accepted"},
        "shop": {"remoteNamespace": "shop-venice", "phase": "Accepted"},
        "web": {"remoteNamespace": "web-venice", "phase": "CreationLoopBackOff"},
    }
    (refusal,) = event_messages(api, "CreationLoopBackOff")
    assert refusal.startswith(f"venice has the {DEFAULT_MAX_TWIN_NAMESPACES} twin namespaces")
    assert TENANT_MAX_TWIN_NAMESPACES_LABEL in refusal
    assert result.requeue_after == REFUSED_RETRY


LIMITED_TO_ONE = {
    "metadata": {"name": "liqo-tenant-venice", "labels": {TENANT_MAX_TWIN_NAMESPACES_LABEL: "1"}}
}


async def test_a_twin_made_counts_before_the_cache_shows_it() -> None:
    """Two maps of one consumer reconciled one after the other, the first's twin not cached yet:
    the second finds no room."""
    api = ProviderApi()
    controller = controller_of(api, namespace_map({"shop": "shop-venice"}), [LIMITED_TO_ONE])
    await controller.reconcile(MAP_KEY)
    other = namespace_map({"web": "web-venice"})
    other["metadata"]["name"] = "other"
    controller.maps.store.upsert(other)
    await controller.reconcile("liqo-tenant-venice/other")
    assert api.created == ["shop-venice"]
    assert api.statuses[-1]["web"]["phase"] == "CreationLoopBackOff"


async def test_a_twin_made_and_gone_before_the_cache_held_it_leaves_its_room() -> None:
    """Its events seen (created, then deleted at once): not counted for a minute more (the
    pace aside: below)."""
    api = ProviderApi()
    the_map = namespace_map({"shop": "shop-venice"})
    controller = controller_of(api, the_map, [LIMITED_TO_ONE], new_twin_interval=0)
    await controller.reconcile(MAP_KEY)
    made = api.namespaces["shop-venice"]
    controller._on_namespace(ADDED, made, None)
    controller._on_namespace(DELETED, made, made)
    other = namespace_map({"web": "web-venice"})
    other["metadata"]["name"] = "other"
    controller.maps.store.upsert(other)
    await controller.reconcile("liqo-tenant-venice/other")
    assert api.created == ["shop-venice", "web-venice"]


async def test_a_consumer_mapping_and_unmapping_again_and_again_is_paced() -> None:
    """The attack: venice maps a namespace and unmaps it, again and again, within its count.
    Each time this cluster makes a namespace, its quota and bindings, and then walks every
    resource kind to delete it. Past its count's worth at once, venice gets one new twin per
    interval; the entry held back says so, once, and is looked at again when its turn comes."""
    now = [0.0]
    api = ProviderApi()
    controller = controller_of(
        api,
        namespace_map({"shop": "shop-venice"}),
        [LIMITED_TO_ONE],
        new_twin_interval=10,
        clock=lambda: now[0],
    )
    await controller.reconcile(MAP_KEY)
    made = api.namespaces.pop("shop-venice")
    controller._on_namespace(ADDED, made, None)
    controller._on_namespace(DELETED, made, made)
    controller.maps.store.upsert(namespace_map({"web": "web-venice"}))
    result = await controller.reconcile(MAP_KEY)
    assert api.created == ["shop-venice"]
    assert api.statuses[-1]["web"]["phase"] == "CreationLoopBackOff"
    assert result.requeue_after == pytest.approx(10)
    (held_back,) = event_messages(api, "CreationLoopBackOff")
    assert held_back.startswith(
        "venice had its 1 new twin namespaces made at once, and gets one more every 10 s"
    )
    now[0] = 5.0
    await controller.reconcile(MAP_KEY)
    assert event_messages(api, "CreationLoopBackOff") == [held_back]  # said once
    now[0] = 10.0
    await controller.reconcile(MAP_KEY)
    assert api.created == ["shop-venice", "web-venice"]
    assert api.statuses[-1]["web"]["phase"] == "Accepted"


async def test_a_creation_refused_takes_no_room() -> None:
    api = ProviderApi(refused={"shop-venice": ApiError(403, "Forbidden", "a policy says no")})
    desired = {"shop": "shop-venice", "web": "web-venice"}
    await controller_of(api, namespace_map(desired), [LIMITED_TO_ONE]).reconcile(MAP_KEY)
    assert api.statuses[-1] == {
        "shop": {"remoteNamespace": "shop-venice", "phase": "CreationLoopBackOff"},
        "web": {"remoteNamespace": "web-venice", "phase": "Accepted"},
    }


async def test_the_tenant_namespaces_label_sets_the_count_and_a_bad_one_is_told() -> None:
    tenant = {
        "metadata": {
            "name": "liqo-tenant-venice",
            "labels": {TENANT_MAX_TWIN_NAMESPACES_LABEL: "1"},
        }
    }
    api = ProviderApi()
    desired = {"shop": "shop-venice", "web": "web-venice"}
    await controller_of(api, namespace_map(desired), cached=[tenant]).reconcile(MAP_KEY)
    assert api.created == ["shop-venice"]
    assert api.statuses[-1]["web"]["phase"] == "CreationLoopBackOff"
    tenant["metadata"]["labels"][TENANT_MAX_TWIN_NAMESPACES_LABEL] = "many"
    api = ProviderApi()
    await controller_of(api, namespace_map(desired), cached=[tenant]).reconcile(MAP_KEY)
    assert api.created == ["shop-venice", "web-venice"]  # the provider's default
    (problem,) = event_messages(api, "InvalidMaxTwinNamespaces")
    assert "'many' is no count" in problem


async def test_a_name_found_taken_on_creation_gives_its_room_back() -> None:
    """The cache is behind: the twin was made by this map since. Found, it is counted once."""
    made_since = forge_twin_namespace("shop-venice", "venice", MAP_KEY, "shop")
    tenant = {
        "metadata": {
            "name": "liqo-tenant-venice",
            "labels": {TENANT_MAX_TWIN_NAMESPACES_LABEL: "2"},
        }
    }
    api = ProviderApi([made_since])
    desired = {"shop": "shop-venice", "web": "web-venice"}
    await controller_of(api, namespace_map(desired), cached=[tenant]).reconcile(MAP_KEY)
    assert api.created == ["shop-venice", "web-venice"]
    assert {e["phase"] for e in api.statuses[-1].values()} == {"Accepted"}


def test_a_twin_gone_brings_back_every_map_of_its_consumer() -> None:
    """Room made by unoffloading one namespace: the consumer's maps waiting for room are looked
    at again at once, not after REFUSED_RETRY; another consumer's are not."""
    controller = controller_of(ProviderApi(), namespace_map({"web": "web-venice"}))
    florences = namespace_map({})
    florences["metadata"].update(namespace="liqo-tenant-florence", name="f")
    controller.maps.store.upsert(florences)
    (gone,) = twins_of_venice(1)
    controller._on_namespace(MODIFIED, gone, None)
    assert len(controller.controller.queue) == 1  # its own map alone
    controller._on_namespace(DELETED, gone, gone)
    assert len(controller.controller.queue) == 2  # and venice's other map, not florence's


def test_another_consumers_default_names_are_told_apart_from_ones_own() -> None:
    consumers = {"venice", "florence", "a", "b-a"}.__contains__
    assert default_name_of_another("shop-florence", "venice", consumers) == "florence"
    assert default_name_of_another("shop-venice", "venice", consumers) is None
    assert default_name_of_another("shop-naples", "venice", consumers) is None  # no consumer
    assert default_name_of_another("florence", "venice", consumers) is None  # no namespace part
    assert default_name_of_another("shop-", "venice", consumers) is None
    # b-a's own default names end in -a too: its own; a's are not b-a's to take.
    assert default_name_of_another("shop-b-a", "b-a", consumers) is None
    assert default_name_of_another("shop-a", "b-a", consumers) == "a"
    assert default_name_of_another("shop-b-a", "venice", consumers) == "b-a"


async def test_a_consumer_cannot_take_another_consumers_default_twin_name_first() -> None:
    """venice naming its twin `shop-florence` (SelectedName, or EnforceSameName of a namespace
    so named) took the name florence's namespace `shop` gets here by default, leaving that one
    no twin on this provider for as long as venice kept it."""
    florence = {"metadata": {"name": "liqo-tenant-florence"}}
    api = ProviderApi()
    the_map = namespace_map({"shop": "shop-florence", "web": "web-venice", "blog": "blog"})
    result = await controller_of(api, the_map, [florence]).reconcile(MAP_KEY)
    assert api.created == ["web-venice", "blog"]
    assert api.statuses[-1]["shop"]["phase"] == "CreationLoopBackOff"
    assert event_messages(api, "CreationLoopBackOff") == [
        "namespace name shop-florence is the twin name of florence's namespace shop here by "
        "default (DefaultName: its name, '-' and florence's cluster ID), florence being peered "
        "with this cluster too: choose another remote name"
    ]
    assert result.requeue_after == REFUSED_RETRY
    # One venice made before florence peered is kept: florence's then is the name taken.
    made = forge_twin_namespace("shop-florence", "venice", MAP_KEY, "shop")
    accepted = {"shop": {"remoteNamespace": "shop-florence", "phase": "Accepted"}}
    api = ProviderApi([made])
    the_map = namespace_map({"shop": "shop-florence"}, accepted)
    await controller_of(api, the_map, [florence, made]).reconcile(MAP_KEY)
    assert api.created == []
    assert api.statuses == []
    assert twin_binding_path("shop-florence", VIRTUAL_KUBELET_REMOTE_ROLE) in api.applied
