"""The webhook's own certificate: what it covers, when it is renewed, and how its CA gets into
the webhook configurations (pure parts; the Secret and the configurations against a real API
server are in tests/integration/test_chart.py)."""

from __future__ import annotations

import base64
import datetime
import ssl
from pathlib import Path

from cryptography import x509

from vk.webhooks.certificates import (
    RENEW_BEFORE,
    VALIDITY,
    WebhookCertificate,
    ca_bundle_updated,
    certificate_from_secret,
    certificate_usable,
    forge_certificate_secret,
    forge_webhook_certificate,
    made_by_vk,
    renewed_certificate,
    write_certificate_files,
)

NOW = datetime.datetime(2026, 11, 22, tzinfo=datetime.UTC)


def test_certificate_covers_the_service_names_and_chains_to_its_ca(tmp_path: Path) -> None:
    certificate = forge_webhook_certificate("vk-webhook", "vk", NOW)
    cert = x509.load_pem_x509_certificate(certificate.cert_pem)
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value

    assert names.get_values_for_type(x509.DNSName) == [
        "vk-webhook",
        "vk-webhook.vk",
        "vk-webhook.vk.svc",
    ]
    ca = x509.load_pem_x509_certificate(certificate.ca_pem)
    cert.verify_directly_issued_by(ca)
    cert_file, key_file = write_certificate_files(certificate, tmp_path / "tls")
    ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(cert_file, key_file)
    assert oct(key_file.stat().st_mode & 0o777) == "0o600"


def test_certificate_is_renewed_before_it_expires_or_when_the_service_changes() -> None:
    certificate = forge_webhook_certificate("vk-webhook", "vk", NOW)

    assert certificate_usable(certificate, "vk-webhook", "vk", NOW)
    assert certificate_usable(certificate, "vk-webhook", "vk", NOW + VALIDITY - RENEW_BEFORE * 2)
    assert not certificate_usable(certificate, "vk-webhook", "vk", NOW + VALIDITY - RENEW_BEFORE)
    assert not certificate_usable(certificate, "other", "vk", NOW)
    assert not certificate_usable(certificate, "vk-webhook", "liqo", NOW)
    assert not certificate_usable(WebhookCertificate(b"", b"junk", b""), "vk-webhook", "vk", NOW)


def test_secret_round_trip() -> None:
    certificate = forge_webhook_certificate("vk-webhook", "vk", NOW)
    secret = forge_certificate_secret("vk-webhook-certs", "vk", certificate)

    assert secret["type"] == "kubernetes.io/tls"
    assert secret["metadata"] == {
        "name": "vk-webhook-certs",
        "namespace": "vk",
        "labels": {"app.kubernetes.io/name": "vk", "app.kubernetes.io/component": "webhook"},
    }
    assert certificate_from_secret(secret) == certificate
    assert made_by_vk(secret)
    assert not made_by_vk({"metadata": {"labels": {"app.kubernetes.io/name": "mine"}}})
    assert certificate_from_secret({"metadata": {}}) == WebhookCertificate(b"", b"", b"")


def test_ca_bundle_is_written_into_every_webhook_and_only_when_it_differs() -> None:
    configuration = {
        "metadata": {"name": "vk", "resourceVersion": "7"},
        "webhooks": [
            {"name": "a", "clientConfig": {"service": {"name": "vk-webhook"}}},
            {"name": "b", "clientConfig": {"service": {"name": "vk-webhook"}, "caBundle": "old"}},
        ],
    }

    updated = ca_bundle_updated(configuration, b"PEM")

    assert updated is not None
    bundle = base64.b64encode(b"PEM").decode()
    assert [w["clientConfig"] for w in updated["webhooks"]] == [
        {"service": {"name": "vk-webhook"}, "caBundle": bundle},
        {"service": {"name": "vk-webhook"}, "caBundle": bundle},
    ]
    assert updated["metadata"]["resourceVersion"] == "7"  # a conflict-checked replace
    assert ca_bundle_updated(updated, b"PEM") is None


def test_a_renewed_certificate_is_trusted_alongside_the_one_it_replaces() -> None:
    """Replicas load the new certificate within minutes of its CA reaching the webhook
    configurations: the old one must be trusted meanwhile, or every admission fails."""
    old = forge_webhook_certificate("vk-webhook", "vk", NOW)
    renewal = NOW + VALIDITY - RENEW_BEFORE
    renewed = renewed_certificate(old, "vk-webhook", "vk", renewal)
    cas = x509.load_pem_x509_certificates(renewed.ca_pem)
    assert [ca.subject for ca in cas[1:]] == [x509.load_pem_x509_certificate(old.ca_pem).subject]
    for certificate in (old, renewed):
        leaf = x509.load_pem_x509_certificate(certificate.cert_pem)
        assert any(leaf.issuer == ca.subject for ca in cas)
    assert certificate_usable(renewed, "vk-webhook", "vk", renewal)
    # At the next renewal, the CA before goes: two at most.
    again = renewed_certificate(renewed, "vk-webhook", "vk", renewal + VALIDITY - RENEW_BEFORE)
    assert len(x509.load_pem_x509_certificates(again.ca_pem)) == 2
    # An old CA expired, or none readable, is not kept.
    assert (
        renewed_certificate(old, "vk-webhook", "vk", NOW + VALIDITY * 2).ca_pem.count(
            b"BEGIN CERTIFICATE"
        )
        == 1
    )
    assert (
        renewed_certificate(
            WebhookCertificate(b"junk", b"", b""), "vk-webhook", "vk", NOW
        ).ca_pem.count(b"BEGIN CERTIFICATE")
        == 1
    )
