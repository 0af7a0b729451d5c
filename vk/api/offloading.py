"""`offloading.liqo.io/v1beta1`: VirtualNode, NamespaceOffloading, NamespaceMap, Quota and
ShadowPod.

VirtualNode asks for a virtual kubelet (and its Node); NamespaceOffloading says where a namespace
is extended; NamespaceMap carries the resulting namespace mappings to each provider; Quota is the
provider's limit on what a consumer may run; ShadowPod is a consumer's request for a pod, which
the provider checks and turns into the Pod itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any, ClassVar

from pydantic import ConfigDict, Field

from vk.api.constants import TENANT_NAMESPACE_PREFIX, VK_NAMESPACE
from vk.api.core import (
    CLUSTER_ID_MAX_LENGTH,
    ClusterID,
    IngressType,
    LoadBalancerType,
    StorageType,
    is_dns1123_label,
)
from vk.api.meta import Int64, KubeModel, KubeObject, LooseObject, ResourceList, Time

GROUP = "offloading.liqo.io"
VERSION = "v1beta1"

# Marks a map as replaced as a whole by server-side apply (a selector, as core/v1 does), with
# one managed-fields entry for all of it.
_ATOMIC_MAP: dict[str, Any] = {"x-kubernetes-map-type": "atomic"}


# --- VirtualNode ---------------------------------------------------------------------------


class VirtualNodeConditionType(StrEnum):
    VIRTUAL_KUBELET = "VirtualKubelet"
    NODE = "Node"


class VirtualNodeConditionStatus(StrEnum):
    NONE = "None"
    CREATING = "Creating"
    RUNNING = "Running"
    DRAINING = "Draining"
    DELETING = "Deleting"


class VirtualNodeCondition(KubeModel):
    """The state of the virtual kubelet or of its Node."""

    type: VirtualNodeConditionType
    status: VirtualNodeConditionStatus = VirtualNodeConditionStatus.NONE
    last_transition_time: Time | None = None
    reason: str | None = None
    message: str | None = None


class OffloadingPatch(KubeModel):
    """Changes applied to every pod and object offloaded through this virtual node."""

    annotations_not_reflected: list[str] | None = None
    labels_not_reflected: list[str] | None = None
    node_selector: dict[str, str] | None = None
    tolerations: list[LooseObject] | None = None
    affinity: LooseObject | None = None
    runtime_class_name: str | None = None


class ResourceQuotaSpec(KubeModel):
    """A core/v1 ResourceQuotaSpec; `hard` becomes the Node's capacity and allocatable."""

    hard: ResourceList | None = None
    scopes: list[str] | None = None
    scope_selector: LooseObject | None = None


class LocalObjectReference(KubeModel):
    """A reference to an object in the same namespace."""

    name: str | None = None


class ObjectReference(KubeModel):
    """A core/v1 ObjectReference."""

    api_version: str | None = None
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    uid: str | None = None
    resource_version: str | None = None
    field_path: str | None = None


class ContainerImage(KubeModel):
    """A container image reported in the Node status."""

    names: list[str] | None = None
    size_bytes: Int64 | None = None


class Taint(KubeModel):
    """A core/v1 Taint added to the virtual node."""

    key: str
    effect: str
    value: str | None = None
    time_added: Time | None = None


class VirtualNodeSpec(KubeModel):
    """What the virtual kubelet of this virtual node is and offers."""

    cluster_id: ClusterID | None = Field(default=None, alias="clusterID")
    """The provider's cluster ID."""
    template: LooseObject | None = None
    """The virtual kubelet Deployment template (metadata and apps/v1 DeploymentSpec)."""
    offloading_patch: OffloadingPatch | None = None
    create_node: bool | None = None
    """Whether the virtual kubelet registers a Node."""
    disable_network_check: bool | None = None
    kubeconfig_secret_ref: LocalObjectReference | None = None
    """The Secret holding the kubeconfig of the identity used on the provider."""
    images: list[ContainerImage] | None = None
    resource_quota: ResourceQuotaSpec | None = None
    labels: dict[str, str] | None = None
    """Labels added to the Node."""
    annotations: dict[str, str] | None = None
    """Annotations added to the Node."""
    taints: list[Taint] | None = None
    """Taints added to the Node besides the virtual-node taint."""
    storage_classes: list[StorageType] | None = None
    ingress_classes: list[IngressType] | None = None
    load_balancer_classes: list[LoadBalancerType] | None = None
    vk_options_template_ref: ObjectReference | None = None


