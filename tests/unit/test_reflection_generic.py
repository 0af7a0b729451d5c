"""The generic reflector's pure parts: which copy of a remote object is newer, and the body
that replaces a remote object with the local truth."""

from __future__ import annotations

from typing import Any

import pytest

from vk.kube.informer import ADDED, DELETED, MODIFIED
from vk.reflection.generic import RecentWrites, replacement, rv_newer


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


def copy_of(uid: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": "settings", "uid": uid, "resourceVersion": rv}}


KEY = "shop-venice/settings"


def test_what_we_wrote_stands_until_the_informer_catches_up() -> None:
    recent = RecentWrites()
    created = copy_of("u-1", "10")
    recent.wrote(KEY, created)
    assert recent.current(KEY, None) is created, "the informer has not seen it yet"
    older = copy_of("u-1", "9")
    assert recent.current(KEY, older) is created, "the informer is behind our write"
    seen = copy_of("u-1", "10")
    assert recent.current(KEY, seen) is seen
    assert recent.current(KEY, None) is None, "forgotten once the informer showed it"


def test_a_later_change_by_someone_else_wins_over_what_we_wrote() -> None:
    recent = RecentWrites()
    recent.wrote(KEY, copy_of("u-1", "10"))
    edited = copy_of("u-1", "11")
    assert recent.current(KEY, edited) is edited


def test_what_we_deleted_is_gone_though_the_informer_still_has_it() -> None:
    recent = RecentWrites()
    cached = copy_of("u-1", "10")
    recent.deleted(KEY, cached)
    assert recent.current(KEY, cached) is None
    recent.observe(KEY, DELETED, cached)
    recreated = copy_of("u-2", "12")
    assert recent.current(KEY, recreated) is recreated


def test_what_we_wrote_is_forgotten_when_the_informer_shows_it_though_never_asked_again() -> None:
    recent = RecentWrites()
    recent.wrote(KEY, copy_of("u-1", "10"))
    recent.observe(KEY, ADDED, copy_of("u-1", "9"))  # an event from before our write
    assert recent.current(KEY, None) is not None
    recent.observe(KEY, MODIFIED, copy_of("u-1", "10"))
    assert recent._written == {}, "nothing kept of a write the informer shows"


def test_a_copy_deleted_by_hand_before_the_informer_saw_our_write_is_not_remembered() -> None:
    recent = RecentWrites()
    created = copy_of("u-1", "10")
    recent.wrote(KEY, created)
    recent.observe(KEY, DELETED, created)  # added and deleted before we looked again
    assert recent.current(KEY, None) is None, "so it is created again"
