"""What a consumer's control-plane identity may keep in its tenant namespace on a provider
(`vk.webhooks.tenancy`, `TenantObjectAdmission`): each test is that identity's attempt to take
more of the provider's etcd than its bounds."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from vk.api.constants import (
    REPLICATED_LABEL,
    TENANT_MAX_RESOURCE_SLICES_LABEL,
    control_plane_user,
    resource_slice_user,
    tenant_namespace,
)
from vk.kube.informer import Store
from vk.webhooks.admission import (
    NOT_READY_TENANT_OBJECTS,
    REPLICAS_BY_NAMESPACE,
    RESERVATION_SECONDS,
    TenantObjectAdmission,
    as_counted,
    forge_review_response,
    replicas_by_namespace,
)
from vk.webhooks.tenancy import (
    MAX_NAMESPACE_MAPS,
    NAMESPACE_MAPS,
    RESOURCE_SLICES,
    control_plane_consumer,
)

JSON = dict[str, Any]
CONSUMER = "venice"
TENANT = tenant_namespace(CONSUMER)
CONTROL_PLANE = control_plane_user(CONSUMER)
uids = (f"uid-{n}" for n in itertools.count())
REPLICA = {REPLICATED_LABEL: "true"}


class Provider:
    """The webhook's caches of one provider, and its tenant-object admission over them."""

    def __init__(self, *, answered: int = 2, tenant_labels: dict[str, str] | None = None) -> None:
        self.caches = {
            kind.plural: Store({REPLICAS_BY_NAMESPACE: replicas_by_namespace})
            for kind in (RESOURCE_SLICES, NAMESPACE_MAPS)
        }
        # name -> the UID the API server gave the object of that name it made last
        self.made: dict[tuple[str, str], str] = {}
        self.namespaces = Store()
        self.namespaces.upsert({"metadata": {"name": TENANT, "labels": dict(tenant_labels or {})}})
        self.synced = True
        self.clock = 1000.0
        self.admission = TenantObjectAdmission(
            self.caches,
            self.namespaces,
            following=lambda: self.synced,
            max_resource_slices=answered,
            now=lambda: self.clock,
        )

        self.shown = {plural: self.admission.shown(plural) for plural in self.caches}

    def cached(
        self, plural: str, name: str, namespace: str = TENANT, *, replica: bool = True
    ) -> None:
        """The informer takes in the object of that name the API server made last (as its keep
        leaves it), and tells its handler."""
        uid = self.made.get((plural, name)) or next(uids)
        labels = {"any": "thing", **(REPLICA if replica else {})}
        obj = {"metadata": {"name": name, "namespace": namespace, "uid": uid, "labels": labels}}
        kept = as_counted(obj)
        self.shown[plural](
            "ADDED" if self.caches[plural].upsert(kept) is None else "MODIFIED", kept, None
        )

    def gone(self, plural: str, name: str, namespace: str = TENANT) -> None:
        gone = self.caches[plural].delete(f"{namespace}/{name}")
        assert gone is not None
        self.shown[plural]("DELETED", gone, gone)

    def write(
        self,
        plural: str,
        name: str,
        *,
        user: str = CONTROL_PLANE,
        operation: str = "CREATE",
        namespace: str = TENANT,
        obj: JSON | None = None,
        old: JSON | None = None,
        dry_run: bool = False,
    ) -> tuple[bool, str]:
        """The API server's review of a write (the object it made, on a creation, has its UID)."""
        uid = next(uids)
        obj = obj if obj is not None else {"metadata": {"name": name, "labels": dict(REPLICA)}}
        obj["metadata"].setdefault("uid", uid)
        request: JSON = {
            "uid": uid,
            "operation": operation,
            "resource": {"resource": plural},
            "namespace": namespace,
            "name": name,
            "userInfo": {"username": user},
            "object": obj,
            "dryRun": dry_run,
        }
        if operation == "UPDATE":
            request["oldObject"] = old if old is not None else obj
        answer = self.admission.validate(request)
        if answer.decision.allowed and operation == "CREATE" and not dry_run:
            self.made[(plural, name)] = obj["metadata"]["uid"]
        return answer.decision.allowed, answer.decision.message


def padded(name: str, size: int) -> JSON:
    """A replica named `name` of about `size` bytes of JSON (its UID and label included)."""
    return {
        "metadata": {
            "name": name,
            "uid": "u" * 16,
            "labels": dict(REPLICA),
            "annotations": {"pad": "x" * size},
        }
    }


def test_only_a_consumers_control_plane_user_names_a_consumer() -> None:
    assert control_plane_consumer(CONTROL_PLANE) == CONSUMER
    for user in (
        "vk-control-plane:",
        "system:admin",
        resource_slice_user(CONSUMER, "mypool"),
        f"system:serviceaccount:vk:{CONTROL_PLANE}",
        "vk-tenant:venice",
    ):
        assert control_plane_consumer(user) is None


