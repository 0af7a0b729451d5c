"""The kubelet's serving certificate, from the cluster's CSR API as the real kubelet gets it:
a `kubernetes.io/kubelet-serving` CertificateSigningRequest for `system:node:<node>` with the
node's name and IP, approved by vk's controller manager, signed by the cluster, renewed well
before it expires. The forging and the timing are pure; the manager does the I/O."""

from __future__ import annotations

import asyncio
import base64
import datetime
import ipaddress
import secrets
from collections.abc import Callable
from typing import Any

import structlog
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from vk.kube.client import ApiError, KubeClient, NotFound, resource_path

log = structlog.get_logger("vk.kubelet.certificates")

SIGNER = "kubernetes.io/kubelet-serving"
# For an EC key: what the kubelet-serving signer accepts without "key encipherment" (RSA only).
USAGES = ["digital signature", "server auth"]
RENEW_AT = 0.8  # of the lifetime, as client-go's certificate manager does (70-90 %, jittered)


def node_subject(node_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
            x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{node_name}"),
        ]
    )


def forge_serving_csr(node_name: str, node_ip: str) -> tuple[bytes, bytes]:
    """A new key and the PEM certificate request for it: (key PEM, CSR PEM)."""
    key = ec.generate_private_key(ec.SECP256R1())
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(node_subject(node_name))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName(node_name), x509.IPAddress(ipaddress.ip_address(node_ip))]
            ),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    key_pem = key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )
    return key_pem, request.public_bytes(serialization.Encoding.PEM)


def forge_csr_object(node_name: str, csr_pem: bytes, expiration_seconds: int) -> dict[str, Any]:
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {
            "name": f"vk-serving-{node_name}-{secrets.token_hex(4)}",
            "labels": {"offloading.liqo.io/nodename": node_name},
        },
        "spec": {
            "request": base64.b64encode(csr_pem).decode(),
            "signerName": SIGNER,
            "usages": USAGES,
            "expirationSeconds": expiration_seconds,
        },
    }


def renewal_time(certificate_pem: bytes) -> datetime.datetime:
    """When to ask for the next certificate: at 80 % of this one's lifetime."""
    cert = x509.load_pem_x509_certificate(certificate_pem)
    start, end = cert.not_valid_before_utc, cert.not_valid_after_utc
    return start + (end - start) * RENEW_AT


def csr_outcome(csr: dict[str, Any]) -> tuple[str, bytes | None]:
    """("Issued", cert) | ("Denied"/"Failed", None) | ("Pending", None)."""
    status = csr.get("status") or {}
    for condition in status.get("conditions") or []:
        if condition.get("type") in ("Denied", "Failed") and condition.get("status") == "True":
            return condition["type"], None
    if status.get("certificate"):
        return "Issued", base64.b64decode(status["certificate"])
    return "Pending", None


PENDING_POLL_CAP = 30.0  # seconds between reads of a request still pending


class ServingCertificateManager:
    """Gets the serving certificate from the CSR API and keeps it fresh: `install(cert, key)`
    is called with each new pair (the server swaps it in for new connections)."""

    def __init__(
        self,
        home: KubeClient,
        node_name: str,
        node_ip: str,
        install: Callable[[bytes, bytes], None],
        *,
        lifetime: int = 86400,
        poll: float = 1.0,
    ) -> None:
        self.home, self.node_name, self.node_ip = home, node_name, node_ip
        self.install = install
        self.lifetime = lifetime
        self.poll = poll
        self.issued = asyncio.Event()
        self._log = log.bind(node=node_name)

    async def run(self) -> None:
        while True:
            certificate = await self._obtain()
            now = datetime.datetime.now(datetime.UTC)
            wait = (renewal_time(certificate) - now).total_seconds()
            self._log.info("serving certificate installed", renew_in_seconds=round(wait))
            await asyncio.sleep(max(wait, 1.0))

    async def _obtain(self) -> bytes:
        """Requests certificates until one is issued (a denied or failed request is logged and
        followed by a new one after a pause)."""
        while True:
            key_pem, csr_pem = forge_serving_csr(self.node_name, self.node_ip)
            csr = forge_csr_object(self.node_name, csr_pem, self.lifetime)
            path = resource_path("certificates.k8s.io/v1", "certificatesigningrequests")
            try:
                created = await self.home.create(path, csr)
            except ApiError as error:
                self._log.warning("cannot request a serving certificate", error=str(error))
                await asyncio.sleep(30)
                continue
            name = created["metadata"]["name"]
            # An approver answers within a second; one that does not may never (a requester
            # it refuses to approve for): back off to a read every half minute.
            delay = self.poll
            while True:
                try:
                    current = await self.home.get(f"{path}/{name}")
                except NotFound:
                    break  # deleted by someone: ask again
                except ApiError as error:
                    self._log.warning("cannot read the certificate request", error=str(error))
                    current = {}
                outcome, certificate = csr_outcome(current)
                if outcome == "Issued" and certificate:
                    self.install(certificate, key_pem)
                    self.issued.set()
                    return certificate
                if outcome in ("Denied", "Failed"):
                    self._log.warning(
                        "serving certificate request refused", csr=name, outcome=outcome
                    )
                    await asyncio.sleep(30)
                    break
                await asyncio.sleep(delay)
                delay = min(delay * 2, PENDING_POLL_CAP)
