"""Secrets, local → remote; never ServiceAccount token Secrets, which offloaded pods do not
need (they get tokens of their own, `serviceaccounts.py`), and never the token Secrets that
reflector writes remotely (Liqo's `configuration/secret.go`)."""

from __future__ import annotations

from vk.kube.client import JSON
from vk.reflection.forge.configuration import (
    forge_remote_secret,
    is_reflectable_secret,
    is_token_secret,
    secret_needs_update,
)
from vk.reflection.forge.meta import ReflectionPolicy, should_reflect
from vk.reflection.generic import LocalToRemoteReflector, ReflectorOptions


class SecretReflector(LocalToRemoteReflector):
    name = "secrets"
    liqo_resource = "secret"
    api_version = "v1"
    plural = "secrets"
    kind = "Secret"

    def __init__(self, options: ReflectorOptions, policy: ReflectionPolicy) -> None:
        super().__init__(options)
        self.policy = policy

    def wants(self, local: JSON) -> bool:
        return is_reflectable_secret(local) and should_reflect(local, self.policy)

    def ignores_remote(self, remote: JSON) -> bool:
        return is_token_secret(remote)

    def forge(self, local: JSON, remote_namespace: str) -> JSON:
        return forge_remote_secret(
            local,
            remote_namespace=remote_namespace,
            local_cluster_id=self.home_cluster_id,
            remote_cluster_id=self.remote_cluster_id,
        )

    def needs_update(self, desired: JSON, current: JSON) -> bool:
        return secret_needs_update(desired, current)
