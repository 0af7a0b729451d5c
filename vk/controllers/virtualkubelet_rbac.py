"""The identity a virtual kubelet runs as in its home cluster: a ServiceAccount of its own per
VirtualNode, with only the rights it uses. Not `system:node:*`: NodeRestriction would refuse
the labels a virtual node needs (`kubernetes.io/role`, `liqo.io/*`).

Three ClusterRoles ship with vk (its chart's `cluster-resources.yaml`, every rule commented
there) and are bound per node by name; the controller manager may bind exactly those (`bind`
with resourceNames), never grant a right it does not hold itself:

- `vk-virtual-kubelet`, cluster-wide: its Node's registration, the pods bound to it, Events,
  the volumes it provisions, authenticating and authorizing kubelet API requests;
- `vk-virtual-kubelet-tenant`, in its tenant namespace: its Leases and NamespaceMaps;
- `vk-virtual-kubelet-offloaded`, in each namespace offloaded to its provider only: what the
  offloaded pods use (Secrets, ConfigMaps...), bound when the namespace is offloaded there and
  unbound when it is not. A virtual kubelet reads no Secret of any other namespace.

What names one object (its Node, its Lease, its VirtualNode, its kubeconfig Secret) is a role
per node, with rights the controller manager holds.

Every rule says what needs it. Pure: the VirtualNode controller and the tests apply the result.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from vk.api.constants import virtual_kubelet_service_account
from vk.api.offloading import VirtualNode

JSON = dict[str, Any]

RBAC_API = "rbac.authorization.k8s.io/v1"
VIRTUAL_KUBELET_ROLE = "vk-virtual-kubelet"
VIRTUAL_KUBELET_TENANT_ROLE = "vk-virtual-kubelet-tenant"
VIRTUAL_KUBELET_OFFLOADED_ROLE = "vk-virtual-kubelet-offloaded"
# Kubernetes' own Role reading kube-system/extension-apiserver-authentication, whose client
# CA the API server's kubelet-client certificate chains to.
AUTHENTICATION_READER_ROLE = "extension-apiserver-authentication-reader"
NODE_NAME_LABEL = "offloading.liqo.io/nodename"
# Marks the RoleBindings of offloaded namespaces (value: the node), found again to unbind.
OFFLOADED_ACCESS_LABEL = "vk.io/offloaded-to-node"
# What every object made here carries (`_labels`), and the kinds of them: the VirtualNode
# controller watches them all, to make again one deleted by someone else.
IDENTITY_SELECTOR = f"app.kubernetes.io/name=virtual-kubelet,{NODE_NAME_LABEL}"
IDENTITY_KINDS = (
    ("v1", "serviceaccounts"),
    (RBAC_API, "clusterroles"),
    (RBAC_API, "clusterrolebindings"),
    (RBAC_API, "roles"),
    (RBAC_API, "rolebindings"),
)


def _rule(
    groups: list[str], resources: list[str], verbs: list[str], names: list[str] | None = None
) -> JSON:
    rule: JSON = {"apiGroups": groups, "resources": resources, "verbs": verbs}
    if names:
        rule["resourceNames"] = names
    return rule


def _cluster_role(name: str, rules: list[JSON], labels: dict[str, str]) -> JSON:
    return {
        "apiVersion": RBAC_API,
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels},
        "rules": rules,
    }


def _labels(node_name: str) -> dict[str, str]:
    return {"app.kubernetes.io/name": "virtual-kubelet", NODE_NAME_LABEL: node_name}


def _binding(
    kind: str, name: str, namespace: str | None, role: tuple[str, str], subject: JSON, labels: JSON
) -> JSON:
    metadata: JSON = {"name": name, "labels": labels}
    if namespace is not None:
        metadata["namespace"] = namespace
    return {
        "apiVersion": RBAC_API,
        "kind": kind,
        "metadata": metadata,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role[0], "name": role[1]},
        "subjects": [subject],
    }


def _subject(node_name: str, tenant_namespace: str) -> JSON:
    account = virtual_kubelet_service_account(node_name)
    return {"kind": "ServiceAccount", "name": account, "namespace": tenant_namespace}


def virtual_kubelet_role_name(node_name: str) -> str:
    return f"vk:virtual-kubelet:{node_name}"


def forge_virtual_kubelet_rbac(
    node_name: str, tenant_namespace: str, kubeconfig_secret: str
) -> list[JSON]:
    """The ServiceAccount of the virtual kubelet of `node_name`, its per-node roles and the
    bindings of those and of the roles vk ships (all but the offloaded namespaces')."""
    subject = _subject(node_name, tenant_namespace)
    own = virtual_kubelet_role_name(node_name)
    labels = _labels(node_name)
    own_objects = [
        # Its own Node: labels, taints and status kept.
        _rule([""], ["nodes"], ["get", "patch", "update"], [node_name]),
        _rule([""], ["nodes/status"], ["get", "patch", "update"], [node_name]),
    ]
    tenant_objects = [
        # Its VirtualNode (spec: labels, taints, resources), watched by name.
        _rule([VirtualNode.GROUP], [VirtualNode.PLURAL], ["get", "list", "watch"], [node_name]),
    ]
    if kubeconfig_secret:
        # The provider kubeconfig Secret, watched by name for rotation.
        tenant_objects.append(
            _rule([""], ["secrets"], ["get", "list", "watch"], [kubeconfig_secret])
        )
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {
                "name": subject["name"],
                "namespace": tenant_namespace,
                "labels": labels,
            },
        },
        _cluster_role(own, own_objects, labels),
        _binding("ClusterRoleBinding", own, None, ("ClusterRole", own), subject, labels),
        _binding(
            "ClusterRoleBinding",
            f"{own}:common",
            None,
            ("ClusterRole", VIRTUAL_KUBELET_ROLE),
            subject,
            labels,
        ),
        {
            "apiVersion": RBAC_API,
            "kind": "Role",
            "metadata": {"name": own, "namespace": "kube-node-lease", "labels": labels},
            "rules": [
                # The node's heartbeat Lease (create has no name to restrict it by).
                _rule(["coordination.k8s.io"], ["leases"], ["create"]),
                _rule(["coordination.k8s.io"], ["leases"], ["get", "patch", "update"], [node_name]),
            ],
        },
        _binding("RoleBinding", own, "kube-node-lease", ("Role", own), subject, labels),
        _binding(
            "RoleBinding",
            own,
            "kube-system",
            ("Role", AUTHENTICATION_READER_ROLE),
            subject,
            labels,
        ),
        {
            "apiVersion": RBAC_API,
            "kind": "Role",
            "metadata": {"name": own, "namespace": tenant_namespace, "labels": labels},
            "rules": tenant_objects,
        },
        _binding("RoleBinding", own, tenant_namespace, ("Role", own), subject, labels),
        _binding(
            "RoleBinding",
            f"{own}:tenant",
            tenant_namespace,
            ("ClusterRole", VIRTUAL_KUBELET_TENANT_ROLE),
            subject,
            labels,
        ),
    ]


def forge_offloaded_namespace_binding(
    node_name: str, tenant_namespace: str, namespace: str
) -> JSON:
    """The RoleBinding letting the virtual kubelet of `node_name` read what the offloaded pods
    of `namespace` use: made when `namespace` is offloaded to its provider."""
    return _binding(
        "RoleBinding",
        f"{virtual_kubelet_role_name(node_name)}:offloaded",
        namespace,
        ("ClusterRole", VIRTUAL_KUBELET_OFFLOADED_ROLE),
        _subject(node_name, tenant_namespace),
        {**_labels(node_name), OFFLOADED_ACCESS_LABEL: node_name},
    )


def offloaded_namespaces(namespace_maps: Iterable[JSON]) -> set[str]:
    """The local namespaces this cluster offloads through `namespace_maps` (its own
    `spec.desiredMapping`, never the provider's status)."""
    return {
        str(local)
        for namespace_map in namespace_maps
        for local in ((namespace_map.get("spec") or {}).get("desiredMapping") or {})
    }
