"""Whether a consumer's pod spec has the shape vk reads: pure, no I/O.

A ShadowPod's `spec.pod` is free JSON to the API server (the CRD keeps it whole and checks
nothing inside), written by a consumer the provider does not trust. The provider's webhook
judges it (scheduling, Pod Security, the Quota) and its controller makes and patches a Pod of it,
all reading it as a pod spec: each first asks `pod_spec_problems`, so that a spec of another
shape is refused, naming the field, instead of raising in the middle of a judgement. Only what
vk reads is checked: the API server validates the Pod itself when the controller makes it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# What vk reads, and how: names compared with the provider's lists (so hashed), the lists of
# containers and tolerations walked, resource lists parsed.
_NAMES = ("nodeName", "priorityClassName", "schedulerName", "runtimeClassName")
_CONTAINER_LISTS = ("containers", "initContainers", "ephemeralContainers")
_RESOURCE_LISTS = ("limits", "requests")
# How many problems a message names: a hostile spec may have thousands.
MAX_PROBLEMS_TOLD = 5


def _json_type(value: Any) -> str:
    if isinstance(value, dict):
        return "an object"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    return "null" if value is None else "a number"


# Each check builds the field's path only when it finds a problem: specs are read on every
# reconcile of their Pod, thousands of them, and nearly all of them are well formed.


def _not_an_object(value: Any, path: str, key: str) -> list[str]:
    """No object at `path.key` (null stands for one left out, as Kubernetes reads it)."""
    if value is None or isinstance(value, dict):
        return []
    return [f"{path}.{key}: must be an object, not {_json_type(value)}"]


def _not_a_string(value: Any, path: str, key: str) -> list[str]:
    if value is None or isinstance(value, str):
        return []
    return [f"{path}.{key}: must be a string, not {_json_type(value)}"]


def _object_list_problems(
    value: Any, path: str, key: str, item_problems: Callable[[dict[str, Any], str], list[str]]
) -> list[str]:
    """The problems of the list of objects at `path.key`, `item_problems` giving each one's
    (given the object and its path)."""
    if value is None:
        return []
    if not isinstance(value, list):
        return [f"{path}.{key}: must be a list, not {_json_type(value)}"]
    problems: list[str] = []
    for index, item in enumerate(value):
        if not isinstance(item, dict):
            problems.append(f"{path}.{key}[{index}]: must be an object, not {_json_type(item)}")
        elif found := item_problems(item, ""):
            # Found on the item alone: told again with its place in the list.
            problems += [f"{path}.{key}[{index}]{problem}" for problem in found]
    return problems


def _resources_problems(resources: Any, path: str) -> list[str]:
    """A ResourceRequirements-shaped `path.resources`."""
    problems = _not_an_object(resources, path, "resources")
    if problems or resources is None:
        return problems
    return [
        problem
        for key in _RESOURCE_LISTS
        for problem in _not_an_object(resources.get(key), f"{path}.resources", key)
    ]


def _toleration_problems(toleration: dict[str, Any], path: str) -> list[str]:
    return _not_a_string(toleration.get("key"), path, "key")


def _container_problems(container: dict[str, Any], path: str) -> list[str]:
    name = container.get("name")
    if name is None or name == "":
        problems = [f"{path}.name: required"]
    else:
        problems = _not_a_string(name, path, "name")
    return problems + _resources_problems(container.get("resources"), path)


def pod_spec_problems(spec: Any, path: str = "spec.pod") -> list[str]:
    """Each way the pod spec `spec` (at `path` of its object) is not of the shape vk reads,
    as `<field>: <what is wrong>`; empty when vk can read it."""
    if not isinstance(spec, dict):
        return [f"{path}: must be an object, not {_json_type(spec)}"]
    problems = [problem for key in _NAMES for problem in _not_a_string(spec.get(key), path, key)]
    problems += _resources_problems(spec.get("resources"), path)
    problems += _not_an_object(spec.get("overhead"), path, "overhead")
    problems += _object_list_problems(
        spec.get("tolerations"), path, "tolerations", _toleration_problems
    )
    for key in _CONTAINER_LISTS:
        problems += _object_list_problems(spec.get(key), path, key, _container_problems)
    return problems


def describe_problems(problems: list[str]) -> str:
    """`problems` in a message, the first MAX_PROBLEMS_TOLD of them."""
    told = "; ".join(problems[:MAX_PROBLEMS_TOLD])
    more = len(problems) - MAX_PROBLEMS_TOLD
    return f"{told} (and {more} more)" if more > 0 else told
