"""The provider's answer to a ResourceSlice (the copy replicated into the consumer's tenant
namespace): an identity signed through this cluster's CSR API, the resources granted, the
cluster's labels for the virtual node, and a Quota limiting what that identity may run.

Authentication is answered for every class; resources only for the `default` class (or none):
another class belongs to a custom controller, and the Quota then follows whatever resources it
writes. The provider may grant more than it has: no check against its own capacity, as in Liqo.
It answers a bounded number of one consumer's slices at once, the oldest first: a slice past
them is denied, saying why, and answered once one goes; one answered, or whose identity is
being signed, keeps its place. A slice that leaves the provider's view (deleted, or its
replica label removed) loses its Quota at once, so that hiding slices makes no room; and its
identity keeps its place while ShadowPods it made are left (until its virtual node's drain, or
the provider, deletes them), so that deleting a slice and making another runs no more at once.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from vk.api.authentication import (
    DEFAULT_RESOURCE_SLICE_CLASS,
    ResourceSlice,
    Tenant,
    TenantCondition,
)
from vk.api.constants import (
    CORDON_ANNOTATION,
    DEFAULT_MAX_RESOURCE_SLICES,
    REMOTE_CLUSTER_ID_LABEL,
    REPLICATED_LABEL,
    RESOURCE_SLICE_NAME_LABEL,
    TENANT_MAX_RESOURCE_SLICES_LABEL,
    consumer_of_namespace,
    resource_slice_user,
    tenant_group,
    tenant_limit,
    tenant_namespace,
    tenant_of_namespace,
)
from vk.api.offloading import LimitsEnforcement, Quota
from vk.api.quantity import InvalidQuantity, parse_quantity
from vk.api.usage import creator_label_value
from vk.controllers.csr import CSR_API, decided, forge_approval
from vk.controllers.provider_caches import every_shadow_pod
from vk.controllers.provider_quotas import (
    CREATOR_INDEX,
    STAMPS_BY_TWIN,
    shadow_pod_creator_index,
    twin_stamp_index,
    twin_stamps_gone,
)
from vk.kube.client import JSON, AppliedObjects, KubeClient, NotFound, resource_path
from vk.kube.conditions import forge_condition
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.informer import (
    DELETED,
    namespace_index,
    namespace_of_key,
    object_key,
    shared_informer,
    split_key,
)
from vk.kube.pki import csr_subject
from vk.kube.workqueue import TokenBuckets
from vk.reflection.forge.storage import VIRTUAL_STORAGE_CLASS

log = structlog.get_logger("vk.controllers.provider_resourceslices")

CLIENT_SIGNER = "kubernetes.io/kube-apiserver-client"
DEFAULT_RESOURCES = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"}
CERTIFICATE_DAYS = 365
RENEW_AT = 0.8  # of a certificate's life, as the kubelet renews its own

AUTHENTICATION, RESOURCES = "Authentication", "Resources"
ACCEPTED, DENIED = "Accepted", "Denied"
# Past DEFAULT_MAX_RESOURCE_SLICES of a consumer's slices (or its tenant namespace's
# TENANT_MAX_RESOURCE_SLICES_LABEL), a new slice is denied, the oldest answered first, until
# one goes.
# The reason of both conditions of a slice past that count: not the slice's fault, and answered
# on its own once there is room (vkctl says so, instead of asking to make it again).
REASON_COUNT_EXCEEDED = "ResourceSliceCountExceeded"
# A consumer gets its count's worth of new slices answered at once, then one per this interval
# (its tenant namespace's own count, at once, after a restart): each new one answered is a
# Quota that was not there, bound in every twin of the consumer's, and unbound when it goes, so
# a consumer deleting and making slices again and again would have the provider write hundreds
# of bindings for each two of its writes. Both conditions of a slice refused for that say so,
# and it is answered on its own when its turn comes.
NEW_SLICE_INTERVAL_SECONDS = 60.0
REASON_RATE_LIMITED = "ResourceSliceRateLimited"


@dataclass(frozen=True)
class ProviderSettings:
    cluster_id: str
    cluster_labels: dict[str, str]
    api_server_url: str  # what consumers reach this cluster at
    ca_pem: bytes  # the API server's CA, for consumers to verify it
    default_resources: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_RESOURCES))
    limits_enforcement: LimitsEnforcement = LimitsEnforcement.NONE
    # The loadBalancerClasses this provider's Services may use (no API object lists them);
    # the first is the default.
    load_balancer_classes: tuple[str, ...] = ()
    max_resource_slices: int = DEFAULT_MAX_RESOURCE_SLICES
    new_slice_interval: float = NEW_SLICE_INTERVAL_SECONDS  # 0: no pace


# The annotations that make a StorageClass or an IngressClass its cluster's default.
DEFAULT_STORAGE_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
DEFAULT_INGRESS_CLASS_ANNOTATION = "ingressclass.kubernetes.io/is-default-class"
# The status fields of the classes a provider offers.
CLASS_FIELDS = ("storageClasses", "ingressClasses", "loadBalancerClasses")


def _offered(objects: list[JSON], name_field: str, default_annotation: str) -> list[JSON]:
    entries = []
    for obj in sorted(objects, key=lambda o: o["metadata"]["name"]):
        name = obj["metadata"]["name"]
        if name == VIRTUAL_STORAGE_CLASS:
            continue  # vk's own, in every cluster: offering it would offload to ourselves
        annotations = obj["metadata"].get("annotations") or {}
        entry: JSON = {name_field: name}
        if annotations.get(default_annotation) == "true":
            entry["default"] = True
        entries.append(entry)
    return entries


def offered_classes(
    storage_classes: list[JSON], ingress_classes: list[JSON], load_balancer_classes: tuple[str, ...]
) -> JSON:
    """What a slice's status says the provider offers, as Liqo's does: its StorageClasses and
    IngressClasses (the default one marked, as their annotation marks it; vk's virtual class
    `liqo` left out) and the load-balancer classes its administrator lists (the first the
    default). A kind with none is left out."""
    offered: JSON = {
        "storageClasses": _offered(
            storage_classes, "storageClassName", DEFAULT_STORAGE_CLASS_ANNOTATION
        ),
        "ingressClasses": _offered(
            ingress_classes, "ingressClassName", DEFAULT_INGRESS_CLASS_ANNOTATION
        ),
        "loadBalancerClasses": [
            {"loadBalancerClassName": name, **({"default": True} if i == 0 else {})}
            for i, name in enumerate(load_balancer_classes)
        ],
    }
    return {key: value for key, value in offered.items() if value}


# What a node cannot do without: filled from the defaults when a slice's request omits them.
NODE_ESSENTIALS = ("cpu", "memory", "pods")


def granted_resources(
    requested: Mapping[str, Any] | None, defaults: Mapping[str, str]
) -> dict[str, str]:
    """A slice that asks for nothing gets the defaults. One that asks gets exactly what it asks
    for (extended resources such as nvidia.com/gpu included), with the defaults' cpu, memory and
    pods where it leaves them out, as a node without them can run nothing; unlike Liqo, which
    adds every default (a slice asking for cpu, memory and pods would get ephemeral-storage
    too). ValueError names a quantity that does not parse."""
    if not requested:
        return dict(defaults)
    granted = {name: value for name, value in defaults.items() if name in NODE_ESSENTIALS}
    for name, value in (requested or {}).items():
        try:
            quantity = parse_quantity(value)
        except InvalidQuantity as error:
            raise ValueError(f"spec.resources.{name}: {error}") from error
        if quantity < 0:
            raise ValueError(f"spec.resources.{name}: {value} is negative")
        granted[name] = str(value)
    return granted


def slice_request_verdict(csr_pem: bytes, consumer: str, slice_name: str) -> str | None:
    """None when the slice's CSR asks for exactly the identity this consumer's slice may have;
    else why not."""
    try:
        common_name, groups = csr_subject(csr_pem)
    except ValueError as error:
        return f"spec.csr is not a valid certificate request: {error}"
    expected = (resource_slice_user(consumer, slice_name), (tenant_group(consumer),))
    if (common_name, groups) != expected:
        return (
            f"spec.csr asks for CN={common_name} O={','.join(groups)}; a slice {slice_name} of "
            f"{consumer} may only be CN={expected[0]} O={expected[1][0]}"
        )
    return None


def set_condition(
    conditions: list[JSON] | None,
    kind: str,
    status: str,
    reason: str,
    message: str,
    now: datetime.datetime,
) -> list[JSON]:
    """`conditions` with the one of `kind` set; its transition time moves only when its status
    does."""
    current = next((c for c in conditions or [] if c.get("type") == kind), None)
    updated = forge_condition(current, kind, status, message, now, reason=reason)
    return [*(c for c in conditions or [] if c.get("type") != kind), updated]


def condition_status(resource_slice: Mapping[str, Any], kind: str) -> str | None:
    for condition in (resource_slice.get("status") or {}).get("conditions") or []:
        if condition.get("type") == kind:
            status: str = condition.get("status", "")
            return status
    return None


def is_answered(resource_slice: Mapping[str, Any]) -> bool:
    """Whether the provider answered the slice already: its identity signed. (Its resources
    alone say nothing: a slice's first version, before the consumer writes its ID, has them
    granted, and is denied its identity.)"""
    return condition_status(resource_slice, AUTHENTICATION) == ACCEPTED


def _age(resource_slice: Mapping[str, Any]) -> tuple[str, str]:
    return str(resource_slice["metadata"].get("creationTimestamp") or ""), resource_slice[
        "metadata"
    ]["name"]


@dataclass(frozen=True)
class HeldBack:
    """Why a slice is not answered now, though nothing is wrong with it: both its conditions
    say it, and it is answered on its own (after `retry` seconds, or once there is room)."""

    reason: str
    message: str
    retry: float | None = None


@dataclass(frozen=True)
class SliceLine:
    """Where a consumer's slices stand against the `allowed` the provider answers at once,
    `draining` of those places held by the identities of slices gone whose pods are not yet.
    Of its slices holding no place yet, the oldest first: `next` take the room left, and
    `waiting` are past it."""

    allowed: int
    draining: int
    next: list[JSON]
    waiting: list[JSON]


def slice_line(
    consumers_slices: list[JSON],
    allowed: int,
    holds_place: Callable[[JSON], bool],
    draining: int = 0,
) -> SliceLine:
    """A consumer's slices against its count: those that hold a place already (`holds_place`:
    answered, or their identity being signed) keep it, and the others take what room is left
    after the `draining` identities' places, the oldest first (by creation, then name); a
    slice being deleted takes none."""
    live = [s for s in consumers_slices if not s["metadata"].get("deletionTimestamp")]
    placed = [s for s in live if holds_place(s)]
    others = sorted((s for s in live if not holds_place(s)), key=_age)
    room = max(0, allowed - len(placed) - draining)
    return SliceLine(allowed, draining, others[:room], others[room:])


def is_cordoned(resource_slice: Mapping[str, Any], tenant: Mapping[str, Any] | None) -> bool:
    """Whether the slice's Quota admits no new pod: the slice is annotated `liqo.io/cordon`
    (any value but false), or its consumer's Tenant is Cordoned or Drained."""
    annotations = (resource_slice.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(CORDON_ANNOTATION)
    if value is not None and value not in ("false", "False", "0"):
        return True
    return tenant_condition(tenant) in (TenantCondition.CORDONED, TenantCondition.DRAINED)


def tenant_condition(tenant: Mapping[str, Any] | None) -> TenantCondition:
    """What the provider lets the Tenant's consumer do (Active without a Tenant)."""
    value = ((tenant or {}).get("spec") or {}).get("tenantCondition")
    try:
        return TenantCondition(value) if value else TenantCondition.ACTIVE
    except ValueError:
        return TenantCondition.ACTIVE


def forge_quota(
    resource_slice: Mapping[str, Any],
    user: str,
    resources: Mapping[str, str],
    enforcement: LimitsEnforcement,
    *,
    cordoned: bool = False,
) -> JSON:
    metadata = resource_slice["metadata"]
    return {
        "apiVersion": Quota.group_version(),
        "kind": Quota.KIND,
        "metadata": {
            "name": user,
            "namespace": metadata["namespace"],
            "labels": {
                RESOURCE_SLICE_NAME_LABEL: metadata["name"],
                REMOTE_CLUSTER_ID_LABEL: resource_slice["spec"].get("consumerClusterID", ""),
            },
            "ownerReferences": [
                {
                    "apiVersion": ResourceSlice.group_version(),
                    "kind": ResourceSlice.KIND,
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                }
            ],
        },
        # `cordoned` only when vk cordons it: applied server-side, a field left out is not
        # vk's, so an administrator's own `kubectl edit qt` cordon stays.
        "spec": {
            "user": user,
            "limitsEnforcement": str(enforcement),
            "resources": dict(resources),
            **({"cordoned": True} if cordoned else {}),
        },
    }


def forge_signing_request(name: str, csr_pem: bytes, consumer: str, slice_name: str) -> JSON:
    return {
        "apiVersion": CSR_API,
        "kind": "CertificateSigningRequest",
        "metadata": {
            "name": name,
            "labels": {REMOTE_CLUSTER_ID_LABEL: consumer, RESOURCE_SLICE_NAME_LABEL: slice_name},
        },
        "spec": {
            "signerName": CLIENT_SIGNER,
            "request": base64.b64encode(csr_pem).decode(),
            "usages": ["digital signature", "client auth"],
            "expirationSeconds": CERTIFICATE_DAYS * 24 * 3600,
        },
    }


def certificate_usable(cert_pem: bytes, csr_pem: bytes, now: datetime.datetime) -> bool:
    """The certificate answers this very request and is not yet due for renewal."""
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
        request = x509.load_pem_x509_csr(csr_pem)
    except ValueError:
        return False
    spki = (serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo)
    if cert.public_key().public_bytes(*spki) != request.public_key().public_bytes(*spki):
        return False
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return now < start + (end - start) * RENEW_AT


def quota_path(namespace: str, slice_name: str) -> str | None:
    """The path of the Quota of the slice `slice_name` in the tenant namespace `namespace`
    (None: no tenant namespace): named after the identity of that namespace's consumer."""
    consumer = tenant_of_namespace(namespace)
    if consumer is None:
        return None
    return resource_path(
        Quota.group_version(),
        Quota.PLURAL,
        namespace=namespace,
        name=resource_slice_user(consumer, slice_name),
    )


class ProviderResourceSlices(Reconciler):
    name = "provider-resourceslices"

    def __init__(
        self,
        client: KubeClient,
        settings: ProviderSettings,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.client = client
        self.settings = settings
        self.slices = shared_informer(
            client,
            ResourceSlice.group_version(),
            ResourceSlice.PLURAL,
            label_selector=f"{REPLICATED_LABEL}=true",
        )
        self.requests = shared_informer(
            client,
            CSR_API,
            "certificatesigningrequests",
            label_selector=RESOURCE_SLICE_NAME_LABEL,
        )
        # A Tenant cordoned, drained or made active again changes its consumer's slices.
        self.tenants = shared_informer(client, Tenant.group_version(), Tenant.PLURAL)
        # What this cluster offers besides resources: a change is told to every slice.
        self.storage_classes = shared_informer(client, "storage.k8s.io/v1", "storageclasses")
        self.ingress_classes = shared_informer(client, "networking.k8s.io/v1", "ingressclasses")
        self.slices.store.add_indexers({"namespace": namespace_index})
        # Tenant namespaces (and twin namespaces) carry the consumer's ID: a tenant namespace
        # may set how many slices its consumer gets.
        self.namespaces = shared_informer(
            client, "v1", "namespaces", label_selector=REMOTE_CLUSTER_ID_LABEL
        )
        # Grouped by tenant namespace (one consumer's): a consumer's many slices, or failing
        # ones, do not hold up another's.
        self.controller = Controller(self, workers=4, group=namespace_of_key)
        self.applied = AppliedObjects(client)
        # A Quota deleted by someone else is made again while its slice is answered: a
        # consumer's ShadowPods whose creator has no Quota are deleted after a grace.
        self.quotas = shared_informer(client, Quota.group_version(), Quota.PLURAL)
        # Where a consumer's identities have ShadowPods: one whose slice is gone holds a place
        # of its consumer's count until they are gone.
        self.shadow_pods = every_shadow_pod(
            client,
            indexers={STAMPS_BY_TWIN: twin_stamp_index, CREATOR_INDEX: shadow_pod_creator_index},
        )
        self._said: dict[str, str] = {}  # tenant namespace -> what is wrong with its label
        # By tenant namespace: its consumer's new slices answered (NEW_SLICE_INTERVAL_SECONDS),
        # each bucket sized to its count when taken from; and by slice, the UID of the one that
        # took its turn.
        interval = settings.new_slice_interval
        self._new_slices: TokenBuckets[str] = TokenBuckets(
            1 / interval if interval > 0 else 1.0, 1, clock=clock
        )
        self._turns: dict[str, str] = {}

    def _on_request(self, _: str, csr: JSON, __: JSON | None) -> None:
        labels = csr["metadata"].get("labels") or {}
        consumer, slice_name = (
            labels.get(REMOTE_CLUSTER_ID_LABEL),
            labels.get(RESOURCE_SLICE_NAME_LABEL),
        )
        if consumer and slice_name:
            self.controller.enqueue(f"{tenant_namespace(consumer)}/{slice_name}")

    def _on_slice(self, event: str, resource_slice: JSON, old: JSON | None) -> None:
        self.controller.enqueue(object_key(resource_slice))
        going = event == DELETED or (
            resource_slice["metadata"].get("deletionTimestamp")
            and not ((old or {}).get("metadata") or {}).get("deletionTimestamp")
        )
        if going:
            namespace = resource_slice["metadata"].get("namespace") or ""
            self._enqueue_next(namespace)

    def _enqueue_next(self, namespace: str) -> None:
        """Room made in tenant namespace `namespace`: the consumer's slices it goes to looked
        at again, not all those waiting (thousands, each place freed)."""
        for resource_slice in self._line(namespace).next:
            self.controller.enqueue(object_key(resource_slice))

    def _on_shadow_pod(self, event: str, shadow_pod: JSON, old: JSON | None) -> None:
        """The last ShadowPod of an identity: the place it held, if its slice is gone, is
        free."""
        for value in twin_stamps_gone(event, shadow_pod, old):
            twin, stamp = value.split("/", 1)
            if self.shadow_pods.store.count_by_index(CREATOR_INDEX, stamp):
                continue
            if consumer := consumer_of_namespace(self.namespaces.store.get(twin)):
                self._enqueue_next(tenant_namespace(consumer))

    def _on_quota(self, event: str, quota: JSON, _: JSON | None) -> None:
        """A Quota gone: its slice looked at again, and its Quota made again unless the slice
        is gone or going (then it was this controller that deleted it)."""
        if event != DELETED:
            return
        namespace = quota["metadata"].get("namespace") or ""
        slice_name = (quota["metadata"].get("labels") or {}).get(RESOURCE_SLICE_NAME_LABEL)
        if slice_name and (path := quota_path(namespace, slice_name)) is not None:
            self.applied.forget(path)
            self.controller.enqueue(f"{namespace}/{slice_name}")

    def _on_namespace(self, event: str, namespace: JSON, old: JSON | None) -> None:
        labels = namespace["metadata"].get("labels") or {}
        was = ((old or {}).get("metadata") or {}).get("labels") or {}
        if labels.get(TENANT_MAX_RESOURCE_SLICES_LABEL) != was.get(
            TENANT_MAX_RESOURCE_SLICES_LABEL
        ):
            for resource_slice in self.slices.store.by_index(
                "namespace", namespace["metadata"]["name"]
            ):
                self.controller.enqueue(object_key(resource_slice))

    async def run(self) -> None:
        self.slices.add_handler(self._on_slice)
        self.requests.add_handler(self._on_request)
        self.namespaces.add_handler(self._on_namespace)
        self.quotas.add_handler(self._on_quota)
        self.shadow_pods.add_handler(self._on_shadow_pod)
        for classes in (self.storage_classes, self.ingress_classes, self.tenants):
            classes.add_handler(self._on_classes)
        await run_with_informers(
            self.controller,
            self.slices,
            self.requests,
            self.storage_classes,
            self.ingress_classes,
            self.tenants,
            self.namespaces,
            self.quotas,
            self.shadow_pods,
        )

    def _allowed(self, namespace: str) -> int:
        """How many of its slices the consumer of tenant namespace `namespace` gets answered."""
        allowed, problem = tenant_limit(
            self.namespaces.store.get(namespace),
            TENANT_MAX_RESOURCE_SLICES_LABEL,
            self.settings.max_resource_slices,
        )
        if problem is not None and self._said.get(namespace) != problem:
            self._said[namespace] = problem
            log.warning("tenant namespace label ignored", namespace=namespace, problem=problem)
        return allowed

    def _holds_place(self, resource_slice: JSON) -> bool:
        """Answered, or its identity being signed (its request made)."""
        if is_answered(resource_slice):
            return True
        consumer = (resource_slice.get("spec") or {}).get("consumerClusterID") or ""
        request = resource_slice_user(consumer, resource_slice["metadata"]["name"])
        return self.requests.store.get(request) is not None

    def _draining(self, namespace: str, slices: list[JSON]) -> set[str]:
        """The creator stamps of the identities of tenant namespace `namespace`'s consumer
        that ShadowPods in its twins carry, but none of its `slices` (deleted, being deleted,
        or out of view) is: their pods not gone yet (the virtual node drains them, or the
        provider deletes them once their grace is up). Whether the Quota is gone yet does not
        matter: the room a slice going makes is given before its Quota is deleted. A slice
        made again under the same name is that identity, counted as a slice."""
        consumer = tenant_of_namespace(namespace)
        if consumer is None:
            return set()
        live = {
            creator_label_value(resource_slice_user(consumer, s["metadata"]["name"]))
            for s in slices
            if not s["metadata"].get("deletionTimestamp")
        }
        draining: set[str] = set()
        # One value per twin and identity with ShadowPods there, the provider's whole: tens
        # to hundreds, not its thousands of ShadowPods.
        for value in self.shadow_pods.store.index_values(STAMPS_BY_TWIN):
            twin, stamp = value.split("/", 1)
            if (
                stamp not in live
                and consumer_of_namespace(self.namespaces.store.get(twin)) == consumer
            ):
                draining.add(stamp)
        return draining

    def _line(self, namespace: str) -> SliceLine:
        """Where the slices of tenant namespace `namespace` stand against its consumer's count
        (`_allowed`), its identities draining (`_draining`) holding places of it."""
        slices = self.slices.store.by_index("namespace", namespace)
        draining = len(self._draining(namespace, slices))
        return slice_line(slices, self._allowed(namespace), self._holds_place, draining)

    def _past_count(
        self, resource_slice: JSON, line: SliceLine, namespace: str, consumer: str
    ) -> str | None:
        """Why the slice is past what its consumer gets answered at once, or None."""
        name = resource_slice["metadata"]["name"]
        if all(s["metadata"]["name"] != name for s in line.waiting):
            return None
        message = (
            f"{consumer} has the {line.allowed} ResourceSlices this provider answers for it at "
            "once: delete one first, or ask the provider's administrator for more (label "
            f"{TENANT_MAX_RESOURCE_SLICES_LABEL} on {namespace})"
        )
        if line.draining:
            message += (
                f". {line.draining} of them are deleted slices whose offloaded pods are not "
                "gone yet: each place comes back once its pods are (its virtual node drains "
                "them, or the provider deletes them when its grace is up)"
            )
        return message

    def _held_back(
        self,
        resource_slice: JSON,
        namespace: str,
        consumer: str,
        tenant: JSON | None,
        leaving: bool,
    ) -> HeldBack | None:
        """Why the slice is not answered now though nothing is wrong with it (past its
        consumer's count, or its new slices' pace), or None."""
        line = self._line(namespace)
        if past_count := self._past_count(resource_slice, line, namespace, consumer):
            return HeldBack(REASON_COUNT_EXCEEDED, past_count)
        if leaving or tenant_condition(tenant) is not TenantCondition.ACTIVE:
            return None  # no new Quota is made: nothing to pace
        wait = self._new_slice_wait(resource_slice, line, namespace, consumer)
        if wait is None:
            return None
        # Said the same at each look (the time left would be a status write each).
        return HeldBack(
            REASON_RATE_LIMITED,
            f"{consumer} had its {self._allowed(namespace)} new ResourceSlices answered at "
            f"once, and gets one more every {self.settings.new_slice_interval:g} s (the "
            "provider's --new-resource-slice-interval): this one is answered when its turn "
            "comes, on its own",
            retry=wait,
        )

    def _is_new(self, resource_slice: JSON, namespace: str, consumer: str) -> bool:
        """Whether the slice waits for a turn of its consumer's new slices: it is the
        consumer's, took no turn, holds no place, and has no Quota (cached: after a
        restart)."""
        metadata = resource_slice["metadata"]
        if (resource_slice.get("spec") or {}).get("consumerClusterID") != consumer:
            return False  # refused, never answered: it takes no turn
        if self._turns.get(f"{namespace}/{metadata['name']}") == metadata.get("uid"):
            return False
        user = resource_slice_user(consumer, metadata["name"])
        return not (
            self._holds_place(resource_slice) or self.quotas.store.get(f"{namespace}/{user}")
        )

    def _new_slice_wait(
        self, resource_slice: JSON, line: SliceLine, namespace: str, consumer: str
    ) -> float | None:
        """How long the slice waits for its turn among its consumer's new slices (None: it
        need not, or its turn was there, taken now). The turns go the oldest first, as the
        count's room does (`line.next`): a slice looked at when a turn comes leaves it to an
        older one waiting, which is looked at again now."""
        if self.settings.new_slice_interval <= 0 or not self._is_new(
            resource_slice, namespace, consumer
        ):
            return None
        bucket = self._new_slices[namespace]
        bucket.resize(self._allowed(namespace))  # as its tenant namespace's label says now
        uid = resource_slice["metadata"].get("uid")
        ahead = [s for s in line.next if self._is_new(s, namespace, consumer)]
        place = next((i for i, s in enumerate(ahead) if s["metadata"].get("uid") == uid), 0)
        if place > 0 and (wait := bucket.wait(place + 1)) > 0:
            # Turns there are the older slices'.
            if bucket.wait() == 0:
                self.controller.enqueue(object_key(ahead[0]))
            return wait
        wait = bucket.take()
        if wait > 0:
            return wait
        self._turns[f"{namespace}/{resource_slice['metadata']['name']}"] = uid or ""
        return None

    def _on_classes(self, *_: Any) -> None:
        for resource_slice in self.slices.store.objects():
            self.controller.enqueue(object_key(resource_slice))

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        assert namespace is not None
        resource_slice = self.slices.store.get(key)
        if resource_slice is None or resource_slice["metadata"].get("deletionTimestamp"):
            # Its Quota goes now, not when the slice is gone (owner reference): a slice
            # kept by a finalizer of the consumer's, or out of view with its replica label
            # removed, would keep its Quota and leave room for one more. What was applied of
            # it is forgotten (kept, each slice created and deleted would stay held); a
            # request not yet done goes too.
            self._turns.pop(key, None)
            if (path := quota_path(namespace, name)) is not None:
                self.applied.forget(path)
                with contextlib.suppress(NotFound):
                    await self.client.delete(path)
            for request in self.requests.store.objects():
                labels = request["metadata"].get("labels") or {}
                if (
                    labels.get(RESOURCE_SLICE_NAME_LABEL) == name
                    and tenant_namespace(labels.get(REMOTE_CLUSTER_ID_LABEL, "")) == namespace
                ):
                    await self._delete_request(
                        resource_path(
                            CSR_API, "certificatesigningrequests", name=request["metadata"]["name"]
                        )
                    )
            return Result()
        now = datetime.datetime.now(datetime.UTC)
        spec = resource_slice.get("spec") or {}
        status: JSON = dict(resource_slice.get("status") or {})
        consumer = spec.get("consumerClusterID") or ""
        retry: float | None = None
        held_back = None
        tenant = self.tenants.store.get(f"{namespace}/{consumer}") if consumer else None
        # A Tenant being deleted is the peering ending: none of its slices is answered any
        # more (its answered ones going would make room for those waiting, each an identity
        # signed and a Quota made on the way out).
        leaving = bool(tenant and tenant["metadata"].get("deletionTimestamp"))
        if namespace != tenant_namespace(consumer):
            status["conditions"] = set_condition(
                status.get("conditions"),
                AUTHENTICATION,
                DENIED,
                "ResourceSliceAuthenticationDenied",
                f"spec.consumerClusterID {consumer!r} is not the consumer of namespace {namespace}",
                now,
            )
        elif held_back := self._held_back(resource_slice, namespace, consumer, tenant, leaving):
            # Resources are denied only of the default class: another's are its controller's
            # to write (no Quota is made of them meanwhile, below).
            granted_here = (spec.get("class") or DEFAULT_RESOURCE_SLICE_CLASS) == (
                DEFAULT_RESOURCE_SLICE_CLASS
            )
            for kind in (AUTHENTICATION, RESOURCES) if granted_here else (AUTHENTICATION,):
                status["conditions"] = set_condition(
                    status.get("conditions"), kind, DENIED, held_back.reason, held_back.message, now
                )
            retry = held_back.retry
            if granted_here:
                # What its first version was granted (before the consumer wrote its ID).
                for key in ("resources", "nodeLabels", *CLASS_FIELDS):
                    status[key] = None
        elif spec.get("csr") and not leaving:
            retry = await self._authenticate(resource_slice, consumer, status, now)
        slice_class = spec.get("class") or DEFAULT_RESOURCE_SLICE_CLASS
        condition = tenant_condition(tenant)
        if condition is not TenantCondition.ACTIVE and (
            condition is TenantCondition.DRAINED
            or condition_status({"status": status}, RESOURCES) != ACCEPTED
        ):
            # Cordoned: what was granted stays, nothing new is. Drained: nothing stays.
            status["conditions"] = set_condition(
                status.get("conditions"),
                RESOURCES,
                DENIED,
                "ResourceSliceResourcesDenied",
                f"the provider has {condition.value.lower()} tenant {consumer}: it grants "
                "no resources until the tenant is uncordoned",
                now,
            )
        elif slice_class == DEFAULT_RESOURCE_SLICE_CLASS and not held_back and not leaving:
            self._grant_resources(spec, status, now)
        current = resource_slice.get("status") or {}
        if {k: v for k, v in status.items() if v is not None} != current:
            await self.client.merge_patch(
                resource_path(
                    ResourceSlice.group_version(),
                    ResourceSlice.PLURAL,
                    namespace=namespace,
                    name=name,
                    subresource="status",
                ),
                {"status": status},
            )
        granted = status.get("resources")
        accepted = condition_status({"status": status}, RESOURCES) == ACCEPTED
        path = quota_path(namespace, name)
        # A cordoned or drained tenant's Quota stays, cordoned: it keeps counting what runs.
        # Only for the consumer whose tenant namespace the slice is in (`quota_path`): of
        # another's ID, a Quota would name that consumer's identity, and every Quota naming an
        # identity must admit its pods.
        if (
            granted
            and path is not None
            and not held_back
            and not leaving
            and consumer == tenant_of_namespace(namespace)
            and (accepted or condition is not TenantCondition.ACTIVE)
        ):
            quota = forge_quota(
                resource_slice,
                resource_slice_user(consumer, name),
                granted,
                self.settings.limits_enforcement,
                cordoned=is_cordoned(resource_slice, tenant),
            )
            await self.applied.apply(path, quota)
        return Result(requeue_after=retry)

    def _grant_resources(self, spec: JSON, status: JSON, now: datetime.datetime) -> None:
        try:
            granted = granted_resources(spec.get("resources"), self.settings.default_resources)
        except ValueError as error:
            status["conditions"] = set_condition(
                status.get("conditions"),
                RESOURCES,
                DENIED,
                "ResourceSliceResourcesDenied",
                str(error),
                now,
            )
            return
        status["resources"] = granted
        status["nodeLabels"] = dict(self.settings.cluster_labels)
        offered = offered_classes(
            self.storage_classes.store.objects(),
            self.ingress_classes.store.objects(),
            self.settings.load_balancer_classes,
        )
        for key in CLASS_FIELDS:
            # None: a class no longer offered is removed (the status is merge-patched).
            status[key] = offered.get(key)
        status["conditions"] = set_condition(
            status.get("conditions"),
            RESOURCES,
            ACCEPTED,
            "ResourceSliceResourcesAccepted",
            "the provider grants the resources of the default class",
            now,
        )

    async def _authenticate(
        self, resource_slice: JSON, consumer: str, status: JSON, now: datetime.datetime
    ) -> float | None:
        """Signs the slice's CSR through this cluster's CSR API; returns when to look again
        while the certificate is not issued yet."""
        name = resource_slice["metadata"]["name"]
        csr_pem = base64.b64decode(resource_slice["spec"]["csr"])
        reason = slice_request_verdict(csr_pem, consumer, name)
        if reason is not None:
            status["conditions"] = set_condition(
                status.get("conditions"),
                AUTHENTICATION,
                DENIED,
                "ResourceSliceAuthenticationDenied",
                reason,
                now,
            )
            return None
        params = status.get("authParams") or {}
        signed = base64.b64decode(params.get("signedCRT") or "")
        request_name = resource_slice_user(consumer, name)
        path = resource_path(CSR_API, "certificatesigningrequests", name=request_name)
        if signed and certificate_usable(signed, csr_pem, now):
            if self.requests.store.get(request_name) is not None:
                await self._delete_request(path)  # one made again before the status showed
            return None
        request = self.requests.store.get(request_name)
        if request is not None and base64.b64decode(request["spec"]["request"]) != csr_pem:
            await self._delete_request(path)  # a new key: a new request
            request = None
        if request is None:
            request = await self.client.create(
                resource_path(CSR_API, "certificatesigningrequests"),
                forge_signing_request(request_name, csr_pem, consumer, name),
            )
        if not decided(request):
            await self.client.replace(
                f"{path}/approval",
                forge_approval(
                    request,
                    "ResourceSliceIdentity",
                    f"vk approved the identity of ResourceSlice {name} of {consumer}",
                    now,
                ),
            )
            return 1.0
        certificate = (request.get("status") or {}).get("certificate")
        if not certificate:
            return 1.0
        status["authParams"] = {
            "ca": base64.b64encode(self.settings.ca_pem).decode(),
            "signedCRT": certificate,
            "apiServer": self.settings.api_server_url,
        }
        # Issued and copied into the slice: the request has done its work (kube-controller-
        # manager would keep it an hour; unpeering must leave nothing behind).
        await self._delete_request(path)
        status["conditions"] = set_condition(
            status.get("conditions"),
            AUTHENTICATION,
            ACCEPTED,
            "ResourceSliceAuthenticationAccepted",
            f"the provider signed the identity {request_name}",
            now,
        )
        return None

    async def _delete_request(self, path: str) -> None:
        with contextlib.suppress(NotFound):
            await self.client.delete(path)