class VirtualNodeStatus(KubeModel):
    """The observed state of the virtual kubelet and its Node."""

    conditions: list[VirtualNodeCondition] | None = None


class VirtualNode(KubeObject):
    """A provider cluster seen as a Node of this one, served by its own virtual kubelet."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "VirtualNode"
    PLURAL: ClassVar[str] = "virtualnodes"

    spec: VirtualNodeSpec = Field(default_factory=VirtualNodeSpec)
    status: VirtualNodeStatus = Field(default_factory=VirtualNodeStatus)


# --- VkOptionsTemplate ---------------------------------------------------------------------


class ReflectorConfig(KubeModel):
    """How one reflector runs: its workers (0: off) and, for those that have one, its policy."""

    num_workers: int | None = Field(default=None, alias="workers")
    type: str | None = None
    """DenyList or AllowList (Liqo's CustomLiqo is taken as its default)."""


class VkOptionsTemplateSpec(KubeModel):
    """The options of the virtual kubelets of the VirtualNodes that name this template."""

    create_node: bool | None = None
    disable_network_check: bool | None = None
    container_image: str | None = None
    """Liqo's virtual-kubelet image; vk runs its own (a Liqo image would not take vk's
    arguments), so this is kept but not used."""
    metrics_enabled: bool | None = None
    metrics_address: str | None = None
    labels_not_reflected: list[str] | None = None
    annotations_not_reflected: list[str] | None = None
    reflectors_config: dict[str, ReflectorConfig] | None = None
    resources: LooseObject | None = None
    """The virtual kubelet container's resources (a core/v1 ResourceRequirements)."""
    extra_args: list[str] | None = None
    extra_annotations: dict[str, str] | None = None
    extra_labels: dict[str, str] | None = None
    node_extra_annotations: dict[str, str] | None = None
    node_extra_labels: dict[str, str] | None = None
    replicas: int | None = None
    image_pull_secrets: list[LooseObject] | None = None
    pull_policy: str | None = None
    tolerations: list[LooseObject] | None = None


class VkOptionsTemplate(KubeObject):
    """Options shared by virtual kubelets: a VirtualNode names one in
    `spec.vkOptionsTemplateRef`, and its own template overrides it."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "VkOptionsTemplate"
    PLURAL: ClassVar[str] = "vkoptionstemplates"

    spec: VkOptionsTemplateSpec = Field(default_factory=VkOptionsTemplateSpec)


# --- NamespaceOffloading -------------------------------------------------------------------


class NamespaceMappingStrategy(StrEnum):
    ENFORCE_SAME_NAME = "EnforceSameName"
    DEFAULT_NAME = "DefaultName"
    SELECTED_NAME = "SelectedName"


class PodOffloadingStrategy(StrEnum):
    LOCAL = "Local"
    REMOTE = "Remote"
    LOCAL_AND_REMOTE = "LocalAndRemote"


class OffloadingPhase(StrEnum):
    READY = "Ready"
    NO_CLUSTER_SELECTED = "NoClusterSelected"
    IN_PROGRESS = "InProgress"
    SOME_FAILED = "SomeFailed"
    ALL_FAILED = "AllFailed"
    TERMINATING = "Terminating"


class RemoteNamespaceConditionType(StrEnum):
    OFFLOADING_REQUIRED = "OffloadingRequired"
    READY = "Ready"


class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class RemoteNamespaceCondition(KubeModel):
    """The state of the offloaded namespace on one provider."""

    type: RemoteNamespaceConditionType
    status: ConditionStatus
    last_transition_time: Time | None = None
    reason: str | None = None
    message: str | None = None


class NodeSelectorOperator(StrEnum):
    IN = "In"
    NOT_IN = "NotIn"
    EXISTS = "Exists"
    DOES_NOT_EXIST = "DoesNotExist"
    GT = "Gt"
    LT = "Lt"


class NodeSelectorRequirement(KubeModel):
    """A core/v1 NodeSelectorRequirement."""

    key: str
    operator: NodeSelectorOperator
    values: list[str] | None = None


class NodeSelectorTerm(KubeModel):
    """A core/v1 NodeSelectorTerm: its requirements are ANDed."""

    model_config = ConfigDict(json_schema_extra=_ATOMIC_MAP)

    match_expressions: list[NodeSelectorRequirement] | None = None
    match_fields: list[NodeSelectorRequirement] | None = None


class NodeSelector(KubeModel):
    """A core/v1 NodeSelector: its terms are ORed."""

    model_config = ConfigDict(json_schema_extra=_ATOMIC_MAP)

    node_selector_terms: list[NodeSelectorTerm]


class NamespaceOffloadingSpec(KubeModel):
    """How and where the namespace is offloaded."""

    namespace_mapping_strategy: NamespaceMappingStrategy = NamespaceMappingStrategy.DEFAULT_NAME
    """How remote namespaces are named (immutable)."""
    remote_namespace_name: str | None = None
    """The remote namespace name, required with SelectedName (immutable)."""
    pod_offloading_strategy: PodOffloadingStrategy = PodOffloadingStrategy.LOCAL_AND_REMOTE
    """Where pods of the namespace may be scheduled."""
    cluster_selector: NodeSelector | None = None
    """Selects providers by the labels of their virtual nodes; no terms select them all."""


class NamespaceOffloadingStatus(KubeModel):
    """The progress of the offloading on each provider."""

    remote_namespace_name: str | None = None
    offloading_phase: OffloadingPhase | None = None
    remote_namespaces_conditions: dict[str, list[RemoteNamespaceCondition]] | None = None
    """Conditions per provider, keyed by the provider's NamespaceMap name (its cluster ID)."""
    observed_generation: Int64 | None = None


class NamespaceOffloading(KubeObject):
    """Asks to extend the namespace it lives in to providers; it must be named `offloading`."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "NamespaceOffloading"
    PLURAL: ClassVar[str] = "namespaceoffloadings"

    spec: NamespaceOffloadingSpec
    status: NamespaceOffloadingStatus = Field(default_factory=NamespaceOffloadingStatus)


def remote_namespace_name(namespace: str, spec: Mapping[str, Any], home_cluster_id: str) -> str:
    """The twin namespace's name: the strategy's rule, Liqo's (DefaultName: the namespace's
    name, '-' and this cluster's ID; SelectedName's name is ignored by the other two)."""
    strategy = spec.get("namespaceMappingStrategy") or NamespaceMappingStrategy.DEFAULT_NAME
    if strategy == NamespaceMappingStrategy.ENFORCE_SAME_NAME:
        return namespace
    if strategy == NamespaceMappingStrategy.SELECTED_NAME:
        return str(spec.get("remoteNamespaceName") or "")
    return f"{namespace}-{home_cluster_id}"


# A name that cannot be a namespace's is shown this long at most: it may be anyone's input.
MAX_NAME_SHOWN = 128


def namespace_name_problem(name: str) -> str | None:
    """Why `name` cannot name a namespace (a DNS-1123 label), or None."""
    if is_dns1123_label(name):
        return None
    shown = repr(name if len(name) <= MAX_NAME_SHOWN else name[:MAX_NAME_SHOWN] + "…")
    if len(name) > CLUSTER_ID_MAX_LENGTH:
        return (
            f"{shown} is {len(name)} characters long, over the {CLUSTER_ID_MAX_LENGTH} of a "
            "namespace name"
        )
    return (
        f"{shown} is not a valid namespace name: lower-case letters, digits and '-', starting "
        f"and ending with a letter or digit, at most {CLUSTER_ID_MAX_LENGTH} characters"
    )


def remote_namespace_name_problem(
    namespace: str, spec: Mapping[str, Any], home_cluster_id: str
) -> str | None:
    """Why the twin namespace's name `spec` gives `namespace` cannot be a namespace's, and how
    to choose one that can; None when it can."""
    choose = (
        f"vkctl offload namespace {namespace} --namespace-mapping-strategy SelectedName "
        "--remote-namespace-name NAME"
    )
    strategy = spec.get("namespaceMappingStrategy") or NamespaceMappingStrategy.DEFAULT_NAME
    remote = remote_namespace_name(namespace, spec, home_cluster_id)
    if strategy == NamespaceMappingStrategy.SELECTED_NAME and not remote:
        return (
            "namespaceMappingStrategy SelectedName needs remoteNamespaceName: the name of the "
            f"namespace in the providers ({choose})"
        )
    problem = namespace_name_problem(remote)
    if problem is None:
        return None
    if strategy == NamespaceMappingStrategy.SELECTED_NAME:
        return f"remoteNamespaceName {problem}: choose another ({choose})"
    # DefaultName (EnforceSameName's is the namespace's own, a namespace name).
    return (
        f"the remote namespace name {problem} (DefaultName: the namespace's name, '-' and this "
        f"cluster's ID {home_cluster_id}): name it yourself with namespaceMappingStrategy "
        f"SelectedName and a shorter remoteNamespaceName ({choose})"
    )


# Kubernetes keeps this prefix for its own namespaces: kube-system, kube-public, kube-node-lease,
# and those of add-ons installed as part of the cluster (kube-flannel, say).
KUBERNETES_NAMESPACE_PREFIX = "kube-"


def system_namespace_problem(namespace: str, vk_namespace: str = VK_NAMESPACE) -> str | None:
    """Why `namespace` may never be offloaded, whatever its NamespaceOffloading says: one of
    Kubernetes' own, vk's (`VK_NAMESPACE`, and `vk_namespace` where vk was told another), or a
    tenant namespace; None for any other. Every Secret of an offloaded namespace is reflected
    to its providers, and its pods are made to tolerate the virtual nodes."""
    if namespace.startswith(KUBERNETES_NAMESPACE_PREFIX):
        what = (
            f"one of Kubernetes' own namespaces (the prefix {KUBERNETES_NAMESPACE_PREFIX} is "
            "kept for them): its Secrets (bootstrap tokens, controllers' ServiceAccount "
            "tokens) would be copied to the providers, and its pods (coredns, the cluster's "
            "controllers) could run there, with their tokens"
        )
    elif namespace in (VK_NAMESPACE, vk_namespace):
        what = (
            "vk's own namespace: its Secrets (vk's certificates) would be copied to the "
            "providers, and vk's pods could run there, with tokens that have rights over the "
            "whole cluster"
        )
    elif namespace.startswith(TENANT_NAMESPACE_PREFIX):
        what = (
            "a tenant namespace of vk: its Secrets (the kubeconfigs of this cluster's "
            "identities on a peer) would be copied to the providers, and the virtual kubelets "
            "running there could run on the virtual nodes they serve"
        )
    else:
        return None
    return f"namespace {namespace} is {what}, so vk never offloads it"


# --- NamespaceMap --------------------------------------------------------------------------


class MappingPhase(StrEnum):
    ACCEPTED = "Accepted"
    CREATION_LOOP_BACK_OFF = "CreationLoopBackOff"
    TERMINATING = "Terminating"


class RemoteNamespaceStatus(KubeModel):
    """The state of one remote namespace on the provider."""

    remote_namespace: str | None = None
    phase: MappingPhase | None = None


class NamespaceMapSpec(KubeModel):
    """The namespaces the consumer wants on this provider."""

    desired_mapping: dict[str, str] | None = None
    """Local namespace → remote namespace."""


class NamespaceMapStatus(KubeModel):
    """The namespaces the provider has created."""

    current_mapping: dict[str, RemoteNamespaceStatus] | None = None
    """Local namespace → state of its remote twin."""


class NamespaceMap(KubeObject):
    """The namespace mappings towards one provider, in its tenant namespace."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "NamespaceMap"
    PLURAL: ClassVar[str] = "namespacemaps"

    spec: NamespaceMapSpec = Field(default_factory=NamespaceMapSpec)
    status: NamespaceMapStatus = Field(default_factory=NamespaceMapStatus)


