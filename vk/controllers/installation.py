"""What installing vk in a cluster creates, besides the CRDs: the system namespace with the
cluster's identity, the controller manager's ServiceAccount and its least-privilege RBAC, and
the ClusterRole that providers bind to their consumers' virtual kubelets, and the RuntimeClass
`liqo`. The playground
applies exactly these objects (with the controller manager authenticating as that
ServiceAccount), as `vkctl install` and the Helm chart will.

Pure functions; every rule says what needs it.
"""

from __future__ import annotations

from typing import Any

from vk.api.constants import (
    CLUSTER_IDENTITY_CONFIGMAP,
    NAMESPACE_OFFLOADING_NAME,
    REMOTE_CLUSTER_ID_LABEL,
    RUNTIME_CLASS_NAME,
    SCHEDULING_ENABLED_LABEL,
    TENANT_NAMESPACE_LABEL,
    TYPE_LABEL,
    TYPE_VIRTUAL_NODE,
    VIRTUAL_NODE_TAINT_EFFECT,
    VIRTUAL_NODE_TAINT_KEY,
    VK_NAMESPACE,
)
from vk.api.identity import forge_cluster_identity_configmap
from vk.api.offloading import NamespaceOffloading, PodOffloadingStrategy, VirtualNode
from vk.controllers.provider_namespacemaps import (
    VIRTUAL_KUBELET_REMOTE_ROLE,
    forge_virtual_kubelet_remote_role,
)
from vk.controllers.virtualkubelet_rbac import (
    AUTHENTICATION_READER_ROLE,
    VIRTUAL_KUBELET_OFFLOADED_ROLE,
    VIRTUAL_KUBELET_ROLE,
    VIRTUAL_KUBELET_TENANT_ROLE,
    forge_virtual_kubelet_cluster_roles,
)
from vk.reflection.forge.storage import STORAGE_PROVISIONER, VIRTUAL_STORAGE_CLASS

JSON = dict[str, Any]

CONTROLLER_MANAGER = "vk-controller-manager"
LABELS = {"app.kubernetes.io/name": "vk", "app.kubernetes.io/component": "controller-manager"}

LIQO_KINDS = {
    "authentication.liqo.io": ("resourceslices", "tenants"),
    "offloading.liqo.io": (
        "namespacemaps",
        "virtualnodes",
        "quotas",
        "namespaceoffloadings",
        "shadowpods",
        "shadowendpointslices",
    ),
    "core.liqo.io": ("foreignclusters",),
}
FINALIZED = {
    "resourceslices",
    "tenants",
    "namespacemaps",
    "virtualnodes",
    "namespaceoffloadings",
    "shadowpods",
}
ALL_VERBS = ["get", "list", "watch", "create", "update", "patch", "delete"]
READ = ["get", "list", "watch"]
NODE_LEASE_NAMESPACE = "kube-node-lease"
VIRTUAL_KUBELET_ROLES = [
    VIRTUAL_KUBELET_ROLE,
    VIRTUAL_KUBELET_TENANT_ROLE,
    VIRTUAL_KUBELET_OFFLOADED_ROLE,
]


def _rule(groups: list[str], resources: list[str], verbs: list[str], **extra: Any) -> JSON:
    return {"apiGroups": groups, "resources": resources, "verbs": verbs, **extra}


def controller_manager_user(namespace: str = VK_NAMESPACE) -> str:
    """The user name the API server gives the controller manager's ServiceAccount."""
    return f"system:serviceaccount:{namespace}:{CONTROLLER_MANAGER}"


