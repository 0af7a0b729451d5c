"""The provider's Quota enforcement: what a pod asks for, what a Quota admits, the creator stamp,
and the webhook's AdmissionReview answers on ShadowPods (over plain caches, and over real
HTTPS)."""

from __future__ import annotations

import asyncio
import base64
import datetime
import json
import re
import ssl
from decimal import Decimal
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from click.testing import CliRunner
from cryptography.hazmat.primitives import serialization

from tests.plain_manifests import installed
from tests.unit.serving_certificates import loopback_serving_certificate
from vk.api.constants import (
    CREATOR_USER_LABEL,
    NODENAME_LABEL,
    POD_SECURITY_ENFORCE_LABEL,
    REMOTE_CLUSTER_ID_LABEL,
    SHADOW_POD_FINALIZER,
    VIRTUAL_NODE_TAINT_KEY,
    resource_slice_user,
    tenant_group,
)
from vk.api.offloading import Quota
from vk.api.usage import (
    Ledger,
    creator_label_value,
    forge_counted_status,
    forge_reserved_status,
    holds_reservation,
    is_accounted,
    ledger_usage,
    next_expiry,
    pod_requests,
    pods_usage,
)
from vk.cli.components import webhook as webhook_command
from vk.controllers.local_processes import free_port
from vk.kube.client import Conflict, NotFound
from vk.kube.informer import Store
from vk.playground.pki import build_ca, issue
from vk.webhooks.admission import (
    REPLICAS_BY_NAMESPACE,
    USER_INDEX,
    Answer,
    OffloadingAdmission,
    ShadowPodAdmission,
    TenantObjectAdmission,
    forge_review_response,
    quota_as_read,
    quota_informer,
    quota_path,
    quota_user_index,
    replicas_by_namespace,
)
from vk.webhooks.configuration import (
    CONFIGURATION_NAME,
    MUTATE_PATH,
    NAMESPACE_MAP_WEBHOOK,
    OFFLOADING_WEBHOOK,
    PLACE_POD_PATH,
    PLACE_POD_WEBHOOK,
    RESOURCE_SLICE_WEBHOOK,
    SHADOW_POD_WEBHOOK,
    STAMP_WEBHOOK,
    VALIDATE_OFFLOADING_PATH,
    VALIDATE_PATH,
    VALIDATE_TENANT_OBJECT_PATH,
)
from vk.webhooks.quota import (
    Decision,
    deny,
    forge_creator_patch,
    review_creator_stamp,
    review_creator_update,
    review_pod,
)
from vk.webhooks.server import WebhookServer, serving_ssl_context
from vk.webhooks.shadowpods import TenantPodPolicy
from vk.webhooks.tenancy import CONTROL_PLANE_USER_PREFIX, TENANT_OBJECT_KINDS

JSON = dict[str, Any]
D = Decimal
USER = resource_slice_user("venice", "mypool")
GROUPS = [tenant_group("venice"), "system:authenticated"]


def container(name: str = "app", requests: JSON | None = None, limits: JSON | None = None) -> JSON:
    resources: JSON = {}
    if requests is not None:
        resources["requests"] = requests
    if limits is not None:
        resources["limits"] = limits
    return {"name": name, "image": "nginx", "resources": resources}


def pod(
    *containers: JSON,
    init: list[JSON] | None = None,
    name: str = "web",
    labels: JSON | None = None,
    **spec: Any,
) -> JSON:
    metadata: JSON = {"name": name, "namespace": "shop-venice"}
    if labels is not None:
        metadata["labels"] = labels
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {"containers": list(containers), "initContainers": init or [], **spec},
    }


def quota(
    resources: JSON | None = None,
    enforcement: str = "None",
    cordoned: bool | None = None,
    user: str = USER,
) -> Quota:
    return Quota.model_validate(quota_json(resources, enforcement, cordoned, user))


def quota_json(
    resources: JSON | None = None,
    enforcement: str = "None",
    cordoned: bool | None = None,
    user: str = USER,
) -> JSON:
    spec: JSON = {
        "user": user,
        "limitsEnforcement": enforcement,
        "resources": resources or {"cpu": "4", "memory": "8Gi", "pods": "110"},
    }
    if cordoned is not None:
        spec["cordoned"] = cordoned
    return {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "Quota",
        "metadata": {"name": user, "namespace": "liqo-tenant-venice"},
        "spec": spec,
    }


# --- What a pod asks for --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("the_pod", "expected"),
    [
        pytest.param(pod(container()), {}, id="no requests ask for nothing"),
        pytest.param(
            pod(container(requests={"cpu": "500m", "memory": "1Gi"})),
            {"cpu": D("0.5"), "memory": D(2**30)},
            id="one container",
        ),
        pytest.param(
            pod(
                container("a", requests={"cpu": "500m"}),
                container("b", requests={"cpu": "250m", "memory": "64Mi"}),
            ),
            {"cpu": D("0.75"), "memory": D(64 * 2**20)},
            id="containers are summed",
        ),
        pytest.param(
            pod(container(limits={"cpu": "1", "nvidia.com/gpu": "1"})),
            {"cpu": D(1), "nvidia.com/gpu": D(1)},
            id="a limit without a request asks for the limit",
        ),
        pytest.param(
            pod(
                container(requests={"cpu": "1", "memory": "1Gi"}),
                init=[container("migrate", requests={"cpu": "2", "memory": "512Mi"})],
            ),
            {"cpu": D(2), "memory": D(2**30)},
            id="the larger of containers and init containers, per resource",
        ),
        pytest.param(
            pod(
                container(requests={"cpu": "1"}),
                init=[
                    container("proxy", requests={"cpu": "500m"}) | {"restartPolicy": "Always"},
                    container("migrate", requests={"cpu": "1"}),
                ],
            ),
            {"cpu": D("1.5")},
            id="a sidecar runs beside the containers and the later init containers",
        ),
        pytest.param(
            pod(
                container(requests={"cpu": "1"}),
                overhead={"cpu": "250m", "memory": "120Mi"},
            ),
            {"cpu": D("1.25"), "memory": D(120 * 2**20)},
            id="the pod overhead is added",
        ),
        pytest.param(
            pod(
                container("a", requests={"memory": "1Gi"}),
                container("b"),
                resources={"requests": {"cpu": "2"}},
            ),
            {"cpu": D(2), "memory": D(2**30)},
            id="pod-level requests stand for the containers'",
        ),
        pytest.param(
            pod(container(requests={"cpu": "0", "memory": "1Mi"})),
            {"memory": D(2**20)},
            id="a zero request is no request",
        ),
    ],
)
def test_a_pod_asks_for_what_the_scheduler_reserves(the_pod: JSON, expected: JSON) -> None:
    assert pod_requests(the_pod) == expected


