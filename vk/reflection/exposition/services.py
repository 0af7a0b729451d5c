"""Services, local → remote: the offloaded pods find each other, and the pods at home, by the
same names in the provider (Liqo's `exposition/service.go`). Headless Services stay headless;
the provider allocates its own cluster IPs and node ports. A NodePort or LoadBalancer Service the
provider refuses (it gives its consumers none by default) is reflected as ClusterIP."""

from __future__ import annotations

from vk.kube.client import JSON
from vk.reflection.forge.exposition import (
    as_cluster_ip_service,
    forge_remote_service,
    is_reflectable_service,
    service_needs_update,
)
from vk.reflection.forge.meta import ReflectionPolicy, should_reflect
from vk.reflection.generic import LesserCopy, LocalToRemoteReflector, ReflectorOptions


class ServiceReflector(LocalToRemoteReflector):
    name = "services"
    liqo_resource = "service"
    api_version = "v1"
    plural = "services"
    kind = "Service"

    def __init__(
        self,
        options: ReflectorOptions,
        policy: ReflectionPolicy,
        load_balancer_class: str | None = None,
    ) -> None:
        super().__init__(options)
        self.policy = policy
        self.load_balancer_class = load_balancer_class

    def wants(self, local: JSON) -> bool:
        return is_reflectable_service(local) and should_reflect(local, self.policy)

    def forge(self, local: JSON, remote_namespace: str) -> JSON:
        return forge_remote_service(
            local,
            remote_namespace=remote_namespace,
            local_cluster_id=self.home_cluster_id,
            remote_cluster_id=self.remote_cluster_id,
            load_balancer_class=self.load_balancer_class,
        )

    def needs_update(self, desired: JSON, current: JSON) -> bool:
        return service_needs_update(desired, current)

    def lesser_copy(self, desired: JSON) -> LesserCopy | None:
        internal = as_cluster_ip_service(desired)
        if internal is None:
            return None
        kind = desired["spec"]["type"]
        return LesserCopy(
            internal,
            f"reflected there as a ClusterIP Service, so that the offloaded pods there reach it "
            f"by its name; as a {kind} Service it serves only from this cluster",
        )