def forge_controller_manager_cluster_role() -> JSON:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": CONTROLLER_MANAGER, "labels": LABELS},
        "rules": [
            # Every reconciler: ResourceSlices, NamespaceMaps, VirtualNodes, Quotas and
            # ForeignClusters, their status (copied back, or answered) and finalizers. Each
            # kind in its own group only.
            *(_rule([group], list(plurals), ALL_VERBS) for group, plurals in LIQO_KINDS.items()),
            *(
                _rule(
                    [group], [f"{plural}/status" for plural in plurals], ["get", "update", "patch"]
                )
                for group, plurals in LIQO_KINDS.items()
            ),
            # The finalizers: set on what must be cleaned up (a ShadowPod's also blocks its
            # owner's deletion for the Pod made of it).
            *(
                _rule(
                    [group],
                    [f"{plural}/finalizers" for plural in plurals if plural in FINALIZED],
                    ["get", "update", "patch"],
                )
                for group, plurals in LIQO_KINDS.items()
                if set(plurals) & FINALIZED
            ),
            # Tenant namespaces are found by label; twin namespaces are created for consumers
            # and deleted with their mapping (never one vk did not create: checked in code).
            _rule([""], ["namespaces"], ALL_VERBS),
            # The core ResourceQuota of each twin namespace (provider), applied server-side.
            _rule([""], ["resourcequotas"], ["get", "create", "update", "patch"]),
            # Slice keys and kubeconfigs (consumer), control-plane kubeconfigs (replication).
            _rule([""], ["secrets"], ALL_VERBS),
            # The virtual kubelets' ServiceAccounts, one per VirtualNode.
            _rule([""], ["serviceaccounts"], ALL_VERBS),
            # Virtual nodes: cordoned, drained (pods evicted through the Eviction API) and
            # deleted with their VirtualNode; a node name taken by a real Node is detected.
            # (update, and the status, only to grant them to each node's virtual kubelet.)
            _rule([""], ["nodes"], ["get", "list", "watch", "patch", "update", "delete"]),
            _rule([""], ["nodes/status"], ["get", "patch", "update"]),
            # The EndpointSlices made of consumers' ShadowEndpointSlices (provider).
            _rule(["discovery.k8s.io"], ["endpointslices"], ALL_VERBS),
            # The VkOptionsTemplates VirtualNodes name, read to launch their virtual kubelets.
            _rule(["offloading.liqo.io"], ["vkoptionstemplates"], ["get", "list", "watch"]),
            # The storage and ingress classes this cluster offers its consumers (provider).
            _rule(["storage.k8s.io"], ["storageclasses"], ["list", "watch"]),
            _rule(["networking.k8s.io"], ["ingressclasses"], ["list", "watch"]),
            # The Pods consumers ask for with ShadowPods (provider): made, kept in line with
            # them, deleted with them; read for drains too. Pod Security admission checks each.
            _rule([""], ["pods"], ALL_VERBS),
            _rule([""], ["pods/eviction"], ["create"]),
            # Conditions explained to users.
            _rule([""], ["events"], ["get", "create", "patch"]),
            _rule(["events.k8s.io"], ["events"], ["get", "create", "patch"]),
            # Virtual kubelets' serving certificates (approved for exactly their node) and
            # slice identities (signed by the provider for kube-apiserver-client).
            _rule(["certificates.k8s.io"], ["certificatesigningrequests"], ALL_VERBS),
            _rule(["certificates.k8s.io"], ["certificatesigningrequests/approval"], ["update"]),
            _rule(
                ["certificates.k8s.io"],
                ["signers"],
                ["approve"],
                resourceNames=[
                    "kubernetes.io/kubelet-serving",
                    "kubernetes.io/kube-apiserver-client",
                ],
            ),
            # The RBAC of each virtual kubelet (consumer) and of each consumer's identities in
            # its twin namespaces (provider). The roles it makes grant only rights it holds
            # (the API server checks: no escalate); the roles vk ships, and Kubernetes' reader
            # of the client CA, it may bind by name and by name only.
            _rule(
                ["rbac.authorization.k8s.io"],
                ["roles", "rolebindings", "clusterroles", "clusterrolebindings"],
                ALL_VERBS,
            ),
            _rule(
                ["rbac.authorization.k8s.io"],
                ["clusterroles"],
                ["bind"],
                resourceNames=[*VIRTUAL_KUBELET_ROLES, VIRTUAL_KUBELET_REMOTE_ROLE],
            ),
            _rule(
                ["rbac.authorization.k8s.io"],
                ["roles"],
                ["bind"],
                resourceNames=[AUTHENTICATION_READER_ROLE],
            ),
            # Virtual kubelets as Deployments, on real clusters.
            _rule(["apps"], ["deployments"], ALL_VERBS),
        ],
    }


def forge_controller_manager_role(namespace: str = VK_NAMESPACE) -> JSON:
    """What the controller manager needs in vk's own namespace only."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {"name": CONTROLLER_MANAGER, "namespace": namespace, "labels": LABELS},
        "rules": [
            # This cluster's identity, read at start.
            _rule([""], ["configmaps"], ["get"], resourceNames=[CLUSTER_IDENTITY_CONFIGMAP]),
            # Leader election among the controller manager's replicas.
            _rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update"]),
        ],
    }


def forge_controller_manager_node_lease_role() -> JSON:
    """The node heartbeat Leases, in kube-node-lease only: held to be granted, each to its
    node's virtual kubelet (the manager itself writes none)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": {
            "name": CONTROLLER_MANAGER,
            "namespace": NODE_LEASE_NAMESPACE,
            "labels": LABELS,
        },
        "rules": [
            _rule(["coordination.k8s.io"], ["leases"], ["get", "create", "patch", "update"]),
        ],
    }


def _role_binding(namespace: str) -> JSON:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": CONTROLLER_MANAGER, "namespace": namespace, "labels": LABELS},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": CONTROLLER_MANAGER,
        },
        "subjects": [
            {"kind": "ServiceAccount", "name": CONTROLLER_MANAGER, "namespace": VK_NAMESPACE}
        ],
    }


