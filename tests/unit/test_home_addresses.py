"""No pod IP a provider reports may be one of this cluster's own."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tests.unit.kube_objects import a_real_node
from vk.kube.informer import ADDED, MODIFIED
from vk.reflection.addresses import (
    HomeAddresses,
    HomeNetwork,
    home_addresses,
    node_as_read,
    trusted_pod_ips,
)

NODES: list[dict[str, Any]] = [
    {
        "metadata": {"name": "venice-worker-1"},
        "spec": {"podCIDRs": ["10.244.0.0/24", "fd00:10:244::/64"]},
        "status": {
            "addresses": [
                {"type": "InternalIP", "address": "172.18.0.2"},
                {"type": "Hostname", "address": "venice-worker-1"},
            ]
        },
    }
]
SERVICE_CIDRS = [{"metadata": {"name": "kubernetes"}, "spec": {"cidrs": ["10.96.0.0/16"]}}]
HOME = home_addresses(NODES, SERVICE_CIDRS)


@pytest.mark.parametrize(
    ("ip", "why"),
    [
        ("10.96.0.1", "service range 10.96.0.0/16"),
        ("10.244.0.7", "pod range 10.244.0.0/24 (node venice-worker-1)"),
        ("fd00:10:244::5", "pod range fd00:10:244::/64"),
        ("172.18.0.2", "node venice-worker-1"),
        ("127.0.0.1", "loopback"),
        ("::1", "loopback"),
        ("169.254.169.254", "link-local"),  # the cloud metadata service
        ("fe80::1", "link-local"),
        ("224.0.0.1", "multicast"),
        ("0.0.0.0", "unspecified"),
        ("not-an-ip", "not an IP address"),
        # IPv4-mapped: a dual-stack host routes them to the IPv4 address.
        ("::ffff:10.96.0.1", "service range 10.96.0.0/16"),
        ("::ffff:172.18.0.2", "node venice-worker-1"),
        ("::ffff:127.0.0.1", "loopback"),
        ("::ffff:169.254.169.254", "link-local"),
    ],
)
def test_this_clusters_own_addresses_are_refused(ip: str, why: str) -> None:
    refusal = HOME.refusal(ip)
    assert refusal is not None
    assert why in refusal


@pytest.mark.parametrize("ip", ["10.245.0.7", "192.168.3.4", "fd00:10:245::5"])
def test_the_providers_own_pod_addresses_are_taken(ip: str) -> None:
    assert HOME.refusal(ip) is None


def test_a_refused_ip_is_left_out_of_the_status_and_the_rest_kept() -> None:
    status = {
        "phase": "Running",
        "podIP": "10.96.0.1",
        "podIPs": [{"ip": "10.96.0.1"}, {"ip": "fd00:10:245::5"}],
    }
    kept, refused = trusted_pod_ips(status, HOME)
    assert kept == {
        "phase": "Running",
        "podIP": "fd00:10:245::5",
        "podIPs": [{"ip": "fd00:10:245::5"}],
    }
    assert [ip for ip, _ in refused] == ["10.96.0.1"]
    alone, _ = trusted_pod_ips({"phase": "Running", "podIP": "127.0.0.1"}, HomeAddresses())
    assert alone == {"phase": "Running"}
    untouched = {"phase": "Running", "podIP": "10.245.0.7", "podIPs": [{"ip": "10.245.0.7"}]}
    assert trusted_pod_ips(untouched, HOME) == (untouched, [])


def test_the_cache_keeps_of_a_node_what_the_home_addresses_are_made_of() -> None:
    node = a_real_node("venice-worker-2", "172.18.0.3", "1")
    kept = node_as_read(node)
    assert home_addresses([kept], []) == home_addresses([node], [])
    assert home_addresses([kept], []).refusal("10.244.1.9") is not None
    assert home_addresses([kept], []).refusal("172.18.0.3") is not None
    assert len(orjson.dumps(kept)) * 20 < len(orjson.dumps(node))


def test_home_addresses_are_made_again_only_when_a_node_changes_in_them() -> None:
    network = HomeNetwork(None)  # type: ignore[arg-type]  # its informers are fed by hand

    def shows(node: dict[str, Any]) -> None:
        kept = node_as_read(node)
        old = network.nodes.store.upsert(kept)
        network._changed(MODIFIED if old is not None else ADDED, kept, old)

    shows(a_real_node("venice-worker-2", "172.18.0.3", "1"))
    first = network.current()
    assert first.refusal("172.18.0.3") is not None
    shows(a_real_node("venice-worker-2", "172.18.0.3", "2"))  # its heartbeat: the same
    assert network.current() is first
    shows(a_real_node("venice-worker-2", "172.18.0.4", "3"))  # a new address
    assert network.current().refusal("172.18.0.4") is not None
    assert network.current().refusal("172.18.0.3") is None
