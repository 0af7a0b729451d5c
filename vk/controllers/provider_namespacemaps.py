"""The provider's answer to a consumer's NamespaceMap (its replicated copy): the twin namespaces.

For each desired mapping, the namespace is created (marked as this map's, and labelled with the
provider's Pod Security level for its tenants, or the one its tenant namespace names for this
consumer, which the API server enforces on every Pod there), bounded by a core ResourceQuota
(object counts, storage, no NodePort or LoadBalancer Services unless the provider allows them),
the consumer's ResourceSlice identities get in it the rights a virtual kubelet needs (by user,
those its Quotas name; one whose slice is gone only deletes what ShadowPods it left there:
`users_bound`), and the mapping is reported Accepted. A namespace of that name that vk did not
create for this map is never touched (nor one found on creating it, made since the cache
listed), and a name that is no namespace name, or one the provider reserves (its own system
namespaces, vk's, tenant namespaces, and a list of its choosing), or, made anew, another
consumer's default twin name (`default_name_of_another`), is never created: the mapping stays
in CreationLoopBackOff, with an Event saying why. So does a second local namespace mapped to a
remote name the first already holds, one the API server refuses (with its message), and one past
the twin namespaces a consumer may have here, all its maps together (the provider's default, or
its tenant namespace's label): each entry fails alone, the rest of the map goes on. A mapping
removed deletes its namespace (Terminating until it is gone); the map's deletion waits for all
of them.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import structlog

from vk.api.constants import (
    DEFAULT_TENANT_POD_SECURITY,
    POD_SECURITY_ENFORCE_LABEL,
    POD_SECURITY_ENFORCE_VERSION_LABEL,
    POD_SECURITY_LEVELS,
    POD_SECURITY_WARN_LABEL,
    POD_SECURITY_WARN_VERSION_LABEL,
    REMOTE_CLUSTER_ID_LABEL,
    REPLICATED_LABEL,
    TENANT_MAX_TWIN_NAMESPACES_LABEL,
    TENANT_NAMESPACE_PREFIX,
    VK_NAMESPACE,
    tenant_limit,
    tenant_namespace,
    tenant_of_namespace,
)
from vk.api.offloading import (
    KUBERNETES_NAMESPACE_PREFIX,
    MappingPhase,
    NamespaceMap,
    Quota,
    namespace_name_problem,
)
from vk.api.quantity import InvalidQuantity, parse_quantity
from vk.api.usage import creator_label_value
from vk.controllers.provider_caches import every_shadow_pod
from vk.controllers.provider_quotas import (
    CREATOR_INDEX,
    STAMPS_BY_TWIN,
    quota_creator_index,
    quota_user,
    twin_stamp_index,
    twin_stamps_gone,
)
from vk.kube.client import (
    JSON,
    AlreadyExists,
    ApiError,
    AppliedObjects,
    KubeClient,
    NotFound,
    resource_path,
)
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.events import WARNING, EventRecorder
from vk.kube.informer import (
    DELETED,
    MODIFIED,
    Store,
    namespace_index,
    namespace_of_key,
    object_key,
    shared_informer,
    split_key,
)
from vk.kube.workqueue import TokenBuckets

log = structlog.get_logger("vk.controllers.provider_namespacemaps")

FINALIZER = "namespacemap-controller.liqo.io/finalizer"
MANAGED_BY_ANNOTATION = "liqo.io/remote-namespace-managed-by"
ORIGINAL_NAME_ANNOTATION = "liqo.io/remote-namespace-original-name"
# What the consumer's identities may do in its twin namespaces: a ClusterRole of the chart's,
# bound there only (never Pods: a tenant asks for them with ShadowPods, which the provider
# checks and turns into Pods itself).
VIRTUAL_KUBELET_REMOTE_ROLE = "vk-virtual-kubelet-remote"
# What an identity whose slice is gone may still do there, while ShadowPods it created are
# there: delete them, and follow them go (its virtual kubelet draining its node).
VIRTUAL_KUBELET_DRAINING_ROLE = "vk-virtual-kubelet-draining"
RETRY = 2.0
# An entry the API server refused is asked again this late: the same request gets the same
# answer until someone changes the name, the policy or the webhook that refused it.
REFUSED_RETRY = 60.0
# Answers that refuse one entry whatever the next try (the request is invalid, or a policy or
# webhook forbids it); the others (401, 404, 408, 409, 429, 5xx, no answer) pass, and the
# whole map is looked at again with back-off.
PASSING_CLIENT_ERRORS = frozenset({401, 404, 408, 409, 429})
# The API server's message is the provider's: at most this much of it goes to the consumer.
MAX_API_MESSAGE = 1024
# On a provider's tenant namespace: the Pod Security level of this consumer's twin namespaces,
# instead of the provider's default. The consumer cannot write it (it may not touch namespaces).
TENANT_POD_SECURITY_LABEL = "pod-security.vk.io/tenant-level"
# The twin namespaces one consumer may have on this provider, all its NamespaceMaps together:
# each is a namespace, a ResourceQuota and a RoleBinding in the provider's etcd, and a dozen
# watches of each of the consumer's virtual kubelets on the provider's API server. Past it, a
# new entry stays CreationLoopBackOff, saying so, until the consumer unoffloads a namespace; the
# twins it has are kept. On its tenant namespace, the provider may set another number for one
# consumer (TENANT_MAX_TWIN_NAMESPACES_LABEL).
DEFAULT_MAX_TWIN_NAMESPACES = 256
# A twin made is counted, until the cache shows it, for this long at most (one deleted before
# the cache saw it would otherwise be counted for ever).
MADE_UNSEEN_SECONDS = 60.0
# After its count's worth of new twin namespaces made at once, a consumer gets one more per
# this interval (0: no pace). Each costs this cluster a namespace, its quota and bindings, and
# once unmapped the namespace controller's walk of every resource kind in it: a consumer
# mapping and unmapping a namespace again and again would have it do that without end.
NEW_TWIN_INTERVAL_SECONDS = 10.0
# The core ResourceQuota of every twin namespace: what a consumer's reflected objects may take
# of the provider's API server.
TWIN_QUOTA = "vk-tenant-objects"
# Each offloaded pod that uses its home ServiceAccount has a token Secret in its twin namespace:
# the `secrets` limit there is the configured one (the Secrets the consumer's pods read) plus
# the pods the consumer's Quotas grant, the latter counted up to this many (the most pods one
# virtual node is built for, DESIGN §7): a consumer granted an absurd pod count does not buy
# itself unbounded Secrets in the provider's etcd.
MAX_TOKEN_SECRETS = 10_000
DEFAULT_TWIN_NAMESPACE_QUOTA = {
    "configmaps": "500",
    "secrets": "2000",
    "services": "200",
    "persistentvolumeclaims": "100",
    "requests.storage": "500Gi",
    "services.nodeports": "0",
    "services.loadbalancers": "0",
    # The other objects a consumer's identity may write there, counted too (uncounted, one
    # consumer could fill the provider's etcd with them).
    "count/ingresses.networking.k8s.io": "200",
    "count/serviceaccounts": "100",
    "count/shadowendpointslices.offloading.liqo.io": "1000",
}
# Names no consumer may have as a twin namespace, whatever the provider adds: its own system
# namespaces (those never offloaded, `system_namespace_problem`, and `default`), vk's, and the
# tenant namespaces (a trailing * matches any ending).
RESERVED_NAMESPACES = (
    "default",
    f"{KUBERNETES_NAMESPACE_PREFIX}*",
    VK_NAMESPACE,
    f"{TENANT_NAMESPACE_PREFIX}*",
)


class MappingRefused(Exception):
    """This provider will not make the mapping as asked, and says why (to the consumer, in an
    Event on its NamespaceMap); the entry stays CreationLoopBackOff, and is looked at again
    after `retry` seconds (or when what refused it changes)."""

    def __init__(self, message: str, retry: float = REFUSED_RETRY) -> None:
        super().__init__(message)
        self.retry = retry


def refuses_entry(error: ApiError) -> bool:
    """Whether the API server's answer refuses one entry (which fails alone), rather than
    being a passing trouble (which retries the whole map)."""
    return 400 <= error.status < 500 and error.status not in PASSING_CLIENT_ERRORS


def api_message(error: ApiError) -> str:
    """The API server's answer, as much of it as the consumer is told."""
    message = error.message
    if len(message) > MAX_API_MESSAGE:
        message = message[: MAX_API_MESSAGE - 1] + "…"
    return f"{error.status} {error.reason}: {message}"


