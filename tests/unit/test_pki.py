"""The certificates vk makes pass OpenSSL's strict verification (RFC 5280's profile), which
Python 3.13's default context holds every chain to: there, a client refused each of them
("Missing Authority Key Identifier"), the playground's API servers and the webhooks' alike."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.serialization import Encoding

from vk.kube.pki import (
    Issued,
    build_ca,
    issue,
    issue_self_signed,
    new_private_key,
    subject_name,
)

NOW = datetime.datetime.now(datetime.UTC)


def pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(Encoding.PEM)


def handshake(tmp_path: Path, served: Issued, trusted: bytes, server_name: str) -> None:
    """A TLS handshake in memory, the client verifying strictly: raises if it refuses."""
    (tmp_path / "tls.crt").write_bytes(served.cert_pem)
    (tmp_path / "tls.key").write_bytes(served.key_pem)
    server_context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    client_context = ssl.create_default_context(cadata=trusted.decode())
    client_context.verify_flags |= ssl.VERIFY_X509_STRICT  # as on Python 3.13, whatever runs this
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    client = client_context.wrap_bio(to_client, to_server, server_hostname=server_name)
    from_client, from_server = ssl.MemoryBIO(), ssl.MemoryBIO()
    server = server_context.wrap_bio(from_client, from_server, server_side=True)
    done = {"client": False, "server": False}
    for _ in range(10):
        for name, side in (("client", client), ("server", server)):
            if not done[name]:
                try:
                    side.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        from_client.write(to_server.read())
        to_client.write(from_server.read())
        if all(done.values()):
            return
    raise AssertionError(f"no handshake: {done}")


def test_a_leaf_of_a_vk_ca_passes_strict_verification(tmp_path: Path) -> None:
    ca, ca_key = build_ca("venice-ca", NOW)
    served = issue(ca, ca_key, "kube-apiserver", NOW, dns_names=("venice",), server=True)
    handshake(tmp_path, served, pem(ca), "venice")


def test_a_self_signed_serving_certificate_passes_strict_verification(tmp_path: Path) -> None:
    served = issue_self_signed("far", NOW, dns_names=("far",))
    handshake(tmp_path, served, served.cert_pem, "far")


def test_a_leaf_of_a_ca_without_its_own_key_identifier_names_it_by_its_key() -> None:
    """A CA made before vk wrote Subject Key Identifiers (an older playground's, kept on disk)
    still issues leaves: each names it by its key's identifier, as RFC 5280 derives one."""
    key = new_private_key()
    name = subject_name("older-ca")
    older = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - datetime.timedelta(minutes=5))
        .not_valid_after(NOW + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    served = issue(older, key, "webhook", NOW, dns_names=("webhook",), server=True)
    leaf = x509.load_pem_x509_certificate(served.cert_pem)
    authority = leaf.extensions.get_extension_for_class(x509.AuthorityKeyIdentifier).value
    expected = x509.SubjectKeyIdentifier.from_public_key(key.public_key()).digest
    assert authority.key_identifier == expected