# --- Quota ---------------------------------------------------------------------------------


class LimitsEnforcement(StrEnum):
    NONE = "None"
    SOFT = "Soft"
    HARD = "Hard"


class QuotaSpec(KubeModel):
    """The resources a consumer identity may use on this provider."""

    user: str = Field(min_length=1)
    """The consumer identity (certificate common name) the quota applies to."""
    limits_enforcement: LimitsEnforcement | None = None
    resources: ResourceList
    cordoned: bool | None = None
    """A cordoned quota admits no new pods."""


class QuotaReservation(KubeModel):
    """What one admitted ShadowPod takes, until the usage counts it or it expires."""

    uid: str | None = None
    """The admitted ShadowPod's uid: the ShadowPod controller makes a Pod only for a ShadowPod
    whose reservation names it."""
    resources: ResourceList
    expires: Time
    """When the reservation lapses if no ShadowPod of that name and uid showed up (its creation
    failed after admission, or the review was never the API server's)."""


class QuotaStatus(KubeModel):
    """The ledger of the Quota, kept in the API server so that any number of webhook replicas
    admit no more than the Quota (not in Liqo, whose ledger is in its webhook's memory)."""

    used: ResourceList | None = None
    """What the consumer's ShadowPods that exist and have not finished take, as last counted."""
    # Atomic: the webhook and the recount both write it whole, and its managed fields are one
    # entry instead of one per reservation. The API server computes them again at each ledger
    # write (`bench.ledger --api-server`: with 40 held, 13.0 ms of its CPU granular, 8.1 atomic).
    reservations: dict[str, QuotaReservation] | None = Field(
        default=None, json_schema_extra=_ATOMIC_MAP
    )
    """Admissions not counted in `used` yet, by the ShadowPod's namespace/name."""


