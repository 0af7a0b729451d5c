"""What the unit tests of HTTPS servers on loopback serve with."""

from __future__ import annotations

import datetime
from pathlib import Path

from cryptography.hazmat.primitives import serialization

from vk.kube.pki import build_ca, issue


def loopback_serving_certificate(directory: Path) -> tuple[Path, Path, bytes]:
    """A certificate for 127.0.0.1 and its key, written into `directory`, and its CA's PEM."""
    now = datetime.datetime.now(datetime.UTC)
    ca, ca_key = build_ca("test-ca", now)
    leaf = issue(ca, ca_key, "vk-webhook", now, ip_addresses=("127.0.0.1",), server=True)
    cert, key = directory / "tls.crt", directory / "tls.key"
    cert.write_bytes(leaf.cert_pem)
    key.write_bytes(leaf.key_pem)
    return cert, key, ca.public_bytes(serialization.Encoding.PEM)
