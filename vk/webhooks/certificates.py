"""The webhook's own serving certificate, for installations with no certificate manager (the
Helm chart and the rendered manifests): a CA and a certificate for the webhook's Service,
kept in a Secret of vk's namespace, and the CA written into the `vk` webhook configurations
so that the API server trusts the webhook.

The first replica to start creates the Secret; the others read it (a lost create race just
means reading the winner's). A certificate that no longer covers the Service's names or is
within RENEW_BEFORE of its end is replaced. The forging and checking are pure; `ensure_*`
talk to the API server.
"""

from __future__ import annotations

import base64
import datetime
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding

from vk.kube.client import AlreadyExists, Conflict, KubeClient, NotFound, resource_path
from vk.kube.pki import build_ca, issue
from vk.webhooks.configuration import CONFIGURATION_NAME, METRICS_API_SERVICE

JSON = dict[str, Any]
log = structlog.get_logger("vk.webhooks.certificates")

VALIDITY = datetime.timedelta(days=365)
RENEW_BEFORE = datetime.timedelta(days=30)
CA_KEY, CERT_KEY, PRIVATE_KEY_KEY = "ca.crt", "tls.crt", "tls.key"
# What marks a Secret as one the webhook made (and may renew).
SECRET_LABELS = {"app.kubernetes.io/name": "vk", "app.kubernetes.io/component": "webhook"}


class CertificateError(RuntimeError):
    """The certificate Secret cannot be used and is not vk's to replace."""


@dataclass(frozen=True)
class WebhookCertificate:
    ca_pem: bytes
    cert_pem: bytes
    key_pem: bytes


def service_dns_names(service: str, namespace: str) -> tuple[str, ...]:
    """The names the API server may dial a Service-referenced webhook by."""
    return (service, f"{service}.{namespace}", f"{service}.{namespace}.svc")


def forge_webhook_certificate(
    service: str, namespace: str, now: datetime.datetime
) -> WebhookCertificate:
    ca, ca_key = build_ca(f"vk-webhook-ca@{int(now.timestamp())}", now, VALIDITY)
    names = service_dns_names(service, namespace)
    leaf = issue(ca, ca_key, names[-1], now, dns_names=names, server=True, validity=VALIDITY)
    ca_pem = ca.public_bytes(Encoding.PEM)
    return WebhookCertificate(ca_pem, leaf.cert_pem, leaf.key_pem)


def renewed_certificate(
    current: WebhookCertificate | None, service: str, namespace: str, now: datetime.datetime
) -> WebhookCertificate:
    """A new certificate, its CA bundle followed by the CA it replaces while that CA is valid.
    The bundle goes into the webhook configurations at once, and each replica loads the new
    certificate within minutes: until then the API server must still trust the old one, or
    every pod admission fails meanwhile (the webhooks fail closed). Only the latest old CA is
    kept: a bundle holds two CAs at most."""
    fresh = forge_webhook_certificate(service, namespace, now)
    if current is None:
        return fresh
    try:
        previous = x509.load_pem_x509_certificate(current.ca_pem)
    except ValueError:
        return fresh
    if previous.not_valid_after_utc <= now:
        return fresh
    return WebhookCertificate(
        fresh.ca_pem + previous.public_bytes(Encoding.PEM), fresh.cert_pem, fresh.key_pem
    )


def certificate_usable(
    certificate: WebhookCertificate, service: str, namespace: str, now: datetime.datetime
) -> bool:
    """The certificate covers the Service's names and has more than RENEW_BEFORE left."""
    try:
        cert = x509.load_pem_x509_certificate(certificate.cert_pem)
        x509.load_pem_x509_certificate(certificate.ca_pem)
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (ValueError, x509.ExtensionNotFound):
        return False
    covered = set(names.get_values_for_type(x509.DNSName))
    fresh = cert.not_valid_after_utc - now > RENEW_BEFORE
    return fresh and set(service_dns_names(service, namespace)) <= covered


def forge_certificate_secret(name: str, namespace: str, certificate: WebhookCertificate) -> JSON:
    def encoded(pem: bytes) -> str:
        return base64.b64encode(pem).decode()

    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "labels": dict(SECRET_LABELS),
        },
        "type": "kubernetes.io/tls",
        "data": {
            CA_KEY: encoded(certificate.ca_pem),
            CERT_KEY: encoded(certificate.cert_pem),
            PRIVATE_KEY_KEY: encoded(certificate.key_pem),
        },
    }


