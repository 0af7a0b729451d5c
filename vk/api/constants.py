"""Every label, annotation, taint and well-known name vk shares with Liqo, in one place.

The values are Liqo's own, so objects created by vk and by Liqo read the same; the comments say
who sets each one and who reads it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

# --- Virtual nodes -------------------------------------------------------------------------

# Label on every virtual Node (value TYPE_VIRTUAL_NODE); selectors and the RuntimeClass use it.
TYPE_LABEL = "liqo.io/type"
TYPE_VIRTUAL_NODE = "virtual-node"
# On local pods the virtual kubelet has offloaded; meaningful only locally, so not reflected.
OFFLOADED_POD_LABEL = "liqo.io/shadowPod"
# On local pods whose virtual node is not Ready (its provider unreachable, or its virtual
# kubelet gone): their Ready condition is reported False; meaningful only locally.
REMOTE_UNAVAILABLE_LABEL = "liqo.io/remote-unavailable"

# The remote cluster an object belongs to: on virtual Nodes, tenant namespaces, ResourceSlices,
# VirtualNodes, NamespaceMaps, kubeconfig Secrets and the provider namespaces of a consumer.
REMOTE_CLUSTER_ID_LABEL = "liqo.io/remote-cluster-id"

# Taint on every virtual Node, so that only pods of offloaded namespaces (which the pod webhook
# gives the matching toleration) or of the `liqo` RuntimeClass run there.
VIRTUAL_NODE_TAINT_KEY = "virtual-node.liqo.io/not-allowed"
VIRTUAL_NODE_TAINT_VALUE = "true"
VIRTUAL_NODE_TAINT_EFFECT = "NoExecute"

# On a virtual kubelet's Deployment and its pods: what they are, and for which VirtualNode. The
# Deployment launcher finds its Deployments and their pods by them.
COMPONENT_LABEL = "offloading.liqo.io/component"
COMPONENT_VIRTUAL_KUBELET = "virtual-kubelet"
VIRTUAL_NODE_LABEL = "liqo.io/virtual-node"

# RuntimeClass whose pods go to virtual nodes whatever the namespace's pod offloading strategy.
RUNTIME_CLASS_NAME = "liqo"

# The pod phases after which a pod runs no more: it holds no resources and is not moved.
POD_TERMINAL_PHASES = ("Succeeded", "Failed")

# --- Replication of ResourceSlices and NamespaceMaps ---------------------------------------

# "true" on the consumer's copy: replicate this object to the provider in REMOTE_ID_LABEL.
# Liqo sets it to "false" on the provider's copy, so `kubectl get` shows which copy is local.
REPLICATION_LABEL = "liqo.io/replication"
# The cluster ID a replicated object is replicated to.
REMOTE_ID_LABEL = "liqo.io/remoteID"
# "true" on the provider's copy: created by replication from the consumer.
REPLICATED_LABEL = "liqo.io/replicated"

# On a consumer ResourceSlice: "true" asks for a VirtualNode once the slice is accepted.
CREATE_VIRTUAL_NODE_ANNOTATION = "liqo.io/create-virtual-node"

# --- Namespace offloading ------------------------------------------------------------------

# The only name a NamespaceOffloading may have (one per offloaded namespace).
NAMESPACE_OFFLOADING_NAME = "offloading"

# "true" on an offloaded namespace (strategy not Local): the pod webhook acts on its pods.
SCHEDULING_ENABLED_LABEL = "liqo.io/scheduling-enabled"

# Cluster label used by the tutorial's cluster selectors (propagated to virtual nodes).
REGION_LABEL = "topology.liqo.io/region"

# --- Reflection ----------------------------------------------------------------------------

# Ownership labels on every object vk creates in a provider: the consumer cluster ID (origin),
# the provider cluster ID (destination) and, on pods and token Secrets, the virtual node name.
# A remote object without them is never touched.
ORIGIN_LABEL = "offloading.liqo.io/origin"
DESTINATION_LABEL = "offloading.liqo.io/destination"
NODENAME_LABEL = "offloading.liqo.io/nodename"
# On the Secret holding an offloaded pod's ServiceAccount tokens: whose tokens they are.
SERVICE_ACCOUNT_NAME_LABEL = "offloading.liqo.io/service-account-name"

# How often a status the provider writes is copied home for one object (a remote pod's, or a
# replicated ResourceSlice's or NamespaceMap's): as often as it changes up to
# PROVIDER_STATUS_BURST times at once, then once every PROVIDER_STATUS_INTERVAL_SECONDS, as
# the provider has it then. A pod's status changes a few times as it starts, and seldom after
# (a probe's period is seconds); a provider writes its statuses as it likes, and changing them
# on and on would have the consumer write home as fast as it goes, for each of its objects.
PROVIDER_STATUS_BURST = 10
PROVIDER_STATUS_INTERVAL_SECONDS = 2.0

# With the DenyList policy, an object carrying this annotation is not reflected.
SKIP_REFLECTION_ANNOTATION = "liqo.io/skip-reflection"
# With the AllowList policy, only objects carrying this annotation are reflected.
ALLOW_REFLECTION_ANNOTATION = "liqo.io/allow-reflection"

# --- Tenants and identities ----------------------------------------------------------------

# Each side of a peering keeps the objects of the other cluster in `liqo-tenant-<its ID>`.
TENANT_NAMESPACE_PREFIX = "liqo-tenant-"

# The consumer's kubeconfig Secret for the identity of a ResourceSlice, in the tenant namespace.
KUBECONFIG_SECRET_PREFIX = "kubeconfig-resourceslice-"

# vk's system namespace, and the ConfigMap in it holding this cluster's identity: its ID under
# CLUSTER_ID_KEY and its cluster labels (a JSON object) under CLUSTER_LABELS_KEY.
VK_NAMESPACE = "vk"
CLUSTER_IDENTITY_CONFIGMAP = "vk-cluster-identity"
CLUSTER_ID_KEY = "clusterID"
CLUSTER_LABELS_KEY = "clusterLabels"

# vk's controller manager and webhook (as the chart names them): their ServiceAccounts in
# VK_NAMESPACE, which the chart's RBAC binds; the controller manager's leader-election Lease.
CONTROLLER_MANAGER = "vk-controller-manager"
WEBHOOK = "vk-webhook"


# Where metrics-server, and a provider's metrics agent, read a node's resource metrics (kwok
# serves every simulated node's under its own prefix); without it, the kubelet's
# `/metrics/resource`.
RESOURCE_METRICS_PATH_ANNOTATION = "metrics.k8s.io/resource-metrics-path"

# On tenant namespaces (both sides): "true"; with REMOTE_CLUSTER_ID_LABEL naming the other side.
TENANT_NAMESPACE_LABEL = "liqo.io/tenant-namespace"

# On tenant namespaces (both sides): the UID of the other cluster's kube-system namespace, taken
# at its first peering. A cluster's ID is what its installer chose, and another cluster may
# claim it; its kube-system namespace's UID is made with it, and never changes.
PEER_CLUSTER_UID_ANNOTATION = "peering.vk.io/cluster-uid"

# On a provider's tenant namespace: "true", it is kept for a consumer (an incoming peering).
CONSUMER_TENANT_LABEL = "liqo.io/consumer-tenant"

# On a VirtualNode created for a ResourceSlice: the slice's name.
RESOURCE_SLICE_NAME_LABEL = "liqo.io/resourceslice-name"
# On a provider's ResourceSlice (any value but false/False/0): its Quota is cordoned, and admits
# no new pod (Liqo's `liqoctl cordon resourceslice`).
CORDON_ANNOTATION = "liqo.io/cordon"

# On the Secrets holding a consumer's identities on a provider: what the identity is for.
IDENTITY_TYPE_LABEL = "liqo.io/identity-type"
IDENTITY_CONTROL_PLANE = "ControlPlane"
IDENTITY_RESOURCE_SLICE = "ResourceSlice"

# The consumer's kubeconfig Secret of its control-plane identity on a provider, in the tenant
# namespace (it replicates ResourceSlices and NamespaceMaps with it).
CONTROL_PLANE_SECRET_PREFIX = "vk-control-plane-"


def tenant_namespace(cluster_id: str) -> str:
    """The tenant namespace holding the objects of the peering with `cluster_id`."""
    return f"{TENANT_NAMESPACE_PREFIX}{cluster_id}"


def tenant_of_namespace(namespace: str) -> str | None:
    """The cluster whose tenant namespace `namespace` is, None if it is none: what a tenant
    writes there is that cluster's, whatever its labels say."""
    cluster_id = namespace.removeprefix(TENANT_NAMESPACE_PREFIX)
    return cluster_id if cluster_id and cluster_id != namespace else None


