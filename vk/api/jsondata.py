"""Kubernetes objects as vk holds them: decoded JSON (dicts, lists, strings, numbers, booleans,
null), never model classes (DESIGN §5)."""

from __future__ import annotations

import copy
from typing import TypeVar

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
