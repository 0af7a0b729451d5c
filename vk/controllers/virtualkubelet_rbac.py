"""The identity a virtual kubelet runs as in its home cluster: a ServiceAccount of its own per
VirtualNode, with only the rights it uses. Not `system:node:*`: NodeRestriction would refuse
the labels a virtual node needs (`kubernetes.io/role`, `liqo.io/*`).

Every rule says what needs it. Pure: the VirtualNode controller and the tests apply the result.
"""

from __future__ import annotations

from typing import Any

from vk.api.constants import virtual_kubelet_service_account

JSON = dict[str, Any]


def _rule(
    groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None
) -> JSON:
    rule: JSON = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def forge_virtual_kubelet_rbac(node_name: str, tenant_namespace: str) -> list[JSON]:
    """ServiceAccount, ClusterRole + binding (cluster-scoped needs) and Role + binding (the
    tenant namespace) for the virtual kubelet of `node_name`."""
    account = virtual_kubelet_service_account(node_name)
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": tenant_namespace}]
    cluster_role = f"vk:virtual-kubelet:{node_name}"
    labels = {"app.kubernetes.io/name": "virtual-kubelet", "offloading.liqo.io/nodename": node_name}
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": account, "namespace": tenant_namespace, "labels": labels},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": cluster_role, "labels": labels},
            "rules": [
                # Its own Node: watch it, create it, keep labels, taints and status.
                # (Every Node is watched: no pod IP a provider reports may be a node's.)
                _rule([""], ["nodes"], ["list", "watch", "create"]),
                # This cluster's service ranges, which no such pod IP may be in either.
                _rule(["networking.k8s.io"], ["servicecidrs"], ["list", "watch"]),
                _rule([""], ["nodes"], ["get", "patch", "update"], [node_name]),
                _rule([""], ["nodes/status"], ["get", "patch", "update"], [node_name]),
                # Its VirtualNode (spec: labels, taints, resources), in the tenant namespace.
                _rule(["offloading.liqo.io"], ["virtualnodes"], ["get", "list", "watch"]),
                # The pods bound to its node (watched by field selector), in every namespace:
                # their status reported from the provider, and deleted once the remote pod is.
                _rule([""], ["pods"], ["get", "list", "watch", "delete"]),
                _rule([""], ["pods/status"], ["get", "patch", "update"]),
                # Why a pod cannot be offloaded or an object reflected, or what happened to
                # the provider: Events on the pod, the object or the VirtualNode; and the
                # provider's Events about offloaded pods and reflected objects, told at home
                # (kept up to date, deleted with the remote ones).
                _rule([""], ["events"], ["get", "list", "watch", "create", "patch", "delete"]),
                # Reflection: what offloaded pods use, read in every offloaded namespace
                # (which namespaces are offloaded changes at run time).
                _rule(
                    [""],
                    ["configmaps", "secrets", "services", "persistentvolumeclaims"],
                    ["get", "list", "watch"],
                ),
                _rule(["networking.k8s.io"], ["ingresses"], ["get", "list", "watch"]),
                # The offloaded pods' ServiceAccount tokens, bound to each pod.
                _rule([""], ["serviceaccounts/token"], ["create"]),
                # Claims of the virtual storage class: the local volume standing for the
                # remote claim, created bound to it and deleted with it.
                _rule([""], ["persistentvolumes"], ["get", "list", "watch", "create", "delete"]),
                # The kubelet API authenticates bearer tokens and authorizes every request,
                # as the real kubelet's webhook modes do.
                _rule(["authentication.k8s.io"], ["tokenreviews"], ["create"]),
                _rule(["authorization.k8s.io"], ["subjectaccessreviews"], ["create"]),
                # Its serving certificate, requested from the cluster as the kubelet's is
                # (vk's controller manager approves it; the cluster signs it).
                _rule(["certificates.k8s.io"], ["certificatesigningrequests"], ["create", "get"]),
                # The version reported as the node's kubelet version.
                {"nonResourceURLs": ["/version"], "verbs": ["get"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": cluster_role, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": cluster_role,
            },
            "subjects": subject,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": cluster_role, "namespace": "kube-node-lease", "labels": labels},
            "rules": [
                # The node's heartbeat Lease (create has no name to restrict it by).
                _rule(["coordination.k8s.io"], ["leases"], ["create"]),
                _rule(["coordination.k8s.io"], ["leases"], ["get", "patch", "update"], [node_name]),
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": cluster_role, "namespace": "kube-node-lease", "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": cluster_role,
            },
            "subjects": subject,
        },
        {
            # The client CA that the API server's kubelet-client certificate chains to, read
            # from kube-system/extension-apiserver-authentication (Kubernetes' own Role).
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": cluster_role, "namespace": "kube-system", "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": "extension-apiserver-authentication-reader",
            },
            "subjects": subject,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": cluster_role, "namespace": tenant_namespace, "labels": labels},
            "rules": [
                # The provider kubeconfig Secret, followed for rotation.
                _rule([""], ["secrets"], ["get", "list", "watch"]),
                # The active/passive election among its replicas.
                _rule(["coordination.k8s.io"], ["leases"], ["get", "create", "update"]),
                # Which namespaces are offloaded to its provider.
                _rule(["offloading.liqo.io"], ["namespacemaps"], ["get", "list", "watch"]),
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": cluster_role, "namespace": tenant_namespace, "labels": labels},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "Role",
                "name": cluster_role,
            },
            "subjects": subject,
        },
    ]
