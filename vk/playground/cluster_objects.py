"""What a playground cluster writes for its components and applies to its API server, built by
pure functions: the API server's admission and audit configuration, kube-scheduler's
configuration, metrics-server's objects, kwok's configuration and simulated nodes, and vk's
chart values: with vk as processes of this machine, or as pods of a real node.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from vk.api.constants import RESOURCE_METRICS_PATH_ANNOTATION
from vk.playground.realnode import REAL_NODE_LABEL, REAL_NODE_TAINT
from vk.playground.spec import ClusterSpec

KWOK_NODE_ANNOTATION = "kwok.x-k8s.io/node"

# A controller's API client may send this many times its rate at once, as kube-scheduler's
# defaults have it (50 and 100).
BURST_PER_QPS = 2


def scheduler_configuration(kubeconfig: Path, qps: int | None) -> dict[str, Any]:
    """kube-scheduler's configuration: its identity, its API client's rate if `qps` is set
    (ClusterSpec.controller_qps; Kubernetes' default, 50, if not), and no leader election
    (one scheduler a cluster)."""
    connection: dict[str, Any] = {"kubeconfig": str(kubeconfig)}
    if qps is not None:
        connection |= {"qps": qps, "burst": BURST_PER_QPS * qps}
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": connection,
        "leaderElection": {"leaderElect": False},
    }


def admission_configuration(webhook_kubeconfig: Path) -> dict[str, Any]:
    """The AdmissionConfiguration making the API server authenticate to every admission
    webhook with the credentials of `webhook_kubeconfig`."""
    webhooks = {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "WebhookAdmissionConfiguration",
        "kubeConfigFile": str(webhook_kubeconfig),
    }
    return {
        "apiVersion": "apiserver.config.k8s.io/v1",
        "kind": "AdmissionConfiguration",
        "plugins": [
            {"name": plugin, "configuration": webhooks}
            for plugin in ("ValidatingAdmissionWebhook", "MutatingAdmissionWebhook")
        ],
    }


def webhook_client_kubeconfig(cert: Path, key: Path) -> dict[str, Any]:
    """The credentials the API server presents to every webhook server (user `*`)."""
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "users": [{"name": "*", "user": {"client-certificate": str(cert), "client-key": str(key)}}],
    }


def audit_policy() -> dict[str, Any]:
    """Metadata of every request made as a ServiceAccount, kube-system's controllers aside: who
    asked for what, and the answer's status code."""
    return {
        "apiVersion": "audit.k8s.io/v1",
        "kind": "Policy",
        "omitStages": ["RequestReceived"],
        "rules": [
            {"level": "None", "userGroups": ["system:serviceaccounts:kube-system"]},
            {"level": "Metadata", "userGroups": ["system:serviceaccounts"]},
            {"level": "None"},
        ],
    }


def local_processes_chart_values(
    spec: ClusterSpec, webhook_url: str, metrics_agent_port: int, ca_pem: bytes
) -> dict[str, Any]:
    """vk's chart for a cluster whose vk runs as processes of this machine: no Deployments, the
    webhook called at `webhook_url` and its metrics agent at `metrics_agent_port` on
    localhost, with the serving certificate `ca_pem` signed."""
    return {
        **_identity_values(spec),
        "localProcesses": {
            "enabled": True,
            "webhookURL": webhook_url,
            "webhookCABundle": base64.b64encode(ca_pem).decode(),
            "metricsAgentPort": metrics_agent_port,
        },
    }


def playground_chart_values(spec: ClusterSpec, image: str, api_server_url: str) -> dict[str, Any]:
    """vk's chart for a real-node cluster: the playground's image (imported, never pulled), and
    every vk pod, the virtual kubelets' too, on the real node."""
    repository, tag = image.rsplit(":", 1)
    placement = {
        "nodeSelector": {REAL_NODE_LABEL: "true"},
        "tolerations": [{**REAL_NODE_TAINT, "operator": "Equal"}],
    }
    return {
        **_identity_values(spec),
        "image": {"repository": repository, "tag": tag, "pullPolicy": "Never"},
        "controllerManager": {**placement, "apiServerURL": api_server_url},
        "webhook": placement,
        "virtualKubelet": placement,
    }


def _identity_values(spec: ClusterSpec) -> dict[str, Any]:
    return {"clusterID": spec.name, "clusterLabels": dict(spec.labels)}


def metrics_server_objects(
    port: int, ca_pem: bytes, host_address: str | None = None
) -> list[dict[str, Any]]:
    """What the metrics-server manifests install, for a metrics-server on this machine: its
    RBAC (bound to its client certificate's user), and the APIService behind `kubectl top`,
    reached through an ExternalName Service (an endpoint may not be loopback); with a real
    node, through a Service whose EndpointSlice names `host_address`."""
    user = {"kind": "User", "name": "metrics-server", "apiGroup": "rbac.authorization.k8s.io"}

    def role_ref(kind: str, name: str) -> dict[str, str]:
        return {"kind": kind, "name": name, "apiGroup": "rbac.authorization.k8s.io"}

    rbac = "rbac.authorization.k8s.io/v1"
    return [
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {"name": "system:metrics-server"},
            "rules": [
                {"apiGroups": [""], "resources": ["nodes/metrics"], "verbs": ["get"]},
                {
                    "apiGroups": [""],
                    "resources": ["pods", "nodes"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRole",
            "metadata": {
                "name": "system:aggregated-metrics-reader",
                "labels": {
                    "rbac.authorization.k8s.io/aggregate-to-view": "true",
                    "rbac.authorization.k8s.io/aggregate-to-edit": "true",
                    "rbac.authorization.k8s.io/aggregate-to-admin": "true",
                },
            },
            "rules": [
                {
                    "apiGroups": ["metrics.k8s.io"],
                    "resources": ["pods", "nodes"],
                    "verbs": ["get", "list", "watch"],
                }
            ],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:metrics-server"},
            "roleRef": role_ref("ClusterRole", "system:metrics-server"),
            "subjects": [user],
        },
        {
            "apiVersion": rbac,
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "metrics-server:system:auth-delegator"},
            "roleRef": role_ref("ClusterRole", "system:auth-delegator"),
            "subjects": [user],
        },
        {
            "apiVersion": rbac,
            "kind": "RoleBinding",
            "metadata": {"name": "metrics-server-auth-reader", "namespace": "kube-system"},
            "roleRef": role_ref("Role", "extension-apiserver-authentication-reader"),
            "subjects": [user],
        },
        *metrics_server_service(port, host_address),
        {
            "apiVersion": "apiregistration.k8s.io/v1",
            "kind": "APIService",
            "metadata": {"name": "v1beta1.metrics.k8s.io"},
            "spec": {
                "group": "metrics.k8s.io",
                "version": "v1beta1",
                "service": {"namespace": "kube-system", "name": "metrics-server", "port": port},
                "caBundle": base64.b64encode(ca_pem).decode(),
                "groupPriorityMinimum": 100,
                "versionPriority": 100,
            },
        },
    ]


def metrics_server_service(port: int, host_address: str | None) -> list[dict[str, Any]]:
    metadata = {"name": "metrics-server", "namespace": "kube-system"}
    if host_address is None:
        return [
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": metadata,
                "spec": {"type": "ExternalName", "externalName": "localhost"},
            }
        ]
    service_port = {"name": "https", "port": port, "protocol": "TCP"}
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata,
            "spec": {"ports": [{**service_port, "targetPort": port}]},
        },
        {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                **metadata,
                "labels": {
                    "kubernetes.io/service-name": "metrics-server",
                    "endpointslice.kubernetes.io/managed-by": "playground.vk.io",
                },
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [host_address], "conditions": {"ready": True}}],
            "ports": [service_port],
        },
    ]


