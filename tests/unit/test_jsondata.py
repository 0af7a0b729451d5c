"""json_copy: a deep copy of JSON data, whatever it holds."""

from __future__ import annotations

from vk.api.jsondata import json_copy


def test_a_copy_is_equal_and_shares_nothing_that_can_change() -> None:
    original = {"spec": {"containers": [{"name": "app", "ports": [{"containerPort": 80}]}]}}
    copied = json_copy(original)
    assert copied == original
    copied["spec"]["containers"][0]["ports"].append({"containerPort": 81})
    assert original["spec"]["containers"][0]["ports"] == [{"containerPort": 80}]


def test_what_orjson_cannot_encode_is_still_copied() -> None:
    original = {"big": 2**70, "list": [1]}
    copied = json_copy(original)
    assert copied == original
    assert copied["list"] is not original["list"]
