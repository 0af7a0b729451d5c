"""Claims of the virtual storage class `liqo`, local → remote (Liqo's `storage/`).

The scheduler picks the node of a pod that uses a claim of the `liqo` class (it waits for its
first consumer) and names it in the claim's `volume.kubernetes.io/selected-node` annotation.
When that node is this virtual kubelet's, the claim is provisioned here: the claim is created in
the provider, where its storage class (`--remote-real-storage-class-name`, or the claim's
`liqo.io/remote-storage-class`) gives it a real volume, and a local PersistentVolume bound to
the local claim and pinned to the virtual node stands for it, so the pod can be scheduled and
offloaded. Each virtual kubelet provisions its own node's claims; deleting the claim deletes
both copies.
"""

from __future__ import annotations

import asyncio
import contextlib

from vk.api.constants import NODENAME_LABEL
from vk.kube.client import JSON, AlreadyExists, NotFound, delete_options, resource_path
from vk.kube.informer import Informer
from vk.reflection.forge.storage import (
    forge_local_pv,
    forge_remote_pvc,
    pvc_needs_update,
    wants_provisioning,
)
from vk.reflection.generic import (
    REFLECTION_ITEMS,
    LocalToRemoteReflector,
    NamespaceReflection,
    ReflectorOptions,
)


class PersistentVolumeClaimReflector(LocalToRemoteReflector):
    name = "persistentvolumeclaims"
    liqo_resource = "persistentvolumeclaim"
    api_version = "v1"
    plural = "persistentvolumeclaims"
    kind = "PersistentVolumeClaim"
    leader_only = False  # each claim is its selected node's

    def __init__(
        self,
        options: ReflectorOptions,
        *,
        virtual_storage_class: str,
        remote_storage_class: str | None,
    ) -> None:
        super().__init__(options)
        self.virtual_storage_class = virtual_storage_class
        self.remote_storage_class = remote_storage_class
        self.volumes = Informer(
            self.home,
            "v1",
            "persistentvolumes",
            label_selector=f"{NODENAME_LABEL}={self.node_name}",
        )

    async def run(self) -> None:
        volumes = asyncio.create_task(self.volumes.run())
        try:
            await super().run()
        finally:
            volumes.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await volumes

    def _volume_name(self, local: JSON) -> str:
        return f"pvc-{local['metadata']['uid']}"

    def wants(self, local: JSON) -> bool:
        if wants_provisioning(
            local, node_name=self.node_name, virtual_storage_class=self.virtual_storage_class
        ):
            return True
        # Provisioned already: bound to the volume that stands for the remote claim.
        return bool((local.get("spec") or {}).get("volumeName") == self._volume_name(local))

    def ignores_remote(self, remote: JSON) -> bool:
        labels = remote["metadata"].get("labels") or {}
        return NODENAME_LABEL in labels and labels[NODENAME_LABEL] != self.node_name

    def forge(self, local: JSON, remote_namespace: str) -> JSON:
        return forge_remote_pvc(
            local,
            remote_namespace=remote_namespace,
            local_cluster_id=self.home_cluster_id,
            remote_cluster_id=self.remote_cluster_id,
            node_name=self.node_name,
            remote_storage_class=self.remote_storage_class,
        )

    def needs_update(self, desired: JSON, current: JSON) -> bool:
        return pvc_needs_update(desired, current)

    async def after_write(self, local: JSON, remote: JSON, state: NamespaceReflection) -> None:
        if not self.volumes.synced.is_set():
            await self.volumes.synced.wait()
        if self.volumes.store.get(self._volume_name(local)) is not None:
            return
        volume = forge_local_pv(
            local, node_name=self.node_name, remote_namespace=state.remote_namespace
        )
        with contextlib.suppress(AlreadyExists):
            await self.home.create(resource_path("v1", "persistentvolumes"), volume)
            REFLECTION_ITEMS.labels(self.name, "provisioned").inc()

    async def after_delete(self, namespace: str, name: str) -> None:
        """The claim is gone: so goes the volume that stood for its remote copy (the PV
        controller leaves a provisioned volume's deletion to its provisioner)."""
        for volume in self.volumes.store.objects():
            claim = (volume.get("spec") or {}).get("claimRef") or {}
            if claim.get("namespace") != namespace or claim.get("name") != name:
                continue
            with contextlib.suppress(NotFound):
                await self.home.delete(
                    resource_path("v1", "persistentvolumes", name=volume["metadata"]["name"]),
                    body=delete_options(uid=volume["metadata"]["uid"]),
                )
