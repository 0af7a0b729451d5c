"""What the provider's controller manager keeps of the pods its consumers offload to it: every
ShadowPod and the Pod made of each, one cache of each per process, shared by the controllers
that read them (the ShadowPod controller, the Quota recount, the node-failure controller), and
trimmed to what they read. The two caches grow with the consumers' pods, in a cluster whose
owner pays for them: whole, they held 11.1 KiB per offloaded pod, 5.2 as kept here
(bench.offload, 2000 pods).

A keep runs in the informer, on objects of the provider's own API server; a raise there would
stop the cache, so nothing here raises on a field of an unexpected shape.

A ShadowPod's `spec.pod` is whatever JSON its consumer wrote (the CRD checks nothing inside, the
webhook only what vk reads): one of 1.3 MiB of small objects was 15 MiB decoded. Until its Pod
is made it is kept whole only while its `spec.pod` is small (MAX_WHOLE_POD_SPEC_BYTES); a larger
one is kept as read, as once its Pod is made, and its Pod is made of it read afresh.
"""

from __future__ import annotations

from typing import Any

from vk.api.constants import SHADOW_POD_OWNED_LABEL
from vk.api.jsondata import json_size
from vk.api.offloading import ShadowPod, ShadowPodConditionType
from vk.kube.client import JSON, KubeClient
from vk.kube.informer import Indexer, Informer, shared_informer

# What the controllers read of a Pod made of a ShadowPod (`provider_pod_as_read`).
_POD_SPEC_READ = ("nodeName", "activeDeadlineSeconds", "tolerations")
_POD_STATUS_READ = ("phase", "reason", "conditions")
_CONTAINER_LISTS = ("containers", "initContainers")
# What they read of a ShadowPod's `spec.pod` once its Pod is made, or of a large one before
# (`provider_shadow_pod_as_read`): what `live_pod_patch` compares, and what the Quota recount
# counts (`pod_requests`).
_SHADOW_SPEC_READ = ("activeDeadlineSeconds", "tolerations", "resources", "overhead")
_SHADOW_CONTAINER_FIELDS_READ = ("name", "image", "resources", "restartPolicy")
# What `pod_requests` (and `pod_spec_problems`) read of a `resources`.
_RESOURCE_LISTS = ("limits", "requests")
# A Toleration's fields, as the API server keeps them on a Pod: the empty ones left out.
_TOLERATION_FIELDS = ("key", "operator", "value", "effect", "tolerationSeconds")
# The mark of a ShadowPod kept without what only a Pod's creation reads: a Pod made of it again
# is made of the ShadowPod read afresh.
CREATION_SPEC_LEFT = "vk.creationSpecLeft"
# The largest `spec.pod` (its JSON) kept whole until its Pod is made: a pod's is a few KiB, one
# with a long env or many volumes tens. A larger one costs a read of it when its Pod is made.
MAX_WHOLE_POD_SPEC_BYTES = 16 * 1024


def _containers(spec: dict[str, Any], key: str, fields: tuple[str, ...]) -> list[JSON] | None:
    containers = spec.get(key)
    if not isinstance(containers, list):
        return None
    return [
        {field: container[field] for field in fields if field in container}
        for container in containers
        if isinstance(container, dict)
    ]


def _resources(resources: Any) -> Any:
    """A `resources` as read: its limits and requests (not its claims, nor whatever else a
    consumer put there); one of another shape as it is, for `pod_spec_problems` to tell."""
    if not isinstance(resources, dict):
        return resources
    return {key: resources[key] for key in _RESOURCE_LISTS if key in resources}


def _tolerations(tolerations: Any) -> Any:
    """Tolerations as the API server keeps them on the Pod (`live_pod_patch` compares them
    with the Pod's): their fields, the empty ones left out. Whole, one with another field or an
    empty one never equalled the Pod's, and each reconcile added it to the Pod once more (the
    API server dropping the field), each addition an event of the Pod and another reconcile.
    What is of another shape is kept as it is, for `pod_spec_problems` to tell."""
    if not isinstance(tolerations, list):
        return tolerations
    return [
        {field: t[field] for field in _TOLERATION_FIELDS if t.get(field) not in (None, "")}
        if isinstance(t, dict)
        else t
        for t in tolerations
    ]


