"""How each vk daemon (`vk kubelet`, `vk controller-manager`, `vk webhook`) runs its main
coroutine: on uvloop, with Python's cyclic garbage collector set for processes whose caches
hold tens of thousands of objects."""

from __future__ import annotations

import gc
from collections.abc import Coroutine
from typing import Any, TypeVar

import uvloop

T = TypeVar("T")

# The young generations are collected as often as by default (the short-lived cycles that
# asyncio's tasks and exceptions make go as soon); a full collection waits for a hundred
# times more young ones than by default.
GC_THRESHOLDS = (700, 10, 1000)


def tune_garbage_collector() -> None:
    """A full collection walks every container the process tracks, and caches of ten thousand
    pods hold millions of them: JSON trees, which have no cycles and are freed by their
    reference counts alone, walked for nothing. With the defaults, decoding a list page of 500
    pods into a growing cache took five times as long (55 ms against 12, garbage collection
    off: issue 20), and a virtual kubelet restarted with 10,000 pods spent a sixth of its CPU
    in it. So what the process holds once started (its modules, classes and functions, which
    live as long as it) is frozen out of every collection, and full collections are rarer.
    Cyclic garbage is still collected: young, as soon as before; old, later."""
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def run(main: Coroutine[Any, Any, T]) -> T:
    """Runs a daemon's main coroutine to its end, its collector tuned first."""
    tune_garbage_collector()
    return uvloop.run(main)