def consumer_of_namespace(namespace: Mapping[str, Any] | None) -> str | None:
    """The consumer a provider's tenant or twin namespace was made for (its
    REMOTE_CLUSTER_ID_LABEL: only the provider writes namespaces), or None (none, or another)."""
    labels = ((namespace or {}).get("metadata") or {}).get("labels") or {}
    consumer = labels.get(REMOTE_CLUSTER_ID_LABEL)
    return str(consumer) if consumer else None


# On a provider's tenant namespace, set by its administrator (a consumer cannot write
# namespaces): how many twin namespaces, and ResourceSlices, that one consumer may have there,
# instead of the provider's defaults.
TENANT_MAX_TWIN_NAMESPACES_LABEL = "vk.io/max-twin-namespaces"
TENANT_MAX_RESOURCE_SLICES_LABEL = "vk.io/max-resource-slices"
# The ResourceSlices of one consumer a provider answers at once unless told otherwise (its
# controller manager's and its webhook's `--max-resource-slices-per-consumer`): each is an
# identity signed through its CSR API, valid a year, and a Quota.
DEFAULT_MAX_RESOURCE_SLICES = 64


def tenant_limit(
    tenant_namespace: Mapping[str, Any] | None, label: str, default: int
) -> tuple[int, str | None]:
    """A count a consumer may have: its tenant namespace's `label` if it is a count, else
    `default`; and what is wrong with the label, if anything."""
    labels = ((tenant_namespace or {}).get("metadata") or {}).get("labels") or {}
    chosen = labels.get(label)
    if chosen is None:
        return default, None
    if not (isinstance(chosen, str) and chosen.isascii() and chosen.isdigit() and len(chosen) < 10):
        return default, (
            f"label {label}={chosen!r} is no count (0 to 999999999): the provider's default "
            f"{default} applies"
        )
    return int(chosen), None


