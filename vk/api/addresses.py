"""IP addresses as they route: the one way vk reads an address it judges (a pod IP a provider
reports, an endpoint a consumer asks the provider to route to, a client of the kubelet port)."""

from __future__ import annotations

import ipaddress

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address


def routed_address(text: str) -> IPAddress:
    """`text` as an IP address, an IPv4-mapped IPv6 address (`::ffff:10.0.0.1`) as the IPv4
    address it reaches. Judged as IPv6, `::ffff:127.0.0.1` is neither loopback nor in any IPv4
    range (Python before 3.13 says so), while a dual-stack host sends it to 127.0.0.1. Raises
    ValueError when `text` is no IP address."""
    address = ipaddress.ip_address(text)
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        return address.ipv4_mapped
    return address
