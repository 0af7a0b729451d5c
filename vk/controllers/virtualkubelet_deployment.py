"""Virtual kubelets as Deployments: the VirtualNode controller's launcher on real clusters.

One Deployment `vk-<virtual node>` per VirtualNode, in its namespace, labelled as Liqo labels
its own, running `vk kubelet` from vk's image as the VirtualNode's ServiceAccount, with Liqo's
arguments and environment (POD_IP, POD_NAME and POD_NAMESPACE from the downward API). Its
replicas elect an active one through the kubelet's own Lease, so more than one gives a standby.
The VirtualNode's `spec.template` (a DeploymentTemplate) may set the replicas and, for the pod,
resources, tolerations, node selector, affinity, priority class and image pull secrets; its
labels and annotations are added to ours.

The Deployment is built by a pure function; the launcher applies it, reads its availability
from an informer (whose events make the controller look again) and, on removal, waits until
the kubelet's pods are gone, so that no kubelet re-creates the Node the controller deletes next.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Mapping
from typing import Any

from vk.api.constants import (
    COMPONENT_LABEL,
    COMPONENT_VIRTUAL_KUBELET,
    REMOTE_CLUSTER_ID_LABEL,
    VIRTUAL_NODE_LABEL,
    virtual_kubelet_deployment,
    virtual_kubelet_service_account,
)
from vk.controllers.virtualnodes import Launcher, VirtualKubeletSpec
from vk.kube.client import JSON, AppliedObjects, KubeClient, NotFound, delete_options, resource_path
from vk.kube.informer import Informer, object_key, shared_informer

KUBELET_PORT = 10250
METRICS_PORT = 5872
# On the pod template: a ServiceAccount made again (a new UID) rolls the pods, whose tokens
# the API server no longer takes.
SERVICE_ACCOUNT_UID_ANNOTATION = "vk.io/service-account-uid"
# The uid of the image's user (the Dockerfile's), so that runAsNonRoot can be checked.
RUN_AS_USER = 65532
DEFAULT_RESOURCES: JSON = {
    "requests": {"cpu": "100m", "memory": "128Mi"},
    "limits": {"memory": "512Mi"},
}
# What the VirtualNode's template may set in the pod; everything else is the launcher's.
TEMPLATE_POD_FIELDS = ("tolerations", "nodeSelector", "affinity", "priorityClassName")


def _field_env(name: str, field_path: str) -> JSON:
    return {"name": name, "valueFrom": {"fieldRef": {"fieldPath": field_path}}}


def parse_pod_placement(node_selector: Mapping[str, str], tolerations_json: str | None) -> JSON:
    """The placement every virtual kubelet pod gets unless its VirtualNode's template sets its
    own (as Liqo's VkOptionsTemplate does): a node selector, and tolerations as the JSON list
    of a pod spec. ValueError says what is wrong."""
    placement: JSON = {}
    if node_selector:
        placement["nodeSelector"] = dict(node_selector)
    if tolerations_json:
        try:
            tolerations = json.loads(tolerations_json)
        except json.JSONDecodeError as error:
            raise ValueError(f"not JSON: {error}") from error
        fields = {"key", "operator", "value", "effect", "tolerationSeconds"}
        if not isinstance(tolerations, list) or not all(
            isinstance(t, dict) and set(t) <= fields for t in tolerations
        ):
            raise ValueError(
                "a JSON list of tolerations, each with key, operator, value, effect or "
                'tolerationSeconds, e.g. [{"key":"dedicated","operator":"Exists"}]'
            )
        if tolerations:
            placement["tolerations"] = tolerations
    return placement


def forge_virtual_kubelet_deployment(
    spec: VirtualKubeletSpec, image: str, placement: Mapping[str, Any] | None = None
) -> JSON:
    """The Deployment of the virtual kubelet `spec` describes, from `image`; `placement` (node
    selector, tolerations) applies unless the VirtualNode's template places the pod itself."""
    template = spec.template or {}
    template_metadata = template.get("metadata") or {}
    template_spec = template.get("spec") or {}
    pod_spec = (template_spec.get("template") or {}).get("spec") or {}
    containers = pod_spec.get("containers") or [{}]
    selector = {COMPONENT_LABEL: COMPONENT_VIRTUAL_KUBELET, VIRTUAL_NODE_LABEL: spec.name}
    labels = {
        **(template_metadata.get("labels") or {}),
        **selector,
        REMOTE_CLUSTER_ID_LABEL: spec.cluster_id,
        "app.kubernetes.io/name": "virtual-kubelet",
        "app.kubernetes.io/managed-by": "vk",
    }
    env_from_pod = [
        _field_env("POD_IP", "status.podIP"),
        _field_env("POD_NAME", "metadata.name"),
        _field_env("POD_NAMESPACE", "metadata.namespace"),
    ]
    downward = {e["name"] for e in env_from_pod}
    container: JSON = {
        "name": "virtual-kubelet",
        "image": image,
        "imagePullPolicy": containers[0].get("imagePullPolicy") or "IfNotPresent",
        # $(POD_IP) is expanded by the kubelet: the Node's address is the pod's, where the
        # API server reaches this kubelet API.
        "args": ["kubelet", *spec.args, "--node-ip=$(POD_IP)"],
        "env": [
            *env_from_pod,
            *({"name": k, "value": v} for k, v in spec.env if k not in downward),
        ],
        "ports": [
            {"name": "kubelet", "containerPort": KUBELET_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        # Liveness from /healthz (the process serves), readiness from /readyz (the kubelet
        # is the elected one and its Node is registered).
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "metrics"},
            "periodSeconds": 10,
            "failureThreshold": 6,
        },
        "readinessProbe": {"httpGet": {"path": "/readyz", "port": "metrics"}, "periodSeconds": 5},
        "resources": containers[0].get("resources") or DEFAULT_RESOURCES,
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "capabilities": {"drop": ["ALL"]},
        },
        # TLS material is handed to Python's ssl module through files: a writable /tmp.
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    pod: JSON = {
        "serviceAccountName": virtual_kubelet_service_account(spec.name),
        "automountServiceAccountToken": True,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": RUN_AS_USER,
            "runAsGroup": RUN_AS_USER,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        **(placement or {}),
        **{k: pod_spec[k] for k in TEMPLATE_POD_FIELDS if pod_spec.get(k)},
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {}}],
    }
    if pod_spec.get("imagePullSecrets"):
        pod["imagePullSecrets"] = pod_spec["imagePullSecrets"]
    annotations = {
        **(template_metadata.get("annotations") or {}),
        # Prometheus' Kubernetes discovery scrapes pods annotated so.
        "prometheus.io/scrape": "true",
        "prometheus.io/port": str(METRICS_PORT),
        "prometheus.io/path": "/metrics",
    }
    if spec.service_account_uid:
        # A ServiceAccount made again invalidates the pods' tokens: new pods get new ones.
        annotations[SERVICE_ACCOUNT_UID_ANNOTATION] = spec.service_account_uid
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {
            "name": virtual_kubelet_deployment(spec.name),
            "namespace": spec.namespace,
            "labels": labels,
        },
        "spec": {
            "replicas": template_spec.get("replicas", 1),
            "selector": {"matchLabels": selector},
            # One kubelet at a time holds the node: replace, never run old and new together
            # beyond the Lease's own hand-over.
            "strategy": {"type": "Recreate"},
            "template": {
                "metadata": {"labels": labels, "annotations": annotations},
                "spec": pod,
            },
        },
    }