def forge_installation(cluster_id: str, cluster_labels: dict[str, str]) -> list[JSON]:
    """Every object of an installation but the CRDs, in the order to apply them."""
    subject = {"kind": "ServiceAccount", "name": CONTROLLER_MANAGER, "namespace": VK_NAMESPACE}
    return [
        {
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": VK_NAMESPACE, "labels": LABELS},
        },
        forge_cluster_identity_configmap(cluster_id, cluster_labels),
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": CONTROLLER_MANAGER, "namespace": VK_NAMESPACE, "labels": LABELS},
        },
        forge_controller_manager_cluster_role(),
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": CONTROLLER_MANAGER, "labels": LABELS},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": CONTROLLER_MANAGER,
            },
            "subjects": [subject],
        },
        forge_controller_manager_role(),
        _role_binding(VK_NAMESPACE),
        forge_controller_manager_node_lease_role(),
        _role_binding(NODE_LEASE_NAMESPACE),
        # What providers bind, in each twin namespace, to their consumers' slice identities.
        forge_virtual_kubelet_remote_role(),
        # What consumers bind to their virtual kubelets.
        *forge_virtual_kubelet_cluster_roles(LABELS),
        *forge_tenant_services_policy(),
        *forge_virtual_node_policy(),
        *forge_remote_pods_policy(),
        forge_runtime_class(),
        forge_virtual_storage_class(),
    ]


def _admission_policy(
    name: str, rule: tuple[str, str, str, list[str]], validation: JSON, **spec: Any
) -> JSON:
    """A ValidatingAdmissionPolicy of vk's, failing closed: `validation` judges the
    `operations` on (group, version, resource) of `rule`."""
    group, version, resource, operations = rule
    resource_rule = {
        "apiGroups": [group],
        "apiVersions": [version],
        "operations": operations,
        "resources": [resource],
    }
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {
            "failurePolicy": "Fail",
            **spec,
            "matchConstraints": {"resourceRules": [resource_rule]},
            "validations": [{**validation, "reason": "Forbidden"}],
        },
    }


def _policy_binding(name: str, **spec: Any) -> JSON:
    """The binding putting the policy `name` to work, denying what it refuses."""
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": LABELS},
        "spec": {"policyName": name, "validationActions": ["Deny"], **spec},
    }


TENANT_SERVICES_POLICY = "vk-tenant-services"


def forge_tenant_services_policy() -> list[JSON]:
    """The ValidatingAdmissionPolicy (and its binding) refusing Services with `externalIPs` in
    the twin namespaces of a provider's consumers, whoever writes them: such a Service takes
    over traffic to any address on the provider's nodes (CVE-2020-8554). The API server judges
    it itself, webhook or not."""
    return [
        _admission_policy(
            TENANT_SERVICES_POLICY,
            ("", "v1", "services", ["CREATE", "UPDATE"]),
            {
                "expression": "!has(object.spec.externalIPs) || size(object.spec.externalIPs) == 0",
                "message": "Services with spec.externalIPs are refused in the namespaces "
                "this provider made for its consumers: remove them",
            },
        ),
        _policy_binding(
            TENANT_SERVICES_POLICY,
            # The twin namespaces: labelled with their consumer, unlike the tenant
            # namespaces, which carry the tenant label too.
            matchResources={
                "namespaceSelector": {
                    "matchExpressions": [
                        {"key": REMOTE_CLUSTER_ID_LABEL, "operator": "Exists"},
                        {"key": TENANT_NAMESPACE_LABEL, "operator": "DoesNotExist"},
                    ]
                }
            },
        ),
    ]


VIRTUAL_NODE_POLICY = "vk-virtual-nodes-in-tenant-namespaces"


def forge_virtual_node_policy() -> list[JSON]:
    """The ValidatingAdmissionPolicy (and its binding) refusing a new VirtualNode outside a
    tenant namespace (`liqo.io/tenant-namespace=true`, made by peering). The controller manager
    runs a virtual kubelet for each VirtualNode, with rights at home (every pod, the Secrets of
    offloaded namespaces) that whoever may create VirtualNodes in some other namespace must not
    get that way. The API server judges it itself, webhook or not; only creations are judged,
    so that one made before can still be deleted."""
    return [
        _admission_policy(
            VIRTUAL_NODE_POLICY,
            (VirtualNode.GROUP, "*", VirtualNode.PLURAL, ["CREATE"]),
            {
                "expression": "has(namespaceObject.metadata.labels) && "
                f"'{TENANT_NAMESPACE_LABEL}' in namespaceObject.metadata.labels && "
                f"namespaceObject.metadata.labels['{TENANT_NAMESPACE_LABEL}'] == 'true'",
                "messageExpression": "'a VirtualNode lives in a tenant namespace (labelled "
                f"{TENANT_NAMESPACE_LABEL}=true, made by peering), and ' + "
                "namespaceObject.metadata.name + ' is none: create it in "
                "liqo-tenant-<provider cluster ID>'",
            },
        ),
        _policy_binding(VIRTUAL_NODE_POLICY),
    ]


