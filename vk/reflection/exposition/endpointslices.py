"""EndpointSlices, local → remote, in Liqo's direction: the provider's copy of a home Service
lists the addresses of the pods that run at home, so that offloaded pods reach them through it
(for users who bring their own flat network or mesh: vk routes nothing). Off by default
(`--endpointslice-reflection-workers`), and with `--disable-ip-reflection`.

Only the slices Kubernetes makes for reflected Services are reflected, without the endpoints of
the pods offloaded to this provider (it has those), as ShadowEndpointSlices: the
provider checks their addresses against the ranges it accepts from this consumer and makes the
EndpointSlices itself. Tenants write no EndpointSlice.
"""

from __future__ import annotations

from vk.api.constants import REMOTE_CLUSTER_ID_LABEL
from vk.api.offloading import ShadowEndpointSlice
from vk.kube.client import JSON, KubeClient
from vk.kube.informer import MODIFIED, Informer, shared_informer
from vk.reflection.forge.exposition import (
    SERVICE_NAME_LABEL,
    forge_shadow_endpointslice,
    is_reflectable_endpointslice,
    is_reflectable_service,
    shadow_endpointslice_needs_update,
)
from vk.reflection.forge.meta import ReflectionPolicy, should_reflect
from vk.reflection.generic import (
    LOCAL,
    LocalToRemoteReflector,
    NamespaceReflection,
    ReflectorOptions,
)

# The namespace's informers past the two of every reflector: its Services, whose reflection
# decides, and the provider's virtual nodes.
SERVICES, NODES = 2, 3


class EndpointSliceReflector(LocalToRemoteReflector):
    name = "endpointslices"
    liqo_resource = "endpointslice"
    api_version = "discovery.k8s.io/v1"
    plural = "endpointslices"
    kind = "EndpointSlice"
    remote_api_version = ShadowEndpointSlice.group_version()
    remote_plural = ShadowEndpointSlice.PLURAL
    remote_kind = ShadowEndpointSlice.KIND

    def __init__(self, options: ReflectorOptions, service_policy: ReflectionPolicy) -> None:
        super().__init__(options)
        self.service_policy = service_policy

    def informers(
        self, local_namespace: str, remote_namespace: str, client: KubeClient
    ) -> list[Informer]:
        return [
            *super().informers(local_namespace, remote_namespace, client),
            shared_informer(self.home, "v1", "services", namespace=local_namespace),
            # This provider's virtual nodes: the endpoints of their pods are the provider's.
            shared_informer(
                self.home,
                "v1",
                "nodes",
                label_selector=f"{REMOTE_CLUSTER_ID_LABEL}={self.remote_cluster_id}",
            ),
        ]

    def on_event(self, state: NamespaceReflection, side: int, event: str, obj: JSON) -> None:
        if side == NODES and event == MODIFIED:
            return  # a Node's status, every few seconds: only its coming or going matters
        super().on_event(state, side, event, obj)

    def keys_of(self, state: NamespaceReflection, side: int, obj: JSON) -> list[str]:
        if side < SERVICES:
            return super().keys_of(state, side, obj)
        # A Service reflected or not any more, or a virtual node come or gone: the slices
        # (of that Service) are looked at again.
        service = obj["metadata"]["name"] if side == SERVICES else None
        return [
            f"{state.local_namespace}/{endpointslice['metadata']['name']}"
            for endpointslice in state.informers[LOCAL].store.objects()
            if service is None
            or (endpointslice["metadata"].get("labels") or {}).get(SERVICE_NAME_LABEL) == service
        ]

    def wants(self, local: JSON) -> bool:
        return is_reflectable_endpointslice(local)

    def wants_in(self, state: NamespaceReflection, local: JSON) -> bool:
        if not self.wants(local):
            return False
        service_name = local["metadata"]["labels"][SERVICE_NAME_LABEL]
        service = state.informers[SERVICES].store.get(f"{state.local_namespace}/{service_name}")
        return (
            service is not None
            and is_reflectable_service(service)
            and should_reflect(service, self.service_policy)
        )

    def forge(self, local: JSON, remote_namespace: str) -> JSON:
        state = self.namespaces[local["metadata"]["namespace"]]
        return forge_shadow_endpointslice(
            local,
            remote_namespace=remote_namespace,
            local_cluster_id=self.home_cluster_id,
            remote_cluster_id=self.remote_cluster_id,
            provider_nodes={n["metadata"]["name"] for n in state.informers[NODES].store.objects()},
        )

    def needs_update(self, desired: JSON, current: JSON) -> bool:
        return shadow_endpointslice_needs_update(desired, current)
