"""The provider's bounds on what a consumer's control-plane identity keeps in its tenant
namespace: pure decisions, no I/O.

That identity creates the consumer's ResourceSlices and NamespaceMaps there (its Role,
`forge_control_plane_rbac`), which the provider's etcd stores and its controllers read. RBAC
says where, not how many nor how large: unbounded, one consumer could fill the provider's etcd
(1.5 MiB an object) until its API server refuses every write of every tenant, or grow the
ResourceSlice controller's work as the square of its slices. So, of one consumer, at most:

- ResourceSlices: twice as many as the provider answers for it (`--max-resource-slices-per-
  consumer`, or its tenant namespace's label): as many may wait for room as are answered.
  Each at most 64 KiB: one is about 3 KiB, its status included;
- NamespaceMaps: 16 (a consumer makes one per provider, named after it), each at most 512 KiB
  (thousands of mappings: more than any count of twin namespaces a provider would allow).

So 16 MiB at most of the provider's etcd, at the defaults. What is counted are the consumer's
replicas (labelled `liqo.io/replicated=true`), not the objects the provider makes in that
namespace itself (when it consumes from that cluster in turn): the identity may write only
replicas, and may not take the label off one, so none escapes the count. Only that identity's
writes are judged (the webhook is called for its user alone, and checks it again); an update
that does not make an object larger is never refused for its size, so that one made before
these bounds can still lose its finalizer.
"""

from __future__ import annotations

from dataclasses import dataclass

from vk.api.authentication import ResourceSlice
from vk.api.constants import (
    REPLICATED_LABEL,
    TENANT_MAX_RESOURCE_SLICES_LABEL,
    control_plane_user,
    tenant_namespace,
)
from vk.api.jsondata import as_mapping
from vk.api.offloading import NamespaceMap
from vk.webhooks.quota import ALLOWED, Decision, deny

# What the user of every consumer's control-plane identity starts with.
CONTROL_PLANE_USER_PREFIX = control_plane_user("")
# A consumer's ResourceSlices kept for each one the provider answers for it at once.
SLICES_HELD_PER_ANSWERED = 2
MAX_NAMESPACE_MAPS = 16


@dataclass(frozen=True)
class TenantObjectKind:
    kind: str
    plural: str
    max_bytes: int
    # What to do when there are too many ({namespace}: the tenant namespace).
    advice: str


RESOURCE_SLICES = TenantObjectKind(
    ResourceSlice.KIND,
    ResourceSlice.PLURAL,
    64 * 1024,
    "delete one first, or ask the provider's administrator to answer more at once (label "
    f"{TENANT_MAX_RESOURCE_SLICES_LABEL} on {{namespace}}: twice as many may be kept)",
)
NAMESPACE_MAPS = TenantObjectKind(
    NamespaceMap.KIND,
    NamespaceMap.PLURAL,
    512 * 1024,
    "delete one first (a consumer needs one for each provider)",
)
TENANT_OBJECT_KINDS = {kind.plural: kind for kind in (RESOURCE_SLICES, NAMESPACE_MAPS)}


def control_plane_consumer(username: str) -> str | None:
    """The consumer whose control-plane identity `username` is, or None for anyone else."""
    if not username.startswith(CONTROL_PLANE_USER_PREFIX):
        return None
    return username[len(CONTROL_PLANE_USER_PREFIX) :] or None


def held_resource_slices(answered: int) -> int:
    """The ResourceSlices a consumer may keep in its tenant namespace, `answered` of which the
    provider answers at once."""
    return answered * SLICES_HELD_PER_ANSWERED


def is_replica(obj: object) -> bool:
    """Whether `obj` is labelled as a consumer's replica."""
    labels = as_mapping(as_mapping(as_mapping(obj).get("metadata")).get("labels"))
    return labels.get(REPLICATED_LABEL) == "true"


def review_tenant_object(
    kind: TenantObjectKind,
    *,
    consumer: str,
    namespace: str,
    obj: object,
    old: object | None,
    size: int,
    old_size: int | None,
    held: int,
    limit: int,
) -> Decision:
    """Whether `consumer`'s control-plane identity may create (`old` None) or update (`old`,
    its stored version) `obj`, an object of `kind` in `namespace`, JSON of `size` bytes
    (`old_size`: the stored version's), while `held` replicas of that kind are there and it may
    keep `limit`."""
    home = tenant_namespace(consumer)
    if namespace != home:
        return deny(
            f"{consumer}'s control plane keeps its {kind.plural} in its tenant namespace {home} "
            f"on this provider, not in {namespace or 'no namespace'}"
        )
    if not is_replica(obj) and (old is None or is_replica(old)):
        return deny(
            f"{consumer}'s control plane writes only its replicas here: a {kind.kind} labelled "
            f"{REPLICATED_LABEL}=true, which it keeps"
        )
    if size > kind.max_bytes and (old_size is None or size > old_size):
        return deny(
            f"a {kind.kind} of {size} bytes: this provider keeps its consumers' up to "
            f"{kind.max_bytes} bytes each"
        )
    if old is None and held >= limit:
        return deny(
            f"{consumer} has the {held} {kind.plural} this provider keeps for it (at most "
            f"{limit}): {kind.advice.format(namespace=home)}"
        )
    return ALLOWED
