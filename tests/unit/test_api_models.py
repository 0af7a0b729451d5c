"""The models read Liqo's manifests as the reference pages show them, and write them back."""

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from vk.api.authentication import (
    ResourceSlice,
    ResourceSliceConditionStatus,
    ResourceSliceConditionType,
    ResourceSliceSpec,
)
from vk.api.core import ForeignCluster, ForeignClusterConditionStatus, ForeignClusterRole
from vk.api.meta import KubeObject, ObjectMeta
from vk.api.offloading import (
    ConditionStatus,
    NamespaceMap,
    NamespaceMappingStrategy,
    NamespaceOffloading,
    NamespaceOffloadingSpec,
    OffloadingPhase,
    PodOffloadingStrategy,
    Quota,
    VirtualNode,
    VirtualNodeCondition,
    VirtualNodeConditionStatus,
)

DATA = Path(__file__).parents[1] / "data" / "reference"


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DATA / name).read_text())
    return loaded


def _without_nulls(value: Any) -> Any:
    """A field set to null and an absent field are the same object to the API server."""
    if isinstance(value, dict):
        return {k: _without_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_without_nulls(v) for v in value]
    return value


@pytest.mark.parametrize(
    ("filename", "model"),
    [
        ("resourceslice_mypool.yaml", ResourceSlice),
        ("resourceslice_mypool_custom_class.yaml", ResourceSlice),
        ("virtualnode_mynode_from_resourceslice.yaml", VirtualNode),
        ("virtualnode_mynode_from_secret.yaml", VirtualNode),
        ("namespaceoffloading_liqo_demo.yaml", NamespaceOffloading),
    ],
)
def test_reference_manifest_dumps_back_to_the_same_dict(
    filename: str, model: type[KubeObject]
) -> None:
    manifest = _load(filename)

    parsed = model.model_validate(manifest)
    dumped = parsed.model_dump(by_alias=True, exclude_none=True)

    # Models without a status in the manifest dump an empty one; the API server ignores it.
    expected = {"status": {}, **_without_nulls(manifest)}
    assert dumped == expected
    assert parsed.manifest() == expected
    assert model.model_validate(dumped) == parsed


def test_resourceslice_from_the_page_reads_as_liqo_means_it() -> None:
    rslice = ResourceSlice.model_validate(_load("resourceslice_mypool.yaml"))

    assert rslice.metadata.name == "mypool"
    assert rslice.metadata.namespace == "liqo-tenant-cool-firefly"
    assert rslice.metadata.annotations == {"liqo.io/create-virtual-node": "true"}
    assert rslice.spec.class_ == "default"
    assert rslice.spec.provider_cluster_id == "cool-firefly"
    assert rslice.spec.consumer_cluster_id is None


def test_virtualnode_from_the_page_reads_as_liqo_means_it() -> None:
    vnode = VirtualNode.model_validate(_load("virtualnode_mynode_from_resourceslice.yaml"))

    assert vnode.spec.cluster_id == "cool-firefly"
    assert vnode.spec.create_node is True
    assert vnode.spec.disable_network_check is False
    assert vnode.spec.kubeconfig_secret_ref is not None
    assert vnode.spec.kubeconfig_secret_ref.name == "kubeconfig-resourceslice-mypool"
    assert vnode.spec.resource_quota is not None
    assert vnode.spec.resource_quota.hard == {
        "cpu": "4",
        "ephemeral-storage": "20Gi",
        "memory": "8Gi",
        "pods": "110",
    }
    assert vnode.spec.storage_classes is not None
    assert vnode.spec.storage_classes[0].storage_class_name == "liqo"