def test_slices_past_twice_those_answered_are_refused_whatever_their_labels() -> None:
    provider = Provider(answered=2)
    provider.cached("resourceslices", "naples")  # a label the consumer wrote changes nothing
    for name in ("a", "b", "c"):
        allowed, _ = provider.write("resourceslices", name)
        assert allowed
    allowed, message = provider.write("resourceslices", "d")
    assert not allowed
    assert message == (
        "venice has the 4 resourceslices this provider keeps for it (at most 4): delete one "
        "first, or ask the provider's administrator to answer more at once (label "
        f"{TENANT_MAX_RESOURCE_SLICES_LABEL} on {TENANT}: twice as many may be kept)"
    )


def test_a_burst_before_the_cache_shows_any_is_counted_whole() -> None:
    provider = Provider(answered=5)
    admitted = [provider.write("resourceslices", f"s{n}")[0] for n in range(50)]
    assert admitted.count(True) == 10
    # The cache showing them does not count them twice.
    for n in range(10):
        provider.cached("resourceslices", f"s{n}")
    assert not provider.write("resourceslices", "late")[0]
    provider.gone("resourceslices", "s0")
    assert provider.write("resourceslices", "late")[0]


def test_a_dry_run_is_judged_and_holds_no_place() -> None:
    provider = Provider(answered=1)
    provider.cached("resourceslices", "a")
    for _ in range(3):
        assert provider.write("resourceslices", "b", dry_run=True)[0]
    assert provider.write("resourceslices", "b")[0]
    assert not provider.write("resourceslices", "c", dry_run=True)[0]


def test_one_made_and_deleted_between_two_creations_is_not_counted() -> None:
    provider = Provider(answered=1)
    assert provider.write("resourceslices", "a")[0]
    assert provider.write("resourceslices", "b")[0]
    provider.cached("resourceslices", "a")
    provider.gone("resourceslices", "a")
    assert provider.write("resourceslices", "c")[0]
    assert not provider.write("resourceslices", "d")[0]


def test_an_admission_the_api_server_did_not_make_gives_its_place_back_in_time() -> None:
    provider = Provider(answered=1)
    assert provider.write("resourceslices", "a")[0]
    assert provider.write("resourceslices", "b")[0]
    assert not provider.write("resourceslices", "c")[0]
    provider.clock += RESERVATION_SECONDS  # neither ever came (another webhook refused them)
    assert provider.write("resourceslices", "c")[0]


def test_the_tenant_namespaces_label_sets_how_many_are_answered_and_so_kept() -> None:
    raised = Provider(answered=1, tenant_labels={TENANT_MAX_RESOURCE_SLICES_LABEL: "3"})
    assert [raised.write("resourceslices", f"s{n}")[0] for n in range(7)].count(True) == 6
    nonsense = Provider(answered=1, tenant_labels={TENANT_MAX_RESOURCE_SLICES_LABEL: "-5"})
    assert [nonsense.write("resourceslices", f"s{n}")[0] for n in range(7)].count(True) == 2
    none = Provider(answered=1, tenant_labels={TENANT_MAX_RESOURCE_SLICES_LABEL: "0"})
    assert not none.write("resourceslices", "s")[0]


def test_namespace_maps_past_their_count_are_refused() -> None:
    provider = Provider()
    for n in range(MAX_NAMESPACE_MAPS):
        provider.cached("namespacemaps", f"m{n}")
    allowed, message = provider.write("namespacemaps", "one-more")
    assert not allowed
    assert message == (
        f"venice has the {MAX_NAMESPACE_MAPS} namespacemaps this provider keeps for it (at most "
        f"{MAX_NAMESPACE_MAPS}): delete one first (a consumer needs one for each provider)"
    )
    # Slices are counted apart.
    assert provider.write("resourceslices", "m0")[0]


def test_objects_elsewhere_do_not_count_and_writes_elsewhere_are_refused() -> None:
    provider = Provider(answered=1)
    for n in range(10):
        provider.cached("resourceslices", f"x{n}", namespace=tenant_namespace("florence"))
    assert provider.write("resourceslices", "mine")[0]
    allowed, message = provider.write(
        "resourceslices", "theirs", namespace=tenant_namespace("florence")
    )
    assert not allowed
    assert message == (
        "venice's control plane keeps its resourceslices in its tenant namespace "
        "liqo-tenant-venice on this provider, not in liqo-tenant-florence"
    )


