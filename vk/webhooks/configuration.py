"""How the API server reaches `vk webhook`, and what the webhook may read: its webhook
configurations and its RBAC, forged by pure functions for whoever installs it.

The offloading webhooks are called for pods created in namespaces labelled
`liqo.io/scheduling-enabled=true` (the offloaded ones, as the NamespaceOffloading controller
labels them), and for NamespaceOffloadings.

The ShadowPod webhooks are called for every ShadowPod created or updated: a consumer's identity
may write them only in its twin namespaces (RBAC, and the webhook checks it again), and a stamp
that counts usage is guarded wherever it is. They fail closed whatever the other webhooks do,
and have no side effects on a dry run. Pods are never sent to them: consumers create none.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from typing import Any

from vk.api.constants import SCHEDULING_ENABLED_LABEL
from vk.api.offloading import NamespaceOffloading, Quota, ShadowPod

JSON = dict[str, Any]

CONFIGURATION_NAME = "vk"
MUTATE_PATH = "/mutate-shadowpod"
VALIDATE_PATH = "/validate-shadowpod"
PLACE_POD_PATH = "/mutate-pod-offloading"
VALIDATE_OFFLOADING_PATH = "/validate-namespaceoffloading"
STAMP_WEBHOOK = "shadowpod.mutate.liqo.io"
SHADOW_POD_WEBHOOK = "shadowpod.validate.liqo.io"
PLACE_POD_WEBHOOK = "pod.mutate.liqo.io"
OFFLOADING_WEBHOOK = "namespaceoffloading.validate.liqo.io"
WEBHOOK_ROLE = "vk-webhook"
TIMEOUT_SECONDS = 5
SHADOW_PODS = (ShadowPod.GROUP, ShadowPod.VERSION, ShadowPod.PLURAL)


@dataclass(frozen=True)
class ServiceReference:
    """The in-cluster Service in front of the webhook's pods."""

    namespace: str
    name: str
    port: int = 443


def _client_config(server: str | ServiceReference, path: str, ca_bundle: bytes) -> JSON:
    bundle = base64.b64encode(ca_bundle).decode()
    if isinstance(server, ServiceReference):
        service = {
            "namespace": server.namespace,
            "name": server.name,
            "path": path,
            "port": server.port,
        }
        return {"service": service, "caBundle": bundle}
    return {"url": f"{server.rstrip('/')}{path}", "caBundle": bundle}


def _webhook(
    name: str,
    server: str | ServiceReference,
    path: str,
    ca_bundle: bytes,
    operations: list[str],
    resource: tuple[str, str, str] = ("", "v1", "pods"),
) -> JSON:
    group, version, plural = resource
    return {
        "name": name,
        "clientConfig": _client_config(server, path, ca_bundle),
        "rules": [
            {
                "apiGroups": [group],
                "apiVersions": [version],
                "operations": operations,
                "resources": [plural],
                "scope": "Namespaced",
            }
        ],
        "matchPolicy": "Equivalent",
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": TIMEOUT_SECONDS,
    }


def forge_webhook_configurations(
    server: str | ServiceReference, ca_bundle: bytes
) -> tuple[JSON, JSON]:
    """The MutatingWebhookConfiguration (the creator stamp and finalizer of ShadowPods, and the
    placement of pods in offloaded namespaces, on CREATE) and the ValidatingWebhookConfiguration
    (ShadowPods on CREATE and UPDATE; NamespaceOffloadings) of the webhook at `server`: a base
    URL (`https://10.0.0.5:9443`) or a Service; `ca_bundle` is the PEM that signed its serving
    certificate. All fail closed: a pod is not admitted unchecked, nor placed against its
    namespace's policy."""
    stamp = {
        **_webhook(STAMP_WEBHOOK, server, MUTATE_PATH, ca_bundle, ["CREATE"], SHADOW_PODS),
        # Reserves nothing: the validation does, and not on a dry run.
        "sideEffects": "NoneOnDryRun",
        # The stamp is set once; a later webhook that changed it is caught by the validation.
        "reinvocationPolicy": "Never",
    }
    shadow_pods = {
        **_webhook(
            SHADOW_POD_WEBHOOK, server, VALIDATE_PATH, ca_bundle, ["CREATE", "UPDATE"], SHADOW_PODS
        ),
        # Its Quota reservation is a side effect, which a dry run does not make.
        "sideEffects": "NoneOnDryRun",
    }
    place = {
        **_webhook(PLACE_POD_WEBHOOK, server, PLACE_POD_PATH, ca_bundle, ["CREATE"]),
        "namespaceSelector": {"matchLabels": {SCHEDULING_ENABLED_LABEL: "true"}},
        "reinvocationPolicy": "Never",
    }
    offloading = _webhook(
        OFFLOADING_WEBHOOK,
        server,
        VALIDATE_OFFLOADING_PATH,
        ca_bundle,
        ["CREATE", "UPDATE"],
        (NamespaceOffloading.GROUP, NamespaceOffloading.VERSION, NamespaceOffloading.PLURAL),
    )
    mutating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [stamp, place],
    }
    validating = {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": CONFIGURATION_NAME},
        "webhooks": [shadow_pods, offloading],
    }
    return mutating, validating


def forge_webhook_cluster_role() -> JSON:
    """What `vk webhook` reads, through its informers: every Quota, the namespaces made for
    consumers, and every NamespaceOffloading; and the one thing it writes, a Quota's ledger
    (read fresh, then its status replaced)."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": WEBHOOK_ROLE},
        "rules": [
            {
                "apiGroups": [Quota.GROUP],
                "resources": [Quota.PLURAL],
                "verbs": ["get", "list", "watch"],
            },
            {
                "apiGroups": [Quota.GROUP],
                "resources": [f"{Quota.PLURAL}/status"],
                "verbs": ["update"],
            },
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["list", "watch"]},
            {
                "apiGroups": [NamespaceOffloading.GROUP],
                "resources": [NamespaceOffloading.PLURAL],
                "verbs": ["list", "watch"],
            },
        ],
    }


def forge_webhook_cluster_role_binding(namespace: str, service_account: str) -> JSON:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": WEBHOOK_ROLE},
        "roleRef": {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "ClusterRole",
            "name": WEBHOOK_ROLE,
        },
        "subjects": [{"kind": "ServiceAccount", "name": service_account, "namespace": namespace}],
    }