def made_by_vk(secret: JSON) -> bool:
    labels = secret["metadata"].get("labels") or {}
    return all(labels.get(k) == v for k, v in SECRET_LABELS.items())


def certificate_from_secret(secret: JSON) -> WebhookCertificate:
    data = secret.get("data") or {}
    return WebhookCertificate(
        *(base64.b64decode(data.get(key) or "") for key in (CA_KEY, CERT_KEY, PRIVATE_KEY_KEY))
    )


def ca_bundle_updated(configuration: JSON, ca_pem: bytes) -> JSON | None:
    """The configuration with every webhook trusting `ca_pem`, or None if all already do."""
    bundle = base64.b64encode(ca_pem).decode()
    webhooks = configuration.get("webhooks") or []
    if all(w.get("clientConfig", {}).get("caBundle") == bundle for w in webhooks):
        return None
    return {
        **configuration,
        "webhooks": [
            {**w, "clientConfig": {**w.get("clientConfig", {}), "caBundle": bundle}}
            for w in webhooks
        ],
    }


async def ensure_certificate(
    client: KubeClient, namespace: str, secret_name: str, service: str
) -> WebhookCertificate:
    """The usable certificate of the Secret, made (or remade) if there is none."""
    path = resource_path("v1", "secrets", namespace=namespace, name=secret_name)
    for _ in range(5):
        now = datetime.datetime.now(datetime.UTC)
        try:
            current: JSON | None = await client.get(path)
        except NotFound:
            current = None
        if current is not None:
            certificate = certificate_from_secret(current)
            if certificate_usable(certificate, service, namespace, now):
                return certificate
            if not made_by_vk(current):  # the user's own: theirs to fix, never overwritten
                raise CertificateError(
                    f"Secret {namespace}/{secret_name} is not vk's and its certificate does "
                    f"not cover {', '.join(service_dns_names(service, namespace))} for more "
                    f"than {RENEW_BEFORE.days} days: renew it, or delete it for vk to make one"
                )
        previous = certificate_from_secret(current) if current is not None else None
        fresh = renewed_certificate(previous, service, namespace, now)
        secret = forge_certificate_secret(secret_name, namespace, fresh)
        try:
            if current is None:
                await client.create(resource_path("v1", "secrets", namespace=namespace), secret)
            else:
                secret["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                await client.replace(path, secret)
        except (AlreadyExists, Conflict):
            continue  # another replica wrote one first: use it
        log.info("webhook certificate issued", secret=secret_name, service=service)
        return fresh
    raise CertificateError(f"could not settle the webhook certificate in Secret {secret_name}")


def api_service_ca_bundle_updated(api_service: JSON, ca_pem: bytes) -> JSON | None:
    """The APIService trusting `ca_pem`, or None if it already does."""
    bundle = base64.b64encode(ca_pem).decode()
    spec = api_service.get("spec") or {}
    if spec.get("caBundle") == bundle:
        return None
    return {**api_service, "spec": {**spec, "caBundle": bundle}}


async def ensure_ca_bundle(client: KubeClient, ca_pem: bytes) -> None:
    """Write the CA into vk's webhook configurations and the metrics agent's APIService
    wherever it is missing or different."""
    targets: list[tuple[str, Callable[[JSON, bytes], JSON | None]]] = [
        (
            resource_path("admissionregistration.k8s.io/v1", kind, name=CONFIGURATION_NAME),
            ca_bundle_updated,
        )
        for kind in ("mutatingwebhookconfigurations", "validatingwebhookconfigurations")
    ]
    targets.append(
        (
            resource_path("apiregistration.k8s.io/v1", "apiservices", name=METRICS_API_SERVICE),
            api_service_ca_bundle_updated,
        )
    )
    for path, updated_with in targets:
        for _ in range(5):
            try:
                updated = updated_with(await client.get(path), ca_pem)
            except NotFound:
                log.warning("object to write the webhook's CA into is missing", path=path)
                break
            if updated is None:
                break
            try:
                await client.replace(path, updated)
                log.info("CA bundle written", path=path)
                break
            except Conflict:
                continue


def write_certificate_files(certificate: WebhookCertificate, directory: Path) -> tuple[Path, Path]:
    """The serving certificate and key as files (what the TLS context loads), private."""
    directory.mkdir(parents=True, exist_ok=True, mode=0o700)
    cert_file, key_file = directory / CERT_KEY, directory / PRIVATE_KEY_KEY
    for path, pem in ((cert_file, certificate.cert_pem), (key_file, certificate.key_pem)):
        path.touch(mode=0o600)
        path.write_bytes(pem)
    return cert_file, key_file
