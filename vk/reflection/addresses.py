"""Which pod IPs a provider may report for an offloaded pod: none of this cluster's own.

A provider writes the remote pod's status, and the virtual kubelet copies its IPs home, where
Services and NetworkPolicies route to them. A provider that reports a pod IP of this cluster's
own pod or service ranges, one of its nodes' addresses, loopback, link-local, multicast or the
unspecified address would have this cluster's Services send traffic (and credentials) wherever
it chose: such an IP is left out of the local status, and said in an Event.
"""

from __future__ import annotations

import asyncio
import ipaddress
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from vk.api.addresses import routed_address
from vk.kube.client import JSON, KubeClient
from vk.kube.informer import MODIFIED, Informer

log = structlog.get_logger("vk.reflection.addresses")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network
SERVICE_CIDRS_WAIT = 10.0
NODE_ADDRESS_TYPES = ("InternalIP", "ExternalIP")


@dataclass(frozen=True)
class HomeAddresses:
    """This cluster's own ranges and addresses, each with why a pod IP in it is refused."""

    networks: tuple[tuple[Network, str], ...] = ()
    addresses: Mapping[str, str] = field(default_factory=dict)

    def refusal(self, ip: str) -> str | None:
        """Why `ip` cannot be an offloaded pod's IP here, or None when it can."""
        try:
            address = routed_address(ip)
        except ValueError:
            return "not an IP address"
        for kind, taken in (
            ("the unspecified address", address.is_unspecified),
            ("a loopback address", address.is_loopback),
            ("a link-local address", address.is_link_local),
            ("a multicast address", address.is_multicast),
        ):
            if taken:
                return kind
        if why := self.addresses.get(str(address)):
            return why
        for network, why in self.networks:
            if address.version == network.version and address in network:
                return why
        return None


def _network(cidr: Any) -> Network | None:
    try:
        return ipaddress.ip_network(str(cidr), strict=False)
    except ValueError:
        return None


def home_addresses(
    nodes: Iterable[Mapping[str, Any]], service_cidrs: Iterable[Mapping[str, Any]]
) -> HomeAddresses:
    """This cluster's ranges and addresses, from its Nodes (their pod CIDRs and addresses) and
    its ServiceCIDRs."""
    networks: list[tuple[Network, str]] = []
    addresses: dict[str, str] = {}
    for node in nodes:
        name = (node.get("metadata") or {}).get("name", "")
        spec = node.get("spec") or {}
        for cidr in spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else []):
            if (network := _network(cidr)) is not None:
                networks.append((network, f"in this cluster's pod range {cidr} (node {name})"))
        for entry in (node.get("status") or {}).get("addresses") or []:
            if entry.get("type") in NODE_ADDRESS_TYPES and entry.get("address"):
                try:
                    address = str(routed_address(entry["address"]))
                except ValueError:
                    continue
                addresses[address] = f"the address of this cluster's node {name}"
    for service_cidr in service_cidrs:
        for cidr in (service_cidr.get("spec") or {}).get("cidrs") or []:
            if (network := _network(cidr)) is not None:
                networks.append((network, f"in this cluster's service range {cidr}"))
    return HomeAddresses(tuple(networks), addresses)


def trusted_pod_ips(
    status: Mapping[str, Any], home: HomeAddresses
) -> tuple[dict[str, Any], list[tuple[str, str]]]:
    """`status` (a remote pod's) with the pod IPs `home` refuses left out, and those IPs with
    why. `podIP` becomes the first IP kept, if any."""
    kept_status = dict(status)
    refused: list[tuple[str, str]] = []
    kept: list[dict[str, Any]] = []
    listed = list(status.get("podIPs") or [])
    if status.get("podIP") and not any(e.get("ip") == status["podIP"] for e in listed):
        listed.insert(0, {"ip": status["podIP"]})
    for entry in listed:
        ip = str(entry.get("ip") or "")
        why = home.refusal(ip)
        if why is None:
            kept.append(dict(entry))
        else:
            refused.append((ip, why))
    if not refused:
        return kept_status, []
    kept_status.pop("podIP", None)
    kept_status.pop("podIPs", None)
    if kept:
        kept_status["podIP"] = kept[0]["ip"]
        kept_status["podIPs"] = kept
    return kept_status, refused


def without_pod_ips(status: Mapping[str, Any]) -> dict[str, Any]:
    """`status` (a remote pod's) as reported with IP reflection off: no pod IPs."""
    return {key: value for key, value in status.items() if key not in ("podIP", "podIPs")}


def node_as_read(node: Mapping[str, Any]) -> JSON:
    """What the virtual kubelet's cache keeps of a Node of this cluster: what `home_addresses`
    reads (its name, pod ranges and addresses). A Node is mostly its images and conditions
    (tens of KiB on a real one), every Node of the cluster is cached by each virtual kubelet,
    and a consumer runs one per peering."""
    metadata = node.get("metadata") or {}
    spec = node.get("spec") or {}
    return {
        "metadata": {
            key: metadata[key] for key in ("name", "uid", "resourceVersion") if key in metadata
        },
        "spec": {key: spec[key] for key in ("podCIDR", "podCIDRs") if key in spec},
        "status": {"addresses": (node.get("status") or {}).get("addresses") or []},
    }


def _addressing(obj: Mapping[str, Any]) -> tuple[Any, Any]:
    """What of a Node or a ServiceCIDR (as cached) `home_addresses` reads, besides its name."""
    return obj.get("spec"), obj.get("status")


class HomeNetwork:
    """This cluster's Nodes and ServiceCIDRs, watched, and the HomeAddresses they make (made
    again only after a change of what they are made of: a Node's status written, its
    addresses the same, changes nothing)."""

    def __init__(self, home: KubeClient) -> None:
        self.nodes = Informer(home, "v1", "nodes", keep=node_as_read)
        self.service_cidrs = Informer(home, "networking.k8s.io/v1", "servicecidrs")
        self._current: HomeAddresses | None = None
        for informer in (self.nodes, self.service_cidrs):
            informer.add_handler(self._changed)

    def _changed(self, event: str, obj: JSON, old: JSON | None) -> None:
        if old is None or event != MODIFIED or _addressing(obj) != _addressing(old):
            self._current = None

    def current(self) -> HomeAddresses:
        if self._current is None:
            self._current = home_addresses(
                self.nodes.store.objects(), self.service_cidrs.store.objects()
            )
        return self._current

    def informers(self) -> tuple[Informer, Informer]:
        return self.nodes, self.service_cidrs

    async def synced(self) -> None:
        """Until the Nodes are read, and the ServiceCIDRs too unless the API server has none
        to list within SERVICE_CIDRS_WAIT (clusters before Kubernetes 1.33)."""
        await self.nodes.synced.wait()
        try:
            await asyncio.wait_for(self.service_cidrs.synced.wait(), SERVICE_CIDRS_WAIT)
        except TimeoutError:
            log.warning("no ServiceCIDRs read: the service range is not known to refuse")
