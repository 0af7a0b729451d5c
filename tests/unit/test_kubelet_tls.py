"""Client certificates checked after the handshake, as the kubelet's x509 authenticator does."""

from __future__ import annotations

import datetime

from cryptography import x509
from cryptography.hazmat.primitives.serialization import Encoding
from cryptography.x509.oid import ExtendedKeyUsageOID

from vk.kube.pki import certificate_matches_key, load_private_key
from vk.kubelet.auth import User
from vk.kubelet.server import forge_self_signed
from vk.kubelet.tls import user_from_certificate
from vk.playground.pki import build_ca, issue

NOW = datetime.datetime(2026, 11, 22, tzinfo=datetime.UTC)
CA, CA_KEY = build_ca("venice-ca", NOW)
OTHER_CA, OTHER_KEY = build_ca("naples-ca", NOW)
IMPOSTOR_CA, IMPOSTOR_KEY = build_ca("venice-ca", NOW)  # same name, another key


def der(cert_pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(cert_pem).public_bytes(Encoding.DER)


def client(ca: x509.Certificate, key: object, **kwargs: object) -> bytes:
    issued = issue(ca, key, "kube-apiserver-kubelet-client", NOW, **kwargs)  # type: ignore[arg-type]
    return der(issued.cert_pem)


def test_a_client_certificate_of_the_cluster_names_its_user_and_groups() -> None:
    cert = client(CA, CA_KEY, organizations=("system:masters",), client=True)
    assert user_from_certificate(cert, [CA], NOW) == User(
        "kube-apiserver-kubelet-client", ("system:masters",)
    )


def test_any_of_several_client_cas_will_do() -> None:
    cert = client(CA, CA_KEY, client=True)
    assert user_from_certificate(cert, [OTHER_CA, CA], NOW) is not None


def test_certificates_of_another_ca_or_a_ca_of_the_same_name_are_nobody() -> None:
    assert user_from_certificate(client(OTHER_CA, OTHER_KEY, client=True), [CA], NOW) is None
    assert user_from_certificate(client(IMPOSTOR_CA, IMPOSTOR_KEY, client=True), [CA], NOW) is None


def test_a_certificate_outside_its_validity_is_nobody() -> None:
    cert = client(CA, CA_KEY, client=True)
    assert user_from_certificate(cert, [CA], NOW + datetime.timedelta(days=366)) is None
    assert user_from_certificate(cert, [CA], NOW - datetime.timedelta(hours=1)) is None


def test_a_serving_only_certificate_cannot_authenticate_a_client() -> None:
    assert user_from_certificate(client(CA, CA_KEY, server=True), [CA], NOW) is None


def test_no_certificate_or_garbage_is_nobody() -> None:
    assert user_from_certificate(None, [CA], NOW) is None
    assert user_from_certificate(b"", [CA], NOW) is None
    assert user_from_certificate(b"not a certificate", [CA], NOW) is None


def test_a_self_signed_serving_certificate_names_the_node_as_the_kubelet_does() -> None:
    cert_pem, key_pem = forge_self_signed("naples", "10.201.0.7")
    cert = x509.load_pem_x509_certificate(cert_pem)

    assert cert.issuer == cert.subject
    assert cert.subject.rfc4514_string() == "CN=system:node:naples,O=system:nodes"
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["naples"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["10.201.0.7"]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]
    cert.verify_directly_issued_by(cert)  # it signs itself, with the key it comes with
    assert certificate_matches_key(cert_pem, load_private_key(key_pem))
