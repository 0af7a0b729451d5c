"""The VirtualNode's `spec.offloadingPatch`: what every pod, and the metadata of every object,
offloaded through the virtual node gets (Liqo's "VirtualNode customization"): a nodeSelector,
tolerations, a node affinity and a runtime class for the provider's scheduler, and the labels
and annotations kept at home.

Liqo's virtual kubelet reads it once, at start; vk follows the VirtualNode, so a changed patch
applies to the pods offloaded from then on, and to live ones where Kubernetes lets a live pod
change (tolerations added, labels and annotations), without a restart.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from vk.kube.client import JSON
from vk.kube.informer import Informer


def offloading_patch_of(virtual_node: Mapping[str, Any] | None) -> JSON:
    """The patch a VirtualNode sets, as its JSON (camelCase keys); {} without one. A field of
    the wrong type (the API server's schema checks them; a hand-made VirtualNode on an API
    server without vk's CRD would not) is left out rather than forged into a pod."""
    patch = ((virtual_node or {}).get("spec") or {}).get("offloadingPatch")
    if not isinstance(patch, Mapping):
        return {}
    kinds: dict[str, type] = {
        "nodeSelector": dict,
        "tolerations": list,
        "affinity": dict,
        "runtimeClassName": str,
        "labelsNotReflected": list,
        "annotationsNotReflected": list,
    }
    return {
        key: value
        for key, value in patch.items()
        if key in kinds and isinstance(value, kinds[key]) and value
    }


def with_kept_home(patch: Mapping[str, Any], kept_home: Mapping[str, list[str]]) -> JSON:
    """`patch` with the keys of `kept_home`'s lists added to its own (each once)."""
    merged = dict(patch)
    for field, keys in kept_home.items():
        if keys:
            merged[field] = list(dict.fromkeys([*(patch.get(field) or []), *keys]))
    return merged


class OffloadingPatchSource:
    """The current offloading patch of one VirtualNode, from an informer on it (run by the
    caller), and callbacks for when it changes."""

    def __init__(
        self,
        virtual_nodes: Informer,
        key: str,
        *,
        labels_not_reflected: Sequence[str] = (),
        annotations_not_reflected: Sequence[str] = (),
    ) -> None:
        """`labels_not_reflected`, `annotations_not_reflected`: kept home besides what the
        VirtualNode says (the virtual kubelet's flags, from a VkOptionsTemplate)."""
        self.virtual_nodes = virtual_nodes
        self.key = key
        self.static = {
            "labelsNotReflected": list(labels_not_reflected),
            "annotationsNotReflected": list(annotations_not_reflected),
        }
        self._current: JSON = with_kept_home({}, self.static)
        self._callbacks: list[Callable[[], None]] = []
        virtual_nodes.add_handler(lambda *_: self._refresh())

    def current(self) -> JSON:
        return self._current

    def on_change(self, callback: Callable[[], None]) -> None:
        self._callbacks.append(callback)

    def _refresh(self) -> None:
        patch = with_kept_home(
            offloading_patch_of(self.virtual_nodes.store.get(self.key)), self.static
        )
        if patch == self._current:
            return
        self._current = patch
        for callback in self._callbacks:
            callback()
