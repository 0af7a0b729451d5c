"""Starting real `vk kubelet` processes for tests, with what later issues' controllers will
create (VirtualNode, kubeconfig Secret, RBAC) written by hand, as issue 4 asks."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import Clusters
from tests.integration.kubeconfigs import token_kubeconfig
from tests.integration.polling import wait_until
from vk.api.constants import TENANT_NAMESPACE_LABEL, virtual_kubelet_service_account
from vk.controllers.local_processes import free_port
from vk.controllers.virtualkubelet_rbac import (
    forge_offloaded_namespace_binding,
    forge_virtual_kubelet_rbac,
)

VK = str(Path(sys.executable).parent / "vk")
HOME = "venice"


@dataclass
class Replica:
    identity: str
    process: subprocess.Popen[bytes]
    metrics_port: int
    kubelet_port: int
    log: Path

    def signal(self, signum: int = signal.SIGTERM) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signum)

    def wait(self, timeout: float = 30) -> int:
        return self.process.wait(timeout=timeout)

    def metrics(self) -> str:
        import urllib.request

        with urllib.request.urlopen(
            f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5
        ) as r:
            return r.read().decode()

    def logs(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class VirtualNodeSetup:
    """One VirtualNode in its own tenant namespace of venice, backed by `provider`."""

    clusters: Clusters
    workdir: Path
    provider: str = "naples"
    node: str = field(default_factory=lambda: f"vn-{uuid.uuid4().hex[:8]}")
    replicas: list[Replica] = field(default_factory=list)
    cleanups: list[Callable[[], Any]] = field(default_factory=list)
    # Another virtual node's tenant namespace, for a second virtual node of the same provider.
    tenant: str | None = None

    @property
    def namespace(self) -> str:
        return self.tenant or f"liqo-tenant-{self.node}"

    @property
    def secret(self) -> str:
        return f"kubeconfig-resourceslice-{self.node}"

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> Any:
        return self.clusters.kubectl(HOME, *args, input=input, check=check)

    def apply(self, manifest: dict[str, Any] | list[dict[str, Any]]) -> None:
        items = manifest if isinstance(manifest, list) else [manifest]
        self.kubectl(
            "apply",
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": items}),
        )

    def virtual_node(self, **spec: Any) -> dict[str, Any]:
        return {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "VirtualNode",
            "metadata": {"name": self.node, "namespace": self.namespace},
            "spec": {
                "clusterID": self.provider,
                "createNode": True,
                "kubeconfigSecretRef": {"name": self.secret},
                "labels": {"topology.liqo.io/region": "south"},
                "resourceQuota": {
                    "hard": {
                        "cpu": "4",
                        "memory": "8Gi",
                        "pods": "110",
                        "ephemeral-storage": "20Gi",
                    }
                },
                **spec,
            },
        }

    def create(self, *, with_secret: bool = True) -> None:
        if self.tenant is None:
            # A tenant namespace, as peering makes it: VirtualNodes live nowhere else.
            self.kubectl("create", "namespace", self.namespace)
            self.kubectl("label", "namespace", self.namespace, f"{TENANT_NAMESPACE_LABEL}=true")
        self.apply(forge_virtual_kubelet_rbac(self.node, self.namespace, self.secret))
        if with_secret:
            self.write_secret(self.clusters.kubeconfig(self.provider).read_bytes())
        self.apply(self.virtual_node())

    def write_secret(self, kubeconfig: bytes) -> None:
        self.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "metadata": {"name": self.secret, "namespace": self.namespace},
                "data": {"kubeconfig": base64.b64encode(kubeconfig).decode()},
            }
        )

    def service_account_kubeconfig(self) -> Path:
        """venice as the virtual kubelet's own ServiceAccount (a TokenRequest token)."""
        token = self.kubectl(
            "create",
            "token",
            virtual_kubelet_service_account(self.node),
            "-n",
            self.namespace,
            "--duration=2h",
        ).stdout.strip()
        admin = yaml.safe_load(Path(self.clusters.kubeconfig(HOME)).read_text())
        path = self.workdir / f"{self.node}.kubeconfig"
        path.write_text(yaml.safe_dump(token_kubeconfig(admin, token)))
        return path

    def start(self, identity: str = "replica-1", *extra: str) -> Replica:
        port, kubelet_port = free_port(), free_port()
        log = self.workdir / f"{self.node}-{identity}.log"
        env = {
            **os.environ,
            "POD_NAME": identity,
            "POD_NAMESPACE": self.namespace,
            "VIRTUALNODE_NAME": self.node,
            "KUBECONFIG": str(self.service_account_kubeconfig()),
        }
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [
                    VK,
                    "kubelet",
                    f"--nodename={self.node}",
                    f"--tenant-namespace={self.namespace}",
                    f"--foreign-cluster-id={self.provider}",
                    "--home-cluster-id=venice",
                    f"--foreign-kubeconfig-secret-name={self.secret}",
                    f"--metrics-address=127.0.0.1:{port}",
                    f"--listen-port={kubelet_port}",
                    "--node-ping-interval=1s",
                    *extra,
                ],
                env=env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        replica = Replica(identity, process, port, kubelet_port, log)
        self.replicas.append(replica)
        return replica

    def local_namespace(self) -> str:
        """A fresh namespace in venice for a test's pods, removed afterwards."""
        namespace = f"w-{uuid.uuid4().hex[:8]}"
        self.kubectl("create", "namespace", namespace)
        self.cleanups.append(
            lambda: self.kubectl("delete", "namespace", namespace, "--wait=false", check=False)
        )
        return namespace

    def bind_offloaded(self, namespace: str) -> None:
        """What the VirtualNode controller binds in each namespace offloaded to the provider,
        for each of its virtual kubelets: reading what the offloaded pods use."""
        self.apply(forge_offloaded_namespace_binding(self.node, self.namespace, namespace))

    def offload_namespace(self, namespace: str, remote: str | None = None) -> str:
        """What namespace offloading will do: a twin namespace in the provider (DefaultName's
        unless `remote` is given), and the mapping Accepted in the provider's NamespaceMap.
        Returns the remote namespace."""
        remote = remote or f"{namespace}-venice"
        self.bind_offloaded(namespace)
        self.clusters.kubectl(self.provider, "create", "namespace", remote)
        self.cleanups.append(
            lambda: self.clusters.kubectl(
                self.provider, "delete", "namespace", remote, "--wait=false", check=False
            )
        )
        current = self.namespace_map_status()
        current[namespace] = {"remoteNamespace": remote, "phase": "Accepted"}
        self.apply(
            {
                "apiVersion": "offloading.liqo.io/v1beta1",
                "kind": "NamespaceMap",
                "metadata": {
                    "name": self.provider,
                    "namespace": self.namespace,
                    "labels": {"liqo.io/remote-cluster-id": self.provider},
                },
                "spec": {
                    "desiredMapping": {
                        ns: entry["remoteNamespace"] for ns, entry in current.items()
                    }
                },
            }
        )
        self.kubectl(
            "patch",
            "namespacemaps.offloading.liqo.io",
            self.provider,
            "-n",
            self.namespace,
            "--subresource=status",
            "--type=merge",
            "-p",
            json.dumps({"status": {"currentMapping": current}}),
        )
        return remote

    def namespace_map_status(self) -> dict[str, Any]:
        result = self.kubectl(
            "get",
            "namespacemaps.offloading.liqo.io",
            self.provider,
            "-n",
            self.namespace,
            "-o",
            "json",
            check=False,
        )
        if result.returncode != 0:
            return {}
        mapping: dict[str, Any] = (
            json.loads(result.stdout).get("status", {}).get("currentMapping", {})
        )
        return mapping

    def pods(self, cluster: str, namespace: str, selector: str = "") -> list[dict[str, Any]]:
        args = ["get", "pods", "-n", namespace, "-o", "json"]
        if selector:
            args += ["-l", selector]
        items: list[dict[str, Any]] = json.loads(self.clusters.kubectl(cluster, *args).stdout)[
            "items"
        ]
        return items

    def running_pod(self, namespace: str, app: str = "web") -> str:
        """The name of a Running pod of Deployment `app` in venice's `namespace`, once there
        is one."""
        names: list[str] = wait_until(
            lambda: [
                p["metadata"]["name"]
                for p in self.pods("venice", namespace, f"app={app}")
                if p.get("status", {}).get("phase") == "Running"
            ],
            f"a Running pod of {app} in {namespace}",
        )
        return names[0]

    def deployment(self, name: str, namespace: str, replicas: int) -> dict[str, Any]:
        """A Deployment whose pods go to this virtual node (until namespace offloading's webhook
        adds the toleration, the test does)."""
        return {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": {"app": name}},
                "template": {
                    "metadata": {"labels": {"app": name}},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": self.node},
                        "tolerations": [
                            {
                                "key": "virtual-node.liqo.io/not-allowed",
                                "operator": "Exists",
                                "effect": "NoExecute",
                            }
                        ],
                        "terminationGracePeriodSeconds": 5,
                        "containers": [{"name": "app", "image": "nginx"}],
                    },
                },
            },
        }

    def node_object(self) -> dict[str, Any] | None:
        result = self.kubectl("get", "node", self.node, "-o", "json", check=False)
        return json.loads(result.stdout) if result.returncode == 0 else None

    def ready(self) -> bool:
        node = self.node_object()
        return bool(node) and any(
            c["type"] == "Ready" and c["status"] == "True"
            for c in node.get("status", {}).get("conditions", [])
        )

    def events(self, reason: str) -> list[dict[str, Any]]:
        out = self.kubectl(
            "get",
            "events",
            "-n",
            self.namespace,
            "-o",
            "json",
            "--field-selector",
            f"reason={reason}",
        ).stdout
        return json.loads(out)["items"]

    def cleanup(self) -> None:
        for replica in self.replicas:
            replica.signal(signal.SIGKILL)
            replica.process.wait(timeout=10)
        for cleanup in self.cleanups:
            cleanup()
        self.kubectl("delete", "node", self.node, "--ignore-not-found", "--wait=false")
        self.kubectl("delete", "namespace", self.namespace, "--ignore-not-found", "--wait=false")
        name = f"vk:virtual-kubelet:{self.node}"
        self.kubectl("delete", "clusterrole,clusterrolebinding", name, "--ignore-not-found")
        self.kubectl(
            "delete", "-n", "kube-node-lease", "role,rolebinding", name, "--ignore-not-found"
        )
        self.kubectl("delete", "-n", "kube-system", "rolebinding", name, "--ignore-not-found")


Offloaded = tuple[VirtualNodeSetup, str, str]
"""A running virtual node, a local namespace offloaded through it, and a pod or remote name."""
