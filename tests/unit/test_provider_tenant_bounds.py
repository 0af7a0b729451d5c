"""What a consumer can make the provider's controller manager hold, which every consumer shares:
its ShadowEndpointSlices as the cache keeps them (only what the controller forges from, within
Kubernetes' bounds), and what the controllers remember of what they applied (nothing of an
object gone)."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import tracemalloc
from collections.abc import Iterable
from typing import Any

import orjson

from vk.api.constants import (
    REMOTE_CLUSTER_ID_LABEL,
    TENANT_NAMESPACE_LABEL,
    resource_slice_user,
)
from vk.api.offloading import Quota
from vk.controllers.provider_quotas import ProviderQuotaUsage
from vk.controllers.provider_resourceslices import ProviderResourceSlices, ProviderSettings
from vk.controllers.provider_shadowendpointslices import (
    ProviderShadowEndpointSlices,
    accepted_ranges,
    forge_endpointslice,
    refused_addresses,
)
from vk.kube.client import AppliedObjects, NotFound, resource_path
from vk.kube.informer import Informer

JSON = dict[str, Any]
TWIN = "shop-venice"
TENANT = "liqo-tenant-venice"
SHADOWS = "/apis/offloading.liqo.io/v1beta1/shadowendpointslices"
ENDPOINTSLICES = "/apis/discovery.k8s.io/v1/endpointslices"
SERVICE_LABEL = "kubernetes.io/service-name"
MANAGED_BY = "liqo.io/managed-by"


class ProviderApi:
    """The provider's API server as the controllers use it: the collections listed, and what
    is applied and written counted, never held (what is measured here is what the controllers
    hold)."""

    name = "provider"

    def __init__(self, collections: dict[str, list[JSON]] | None = None) -> None:
        self.collections = collections or {}
        self.applies = 0
        self.last_applied: str | None = None

    async def current_objects(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ) -> Any:
        # Decoded from the wire, as the client hands them to an informer.
        yield [orjson.loads(orjson.dumps(obj)) for obj in self.collections.get(path, [])], "9"

    async def get(self, path: str, params: dict[str, str] | None = None) -> JSON:
        raise NotFound(404, "NotFound", path)

    async def apply(self, path: str, body: JSON, *, force: bool = True) -> JSON:
        self.applies += 1
        self.last_applied = path
        return {}

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        return {}

    async def delete(self, path: str, *, body: JSON | None = None) -> JSON:
        return {}


async def cached(informer: Informer, obj: JSON) -> JSON:
    """What `informer`'s cache holds of `obj`, listed by the API server."""
    informer.client.collections = {informer.path: [obj]}  # type: ignore[attr-defined]
    await informer._relist()
    metadata = obj["metadata"]
    held = informer.store.get(f"{metadata['namespace']}/{metadata['name']}")
    assert held is not None
    return held


def shadow_slice(name: str, template: JSON, **metadata: Any) -> JSON:
    return {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "ShadowEndpointSlice",
        "metadata": {
            "name": name,
            "namespace": TWIN,
            "uid": f"uid-{name}",
            "resourceVersion": "3",
            "labels": {SERVICE_LABEL: "web", "offloading.liqo.io/origin": "venice"},
            **metadata,
        },
        "spec": {"template": template},
    }


# As a consumer's virtual kubelet writes one, and more that a consumer may write there.
NORMAL_TEMPLATE: JSON = {
    "addressType": "IPv4",
    "endpoints": [
        {
            "addresses": ["10.244.0.5"],
            "conditions": {"ready": True, "serving": True, "terminating": False},
            "hostname": "web-0",
            "nodeName": "venice-worker",
            "zone": "north",
            "targetRef": {"kind": "Pod", "name": "web-0", "namespace": "shop", "uid": "p0"},
            "hints": {"forZones": [{"name": "north"}]},
            "deprecatedTopology": {"kubernetes.io/hostname": "venice-worker"},
        },
        {"addresses": ["10.244.0.6", "10.244.0.7"], "conditions": {"ready": False}},
        {"addresses": ["10.244.0.8"], "conditions": {"ready": "yes", "serving": None}},
        {"addresses": ["10.244.0.9"], "hostname": 7},
        "not an endpoint",
    ],
    "ports": [
        {"name": "http", "port": 8080, "protocol": "TCP", "appProtocol": "http"},
        {"name": "dns", "port": 53, "protocol": "UDP"},
        {"port": True, "protocol": "ICMP", "name": 5},
        ["not a port"],
    ],
}


