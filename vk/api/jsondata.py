"""Kubernetes objects as vk holds them: decoded JSON (dicts, lists, strings, numbers, booleans,
null), never model classes (DESIGN §5)."""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping
from typing import Any, TypeGuard, TypeVar

import orjson

T = TypeVar("T")


def json_copy(value: T) -> T:
    """A deep copy of JSON data, by orjson: a forge copies what it changes of an object a cache
    holds (cached objects share their parts: vk/kube/compaction.py), and `copy.deepcopy` was a
    tenth of the virtual kubelet's CPU per offloaded pod. What orjson cannot encode (an integer
    beyond 64 bits, which no API server sends) is copied by `copy.deepcopy`."""
    try:
        copied: T = orjson.loads(orjson.dumps(value))
    except TypeError:  # orjson.JSONEncodeError is one
        return copy.deepcopy(value)
    return copied


def json_size(value: object) -> int:
    """The bytes of `value` as compact JSON; of one that cannot be written so (orjson decodes
    objects nested 1024 deep, and encodes 255 at most), more than any bound: what measures the
    other side's objects against a budget must never raise."""
    try:
        return len(orjson.dumps(value))
    except (orjson.JSONEncodeError, RecursionError):
        return sys.maxsize


# Reading what the other side of a peering wrote: a field of any type, never raised on.


def as_mapping(value: Any) -> Mapping[str, Any]:
    """`value` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def is_integer(value: Any) -> TypeGuard[int]:
    """Whether `value` is a JSON integer (`true` is not one, though Python says so)."""
    return isinstance(value, int) and not isinstance(value, bool)


def cut_text(value: Any, limit: int) -> str:
    """`value` cut to `limit` characters if it is a string, else ""."""
    return value[:limit] if isinstance(value, str) else ""
