"""The generic reflector's pure parts: which copy of a remote object is newer, and the body
that replaces a remote object with the local truth."""

from __future__ import annotations

from typing import Any

import pytest

from vk.reflection.generic import replacement, rv_newer


def versioned(rv: str) -> dict[str, Any]:
    return {"metadata": {"name": "settings", "resourceVersion": rv}}


@pytest.mark.parametrize(
    ("candidate", "than", "newer"),
    [
        ("1200", "1199", True),
        ("1199", "1200", False),
        ("1200", "1200", False),
        # Compared as numbers, not strings: "999" < "1000".
        ("1000", "999", True),
        # Not an etcd revision: the informer's copy is trusted.
        ("abc", "1", False),
    ],
)
def test_rv_newer_compares_etcd_revisions(candidate: str, than: str, newer: bool) -> None:
    assert rv_newer(versioned(candidate), versioned(than)) is newer


def test_rv_newer_without_a_version_is_not_newer() -> None:
    assert rv_newer({"metadata": {}}, versioned("1")) is False


def test_replacement_is_the_desired_object_guarded_by_the_current_version() -> None:
    desired = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "namespace": "shop-venice", "labels": {"a": "1"}},
        "data": {"mode": "production"},
    }
    current = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "settings",
            "namespace": "shop-venice",
            "resourceVersion": "42",
            "uid": "u-1",
            "labels": {"a": "1", "hand": "made"},
            "finalizers": ["example.com/keep"],
            "ownerReferences": [{"kind": "Thing", "name": "t", "uid": "u-2", "apiVersion": "v1"}],
        },
        "data": {"mode": "broken", "extra": "x"},
    }
    assert replacement(desired, current) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "settings",
            "namespace": "shop-venice",
            "labels": {"a": "1"},
            "resourceVersion": "42",
            "finalizers": ["example.com/keep"],
            "ownerReferences": [{"kind": "Thing", "name": "t", "uid": "u-2", "apiVersion": "v1"}],
        },
        "data": {"mode": "production"},
    }
    assert "resourceVersion" not in desired["metadata"], "the desired object is left as it was"