def kubeconfig_secret_name(resource_slice_name: str) -> str:
    """The Secret holding the kubeconfig of the identity issued for a ResourceSlice."""
    return f"{KUBECONFIG_SECRET_PREFIX}{resource_slice_name}"


def service_account_user(namespace: str, name: str) -> str:
    """The user a ServiceAccount authenticates as (RBAC matches it to a ServiceAccount subject)."""
    return f"system:serviceaccount:{namespace}:{name}"


def virtual_kubelet_service_account(node_name: str) -> str:
    """The ServiceAccount a virtual kubelet runs as, one per VirtualNode (in its namespace)."""
    return f"vk-{node_name}"


def virtual_kubelet_deployment(node_name: str) -> str:
    """The Deployment running the virtual kubelet of a VirtualNode (in its namespace)."""
    return f"vk-{node_name}"


def control_plane_secret_name(provider_cluster_id: str) -> str:
    return f"{CONTROL_PLANE_SECRET_PREFIX}{provider_cluster_id}"


def control_plane_identity_provider(secret: Mapping[str, Any]) -> str | None:
    """The provider whose control-plane identity `secret` is, or None. Only the Secret named
    for it in its tenant namespace is: the labels alone are anyone's to write, and a tenant
    allowed Secrets in a namespace of theirs would otherwise point the link to a provider at
    an API server of their own."""
    metadata = secret.get("metadata") or {}
    provider = (metadata.get("labels") or {}).get(REMOTE_CLUSTER_ID_LABEL)
    if (
        not isinstance(provider, str)
        or metadata.get("namespace") != tenant_namespace(provider)
        or metadata.get("name") != control_plane_secret_name(provider)
    ):
        return None
    return provider


def control_plane_user(consumer_cluster_id: str) -> str:
    """The user of a consumer's control-plane identity on a provider (its certificate's CN)."""
    return f"vk-control-plane:{consumer_cluster_id}"


def tenant_group(consumer_cluster_id: str) -> str:
    """The group of every ResourceSlice identity of a consumer (their certificates' O): the
    provider binds it in the consumer's twin namespaces."""
    return f"vk-tenant:{consumer_cluster_id}"


def resource_slice_user(consumer_cluster_id: str, resource_slice_name: str) -> str:
    """The user of a ResourceSlice's identity (its certificate's CN), which also names its
    Quota: `<slice>-<hash>`, unique across consumers (Liqo's `mypool-c34af51dd912`)."""
    digest = hashlib.sha256(f"{consumer_cluster_id}/{resource_slice_name}".encode()).hexdigest()
    return f"{resource_slice_name}-{digest[:12]}"


