"""The REST client's pure parts."""

from __future__ import annotations

import pytest

from vk.kube.client import resource_of
from vk.kubelet.server import log_error_message


@pytest.mark.parametrize(
    ("path", "resource"),
    [
        ("/api/v1/namespaces/ns/pods/p/status", "pods/status"),
        ("/api/v1/namespaces/ns/pods", "pods"),
        ("/api/v1/namespaces/ns", "namespaces"),
        ("/api/v1/nodes/n", "nodes"),
        ("/api/v1/nodes/n/status", "nodes/status"),
        ("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/n", "leases"),
        ("/apis/offloading.liqo.io/v1beta1/namespacemaps", "namespacemaps"),
        ("/livez", "-"),
        ("/version", "-"),
    ],
)
def test_requests_are_counted_by_resource(path: str, resource: str) -> None:
    assert resource_of(path) == resource


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            b'{"kind":"Status","message":"pods \\"p\\" is forbidden: no"}',
            'pods "p" is forbidden: no',
        ),
        (b"container not found\n", "container not found"),
        (b"[1, 2]", "[1, 2]"),
    ],
)
def test_a_providers_log_error_becomes_its_plain_message(body: bytes, message: str) -> None:
    assert log_error_message(body) == message