def reserved_by(name: str, reserved: tuple[str, ...]) -> str | None:
    """The pattern of `reserved` that reserves namespace `name`, if any."""
    for pattern in reserved:
        if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
            return pattern
    return None


def default_name_of_another(
    remote: str, consumer: str, is_peer: Callable[[str], bool]
) -> str | None:
    """The other cluster peered with this one (`is_peer`: a consumer, or one that may become
    one) that `remote` would be the twin name of by default (Liqo's DefaultName: its
    namespace's name, '-' and its cluster ID), or None: a consumer choosing such a name
    (SelectedName, EnforceSameName) would take it first, and leave that cluster's namespace of
    that name no twin here. One that ends in '-' and `consumer`'s own ID is its own, whatever
    else it ends in (consumer `b-a`'s `shop-b-a` ends in `-a` too)."""
    if remote.endswith(f"-{consumer}"):
        return None
    for at, char in enumerate(remote):
        if char == "-" and 0 < at < len(remote) - 1:
            other = remote[at + 1 :]
            if other != consumer and is_peer(other):
                return other
    return None


def original_name(namespace: Mapping[str, Any]) -> str | None:
    """The consumer's namespace a twin namespace was made for."""
    value = (namespace["metadata"].get("annotations") or {}).get(ORIGINAL_NAME_ANNOTATION)
    return str(value) if value else None