def controller(collections: dict[str, list[JSON]] | None = None) -> ProviderShadowEndpointSlices:
    """The controller on a ProviderApi, its cache of namespaces holding the twin namespace of
    venice and venice's tenant namespace, which accepts 10.244.0.0/16."""
    the_controller = ProviderShadowEndpointSlices(ProviderApi(collections))  # type: ignore[arg-type]
    namespaces = the_controller.consumer_namespaces.store
    namespaces.upsert({"metadata": {"name": TWIN, "labels": {REMOTE_CLUSTER_ID_LABEL: "venice"}}})
    namespaces.upsert(
        {
            "metadata": {
                "name": TENANT,
                "labels": {REMOTE_CLUSTER_ID_LABEL: "venice", TENANT_NAMESPACE_LABEL: "true"},
                "annotations": {"offloading.vk.io/accepted-endpoint-ranges": "10.244.0.0/16"},
            }
        }
    )
    return the_controller


# --- What the cache keeps of a ShadowEndpointSlice -------------------------------------------


async def test_a_slice_of_junk_is_kept_as_the_little_the_controller_forges_from() -> None:
    """The schema keeps whatever a consumer writes in an endpoint or a port: small objects by
    the thousand, 20 times their JSON decoded. The cache keeps none of it."""
    junk = [{"k": i} for i in range(20_000)]
    template = {
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["10.244.0.5"], "conditions": {"ready": True}, "j": junk}],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP", "j": junk}],
        "j": junk,
    }
    whole = shadow_slice(
        "web-junk",
        template,
        annotations={"a": "x" * 100_000},
        finalizers=[f"example.com/f{i}" for i in range(1000)],
    )
    whole["metadata"]["labels"].update({f"l{i}": "v" for i in range(1000)})
    the_controller = controller()
    kept = await cached(the_controller.shadows, whole)
    assert len(orjson.dumps(whole)) > 500_000
    assert len(orjson.dumps(kept)) < 1024
    assert forge_endpointslice(kept) == forge_endpointslice(whole)
    assert kept["spec"]["template"]["endpoints"] == [
        {"addresses": ["10.244.0.5"], "conditions": {"ready": True}}
    ]


async def test_the_endpointslice_made_of_a_slice_kept_is_the_one_made_of_it_whole() -> None:
    whole = shadow_slice("web-abc12", NORMAL_TEMPLATE)
    whole["status"] = {
        "conditions": [{"type": "EndpointSliceCreated", "status": "True", "reason": "Created"}]
    }
    kept = await cached(controller().shadows, whole)
    assert forge_endpointslice(kept) == forge_endpointslice(whole)
    assert forge_endpointslice(kept)["endpoints"][0] == {
        "addresses": ["10.244.0.5"],
        "conditions": {"ready": True, "serving": True, "terminating": False},
        "hostname": "web-0",
    }
    # What the controller reads besides: its key, uid, version, Service, and its condition.
    assert kept["metadata"] == {
        "name": "web-abc12",
        "namespace": TWIN,
        "uid": "uid-web-abc12",
        "resourceVersion": "3",
        "labels": {SERVICE_LABEL: "web"},
    }
    assert kept["status"] == whole["status"]
    for ipv6 in ("IPv6", "FQDN", None, 6):
        other = shadow_slice("web-v6", {**NORMAL_TEMPLATE, "addressType": ipv6})
        assert forge_endpointslice(await cached(controller().shadows, other)) == (
            forge_endpointslice(other)
        )


async def test_addresses_refused_whole_are_refused_kept_and_named_alike() -> None:
    template = {
        "endpoints": [
            {"addresses": ["10.244.0.5", "203.0.113.7", "169.254.169.254"]},
            {"addresses": "10.244.0.6"},  # not a list
            {"addresses": {"ip": "10.244.0.7"}},
            {"addresses": None},
            {"conditions": {"ready": True}},  # none at all
            {"addresses": [5, None, True, {"ip": "10.244.0.8"}, ["10.244.0.9"], 1.5]},
            {"addresses": ["web.example.com", "x" * 200]},
        ]
    }
    whole = shadow_slice("web-refused", template)
    kept = await cached(controller().shadows, whole)
    for accepted in ("10.244.0.0/16", "0.0.0.0/0,::/0", ""):
        ranges, _ = accepted_ranges(
            {"metadata": {"annotations": {"offloading.vk.io/accepted-endpoint-ranges": accepted}}}
        )
        assert refused_addresses(kept["spec"]["template"], ranges) == refused_addresses(
            template, ranges
        )
    # However deep what is no address nests, the cache keeps a few characters of it.
    deep: Any = "10.244.0.5"
    for _ in range(200):
        deep = [deep]
    endpoints = [{"addresses": [deep]}, {"addresses": {"ip": deep}}]
    nested = shadow_slice("web-deep", {"endpoints": endpoints})
    kept = await cached(controller().shadows, nested)
    ranges, _ = accepted_ranges(
        {"metadata": {"annotations": {"offloading.vk.io/accepted-endpoint-ranges": "0.0.0.0/0"}}}
    )
    assert [why for _, why in refused_addresses(kept["spec"]["template"], ranges)] == [
        "not an IP address",
        "addresses is not a list",
    ]
    assert len(orjson.dumps(kept)) < 1024


