"""How an informer's cache keeps objects small (issue 20: ten thousand pods in one virtual
kubelet). Every object a cache takes in is compacted once, in place, just decoded:

- its managedFields are dropped: vk never reads them from a cache (it reads them fresh, where
  it does), and a pod's status writers alone leave several entries;
- its short strings are interned, so what ten thousand objects repeat (names, images,
  timestamps, condition types) is kept once per process; keys need nothing, since orjson, which
  decodes every object vk reads, hands out one string per key already;
- its parts (dicts and lists below the top level) equal to one a cache holds already are
  replaced by that one: the replicas of a Deployment repeat their labels, owner, tolerations,
  volume sources, resources, conditions of the same second... (a kwok pod's 8.3 KiB were 2.8,
  measured on bench.offload's pods).

So cached objects share parts with each other: they are read only, as they always were (a
handler or a reconciler that changed one in place would change what other caches, and other
controllers of the process, see). Copy before changing: the forges do.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

import orjson

JSON = dict[str, Any]
Part = dict[str, Any] | list[Any]

# Strings this short are kept once per process however many objects hold them: keys, and the
# values thousands of objects repeat (names, uids, images, timestamps, condition types).
INTERNED_STRING_MAX = 64
# Below this depth an object is kept as decoded: no Kubernetes object nests this deep, and a
# hostile one nesting deeper must not cost a recursion error.
COMPACT_DEPTH = 32
# The table of shared parts is swept of the parts no two holders share (SharedParts.sweep) when
# it has grown by this much since the last sweep: what it keeps for nothing is bounded, and a
# sweep's cost spread over the additions that caused it.
SWEEP_GROWTH = 1.25
SWEEP_MIN_PARTS = 4096


class SharedParts:
    """The parts the caches of a process hold, each once: by a hash of their JSON (orjson's,
    which tells `1` from `true` and keeps the keys' order), each checked equal before it is
    shared. The table keeps the part itself and the hash only: a table of whole signatures
    cost more than it saved."""

    def __init__(self) -> None:
        self._parts: dict[int, Part] = {}
        self._sweep_at = SWEEP_MIN_PARTS

    def __len__(self) -> int:
        return len(self._parts)

    def compact(self, obj: JSON, like: JSON | None = None) -> JSON:
        """`obj`, compacted in place (the module's docstring); the top level itself is never
        shared: a whole object is one of a kind (its name, its resourceVersion). `like`: the
        version of the object the cache holds now, if any, whose parts `obj` takes where they
        are the same JSON (a change of a pod's status leaves its spec as it was)."""
        metadata = obj.get("metadata")
        if isinstance(metadata, dict):
            metadata.pop("managedFields", None)
        self._share_within(obj, COMPACT_DEPTH, like)
        if len(self._parts) > self._sweep_at:
            self.sweep()
        return obj

    def sweep(self) -> None:
        """Forgets the parts no two holders share now: those no cache holds any more (the
        older versions of changed objects), and those one object alone holds (its metadata,
        its status: most of a pod's parts are its own, and kept here, would cost a table entry
        each for nothing; a part equal to one of them coming later is kept here from then on,
        and shared with those after it)."""
        parts = self._parts
        for signature in list(parts):
            # The table's reference, getrefcount's own argument, and one holder's at most.
            if sys.getrefcount(parts[signature]) <= 3:
                del parts[signature]
        self._sweep_at = max(SWEEP_MIN_PARTS, int(len(parts) * SWEEP_GROWTH))

    def _share_within(self, value: Part, depth: int, like: Any) -> None:
        """Interns the short strings of `value` and replaces its parts by shared ones, in
        place, from the top down: a part found whole (in `like`, the same place of the
        object's previous version, or in the table) is taken whole, and only the parts found
        nowhere are walked into. Leaves are done in the loop, not by a call each: an object
        has hundreds of them. Each part is encoded once per level above it, in C: a bottom-up
        walk hashing every part in Python cost two to five times more (issue 20)."""
        previous_of: Callable[[Any], Any] | None = None
        if type(value) is dict:
            items: Any = value.items()
            if type(like) is dict:
                previous_of = like.get
        else:
            items = enumerate(value)
            if type(like) is list and len(like) == len(value):
                previous_of = like.__getitem__
        parts = self._parts
        for key, item in items:
            kind = type(item)
            if kind is str:
                if len(item) <= INTERNED_STRING_MAX:
                    value[key] = sys.intern(item)
            elif (kind is dict or kind is list) and depth > 1:
                try:
                    content = orjson.dumps(item)
                except orjson.JSONEncodeError:
                    continue  # nested past orjson's limit, or not JSON: kept as it came
                previous = previous_of(key) if previous_of is not None else None
                if type(previous) is kind and orjson.dumps(previous) == content:
                    value[key] = previous  # as it was: the very same bytes
                    continue
                signature = hash(content)
                found = parts.get(signature)
                # The same JSON by its hash (string hashes are seeded per process: no one
                # can aim at a collision), and equal in Python, checked in C.
                if found is not None and found == item:
                    value[key] = found
                    continue
                self._share_within(item, depth - 1, previous)
                if found is None:
                    parts[signature] = item


# The process's table: every cache of a process shares with every other (a ShadowPod's labels
# are its pod's).
SHARED_PARTS = SharedParts()


def compact(obj: JSON, like: JSON | None = None) -> JSON:
    """`obj` as a cache keeps it (the module's docstring), compacted in place: call it on an
    object just decoded, never on one held elsewhere; `like`, the cache's version of it now.
    A PUT of a compacted copy keeps the server's managedFields: the API server leaves them as
    they are when the body has none."""
    return SHARED_PARTS.compact(obj, like)