# kwok v0.8.0 has no built-in stages: these files of the kwok module make nodes Ready with a
# Lease heartbeat and walk pods through Running, completion and deletion.
KWOK_STAGE_FILES = (
    "node/fast/node-initialize.yaml",
    "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
    "pod/fast/pod-ready.yaml",
    "pod/fast/pod-complete.yaml",
    "pod/fast/pod-delete.yaml",
)


KWOK_METRICS_FILES = ("resource/metrics-resource.yaml", "usage/usage-from-annotation.yaml")


# kwok completes a Job's pod by its Job owner reference; an offloaded pod, made by the
# provider of a ShadowPod, has none, and would run for ever where its local twin completes.
# What it does carry is the Job's labels, reflected, and vk's origin label: completed on those
# (a simulation, as the rest of kwok's pods: the "containers" exit 0 once Running).
OFFLOADED_JOB_POD_COMPLETE: dict[str, Any] = {
    "apiVersion": "kwok.x-k8s.io/v1alpha1",
    "kind": "Stage",
    "metadata": {"name": "vk-offloaded-job-pod-complete"},
    "spec": {
        "resourceRef": {"apiGroup": "v1", "kind": "Pod"},
        "selector": {
            "matchExpressions": [
                {"key": ".metadata.deletionTimestamp", "operator": "DoesNotExist"},
                {"key": ".status.phase", "operator": "In", "values": ["Running"]},
                {"key": '.metadata.labels["batch.kubernetes.io/job-name"]', "operator": "Exists"},
                {"key": '.metadata.labels["offloading.liqo.io/origin"]', "operator": "Exists"},
            ]
        },
        "next": {
            "statusTemplate": "\n".join(
                [
                    "{{ $now := Now }}",
                    "phase: Succeeded",
                    "containerStatuses:",
                    "{{ range .spec.containers }}",
                    "- name: {{ .name | Quote }}",
                    "  image: {{ .image | Quote }}",
                    "  ready: false",
                    "  started: false",
                    "  restartCount: 0",
                    "  state:",
                    "    terminated:",
                    "      exitCode: 0",
                    "      reason: Completed",
                    "      startedAt: {{ $now | Quote }}",
                    "      finishedAt: {{ $now | Quote }}",
                    "{{ end }}",
                ]
            )
        },
    },
}


