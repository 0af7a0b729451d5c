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
from typing import Any

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
    """The parts the caches of a process hold, each once: by a hash of their content (their own
    parts' content hashes, and their scalars with their types: `1` and `True` are different
    values), each checked equal before it is shared. The table keeps the part itself and the
    hash only: a table of whole signatures cost more than it saved."""

    def __init__(self) -> None:
        self._parts: dict[int, Part] = {}
        self._sweep_at = SWEEP_MIN_PARTS

    def __len__(self) -> int:
        return len(self._parts)

    def compact(self, obj: JSON) -> JSON:
        """`obj`, compacted in place (the module's docstring); the top level itself is never
        shared: a whole object is one of a kind (its name, its resourceVersion)."""
        metadata = obj.get("metadata")
        if isinstance(metadata, dict):
            metadata.pop("managedFields", None)
        self._share_within(obj, COMPACT_DEPTH)
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

    def _share_within(self, value: Part, depth: int) -> int:
        """Interns the short strings of `value` and replaces its parts by the shared ones, in
        place; returns the hash of its content. Leaves are done in the loop, not by a call
        each: an object has hundreds of them. A part counts by its content's hash, not by
        which copy it is: a parent stays found after the table forgot its parts."""
        signature: list[Any]
        if type(value) is dict:
            signature = [dict]
            items: Any = value.items()
        else:
            signature = [list]
            items = enumerate(value)
        for key, item in items:
            kind = type(item)
            if kind is str:
                if len(item) <= INTERNED_STRING_MAX:
                    item = sys.intern(item)
                    value[key] = item
                signature += (key, item)
            elif kind is dict or kind is list:
                shared, content = self._share(item, depth - 1)
                if shared is not item:
                    value[key] = shared
                signature += (key, kind, content)
            else:
                signature += (key, kind, item)
        return hash(tuple(signature))

    def _share(self, part: Part, depth: int) -> tuple[Part, int]:
        """The part of a cache equal to `part`, or `part` itself, from now on shared; and the
        hash of its content (below COMPACT_DEPTH, of its identity: it is kept as it came)."""
        if depth <= 0:
            return part, id(part)
        content = self._share_within(part, depth)
        found = self._parts.get(content)
        if found is None:
            self._parts[content] = part
            return part, content
        # Equal in Python, and of equal content hashes, which count their scalars' types: the
        # same JSON (`1 == True` in Python, and the two hash apart), short of a collision of
        # two hashes of equal parts of different types, which no one can aim at (string
        # hashes are seeded per process, type hashes are addresses). Checked by `==` in C,
        # as the parts of `part` are mostly the very ones of `found` by now.
        return (found if found == part else part), content


# The process's table: every cache of a process shares with every other (a ShadowPod's labels
# are its pod's).
SHARED_PARTS = SharedParts()


def compact(obj: JSON) -> JSON:
    """`obj` as a cache keeps it (the module's docstring), compacted in place: call it on an
    object just decoded, never on one held elsewhere. A PUT of a compacted copy keeps the
    server's managedFields: the API server leaves them as they are when the body has none."""
    return SHARED_PARTS.compact(obj)
