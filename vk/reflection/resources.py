"""The reflectors a virtual kubelet runs, from its flags (Liqo's `reflection/resources`): one
per resource, each with its workers (0 leaves it out) and, for shared objects, its policy."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field

from vk.kube.informer import Informer
from vk.reflection.configuration.configmaps import ConfigMapReflector
from vk.reflection.configuration.secrets import SecretReflector
from vk.reflection.configuration.serviceaccounts import ServiceAccountTokenReflector
from vk.reflection.event.events import EventReflector, OffloadedPod
from vk.reflection.exposition.endpointslices import EndpointSliceReflector
from vk.reflection.exposition.ingresses import IngressReflector
from vk.reflection.exposition.services import ServiceReflector
from vk.reflection.forge.meta import ReflectionPolicy
from vk.reflection.forge.storage import VIRTUAL_STORAGE_CLASS
from vk.reflection.generic import NamespacedReflector, ReflectorOptions
from vk.reflection.storage.persistentvolumeclaims import PersistentVolumeClaimReflector

# Liqo's defaults (`--<resource>-reflection-workers`), but where said.
DEFAULT_WORKERS = {
    "service": 3,
    # Off unless asked for (Liqo's default is 10): pods at home are reached from the provider
    # only over a network between the clusters, which vk does not make.
    "endpointslice": 0,
    "ingress": 3,
    "configmap": 3,
    "secret": 3,
    # As many as the pod reflector's (Liqo's default is 3): each offloaded pod waits for its
    # token Secret as for its ShadowPod, since a kubelet starts no container of a pod before
    # the volumes it mounts are there. `bench.offload --pods 1000`: with 3, 542 Secrets were
    # written when all pods were Ready at home, each 16.6 s (p50) to 25.8 s (p99) after its
    # ShadowPod; with 10, all 1000, at most 5.4 s after, at the same CPU per pod.
    "serviceaccount": 10,
    "persistentvolumeclaim": 3,
    "event": 3,
}
# The resources whose reflection follows a DenyList/AllowList policy.
POLICY_RESOURCES = ("service", "ingress", "configmap", "secret", "event")


@dataclass(frozen=True)
class ReflectionSettings:
    workers: Mapping[str, int] = field(default_factory=lambda: dict(DEFAULT_WORKERS))
    policies: Mapping[str, ReflectionPolicy] = field(default_factory=dict)
    remote_ingress_class: str = ""
    remote_load_balancer_class: str = ""
    enable_storage: bool = True
    virtual_storage_class: str = VIRTUAL_STORAGE_CLASS
    remote_storage_class: str = ""
    # Offloaded pods get ServiceAccount tokens of their home cluster (Liqo's TokenAPI mode).
    enable_apiserver_support: bool = True
    # Liqo's --disable-ip-reflection turns EndpointSlice reflection off too.
    reflect_ips: bool = True

    def workers_of(self, resource: str) -> int:
        return int(self.workers.get(resource, DEFAULT_WORKERS[resource]))

    def policy_of(self, resource: str) -> ReflectionPolicy:
        return self.policies.get(resource, ReflectionPolicy.DENY_LIST)


def build_reflectors(
    settings: ReflectionSettings,
    common: ReflectorOptions,
    pods: Informer,
    offloaded_pod: OffloadedPod | None = None,
) -> list[NamespacedReflector]:
    """The enabled reflectors; `pods` is the informer on the pods bound to this node,
    `offloaded_pod` the pod reflector's `offloaded_pod`."""

    def options(resource: str) -> ReflectorOptions:
        return dataclasses.replace(common, workers=settings.workers_of(resource))

    reflectors: list[NamespacedReflector] = []
    if settings.workers_of("configmap"):
        reflectors.append(ConfigMapReflector(options("configmap"), settings.policy_of("configmap")))
    if settings.workers_of("secret"):
        reflectors.append(SecretReflector(options("secret"), settings.policy_of("secret")))
    if settings.workers_of("service"):
        reflectors.append(
            ServiceReflector(
                options("service"),
                settings.policy_of("service"),
                settings.remote_load_balancer_class or None,
            )
        )
    if settings.workers_of("ingress"):
        reflectors.append(
            IngressReflector(
                options("ingress"),
                settings.policy_of("ingress"),
                settings.remote_ingress_class or None,
            )
        )
    if settings.enable_apiserver_support and settings.workers_of("serviceaccount"):
        reflectors.append(ServiceAccountTokenReflector(options("serviceaccount"), pods))
    if settings.enable_storage and settings.workers_of("persistentvolumeclaim"):
        reflectors.append(
            PersistentVolumeClaimReflector(
                options("persistentvolumeclaim"),
                virtual_storage_class=settings.virtual_storage_class,
                remote_storage_class=settings.remote_storage_class or None,
            )
        )
    if settings.workers_of("event"):
        reflectors.append(
            EventReflector(options("event"), settings.policy_of("event"), offloaded_pod)
        )
    if settings.reflect_ips and settings.workers_of("endpointslice"):
        reflectors.append(
            EndpointSliceReflector(options("endpointslice"), settings.policy_of("service"))
        )
    return reflectors
