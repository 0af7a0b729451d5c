"""Where one playground cluster keeps its files: certificates, kubeconfigs, configuration,
logs, pid files and data, all under the cluster's own directory. Only names of paths: nothing
here reads or writes them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from vk.playground.pki import ClusterPki
from vk.playground.realnode import NodePaths


@dataclass(frozen=True)
class ClusterPaths:
    root: Path

    @property
    def pki(self) -> ClusterPki:
        return ClusterPki(self.root / "pki")

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def ports_file(self) -> Path:
        return self.root / "ports.json"

    @property
    def etcd_data(self) -> Path:
        return self.root / "etcd"

    @property
    def kwok_dir(self) -> Path:
        return self.root / "kwok"

    @property
    def attach_log(self) -> Path:
        """What `kubectl attach` streams: CRI-format lines appended here while attached."""
        return self.kwok_dir / "attach.log"

    def component_kubeconfig(self, component: str) -> Path:
        return self.root / "kubeconfigs" / f"{component}.kubeconfig"

    @property
    def virtual_kubelets(self) -> Path:
        """The local launcher's directory: one per VirtualNode (kubeconfig, token, log)."""
        return self.root / "virtual-kubelets"

    def log(self, component: str) -> Path:
        return self.root / "logs" / f"{component}.log"

    def pid(self, component: str) -> Path:
        return self.root / "run" / f"{component}.pid"

    def fingerprint(self, component: str) -> Path:
        return self.root / "run" / f"{component}.fingerprint"

    @property
    def node(self) -> NodePaths:
        return NodePaths(self.root)

    @property
    def audit_policy(self) -> Path:
        return self.root / "audit-policy.yaml"

    @property
    def admission_config(self) -> Path:
        """The API server's admission configuration: the client certificate it presents to
        admission webhooks."""
        return self.root / "admission.yaml"

    @property
    def scheduler_config(self) -> Path:
        """kube-scheduler's configuration: its identity and its API client's rate."""
        return self.root / "kube-scheduler.yaml"

    @property
    def audit_log(self) -> Path:
        """The API server's audit log (a real-node cluster's): vk's pods' requests, JSON lines."""
        return self.root / "logs" / "audit.log"

    @property
    def prometheus_config(self) -> Path:
        return self.root / "prometheus" / "prometheus.yml"

    @property
    def prometheus_data(self) -> Path:
        return self.root / "prometheus" / "data"
