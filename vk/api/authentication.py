"""`authentication.liqo.io/v1beta1`: ResourceSlice, the consumer's request for provider resources,
and Tenant, the provider's record of a consumer.

The consumer writes a ResourceSlice's `spec` (and a CSR); the provider answers in `status` with
the granted resources and the signed certificate that becomes the virtual kubelet's identity.
"""

from __future__ import annotations

from enum import StrEnum
from typing import ClassVar

from pydantic import Field

from vk.api.core import ClusterID, IngressType, LoadBalancerType, StorageType
from vk.api.meta import Base64Bytes, KubeModel, KubeObject, ResourceList, Time

GROUP = "authentication.liqo.io"
VERSION = "v1beta1"

DEFAULT_RESOURCE_SLICE_CLASS = "default"
"""The class the provider's own controller serves (an empty class means the same)."""


class ResourceSliceConditionType(StrEnum):
    AUTHENTICATION = "Authentication"
    RESOURCES = "Resources"


class ResourceSliceConditionStatus(StrEnum):
    ACCEPTED = "Accepted"
    DENIED = "Denied"


class ResourceSliceCondition(KubeModel):
    """The provider's decision on the authentication or on the resources of a slice."""

    type: ResourceSliceConditionType
    status: ResourceSliceConditionStatus
    last_transition_time: Time | None = None
    reason: str | None = None
    message: str | None = None


class AuthParams(KubeModel):
    """What the consumer needs to reach the provider with the identity of this slice."""

    ca: Base64Bytes | None = None
    """The provider API server's CA certificate (PEM)."""
    signed_crt: Base64Bytes | None = Field(default=None, alias="signedCRT")
    """The client certificate signed for the slice's CSR (PEM)."""
    api_server: str | None = None
    """The provider API server URL."""
    proxy_url: str | None = Field(default=None, alias="proxyURL")


class ResourceSliceSpec(KubeModel):
    """The consumer's request."""

    class_: str | None = Field(default=None, alias="class")
    """The slice class; `default` (or empty) is served by the provider itself."""
    provider_cluster_id: ClusterID | None = Field(default=None, alias="providerClusterID")
    consumer_cluster_id: ClusterID | None = Field(default=None, alias="consumerClusterID")
    resources: ResourceList | None = None
    """Resources requested; the provider's defaults fill what is missing."""
    csr: Base64Bytes | None = None
    """A PEM certificate signing request for the identity of this slice."""


class ResourceSliceStatus(KubeModel):
    """The provider's answer."""

    conditions: list[ResourceSliceCondition] | None = None
    resources: ResourceList | None = None
    """Resources granted."""
    auth_params: AuthParams | None = None
    storage_classes: list[StorageType] | None = None
    ingress_classes: list[IngressType] | None = None
    load_balancer_classes: list[LoadBalancerType] | None = None
    node_labels: dict[str, str] | None = None
    """Labels the provider suggests for the virtual node (its cluster labels)."""
    node_selector: dict[str, str] | None = None
    """A node selector the provider applies to offloaded pods."""


class ResourceSlice(KubeObject):
    """A slice of a provider's resources, requested by a consumer in its tenant namespace."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "ResourceSlice"
    PLURAL: ClassVar[str] = "resourceslices"

    spec: ResourceSliceSpec = Field(default_factory=ResourceSliceSpec)
    status: ResourceSliceStatus = Field(default_factory=ResourceSliceStatus)


# --- Tenant --------------------------------------------------------------------------------


class TenantCondition(StrEnum):
    """What the provider lets a consumer do."""

    ACTIVE = "Active"
    """It consumes resources and may negotiate new ones."""
    CORDONED = "Cordoned"
    """What it has is kept, nothing new is granted."""
    DRAINED = "Drained"
    """It may neither consume nor negotiate."""


class TenantSpec(KubeModel):
    """The consumer this Tenant stands for."""

    cluster_id: ClusterID | None = Field(
        default=None,
        alias="clusterID",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "ClusterID is immutable"}
            ]
        },
    )
    """The consumer's cluster ID."""
    tenant_condition: TenantCondition = TenantCondition.ACTIVE


class TenantStatus(KubeModel):
    """What the provider keeps for the consumer."""

    tenant_namespace: str | None = None
    """The provider's tenant namespace of this consumer."""


class Tenant(KubeObject):
    """A provider's record of a consumer, in the tenant namespace it keeps for it and named
    after it. Deleting it ends the peering on the provider's side: vk removes everything it
    made there for that consumer, then the tenant namespace."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "Tenant"
    PLURAL: ClassVar[str] = "tenants"

    spec: TenantSpec = Field(default_factory=TenantSpec)
    status: TenantStatus = Field(default_factory=TenantStatus)
