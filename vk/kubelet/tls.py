"""Client certificates taken as the kubelet takes them: asked for in the handshake, verified
after it, so that a certificate from another CA gets the kubelet's HTTP 401 rather than a TLS
alert that tells the caller nothing.

Go's kubelet serves with `tls.RequestClientCert` and checks the certificate in its x509
authenticator. Python's ssl module verifies whatever it asks for and aborts the handshake when
that fails, and does not expose OpenSSL's verify callback. So the callback is installed through
ctypes on the SSL_CTX the context wraps, accepting every chain, and `user_from_certificate`
does the verification, against the client CA, for each request. Where that cannot be done
(no libssl found in this process, or the context does not look as expected), the context keeps
verifying in the handshake: foreign certificates are then refused by TLS, never let in.
"""

from __future__ import annotations

import ctypes
import datetime
import ssl
from pathlib import Path

import structlog
from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from vk.kubelet.auth import User

log = structlog.get_logger("vk.kubelet.tls")

SSL_VERIFY_PEER = 0x01

_VerifyCallback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
# Accepts the chain whatever OpenSSL found (`user_from_certificate` decides). Kept at module
# level: OpenSSL holds the pointer for the context's life.
_ACCEPT_ANY_CHAIN = _VerifyCallback(lambda preverified, store: 1)


def _loaded_libssl() -> ctypes.CDLL | None:
    """The libssl this process already has loaded for the ssl module (the very one whose
    SSL_CTX we touch), found in the process's memory map."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split()[-1]
        if Path(path).name.startswith("libssl.so"):
            return ctypes.CDLL(path)
    return None


def verify_client_certificates_after_handshake(context: ssl.SSLContext) -> bool:
    """Makes `context` (a server context with CERT_OPTIONAL) accept any client certificate in
    the handshake. True when done; False leaves it verifying in the handshake."""
    libssl = _loaded_libssl()
    if libssl is None:
        log.warning("libssl not found: client certificates from another CA fail in TLS")
        return False
    libssl.SSL_CTX_get_verify_mode.restype = ctypes.c_int
    libssl.SSL_CTX_get_verify_mode.argtypes = [ctypes.c_void_p]
    libssl.SSL_CTX_get_options.restype = ctypes.c_uint64
    libssl.SSL_CTX_get_options.argtypes = [ctypes.c_void_p]
    libssl.SSL_CTX_set_verify.restype = None
    libssl.SSL_CTX_set_verify.argtypes = [ctypes.c_void_p, ctypes.c_int, _VerifyCallback]
    # CPython's SSLContext object is its object header followed by the SSL_CTX pointer.
    ssl_ctx = ctypes.c_void_p.from_address(id(context) + object.__basicsize__).value
    looks_right = (
        ssl_ctx is not None
        and libssl.SSL_CTX_get_options(ssl_ctx) == int(context.options)
        and libssl.SSL_CTX_get_verify_mode(ssl_ctx) == SSL_VERIFY_PEER
        and context.verify_mode == ssl.CERT_OPTIONAL
    )
    if not looks_right:
        log.warning("SSLContext not as expected: client certificates verified in TLS")
        return False
    libssl.SSL_CTX_set_verify(ssl_ctx, SSL_VERIFY_PEER, _ACCEPT_ANY_CHAIN)
    return True


def load_client_cas(pem: str) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(pem.encode())


def user_from_certificate(
    der: bytes | None, client_cas: list[x509.Certificate], now: datetime.datetime
) -> User | None:
    """The user a client certificate names (CN the user, O the groups), if it is valid now,
    meant for client authentication, and signed by one of the client CAs; else None.

    Only the leaf travels to us (Python 3.11 cannot show the peer's chain), so it must be
    signed by a client CA itself, as every kubeadm-style cluster issues them."""
    if not der:
        return None
    try:
        cert = x509.load_der_x509_certificate(der)
    except ValueError:
        return None
    if not cert.not_valid_before_utc <= now <= cert.not_valid_after_utc:
        return None
    try:
        usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
        if ExtendedKeyUsageOID.CLIENT_AUTH not in usages:
            return None
    except x509.ExtensionNotFound:
        pass  # no restriction on its use, as Go reads it
    if not any(_issued_by(cert, ca, now) for ca in client_cas):
        return None
    names = cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    if not names:
        return None
    groups = tuple(
        str(a.value) for a in cert.subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)
    )
    return User(str(names[0].value), groups)


def _issued_by(cert: x509.Certificate, ca: x509.Certificate, now: datetime.datetime) -> bool:
    if cert.issuer != ca.subject or not ca.not_valid_before_utc <= now <= ca.not_valid_after_utc:
        return False
    try:
        cert.verify_directly_issued_by(ca)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True