async def test_a_slice_past_kubernetes_bounds_is_kept_still_past_them() -> None:
    """Kept to one past each bound: the EndpointSlice made of it is refused by the API server
    as the one made of the whole would be, and no more of it is held."""
    endpoints = [{"addresses": [f"10.244.{i // 250}.{i % 250}"]} for i in range(1500)]
    endpoints[0] = {
        "addresses": [f"10.244.9.{i}" for i in range(150)],
        "hostname": "h" * 100,
    }
    ports = [{"name": f"p{i}", "port": 1000 + i, "protocol": "TCP"} for i in range(150)]
    ports[0] = {"name": "n" * 100, "port": 80, "protocol": "TCP", "appProtocol": "a" * 1000}
    whole = shadow_slice("web-big", {"endpoints": endpoints, "ports": ports})
    made = forge_endpointslice(await cached(controller().shadows, whole))
    assert len(made["endpoints"]) == 1001  # Kubernetes: at most 1000
    assert len(made["endpoints"][0]["addresses"]) == 101  # at most 100
    assert len(made["endpoints"][0]["hostname"]) == 64  # a DNS label: at most 63
    assert len(made["ports"]) == 101  # at most 100
    assert len(made["ports"][0]["name"]) == 64  # a DNS label
    assert len(made["ports"][0]["appProtocol"]) == 318  # a qualified name: at most 317


async def test_the_endpointslices_made_are_kept_as_whose_they_are() -> None:
    """All the controller reads of an EndpointSlice it made: whether it made it, and its uid."""
    made = forge_endpointslice(
        shadow_slice("web-abc12", {"endpoints": [{"addresses": ["10.244.0.5"]}] * 500})
    )
    made["metadata"].update(uid="es-uid", resourceVersion="4", generation=1)
    kept = await cached(controller().endpointslices, made)
    assert kept == {
        "metadata": {
            "name": "web-abc12",
            "namespace": TWIN,
            "uid": "es-uid",
            "resourceVersion": "4",
            "labels": {MANAGED_BY: "shadowendpointslice"},
        }
    }


# --- What the controllers remember of what they applied --------------------------------------


def held_bytes_after(steps: Iterable[Any]) -> int:
    """How much more memory is held once `steps` (coroutines, run in turn) have run."""

    async def run_all() -> None:
        for step in steps:
            await step

    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        asyncio.run(run_all())
        gc.collect()
        return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def big_template(first: int = 0) -> JSON:
    return {
        "addressType": "IPv4",
        "endpoints": [
            {"addresses": [f"10.244.{i // 250}.{i % 250}"], "conditions": {"ready": True}}
            for i in range(first, first + 1000)
        ],
        "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
    }


def test_an_applied_body_is_held_as_a_digest() -> None:
    """What an apply leaves held is a few bytes, not the body's JSON (63 KiB for this
    EndpointSlice of a thousand endpoints)."""
    applied = AppliedObjects(ProviderApi())  # type: ignore[arg-type]
    body = forge_endpointslice(shadow_slice("web-big", big_template()))

    async def apply() -> None:
        assert await applied.apply("/es/web-big", body)

    assert held_bytes_after([apply()]) < 1024
    assert not asyncio.run(applied.apply("/es/web-big", body))  # the same: not sent again


def test_slices_created_and_deleted_leave_nothing_held() -> None:
    """The ResourceQuota of a twin namespace counts the ShadowEndpointSlices there are, not
    those there were: a consumer creating and deleting them leaves the controller holding
    nothing of them."""
    the_controller = controller()
    shadows = the_controller.shadows.store
    api: ProviderApi = the_controller.client  # type: ignore[assignment]

    async def cycle(i: int) -> None:
        name = f"web-{i}"
        shadows.upsert(shadow_slice(name, big_template(i)))
        await the_controller.reconcile(f"{TWIN}/{name}")
        shadows.delete(f"{TWIN}/{name}")
        await the_controller.reconcile(f"{TWIN}/{name}")

    held_bytes_after([cycle(0)])  # what the first reconciles take once (loggers, interned)
    held = held_bytes_after([cycle(i) for i in range(1, 21)])
    assert api.applies == 21  # each one made
    assert held < 64 * 1024  # 20 slices of a thousand endpoints: 1.2 MiB held before
    for i in range(21):
        path = resource_path(
            "discovery.k8s.io/v1", "endpointslices", namespace=TWIN, name=f"web-{i}"
        )
        assert path not in the_controller.applied


SETTINGS = ProviderSettings(
    cluster_id="naples",
    cluster_labels={},
    api_server_url="https://naples:6443",
    ca_pem=b"",
)


