"""Secrets, local → remote; never ServiceAccount token Secrets, which offloaded pods do not
need (they get tokens of their own, `serviceaccounts.py`), and never over the token Secrets that
reflector writes remotely: a local Secret of such a name (`<pod>-token`) is left home while the
pod's tokens hold it, and said so (Liqo's `configuration/secret.go`)."""

from __future__ import annotations

from vk.kube.client import JSON
from vk.reflection.forge.configuration import (
    forge_remote_secret,
    is_reflectable_secret,
    is_token_secret,
    secret_needs_update,
)
from vk.reflection.forge.meta import ReflectionPolicy, should_reflect
from vk.reflection.forge.tokens import token_secret_pod
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

    def name_kept_for_another(self, local_name: str, remote: JSON | None) -> str | None:
        # The provider's Secret of this name holds an offloaded pod's tokens, there first:
        # never written over (the pod would mount this Secret's data as its token) nor, this
        # one gone, deleted.
        if remote is None or not is_token_secret(remote):
            return None
        if (pod := token_secret_pod(local_name)) is None:
            return None  # not named as a pod's tokens: the provider's own, left alone
        return (
            f"Secret {local_name} is not reflected to cluster {self.remote_cluster_id}: vk gives "
            f"that name there to the ServiceAccount tokens of pod {pod}, which the pod mounts; "
            "rename the Secret (or it is reflected once the pod is gone)"
        )

    def forge(self, local: JSON, remote_namespace: str) -> JSON:
        return forge_remote_secret(
            local,
            remote_namespace=remote_namespace,
            local_cluster_id=self.home_cluster_id,
            remote_cluster_id=self.remote_cluster_id,
        )

    def needs_update(self, desired: JSON, current: JSON) -> bool:
        return secret_needs_update(desired, current)