REMOTE_PODS_POLICY = "vk-remote-pods-on-virtual-nodes"


def forge_remote_pods_policy() -> list[JSON]:
    """The ValidatingAdmissionPolicy (and its binding) refusing a pod, in a namespace whose
    NamespaceOffloading says `Remote`, that does not require virtual nodes: the webhook places
    such pods, and a pod it did not place (the webhook down while its configuration fails open,
    or taken out of it) would run at home against its namespace's policy. The API server judges
    it itself, with the namespace's NamespaceOffloading as parameter, webhook or not; pods of
    RuntimeClass `liqo` go to virtual nodes by their RuntimeClass."""
    required = "object.spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    remote = (
        "has(params.spec) && has(params.spec.podOffloadingStrategy) && "
        f"params.spec.podOffloadingStrategy == '{PodOffloadingStrategy.REMOTE}' && "
        "!has(params.metadata.deletionTimestamp)"
    )
    on_virtual_nodes = (
        "has(object.spec.affinity) && has(object.spec.affinity.nodeAffinity) && "
        f"has({required}) && size({required}.nodeSelectorTerms) > 0 && "
        f"{required}.nodeSelectorTerms.all(t, has(t.matchExpressions) && "
        f"t.matchExpressions.exists(e, e.key == '{TYPE_LABEL}' && e.operator == 'In' && "
        f"e.values == ['{TYPE_VIRTUAL_NODE}']))"
    )
    runtime_class = "object.spec.runtimeClassName"
    of_runtime_class = f"has({runtime_class}) && {runtime_class} == '{RUNTIME_CLASS_NAME}'"
    return [
        _admission_policy(
            REMOTE_PODS_POLICY,
            ("", "v1", "pods", ["CREATE"]),
            {
                "expression": f"!({remote}) || ({of_runtime_class}) || ({on_virtual_nodes})",
                "messageExpression": "'pods of namespace ' + namespaceObject.metadata.name"
                " + ' run on virtual nodes only (its NamespaceOffloading says Remote), "
                "and the vk webhook did not place this one (is it down, with its "
                "configuration failing open?): its controller retries; if it was made "
                "by hand, create it again once the webhook answers'",
            },
            paramKind={
                "apiVersion": NamespaceOffloading.group_version(),
                "kind": NamespaceOffloading.KIND,
            },
        ),
        _policy_binding(
            REMOTE_PODS_POLICY,
            # The namespace's own NamespaceOffloading; a namespace without one is not
            # offloaded, and the webhook refuses its pods while the label says it is.
            paramRef={"name": NAMESPACE_OFFLOADING_NAME, "parameterNotFoundAction": "Allow"},
            matchResources={
                "namespaceSelector": {"matchLabels": {SCHEDULING_ENABLED_LABEL: "true"}}
            },
        ),
    ]


def forge_virtual_storage_class() -> JSON:
    """StorageClass `liqo`: a claim of it gets its volume where its first pod is scheduled, in
    the provider behind a virtual node (the virtual kubelet provisions it there)."""
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": VIRTUAL_STORAGE_CLASS, "labels": LABELS},
        "provisioner": STORAGE_PROVISIONER,
        # Only once a pod is scheduled is it known which cluster the volume belongs in.
        "volumeBindingMode": "WaitForFirstConsumer",
        "reclaimPolicy": "Delete",
    }


def forge_runtime_class() -> JSON:
    """RuntimeClass `liqo`: its pods go to virtual nodes whatever their namespace's pod
    offloading strategy (the scheduling fields are merged into each pod at admission)."""
    return {
        "apiVersion": "node.k8s.io/v1",
        "kind": "RuntimeClass",
        "metadata": {"name": RUNTIME_CLASS_NAME, "labels": LABELS},
        # A handler no node implements: the virtual kubelet does not pass it on (the pod
        # runs with the provider's own runtime).
        "handler": RUNTIME_CLASS_NAME,
        "scheduling": {
            "nodeSelector": {TYPE_LABEL: TYPE_VIRTUAL_NODE},
            "tolerations": [
                {
                    "key": VIRTUAL_NODE_TAINT_KEY,
                    "operator": "Exists",
                    "effect": VIRTUAL_NODE_TAINT_EFFECT,
                }
            ],
        },
    }
