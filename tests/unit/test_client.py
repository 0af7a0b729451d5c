"""The REST client's pure parts."""

from __future__ import annotations

import time

import pytest

from vk.kube.client import (
    AlreadyExists,
    ApiError,
    MalformedWatch,
    NotFound,
    _typed_error,
    delete_options,
    object_path,
    parse_watch_event,
    plural_of,
    resource_of,
)
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


def test_the_kubelet_auth_cache_drops_expired_entries_when_full(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vk.kubelet import auth

    monkeypatch.setattr(auth, "CACHE_LIMIT", 3)
    now = time.monotonic()
    cache = {"old-1": (True, now - 1), "old-2": (True, now - 1), "live": (True, now + 60)}
    auth._remember(cache, "new", (False, now + 30))
    assert cache == {"live": (True, now + 60), "new": (False, now + 30)}


@pytest.mark.parametrize(
    ("kind", "plural"),
    [
        ("Quota", "quotas"),
        ("ClusterRoleBinding", "clusterrolebindings"),
        ("APIService", "apiservices"),
        ("Ingress", "ingresses"),
        ("NetworkPolicy", "networkpolicies"),
        ("Gateway", "gateways"),
        ("ResourceSlice", "resourceslices"),
    ],
)
def test_kinds_pluralise_as_the_api_server_does(kind: str, plural: str) -> None:
    assert plural_of(kind) == plural


def test_an_objects_path_names_its_namespace_and_name() -> None:
    role = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": "r", "namespace": "liqo-tenant-venice"},
    }
    assert object_path(role) == (
        "/apis/rbac.authorization.k8s.io/v1/namespaces/liqo-tenant-venice/roles/r"
    )
    assert object_path({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "x"}}) == (
        "/api/v1/namespaces/x"
    )


@pytest.mark.parametrize(
    "line",
    [
        b"this is not json",
        b'{"type": "ADDED", "object": {"metadata": {"name": "a"}}',  # cut short
        b"[1, 2]",
        b'"ADDED"',
        b'{"type": "EXPLODED", "object": {"metadata": {"name": "a"}}}',
        b'{"type": "ADDED"}',
        b'{"type": "ADDED", "object": [1]}',
        b'{"type": "ADDED", "object": {"metadata": "a"}}',
        b'{"type": "ADDED", "object": {"metadata": {"namespace": "n"}}}',
        b'{"type": "DELETED", "object": {"metadata": {"name": ""}}}',
        b'{"type": "MODIFIED", "object": {"metadata": {"name": "a", "namespace": 7}}}',
        b'{"type": "ERROR"}',
    ],
)
def test_a_watch_line_that_is_no_event_is_refused_whole(line: bytes) -> None:
    with pytest.raises(MalformedWatch):
        parse_watch_event(line)


@pytest.mark.parametrize(
    "line",
    [
        b'{"type": "ADDED", "object": {"metadata": {"name": "a", "namespace": "n"}}}',
        b'{"type": "DELETED", "object": {"metadata": {"name": "node-1"}}}',
        b'{"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": "12"}}}',
        b'{"type": "ERROR", "object": {"kind": "Status", "code": 410}}',
    ],
)
def test_a_watch_event_is_taken_as_it_is(line: bytes) -> None:
    assert parse_watch_event(line)["type"] in {"ADDED", "DELETED", "BOOKMARK", "ERROR"}


@pytest.mark.parametrize(
    ("status", "body", "kind", "reason", "message"),
    [
        (
            404,
            '{"kind":"Status","reason":"NotFound","message":"no pod"}',
            NotFound,
            "NotFound",
            "no pod",
        ),
        (
            409,
            '{"reason":"AlreadyExists","message":"taken"}',
            AlreadyExists,
            "AlreadyExists",
            "taken",
        ),
        (500, "upstream broke", ApiError, "", "upstream broke"),
        # What a hostile or broken server may answer: JSON, but no Status object.
        (500, "[1, 2]", ApiError, "", "[1, 2]"),
        (500, '"text"', ApiError, "", '"text"'),
        (500, '{"reason": ["a"], "message": {"b": 1}}', ApiError, "['a']", "{'b': 1}"),
    ],
)
def test_an_error_answer_becomes_a_typed_error_whatever_its_body(
    status: int, body: str, kind: type[ApiError], reason: str, message: str
) -> None:
    error = _typed_error(status, body)
    assert type(error) is kind
    assert (error.status, error.reason, error.message) == (status, reason, message)


def test_delete_options_say_only_what_they_are_given() -> None:
    assert delete_options() == {"apiVersion": "v1", "kind": "DeleteOptions"}
    assert delete_options(uid="u-1", grace_period=0) == {
        "apiVersion": "v1",
        "kind": "DeleteOptions",
        "preconditions": {"uid": "u-1"},
        "gracePeriodSeconds": 0,
    }
    assert delete_options(uid="u-1", grace_period=None)["preconditions"] == {"uid": "u-1"}
    assert "gracePeriodSeconds" not in delete_options(uid="u-1", grace_period=None)
    assert delete_options(propagation="Orphan")["propagationPolicy"] == "Orphan"
