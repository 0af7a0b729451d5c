"""Prometheus for the real-node playground, configured as users configure it for a cluster: it
discovers pods through the consumer API server's Kubernetes service discovery and scrapes those
annotated `prometheus.io/scrape: "true"` (vk's controller manager, webhook and virtual
kubelets) at their `prometheus.io/port` and `prometheus.io/path`. It is built from Go modules:
Debian's package lacks Kubernetes service discovery.

It authenticates with a client certificate of its own (PROMETHEUS_USER), allowed by
`prometheus_rbac` to list and watch pods and nodes and to read nodes through the API
server's proxy, nothing else: the virtual nodes' `/metrics/cadvisor` (their offloaded
containers) is scraped as a Prometheus scraping nodes through the API server does.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

PROMETHEUS_USER = "vk-playground-prometheus"
SCRAPE_INTERVAL = "5s"


def prometheus_config(server: str, ca: Path, cert: Path, key: Path) -> dict[str, Any]:
    tls = {"ca_file": str(ca), "cert_file": str(cert), "key_file": str(key)}
    return {
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": SCRAPE_INTERVAL},
        "scrape_configs": [
            {
                "job_name": "kubernetes-pods",
                "kubernetes_sd_configs": [{"role": "pod", "api_server": server, "tls_config": tls}],
                "relabel_configs": [
                    {
                        "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
                        "action": "keep",
                        "regex": "true",
                    },
                    {
                        "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_path"],
                        "action": "replace",
                        "target_label": "__metrics_path__",
                        "regex": "(.+)",
                    },
                    {
                        "source_labels": [
                            "__address__",
                            "__meta_kubernetes_pod_annotation_prometheus_io_port",
                        ],
                        "action": "replace",
                        "regex": "([^:]+)(?::\\d+)?;(\\d+)",
                        "replacement": "$1:$2",
                        "target_label": "__address__",
                    },
                    {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
                    {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
                    {
                        "source_labels": ["__meta_kubernetes_pod_label_app_kubernetes_io_name"],
                        "target_label": "app",
                    },
                ],
            },
            {
                "job_name": "kubernetes-nodes-cadvisor",
                "scheme": "https",
                "tls_config": tls,
                "kubernetes_sd_configs": [
                    {"role": "node", "api_server": server, "tls_config": tls}
                ],
                "relabel_configs": [
                    # The virtual nodes: kwok's simulated nodes serve no cAdvisor metrics (and
                    # listen on 127.0.0.1, which the API server refuses to proxy to).
                    {
                        "source_labels": ["__meta_kubernetes_node_label_liqo_io_type"],
                        "action": "keep",
                        "regex": "virtual-node",
                    },
                    {"target_label": "__address__", "replacement": urlsplit(server).netloc},
                    {
                        "source_labels": ["__meta_kubernetes_node_name"],
                        "regex": "(.+)",
                        "target_label": "__metrics_path__",
                        "replacement": "/api/v1/nodes/$1/proxy/metrics/cadvisor",
                    },
                    {"source_labels": ["__meta_kubernetes_node_name"], "target_label": "node"},
                ],
            },
        ],
    }


def prometheus_args(binary: Path, config: Path, data: Path, port: int) -> list[str]:
    return [
        str(binary),
        f"--config.file={config}",
        f"--storage.tsdb.path={data}",
        f"--web.listen-address=127.0.0.1:{port}",
        "--storage.tsdb.retention.time=1d",
        "--log.format=json",
    ]


def prometheus_rbac() -> list[dict[str, Any]]:
    """What pod and node discovery need (list and watch, cluster-wide), and reading nodes'
    metrics through the API server's proxy."""
    name = PROMETHEUS_USER
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {"apiGroups": [""], "resources": ["pods", "nodes"], "verbs": ["list", "watch"]},
                {"apiGroups": [""], "resources": ["nodes/proxy"], "verbs": ["get"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": name,
            },
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}],
        },
    ]