def pod_security_labels(level: str) -> dict[str, str]:
    """The labels making the API server enforce Pod Security `level` in a namespace (and warn
    at it, so that kubectl users see why), at the server's own latest version of the
    standards."""
    return {
        POD_SECURITY_ENFORCE_LABEL: level,
        POD_SECURITY_ENFORCE_VERSION_LABEL: "latest",
        POD_SECURITY_WARN_LABEL: level,
        POD_SECURITY_WARN_VERSION_LABEL: "latest",
    }


def forge_twin_namespace(
    name: str,
    consumer: str,
    namespace_map_key: str,
    local: str,
    pod_security: str = DEFAULT_TENANT_POD_SECURITY,
) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": name,
            "labels": {REMOTE_CLUSTER_ID_LABEL: consumer, **pod_security_labels(pod_security)},
            "annotations": {
                MANAGED_BY_ANNOTATION: namespace_map_key,
                ORIGINAL_NAME_ANNOTATION: local,
            },
        },
    }


def forge_tenant_binding(
    namespace: str, users: Iterable[str], role: str = VIRTUAL_KUBELET_REMOTE_ROLE
) -> JSON:
    """The consumer's rights `role` in its twin namespace `namespace`, bound to `users`
    (`users_bound`), never to its tenant group, which every certificate ever signed for it
    carries for a year. Named as its role: one of each in a twin."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": role, "namespace": namespace},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [
            {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}
            for user in sorted(set(users))
        ],
    }


def quota_users(quotas: Iterable[Mapping[str, Any]], tenant_namespace: str) -> list[str]:
    """The identities the Quotas in a consumer's tenant namespace are for: those of its
    ResourceSlices answered now (only the provider writes Quotas there)."""
    return [
        user
        for quota in quotas
        if quota["metadata"].get("namespace") == tenant_namespace
        and (user := quota_user(quota)) is not None
    ]


TWIN_ROLES = (VIRTUAL_KUBELET_REMOTE_ROLE, VIRTUAL_KUBELET_DRAINING_ROLE)


def twin_binding_path(twin: str, role: str) -> str:
    return resource_path("rbac.authorization.k8s.io/v1", "rolebindings", namespace=twin, name=role)


def twin_quota_path(twin: str) -> str:
    return resource_path("v1", "resourcequotas", namespace=twin, name=TWIN_QUOTA)


def binding_users(binding: Mapping[str, Any] | None) -> list[str]:
    """The users a RoleBinding names."""
    return [
        str(subject.get("name"))
        for subject in (binding or {}).get("subjects") or []
        if subject.get("kind") == "User" and subject.get("name")
    ]


@dataclass(frozen=True)
class TwinUsers:
    """Who is bound in a twin namespace, to which of the consumer's roles."""

    answered: list[str]  # VIRTUAL_KUBELET_REMOTE_ROLE
    draining: list[str]  # VIRTUAL_KUBELET_DRAINING_ROLE


def users_bound(
    answered: Iterable[str], bound_before: Iterable[str], has_pods_left: Callable[[str], bool]
) -> TwinUsers:
    """Who has the consumer's rights in one of its twin namespaces: the identities its Quotas
    name (`answered`: its slices answered now) all of a virtual kubelet's; and of those bound
    there before, each whose Quota is gone while ShadowPods it created are still there
    (`has_pods_left`), a draining one's. A slice is deleted before its virtual node is drained
    (its Quota goes at once), and the virtual kubelet draining it deletes them: its rights end
    with its last one. An identity with none there (a slice's kubeconfig leaked, the slice
    deleted) loses them all at once."""
    now = set(answered)
    draining = {user for user in bound_before if user not in now and has_pods_left(user)}
    return TwinUsers(sorted(now), sorted(draining))


def quota_pods(quota: Mapping[str, Any]) -> Any:
    """The pod count a Quota grants, as written (None: none)."""
    return ((quota.get("spec") or {}).get("resources") or {}).get("pods")


def granted_pods(quotas: Iterable[Mapping[str, Any]], tenant_namespace: str) -> int:
    """The pods the Quotas in a consumer's tenant namespace grant together (a Quota without a
    pod count, or one that does not parse, adds none)."""
    total = 0
    for quota in quotas:
        if quota["metadata"].get("namespace") != tenant_namespace:
            continue
        pods = quota_pods(quota)
        try:
            total += max(0, int(parse_quantity(pods))) if pods is not None else 0
        except InvalidQuantity:
            continue
    return total


def twin_quota_hard(configured: Mapping[str, str], pods: int) -> dict[str, str]:
    """The twin namespace's ResourceQuota limits: the configured ones, `secrets` raised by one
    token Secret per pod granted (up to MAX_TOKEN_SECRETS). A configured `secrets` that does not
    parse is left as it is, for the API server to refuse with its own message."""
    hard = dict(configured)
    if "secrets" in hard:
        try:
            configured_secrets = int(parse_quantity(hard["secrets"]))
        except InvalidQuantity:
            return hard
        hard["secrets"] = str(configured_secrets + min(pods, MAX_TOKEN_SECRETS))
    return hard