class Quota(KubeObject):
    """The provider's limit on a consumer's offloaded pods, in the tenant namespace."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "Quota"
    PLURAL: ClassVar[str] = "quotas"

    spec: QuotaSpec
    status: QuotaStatus = Field(default_factory=QuotaStatus)


# --- ShadowPod -----------------------------------------------------------------------------


class PodPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"
    UNKNOWN = "Unknown"


class ShadowPodConditionType(StrEnum):
    # Whether the provider created the Pod: False says why there is none (Pod Security, a name
    # taken, a spec the API server refused). Liqo's status has the phase alone.
    POD_CREATED = "PodCreated"
    # Whether the provider found the ShadowPod's admission in its Quota's ledger (the webhook's
    # reservation, naming its uid): only then does it get a Pod, and count in `used`. A
    # consumer's ShadowPod that never passed the webhook stays False, with no Pod.
    QUOTA_RESERVED = "QuotaReserved"


class ShadowPodCondition(KubeModel):
    """What the ShadowPod's phase cannot say."""

    type: ShadowPodConditionType
    status: ConditionStatus
    last_transition_time: Time | None = None
    reason: str | None = None
    message: str | None = None


class ShadowPodSpec(KubeModel):
    """The pod the consumer asks the provider to run."""

    pod: LooseObject
    """A core/v1 PodSpec."""


