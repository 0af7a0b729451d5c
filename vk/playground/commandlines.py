"""The command lines of a playground cluster's components (etcd, the control plane, kwok,
metrics-server and vk's own processes), built by pure functions from the cluster's binaries,
paths and ports, so that each flag is read and tested in one place.
"""

from __future__ import annotations

import sys
from pathlib import Path

from vk.playground.binaries import Binaries
from vk.playground.cluster_objects import BURST_PER_QPS, KWOK_NODE_ANNOTATION
from vk.playground.paths import ClusterPaths
from vk.playground.pki import SERVICE_CLUSTER_IP_RANGE, WEBHOOK_CALLER

METRIC_RESOLUTION = "15s"  # as the metrics-server manifests have it
# How long the node lifecycle controller waits before marking a silent node NotReady; shorter
# than the 50 s default so tests of a provider outage do not idle.
NODE_MONITOR_GRACE_PERIOD = "20s"


def etcd_args(binaries: Binaries, paths: ClusterPaths, ports: dict[str, int]) -> list[str]:
    client = f"http://127.0.0.1:{ports['etcd']}"
    peer = f"http://127.0.0.1:{ports['etcd-peer']}"
    return [
        str(binaries.etcd),
        "--name=etcd",
        f"--data-dir={paths.etcd_data}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=etcd={peer}",
        "--unsafe-no-fsync",  # a playground trades durability for speed on a shared disk
        "--log-level=warn",
    ]


def apiserver_args(
    binaries: Binaries,
    paths: ClusterPaths,
    ports: dict[str, int],
    host_address: str | None = None,
    audit: bool = False,
) -> list[str]:
    """On loopback; or, in a playground with a real node, on `host_address` (which the node's
    pods reach): then the `kubernetes` Service's endpoints name it, and the API server calls
    webhooks and aggregated APIs at their pods' addresses (no kube-proxy out here). `audit`
    logs every request of a ServiceAccount outside kube-system (the RBAC proof of vk's pods)."""
    pki = paths.pki
    if host_address is None:
        addressing = [
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--endpoint-reconciler-type=none",
        ]
    else:
        addressing = [
            f"--bind-address={host_address}",
            f"--advertise-address={host_address}",
            "--endpoint-reconciler-type=lease",
            "--enable-aggregator-routing=true",
        ]
    auditing = (
        [
            f"--audit-policy-file={paths.audit_policy}",
            f"--audit-log-path={paths.audit_log}",
            "--audit-log-format=json",
            "--audit-log-maxsize=200",
        ]
        if audit
        else []
    )
    return [
        str(binaries.kube_apiserver),
        *addressing,
        *auditing,
        f"--secure-port={ports['apiserver']}",
        f"--etcd-servers=http://127.0.0.1:{ports['etcd']}",
        f"--tls-cert-file={pki.path('apiserver.crt')}",
        f"--tls-private-key-file={pki.path('apiserver.key')}",
        f"--client-ca-file={pki.client_ca}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={pki.path('sa.pub')}",
        f"--service-account-signing-key-file={pki.path('sa.key')}",
        f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
        "--authorization-mode=Node,RBAC",
        "--enable-admission-plugins=NodeRestriction",
        f"--admission-control-config-file={paths.admission_config}",
        "--allow-privileged=true",
        f"--kubelet-client-certificate={pki.path('apiserver-kubelet-client.crt')}",
        f"--kubelet-client-key={pki.path('apiserver-kubelet-client.key')}",
        "--kubelet-preferred-address-types=InternalIP,Hostname",
        # The aggregation layer (metrics-server for `kubectl top`) needs the front proxy.
        f"--requestheader-client-ca-file={pki.path('front-proxy-ca.crt')}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki.path('front-proxy-client.crt')}",
        f"--proxy-client-key-file={pki.path('front-proxy-client.key')}",
    ]


def secure_component_flags(kubeconfig: Path, port: int, address: str = "127.0.0.1") -> list[str]:
    """The flags every component built on the generic API server takes alike: its identity
    (also for delegated authentication and authorization), its port on loopback, and health
    and metrics open to the playground's probes."""
    return [f"--kubeconfig={kubeconfig}", *serving_flags(kubeconfig, port, address)]


def serving_flags(kubeconfig: Path, port: int, address: str = "127.0.0.1") -> list[str]:
    """secure_component_flags but the API client's kubeconfig: for a component configured by
    a file (kube-scheduler), which ignores that flag beside one."""
    return [
        f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={address}",
        f"--secure-port={port}",
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics",
    ]