def provider_pod_as_read(pod: JSON) -> JSON:
    """What the cache keeps of a Pod made of a ShadowPod: its metadata; of its spec, its Node
    and what `live_pod_patch` compares (its containers' names and images, activeDeadlineSeconds,
    tolerations); of its status, whether it runs, finished or was put out (phase, reason,
    conditions). Its volumes, the rest of its containers and their statuses are left: most of
    a Pod, and most of what is its own (each pod's token volume has a name of its own). A patch
    of its containers is built on the whole Pod, read afresh (`patch_on_whole`)."""
    spec = pod.get("spec") or {}
    kept_spec: JSON = {key: spec[key] for key in _POD_SPEC_READ if key in spec}
    for key in _CONTAINER_LISTS:
        if (containers := _containers(spec, key, ("name", "image"))) is not None:
            kept_spec[key] = containers
    status = pod.get("status") or {}
    return {
        "metadata": pod.get("metadata") or {},
        "spec": kept_spec,
        "status": {key: status[key] for key in _POD_STATUS_READ if key in status},
    }


def pod_made(shadow_pod: JSON) -> bool:
    """Whether the ShadowPod controller made the ShadowPod's Pod (condition PodCreated True)."""
    conditions = (shadow_pod.get("status") or {}).get("conditions")
    return isinstance(conditions, list) and any(
        isinstance(c, dict)
        and c.get("type") == ShadowPodConditionType.POD_CREATED
        and c.get("status") == "True"
        for c in conditions
    )


def _small(pod: JSON) -> bool:
    """Whether a `spec.pod` is kept whole until its Pod is made (MAX_WHOLE_POD_SPEC_BYTES; one
    nested past what JSON encodes is no pod spec, and not small)."""
    return json_size(pod) <= MAX_WHOLE_POD_SPEC_BYTES


def provider_shadow_pod_as_read(shadow_pod: JSON) -> JSON:
    """What the cache keeps of a ShadowPod: the whole of it until its Pod is made, if its
    `spec.pod` is small (`_small`); from then on, or if it is not, its metadata and status, and
    of `spec.pod` what keeping the Pod in line with it and counting it in its Quota read (the
    containers' names, images, requests and limits and restart policies, activeDeadlineSeconds,
    tolerations as the Pod keeps them, the pod's requests, limits and overhead), marked
    CREATION_SPEC_LEFT. Its volumes and the rest of its containers (each pod's token volume and
    mount have names of their own) are read afresh when its Pod is made, or made again: until
    then the controllers read nothing else of it (the ShadowPod controller its metadata and
    status, whether it finished and is in its Quota's ledger; the recount its requests)."""
    spec = shadow_pod.get("spec")
    if not isinstance(spec, dict) or not isinstance(pod := spec.get("pod"), dict):
        return shadow_pod
    if not pod_made(shadow_pod) and _small(pod):
        return shadow_pod
    kept_pod: JSON = {key: pod[key] for key in _SHADOW_SPEC_READ if key in pod}
    if "tolerations" in kept_pod:
        kept_pod["tolerations"] = _tolerations(kept_pod["tolerations"])
    if "resources" in kept_pod:
        kept_pod["resources"] = _resources(kept_pod["resources"])
    for key in _CONTAINER_LISTS:
        if (containers := _containers(pod, key, _SHADOW_CONTAINER_FIELDS_READ)) is not None:
            for container in containers:
                if "resources" in container:
                    container["resources"] = _resources(container["resources"])
            kept_pod[key] = containers
    return {**shadow_pod, "spec": {**spec, "pod": kept_pod}, CREATION_SPEC_LEFT: True}


def pods_made_of_shadow_pods(client: KubeClient) -> Informer:
    """The informer of the Pods the ShadowPod controller made, as `provider_pod_as_read` keeps
    them."""
    return shared_informer(
        client,
        "v1",
        "pods",
        label_selector=f"{SHADOW_POD_OWNED_LABEL}=true",
        keep=provider_pod_as_read,
    )


def every_shadow_pod(client: KubeClient, indexers: dict[str, Indexer] | None = None) -> Informer:
    """The informer of every ShadowPod, as `provider_shadow_pod_as_read` keeps them: the
    provider's busiest, one watch of it per process (a second, of the stamped ones only, took
    each ShadowPod's changes in twice)."""
    return shared_informer(
        client,
        ShadowPod.group_version(),
        ShadowPod.PLURAL,
        indexers=indexers,
        keep=provider_shadow_pod_as_read,
    )