class ShadowPodStatus(KubeModel):
    """The state of the Pod the provider made of it."""

    phase: PodPhase | None = None
    conditions: list[ShadowPodCondition] | None = None


class ShadowPod(KubeObject):
    """A consumer's offloaded pod as it asks for it: the provider admits it within the
    consumer's Quota and rules, and runs it as the Pod of the same name that it owns."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "ShadowPod"
    PLURAL: ClassVar[str] = "shadowpods"

    spec: ShadowPodSpec
    status: ShadowPodStatus = Field(default_factory=ShadowPodStatus)


# --- ShadowEndpointSlice -------------------------------------------------------------------


class ShadowEndpointSliceTemplate(KubeModel):
    """The EndpointSlice the consumer asks the provider to make (discovery.k8s.io/v1)."""

    endpoints: list[LooseObject] | None = None
    ports: list[LooseObject] | None = None
    address_type: str | None = None


class ShadowEndpointSliceSpec(KubeModel):
    template: ShadowEndpointSliceTemplate = Field(default_factory=ShadowEndpointSliceTemplate)


class ShadowEndpointSliceCondition(KubeModel):
    """vk's: whether the provider made the EndpointSlice, and why not."""

    type: str
    status: str
    reason: str | None = None
    message: str | None = None
    last_transition_time: Time | None = None


class ShadowEndpointSliceStatus(KubeModel):
    conditions: list[ShadowEndpointSliceCondition] | None = None


class ShadowEndpointSlice(KubeObject):
    """A consumer's endpoints for the provider's copy of one of its Services (the addresses of
    the pods that run at home): the provider checks them against the ranges it accepts from
    that consumer and makes the EndpointSlice of the same name. Tenants write no EndpointSlice
    directly."""

    GROUP: ClassVar[str] = GROUP
    VERSION: ClassVar[str] = VERSION
    KIND: ClassVar[str] = "ShadowEndpointSlice"
    PLURAL: ClassVar[str] = "shadowendpointslices"

    spec: ShadowEndpointSliceSpec = Field(default_factory=ShadowEndpointSliceSpec)
    status: ShadowEndpointSliceStatus = Field(default_factory=ShadowEndpointSliceStatus)
