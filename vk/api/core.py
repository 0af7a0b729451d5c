"""`core.liqo.io/v1beta1`: ForeignCluster, and the types Liqo's other groups share with it.

The ForeignCluster is the consumer's record of a peered cluster; its status says which modules
(authentication, offloading; networking is out of scope) are established. The cluster ID type
and the storage/ingress/load-balancer class entries live here, as in Liqo's `core` package.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, ClassVar

from pydantic import AfterValidator, Field, WithJsonSchema

from vk.api.meta import Int64, KubeModel, KubeObject, Time

GROUP = "core.liqo.io"
VERSION = "v1beta1"

CLUSTER_ID_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
CLUSTER_ID_MAX_LENGTH = 63
_CLUSTER_ID_RE = re.compile(CLUSTER_ID_PATTERN)


def is_dns1123_label(value: str) -> bool:
    """Whether `value` is a DNS-1123 label: the syntax of namespace names and cluster IDs."""
    return len(value) <= CLUSTER_ID_MAX_LENGTH and bool(_CLUSTER_ID_RE.match(value))


class InvalidClusterID(ValueError):
    """A cluster ID that is not a DNS-1123 label."""


def validate_cluster_id(value: str) -> str:
    """Return `value` if it is a valid cluster ID (a DNS-1123 label); raise InvalidClusterID."""
    if not value:
        raise InvalidClusterID("cluster ID is empty")
    if len(value) > CLUSTER_ID_MAX_LENGTH:
        raise InvalidClusterID(
            f"cluster ID {value!r} is {len(value)} characters long, "
            f"at most {CLUSTER_ID_MAX_LENGTH} are allowed"
        )
    if not _CLUSTER_ID_RE.match(value):
        raise InvalidClusterID(
            f"cluster ID {value!r} is not a DNS-1123 label: use lower-case letters, digits "
            "and '-', starting and ending with a letter or digit"
        )
    return value


ClusterID = Annotated[
    str,
    AfterValidator(validate_cluster_id),
    WithJsonSchema(
        {"type": "string", "pattern": CLUSTER_ID_PATTERN, "maxLength": CLUSTER_ID_MAX_LENGTH}
    ),
]


class StorageType(KubeModel):
    """A storage class offered by the provider."""

    storage_class_name: str
    default: bool | None = None


class IngressType(KubeModel):
    """An ingress class offered by the provider."""

    ingress_class_name: str
    default: bool | None = None


class LoadBalancerType(KubeModel):
    """A load balancer class offered by the provider."""

    load_balancer_class_name: str
    default: bool | None = None


class ForeignClusterRole(StrEnum):
    CONSUMER = "Consumer"
    PROVIDER = "Provider"
    CONSUMER_AND_PROVIDER = "ConsumerAndProvider"
    UNKNOWN = "Unknown"


class ForeignClusterConditionType(StrEnum):
    API_SERVER_STATUS = "APIServerStatus"
    NETWORK_CONNECTION_STATUS = "NetworkConnectionStatus"
    NETWORK_GATEWAY_SERVER_STATUS = "NetworkGatewayServerStatus"
    NETWORK_GATEWAY_CLIENT_STATUS = "NetworkGatewayClientStatus"
    NETWORK_GATEWAY_PRESENCE = "NetworkGatewayPresence"
    NETWORK_CONFIGURATION_STATUS = "NetworkConfigurationStatus"
    AUTH_IDENTITY_CONTROL_PLANE_STATUS = "AuthIdentityControlPlaneStatus"
    AUTH_TENANT_STATUS = "AuthTenantStatus"
    OFFLOADING_VIRTUAL_NODE_STATUS = "OffloadingVirtualNodeStatus"
    OFFLOADING_NODE_STATUS = "OffloadingNodeStatus"


class ForeignClusterConditionStatus(StrEnum):
    NONE = "None"
    PENDING = "Pending"
    ESTABLISHED = "Established"
    ERROR = "Error"
    READY = "Ready"
    NOT_READY = "NotReady"
    SOME_NOT_READY = "SomeNotReady"


class ForeignClusterCondition(KubeModel):
    """The state of one aspect of the peering."""

    type: ForeignClusterConditionType
    status: ForeignClusterConditionStatus = ForeignClusterConditionStatus.NONE
    last_transition_time: Time | None = None
    reason: str | None = None
    message: str | None = None


class Module(KubeModel):
    """Whether a peering module is enabled, and its conditions."""

    enabled: bool
    conditions: list[ForeignClusterCondition] | None = None


class Modules(KubeModel):
    """The peering modules of a ForeignCluster."""

    networking: Module
    authentication: Module
    offloading: Module


class TenantNamespaces(KubeModel):
    """The tenant namespaces of the peering, on this cluster and on the other one."""

    local: str | None = None
    remote: str | None = None


class ForeignClusterSpec(KubeModel):
    """The identity of the remote cluster."""

    cluster_id: ClusterID = Field(
        alias="clusterID",
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "ClusterID field is immutable"}
            ]
        },
    )


class ForeignClusterStatus(KubeModel):
    """The observed state of the peering with the remote cluster."""

    observed_generation: Int64 | None = None
    role: ForeignClusterRole = ForeignClusterRole.UNKNOWN
    modules: Modules | None = None
    api_server_url: str | None = None
    foreign_proxy_url: str | None = None
    tenant_namespace: TenantNamespaces | None = None
    conditions: list[ForeignClusterCondition] | None = None


class ForeignCluster(KubeObject):
    """A cluster peered with this one (cluster-scoped, named after the remote cluster ID)."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "ForeignCluster"
    PLURAL: ClassVar[str] = "foreignclusters"
    NAMESPACED: ClassVar[bool] = False

    spec: ForeignClusterSpec
    status: ForeignClusterStatus = Field(default_factory=ForeignClusterStatus)
