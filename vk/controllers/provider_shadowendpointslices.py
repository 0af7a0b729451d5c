"""The provider's ShadowEndpointSlice controller: each ShadowEndpointSlice a consumer writes in
a twin namespace becomes the EndpointSlice of the same name there, owned by it, so that the
provider's copy of the consumer's Service lists the consumer's pods (Liqo's
ShadowEndpointSlice controller).

An endpoint sends the provider's traffic to an address the consumer chose: every address must
be in the ranges the provider accepts from that consumer, the annotation
`offloading.vk.io/accepted-endpoint-ranges` (CIDRs, comma-separated) on its tenant namespace,
which the consumer cannot write; without it none is accepted. Loopback, link-local (the cloud
metadata service among them), multicast and unspecified addresses are refused whatever the
ranges. A slice with one address refused is refused whole (no EndpointSlice, its condition
says which), and what it made before is removed.

The controller manager is every consumer's: its cache keeps of each ShadowEndpointSlice only
what the controller reads (`shadow_endpointslice_as_read`), the fields of an EndpointSlice it
copies, within Kubernetes' bounds. The schema keeps whatever a consumer writes in an endpoint
or a port: whole, a slice of 1.3 MiB of small objects there was 29 MiB decoded, and a few dozen
of them took the process past its memory limit.
"""

from __future__ import annotations

import contextlib
import datetime
import ipaddress
import itertools
import reprlib
from collections.abc import Iterable, Mapping
from typing import Any

import structlog

from vk.api.addresses import routed_address
from vk.api.constants import (
    DEFAULT_SHADOW_ENDPOINTSLICE_WORKERS,
    REMOTE_CLUSTER_ID_LABEL,
    TENANT_NAMESPACE_LABEL,
    consumer_of_namespace,
    tenant_namespace,
)
from vk.api.offloading import ShadowEndpointSlice
from vk.kube.client import (
    JSON,
    ApiError,
    AppliedObjects,
    KubeClient,
    NotFound,
    delete_options,
    resource_path,
)
from vk.kube.conditions import forge_condition
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.informer import namespace_of_key, object_key, shared_informer, split_key
from vk.reflection.forge.exposition import (
    ENDPOINTSLICE_MANAGED_BY_LABEL,
    REFLECTED_ENDPOINTSLICE_MANAGER,
    SERVICE_NAME_LABEL,
)

log = structlog.get_logger("vk.controllers.provider_shadowendpointslices")

ACCEPTED_RANGES_ANNOTATION = "offloading.vk.io/accepted-endpoint-ranges"
# On the EndpointSlices made of ShadowEndpointSlices (Liqo's label and value).
MANAGED_BY_LABEL = "liqo.io/managed-by"
MANAGED_BY_SHADOW = "shadowendpointslice"
CONDITION = "EndpointSliceCreated"
ENDPOINTSLICE_API = "discovery.k8s.io/v1"
MAX_REFUSED_LISTED = 5

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


def accepted_ranges(
    tenant_namespace_obj: Mapping[str, Any] | None,
) -> tuple[list[Network], list[str]]:
    """The ranges a consumer's tenant namespace accepts, and the entries that are no CIDR."""
    annotations = ((tenant_namespace_obj or {}).get("metadata") or {}).get("annotations") or {}
    ranges: list[Network] = []
    invalid: list[str] = []
    for entry in str(annotations.get(ACCEPTED_RANGES_ANNOTATION) or "").split(","):
        entry = entry.strip()
        if not entry:
            continue
        try:
            ranges.append(ipaddress.ip_network(entry, strict=False))
        except ValueError:
            invalid.append(entry)
    return ranges, invalid


def address_refusal(address: str, ranges: Iterable[Network]) -> str | None:
    """Why the provider does not route to `address` for a consumer, or None."""
    try:
        ip = routed_address(address)
    except ValueError:
        return "not an IP address"
    if ip.is_loopback or ip.is_link_local or ip.is_multicast or ip.is_unspecified:
        return "a loopback, link-local, multicast or unspecified address"
    if not any(ip.version == network.version and ip in network for network in ranges):
        return "outside the ranges the provider accepts from this consumer"
    return None


