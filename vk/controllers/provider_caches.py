"""What the provider's controller manager keeps of the pods its consumers offload to it: every
ShadowPod and the Pod made of each, one cache of each per process, shared by the controllers
that read them (the ShadowPod controller, the Quota recount, the node-failure controller), and
trimmed to what they read. The two caches grow with the consumers' pods, in a cluster whose
owner pays for them: whole, they held 11.1 KiB per offloaded pod, 5.2 as kept here
(bench.offload, 2000 pods).

A keep runs in the informer, on objects of the provider's own API server; a raise there would
stop the cache, so nothing here raises on a field of an unexpected shape.
"""

from __future__ import annotations

from typing import Any

from vk.api.constants import SHADOW_POD_OWNED_LABEL
from vk.api.offloading import ShadowPod, ShadowPodConditionType
from vk.kube.client import JSON, KubeClient
from vk.kube.informer import Indexer, Informer, shared_informer

# What the controllers read of a Pod made of a ShadowPod (`provider_pod_as_read`).
_POD_SPEC_READ = ("nodeName", "activeDeadlineSeconds", "tolerations")
_POD_STATUS_READ = ("phase", "reason", "conditions")
_CONTAINER_LISTS = ("containers", "initContainers")
# What they read of a ShadowPod's `spec.pod` once its Pod is made (`provider_shadow_pod_as_read`):
# what `live_pod_patch` compares, and what the Quota recount counts (`pod_requests`).
_SHADOW_SPEC_READ = ("activeDeadlineSeconds", "tolerations", "resources", "overhead")
_SHADOW_CONTAINER_FIELDS_READ = ("name", "image", "resources", "restartPolicy")
# The mark of a ShadowPod kept without what only a Pod's creation reads: a Pod made of it again
# is made of the ShadowPod read afresh.
CREATION_SPEC_LEFT = "vk.creationSpecLeft"


def _containers(spec: dict[str, Any], key: str, fields: tuple[str, ...]) -> list[JSON] | None:
    containers = spec.get(key)
    if not isinstance(containers, list):
        return None
    return [
        {field: container[field] for field in fields if field in container}
        for container in containers
        if isinstance(container, dict)
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


def provider_shadow_pod_as_read(shadow_pod: JSON) -> JSON:
    """What the cache keeps of a ShadowPod: the whole of it until its Pod is made; from then on,
    its metadata and status, and of `spec.pod` what keeping the Pod in line with it and counting
    it in its Quota read (the containers' names, images, resources and restart policies,
    activeDeadlineSeconds, tolerations, the pod's resources and overhead), marked
    CREATION_SPEC_LEFT. Its volumes and the rest of its containers (each pod's token volume and
    mount have names of their own) are read afresh if its Pod is ever made again."""
    spec = shadow_pod.get("spec")
    if not isinstance(spec, dict) or not isinstance(pod := spec.get("pod"), dict):
        return shadow_pod
    if not pod_made(shadow_pod):
        return shadow_pod
    kept_pod: JSON = {key: pod[key] for key in _SHADOW_SPEC_READ if key in pod}
    for key in _CONTAINER_LISTS:
        if (containers := _containers(pod, key, _SHADOW_CONTAINER_FIELDS_READ)) is not None:
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