# --- Quota enforcement (provider) ----------------------------------------------------------

# On every pod a consumer's identity creates on a provider: that identity (its user name, or a
# digest of it where the name is no valid label value), stamped by the quota webhook at
# creation and immutable after. A Quota's usage is the pods stamped with its user, wherever
# they are: the VirtualNodes of one ResourceSlice share its identity, so they share its Quota.
CREATOR_USER_LABEL = "liqo.io/creator-user"

# What the group of every ResourceSlice identity of every consumer starts with (tenant_group).
TENANT_GROUP_PREFIX = tenant_group("")

# --- Tenants (provider) --------------------------------------------------------------------

# The Role and RoleBinding of a consumer's control-plane identity in the provider's tenant
# namespace of that consumer (`vkctl peer` makes them, the provider's Tenant controller removes
# them when the Tenant goes).
CONTROL_PLANE_ROLE = "vk-control-plane"


def control_plane_request_name(consumer_cluster_id: str) -> str:
    """The CSR `vkctl peer` makes on a provider for a consumer's control-plane identity."""
    return f"{CONTROL_PLANE_ROLE}-{consumer_cluster_id}"


# --- ShadowPods (provider) -----------------------------------------------------------------

# On a ShadowPod: the provider deletes its Pod before the ShadowPod goes (honouring the
# grace period below), so the pod counts in its Quota until it is gone. The webhook adds it at
# creation; the ShadowPod controller adds it to a ShadowPod that bypassed the webhook.
SHADOW_POD_FINALIZER = "shadowpod.vk.io/pod-gone"
# Reasons of a ShadowPod's PodCreated condition the consumer acts on: a Pod of that name the
# ShadowPod does not own is there (told at home), and no Quota's ledger holds the ShadowPod's
# admission (it bypassed the webhook: the consumer withdraws it and asks again).
SHADOW_POD_NAME_TAKEN = "NameTaken"
SHADOW_POD_NOT_RESERVED = "NotReserved"
# On a ShadowPod being deleted: the grace period the consumer's deletion asked for, when it is
# not the pod's own (a custom resource's deletion keeps no grace period of its own). Not
# carried to the Pod.
DELETION_GRACE_ANNOTATION = "shadowpod.vk.io/deletion-grace-period-seconds"
# On every Pod the ShadowPod controller makes ("true"): what its informer watches, instead of
# every pod of the cluster.
SHADOW_POD_OWNED_LABEL = "shadowpod.vk.io/owned"
# The UID of the local pod a ShadowPod (and so its Pod) stands for: a local pod deleted and
# made again under the same name (a StatefulSet's, force-deleted) is another pod, and gets a
# remote pod of its own, never the earlier one's.
LOCAL_POD_UID_ANNOTATION = "shadowpod.vk.io/local-pod-uid"

# --- Pod Security (provider) ---------------------------------------------------------------

# The API server's Pod Security admission reads these labels on a namespace: the provider
# stamps its tenants' twin namespaces with its chosen level, so no Pod breaking it runs there,
# whoever creates it.
POD_SECURITY_ENFORCE_LABEL = "pod-security.kubernetes.io/enforce"
POD_SECURITY_ENFORCE_VERSION_LABEL = "pod-security.kubernetes.io/enforce-version"
POD_SECURITY_WARN_LABEL = "pod-security.kubernetes.io/warn"
POD_SECURITY_WARN_VERSION_LABEL = "pod-security.kubernetes.io/warn-version"
# The Pod Security Standards' levels, least to most restrictive, and the provider's default for
# its tenants' twin namespaces.
POD_SECURITY_LEVELS = ("privileged", "baseline", "restricted")
DEFAULT_TENANT_POD_SECURITY = "baseline"
# The provider's ShadowPods and ShadowEndpointSlices reconciled at once (Liqo's defaults for
# its --shadow-pod-ctrl-workers and --shadow-endpointslice-ctrl-workers). A ShadowPod's
# reconciles wait on the API server, not on this process's CPU: with 4 of them, a burst of
# 1000 offloaded pods kept 370 ShadowPods waiting, and their reservations, unfolded, made each
# write of the Quota's ledger 30 KiB.
DEFAULT_SHADOW_POD_WORKERS = 10
DEFAULT_SHADOW_ENDPOINTSLICE_WORKERS = 10
