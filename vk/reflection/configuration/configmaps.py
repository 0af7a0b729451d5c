"""ConfigMaps, local → remote; the consumer's `kube-root-ca.crt` under a name of its own, so
that offloaded pods verify their home API server (Liqo's `configuration/configmap.go`)."""

from __future__ import annotations

from vk.kube.client import JSON
from vk.reflection.forge.configuration import (
    configmap_needs_update,
    forge_remote_configmap,
    local_configmap_name,
    remote_configmap_name,
    should_reflect_configmap,
)
from vk.reflection.forge.meta import ReflectionPolicy
from vk.reflection.forge.pods import ROOT_CA_CONFIGMAP, remote_root_ca_configmap_name
from vk.reflection.generic import LocalToRemoteReflector, ReflectorOptions


class ConfigMapReflector(LocalToRemoteReflector):
    name = "configmaps"
    liqo_resource = "configmap"
    api_version = "v1"
    plural = "configmaps"
    kind = "ConfigMap"

    def __init__(self, options: ReflectorOptions, policy: ReflectionPolicy) -> None:
        super().__init__(options)
        self.policy = policy

    def remote_name(self, local_name: str) -> str:
        return remote_configmap_name(local_name, self.home_cluster_id)

    def local_name(self, remote_name: str) -> str:
        return local_configmap_name(remote_name, self.home_cluster_id)

    def wants(self, local: JSON) -> bool:
        return should_reflect_configmap(local, self.policy)

    def name_kept_for_another(self, local_name: str, remote: JSON | None) -> str | None:
        # Reflected under its own name, it would overwrite (and, gone, delete) the copy of
        # this cluster's CA that offloaded pods verify their home API server with.
        if local_name != remote_root_ca_configmap_name(self.home_cluster_id):
            return None
        return (
            f"ConfigMap {local_name} is not reflected to cluster {self.remote_cluster_id}: vk "
            f"gives that name there to its copy of this cluster's {ROOT_CA_CONFIGMAP}, which "
            "offloaded pods verify their home API server with; rename it"
        )

    def forge(self, local: JSON, remote_namespace: str) -> JSON:
        return forge_remote_configmap(
            local,
            remote_namespace=remote_namespace,
            local_cluster_id=self.home_cluster_id,
            remote_cluster_id=self.remote_cluster_id,
        )

    def needs_update(self, desired: JSON, current: JSON) -> bool:
        return configmap_needs_update(desired, current)