def test_tutorial_namespace_offloading_status_reads_as_typed_conditions() -> None:
    nsoff = NamespaceOffloading.model_validate(_load("namespaceoffloading_liqo_demo.yaml"))

    assert nsoff.spec.namespace_mapping_strategy is NamespaceMappingStrategy.ENFORCE_SAME_NAME
    assert nsoff.status.offloading_phase is OffloadingPhase.READY
    conditions = nsoff.status.remote_namespaces_conditions
    assert conditions is not None
    assert [c.reason for c in conditions["naples-7881be"]] == [
        "ClusterSelected",
        "RemoteNamespaceCreated",
    ]
    assert conditions["florence-539f8b"][0].status is ConditionStatus.FALSE


def test_unknown_fields_survive_a_read_and_write() -> None:
    manifest = _load("virtualnode_mynode_from_secret.yaml")
    manifest["spec"]["fieldFromANewerLiqo"] = {"a": 1}
    manifest["status"] = {"conditions": [{"type": "Node", "status": "Running", "extra": "x"}]}

    dumped = VirtualNode.model_validate(manifest).manifest()

    assert dumped["spec"]["fieldFromANewerLiqo"] == {"a": 1}
    assert dumped["status"]["conditions"][0]["extra"] == "x"


def test_models_are_built_with_python_names_and_dump_camel_case() -> None:
    rslice = ResourceSlice(
        metadata=ObjectMeta(name="mypool", namespace="liqo-tenant-cool-firefly"),
        spec=ResourceSliceSpec(
            class_="default",
            provider_cluster_id="cool-firefly",
            resources={"cpu": "4", "pods": 110},
        ),
    )

    assert rslice.manifest() == {
        "apiVersion": "authentication.liqo.io/v1beta1",
        "kind": "ResourceSlice",
        "metadata": {"name": "mypool", "namespace": "liqo-tenant-cool-firefly"},
        "spec": {
            "class": "default",
            "providerClusterID": "cool-firefly",
            "resources": {"cpu": "4", "pods": 110},
        },
        "status": {},
    }


def test_csr_is_raw_bytes_in_python_and_base64_in_json() -> None:
    pem = b"-----BEGIN CERTIFICATE REQUEST-----\nMIIB\n-----END CERTIFICATE REQUEST-----\n"
    encoded = base64.b64encode(pem).decode()

    from_python = ResourceSliceSpec(csr=pem)
    from_json = ResourceSliceSpec.model_validate({"csr": encoded})

    assert from_python.csr == from_json.csr == pem
    assert from_python.model_dump(exclude_none=True) == {"csr": encoded}
    assert from_json.model_dump(mode="json", exclude_none=True) == {"csr": encoded}


def test_csr_that_is_not_base64_is_refused() -> None:
    with pytest.raises(ValidationError, match="not valid base64"):
        ResourceSliceSpec.model_validate({"csr": "not base64!"})


@pytest.mark.parametrize("quantity", ["4", "500m", "8Gi", "1e3", "0.5", 110])
def test_valid_quantities_are_accepted_unchanged(quantity: int | str) -> None:
    spec = ResourceSliceSpec.model_validate({"resources": {"cpu": quantity}})

    assert spec.resources == {"cpu": quantity}


@pytest.mark.parametrize("quantity", ["4x", "", "8 Gi", "-"])
def test_malformed_quantities_are_refused(quantity: str) -> None:
    with pytest.raises(ValidationError, match="is not a Kubernetes quantity"):
        ResourceSliceSpec.model_validate({"resources": {"cpu": quantity}})


def test_invalid_cluster_id_in_a_spec_is_refused() -> None:
    with pytest.raises(ValidationError, match="DNS-1123"):
        ResourceSliceSpec.model_validate({"providerClusterID": "Cool_Firefly"})


def test_manifest_of_another_kind_is_refused() -> None:
    manifest = _load("virtualnode_mynode_from_secret.yaml")

    with pytest.raises(ValidationError, match="kind is 'VirtualNode', expected 'ResourceSlice'"):
        ResourceSlice.model_validate(manifest)


def test_manifest_of_another_api_version_is_refused() -> None:
    manifest = _load("virtualnode_mynode_from_secret.yaml")
    manifest["apiVersion"] = "offloading.liqo.io/v1alpha1"

    with pytest.raises(ValidationError, match="apiVersion"):
        VirtualNode.model_validate(manifest)


