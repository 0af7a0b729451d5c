"""Certificates for one playground cluster: its own CA, serving certs and client identities.

Every cluster gets a CA of its own, as real clusters do, so an identity issued by one cluster is
worthless in another: peering has to earn its certificates through the provider's CSR API. The
builders are pure (keys and PEM in, PEM out); `write_cluster_pki` is the only one touching disk.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from vk.api.constants import CONTROLLER_MANAGER, VK_NAMESPACE, WEBHOOK, service_account_user
from vk.kube.pki import (
    Issued,
    PrivateKey,
    build_ca,
    issue,
    new_private_key,
    private_key_pem,
    public_key_pem,
)
from vk.playground.prometheus import PROMETHEUS_USER
from vk.playground.realnode import HOST_ADDRESS

SERVICE_CLUSTER_IP_RANGE = "10.96.0.0/16"
KUBERNETES_SERVICE_IP = "10.96.0.1"
# The name the API server's certificate for calling admission webhooks bears.
WEBHOOK_CALLER = "kube-apiserver-webhook-client"

Key = PrivateKey


@dataclass(frozen=True)
class ClusterPki:
    """Paths of one cluster's PKI files, all under `root`."""

    root: Path

    def path(self, name: str) -> Path:
        return self.root / name

    @property
    def ca_crt(self) -> Path:
        return self.root / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.root / "ca.key"

    @property
    def client_ca(self) -> Path:
        """The API server's --client-ca-file: the cluster CA at first, a file of its own so
        that a rotation can put a new CA beside it (the CA that signs, ca.crt, must stay one
        certificate for the controller manager's signer)."""
        return self.root / "client-ca.crt"


# Client identities: file stem -> (common name, organizations).
CLIENT_IDENTITIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "admin": ("vk-playground-admin", ("system:masters",)),
    "kube-controller-manager": ("system:kube-controller-manager", ()),
    "kube-scheduler": ("system:kube-scheduler", ()),
    "apiserver-kubelet-client": ("kube-apiserver-kubelet-client", ("system:masters",)),
    "kwok": ("kwok-controller", ("system:masters",)),
    # Scrapes kubelets (virtual ones included) with this identity: bound to
    # system:metrics-server, as the metrics-server manifests bind its ServiceAccount.
    "metrics-server": ("metrics-server", ()),
    # vk's controller manager and webhook authenticate as the ServiceAccounts the chart binds
    # (client certificates naming them: the playground runs them as processes, not pods), so
    # that the chart's RBAC alone authorizes them.
    "vk-controller-manager": (
        service_account_user(VK_NAMESPACE, CONTROLLER_MANAGER),
        ("system:serviceaccounts", f"system:serviceaccounts:{VK_NAMESPACE}"),
    ),
    "vk-webhook": (
        service_account_user(VK_NAMESPACE, WEBHOOK),
        ("system:serviceaccounts", f"system:serviceaccounts:{VK_NAMESPACE}"),
    ),
    # The real node's Prometheus (pod discovery only; see vk.playground.prometheus).
    "prometheus": (PROMETHEUS_USER, ()),
    # What the API server presents when it calls admission webhooks: vk's webhook answers no
    # one else (a forged AdmissionReview could reserve a consumer's Quota, or learn its rules).
    "apiserver-webhook-client": (WEBHOOK_CALLER, ()),
}