def refused_addresses(template: Mapping[str, Any], ranges: list[Network]) -> list[tuple[str, str]]:
    """Each address of the template the provider does not route to, with why; an endpoint
    whose addresses are not a list is refused as a whole (what is not an endpoint at all is
    dropped when the EndpointSlice is made)."""
    refused = []
    for endpoint in template.get("endpoints") or []:
        if not isinstance(endpoint, Mapping):
            continue
        addresses = endpoint.get("addresses")
        if not isinstance(addresses, list):
            refused.append((str(addresses)[:64], "addresses is not a list"))
            continue
        for address in addresses:
            why = address_refusal(str(address), ranges)
            if why is not None:
                refused.append((str(address)[:64], why))
    return refused


def forge_endpointslice(shadow: Mapping[str, Any]) -> JSON:
    """The EndpointSlice the provider makes of an accepted ShadowEndpointSlice: its endpoints'
    addresses, conditions and hostnames and its ports, nothing else of the consumer's (no
    node, no pod reference), labelled for the Service's copy and as not the provider's
    EndpointSlice controller's."""
    metadata = shadow["metadata"]
    template = (shadow.get("spec") or {}).get("template") or {}
    service = (metadata.get("labels") or {}).get(SERVICE_NAME_LABEL, "")
    return {
        "apiVersion": ENDPOINTSLICE_API,
        "kind": "EndpointSlice",
        "metadata": {
            "name": metadata["name"],
            "namespace": metadata["namespace"],
            "labels": {
                SERVICE_NAME_LABEL: service,
                ENDPOINTSLICE_MANAGED_BY_LABEL: REFLECTED_ENDPOINTSLICE_MANAGER,
                MANAGED_BY_LABEL: MANAGED_BY_SHADOW,
            },
            "ownerReferences": [
                {
                    "apiVersion": ShadowEndpointSlice.group_version(),
                    "kind": ShadowEndpointSlice.KIND,
                    "name": metadata["name"],
                    "uid": metadata["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "addressType": template.get("addressType")
        if template.get("addressType") == "IPv6"
        else "IPv4",
        "endpoints": [
            accepted_endpoint(e) for e in template.get("endpoints") or [] if isinstance(e, Mapping)
        ],
        "ports": [accepted_port(p) for p in template.get("ports") or [] if isinstance(p, Mapping)],
    }


ENDPOINT_CONDITIONS = ("ready", "serving", "terminating")
PROTOCOLS = ("TCP", "UDP", "SCTP")
ADDRESS_TYPES = ("IPv4", "IPv6", "FQDN")

# Kubernetes' bounds on an EndpointSlice (its API validation, pkg/apis/discovery/validation).
MAX_ENDPOINTS = 1000
MAX_ADDRESSES = 100  # of an endpoint
MAX_PORTS = 100
DNS_LABEL_MAX = 63  # an endpoint's hostname, a port's name
QUALIFIED_NAME_MAX = 317  # a port's appProtocol: a 253-character prefix, "/", a 63-character name
# Longer than any IP address (an IPv6 address with an IPv4 tail has 45 characters), as long as
# a refusal names of one.
ADDRESS_MAX = 64
# What a refusal names of an address that is no string, or of addresses that are no list: a
# short repr, never a walk of all of it (`str` of a value nested a thousand deep raises).
_SHOWN = reprlib.Repr()
_SHOWN.maxlevel, _SHOWN.maxstring, _SHOWN.maxother = 3, ADDRESS_MAX, ADDRESS_MAX
# What the controller reads of the metadata of a ShadowEndpointSlice or of an EndpointSlice it
# made, besides one label of each: its key and version, and its uid (the owner of the
# EndpointSlice made of the one, the precondition of the other's deletion).
_METADATA_READ = ("name", "namespace", "uid", "resourceVersion")


def accepted_endpoint(endpoint: Mapping[str, Any]) -> JSON:
    """What of a consumer's endpoint the provider keeps: its addresses (checked before), its
    boolean conditions and its hostname; anything else, or of another type, is dropped."""
    addresses = endpoint.get("addresses")
    kept: JSON = {"addresses": [str(a) for a in addresses] if isinstance(addresses, list) else []}
    conditions = endpoint.get("conditions")
    if isinstance(conditions, Mapping):
        kept["conditions"] = {
            k: conditions[k] for k in ENDPOINT_CONDITIONS if isinstance(conditions.get(k), bool)
        }
    if isinstance(endpoint.get("hostname"), str):
        kept["hostname"] = endpoint["hostname"]
    return kept


def accepted_port(port: Mapping[str, Any]) -> JSON:
    kept: JSON = {}
    if isinstance(port.get("name"), str):
        kept["name"] = port["name"]
    if isinstance(port.get("port"), int) and not isinstance(port.get("port"), bool):
        kept["port"] = port["port"]
    if port.get("protocol") in PROTOCOLS:
        kept["protocol"] = port["protocol"]
    if isinstance(port.get("appProtocol"), str):
        kept["appProtocol"] = port["appProtocol"]
    return kept


def _clipped(text: str, most: int) -> str:
    """`text`, or its first `most` + 1 characters: still past Kubernetes' bound, so refused
    as the whole would be, but no more of it held."""
    return text if len(text) <= most else text[: most + 1]


def _shown(value: Any) -> str:
    """`str(value)` as far as a refusal names it (ADDRESS_MAX characters), without walking
    all of a large or deeply nested value."""
    if isinstance(value, str):
        return value[:ADDRESS_MAX]
    return _SHOWN.repr(value)[:ADDRESS_MAX]


def _endpoint_as_read(endpoint: JSON) -> JSON:
    """What the controller reads of an endpoint: its addresses (at most one past Kubernetes'
    bound, each a string; one that is no string as the string a refusal names, which is no IP
    address either; addresses that are no list as such a string too, still no list), its
    boolean conditions and its hostname, as `accepted_endpoint` copies them."""
    kept: JSON = {}
    if "addresses" in endpoint:
        addresses = endpoint["addresses"]
        if isinstance(addresses, list):
            kept["addresses"] = [
                _clipped(a, ADDRESS_MAX) if isinstance(a, str) else _shown(a)
                for a in addresses[: MAX_ADDRESSES + 1]
            ]
        else:
            kept["addresses"] = None if addresses is None else _shown(addresses)
    conditions = endpoint.get("conditions")
    if isinstance(conditions, Mapping):
        kept["conditions"] = {
            k: conditions[k] for k in ENDPOINT_CONDITIONS if isinstance(conditions.get(k), bool)
        }
    if isinstance(endpoint.get("hostname"), str):
        kept["hostname"] = _clipped(endpoint["hostname"], DNS_LABEL_MAX)
    return kept


def _port_as_read(port: JSON) -> JSON:
    kept = accepted_port(port)
    if "name" in kept:
        kept["name"] = _clipped(kept["name"], DNS_LABEL_MAX)
    if "appProtocol" in kept:
        kept["appProtocol"] = _clipped(kept["appProtocol"], QUALIFIED_NAME_MAX)
    return kept


def _metadata_as_read(obj: JSON, label: str) -> JSON:
    """Of an object's metadata, what the controller reads (`_METADATA_READ`) and `label`."""
    metadata = obj.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    kept: JSON = {k: metadata[k] for k in _METADATA_READ if k in metadata}
    labels = metadata.get("labels")
    if isinstance(labels, dict) and label in labels:
        kept["labels"] = {label: labels[label]}
    return kept


def shadow_endpointslice_as_read(shadow: JSON) -> JSON:
    """What the cache keeps of a ShadowEndpointSlice (the informer's `keep`): of its metadata
    its name, namespace, uid, resourceVersion and Service label; its status (vk's conditions:
    a consumer cannot write it); of its template the addressType (one of Kubernetes' three), the
    endpoints (`_endpoint_as_read`) and the ports (name, port, protocol, appProtocol, as
    `accepted_port` takes them), only objects, at most one past Kubernetes' bounds: a slice
    past them keeps one too many, so the API server refuses the EndpointSlice made of it as it
    would the whole one. Everything else a consumer put there is dropped: what the controller
    checks and forges of what is kept is what it would of the whole. Never raises (it runs in
    the informer)."""
    kept_metadata = _metadata_as_read(shadow, SERVICE_NAME_LABEL)
    spec = shadow.get("spec")
    template = spec.get("template") if isinstance(spec, dict) else None
    template = template if isinstance(template, dict) else {}
    kept_template: JSON = {}
    if template.get("addressType") in ADDRESS_TYPES:
        kept_template["addressType"] = template["addressType"]
    for key, most, as_read in (
        ("endpoints", MAX_ENDPOINTS, _endpoint_as_read),
        ("ports", MAX_PORTS, _port_as_read),
    ):
        items = template.get(key)
        if isinstance(items, list):
            objects = (item for item in items if isinstance(item, dict))
            kept_template[key] = [as_read(item) for item in itertools.islice(objects, most + 1)]
    kept: JSON = {"metadata": kept_metadata, "spec": {"template": kept_template}}
    status = shadow.get("status")
    if isinstance(status, dict) and isinstance(status.get("conditions"), list):
        kept["status"] = {"conditions": status["conditions"]}
    return kept


def endpointslice_as_read(endpointslice: JSON) -> JSON:
    """What the cache keeps of an EndpointSlice the controller made (the informer's `keep`):
    that it is one (its managed-by label), its key, version and uid: all the controller reads
    of it (the rest is its own forge, which it applies, not compares)."""
    return {"metadata": _metadata_as_read(endpointslice, MANAGED_BY_LABEL)}


class ProviderShadowEndpointSlices(Reconciler):
    """Keys are the ShadowEndpointSlices' `namespace/name`, which are their EndpointSlices'."""

    name = "provider-shadowendpointslices"

    def __init__(
        self, client: KubeClient, *, workers: int = DEFAULT_SHADOW_ENDPOINTSLICE_WORKERS
    ) -> None:
        self.client = client
        self.shadows = shared_informer(
            client,
            ShadowEndpointSlice.group_version(),
            ShadowEndpointSlice.PLURAL,
            keep=shadow_endpointslice_as_read,
        )
        self.endpointslices = shared_informer(
            client,
            ENDPOINTSLICE_API,
            "endpointslices",
            label_selector=f"{MANAGED_BY_LABEL}={MANAGED_BY_SHADOW}",
            keep=endpointslice_as_read,
        )
        # Twin namespaces (whose consumer a slice is) and tenant namespaces (what it accepts).
        self.consumer_namespaces = shared_informer(
            client, "v1", "namespaces", label_selector=REMOTE_CLUSTER_ID_LABEL
        )
        self.applied = AppliedObjects(client)
        self.controller = Controller(self, workers=workers, group=self._group_of)

    def _on_namespace(self, _: str, namespace: JSON, __: JSON | None) -> None:
        consumer = consumer_of_namespace(namespace)
        for shadow in self.shadows.store.objects():
            if self._consumer_of(shadow["metadata"]["namespace"]) == consumer:
                self.controller.enqueue(object_key(shadow))

    async def run(self) -> None:
        enqueue = self.controller.enqueue
        self.shadows.add_handler(lambda _, obj, __: enqueue(object_key(obj)))
        self.endpointslices.add_handler(lambda _, obj, __: enqueue(object_key(obj)))
        self.consumer_namespaces.add_handler(self._on_namespace)
        await run_with_informers(
            self.controller, self.shadows, self.endpointslices, self.consumer_namespaces
        )

    def _group_of(self, key: str) -> str:
        """The work queue's group of a key: its consumer, each consumer's slices served in
        turn however many another has queued or failing (a namespace that is no twin stands
        for itself)."""
        namespace = namespace_of_key(key)
        return self._consumer_of(namespace) or namespace

    def _consumer_of(self, namespace: str) -> str | None:
        """The consumer a twin namespace was made for (None: not one)."""
        found = self.consumer_namespaces.store.get(namespace)
        if TENANT_NAMESPACE_LABEL in ((found or {}).get("metadata", {}).get("labels") or {}):
            return None
        return consumer_of_namespace(found)

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        assert namespace is not None
        path = resource_path(ENDPOINTSLICE_API, "endpointslices", namespace=namespace, name=name)
        shadow = self.shadows.store.get(key)
        if shadow is None:
            # Its EndpointSlice goes with it (the garbage collector), and what was applied of
            # it is forgotten: kept, each slice created and deleted would stay held.
            self.applied.forget(path)
            return Result()
        consumer = self._consumer_of(namespace)
        if consumer is None:
            return await self._refuse(
                shadow,
                "NotATwinNamespace",
                f"namespace {namespace} was not made for a consumer's offloaded namespace",
            )
        ranges, invalid = accepted_ranges(
            self.consumer_namespaces.store.get(tenant_namespace(consumer))
        )
        refused = refused_addresses((shadow.get("spec") or {}).get("template") or {}, ranges)
        if refused:
            listed = "; ".join(f"{a} ({why})" for a, why in refused[:MAX_REFUSED_LISTED])
            more = len(refused) - MAX_REFUSED_LISTED
            hint = (
                f"the provider accepts addresses of {consumer} in {', '.join(map(str, ranges))}"
                if ranges
                else f"the provider accepts no address of {consumer}: its administrator lists "
                f"the ranges in the annotation {ACCEPTED_RANGES_ANNOTATION} of namespace "
                f"{tenant_namespace(consumer)}"
            )
            if invalid:
                hint += f" (entries that are no CIDR ignored: {', '.join(invalid)})"
            return await self._refuse(
                shadow,
                "AddressesRefused",
                f"{listed}{f' and {more} more' if more > 0 else ''}: {hint}",
            )
        existing = await self._existing(namespace, name)
        if existing is not None and not _ours(existing):
            return await self._refuse(
                shadow,
                "NameTaken",
                f"an EndpointSlice {namespace}/{name} that vk did not make exists: it is left "
                "alone",
            )
        desired = forge_endpointslice(shadow)
        if existing is None:
            self.applied.forget(path)  # deleted by someone: made again, not taken as applied
        try:
            await self.applied.apply(path, desired)
        except ApiError as error:
            if error.status not in (400, 422):
                raise
            return await self._refuse(
                shadow, "Invalid", f"the EndpointSlice is refused: {error.message[:500]}"
            )
        await self._set_condition(shadow, "True", "Created", "the EndpointSlice is made")
        return Result()

    async def _existing(self, namespace: str, name: str) -> JSON | None:
        cached = self.endpointslices.store.get(f"{namespace}/{name}")
        if cached is not None:
            return cached
        try:
            return await self.client.get(
                resource_path(ENDPOINTSLICE_API, "endpointslices", namespace=namespace, name=name)
            )
        except NotFound:
            return None

    async def _refuse(self, shadow: JSON, reason: str, message: str) -> Result:
        metadata = shadow["metadata"]
        ours = self.endpointslices.store.get(object_key(shadow))
        self.applied.forget(
            resource_path(
                ENDPOINTSLICE_API,
                "endpointslices",
                namespace=metadata["namespace"],
                name=metadata["name"],
            )
        )
        if ours is not None:
            # What an earlier, accepted version made goes: its addresses are not accepted now.
            with contextlib.suppress(NotFound):
                await self.client.delete(
                    resource_path(
                        ENDPOINTSLICE_API,
                        "endpointslices",
                        namespace=metadata["namespace"],
                        name=metadata["name"],
                    ),
                    body=delete_options(uid=ours["metadata"]["uid"]),
                )
        if await self._set_condition(shadow, "False", reason, message):
            log.warning("shadow endpoint slice refused", shadow=object_key(shadow), reason=reason)
        return Result()

    async def _set_condition(self, shadow: JSON, status: str, reason: str, message: str) -> bool:
        """Writes the condition if it changes; whether it did."""
        conditions = (shadow.get("status") or {}).get("conditions") or []
        current = next((c for c in conditions if c.get("type") == CONDITION), None)
        if current and (current.get("status"), current.get("reason"), current.get("message")) == (
            status,
            reason,
            message,
        ):
            return False
        condition = forge_condition(
            current, CONDITION, status, message, datetime.datetime.now(datetime.UTC), reason=reason
        )
        metadata = shadow["metadata"]
        try:
            await self.client.merge_patch(
                resource_path(
                    ShadowEndpointSlice.group_version(),
                    ShadowEndpointSlice.PLURAL,
                    namespace=metadata["namespace"],
                    name=metadata["name"],
                    subresource="status",
                ),
                {
                    "status": {
                        "conditions": [
                            *(c for c in conditions if c.get("type") != CONDITION),
                            condition,
                        ]
                    }
                },
            )
        except NotFound:
            return False
        return True


def _ours(endpointslice: Mapping[str, Any]) -> bool:
    labels = (endpointslice.get("metadata") or {}).get("labels") or {}
    return labels.get(MANAGED_BY_LABEL) == MANAGED_BY_SHADOW
