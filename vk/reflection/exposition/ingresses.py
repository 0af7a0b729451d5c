"""Ingresses, local → remote, served in the provider by the ingress class it names with
`--remote-real-ingress-class-name` (its default class without), as Liqo's
`exposition/ingress.go` does."""

from __future__ import annotations

from vk.kube.client import JSON
from vk.reflection.forge.exposition import forge_remote_ingress, ingress_needs_update
from vk.reflection.forge.meta import ReflectionPolicy, should_reflect
from vk.reflection.generic import LocalToRemoteReflector, ReflectorOptions


class IngressReflector(LocalToRemoteReflector):
    name = "ingresses"
    liqo_resource = "ingress"
    api_version = "networking.k8s.io/v1"
    plural = "ingresses"
    kind = "Ingress"

    def __init__(
        self,
        options: ReflectorOptions,
        policy: ReflectionPolicy,
        remote_ingress_class: str | None = None,
    ) -> None:
        super().__init__(options)
        self.policy = policy
        self.remote_ingress_class = remote_ingress_class

    def wants(self, local: JSON) -> bool:
        return should_reflect(local, self.policy)

    def forge(self, local: JSON, remote_namespace: str) -> JSON:
        return forge_remote_ingress(
            local,
            remote_namespace=remote_namespace,
            local_cluster_id=self.home_cluster_id,
            remote_cluster_id=self.remote_cluster_id,
            remote_ingress_class=self.remote_ingress_class,
        )

    def needs_update(self, desired: JSON, current: JSON) -> bool:
        return ingress_needs_update(desired, current)
