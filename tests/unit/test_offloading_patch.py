"""The VirtualNode's offloadingPatch as the virtual kubelet reads it, and as it filters the
metadata of reflected objects."""

from __future__ import annotations

from typing import Any

from vk.api.constants import DESTINATION_LABEL, NODENAME_LABEL, ORIGIN_LABEL
from vk.reflection.forge.meta import without_not_reflected
from vk.reflection.offloading_patch import OffloadingPatchSource, offloading_patch_of

PATCH = {
    "nodeSelector": {"pool": "tenants"},
    "tolerations": [{"key": "tenants", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {"nodeAffinity": {}},
    "runtimeClassName": "gvisor",
    "labelsNotReflected": ["team"],
    "annotationsNotReflected": ["billing"],
}


def virtual_node(patch: Any) -> dict[str, Any]:
    return {"metadata": {"name": "vn", "namespace": "t"}, "spec": {"offloadingPatch": patch}}


def test_the_patch_is_read_as_the_virtual_node_sets_it() -> None:
    assert offloading_patch_of(virtual_node(PATCH)) == PATCH


def test_no_virtual_node_or_no_patch_is_an_empty_patch() -> None:
    assert offloading_patch_of(None) == {}
    assert offloading_patch_of({"spec": {}}) == {}
    assert offloading_patch_of(virtual_node(None)) == {}
    assert offloading_patch_of(virtual_node("nodeSelector: x")) == {}


def test_fields_of_the_wrong_type_or_unknown_are_left_out() -> None:
    mangled = {
        "nodeSelector": ["pool=tenants"],
        "tolerations": {"key": "x"},
        "runtimeClassName": 7,
        "labelsNotReflected": "team",
        "hostNetwork": True,
        "affinity": {"nodeAffinity": {}},
    }
    assert offloading_patch_of(virtual_node(mangled)) == {"affinity": {"nodeAffinity": {}}}


class FakeInformer:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.handlers: list[Any] = []
        self.store = self

    def get(self, key: str) -> dict[str, Any] | None:
        return self.objects.get(key)

    def add_handler(self, handler: Any) -> None:
        self.handlers.append(handler)

    def put(self, key: str, obj: dict[str, Any] | None) -> None:
        if obj is None:
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        for handler in self.handlers:
            handler("MODIFIED", obj or {}, None)


def test_callbacks_run_when_the_patch_changes_and_only_then() -> None:
    informer = FakeInformer()
    source = OffloadingPatchSource(informer, "t/vn")  # type: ignore[arg-type]
    calls: list[dict[str, Any]] = []
    source.on_change(lambda: calls.append(source.current()))
    informer.put("t/vn", virtual_node(PATCH))
    informer.put("t/vn", {**virtual_node(PATCH), "status": {"conditions": []}})  # same patch
    informer.put("t/other", virtual_node({"nodeSelector": {"a": "b"}}))  # another node's
    changed = {**PATCH, "nodeSelector": {"pool": "batch"}}
    informer.put("t/vn", virtual_node(changed))
    informer.put("t/vn", None)  # deleted: nothing patched any more
    assert calls == [PATCH, changed, {}]


def test_reflected_copies_lose_what_the_patch_keeps_home_but_stay_ours() -> None:
    ownership = {ORIGIN_LABEL: "venice", DESTINATION_LABEL: "naples", NODENAME_LABEL: "vn"}
    remote = {
        "kind": "ConfigMap",
        "metadata": {
            "name": "settings",
            "labels": {"team": "a", "app": "web", **ownership},
            "annotations": {"billing": "x"},
        },
        "data": {"k": "v"},
    }
    patch = {
        "labelsNotReflected": ["team", ORIGIN_LABEL, DESTINATION_LABEL, NODENAME_LABEL],
        "annotationsNotReflected": ["billing"],
    }
    filtered = without_not_reflected(remote, patch)
    assert filtered == {
        "kind": "ConfigMap",
        "metadata": {"name": "settings", "labels": {"app": "web", **ownership}},
        "data": {"k": "v"},
    }
    assert remote["metadata"]["labels"]["team"] == "a"  # the forged object is not changed
    assert without_not_reflected(remote, {}) == remote
