"""Storage for offloaded pods: a claim of the virtual storage class, once the scheduler has put
its pod on a virtual node, is provisioned as a real claim in the provider, and a local
PersistentVolume stands for it so that the local claim binds (Liqo §3.7).

Pure: no I/O. Objects are the API's own JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vk.api.constants import NODENAME_LABEL
from vk.api.jsondata import json_copy
from vk.reflection.forge.meta import JSON, metadata_differs, ownership_labels, reflected_metadata

# The StorageClass whose claims vk provisions (`--virtual-storage-class-name`), and the
# provisioner it names. It must bind WaitForFirstConsumer: vk learns from the scheduler which
# virtual node, and so which provider, the claim belongs to.
VIRTUAL_STORAGE_CLASS = "liqo"
STORAGE_PROVISIONER = "liqo.io/storage"

# Set by the scheduler on a WaitForFirstConsumer claim: the node of the first pod using it.
SELECTED_NODE_ANNOTATION = "volume.kubernetes.io/selected-node"
# Set by the PV controller on a claim it hands to an external provisioner: which one.
STORAGE_PROVISIONER_ANNOTATION = "volume.kubernetes.io/storage-provisioner"
BETA_STORAGE_PROVISIONER_ANNOTATION = "volume.beta.kubernetes.io/storage-provisioner"
STORAGE_PROVISIONER_ANNOTATIONS = (
    STORAGE_PROVISIONER_ANNOTATION,
    BETA_STORAGE_PROVISIONER_ANNOTATION,
)
# On a PersistentVolume: the provisioner that made it (and so must delete it).
PROVISIONED_BY_ANNOTATION = "pv.kubernetes.io/provisioned-by"

# Per-claim choices for the provider's claim: its StorageClass, and its access modes
# (comma-separated), when they must differ from the local claim's.
REMOTE_STORAGE_CLASS_ANNOTATION = "liqo.io/remote-storage-class"
REMOTE_ACCESS_MODES_ANNOTATION = "liqo.io/remote-access-modes"

# Annotations the PV controller and the scheduler keep on a claim (pv.kubernetes.io/bind-
# completed, bound-by-controller, ...): each cluster's own bookkeeping of its binding.
_BINDING_ANNOTATION_PREFIX = "pv.kubernetes.io/"
_BINDING_ANNOTATIONS = (SELECTED_NODE_ANNOTATION, *STORAGE_PROVISIONER_ANNOTATIONS)

_HOSTNAME_LABEL = "kubernetes.io/hostname"


def wants_provisioning(
    local_pvc: Mapping[str, Any], *, node_name: str, virtual_storage_class: str
) -> bool:
    """Whether this virtual node must provision `local_pvc`: a claim of the virtual class, not
    bound yet, not being deleted, whose first pod the scheduler put on this node."""
    metadata = local_pvc.get("metadata") or {}
    spec = local_pvc.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    return (
        spec.get("storageClassName") == virtual_storage_class
        and annotations.get(SELECTED_NODE_ANNOTATION) == node_name
        and not spec.get("volumeName")
        and not metadata.get("deletionTimestamp")
    )


def forge_remote_pvc(
    local_pvc: Mapping[str, Any],
    *,
    remote_namespace: str,
    local_cluster_id: str,
    remote_cluster_id: str,
    node_name: str,
    remote_storage_class: str | None,
) -> JSON:
    """The claim to create in the provider for `local_pvc`. Its StorageClass is the claim's
    `liqo.io/remote-storage-class`, else `remote_storage_class` (Liqo's
    `--remote-real-storage-class-name`), else the provider's default. What names a volume or a
    source of the consumer's (volumeName, selector, dataSource) is never copied."""
    local_metadata = local_pvc.get("metadata") or {}
    local_spec = local_pvc.get("spec") or {}
    annotations: Mapping[str, str] = local_metadata.get("annotations") or {}
    not_reflected = [
        key
        for key in annotations
        if _is_binding_annotation(key)
        or key in (REMOTE_STORAGE_CLASS_ANNOTATION, REMOTE_ACCESS_MODES_ANNOTATION)
    ]

    spec: JSON = {}
    if REMOTE_ACCESS_MODES_ANNOTATION in annotations:
        modes = annotations[REMOTE_ACCESS_MODES_ANNOTATION].split(",")
        spec["accessModes"] = [mode.strip() for mode in modes if mode.strip()]
    elif "accessModes" in local_spec:
        spec["accessModes"] = list(local_spec["accessModes"])
    for field in ("resources", "volumeMode"):
        if field in local_spec:
            spec[field] = json_copy(local_spec[field])
    storage_class = annotations.get(REMOTE_STORAGE_CLASS_ANNOTATION, remote_storage_class)
    if storage_class is not None:
        spec["storageClassName"] = storage_class

    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": reflected_metadata(
            local_pvc,
            name=local_metadata["name"],
            namespace=remote_namespace,
            local_cluster_id=local_cluster_id,
            remote_cluster_id=remote_cluster_id,
            annotations_not_reflected=not_reflected,
            extra_labels=ownership_labels(local_cluster_id, remote_cluster_id, node_name),
        ),
        "spec": spec,
    }