def kwok_documents(
    cluster_name: str, kwok_dir: Path, stages: list[Any], metrics: list[Any]
) -> list[dict[str, Any]]:
    """kwok's configuration: options with every default set (kwok applies none when `options`
    is present), the stages, the resource metrics (`metrics`: the kubelet's `/metrics/resource`
    simulated, pod usage from the `kwok.x-k8s.io/usage-cpu|memory` annotations), and a kubelet
    API for every simulated pod: logs from a CRI-format log file, attach following another
    (kwok streams only lines appended after attaching), exec running the command on the host,
    port-forward to an echo."""
    log_file = str(kwok_dir / "pod.log")
    return [
        {
            "apiVersion": "config.kwok.x-k8s.io/v1alpha1",
            "kind": "KwokConfiguration",
            "options": {
                "enableDebuggingHandlers": True,
                "podPlayStageParallelism": 4,
                "nodePlayStageParallelism": 4,
                "nodeLeaseParallelism": 4,
                "podsOnNodeSyncParallelism": 1,
            },
        },
        *stages,
        *metrics,
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterLogs",
            "metadata": {"name": "playground-logs"},
            "spec": {"logs": [{"logsFile": log_file, "follow": True}]},
        },
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterAttach",
            "metadata": {"name": "playground-attach"},
            "spec": {"attaches": [{"logsFile": str(kwok_dir / "attach.log")}]},
        },
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterExec",
            "metadata": {"name": "playground-exec"},
            "spec": {
                "execs": [
                    {
                        "local": {
                            "workDir": str(kwok_dir / "exec"),
                            "envs": [{"name": "PLAYGROUND_CLUSTER", "value": cluster_name}],
                        }
                    }
                ]
            },
        },
        {
            "apiVersion": "kwok.x-k8s.io/v1alpha1",
            "kind": "ClusterPortForward",
            "metadata": {"name": "playground-port-forward"},
            # Any port of any simulated pod answers as an echo server.
            "spec": {"forwards": [{"command": ["cat"]}]},
        },
    ]


def pod_log_lines(cluster_name: str) -> str:
    """What `kubectl logs` shows for a simulated pod, in the CRI log format kwok requires."""
    stamp = "2026-01-01T00:00:0{}.000000000Z"
    lines = [
        f"hello from {cluster_name}",
        f"this pod is simulated by kwok in cluster {cluster_name}",
        "ready",
    ]
    return "".join(f"{stamp.format(i)} stdout F {line}\n" for i, line in enumerate(lines))


def kwok_node(name: str, capacity: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {
                KWOK_NODE_ANNOTATION: "fake",
                "node.alpha.kubernetes.io/ttl": "0",
                RESOURCE_METRICS_PATH_ANNOTATION: f"/metrics/nodes/{name}/metrics/resource",
            },
            "labels": {
                "kubernetes.io/hostname": name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "kubernetes.io/role": "worker",
                "type": "kwok",
            },
        },
        "status": {"capacity": dict(capacity), "allocatable": dict(capacity)},
    }


def node_names(spec: ClusterSpec) -> list[str]:
    return [f"{spec.name}-worker-{i}" for i in range(1, spec.nodes + 1)]