def resource_slice(name: str, namespace: str, consumer: str) -> JSON:
    return {
        "apiVersion": "authentication.liqo.io/v1beta1",
        "kind": "ResourceSlice",
        "metadata": {"name": name, "namespace": namespace, "uid": f"uid-{name}"},
        "spec": {"consumerClusterID": consumer, "resources": {"cpu": "2", "memory": "4Gi"}},
    }


def quota_path(namespace: str, user_of: str, name: str) -> str:
    return resource_path(
        Quota.group_version(),
        Quota.PLURAL,
        namespace=namespace,
        name=resource_slice_user(user_of, name),
    )


def test_the_quotas_of_slices_created_and_deleted_leave_nothing_held() -> None:
    api = ProviderApi()
    # 201 new slices at once, each taking its turn (the pace allowing them all): what this
    # process holds of each measured.
    roomy = dataclasses.replace(SETTINGS, max_resource_slices=1000)
    the_controller = ProviderResourceSlices(api, roomy)  # type: ignore[arg-type]
    slices = the_controller.slices.store

    async def cycle(i: int) -> None:
        slices.upsert(resource_slice(f"pool-{i}", TENANT, "venice"))
        await the_controller.reconcile(f"{TENANT}/pool-{i}")
        assert api.last_applied == quota_path(TENANT, "venice", f"pool-{i}")
        slices.delete(f"{TENANT}/pool-{i}")
        await the_controller.reconcile(f"{TENANT}/pool-{i}")

    held_bytes_after([cycle(0)])  # what the first reconciles take once
    held = held_bytes_after([cycle(i) for i in range(1, 201)])
    assert api.applies == 201  # each one's Quota made
    assert held < 16 * 1024  # 200 Quotas: 150 KiB held before
    assert not any(
        quota_path(TENANT, "venice", f"pool-{i}") in the_controller.applied for i in range(201)
    )


def test_a_slice_gets_no_quota_for_another_consumers_identity() -> None:
    """A consumer writes its ResourceSlices' spec: one naming another consumer's ID would get a
    Quota naming that consumer's identity, which every ShadowPod of that consumer must then
    pass (a Quota of no cpu, or cordoned, and it runs nothing)."""
    api = ProviderApi()
    the_controller = ProviderResourceSlices(api, SETTINGS)  # type: ignore[arg-type]
    the_controller.slices.store.upsert(resource_slice("default", TENANT, "florence"))
    asyncio.run(the_controller.reconcile(f"{TENANT}/default"))
    assert api.applies == 0
    the_controller.slices.store.upsert(resource_slice("default", TENANT, "venice"))
    asyncio.run(the_controller.reconcile(f"{TENANT}/default"))
    assert (api.applies, api.last_applied) == (1, quota_path(TENANT, "venice", "default"))


async def first_served(queued: Any, keys: Iterable[str], count: int) -> list[str]:
    """The first `count` keys a controller's work queue serves of `keys`, queued in order."""
    for key in keys:
        queued.controller.enqueue(key)
    return [await queued.controller.queue.get() for _ in range(count)]


async def test_one_consumers_flood_does_not_hold_up_anothers_first_object() -> None:
    """Each controller the provider runs for its consumers serves them in turn: one consumer's
    thousand objects queued (or failing, and queued again) before another's one made the other
    wait behind all of them, in the Quotas recounted, the slices answered and the endpoints
    made."""
    flood = [f"{i}" for i in range(1000)]
    quotas = ProviderQuotaUsage(ProviderApi())  # type: ignore[arg-type]
    keys = [f"{TENANT}/quota-{i}" for i in flood] + ["liqo-tenant-florence/quota"]
    assert (await first_served(quotas, keys, 2))[1] == "liqo-tenant-florence/quota"
    slices = ProviderResourceSlices(ProviderApi(), SETTINGS)  # type: ignore[arg-type]
    keys = [f"{TENANT}/pool-{i}" for i in flood] + ["liqo-tenant-florence/pool"]
    assert (await first_served(slices, keys, 2))[1] == "liqo-tenant-florence/pool"
    # Endpoints by consumer, whatever twin namespace: venice's two twins are one turn.
    endpoints = controller()
    endpoints.consumer_namespaces.store.upsert(
        {"metadata": {"name": "cart-venice", "labels": {REMOTE_CLUSTER_ID_LABEL: "venice"}}}
    )
    endpoints.consumer_namespaces.store.upsert(
        {"metadata": {"name": "shop-florence", "labels": {REMOTE_CLUSTER_ID_LABEL: "florence"}}}
    )
    keys = [f"{twin}/web-{i}" for i in flood for twin in (TWIN, "cart-venice")]
    served = await first_served(endpoints, [*keys, "shop-florence/web"], 3)
    assert served == [f"{TWIN}/web-0", "shop-florence/web", "cart-venice/web-0"]