def forge_twin_resource_quota(namespace: str, hard: Mapping[str, str]) -> JSON:
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": TWIN_QUOTA, "namespace": namespace},
        "spec": {"hard": dict(hard)},
    }


def tenant_pod_security(
    tenant_namespace: Mapping[str, Any] | None, default: str
) -> tuple[str, str | None]:
    """The Pod Security level of a consumer's twin namespaces: its tenant namespace's label if it
    names a level, else `default`; and what is wrong with the label, if anything."""
    labels = ((tenant_namespace or {}).get("metadata") or {}).get("labels") or {}
    chosen = labels.get(TENANT_POD_SECURITY_LABEL)
    if chosen is None:
        return default, None
    if chosen not in POD_SECURITY_LEVELS:
        return default, (
            f"label {TENANT_POD_SECURITY_LABEL}={chosen!r} names no Pod Security level (one of "
            f"{', '.join(POD_SECURITY_LEVELS)}): the provider's default {default} applies"
        )
    return chosen, None


def managed_by(namespace: Mapping[str, Any] | None) -> str | None:
    if namespace is None:
        return None
    value = (namespace["metadata"].get("annotations") or {}).get(MANAGED_BY_ANNOTATION)
    return str(value) if value else None


# The cached Quotas by namespace: a twin's quota and binding read its consumer's alone.
QUOTAS_BY_NAMESPACE = "namespace"

# The cached namespaces by the tenant namespace whose maps they were made for: counting one
# consumer's twins, for each twin it asks for, walked every namespace of the provider.
TWINS_BY_TENANT = "twins-by-tenant"


def tenant_of_twin(namespace: JSON) -> list[str]:
    """The index TWINS_BY_TENANT: the tenant namespace of the map `namespace` was made for."""
    owner = managed_by(namespace) or ""
    return [owner.split("/", 1)[0]] if "/" in owner else []


def twin_namespaces_of(namespaces: Store, tenant: str) -> list[JSON]:
    """The namespaces made for the NamespaceMaps of the tenant namespace `tenant`, by name, of
    a store indexed by TWINS_BY_TENANT."""
    twins = namespaces.by_index(TWINS_BY_TENANT, tenant)
    return sorted(twins, key=lambda namespace: str(namespace["metadata"]["name"]))


@dataclass
class TwinRoom:
    """The twin namespaces one reconcile may have for its consumer, and whether it found them
    all taken (the rest of its entries are then refused without counting again)."""

    allowed: int
    full: bool = False


