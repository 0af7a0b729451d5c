"""The REST client's pure parts."""

from __future__ import annotations

import pytest

from vk.kube.client import resource_of


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
