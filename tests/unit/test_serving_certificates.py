"""The virtual kubelet's serving certificate: what it asks for, when it renews, and which
requests vk's approver accepts."""

from __future__ import annotations

import base64
import datetime

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from vk.controllers.csr import serving_csr_verdict
from vk.kubelet.certificates import (
    csr_outcome,
    forge_csr_object,
    forge_serving_csr,
    renewal_time,
)


def test_the_request_names_the_node_in_system_nodes_with_its_name_and_ip() -> None:
    _, csr_pem = forge_serving_csr("naples", "127.0.0.1")
    request = x509.load_pem_x509_csr(csr_pem)
    assert request.subject.rfc4514_string() == "CN=system:node:naples,O=system:nodes"
    names = request.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert names.get_values_for_type(x509.DNSName) == ["naples"]
    assert [str(ip) for ip in names.get_values_for_type(x509.IPAddress)] == ["127.0.0.1"]
    csr = forge_csr_object("naples", csr_pem, 3600)
    assert csr["spec"]["signerName"] == "kubernetes.io/kubelet-serving"
    assert csr["spec"]["usages"] == ["digital signature", "server auth"]


def certificate(start: datetime.datetime, days: int) -> bytes:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "x")])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(1)
        .not_valid_before(start)
        .not_valid_after(start + datetime.timedelta(days=days))
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM)


def test_renewal_comes_at_four_fifths_of_the_lifetime() -> None:
    start = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    assert renewal_time(certificate(start, 10)) == start + datetime.timedelta(days=8)
    # A short-lived certificate is renewed well before it expires, too.
    short = certificate(start, 1)
    assert renewal_time(short) == start + datetime.timedelta(hours=19, minutes=12)


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        ({}, "Pending"),
        ({"conditions": [{"type": "Approved", "status": "True"}]}, "Pending"),
        ({"conditions": [{"type": "Denied", "status": "True"}]}, "Denied"),
        ({"conditions": [{"type": "Failed", "status": "True"}]}, "Failed"),
        ({"certificate": base64.b64encode(b"PEM").decode()}, "Issued"),
    ],
)
def test_the_outcome_of_a_request(status: dict, outcome: str) -> None:
    assert csr_outcome({"status": status})[0] == outcome


def request(
    cn: str = "system:node:naples",
    org: str = "system:nodes",
    dns: tuple[str, ...] = ("naples",),
    ips: tuple[str, ...] = ("127.0.0.1",),
    username: str = "system:serviceaccount:liqo-tenant-naples:vk-naples",
    usages: tuple[str, ...] = ("digital signature", "server auth"),
) -> dict:
    import ipaddress

    key = ec.generate_private_key(ec.SECP256R1())
    names: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
    names += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
    builder = x509.CertificateSigningRequestBuilder().subject_name(
        x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, org),
                x509.NameAttribute(NameOID.COMMON_NAME, cn),
            ]
        )
    )
    if names:
        builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
    pem = builder.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return {
        "spec": {
            "signerName": "kubernetes.io/kubelet-serving",
            "username": username,
            "usages": list(usages),
            "request": base64.b64encode(pem).decode(),
        }
    }


VIRTUAL_NODES = {"naples": "liqo-tenant-naples"}
NODE_IPS = {"naples": {"127.0.0.1"}}


@pytest.mark.parametrize(
    ("csr", "refusal"),
    [
        (request(), None),
        (request(dns=("naples", "evil.example")), "are not only the node's"),
        (request(ips=("10.0.0.9",)), "are not only the node's"),
        (request(dns=(), ips=()), "names no host"),
        (request(cn="system:node:florence"), "not a virtual node vk manages"),
        (request(cn="admin"), "is not system:node:<node>"),
        (request(org="system:masters"), "not exactly system:nodes"),
        (request(username="system:serviceaccount:default:vk-naples"), "requested by"),
        (request(usages=("digital signature", "client auth")), "usages"),
    ],
)
def test_only_a_virtual_kubelets_own_request_is_approved(csr: dict, refusal: str | None) -> None:
    verdict = serving_csr_verdict(csr, VIRTUAL_NODES, NODE_IPS)
    if refusal is None:
        assert verdict is None
    else:
        assert verdict is not None
        assert refusal in verdict
