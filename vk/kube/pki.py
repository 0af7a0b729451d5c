"""Keys, certificate signing requests and client kubeconfigs: what an identity issued through a
cluster's CSR API is made of. Pure: bytes in, bytes out."""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

PrivateKey = ec.EllipticCurvePrivateKey
VALIDITY = datetime.timedelta(days=365)


def new_private_key() -> PrivateKey:
    # P-256: instant to generate, accepted by every Kubernetes signer.
    return ec.generate_private_key(ec.SECP256R1())


def private_key_pem(key: PrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def public_key_pem(key: PrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def load_private_key(pem: bytes) -> PrivateKey:
    key = serialization.load_pem_private_key(pem, None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        raise ValueError("not an EC private key")
    return key


def subject_name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attributes)


def forge_client_csr(key: PrivateKey, common_name: str, organizations: tuple[str, ...]) -> bytes:
    """A PEM request for a client certificate: CN the user, O the groups."""
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(subject_name(common_name, organizations))
        .sign(key, hashes.SHA256())
    )
    return request.public_bytes(serialization.Encoding.PEM)


def csr_subject(csr_pem: bytes) -> tuple[str, tuple[str, ...]]:
    """(CN, O...) of a PEM request; ValueError when it does not parse or has no single CN."""
    request = x509.load_pem_x509_csr(csr_pem)
    if not request.is_signature_valid:
        raise ValueError("the request's signature is not valid")
    names = request.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if len(names) != 1:
        raise ValueError("the request must name exactly one common name")
    organizations = request.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    return str(names[0].value), tuple(str(o.value) for o in organizations)


def csr_matches_key(csr_pem: bytes, key: PrivateKey) -> bool:
    try:
        request = x509.load_pem_x509_csr(csr_pem)
    except ValueError:
        return False
    return _public_bytes(request.public_key()) == _public_bytes(key.public_key())


def certificate_matches_key(cert_pem: bytes, key: PrivateKey) -> bool:
    try:
        cert = x509.load_pem_x509_certificate(cert_pem)
    except ValueError:
        return False
    return _public_bytes(cert.public_key()) == _public_bytes(key.public_key())


def _public_bytes(public_key: Any) -> bytes:
    data: bytes = public_key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return data


def forge_kubeconfig(
    cluster_name: str, server: str, ca_pem: bytes, cert_pem: bytes, key_pem: bytes, user: str
) -> dict[str, Any]:
    """A self-contained kubeconfig (certificates inline): it can be copied anywhere."""

    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode()

    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {
                "name": cluster_name,
                "cluster": {"server": server, "certificate-authority-data": b64(ca_pem)},
            }
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate-data": b64(cert_pem), "client-key-data": b64(key_pem)},
            }
        ],
        "contexts": [{"name": cluster_name, "context": {"cluster": cluster_name, "user": user}}],
        "current-context": cluster_name,
    }


@dataclass(frozen=True)
class Issued:
    cert_pem: bytes
    key_pem: bytes


def build_ca(
    common_name: str, now: datetime.datetime, validity: datetime.timedelta = 10 * VALIDITY
) -> tuple[x509.Certificate, PrivateKey]:
    """A self-signed CA certificate and its key."""
    key = new_private_key()
    name = subject_name(common_name)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                key_cert_sign=True,
                crl_sign=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def issue(
    ca: x509.Certificate,
    ca_key: PrivateKey,
    common_name: str,
    now: datetime.datetime,
    *,
    organizations: tuple[str, ...] = (),
    dns_names: tuple[str, ...] = (),
    ip_addresses: tuple[str, ...] = (),
    server: bool = False,
    client: bool = False,
    validity: datetime.timedelta = VALIDITY,
) -> Issued:
    """A leaf certificate signed by `ca`, for serving, for client authentication, or both."""
    key = new_private_key()
    builder = _leaf(
        key,
        subject_name(common_name, organizations),
        ca.subject,
        _authority_key_identifier(ca),
        now,
        dns_names=dns_names,
        ip_addresses=ip_addresses,
        server=server,
        client=client,
        validity=validity,
    )
    cert = builder.sign(ca_key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM), private_key_pem(key))


def issue_self_signed(
    common_name: str,
    now: datetime.datetime,
    *,
    organizations: tuple[str, ...] = (),
    dns_names: tuple[str, ...] = (),
    ip_addresses: tuple[str, ...] = (),
) -> Issued:
    """A serving certificate that signs itself (a kubelet with no CA to ask)."""
    key = new_private_key()
    subject = subject_name(common_name, organizations)
    builder = _leaf(
        key,
        subject,
        subject,
        x509.AuthorityKeyIdentifier.from_issuer_public_key(key.public_key()),
        now,
        dns_names=dns_names,
        ip_addresses=ip_addresses,
        server=True,
        client=False,
        validity=VALIDITY,
    )
    cert = builder.sign(key, hashes.SHA256())
    return Issued(cert.public_bytes(serialization.Encoding.PEM), private_key_pem(key))


def _authority_key_identifier(ca: x509.Certificate) -> x509.AuthorityKeyIdentifier:
    """What names `ca` in the certificates it signs: its own Subject Key Identifier, or one
    derived from its key if it has none (a CA made before vk wrote one)."""
    try:
        own = ca.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    except x509.ExtensionNotFound:
        # A CA's key signs, so it is none of the kinds the type also names that cannot
        # (X25519, X448), which from_issuer_public_key does not take.
        return x509.AuthorityKeyIdentifier.from_issuer_public_key(ca.public_key())  # type: ignore[arg-type]
    return x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(own)


def _leaf(
    key: PrivateKey,
    subject: x509.Name,
    issuer: x509.Name,
    authority: x509.AuthorityKeyIdentifier,
    now: datetime.datetime,
    *,
    dns_names: tuple[str, ...],
    ip_addresses: tuple[str, ...],
    server: bool,
    client: bool,
    validity: datetime.timedelta,
) -> x509.CertificateBuilder:
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + validity)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        # RFC 5280 §4.2.1.1-2, which OpenSSL's strict verification (Python 3.13's default
        # context) holds a chain to: without them, a client on 3.13 refused every certificate
        # vk made (its playground's API servers, its webhooks').
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(authority, critical=False)
    )
    alt_names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
    alt_names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
    if alt_names:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
    return builder