def controller_manager_args(
    binaries: Binaries, paths: ClusterPaths, ports: dict[str, int], qps: int | None = None
) -> list[str]:
    """`qps`: its API client's rate (ClusterSpec.controller_qps), Kubernetes' default if None."""
    pki = paths.pki
    rate = (
        [] if qps is None else [f"--kube-api-qps={qps}", f"--kube-api-burst={qps * BURST_PER_QPS}"]
    )
    return [
        str(binaries.kube_controller_manager),
        *secure_component_flags(
            paths.component_kubeconfig("kube-controller-manager"), ports["controller-manager"]
        ),
        "--leader-elect=false",
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.path('sa.key')}",
        f"--root-ca-file={pki.ca_crt}",
        # Approved CSRs get signed by the cluster CA, so they authenticate to this API server.
        f"--cluster-signing-cert-file={pki.ca_crt}",
        f"--cluster-signing-key-file={pki.ca_key}",
        f"--node-monitor-grace-period={NODE_MONITOR_GRACE_PERIOD}",
        *rate,
    ]


def scheduler_args(binaries: Binaries, paths: ClusterPaths, ports: dict[str, int]) -> list[str]:
    """Its API client and leader election from its configuration file (scheduler_configuration:
    the rate of its client has no flag but a deprecated one)."""
    return [
        str(binaries.kube_scheduler),
        f"--config={paths.scheduler_config}",
        *serving_flags(paths.component_kubeconfig("kube-scheduler"), ports["scheduler"]),
    ]


def vk_controller_manager_args(paths: ClusterPaths, ports: dict[str, int]) -> list[str]:
    """vk's controller manager, running its virtual kubelets as processes of this machine."""
    return [
        str(Path(sys.executable).parent / "vk"),
        "controller-manager",
        f"--metrics-address=127.0.0.1:{ports['vk-controller-manager']}",
        "--virtual-kubelet-launcher=local",
        f"--local-launcher-dir={paths.virtual_kubelets}",
    ]


def vk_webhook_args(paths: ClusterPaths, ports: dict[str, int]) -> list[str]:
    pki = paths.pki
    return [
        str(Path(sys.executable).parent / "vk"),
        "webhook",
        f"--listen-address=127.0.0.1:{ports['vk-webhook']}",
        f"--tls-cert-file={pki.path('vk-webhook-serving.crt')}",
        f"--tls-private-key-file={pki.path('vk-webhook-serving.key')}",
        # Only this cluster's API server may send it reviews.
        f"--admission-caller-ca-file={pki.ca_crt}",
        f"--admission-caller-names={WEBHOOK_CALLER}",
        # The aggregator reaches it at localhost (the chart's ExternalName Service); kwok's
        # kubelet API, which it reads, has a certificate of the cluster CA, its kubeconfig's.
        f"--metrics-agent-address=127.0.0.1:{ports['vk-metrics-agent']}",
    ]


def kwok_args(
    binaries: Binaries, paths: ClusterPaths, ports: dict[str, int], pod_cidr: str
) -> list[str]:
    pki = paths.pki
    return [
        str(binaries.kwok),
        f"--kubeconfig={paths.component_kubeconfig('kwok')}",
        f"--config={paths.kwok_dir / 'kwok.yaml'}",
        # Only the Nodes the playground creates with this annotation: never a Node that a
        # virtual kubelet registers.
        f"--manage-nodes-with-annotation-selector={KWOK_NODE_ANNOTATION}=fake",
        "--node-ip=127.0.0.1",
        "--node-name=localhost",
        f"--node-port={ports['kwok']}",
        f"--server-address=127.0.0.1:{ports['kwok']}",
        f"--cidr={pod_cidr}",
        "--node-lease-duration-seconds=40",
        f"--tls-cert-file={pki.path('kwok-serving.crt')}",
        f"--tls-private-key-file={pki.path('kwok-serving.key')}",
    ]


def metrics_server_args(
    binaries: Binaries, paths: ClusterPaths, ports: dict[str, int], address: str = "127.0.0.1"
) -> list[str]:
    """On loopback; or where a real-node playground's API servers listen, since they reach
    aggregated APIs at their Services' endpoints then (and an endpoint is never loopback)."""
    pki = paths.pki
    return [
        str(binaries.metrics_server),
        *secure_component_flags(
            paths.component_kubeconfig("metrics-server"), ports["metrics-server"], address
        ),
        f"--tls-cert-file={pki.path('metrics-server-serving.crt')}",
        f"--tls-private-key-file={pki.path('metrics-server-serving.key')}",
        # Kubelets are verified: kwok's certificate and virtual kubelets' kubelet-serving ones
        # are signed by the cluster CA.
        f"--kubelet-certificate-authority={pki.ca_crt}",
        "--kubelet-preferred-address-types=InternalIP",
        "--kubelet-use-node-status-port",
        f"--metric-resolution={METRIC_RESOLUTION}",
    ]