def forge_local_pv(local_pvc: Mapping[str, Any], *, node_name: str, remote_namespace: str) -> JSON:
    """The consumer's PersistentVolume standing for the provider's claim, pre-bound to
    `local_pvc`. Its node affinity keeps every pod using it on the virtual node; its `local`
    source, mandatory in a PersistentVolume, is never mounted (a virtual node mounts nothing)
    and only says where the data is: the claim of that name in the provider's namespace."""
    metadata = local_pvc["metadata"]
    claim_spec = local_pvc.get("spec") or {}
    requested = ((claim_spec.get("resources") or {}).get("requests") or {}).get("storage")
    spec: JSON = {
        "capacity": {"storage": requested},
        "accessModes": list(claim_spec.get("accessModes") or []),
        "persistentVolumeReclaimPolicy": "Delete",
        "claimRef": {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "namespace": metadata["namespace"],
            "name": metadata["name"],
            "uid": metadata["uid"],
        },
        "nodeAffinity": {
            "required": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {"key": _HOSTNAME_LABEL, "operator": "In", "values": [node_name]}
                        ]
                    }
                ]
            }
        },
        "local": {"path": f"/liqo/{remote_namespace}/{metadata['name']}"},
    }
    if "volumeMode" in claim_spec:
        spec["volumeMode"] = claim_spec["volumeMode"]
    if "storageClassName" in claim_spec:
        spec["storageClassName"] = claim_spec["storageClassName"]
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            # As external provisioners name theirs: one volume per claim, whatever its name.
            "name": f"pvc-{metadata['uid']}",
            "labels": {NODENAME_LABEL: node_name},
            "annotations": {PROVISIONED_BY_ANNOTATION: STORAGE_PROVISIONER},
        },
        "spec": spec,
    }


def pvc_needs_update(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether the remote claim's labels or annotations must be rewritten. Its spec is written at
    creation only: a bound claim's spec is immutable but for growing its size, which vk does not
    propagate. The binding annotations the provider adds to the claim are not drift."""
    return metadata_differs(
        _without_binding_annotations(desired), _without_binding_annotations(current)
    )


def _is_binding_annotation(key: str) -> bool:
    return key.startswith(_BINDING_ANNOTATION_PREFIX) or key in _BINDING_ANNOTATIONS


def _without_binding_annotations(obj: Mapping[str, Any]) -> JSON:
    metadata = obj.get("metadata") or {}
    annotations = metadata.get("annotations") or {}
    return {
        "metadata": {
            "labels": metadata.get("labels") or {},
            "annotations": {k: v for k, v in annotations.items() if not _is_binding_annotation(k)},
        }
    }