@pytest.mark.parametrize("kind", [RESOURCE_SLICES, NAMESPACE_MAPS])
def test_an_object_larger_than_its_bound_is_refused_and_one_made_before_may_shrink(
    kind: Any,
) -> None:
    provider = Provider()
    fits = padded("a", kind.max_bytes - 200)
    assert provider.write(kind.plural, "a", obj=fits)[0]
    big = padded("b", kind.max_bytes)
    allowed, message = provider.write(kind.plural, "b", obj=big)
    assert not allowed
    assert message.startswith(f"a {kind.kind} of {kind.max_bytes + 114} bytes: this provider ")
    # Grown past the bound by an update: refused too.
    assert not provider.write(kind.plural, "a", operation="UPDATE", obj=big, old=fits)[0]
    # One stored before the bound (or by someone else): updates that do not grow it pass (its
    # finalizer removed), one that grows it does not.
    bigger = padded("b", kind.max_bytes + 100)
    assert provider.write(kind.plural, "b", operation="UPDATE", obj=big, old=bigger)[0]
    assert not provider.write(kind.plural, "b", operation="UPDATE", obj=bigger, old=big)[0]


def test_an_object_that_cannot_be_measured_is_refused() -> None:
    deep: JSON = {}
    nested = deep
    for _ in range(300):  # past orjson's depth
        nested["x"] = {}
        nested = nested["x"]
    obj = {"metadata": {"name": "deep"}, "spec": deep}
    assert not Provider().write("resourceslices", "deep", obj=obj)[0]


def test_updates_are_never_counted() -> None:
    provider = Provider(answered=1)
    for name in ("a", "b"):
        provider.cached("resourceslices", name)
    assert not provider.write("resourceslices", "c")[0]
    assert provider.write("resourceslices", "a", operation="UPDATE", old={"metadata": {}})[0]


def test_anyone_but_a_control_plane_and_other_kinds_are_not_judged_here() -> None:
    provider = Provider(answered=0)
    for user in ("system:admin", "system:serviceaccount:vk:vk-controller-manager"):
        assert provider.write("resourceslices", "own", user=user, namespace="anywhere")[0]
    assert provider.write("tenants", "venice")[0]
    assert provider.write("resourceslices", "a", operation="DELETE")[0]


def test_until_its_caches_are_synced_creations_wait_and_updates_are_still_bounded() -> None:
    provider = Provider()
    provider.synced = False
    assert provider.write("resourceslices", "a") == (False, NOT_READY_TENANT_OBJECTS)
    big = padded("a", RESOURCE_SLICES.max_bytes)
    old = padded("a", 10)
    assert not provider.write("resourceslices", "a", operation="UPDATE", obj=big, old=old)[0]
    assert provider.write("resourceslices", "a", operation="UPDATE", obj=old, old=old)[0]


def test_a_name_deleted_and_made_again_is_a_new_object_and_counted_as_one() -> None:
    """The old object's events (its deletion coming after the new one's admission) do not
    take the new one out of the count."""
    provider = Provider(answered=1)
    provider.cached("resourceslices", "a")
    assert provider.write("resourceslices", "a")[0]  # deleted at the API, and made again
    provider.gone("resourceslices", "a")  # the old one's deletion, seen now
    assert provider.write("resourceslices", "b")[0]
    assert not provider.write("resourceslices", "c")[0]
    provider.cached("resourceslices", "a")  # the new one, seen at last: still two
    assert not provider.write("resourceslices", "c")[0]


def test_only_replicas_are_written_and_counted() -> None:
    provider = Provider(answered=1)
    # The provider's own slices in that namespace (it consumes from venice too) count not.
    for n in range(5):
        provider.cached("resourceslices", f"own-{n}", replica=False)
    plain = {"metadata": {"name": "plain", "labels": {"any": "thing"}}}
    allowed, message = provider.write("resourceslices", "plain", obj=plain)
    assert not allowed
    assert message == (
        "venice's control plane writes only its replicas here: a ResourceSlice labelled "
        "liqo.io/replicated=true, which it keeps"
    )
    assert provider.write("resourceslices", "a")[0]
    assert provider.write("resourceslices", "b")[0]
    assert not provider.write("resourceslices", "c")[0]
    # Taking the label off a replica, to leave the count: refused.
    replica = {"metadata": {"name": "a", "labels": dict(REPLICA)}}
    unlabelled = {"metadata": {"name": "a", "labels": {}}}
    assert not provider.write(
        "resourceslices", "a", operation="UPDATE", obj=unlabelled, old=replica
    )[0]
    # One without it from before may still be updated (its finalizer removed).
    old = {"metadata": {"name": "own-0", "finalizers": ["f"]}}
    new = {"metadata": {"name": "own-0"}}
    assert provider.write("resourceslices", "own-0", operation="UPDATE", obj=new, old=old)[0]


def test_while_its_caches_do_not_follow_creations_are_asked_to_retry_as_unavailable() -> None:
    provider = Provider()
    provider.synced = False
    request = {
        "uid": "u",
        "operation": "CREATE",
        "resource": {"resource": "resourceslices"},
        "namespace": TENANT,
        "userInfo": {"username": CONTROL_PLANE},
        "object": {"metadata": {"name": "a", "labels": dict(REPLICA)}},
    }
    answer = provider.admission.validate(request)
    assert forge_review_response("u", answer)["response"]["status"] == {
        "code": 503,
        "reason": "ServiceUnavailable",
        "message": NOT_READY_TENANT_OBJECTS,
    }