def deployment_available(deployment: Mapping[str, Any] | None) -> bool:
    """The Deployment's current generation has an available pod."""
    if not deployment:
        return False
    status = deployment.get("status") or {}
    observed: int = status.get("observedGeneration", 0)
    available: int = status.get("availableReplicas", 0)
    return observed >= deployment["metadata"].get("generation", 1) and available >= 1


class DeploymentLauncher(Launcher):
    """Runs each virtual kubelet as a Deployment of `image`, placed as `placement` says."""

    def __init__(
        self, client: KubeClient, image: str, placement: Mapping[str, Any] | None = None
    ) -> None:
        self.client = client
        self.image = image
        self.placement = dict(placement or {})
        self.applied = AppliedObjects(client)
        self.deployments = shared_informer(
            client,
            "apps/v1",
            "deployments",
            label_selector=f"{COMPONENT_LABEL}={COMPONENT_VIRTUAL_KUBELET}",
        )

    def watch(self, changed: Callable[[str, str], None]) -> list[Informer]:
        def on_deployment(_: str, deployment: JSON, __: JSON | None) -> None:
            metadata = deployment["metadata"]
            node = (metadata.get("labels") or {}).get(VIRTUAL_NODE_LABEL)
            if node:
                changed(metadata["namespace"], node)

        self.deployments.add_handler(on_deployment)
        return [self.deployments]

    async def ensure(self, spec: VirtualKubeletSpec) -> bool:
        deployment = forge_virtual_kubelet_deployment(spec, self.image, self.placement)
        path = resource_path(
            "apps/v1", "deployments", namespace=spec.namespace, name=deployment["metadata"]["name"]
        )
        current = self.deployments.store.get(object_key(deployment))
        if current is None:  # deleted by someone: made again
            self.applied.forget(path)
        if await self.applied.apply(path, deployment):
            return False  # just changed: available once its new pods are
        return deployment_available(current)

    async def remove(self, namespace: str, name: str) -> bool:
        deployment = virtual_kubelet_deployment(name)
        path = resource_path("apps/v1", "deployments", namespace=namespace, name=deployment)
        self.applied.forget(path)
        with contextlib.suppress(NotFound):
            await self.client.delete(
                path,
                body=delete_options(propagation="Background"),
            )
        pods = await self.client.get(
            resource_path("v1", "pods", namespace=namespace),
            params={
                "labelSelector": f"{COMPONENT_LABEL}={COMPONENT_VIRTUAL_KUBELET},"
                f"{VIRTUAL_NODE_LABEL}={name}"
            },
        )
        return not pods["items"]
