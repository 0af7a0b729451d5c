"""What a cache keeps of an object (vk/kube/compaction.py): equal to what came, its strings
and equal parts shared with other cached objects, never a part that differs in anything."""

from __future__ import annotations

from typing import Any

import orjson

from vk.kube.client import JSON
from vk.kube.compaction import (
    COMPACT_DEPTH,
    INTERNED_STRING_MAX,
    SharedParts,
    compact,
)


def decoded(obj: Any) -> Any:
    """`obj` as a watch event brings it: decoded apart from any other."""
    return orjson.loads(orjson.dumps(obj))


def replica(name: str, **spec: Any) -> JSON:
    return decoded(
        {
            "metadata": {
                "name": name,
                "uid": f"uid-{name}",
                "labels": {"app": "web"},
                "managedFields": [{"manager": "kubelet"}],
            },
            "spec": {
                "containers": [{"name": "app", "image": "registry.local/web:1"}],
                "tolerations": [{"key": "a", "operator": "Exists", "tolerationSeconds": 300}],
                **spec,
            },
            "data": "x" * (INTERNED_STRING_MAX + 1),
        }
    )


def test_a_compacted_object_is_equal_and_shares_its_strings_with_the_others() -> None:
    one, other = compact(replica("one")), compact(replica("other"))
    expected = replica("one")
    del expected["metadata"]["managedFields"]
    assert one == expected
    image = one["spec"]["containers"][0]["image"]
    assert image is other["spec"]["containers"][0]["image"]
    assert next(iter(one["metadata"]["labels"])) is next(iter(other["metadata"]["labels"]))
    assert one["data"] is not other["data"]  # long values stay each object's own


def test_equal_parts_of_two_objects_are_one_and_the_parts_that_differ_are_their_own() -> None:
    parts = SharedParts()
    one, other = parts.compact(replica("one")), parts.compact(replica("other"))
    assert one["spec"] is other["spec"]
    assert one["metadata"]["labels"] is other["metadata"]["labels"]
    assert one["metadata"] is not other["metadata"]  # their names differ
    assert one is not other  # a whole object is never shared


def test_parts_equal_in_python_but_not_in_json_are_not_shared() -> None:
    """`1 == True == 1.0` in Python; a pod asking for 1 is not one asking for true."""
    parts = SharedParts()
    kept = [
        parts.compact(decoded({"metadata": {"name": str(i)}, "spec": {"value": value}}))
        for i, value in enumerate([1, True, 1.0, "1", None, [1], {"a": 1}])
    ]
    specs = [obj["spec"] for obj in kept]
    assert len({id(spec) for spec in specs}) == len(specs)
    kinds = [int, bool, float, str, type(None), list, dict]
    assert [type(spec["value"]) for spec in specs] == kinds


def test_the_same_keys_in_another_order_are_another_part() -> None:
    parts = SharedParts()
    one = parts.compact(decoded({"metadata": {"name": "one"}, "spec": {"a": 1, "b": 2}}))
    other = parts.compact(decoded({"metadata": {"name": "other"}, "spec": {"b": 2, "a": 1}}))
    assert one["spec"] is not other["spec"]
    assert list(other["spec"]) == ["b", "a"]  # as it came


def test_a_sweep_forgets_the_parts_no_two_objects_hold_and_keeps_the_shared_ones() -> None:
    parts = SharedParts()
    one = parts.compact(replica("one"))
    two = parts.compact(replica("two"))
    alone = parts.compact(replica("alone", extra={"only": "alone"}))
    held = len(parts)
    parts.sweep()
    parts.sweep()  # a part held by a part forgotten goes in the next sweep
    assert len(parts) < held
    again = parts.compact(replica("again"))
    assert again["spec"] is one["spec"] is two["spec"]  # shared by two: still shared
    later = parts.compact(replica("later", extra={"only": "alone"}))
    assert later["spec"] is not alone["spec"]  # held by one only: forgotten, and kept anew
    assert parts.compact(replica("last", extra={"only": "alone"}))["spec"] is later["spec"]


def test_the_table_is_swept_as_it_grows() -> None:
    parts = SharedParts()
    for i in range(10_000):  # each object's parts its own, and each dropped at once
        parts.compact(decoded({"metadata": {"name": str(i)}, "spec": {"n": i}}))
    assert len(parts) < 10_000


def test_a_hostile_deeply_nested_object_is_kept_as_it_came() -> None:
    nested: JSON = {"leaf": "x"}
    for _ in range(5000):  # deeper than the interpreter's recursion limit
        nested = {"n": nested}
    compacted = compact({"metadata": {"name": "deep"}, "spec": nested})  # no RecursionError
    inner, original = compacted["spec"], nested
    for _ in range(COMPACT_DEPTH + 1):
        inner, original = inner["n"], original["n"]
    assert inner is original  # below the depth compacted, the very object decoded


def test_a_changed_object_takes_the_unchanged_parts_of_the_version_cached() -> None:
    parts = SharedParts()
    cached = parts.compact(replica("one", volumes=[{"name": "own-to-this-pod"}]))
    parts.sweep()
    parts.sweep()  # its own parts are no longer in the table: only the cached version has them
    changed = replica("one", volumes=[{"name": "own-to-this-pod"}])
    changed["metadata"]["resourceVersion"] = "2"
    changed = parts.compact(changed, like=cached)
    assert changed["spec"] is cached["spec"]
    assert changed["metadata"] is not cached["metadata"]  # the part that changed is its own
    assert changed["metadata"]["labels"] is cached["metadata"]["labels"]
    assert changed["metadata"]["resourceVersion"] == "2"


def test_a_part_equal_in_python_but_not_in_json_to_the_cached_one_is_the_new_one() -> None:
    """A field that went from 1 to true (or 1.0), or whose keys changed order, is what came,
    not what was cached: `1 == True == 1.0` in Python."""
    parts = SharedParts()
    for before, after in (
        ({"value": 1}, {"value": True}),
        ({"value": 1}, {"value": 1.0}),
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}),
        ({"list": [0]}, {"list": [False]}),
    ):
        cached = parts.compact(decoded({"metadata": {"name": "x"}, "spec": before}))
        came = parts.compact(decoded({"metadata": {"name": "x"}, "spec": after}), like=cached)
        assert came["spec"] is not cached["spec"]
        assert orjson.dumps(came) == orjson.dumps({"metadata": {"name": "x"}, "spec": after})


def test_a_list_of_another_length_is_not_guided_by_the_cached_one() -> None:
    parts = SharedParts()
    cached = parts.compact(decoded({"metadata": {"name": "x"}, "spec": {"items": [{"a": 1}]}}))
    came = parts.compact(
        decoded({"metadata": {"name": "x"}, "spec": {"items": [{"a": 2}, {"a": 1}]}}), like=cached
    )
    assert came["spec"]["items"] == [{"a": 2}, {"a": 1}]


def test_a_part_that_is_not_json_is_kept_as_it_came() -> None:
    """What a cache's `keep` made may hold what orjson does not encode: it is not shared."""
    own = {"odd": {1, 2}}
    kept = compact({"metadata": {"name": "odd"}, "spec": own})
    assert kept["spec"] is own
    assert kept["spec"]["odd"] == {1, 2}