def test_usage_counts_each_pod_holding_resources_once() -> None:
    running = pod(container(requests={"cpu": "1"}), name="a") | {"status": {"phase": "Running"}}
    pending = pod(container(requests={"cpu": "500m"}), name="b")
    done = pod(container(requests={"cpu": "8"}), name="c") | {"status": {"phase": "Succeeded"}}
    failed = pod(container(requests={"cpu": "8"}), name="d") | {"status": {"phase": "Failed"}}
    deleting = pod(container(requests={"cpu": "8"}), name="e")
    deleting["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"

    # Until it is gone, a pod being deleted may still run: it counts.
    assert pods_usage([running, pending, done, failed, deleting]) == {
        "cpu": D("9.5"),
        "pods": D(3),
    }


# --- What a Quota admits --------------------------------------------------------------------

SMALL = {"cpu": "500m", "memory": "256Mi"}
GRANTED = {"cpu": "4", "memory": "8Gi", "pods": "110", "ephemeral-storage": "20Gi"}
NAME = f"liqo-tenant-venice/{USER}"


@pytest.mark.parametrize(
    ("the_pod", "the_quota", "used", "enforcement_enabled", "allowed", "says"),
    [
        pytest.param(
            pod(container(requests=SMALL)), quota(GRANTED), {}, True, True, [], id="within"
        ),
        pytest.param(
            pod(container()), quota(GRANTED), {}, True, True, [], id="None: no requests needed"
        ),
        pytest.param(
            pod(container(requests={"cpu": "1"})),
            quota(GRANTED),
            {"cpu": D("3.5"), "pods": D(3)},
            True,
            False,
            [f"exceed the Quota {NAME}", "cpu: asks 1, 3500m used, 4 allowed"],
            id="cpu beyond the quota",
        ),
        pytest.param(
            pod(container(requests={"cpu": "1"})),
            quota(GRANTED),
            {"cpu": D(3), "pods": D(3)},
            True,
            True,
            [],
            id="exactly the quota",
        ),
        pytest.param(
            pod(container(requests={"memory": "2Gi"})),
            quota(GRANTED),
            {"memory": D(7 * 2**30)},
            True,
            False,
            ["memory: asks 2Gi, 7Gi used, 8Gi allowed"],
            id="memory beyond the quota",
        ),
        pytest.param(
            pod(container()),
            quota(GRANTED),
            {"pods": D(110)},
            True,
            False,
            ["pods: asks 1, 110 used, 110 allowed"],
            id="one pod too many",
        ),
        pytest.param(
            pod(container(requests={"ephemeral-storage": "21Gi"})),
            quota(GRANTED),
            {},
            True,
            False,
            ["ephemeral-storage: asks 21Gi, 0 used, 20Gi allowed"],
            id="ephemeral storage",
        ),
        pytest.param(
            pod(container(limits={"nvidia.com/gpu": "1"})),
            quota(GRANTED),
            {},
            True,
            False,
            ["asks for nvidia.com/gpu, which the Quota", "does not grant"],
            id="a resource the quota lacks",
        ),
        pytest.param(
            pod(container(limits={"nvidia.com/gpu": "2"})),
            quota({**GRANTED, "nvidia.com/gpu": "2"}),
            {"nvidia.com/gpu": D(1)},
            True,
            False,
            ["nvidia.com/gpu: asks 2, 1 used, 2 allowed"],
            id="an extended resource beyond the quota",
        ),
        pytest.param(
            pod(container()),
            quota({"cpu": "4"}),
            {"pods": D(1000)},
            True,
            True,
            [],
            id="a quota without pods does not count them",
        ),
        pytest.param(
            pod(container(requests={"cpu": "1"})),
            quota(GRANTED, "Soft"),
            {},
            True,
            False,
            ["container app sets no memory request", "(limitsEnforcement Soft) requires"],
            id="Soft wants a memory request",
        ),
        pytest.param(
            pod(container(requests=SMALL)),
            quota(GRANTED, "Soft"),
            {},
            True,
            True,
            [],
            id="Soft is content with requests",
        ),
        pytest.param(
            pod(container(requests=SMALL), init=[container("init")]),
            quota(GRANTED, "Soft"),
            {},
            True,
            False,
            ["init container init sets no cpu request", "init container init sets no memory"],
            id="Soft wants requests on init containers too",
        ),
        pytest.param(
            pod(container(requests=SMALL)),
            quota(GRANTED, "Hard"),
            {},
            True,
            False,
            ["container app sets no cpu limit", "requests to equal its limits"],
            id="Hard wants limits",
        ),
        pytest.param(
            pod(container(requests=SMALL, limits={"cpu": "1", "memory": "256Mi"})),
            quota(GRANTED, "Hard"),
            {},
            True,
            False,
            ["container app requests 500m cpu but limits it to 1"],
            id="Hard wants requests equal to limits",
        ),
        pytest.param(
            pod(container(requests={"cpu": "1"}, limits={"cpu": "1000m", "memory": "1Gi"})),
            quota(GRANTED, "Hard"),
            {},
            True,
            True,
            [],
            id="Hard: equal quantities in any notation, requests defaulted from limits",
        ),
        pytest.param(
            pod(container(requests=SMALL)),
            quota(GRANTED, cordoned=True),
            {},
            True,
            False,
            [f"the Quota {NAME} is cordoned: ", "spec.cordoned"],
            id="a cordoned quota admits nothing",
        ),
        pytest.param(
            pod(container(requests={"cpu": "64"}, limits={"nvidia.com/gpu": "1"})),
            quota(GRANTED, "Hard"),
            {"cpu": D(4)},
            False,
            True,
            [],
            id="enforcement disabled admits beyond and without requests",
        ),
        pytest.param(
            pod(container()),
            quota(GRANTED, cordoned=True),
            {},
            False,
            False,
            ["is cordoned"],
            id="enforcement disabled still honours a cordon",
        ),
    ],
)
def test_a_quota_admits_a_pod_only_within_its_rules(
    the_pod: JSON,
    the_quota: Quota,
    used: dict[str, Decimal],
    enforcement_enabled: bool,
    allowed: bool,
    says: list[str],
) -> None:
    decision = review_pod(the_pod, the_quota, used, enforcement_enabled=enforcement_enabled)
    assert decision.allowed is allowed, decision.message
    for fragment in says:
        assert fragment in decision.message


# --- The creator stamp ----------------------------------------------------------------------


def test_a_slice_identity_is_its_own_label_value() -> None:
    assert creator_label_value(USER) == USER


@pytest.mark.parametrize(
    "user",
    ["system:serviceaccount:ns:sa", "a" * 64, "x" * 200 + ":y", "::::", "-leading-and-trailing-"],
)
def test_other_names_become_valid_distinct_label_values(user: str) -> None:
    value = creator_label_value(user)
    assert 0 < len(value) <= 63
    assert re.fullmatch(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]", value)  # Kubernetes'
    assert value == creator_label_value(user)
    assert value != creator_label_value(user + "2")


@pytest.mark.parametrize(
    ("labels", "patch"),
    [
        pytest.param(
            None,
            [{"op": "add", "path": "/metadata/labels", "value": {CREATOR_USER_LABEL: USER}}],
            id="no labels",
        ),
        pytest.param(
            {"app": "web"},
            [{"op": "add", "path": "/metadata/labels/liqo.io~1creator-user", "value": USER}],
            id="other labels",
        ),
        pytest.param(
            {CREATOR_USER_LABEL: "someone-else"},
            [{"op": "add", "path": "/metadata/labels/liqo.io~1creator-user", "value": USER}],
            id="a forged stamp is replaced",
        ),
        pytest.param({CREATOR_USER_LABEL: USER}, [], id="already stamped"),
    ],
)
def test_the_stamp_names_the_creating_identity(labels: JSON | None, patch: list[JSON]) -> None:
    assert forge_creator_patch(pod(container(), labels=labels), USER) == patch


@pytest.mark.parametrize(
    ("labels", "tenant", "allowed"),
    [
        ({CREATOR_USER_LABEL: USER}, True, True),
        (None, True, False),
        ({CREATOR_USER_LABEL: "other"}, True, False),
        (None, False, True),
        ({CREATOR_USER_LABEL: USER}, False, False),
    ],
)
def test_only_tenants_pods_carry_a_stamp_and_it_is_theirs(
    labels: JSON | None, tenant: bool, allowed: bool
) -> None:
    the_pod = pod(container(), labels=labels)
    assert review_creator_stamp(the_pod, USER if tenant else "admin", tenant).allowed is allowed


@pytest.mark.parametrize(
    ("old", "new", "allowed", "says"),
    [
        ({CREATOR_USER_LABEL: USER}, {CREATOR_USER_LABEL: USER, "x": "y"}, True, ""),
        ({"x": "y"}, {"x": "z"}, True, ""),
        ({CREATOR_USER_LABEL: USER}, {}, False, "cannot be removed"),
        ({CREATOR_USER_LABEL: USER}, {CREATOR_USER_LABEL: "b"}, False, "cannot be changed to 'b'"),
        ({}, {CREATOR_USER_LABEL: USER}, False, "cannot be added to an existing pod"),
    ],
)
def test_the_stamp_is_immutable(old: JSON, new: JSON, allowed: bool, says: str) -> None:
    decision = review_creator_update(pod(container(), labels=old), pod(container(), labels=new))
    assert decision.allowed is allowed
    assert says in decision.message


# --- The ledger in the Quota's status --------------------------------------------------------


def stamped(name: str, cpu: str, user: str = USER, **extra: Any) -> JSON:
    return pod(container(requests={"cpu": cpu}), name=name, labels={CREATOR_USER_LABEL: user}) | (
        extra
    )


NOW = datetime.datetime(2026, 11, 23, 12, 0, tzinfo=datetime.UTC)


def test_the_ledger_is_the_count_plus_every_reservation_until_the_recount_drops_it() -> None:
    used = {"used": {"cpu": "1", "pods": "1"}}
    status = forge_reserved_status(used, "ns/a", "uid-a", {"cpu": D(1)}, NOW)
    assert status["reservations"]["ns/a"] == {
        "uid": "uid-a",
        "resources": {"cpu": "1"},
        "expires": "2026-11-23T12:00:30Z",
    }
    assert ledger_usage(status, excluding=None) == {"cpu": D(2), "pods": D(1)}
    # The ShadowPod under review is not counted twice when its creation is retried.
    assert ledger_usage(status, excluding="ns/a") == {"cpu": D(1), "pods": D(1)}
    later = NOW + datetime.timedelta(seconds=30)
    assert next_expiry(status, NOW) == later
    assert next_expiry(status, later) is None  # lapsed: the recount's to drop, not to wait for
    # A reservation the recount has not dropped still counts, though expired: the ledger fails
    # safe while the recount is away.
    assert ledger_usage(forge_reserved_status(status, "ns/b", "uid-b", {}, later), excluding=None)[
        "cpu"
    ] == D(2)


def test_a_ledger_read_once_judges_each_pod_as_the_whole_ledger_read_again_would() -> None:
    """The webhook parses a Quota's ledger once per batch and adds each admission to it: every
    pod must see what a fresh read of the ledger written so far would give."""
    status = {
        "used": {"cpu": "1500m", "memory": "1Gi", "pods": "3"},
        "reservations": {
            f"ns/p{i}": {"uid": f"u{i}", "resources": {"cpu": "250m", "pods": "1"}, "expires": "x"}
            for i in range(5)
        },
    }
    ledger = Ledger(status)
    steps = [
        ("ns/new", {"cpu": D("0.5"), "nvidia.com/gpu": D(1)}),  # a resource none had
        ("ns/p2", {"cpu": D(1), "memory": D(2**30)}),  # a retried creation: replaced
        ("ns/p2", {}),  # and again, asking for nothing
        ("ns/other", {"pods": D(1)}),
    ]
    for key, usage in steps:
        for excluding in (None, key, "ns/p0", "ns/absent"):
            fresh = ledger_usage(ledger.status(), excluding=excluding)
            read_once = ledger.usage(excluding=excluding)
            assert {k: v for k, v in read_once.items() if v} == {
                k: v for k, v in fresh.items() if v
            }
        ledger.reserve(key, f"uid-{key}", usage, NOW)
    final = ledger.status()
    assert final["used"] == status["used"]
    assert final["reservations"]["ns/p2"]["resources"] == {}
    assert set(final["reservations"]) == {*status["reservations"], "ns/new", "ns/other"}
    assert ledger_usage(final, excluding=None) == {
        "cpu": D(3),  # 1.5 counted + 4 x 0.25 + 0.5; ns/p2 now asks for nothing
        "memory": D(2**30),
        "pods": D(8),  # 3 counted + 4 + 1
        "nvidia.com/gpu": D(1),
    }
    assert status["reservations"]["ns/p2"]["resources"] == {"cpu": "250m", "pods": "1"}  # kept


def test_a_reservation_names_the_shadow_pod_the_controller_may_make_a_pod_for() -> None:
    status = forge_reserved_status({}, "ns/a", "uid-a", {"cpu": D(1)}, NOW)
    assert holds_reservation(status, "ns/a", "uid-a")
    assert not holds_reservation(status, "ns/a", "uid-of-another-a")  # made again, unadmitted
    assert not holds_reservation(status, "ns/b", "uid-a")
    assert not holds_reservation(status, "ns/a", "")
    assert not holds_reservation({}, "ns/a", "uid-a")


def accounted(shadow: JSON) -> JSON:
    """`shadow` with the QuotaReserved condition the ShadowPod controller writes."""
    conditions = [{"type": "QuotaReserved", "status": "True", "reason": "Reserved"}]
    return shadow | {"status": {**(shadow.get("status") or {}), "conditions": conditions}}


def test_only_accounted_shadow_pods_are_counted_and_marked_ones_only() -> None:
    assert is_accounted(accounted(stamped("a", "1")))
    assert not is_accounted(stamped("a", "1"))
    refused = {"conditions": [{"type": "QuotaReserved", "status": "False"}]}
    assert not is_accounted(stamped("a", "1", status=refused))
    # Given a Pod by a vk before the mark: admitted then.
    created = {"type": "PodCreated", "status": "True"}
    assert is_accounted(stamped("a", "1", status={"conditions": [created]}))
    both = {"conditions": [created, {"type": "QuotaReserved", "status": "False"}]}
    assert not is_accounted(stamped("a", "1", status=both))


def test_a_recount_folds_the_accounted_keeps_the_pending_and_drops_the_expired() -> None:
    status: JSON = {}
    for name in ("a", "pending", "never"):
        status = forge_reserved_status(
            status, f"shop-venice/{name}", f"uid-{name}", {"cpu": D(1), "pods": D(1)}, NOW
        )
    existing = {
        "shop-venice/a": stamped("a", "1"),
        "shop-venice/b": stamped("b", "500m"),
        "shop-venice/done": stamped("done", "4", status={"phase": "Succeeded"}),
    }
    pending = {"shop-venice/pending": "uid-pending"}
    counted = forge_counted_status(status, pods_usage(existing.values()), existing, pending, NOW)
    assert counted["used"] == {"cpu": "1500m", "pods": "2"}
    assert sorted(counted["reservations"]) == ["shop-venice/never", "shop-venice/pending"]
    assert ledger_usage(counted, excluding=None) == {"cpu": D("3.5"), "pods": D(4)}
    later = NOW + datetime.timedelta(seconds=31)
    expired = forge_counted_status(status, pods_usage(existing.values()), existing, pending, later)
    # Never created: undone. Created and not accounted yet: kept, however long that takes.
    assert list(expired["reservations"]) == ["shop-venice/pending"]
    # A ShadowPod of that name but another uid is not the one admitted: its reservation lapses.
    other = forge_counted_status(
        status, pods_usage(existing.values()), existing, {"shop-venice/pending": "uid-new"}, later
    )
    assert "reservations" not in other


# --- The admission handlers over the caches -------------------------------------------------


def as_shadow_pod(the_pod: JSON) -> JSON:
    """The ShadowPod a virtual kubelet writes for `the_pod`."""
    return {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "ShadowPod",
        "metadata": the_pod["metadata"],
        "spec": {"pod": the_pod["spec"]},
    }


def review(
    the_pod: JSON,
    *,
    user: str = USER,
    groups: list[str] | None = None,
    operation: str = "CREATE",
    old: JSON | None = None,
    dry_run: bool = False,
    namespace: str = "shop-venice",
) -> JSON:
    """The AdmissionReview request of the ShadowPod asking for `the_pod`."""
    request: JSON = {
        "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
        "kind": {"group": "offloading.liqo.io", "version": "v1beta1", "kind": "ShadowPod"},
        "resource": {"group": "offloading.liqo.io", "version": "v1beta1", "resource": "shadowpods"},
        "namespace": namespace,
        "name": the_pod["metadata"].get("name", ""),
        "operation": operation,
        "userInfo": {"username": user, "groups": GROUPS if groups is None else groups},
        "object": as_shadow_pod(the_pod),
        "dryRun": dry_run,
    }
    if operation == "CREATE":  # the API server gives the object its uid before validation
        metadata = request["object"]["metadata"]
        request["object"]["metadata"] = {"uid": f"uid-{metadata.get('name')}", **metadata}
    if old is not None:
        request["oldObject"] = as_shadow_pod(old)
    return request


def twin_namespace(name: str, consumer: str = "venice", level: str | None = None) -> JSON:
    labels = {REMOTE_CLUSTER_ID_LABEL: consumer}
    if level is not None:
        labels[POD_SECURITY_ENFORCE_LABEL] = level
    return {"metadata": {"name": name, "labels": labels}}


class QuotaLedgers:
    """The Quotas' ledgers as an API server keeps them, for the handler's control flow: read,
    and written whole with a resourceVersion precondition (the real one is in the integration
    tests)."""

    def __init__(self, *quotas: JSON) -> None:
        self.objects: dict[str, JSON] = {}
        for quota in quotas:
            stored = json.loads(json.dumps(quota))
            stored["metadata"]["resourceVersion"] = "1"
            self.objects[quota_path(quota)] = stored
        self.conflicts = 0
        self.writes = 0
        self.reads = 0

    async def get(self, path: str, params: dict[str, str] | None = None) -> JSON:
        if path not in self.objects:
            raise NotFound(404, "NotFound", path)
        self.reads += 1
        read = json.loads(json.dumps(self.objects[path]))
        await asyncio.sleep(0)  # other reviews go on meanwhile, as over a network
        return read

    async def replace(self, path: str, body: JSON) -> JSON:
        stored = self.objects[path.removesuffix("/status")]
        if body["metadata"]["resourceVersion"] != stored["metadata"]["resourceVersion"]:
            self.conflicts += 1
            raise Conflict(409, "Conflict", "the object has been modified")
        self.writes += 1
        stored["status"] = json.loads(json.dumps(body["status"]))
        stored["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1)
        return json.loads(json.dumps(stored))  # the answer, decoded: not the stored object

    def edit(self, spec: JSON) -> None:
        """An administrator's edit of each Quota's spec."""
        for stored in self.objects.values():
            stored["spec"] = {**stored["spec"], **spec}
            stored["metadata"]["resourceVersion"] += "0"

    def recount(self, *shadow_pods: JSON, now: datetime.datetime = NOW) -> None:
        """What the provider's recount does once the ShadowPod controller accounted
        `shadow_pods`: the usage of those that exist."""
        existing = {f"shop-venice/{p['metadata']['name']}": p for p in shadow_pods}
        for stored in self.objects.values():
            status = stored.get("status") or {}
            stored["status"] = forge_counted_status(
                status, pods_usage(existing.values()), existing, {}, now
            )
            stored["metadata"]["resourceVersion"] += "0"


class Webhook:
    """A ShadowPodAdmission over hand-filled caches (venice's twin namespace shop-venice, at
    Pod Security level baseline), the Quotas' ledgers, and a clock."""

    def __init__(
        self, *quotas: JSON, enforcement_enabled: bool = True, policy: TenantPodPolicy | None = None
    ) -> None:
        self.quotas = Store({USER_INDEX: quota_user_index})
        for q in quotas:
            # As the webhook's informer keeps them: without their ledger, which every admission
            # reads afresh (so no test here passes on a ledger read from the cache).
            self.quotas.upsert(quota_as_read(q))
        self.namespaces = Store()
        self.namespaces.upsert(twin_namespace("shop-venice", level="baseline"))
        self.ledgers = QuotaLedgers(*quotas)
        self.now = NOW
        self.synced = True
        self.admission = ShadowPodAdmission(
            self.quotas,
            self.namespaces,
            self.ledgers,
            enforcement_enabled=enforcement_enabled,
            synced=lambda: self.synced,
            policy=policy,
            clock=lambda: self.now,
        )

    def validate(self, request: JSON) -> Answer:
        return asyncio.run(self.admission.validate(request))

    def create(self, the_pod: JSON, **kwargs: Any) -> tuple[Answer, Answer]:
        """Both webhooks as the API server calls them: stamp, apply the patch, validate."""
        mutated = self.admission.mutate(review(the_pod, **kwargs))
        if mutated.patch:
            the_pod = json.loads(json.dumps(the_pod))
            for op in mutated.patch:
                if op["path"] == "/metadata/labels":
                    the_pod["metadata"]["labels"] = op["value"]
                elif op["path"] == "/metadata/finalizers":
                    the_pod["metadata"]["finalizers"] = op["value"]
                else:
                    the_pod["metadata"]["labels"][CREATOR_USER_LABEL] = op["value"]
        return mutated, self.validate(review(the_pod, **kwargs))


def test_the_quota_cache_keeps_whom_a_quota_limits_not_its_ledger() -> None:
    quota = quota_json(GRANTED)
    quota["status"] = {"used": {"cpu": "1", "pods": "1"}}
    kept = quota_as_read(quota)
    assert "status" not in kept
    assert kept["metadata"] == quota["metadata"]
    assert quota_user_index(kept) == quota_user_index(quota) == [USER]


def test_a_tenants_pod_is_stamped_and_admitted_within_its_quota() -> None:
    webhook = Webhook(quota_json(GRANTED))
    mutated, validated = webhook.create(pod(container(requests=SMALL)))
    assert mutated.decision.allowed
    assert mutated.patch == [
        {"op": "add", "path": "/metadata/labels", "value": {CREATOR_USER_LABEL: USER}},
        {"op": "add", "path": "/metadata/finalizers", "value": [SHADOW_POD_FINALIZER]},
    ]
    assert validated.decision == Decision(True)


def test_anyone_elses_pod_is_neither_stamped_nor_checked() -> None:
    webhook = Webhook(quota_json(GRANTED, cordoned=True))
    big = pod(container(requests={"cpu": "64", "nvidia.com/gpu": "1"}))
    mutated, validated = webhook.create(big, user="kubernetes-admin", groups=["system:masters"])
    assert mutated == Answer(Decision(True))
    assert validated == Answer(Decision(True))


def test_a_burst_is_admitted_against_the_pods_admitted_just_before() -> None:
    webhook = Webhook(quota_json({"cpu": "1", "pods": "10"}))
    answers = [
        webhook.create(pod(container(requests={"cpu": "400m"}), name=f"p{i}"))[1] for i in range(3)
    ]
    assert [a.decision.allowed for a in answers] == [True, True, False]
    assert "cpu: asks 400m, 800m used, 1 allowed" in answers[2].decision.message


async def test_a_burst_of_reviews_at_once_admits_exactly_what_the_quota_holds() -> None:
    webhook = Webhook(quota_json({"cpu": "10", "pods": "10"}))
    reviews = [review(stamped(f"p{i}", "1")) for i in range(50)]
    answers = await asyncio.gather(*(webhook.admission.validate(r) for r in reviews))
    assert [a.decision.allowed for a in answers] == [True] * 10 + [False] * 40  # in order
    stored = next(iter(webhook.ledgers.objects.values()))
    assert sorted(stored["status"]["reservations"]) == sorted(
        f"shop-venice/p{i}" for i in range(10)
    )
    # Written together: all 50 came before the writer's first read, so one write, no race.
    assert (webhook.ledgers.writes, webhook.ledgers.conflicts) == (1, 0)


async def test_two_replicas_admitting_at_once_admit_no_more_than_the_quota() -> None:
    webhook = Webhook(quota_json({"cpu": "10", "pods": "10"}))
    other = ShadowPodAdmission(
        webhook.quotas,
        webhook.namespaces,
        webhook.ledgers,  # the same API server
        enforcement_enabled=True,
        synced=lambda: True,
        clock=lambda: NOW,
    )
    reviews = [review(stamped(f"p{i}", "1")) for i in range(40)]
    replicas = [webhook.admission, other]
    answers = await asyncio.gather(*(replicas[i % 2].validate(r) for i, r in enumerate(reviews)))
    assert sum(a.decision.allowed for a in answers) == 10
    assert webhook.ledgers.conflicts > 0  # the replicas raced, and the ledger settled it
    stored = next(iter(webhook.ledgers.objects.values()))
    assert len(stored["status"]["reservations"]) == 10


async def test_a_review_whose_ledger_write_fails_fails_and_the_next_ones_go_on() -> None:
    webhook = Webhook(quota_json({"cpu": "10", "pods": "10"}))
    replace = webhook.ledgers.replace
    failures = iter([OSError("connection reset")])

    async def flaky(path: str, body: JSON) -> JSON:
        error = next(failures, None)
        if error is not None:
            raise error
        return await replace(path, body)

    webhook.ledgers.replace = flaky  # type: ignore[method-assign]
    with pytest.raises(OSError, match="connection reset"):
        await webhook.admission.validate(review(stamped("first", "1")))
    answer = await webhook.admission.validate(review(stamped("second", "1")))
    assert answer.decision.allowed


async def test_a_review_after_another_writes_on_the_webhooks_own_last_write_without_a_read() -> (
    None
):
    webhook = Webhook(quota_json({"cpu": "10", "pods": "10"}))
    for name in ("a", "b", "c"):
        assert (await webhook.admission.validate(review(stamped(name, "1")))).decision.allowed
    assert (webhook.ledgers.reads, webhook.ledgers.writes, webhook.ledgers.conflicts) == (1, 3, 0)
    [stored] = webhook.ledgers.objects.values()
    assert sorted(stored["status"]["reservations"]) == [
        "shop-venice/a",
        "shop-venice/b",
        "shop-venice/c",
    ]


async def test_a_later_version_in_the_cache_is_read_before_the_next_write() -> None:
    """A recount written since the webhook's last write, and shown by its Quota cache: the
    next review reads the ledger afresh, and writes once, without a conflict."""
    webhook = Webhook(quota_json({"cpu": "1", "pods": "10"}))
    assert (await webhook.admission.validate(review(stamped("a", "600m")))).decision.allowed
    webhook.ledgers.recount(stamped("a", "600m"))
    [stored] = webhook.ledgers.objects.values()
    webhook.quotas.upsert(quota_as_read(stored))  # the informer's event
    assert (await webhook.admission.validate(review(stamped("b", "400m")))).decision.allowed
    assert (webhook.ledgers.reads, webhook.ledgers.conflicts) == (2, 0)
    denied = (await webhook.admission.validate(review(stamped("c", "1m")))).decision
    assert not denied.allowed


async def test_a_write_on_a_stale_last_write_conflicts_and_is_judged_again() -> None:
    """A recount the cache does not show yet: the write on the webhook's last one conflicts,
    and the review is judged on the ledger read afresh."""
    webhook = Webhook(quota_json({"cpu": "1", "pods": "10"}))
    assert (await webhook.admission.validate(review(stamped("a", "600m")))).decision.allowed
    webhook.ledgers.recount(stamped("a", "600m"))
    assert (await webhook.admission.validate(review(stamped("b", "400m")))).decision.allowed
    assert (webhook.ledgers.reads, webhook.ledgers.conflicts) == (2, 1)
    assert not (await webhook.admission.validate(review(stamped("c", "1m")))).decision.allowed


async def test_a_denial_is_never_judged_on_the_webhooks_own_last_write() -> None:
    """The administrator raised the Quota since the last write, and the cache does not show it
    yet: the pod that the last write leaves no room for is judged on a fresh read, and
    admitted. (A write would have shown the last write stale; a denial writes nothing.)"""
    webhook = Webhook(quota_json({"cpu": "1", "pods": "10"}))
    assert (await webhook.admission.validate(review(stamped("a", "1")))).decision.allowed
    webhook.ledgers.edit({"resources": {"cpu": "2", "pods": "10"}})
    assert (await webhook.admission.validate(review(stamped("b", "1")))).decision.allowed
    assert webhook.ledgers.reads == 2


def test_creating_a_name_again_cannot_shrink_what_the_first_creation_holds() -> None:
    # X's Pod made, the recount not yet run: a second CREATE of X (another uid, asking for
    # nothing; the API server refuses it as AlreadyExists only after the webhooks) must not
    # free X's share for Y.
    webhook = Webhook(quota_json({"cpu": "4", "pods": "10"}))
    assert webhook.validate(review(stamped("x", "4"))).decision.allowed
    again = review(stamped("x", "0"))
    again["object"]["metadata"]["uid"] = "uid-x-again"
    assert webhook.validate(again).decision.allowed
    [ledger] = webhook.ledgers.objects.values()
    assert ledger["status"]["reservations"]["shop-venice/x"]["resources"]["cpu"] == "4"
    denied = webhook.validate(review(stamped("y", "4"))).decision
    assert not denied.allowed
    assert "cpu: asks 4, 4 used, 4 allowed" in denied.message


def test_a_creation_retried_is_not_counted_twice() -> None:
    webhook = Webhook(quota_json({"cpu": "4", "pods": "10"}))
    for uid in ("uid-first-try", "uid-second-try"):
        retried = review(stamped("x", "3"))
        retried["object"]["metadata"]["uid"] = uid
        assert webhook.validate(retried).decision.allowed
    assert webhook.validate(review(stamped("y", "1"))).decision.allowed


def test_a_pod_seen_in_the_cache_is_not_counted_twice() -> None:
    webhook = Webhook(quota_json({"cpu": "1", "pods": "10"}))
    assert webhook.create(pod(container(requests={"cpu": "600m"}), name="a"))[1].decision.allowed
    webhook.ledgers.recount(stamped("a", "600m"))
    assert webhook.create(pod(container(requests={"cpu": "400m"}), name="b"))[1].decision.allowed
    third = webhook.create(pod(container(requests={"cpu": "1m"}), name="c"))[1]
    assert not third.decision.allowed


def test_virtual_nodes_sharing_a_slice_share_its_quota() -> None:
    webhook = Webhook(quota_json({"cpu": "1", "pods": "10"}))
    from_node_a = stamped("from-node-a", "1")
    from_node_a["metadata"]["labels"][NODENAME_LABEL] = "node-a"
    webhook.ledgers.recount(from_node_a)
    from_node_b = pod(
        container(requests={"cpu": "1"}), name="from-node-b", labels={NODENAME_LABEL: "node-b"}
    )
    denied = webhook.create(from_node_b)[1]
    assert not denied.decision.allowed
    assert "cpu: asks 1, 1 used, 1 allowed" in denied.decision.message


def test_a_dry_run_reserves_nothing() -> None:
    webhook = Webhook(quota_json({"pods": "1"}))
    assert webhook.create(pod(container(), name="a"), dry_run=True)[1].decision.allowed
    assert webhook.create(pod(container(), name="b"))[1].decision.allowed


def test_a_slice_identity_without_a_quota_gets_nothing_even_with_enforcement_off() -> None:
    lost = resource_slice_user("venice", "deleted-slice")
    for enforcement_enabled in (True, False):
        webhook = Webhook(quota_json(GRANTED), enforcement_enabled=enforcement_enabled)
        denied = webhook.create(pod(container()), user=lost)
        assert denied[0].patch  # stamped all the same
        assert not denied[1].decision.allowed
        assert f"no Quota of this provider names {lost!r}" in denied[1].decision.message


def test_with_enforcement_off_anything_is_admitted_and_still_reserved() -> None:
    webhook = Webhook(quota_json({"cpu": "1", "pods": "1"}), enforcement_enabled=False)
    for name in ("a", "b"):
        assert webhook.create(pod(container(requests={"cpu": "2"}), name=name))[1].decision.allowed
    stored = next(iter(webhook.ledgers.objects.values()))
    # The provider's controller makes Pods only for what a ledger holds.
    assert sorted(stored["status"]["reservations"]) == ["shop-venice/a", "shop-venice/b"]
    assert stored["status"]["reservations"]["shop-venice/a"]["uid"] == "uid-a"


def test_a_review_of_a_shadow_pod_without_a_uid_is_not_the_api_servers() -> None:
    webhook = Webhook(quota_json(GRANTED))
    request = review(stamped("a", "1"))
    del request["object"]["metadata"]["uid"]
    answer = webhook.validate(request)
    assert not answer.decision.allowed
    assert "has no metadata.uid" in answer.decision.message
    stored = next(iter(webhook.ledgers.objects.values()))
    assert "status" not in stored


def test_before_the_caches_are_synced_new_pods_are_refused_with_a_retry() -> None:
    webhook = Webhook(quota_json(GRANTED))
    webhook.synced = False
    mutated, validated = webhook.create(pod(container()))
    assert not mutated.decision.allowed
    assert "retry" in validated.decision.message


def test_a_user_named_by_a_quota_is_a_tenant_whatever_its_groups() -> None:
    webhook = Webhook(quota_json(GRANTED, cordoned=True, user="alice"))
    mutated, validated = webhook.create(pod(container()), user="alice", groups=[])
    assert mutated.patch
    assert "is cordoned" in validated.decision.message


def test_an_invalid_quota_denies_rather_than_admits() -> None:
    broken = quota_json(GRANTED)
    broken["spec"]["limitsEnforcement"] = "Strict"
    validated = Webhook(broken).create(pod(container()))[1]
    assert not validated.decision.allowed
    assert "is not valid" in validated.decision.message


def test_updates_keep_the_stamp_for_everyone() -> None:
    webhook = Webhook(quota_json(GRANTED))
    old = stamped("a", "1")
    new = stamped("a", "1")
    del new["metadata"]["labels"][CREATOR_USER_LABEL]
    answer = webhook.validate(
        review(new, user="kubernetes-admin", groups=["system:masters"], operation="UPDATE", old=old)
    )
    assert not answer.decision.allowed
    assert webhook.admission.mutate(review(new, operation="UPDATE", old=old)).patch is None


def test_the_answer_echoes_the_uid_and_denies_with_a_403() -> None:
    denied = forge_review_response("abc", Answer(deny("the pod would exceed the Quota")))
    assert denied == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {
            "uid": "abc",
            "allowed": False,
            "status": {
                "code": 403,
                "reason": "Forbidden",
                "message": "the pod would exceed the Quota",
            },
        },
    }
    patch = [{"op": "add", "path": "/metadata/labels", "value": {CREATOR_USER_LABEL: USER}}]
    stamped_answer = forge_review_response("abc", Answer(Decision(True), patch))["response"]
    assert stamped_answer["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(stamped_answer["patch"])) == patch
    assert "status" not in stamped_answer


def test_the_probe_is_refused_naming_each_field_and_the_level() -> None:
    webhook = Webhook(quota_json(GRANTED))
    probe = pod(
        {**container(), "securityContext": {"privileged": True}},
        hostNetwork=True,
        hostPID=True,
        volumes=[{"name": "root", "hostPath": {"path": "/"}}],
    )
    denied = webhook.create(probe)[1].decision
    assert not denied.allowed
    for field in ("privileged", "hostNetwork", "hostPID", "hostPath"):
        assert field in denied.message
    assert '"baseline"' in denied.message
    # The provider's own administrators are not its tenants: Pod Security admission alone
    # judges their pods.
    admins = webhook.create(probe, user="kubernetes-admin", groups=["system:masters"])[1]
    assert admins.decision.allowed


@pytest.mark.parametrize(
    ("spec", "says"),
    [
        ({"nodeName": "naples-control-plane"}, "spec.nodeName is 'naples-control-plane'"),
        (
            {"priorityClassName": "system-node-critical"},
            "spec.priorityClassName 'system-node-critical' (the provider allows none)",
        ),
        (
            {
                "tolerations": [
                    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
                ]
            },
            "tolerates 'node-role.kubernetes.io/control-plane'",
        ),
        ({"tolerations": [{"operator": "Exists"}]}, "tolerates 'every taint (no key)'"),
        ({"schedulerName": "mine"}, "spec.schedulerName 'mine' (allowed: default-scheduler)"),
        ({"runtimeClassName": "kata"}, "spec.runtimeClassName 'kata' (the provider allows none)"),
    ],
)
def test_the_provider_decides_where_tenants_pods_run(spec: JSON, says: str) -> None:
    denied = Webhook(quota_json(GRANTED)).create(pod(container(), **spec))[1].decision
    assert not denied.allowed
    assert says in denied.message
    assert "the provider decides where its tenants' pods run" in denied.message


def test_what_the_provider_lists_and_what_every_pod_carries_is_allowed() -> None:
    policy = TenantPodPolicy(
        priority_classes=frozenset({"tenant-high", "system-node-critical"}),
        scheduler_names=frozenset({"bin-packing"}),
        runtime_classes=frozenset({"kata"}),
        toleration_keys=frozenset({"pool.example.com/tenants"}),
    )
    webhook = Webhook(quota_json(GRANTED), policy=policy)
    every_pod_gets = [
        {"key": key, "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}
        for key in ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")
    ]
    allowed = pod(
        container(),
        priorityClassName="tenant-high",
        schedulerName="bin-packing",
        runtimeClassName="kata",
        tolerations=[
            *every_pod_gets,
            {"key": "pool.example.com/tenants", "operator": "Exists"},
            {"key": "virtual-node.liqo.io/not-allowed", "operator": "Exists"},
        ],
    )
    assert webhook.create(allowed)[1].decision.allowed
    # Listed or not, the system classes stay the provider's.
    critical = webhook.create(pod(container(), name="c", priorityClassName="system-node-critical"))
    assert not critical[1].decision.allowed
    # The lifecycle taints only for NoExecute: tolerating them at scheduling is the provider's.
    early = {"key": "node.kubernetes.io/not-ready", "operator": "Exists", "effect": "NoSchedule"}
    assert not webhook.create(pod(container(), name="e", tolerations=[early]))[1].decision.allowed


def test_a_tenant_asks_for_pods_only_in_its_own_twin_namespaces() -> None:
    webhook = Webhook(quota_json(GRANTED))
    webhook.namespaces.upsert(twin_namespace("shop-florence", consumer="florence"))
    webhook.namespaces.upsert(
        {"metadata": {"name": "liqo-tenant-venice", "labels": {
            REMOTE_CLUSTER_ID_LABEL: "venice", "liqo.io/tenant-namespace": "true"}}}
    )  # fmt: skip
    for namespace in ("shop-florence", "liqo-tenant-venice", "kube-system"):
        the_pod = pod(container())
        the_pod["metadata"]["namespace"] = namespace
        denied = webhook.create(the_pod, namespace=namespace)[1].decision
        assert not denied.allowed, namespace
        says = "not known" if namespace == "kube-system" else "not a namespace this provider made"
        assert says in denied.message


def test_updates_keep_to_the_rules_too() -> None:
    webhook = Webhook(quota_json(GRANTED))
    old = stamped("a", "1")
    new = json.loads(json.dumps(old))
    new["spec"]["tolerations"] = [{"key": "node-role.kubernetes.io/control-plane"}]
    denied = webhook.validate(review(new, operation="UPDATE", old=old))
    assert not denied.decision.allowed
    assert "tolerates 'node-role.kubernetes.io/control-plane'" in denied.decision.message
    new["spec"]["tolerations"] = []
    new["metadata"]["labels"]["app"] = "web"
    assert webhook.validate(review(new, operation="UPDATE", old=old)).decision.allowed


def updated(old: JSON, change: Any) -> JSON:
    new: JSON = json.loads(json.dumps(old))
    change(new)
    return new


def lower_cpu(pod_: JSON) -> None:
    pod_["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "1m"


def add_a_container(pod_: JSON) -> None:
    pod_["spec"]["containers"].append(container("miner", {"cpu": "64"}))


def break_the_quantity(pod_: JSON) -> None:
    pod_["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"


@pytest.mark.parametrize(
    "change",
    [lower_cpu, add_a_container, break_the_quantity, lambda p: p["spec"].update(overhead={})],
)
def test_a_tenant_cannot_change_what_its_pod_asks_for_by_an_update(change: Any) -> None:
    # Lowered, its share of the Quota would be freed while its Pod holds it; raised, its Pod,
    # made again from it (evicted, deleted), would run beyond what was granted.
    webhook = Webhook(quota_json(GRANTED))
    old = stamped("a", "4")
    denied = webhook.validate(review(updated(old, change), operation="UPDATE", old=old))
    assert not denied.decision.allowed
    assert "may change only in its containers' images" in denied.decision.message


def test_a_tenant_updates_what_a_live_pod_may_change() -> None:
    webhook = Webhook(quota_json(GRANTED))
    old = stamped("a", "4")

    def live_changes(pod_: JSON) -> None:
        pod_["spec"]["containers"][0]["image"] = "nginx:1.27"
        pod_["spec"]["activeDeadlineSeconds"] = 600
        pod_["spec"]["tolerations"] = [
            {"key": VIRTUAL_NODE_TAINT_KEY, "operator": "Exists", "effect": "NoExecute"}
        ]
        pod_["metadata"]["labels"]["app"] = "web"
        pod_["metadata"]["annotations"] = {"liqo.io/deletion-grace-period": "5"}

    new = updated(old, live_changes)
    assert webhook.validate(review(new, operation="UPDATE", old=old)).decision.allowed


def test_a_tenant_cannot_take_the_finalizer_holding_its_quota_share_off() -> None:
    webhook = Webhook(quota_json(GRANTED))
    old = stamped("a", "4")
    old["metadata"]["finalizers"] = [SHADOW_POD_FINALIZER, "example.com/keep"]
    new = updated(old, lambda p: p["metadata"].update(finalizers=["example.com/keep"]))
    denied = webhook.validate(review(new, operation="UPDATE", old=old))
    assert not denied.decision.allowed
    assert "the provider removes it" in denied.decision.message
    # Its own finalizers are its own; the provider's identity (the controller) removes ours.
    mine = updated(old, lambda p: p["metadata"].update(finalizers=[SHADOW_POD_FINALIZER]))
    assert webhook.validate(review(mine, operation="UPDATE", old=old)).decision.allowed
    provider = review(new, operation="UPDATE", old=old, user="system:serviceaccount:liqo:vk",
                      groups=["system:serviceaccounts"])  # fmt: skip
    assert webhook.validate(provider).decision.allowed


# --- A spec.pod of another shape -----------------------------------------------------------


def spec_changed(change: Any, name: str = "a") -> JSON:
    """A tenant's pod `stamped` (name `name`, 1 cpu) with `change` made to its spec."""
    return updated(stamped(name, "1"), lambda p: change(p["spec"]))


@pytest.mark.parametrize(
    ("change", "says"),
    [
        (
            lambda s: s["containers"].append({"image": "busybox"}),
            "spec.pod.containers[1].name: required",
        ),
        (
            lambda s: s["containers"][0].update(name={"app": 1}),
            "spec.pod.containers[0].name: must be a string, not an object",
        ),
        (
            lambda s: s.update(containers={"app": {"image": "nginx"}}),
            "spec.pod.containers: must be a list, not an object",
        ),
        (
            lambda s: s["containers"].append("sidecar"),
            "spec.pod.containers[1]: must be an object, not a string",
        ),
        (
            lambda s: s["containers"][0].update(resources="lots"),
            "spec.pod.containers[0].resources: must be an object, not a string",
        ),
        (
            lambda s: s.update(initContainers=[{"image": "busybox"}]),
            "spec.pod.initContainers[0].name: required",
        ),
        (
            lambda s: s.update(ephemeralContainers=[{"image": "busybox"}]),
            "spec.pod.ephemeralContainers[0].name: required",
        ),
        (
            lambda s: s.update(tolerations=VIRTUAL_NODE_TAINT_KEY),
            "spec.pod.tolerations: must be a list, not a string",
        ),
        (
            lambda s: s.update(priorityClassName=["system-node-critical"]),
            "spec.pod.priorityClassName: must be a string, not a list",
        ),
    ],
)
def test_a_tenants_pod_vk_cannot_read_is_refused_naming_the_field(change: Any, says: str) -> None:
    for enforcement in ("None", "Hard"):
        webhook = Webhook(quota_json(GRANTED, enforcement=enforcement))
        answer = webhook.validate(review(spec_changed(change)))
        assert answer.decision == deny(f"spec.pod cannot be read as a pod spec: {says}")
        assert webhook.ledgers.writes == 0  # nothing reserved for it


async def test_a_malformed_pod_is_refused_alone_and_the_pods_reviewed_with_it_admitted() -> None:
    """Reviews reserving on one Quota are judged and written together: one consumer's pod that
    cannot be read fails none of the others."""
    webhook = Webhook(quota_json({"cpu": "10", "pods": "10"}))
    nameless = spec_changed(lambda s: s["containers"][0].pop("name"), name="nameless")
    shapeless = spec_changed(lambda s: s["containers"][0].update(resources="lots"), "shapeless")
    reviews = [review(p) for p in (stamped("p0", "1"), nameless, shapeless, stamped("p1", "1"))]
    answers = await asyncio.gather(*(webhook.admission.validate(r) for r in reviews))
    assert [a.decision.allowed for a in answers] == [True, False, False, True]
    assert "spec.pod.containers[0].name: required" in answers[1].decision.message
    assert "spec.pod.containers[0].resources: must be" in answers[2].decision.message
    stored = next(iter(webhook.ledgers.objects.values()))
    assert sorted(stored["status"]["reservations"]) == ["shop-venice/p0", "shop-venice/p1"]


def test_a_tenants_update_into_a_spec_vk_cannot_read_is_refused() -> None:
    """Tolerations may change on a live pod, so the update rules let them through: the shape
    is judged before the scheduling rules read them."""
    webhook = Webhook(quota_json(GRANTED))
    old = stamped("a", "4")
    new = updated(old, lambda p: p["spec"].update(tolerations=[VIRTUAL_NODE_TAINT_KEY]))
    denied = webhook.validate(review(new, operation="UPDATE", old=old))
    assert denied.decision == deny(
        "spec.pod cannot be read as a pod spec: "
        "spec.pod.tolerations[0]: must be an object, not a string"
    )
    # One stored so (the webhook down) is still the provider's to update: its controller takes
    # the finalizer off when it goes.
    unfinalized = updated(new, lambda p: p["metadata"].update(finalizers=[]))
    provider = review(
        unfinalized,
        operation="UPDATE",
        old=new,
        user="system:serviceaccount:liqo:vk",
        groups=["system:serviceaccounts"],
    )
    assert webhook.validate(provider).decision.allowed


# --- The webhook configurations -------------------------------------------------------------


def chart_webhooks() -> list[dict[str, Any]]:
    """The chart's webhooks (deploy/vk.yaml), the mutating configuration's first."""
    mutating = installed("MutatingWebhookConfiguration", CONFIGURATION_NAME)
    validating = installed("ValidatingWebhookConfiguration", CONFIGURATION_NAME)
    return [*mutating["webhooks"], *validating["webhooks"]]


def test_the_configurations_fail_closed_and_shadow_pods_reserve_nothing_on_dry_runs() -> None:
    webhooks = chart_webhooks()
    for hook in webhooks:
        assert hook["failurePolicy"] == "Fail"
        assert hook["admissionReviewVersions"] == ["v1"]
        assert hook["timeoutSeconds"] == 5
    stamp, place, shadow_pods, offloading, slices, maps = webhooks
    assert [hook["name"] for hook in webhooks] == [
        STAMP_WEBHOOK,
        PLACE_POD_WEBHOOK,
        SHADOW_POD_WEBHOOK,
        OFFLOADING_WEBHOOK,
        RESOURCE_SLICE_WEBHOOK,
        NAMESPACE_MAP_WEBHOOK,
    ]
    # The offloading webhooks: pods of offloaded namespaces, and NamespaceOffloadings.
    assert place["rules"][0]["resources"] == ["pods"]
    assert place["rules"][0]["operations"] == ["CREATE"]
    assert place["namespaceSelector"] == {"matchLabels": {"liqo.io/scheduling-enabled": "true"}}
    assert offloading["rules"][0]["resources"] == ["namespaceoffloadings"]
    assert offloading["rules"][0]["apiGroups"] == ["offloading.liqo.io"]
    assert offloading["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    assert place["sideEffects"] == offloading["sideEffects"] == "None"
    # The provider's: every ShadowPod, wherever it is (a stamp counts usage anywhere), and no
    # Pod (consumers create none).
    for hook in (stamp, shadow_pods):
        assert hook["rules"][0]["apiGroups"] == ["offloading.liqo.io"]
        assert hook["rules"][0]["resources"] == ["shadowpods"]
        assert hook["sideEffects"] == "NoneOnDryRun"
        assert "namespaceSelector" not in hook
        assert "objectSelector" not in hook
    assert stamp["rules"][0]["operations"] == ["CREATE"]
    assert shadow_pods["rules"][0]["operations"] == ["CREATE", "UPDATE"]
    # What consumers' control planes keep in their tenant namespaces: their writes alone.
    assert [hook["rules"][0]["resources"] for hook in (slices, maps)] == [
        ["resourceslices"],
        ["namespacemaps"],
    ]
    assert {r for hook in (slices, maps) for r in hook["rules"][0]["resources"]} == set(
        TENANT_OBJECT_KINDS
    )
    assert slices["rules"][0]["apiGroups"] == ["authentication.liqo.io"]
    assert maps["rules"][0]["apiGroups"] == ["offloading.liqo.io"]
    for hook in (slices, maps):
        assert hook["rules"][0]["operations"] == ["CREATE", "UPDATE"]
        assert hook["sideEffects"] == "None"
        assert hook["matchConditions"] == [
            {
                "name": "consumer-control-plane",
                "expression": "request.userInfo.username.startsWith("
                f"'{CONTROL_PLANE_USER_PREFIX}')",
            }
        ]


def test_the_configurations_call_the_webhooks_service_at_the_paths_the_server_answers() -> None:
    paths = [
        MUTATE_PATH,
        PLACE_POD_PATH,
        VALIDATE_PATH,
        VALIDATE_OFFLOADING_PATH,
        VALIDATE_TENANT_OBJECT_PATH,
        VALIDATE_TENANT_OBJECT_PATH,
    ]
    for hook, path in zip(chart_webhooks(), paths, strict=True):
        # No caBundle: the webhook writes its own CA (its localProcesses values give one).
        assert hook["clientConfig"] == {
            "service": {"namespace": "vk", "name": "vk-webhook", "path": path, "port": 443}
        }


def test_the_webhook_reads_what_it_judges_by_and_writes_ledgers_only() -> None:
    """Quotas, namespaces, NamespaceOffloadings, and what consumers' control planes keep in
    their tenant namespaces; and, for the metrics agent, pods, nodes and the kubelets'
    metrics: never nodes/proxy (which reaches every kubelet endpoint, exec included)."""
    rules = installed("ClusterRole", "vk-webhook")["rules"]
    assert {(r, v) for rule in rules for r in rule["resources"] for v in rule["verbs"]} == {
        ("quotas", "get"),
        ("quotas", "list"),
        ("quotas", "watch"),
        ("quotas/status", "update"),
        ("namespaces", "list"),
        ("namespaces", "watch"),
        ("namespaceoffloadings", "list"),
        ("namespaceoffloadings", "watch"),
        ("resourceslices", "list"),
        ("resourceslices", "watch"),
        ("namespacemaps", "list"),
        ("namespacemaps", "watch"),
        ("pods", "list"),
        ("nodes", "get"),
        ("nodes/metrics", "get"),
    }


# --- Over real HTTPS ------------------------------------------------------------------------


def no_tenant_objects() -> TenantObjectAdmission:
    """The tenant-object admission of a provider whose tenants keep nothing yet."""
    return TenantObjectAdmission(
        {
            plural: Store({REPLICAS_BY_NAMESPACE: replicas_by_namespace})
            for plural in TENANT_OBJECT_KINDS
        },
        Store(),
        following=lambda: True,
        max_resource_slices=1,
    )


@pytest.fixture
def serving_certificate(tmp_path: Path) -> tuple[Path, Path, bytes]:
    return loopback_serving_certificate(tmp_path)


async def test_the_server_answers_admission_reviews_over_https(
    serving_certificate: tuple[Path, Path, bytes],
) -> None:
    cert, key, ca_pem = serving_certificate
    webhook = Webhook(quota_json({"cpu": "1", "pods": "10"}))
    port = free_port()
    server = WebhookServer(
        webhook.admission,
        OffloadingAdmission(Store(), synced=lambda: True),
        no_tenant_objects(),
        f"127.0.0.1:{port}",
        serving_ssl_context(cert, key),
        healthy=lambda: webhook.synced,
    )
    task = asyncio.create_task(server.run())
    try:
        await asyncio.wait_for(server.ready.wait(), 5)
        trust = ssl.create_default_context(cadata=ca_pem.decode())
        base = f"https://127.0.0.1:{port}"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as session:
            big = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": review(
                    pod(container(requests={"cpu": "2"}), labels={CREATOR_USER_LABEL: USER})
                ),
            }
            async with session.post(base + VALIDATE_PATH, json=big) as response:
                answer = await response.json()
            assert answer["response"]["uid"] == big["request"]["uid"]
            assert answer["response"]["allowed"] is False
            assert answer["response"]["status"]["code"] == 403
            assert "cpu: asks 2, 0 used, 1 allowed" in answer["response"]["status"]["message"]

            # A pod in a namespace labelled for offloading, which has no NamespaceOffloading.
            early = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {**review(pod(container())), "namespace": "liqo-demo"},
            }
            async with session.post(base + PLACE_POD_PATH, json=early) as response:
                answer = await response.json()
            assert answer["response"]["allowed"] is False
            assert "no NamespaceOffloading" in answer["response"]["status"]["message"]

            # A consumer's control plane writing a ResourceSlice outside its tenant namespace.
            astray = {
                "apiVersion": "admission.k8s.io/v1",
                "kind": "AdmissionReview",
                "request": {
                    "uid": "3f6c1f0e-0000-4000-8000-000000000001",
                    "operation": "CREATE",
                    "resource": {"resource": "resourceslices"},
                    "namespace": "default",
                    "name": "astray",
                    "userInfo": {"username": f"{CONTROL_PLANE_USER_PREFIX}venice"},
                    "object": {"metadata": {"name": "astray"}},
                },
            }
            async with session.post(base + VALIDATE_TENANT_OBJECT_PATH, json=astray) as response:
                answer = await response.json()
            assert answer["response"]["allowed"] is False
            assert "not in default" in answer["response"]["status"]["message"]

            async with session.post(base + MUTATE_PATH, json={"nothing": 1}) as response:
                assert response.status == 400
            async with session.get(base + "/healthz") as response:
                assert response.status == 200
            async with session.get(base + "/readyz") as response:
                assert response.status == 200
            webhook.synced = False
            async with session.get(base + "/readyz") as response:
                assert response.status == 503
            async with session.get(base + "/metrics") as response:
                metrics = await response.text()
            assert 'vk_webhook_admissions_total{result="denied",webhook="validate-shadowpod"}' in (
                metrics
            )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


async def test_only_the_api_servers_certificate_may_send_reviews(tmp_path: Path) -> None:
    now = datetime.datetime.now(datetime.UTC)
    ca, ca_key = build_ca("test-ca", now)
    other_ca, other_key = build_ca("someone-elses-ca", now)
    leaf = issue(ca, ca_key, "vk-webhook", now, ip_addresses=("127.0.0.1",), server=True)
    files = {"tls": leaf}
    files["caller"] = issue(ca, ca_key, "kube-apiserver-webhook-client", now, client=True)
    files["tenant"] = issue(ca, ca_key, "mypool-0123456789ab", now, client=True)
    files["forged"] = issue(other_ca, other_key, "kube-apiserver-webhook-client", now, client=True)
    for name, issued in files.items():
        (tmp_path / f"{name}.crt").write_bytes(issued.cert_pem)
        (tmp_path / f"{name}.key").write_bytes(issued.key_pem)
    ca_pem = ca.public_bytes(serialization.Encoding.PEM)
    (tmp_path / "ca.crt").write_bytes(ca_pem)
    webhook = Webhook(quota_json(GRANTED))
    port = free_port()
    server = WebhookServer(
        webhook.admission,
        OffloadingAdmission(Store(), synced=lambda: True),
        no_tenant_objects(),
        f"127.0.0.1:{port}",
        serving_ssl_context(tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt"),
        healthy=lambda: True,
        callers=frozenset({"kube-apiserver-webhook-client"}),
    )
    task = asyncio.create_task(server.run())
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}
    body["request"] = review(pod(container(), labels={CREATOR_USER_LABEL: USER}))

    async def post(client: str | None) -> int:
        trust = ssl.create_default_context(cadata=ca_pem.decode())
        if client is not None:
            trust.load_cert_chain(tmp_path / f"{client}.crt", tmp_path / f"{client}.key")
        url = f"https://127.0.0.1:{port}{VALIDATE_PATH}"
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as session,
            session.post(url, json=body) as response,
        ):
            return response.status

    try:
        await asyncio.wait_for(server.ready.wait(), 5)
        assert await post("caller") == 200
        assert await post(None) == 403
        assert await post("tenant") == 403  # the cluster's CA, another name
        with pytest.raises(aiohttp.ClientError):
            await post("forged")  # another CA: the handshake fails
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def test_the_caller_flags_go_together() -> None:
    result = CliRunner().invoke(
        webhook_command,
        ["--tls-cert-file", __file__, "--tls-private-key-file", __file__,
         "--admission-caller-names", "kube-apiserver-webhook-client"],
    )  # fmt: skip
    assert result.exit_code != 0
    assert "give --admission-caller-ca-file and --admission-caller-names together" in result.output


def test_the_command_takes_liqos_enforcement_flag() -> None:
    result = CliRunner().invoke(webhook_command, ["--help"])
    assert result.exit_code == 0
    for flag in (
        "--kubeconfig",
        "--listen-address",
        "--tls-cert-file",
        "--tls-private-key-file",
        "--metrics-address",
        "--enable-resource-enforcement",
    ):
        assert flag in result.output


class QuotaLister:
    """An API server with one Quota, its ledger in its status; its watch quiet."""

    name = "provider"  # the `client` label of its metrics

    def __init__(self, quota: Any) -> None:
        self.quota = quota

    async def current_objects(self, path: str, params: Any = None, *, timeout_seconds: int = 300):  # type: ignore[no-untyped-def]
        yield [json.loads(json.dumps(self.quota))], "1"

    async def watch(self, path: str, params: Any = None, *, timeout_seconds: int = 300):  # type: ignore[no-untyped-def]
        await asyncio.Event().wait()
        yield {}


def test_the_webhooks_quota_informer_caches_quotas_by_user_without_their_ledger() -> None:
    """As the webhook starts it (`quota_informer`): listed through it, a Quota is found by the
    user it limits, and what the cache holds has no ledger to judge on."""
    quota = quota_json(GRANTED)
    quota["status"] = {"used": {"cpu": "1", "pods": "1"}, "reserved": [{"uid": "u-1"}]}

    async def scenario() -> None:
        quotas = quota_informer(QuotaLister(quota))  # type: ignore[arg-type]
        following = asyncio.create_task(quotas.run())
        await asyncio.wait_for(quotas.synced.wait(), 2)
        following.cancel()
        await asyncio.gather(following, return_exceptions=True)
        (cached,) = quotas.store.by_index(USER_INDEX, USER)
        assert "status" not in cached
        assert cached["spec"] == quota["spec"]

    asyncio.run(scenario())