def test_api_version_and_kind_are_filled_in() -> None:
    nsmap = NamespaceMap()

    assert (nsmap.api_version, nsmap.kind) == ("offloading.liqo.io/v1beta1", "NamespaceMap")
    assert NamespaceMap.group_version() == "offloading.liqo.io/v1beta1"


def test_namespace_offloading_defaults_are_default_name_and_local_and_remote() -> None:
    spec = NamespaceOffloadingSpec()

    assert spec.namespace_mapping_strategy is NamespaceMappingStrategy.DEFAULT_NAME
    assert spec.pod_offloading_strategy is PodOffloadingStrategy.LOCAL_AND_REMOTE
    assert NamespaceOffloading.model_validate(
        {"metadata": {"name": "offloading"}, "spec": {}}
    ).manifest()["spec"] == {
        "namespaceMappingStrategy": "DefaultName",
        "podOffloadingStrategy": "LocalAndRemote",
    }


def test_namespace_offloading_with_an_unknown_strategy_is_refused() -> None:
    with pytest.raises(ValidationError, match="podOffloadingStrategy"):
        NamespaceOffloadingSpec.model_validate({"podOffloadingStrategy": "Everywhere"})


def test_virtual_node_condition_status_defaults_to_none() -> None:
    condition = VirtualNodeCondition.model_validate({"type": "Node"})

    assert condition.status is VirtualNodeConditionStatus.NONE


def test_resource_slice_conditions_are_typed() -> None:
    rslice = ResourceSlice.model_validate(
        {
            "metadata": {"name": "mypool"},
            "status": {
                "conditions": [
                    {"type": "Authentication", "status": "Accepted"},
                    {"type": "Resources", "status": "Denied", "reason": "Drained"},
                ],
                "authParams": {"ca": base64.b64encode(b"CA").decode(), "apiServer": "https://p"},
            },
        }
    )

    conditions = rslice.status.conditions
    assert conditions is not None
    assert conditions[0].type is ResourceSliceConditionType.AUTHENTICATION
    assert conditions[1].status is ResourceSliceConditionStatus.DENIED
    assert rslice.status.auth_params is not None
    assert rslice.status.auth_params.ca == b"CA"


def test_quota_requires_a_user_and_resources() -> None:
    with pytest.raises(ValidationError) as refused:
        Quota.model_validate({"metadata": {"name": "q"}, "spec": {"user": ""}})

    fields = {error["loc"][-1] for error in refused.value.errors()}
    assert fields == {"user", "resources"}


def test_foreign_cluster_reads_v1beta1_status() -> None:
    fc = ForeignCluster.model_validate(
        {
            "metadata": {"name": "naples"},
            "spec": {"clusterID": "naples"},
            "status": {
                "role": "Provider",
                "modules": {
                    "networking": {"enabled": False},
                    "authentication": {
                        "enabled": True,
                        "conditions": [
                            {"type": "AuthIdentityControlPlaneStatus", "status": "Established"}
                        ],
                    },
                    "offloading": {
                        "enabled": True,
                        "conditions": [{"type": "OffloadingVirtualNodeStatus"}],
                    },
                },
            },
        }
    )

    assert fc.status.role is ForeignClusterRole.PROVIDER
    assert fc.status.modules is not None
    offloading = fc.status.modules.offloading.conditions
    assert offloading is not None
    assert offloading[0].status is ForeignClusterConditionStatus.NONE
    assert ForeignCluster.NAMESPACED is False


def test_python_dump_is_yaml_safe() -> None:
    vnode = VirtualNode.model_validate(_load("virtualnode_mynode_from_resourceslice.yaml"))
    vnode.status.conditions = [VirtualNodeCondition(type="Node", status="Running")]

    text = yaml.safe_dump(vnode.manifest())

    assert "status: Running" in text