def issue_leaves(
    ca: x509.Certificate,
    ca_key: Key,
    front_proxy_ca: x509.Certificate,
    front_proxy_key: Key,
    now: datetime.datetime,
) -> dict[str, Issued]:
    """Every leaf certificate of a cluster, by file stem."""
    leaves = {
        "apiserver": issue(
            ca,
            ca_key,
            "kube-apiserver",
            now,
            server=True,
            dns_names=(
                "localhost",
                "kubernetes",
                "kubernetes.default",
                "kubernetes.default.svc",
                "kubernetes.default.svc.cluster.local",
            ),
            # HOST_ADDRESS: where a real-node playground's API servers listen.
            ip_addresses=("127.0.0.1", KUBERNETES_SERVICE_IP, HOST_ADDRESS),
        ),
        # The kubelet API that kwok serves for the simulated nodes (all on 127.0.0.1).
        "kwok-serving": issue(
            ca,
            ca_key,
            "kwok-kubelet",
            now,
            server=True,
            dns_names=("localhost",),
            ip_addresses=("127.0.0.1",),
        ),
        # The aggregator checks the name of the APIService's Service.
        "metrics-server-serving": issue(
            ca,
            ca_key,
            "metrics-server",
            now,
            server=True,
            dns_names=("metrics-server.kube-system.svc", "localhost"),
            ip_addresses=("127.0.0.1",),
        ),
        # vk's admission webhook, which the API server calls at https://127.0.0.1:<port>.
        "vk-webhook-serving": issue(
            ca,
            ca_key,
            "vk-webhook",
            now,
            server=True,
            dns_names=("localhost", "vk-webhook.vk.svc"),
            ip_addresses=("127.0.0.1",),
        ),
        "front-proxy-client": issue(
            front_proxy_ca, front_proxy_key, "front-proxy-client", now, client=True
        ),
    }
    for stem, (common_name, organizations) in CLIENT_IDENTITIES.items():
        leaves[stem] = issue(ca, ca_key, common_name, now, organizations=organizations, client=True)
    return leaves


def load_ca(root: Path, stem: str) -> tuple[x509.Certificate, Key]:
    cert = x509.load_pem_x509_certificate((root / f"{stem}.crt").read_bytes())
    key = serialization.load_pem_private_key((root / f"{stem}.key").read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    return cert, key


def write_cluster_pki(root: Path, cluster_name: str) -> ClusterPki:
    """Generates every certificate and key one cluster needs. The CAs are made once; a leaf
    that a newer vk needs and an older playground lacks is issued from them, so the cluster
    keeps trusting everything it trusted before."""
    pki = ClusterPki(root)
    root.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    files: dict[str, bytes] = {}
    if not pki.path("complete").exists():
        ca, ca_key = build_ca(f"{cluster_name}-ca", now)
        front_proxy_ca, front_proxy_key = build_ca(f"{cluster_name}-front-proxy-ca", now)
        sa_key = new_private_key()
        files = {
            "ca.crt": ca.public_bytes(serialization.Encoding.PEM),
            "ca.key": private_key_pem(ca_key),
            "front-proxy-ca.crt": front_proxy_ca.public_bytes(serialization.Encoding.PEM),
            "front-proxy-ca.key": private_key_pem(front_proxy_key),
            "sa.key": private_key_pem(sa_key),
            "sa.pub": public_key_pem(sa_key),
        }
        existing: set[str] = set()
    else:
        ca, ca_key = load_ca(root, "ca")
        if not pki.path("front-proxy-ca.key").exists():  # made before the key was kept
            front_proxy_ca, front_proxy_key = build_ca(f"{cluster_name}-front-proxy-ca", now)
            files["front-proxy-ca.crt"] = front_proxy_ca.public_bytes(serialization.Encoding.PEM)
            files["front-proxy-ca.key"] = private_key_pem(front_proxy_key)
            pki.path("front-proxy-client.crt").unlink(missing_ok=True)
        else:
            front_proxy_ca, front_proxy_key = load_ca(root, "front-proxy-ca")
        existing = {p.stem for p in root.glob("*.crt")}
    for stem, issued in issue_leaves(ca, ca_key, front_proxy_ca, front_proxy_key, now).items():
        if stem not in existing:
            files[f"{stem}.crt"], files[f"{stem}.key"] = issued.cert_pem, issued.key_pem
    if not pki.client_ca.exists():
        files[pki.client_ca.name] = ca.public_bytes(serialization.Encoding.PEM)
    for name, data in files.items():
        write_private(root / name, data)
    pki.path("complete").touch()
    return pki


def write_private(path: Path, data: bytes) -> None:
    """A file only its owner reads: a key, or a kubeconfig that holds one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