class ProviderNamespaceMaps(Reconciler):
    name = "provider-namespacemaps"

    def __init__(
        self,
        client: KubeClient,
        pod_security: str = DEFAULT_TENANT_POD_SECURITY,
        reserved_namespaces: tuple[str, ...] = (),
        namespace_quota: Mapping[str, str] | None = None,
        max_twin_namespaces: int = DEFAULT_MAX_TWIN_NAMESPACES,
        new_twin_interval: float = NEW_TWIN_INTERVAL_SECONDS,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.pod_security = pod_security
        self.max_twin_namespaces = max_twin_namespaces
        self.new_twin_interval = new_twin_interval
        self.namespace_quota = dict(
            DEFAULT_TWIN_NAMESPACE_QUOTA if namespace_quota is None else namespace_quota
        )
        self.reserved = (*RESERVED_NAMESPACES, *reserved_namespaces)
        self.maps = shared_informer(
            client,
            NamespaceMap.group_version(),
            NamespaceMap.PLURAL,
            label_selector=f"{REPLICATED_LABEL}=true",
        )
        self.namespaces = shared_informer(client, "v1", "namespaces")
        self.namespaces.store.add_indexers({TWINS_BY_TENANT: tenant_of_twin})
        self.quotas = shared_informer(
            client,
            Quota.group_version(),
            Quota.PLURAL,
            indexers={QUOTAS_BY_NAMESPACE: namespace_index, CREATOR_INDEX: quota_creator_index},
        )
        # The ShadowPod controller's, and the twins' bindings as they are: who was bound in a
        # twin outlives a restart.
        self.shadow_pods = every_shadow_pod(client, indexers={STAMPS_BY_TWIN: twin_stamp_index})
        self.bindings = {
            role: shared_informer(
                client,
                "rbac.authorization.k8s.io/v1",
                "rolebindings",
                field_selector=f"metadata.name={role}",
            )
            for role in TWIN_ROLES
        }
        self.twin_quotas = shared_informer(
            client, "v1", "resourcequotas", field_selector=f"metadata.name={TWIN_QUOTA}"
        )
        # The users this process bound last in each twin: the bindings' cache may not have
        # seen its last write yet.
        self._bound: dict[str, set[str]] = {}
        self.applied = AppliedObjects(client)
        self.events = EventRecorder(client, "namespacemap-controller")
        # Keys are maps' `namespace/name`: each tenant's maps served in turn.
        self.controller = Controller(self, workers=2, group=namespace_of_key)
        self._refused: dict[tuple[str, str], str] = {}
        # By tenant namespace: held while one twin of its consumer's is counted and made, so
        # that two of its maps reconciled at once do not both take the last room; and the
        # twins made and not in the cache yet, with when, counted too.
        self._making: dict[str, asyncio.Lock] = {}
        self._made_unseen: dict[str, dict[str, float]] = {}
        # By tenant namespace: its consumer's new twins made (NEW_TWIN_INTERVAL_SECONDS), each
        # bucket sized to its count when taken from.
        self._new_twins: TokenBuckets[str] = TokenBuckets(
            1 / new_twin_interval if new_twin_interval > 0 else 1.0, 1, clock=clock
        )

    def _on_namespace(self, event: str, namespace: JSON, __: JSON | None) -> None:
        owner = managed_by(namespace)
        if owner:
            # Seen (made, or gone already): counted from the cache from now on.
            made = self._made_unseen.get(split_key(owner)[0] or "")
            if made is not None:
                made.pop(namespace["metadata"]["name"], None)
            self.controller.enqueue(owner)
            if event != DELETED:
                return
            # A twin gone leaves room: the consumer's other maps may wait for it.
            tenant = split_key(owner)[0]
            for namespace_map in self.maps.store.objects():
                if namespace_map["metadata"].get("namespace") == tenant:
                    self.controller.enqueue(object_key(namespace_map))
        # One in the way may have gone (another map's too): look again at the maps that want
        # that name, whose entries were refused for it; or a tenant namespace's Pod Security
        # level changed: look again at the maps in it.
        name = namespace["metadata"]["name"]
        for namespace_map in self.maps.store.objects():
            desired = (namespace_map.get("spec") or {}).get("desiredMapping") or {}
            if name in desired.values() or namespace_map["metadata"].get("namespace") == name:
                self.controller.enqueue(object_key(namespace_map))

    def _on_quota(self, event: str, quota: JSON, old: JSON | None) -> None:
        """A Quota granted, its pods or its user changed, or gone: the twin namespaces'
        `secrets` limit and who has the consumer's rights there follow. (Its status, the
        webhook's ledger, changes with every admission: not that.)"""
        if (
            event == MODIFIED
            and old is not None
            and quota_pods(old) == quota_pods(quota)
            and quota_user(old) == quota_user(quota)
        ):
            return
        tenant_namespace = quota["metadata"].get("namespace")
        for namespace_map in self.maps.store.objects():
            if namespace_map["metadata"].get("namespace") == tenant_namespace:
                self.controller.enqueue(object_key(namespace_map))

    def _on_shadow_pod(self, event: str, shadow_pod: JSON, old: JSON | None) -> None:
        """An identity whose Quota is gone deleted its last ShadowPod in a twin (or an admin
        took its stamp off): its rights there end, the twin's map looked at again."""
        for value in twin_stamps_gone(event, shadow_pod, old):
            twin, stamp = value.split("/", 1)
            if self.quotas.store.count_by_index(
                CREATOR_INDEX, stamp
            ) or self.shadow_pods.store.count_by_index(STAMPS_BY_TWIN, value):
                continue
            if owner := managed_by(self.namespaces.store.get(twin)):
                self.controller.enqueue(owner)

    def _on_binding(self, event: str, binding: JSON, __: JSON | None) -> None:
        """A tenant's binding in a twin deleted by someone else: made again, not taken as
        applied for ever (the virtual kubelet was forbidden there until a restart)."""
        if event == DELETED:
            twin, role = binding["metadata"].get("namespace") or "", binding["metadata"]["name"]
            self._make_again(twin, twin_binding_path(twin, role))

    def _on_twin_quota(self, event: str, quota: JSON, __: JSON | None) -> None:
        """A twin's ResourceQuota deleted by someone else: made again (the tenant's objects
        there were counted by nothing until a restart)."""
        if event == DELETED:
            twin = quota["metadata"].get("namespace") or ""
            self._make_again(twin, twin_quota_path(twin))

    def _make_again(self, twin: str, path: str) -> None:
        self.applied.forget(path)
        if owner := managed_by(self.namespaces.store.get(twin)):
            self.controller.enqueue(owner)

    async def run(self) -> None:
        self.maps.add_handler(lambda _, obj, __: self.controller.enqueue(object_key(obj)))
        self.namespaces.add_handler(self._on_namespace)
        for bindings in self.bindings.values():
            bindings.add_handler(self._on_binding)
        self.twin_quotas.add_handler(self._on_twin_quota)
        self.quotas.add_handler(self._on_quota)
        self.shadow_pods.add_handler(self._on_shadow_pod)
        await run_with_informers(
            self.controller,
            self.maps,
            self.namespaces,
            self.quotas,
            self.shadow_pods,
            *self.bindings.values(),
            self.twin_quotas,
        )

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        assert namespace is not None
        namespace_map = self.maps.store.get(key)
        if namespace_map is None:
            return Result()
        metadata = namespace_map["metadata"]
        # The consumer whose tenant namespace holds the map: its label is the tenant's to
        # write, and one naming another consumer made namespaces said to be that one's.
        consumer = tenant_of_namespace(namespace)
        if consumer is None:
            return Result()  # no tenant's: no tenant can write there
        path = resource_path(
            NamespaceMap.group_version(), NamespaceMap.PLURAL, namespace=namespace, name=name
        )
        deleting = bool(metadata.get("deletionTimestamp"))
        if deleting and FINALIZER not in (metadata.get("finalizers") or []):
            return Result()
        if not deleting and await self.client.set_finalizer(
            path, namespace_map, FINALIZER, present=True
        ):
            return Result()
        desired: dict[str, str] = (
            {} if deleting else dict((namespace_map.get("spec") or {}).get("desiredMapping") or {})
        )
        current: dict[str, JSON] = dict(
            (namespace_map.get("status") or {}).get("currentMapping") or {}
        )
        status: dict[str, JSON] = {}
        retries: list[float] = []  # when to look again, for each entry not done
        # A remote name wanted twice goes to the entry Accepted first: those are seen first.
        accepted_first = sorted(
            desired.items(),
            key=lambda item: (current.get(item[0]) or {}).get("phase") != MappingPhase.ACCEPTED,
        )
        claimed: dict[str, str] = {}  # remote -> the local namespace it is made for
        room = TwinRoom(await self._max_twin_namespaces(namespace_map, namespace))
        for local, remote in accepted_first:
            phase, retry = await self._make_entry(
                namespace_map, key, consumer, local, remote, claimed, room
            )
            status[local] = {"remoteNamespace": remote, "phase": phase}
            if retry is not None:
                retries.append(retry)
        status = {local: status[local] for local in desired}
        for local, entry in current.items():
            remote = entry.get("remoteNamespace", "")
            if local in desired or not remote:
                continue
            if (retry := await self._remove_entry(namespace_map, key, local, remote)) is not None:
                status[local] = {"remoteNamespace": remote, "phase": MappingPhase.TERMINATING.value}
                retries.append(retry)
        if status != current:
            await self.client.merge_patch(
                f"{path}/status",
                {
                    "status": {
                        "currentMapping": {
                            **{k: None for k in current if k not in status},
                            **status,
                        }
                    }
                },
            )
        if deleting and not status:
            await self.client.set_finalizer(path, namespace_map, FINALIZER, present=False)
            return Result()
        return Result(requeue_after=min(retries, default=None))

    async def _make_entry(
        self,
        namespace_map: JSON,
        key: str,
        consumer: str,
        local: str,
        remote: str,
        claimed: dict[str, str],
        room: TwinRoom,
    ) -> tuple[str, float | None]:
        """One desired mapping made, kept or refused, whatever the others: its phase, and when
        to look at it again (None: done)."""
        try:
            phase = await self._ensure_twin(
                namespace_map, key, consumer, local, remote, claimed, room
            )
        except MappingRefused as refusal:
            # Looked at again when what refused it changes (the map, or the namespace in the
            # way: `_on_namespace`), not every few seconds: a map of thousands of refused
            # entries, rewalked each time, would take the process's core.
            await self._report(namespace_map, key, local, "CreationLoopBackOff", str(refusal))
            return MappingPhase.CREATION_LOOP_BACK_OFF.value, refusal.retry
        except ApiError as error:
            if not refuses_entry(error):
                raise
            await self._report(
                namespace_map,
                key,
                local,
                "CreationLoopBackOff",
                f"the API server refused namespace {remote}, or the tenant's rights in it: "
                f"{api_message(error)}",
            )
            return MappingPhase.CREATION_LOOP_BACK_OFF.value, REFUSED_RETRY
        self._refused.pop((key, local), None)
        return phase, RETRY if phase == MappingPhase.TERMINATING else None

    async def _remove_entry(
        self, namespace_map: JSON, key: str, local: str, remote: str
    ) -> float | None:
        """One mapping removed, whatever the others: when to look at it again while its
        namespace is still there (None: gone, or never this map's)."""
        try:
            if await self._delete_twin(remote, key, local):
                return RETRY
            self._refused.pop((key, local), None)
            return None
        except ApiError as error:
            if not refuses_entry(error):
                raise
            await self._report(
                namespace_map,
                key,
                local,
                "DeletionFailed",
                f"the API server refused deleting namespace {remote}: {api_message(error)}",
            )
            return REFUSED_RETRY

    async def _report(
        self, namespace_map: JSON, key: str, local: str, reason: str, message: str
    ) -> None:
        """An Event on the map saying why an entry is not done, once for each new why."""
        if self._refused.get((key, local)) != message:
            self._refused[(key, local)] = message
            await self.events.record(namespace_map, WARNING, reason, message)

    async def _max_twin_namespaces(self, namespace_map: JSON, tenant: str) -> int:
        """The twin namespaces the consumer of tenant namespace `tenant` may have; a label
        there that says no count is told once, on the map."""
        allowed, problem = tenant_limit(
            self.namespaces.store.get(tenant),
            TENANT_MAX_TWIN_NAMESPACES_LABEL,
            self.max_twin_namespaces,
        )
        # Keyed apart from the entries (" " is in no namespace name).
        key = object_key(namespace_map)
        if problem and self._refused.get((key, " max")) != problem:
            self._refused[(key, " max")] = problem
            await self.events.record(namespace_map, WARNING, "InvalidMaxTwinNamespaces", problem)
        return allowed

    def _held_twins(self, tenant: str) -> int:
        """The twin namespaces of the consumer of tenant namespace `tenant`: those cached, and
        those made and not cached yet (forgotten past MADE_UNSEEN_SECONDS: one deleted before
        the cache saw it)."""
        cached = {
            ns["metadata"]["name"] for ns in twin_namespaces_of(self.namespaces.store, tenant)
        }
        made = self._made_unseen.setdefault(tenant, {})
        now = time.monotonic()
        for name in [
            n for n, when in made.items() if n in cached or now - when > MADE_UNSEEN_SECONDS
        ]:
            del made[name]
        return len(cached) + len(made)

    async def _create_twin(self, room: TwinRoom, tenant: str, consumer: str, twin: JSON) -> None:
        """Creates a twin namespace if its consumer has room for one more, else raises
        MappingRefused (and the reconcile's other new entries are refused without counting)."""
        if not room.full:
            async with self._making.setdefault(tenant, asyncio.Lock()):
                room.full = self._held_twins(tenant) >= room.allowed
                if not room.full:
                    self._wait_for_turn(room, tenant, consumer)
                    await self.client.create(resource_path("v1", "namespaces"), twin)
                    self._new_twins[tenant].take()  # made: a creation refused takes none
                    self._made_unseen[tenant][twin["metadata"]["name"]] = time.monotonic()
                    return
        raise MappingRefused(
            f"{consumer} has the {room.allowed} twin namespaces this provider makes for it: "
            "unoffload a namespace first, or ask the provider's administrator for more "
            f"(label {TENANT_MAX_TWIN_NAMESPACES_LABEL} on {tenant})"
        )

    def _wait_for_turn(self, room: TwinRoom, tenant: str, consumer: str) -> None:
        """Raises MappingRefused, with how long until one comes, unless a turn of the
        consumer's new twins is there: its count's worth at once (the count raised, the
        difference is there at once), then one per `new_twin_interval`."""
        if self.new_twin_interval <= 0:
            return
        bucket = self._new_twins[tenant]
        bucket.resize(room.allowed)
        if (wait := bucket.wait()) > 0:
            # Said the same at each look: an Event each, else.
            raise MappingRefused(
                f"{consumer} had its {room.allowed} new twin namespaces made at once, and gets "
                f"one more every {self.new_twin_interval:g} s (the provider's "
                "--new-twin-namespace-interval): this one is made when its turn comes, on its "
                "own",
                retry=wait,
            )

    async def _ensure_twin(
        self,
        namespace_map: JSON,
        key: str,
        consumer: str,
        local: str,
        remote: str,
        claimed: dict[str, str],
        room: TwinRoom,
    ) -> str:
        """Makes (or keeps) the twin namespace of `local` and the tenant's rights in it: its
        phase, or MappingRefused."""
        existing = self.namespaces.store.get(remote)
        self._check_claim(key, consumer, local, remote, existing, claimed)
        tenant_namespace = self.namespaces.store.get(namespace_of_key(key))
        level, problem = tenant_pod_security(tenant_namespace, self.pod_security)
        if problem and self._refused.get((key, "")) != problem:
            self._refused[(key, "")] = problem
            await self.events.record(namespace_map, WARNING, "InvalidPodSecurityLevel", problem)
        wanted_labels = pod_security_labels(level)
        if existing is None:
            # Deleted by someone else, say, and made again here: its ResourceQuota and the
            # tenant's RoleBindings went with it (they were not applied again, and the tenant
            # could do nothing in it).
            self._forget_twin(remote)
            try:
                await self._create_twin(
                    room,
                    namespace_of_key(key),
                    consumer,
                    forge_twin_namespace(remote, consumer, key, local, level),
                )
            except AlreadyExists:
                # The cache is behind: someone made it since, not necessarily vk for this map
                # (the provider's administrator, another consumer's twin). Judged as found.
                existing = await self.client.get(resource_path("v1", "namespaces", name=remote))
                self._check_claim(key, consumer, local, remote, existing, claimed)
        claimed[remote] = local
        if existing is not None:
            if existing["metadata"].get("deletionTimestamp"):
                return MappingPhase.TERMINATING.value  # a mapping removed and added back: wait
            labels = existing["metadata"].get("labels") or {}
            if any(labels.get(k) != v for k, v in wanted_labels.items()):
                # Made by an older vk, or under another level: the provider's level now.
                await self.client.merge_patch(
                    resource_path("v1", "namespaces", name=remote),
                    {"metadata": {"labels": wanted_labels}},
                )
        tenant = namespace_of_key(key)
        tenant_quotas = self.quotas.store.by_index(QUOTAS_BY_NAMESPACE, tenant)
        if self.namespace_quota:
            pods = granted_pods(tenant_quotas, tenant)
            await self.applied.apply(
                twin_quota_path(remote),
                forge_twin_resource_quota(remote, twin_quota_hard(self.namespace_quota, pods)),
            )
        users = self._users_bound(remote, quota_users(tenant_quotas, tenant))
        for role, bound in (
            (VIRTUAL_KUBELET_REMOTE_ROLE, users.answered),
            (VIRTUAL_KUBELET_DRAINING_ROLE, users.draining),
        ):
            await self.applied.apply(
                twin_binding_path(remote, role), forge_tenant_binding(remote, bound, role)
            )
        return MappingPhase.ACCEPTED.value

    def _forget_twin(self, twin: str) -> None:
        """What this process applied and bound in `twin`: a namespace made (again) has none of
        it, which is applied there anew."""
        for role in TWIN_ROLES:
            self.applied.forget(twin_binding_path(twin, role))
        self.applied.forget(twin_quota_path(twin))
        self._bound.pop(twin, None)

    def _users_bound(self, twin: str, answered: list[str]) -> TwinUsers:
        """`users_bound` in `twin`, of those bound there as the cache and this process saw it."""
        before = set(self._bound.get(twin, ()))
        for role, bindings in self.bindings.items():
            before.update(binding_users(bindings.store.get(f"{twin}/{role}")))

        def has_pods_left(user: str) -> bool:
            stamped = f"{twin}/{creator_label_value(user)}"
            return self.shadow_pods.store.count_by_index(STAMPS_BY_TWIN, stamped) > 0

        users = users_bound(answered, before, has_pods_left)
        self._bound[twin] = {*users.answered, *users.draining}
        return users

    def _is_peer(self, cluster_id: str) -> bool:
        """Whether `cluster_id` is peered with this cluster: its tenant namespace is here (a
        name no twin may take: RESERVED_NAMESPACES)."""
        return self.namespaces.store.get(tenant_namespace(cluster_id)) is not None

    def _check_claim(
        self,
        key: str,
        consumer: str,
        local: str,
        remote: str,
        existing: Mapping[str, Any] | None,
        claimed: Mapping[str, str],
    ) -> None:
        """Raises MappingRefused unless `remote` may be `local`'s twin namespace: a namespace
        name, not reserved, and either free (and not another consumer's default name: taken
        first, it would be theirs no more) or (`existing`) made by vk for this map and this
        same local namespace."""
        if problem := namespace_name_problem(remote):
            raise MappingRefused(f"remote namespace name {problem}: choose another remote name")
        if pattern := reserved_by(remote, self.reserved):
            raise MappingRefused(
                f"namespace name {remote} is reserved on this cluster ({pattern}): choose another "
                "remote name"
            )
        if existing is None and (other := default_name_of_another(remote, consumer, self._is_peer)):
            raise MappingRefused(
                f"namespace name {remote} is the twin name of {other}'s namespace "
                f"{remote[: -len(other) - 1]} here by default (DefaultName: its name, '-' and "
                f"{other}'s cluster ID), {other} being peered with this cluster too: "
                "choose another remote name"
            )
        if existing is not None and managed_by(existing) != key:
            raise MappingRefused(
                f"namespace {remote} exists on this cluster and was not created by vk for "
                f"{key}: it is left alone; choose another remote name, or remove it"
            )
        holder = claimed.get(remote) or (original_name(existing) if existing else None)
        if holder is not None and holder != local:
            raise MappingRefused(
                f"namespace {remote} already holds {consumer}'s namespace {holder}, mapped to that "
                f"name first: {local} needs another remote name"
            )

    async def _delete_twin(self, remote: str, key: str, local: str) -> bool:
        """Deletes the twin namespace this map created for `local`; True while it is still
        there."""
        existing = self.namespaces.store.get(remote)
        if existing is None or managed_by(existing) != key:
            return False
        if original_name(existing) not in (None, local):
            return False  # another local namespace's, which this entry was refused
        self._forget_twin(remote)
        if not existing["metadata"].get("deletionTimestamp"):
            with contextlib.suppress(NotFound):
                await self.client.delete(resource_path("v1", "namespaces", name=remote))
        return True
