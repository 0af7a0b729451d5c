"""Storage forging: a claim of the virtual storage class → the provider's claim, and the local
PersistentVolume standing for it."""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from vk.api.constants import DESTINATION_LABEL, NODENAME_LABEL, ORIGIN_LABEL
from vk.reflection.forge.storage import (
    PROVISIONED_BY_ANNOTATION,
    SELECTED_NODE_ANNOTATION,
    STORAGE_PROVISIONER,
    VIRTUAL_STORAGE_CLASS,
    forge_local_pv,
    forge_remote_pvc,
    pvc_needs_update,
    wants_provisioning,
)

JSON = dict[str, Any]

HOME = "venice"
PROVIDER = "cool-firefly"
NODE = "cool-firefly"
REMOTE_NAMESPACE = "demo-venice"
CLAIM_UID = "8f14e45f-ceea-467f-a0e6-2c6b7d1c3a90"
OURS_ON_NODE = {ORIGIN_LABEL: HOME, DESTINATION_LABEL: PROVIDER, NODENAME_LABEL: NODE}


def local_pvc() -> JSON:
    """A StatefulSet's claim of the `liqo` class as `kubectl get pvc -o json` shows it once the
    scheduler put its pod on the virtual node and the PV controller handed it to vk."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "data-db-0",
            "namespace": "demo",
            "uid": CLAIM_UID,
            "resourceVersion": "48301",
            "creationTimestamp": "2025-05-06T09:13:02Z",
            "labels": {"app": "db"},
            "annotations": {
                "volume.kubernetes.io/selected-node": NODE,
                "volume.kubernetes.io/storage-provisioner": "liqo.io/storage",
                "volume.beta.kubernetes.io/storage-provisioner": "liqo.io/storage",
                "backup.example.com/schedule": "daily",
            },
            "finalizers": ["kubernetes.io/pvc-protection"],
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "5Gi"}},
            "storageClassName": "liqo",
            "volumeMode": "Filesystem",
        },
        "status": {"phase": "Pending"},
    }


def forge_pvc(local: JSON, remote_storage_class: str | None = None) -> JSON:
    return forge_remote_pvc(
        local,
        remote_namespace=REMOTE_NAMESPACE,
        local_cluster_id=HOME,
        remote_cluster_id=PROVIDER,
        node_name=NODE,
        remote_storage_class=remote_storage_class,
    )


def as_provider_returns(forged: JSON) -> JSON:
    """The forged claim once the provider bound it: its own class by default, its own volume,
    and the binding annotations of its PV controller and scheduler."""
    stored = copy.deepcopy(forged)
    stored["metadata"].update(
        uid="c0ffee00-3333-4444-8555-666677778888",
        resourceVersion="9140",
        creationTimestamp="2025-05-06T09:13:05Z",
        finalizers=["kubernetes.io/pvc-protection"],
    )
    stored["metadata"].setdefault("annotations", {}).update(
        {
            "pv.kubernetes.io/bind-completed": "yes",
            "pv.kubernetes.io/bound-by-controller": "yes",
            "volume.kubernetes.io/selected-node": "provider-worker-2",
            "volume.kubernetes.io/storage-provisioner": "rancher.io/local-path",
            "volume.beta.kubernetes.io/storage-provisioner": "rancher.io/local-path",
        }
    )
    stored["spec"].setdefault("storageClassName", "standard")
    stored["spec"]["volumeName"] = "pvc-c0ffee00-3333-4444-8555-666677778888"
    stored["status"] = {
        "phase": "Bound",
        "accessModes": stored["spec"]["accessModes"],
        "capacity": {"storage": "5Gi"},
    }
    return stored


def test_constants_are_liqo_ones() -> None:
    assert (VIRTUAL_STORAGE_CLASS, STORAGE_PROVISIONER) == ("liqo", "liqo.io/storage")


# --- Which claims --------------------------------------------------------------------------


def _other_class(pvc: JSON) -> None:
    pvc["spec"]["storageClassName"] = "standard"


def _other_node(pvc: JSON) -> None:
    pvc["metadata"]["annotations"][SELECTED_NODE_ANNOTATION] = "kind-worker"


def _not_selected(pvc: JSON) -> None:
    del pvc["metadata"]["annotations"][SELECTED_NODE_ANNOTATION]


def _bound(pvc: JSON) -> None:
    pvc["spec"]["volumeName"] = f"pvc-{CLAIM_UID}"


def _deleted(pvc: JSON) -> None:
    pvc["metadata"]["deletionTimestamp"] = "2025-05-06T10:00:00Z"


def _unchanged(pvc: JSON) -> None:
    pass


@pytest.mark.parametrize(
    ("change", "wanted"),
    [
        pytest.param(_unchanged, True, id="selected-for-this-node"),
        pytest.param(_other_class, False, id="other-class"),
        pytest.param(_other_node, False, id="selected-for-another-node"),
        pytest.param(_not_selected, False, id="no-pod-scheduled-yet"),
        pytest.param(_bound, False, id="already-bound"),
        pytest.param(_deleted, False, id="being-deleted"),
    ],
)
def test_only_unbound_claims_selected_for_this_node_are_provisioned(
    change: Callable[[JSON], None], wanted: bool
) -> None:
    pvc = local_pvc()
    change(pvc)
    assert wants_provisioning(pvc, node_name=NODE, virtual_storage_class="liqo") is wanted


def test_the_virtual_storage_class_is_the_configured_one() -> None:
    pvc = local_pvc()
    pvc["spec"]["storageClassName"] = "liqo-fast"
    assert wants_provisioning(pvc, node_name=NODE, virtual_storage_class="liqo-fast")
    assert not wants_provisioning(pvc, node_name=NODE, virtual_storage_class="liqo")


# --- Remote claim --------------------------------------------------------------------------


def test_remote_claim_asks_the_provider_for_the_same_storage() -> None:
    assert forge_pvc(local_pvc(), "local-path") == {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": "data-db-0",
            "namespace": REMOTE_NAMESPACE,
            "labels": {"app": "db", **OURS_ON_NODE},
            "annotations": {"backup.example.com/schedule": "daily"},
        },
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "5Gi"}},
            "storageClassName": "local-path",
            "volumeMode": "Filesystem",
        },
    }


@pytest.mark.parametrize(
    ("annotation", "configured", "expected"),
    [
        pytest.param(None, None, None, id="provider-default"),
        pytest.param(None, "local-path", "local-path", id="configured"),
        pytest.param("ssd", "local-path", "ssd", id="annotation-wins"),
        pytest.param("ssd", None, "ssd", id="annotation"),
    ],
)
def test_remote_storage_class_by_annotation_then_configuration_then_provider_default(
    annotation: str | None, configured: str | None, expected: str | None
) -> None:
    pvc = local_pvc()
    if annotation is not None:
        pvc["metadata"]["annotations"]["liqo.io/remote-storage-class"] = annotation
    forged = forge_pvc(pvc, configured)
    assert forged["spec"].get("storageClassName") == expected
    assert "liqo.io/remote-storage-class" not in forged["metadata"]["annotations"]


@pytest.mark.parametrize(
    ("annotation", "expected"),
    [
        pytest.param(None, ["ReadWriteOnce"], id="local-ones"),
        pytest.param("ReadWriteMany", ["ReadWriteMany"], id="one"),
        pytest.param(
            "ReadWriteOnce, ReadOnlyMany,", ["ReadWriteOnce", "ReadOnlyMany"], id="comma-separated"
        ),
    ],
)
def test_remote_access_modes_by_annotation(annotation: str | None, expected: list[str]) -> None:
    pvc = local_pvc()
    if annotation is not None:
        pvc["metadata"]["annotations"]["liqo.io/remote-access-modes"] = annotation
    forged = forge_pvc(pvc)
    assert forged["spec"]["accessModes"] == expected
    assert "liqo.io/remote-access-modes" not in forged["metadata"]["annotations"]


def test_remote_claim_never_names_a_consumer_volume_or_source() -> None:
    pvc = local_pvc()
    pvc["spec"].update(
        volumeName="pvc-old",
        selector={"matchLabels": {"tier": "gold"}},
        dataSource={"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot", "name": "s1"},
    )
    assert set(forge_pvc(pvc)["spec"]) == {"accessModes", "resources", "volumeMode"}


def test_binding_annotations_are_not_reflected() -> None:
    pvc = local_pvc()
    pvc["metadata"]["annotations"].update(
        {"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"}
    )
    assert forge_pvc(pvc)["metadata"]["annotations"] == {"backup.example.com/schedule": "daily"}


# --- Local volume --------------------------------------------------------------------------


def test_local_volume_is_bound_to_the_claim_and_the_virtual_node() -> None:
    assert forge_local_pv(local_pvc(), node_name=NODE, remote_namespace=REMOTE_NAMESPACE) == {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {
            "name": f"pvc-{CLAIM_UID}",
            "labels": {NODENAME_LABEL: NODE},
            "annotations": {PROVISIONED_BY_ANNOTATION: "liqo.io/storage"},
        },
        "spec": {
            "capacity": {"storage": "5Gi"},
            "accessModes": ["ReadWriteOnce"],
            "volumeMode": "Filesystem",
            "storageClassName": "liqo",
            "persistentVolumeReclaimPolicy": "Delete",
            "claimRef": {
                "apiVersion": "v1",
                "kind": "PersistentVolumeClaim",
                "namespace": "demo",
                "name": "data-db-0",
                "uid": CLAIM_UID,
            },
            "nodeAffinity": {
                "required": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": "kubernetes.io/hostname",
                                    "operator": "In",
                                    "values": [NODE],
                                }
                            ]
                        }
                    ]
                }
            },
            "local": {"path": "/liqo/demo-venice/data-db-0"},
        },
    }


def test_local_volume_has_the_claim_access_modes_whatever_the_remote_ones() -> None:
    pvc = local_pvc()
    pvc["metadata"]["annotations"]["liqo.io/remote-access-modes"] = "ReadWriteMany"
    pvc["spec"]["volumeMode"] = "Block"
    pv = forge_local_pv(pvc, node_name=NODE, remote_namespace=REMOTE_NAMESPACE)
    assert pv["spec"]["accessModes"] == ["ReadWriteOnce"]
    assert pv["spec"]["volumeMode"] == "Block"


# --- Drift ---------------------------------------------------------------------------------


def test_claim_as_the_provider_binds_it_needs_no_update() -> None:
    desired = forge_pvc(local_pvc())
    assert not pvc_needs_update(desired, as_provider_returns(desired))


def test_claim_without_annotations_as_the_provider_binds_it_needs_no_update() -> None:
    pvc = local_pvc()
    del pvc["metadata"]["annotations"]["backup.example.com/schedule"]
    desired = forge_pvc(pvc)
    assert "annotations" not in desired["metadata"]
    assert not pvc_needs_update(desired, as_provider_returns(desired))


def _label_changed(pvc: JSON) -> None:
    pvc["metadata"]["labels"]["tier"] = "gold"


def _annotation_removed(pvc: JSON) -> None:
    del pvc["metadata"]["annotations"]["backup.example.com/schedule"]


def _spec_changed(pvc: JSON) -> None:
    pvc["spec"]["resources"]["requests"]["storage"] = "10Gi"


@pytest.mark.parametrize(
    ("change", "needs_update"),
    [
        pytest.param(_label_changed, True, id="label"),
        pytest.param(_annotation_removed, True, id="annotation-removed"),
        # The spec is written at creation only; growing a claim is not propagated.
        pytest.param(_spec_changed, False, id="spec"),
    ],
)
def test_only_metadata_changes_of_the_local_claim_are_written(
    change: Callable[[JSON], None], needs_update: bool
) -> None:
    current = as_provider_returns(forge_pvc(local_pvc()))
    pvc = local_pvc()
    change(pvc)
    assert pvc_needs_update(forge_pvc(pvc), current) is needs_update


def test_hand_added_annotation_on_the_remote_claim_is_drift() -> None:
    desired = forge_pvc(local_pvc())
    current = as_provider_returns(desired)
    current["metadata"]["annotations"]["hand"] = "made"
    assert pvc_needs_update(desired, current)
