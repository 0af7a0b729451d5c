"""Serving certificates from the cluster (issue 5): the virtual kubelet asks, vk's controller
manager approves exactly its own requests, venice signs, and the kubelet port serves it."""

from __future__ import annotations

import base64
import json
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.virtual_kubelets import VirtualNodeSetup
from vk.kubelet.certificates import forge_csr_object, forge_serving_csr

VK = str(Path(sys.executable).parent / "vk")


def served_certificate(port: int) -> x509.Certificate:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    with (
        socket.create_connection(("127.0.0.1", port), timeout=5) as raw,
        context.wrap_socket(raw) as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def test_the_kubelet_port_serves_a_certificate_the_cluster_signed(
    hand_made_virtual_kubelets: Clusters,
    tmp_path: Path,
) -> None:
    setup = VirtualNodeSetup(hand_made_virtual_kubelets, tmp_path)
    try:
        setup.create()
        replica = setup.start()  # --certificate-type kubelet is the default, as in Liqo
        wait_until(setup.ready, "the virtual node Ready")

        def signed_by_venice() -> x509.Certificate | None:
            cert = served_certificate(replica.kubelet_port)
            return cert if cert.issuer.rfc4514_string() == "CN=venice-ca" else None

        cert = wait_until(signed_by_venice, "the cluster-signed serving certificate")
        assert cert.subject.rfc4514_string() == f"CN=system:node:{setup.node},O=system:nodes"
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        assert names.get_values_for_type(x509.DNSName) == [setup.node]
        # Served with it, the kubelet API works as before.
        namespace = setup.local_namespace()
        setup.offload_namespace(namespace)
        setup.apply(setup.deployment("web", namespace, 1))
        pod = setup.running_pod(namespace)
        assert "hello from naples" in setup.kubectl("logs", "-n", namespace, pod).stdout

        # The same identity asking for a name that is not its node's gets nothing.
        _, csr_pem = forge_serving_csr(setup.node, "127.0.0.1")
        bad = forge_csr_object(setup.node, csr_pem, 3600)

        key = ec.generate_private_key(ec.SECP256R1())
        evil = (
            x509.CertificateSigningRequestBuilder()
            .subject_name(
                x509.Name(
                    [
                        x509.NameAttribute(NameOID.ORGANIZATION_NAME, "system:nodes"),
                        x509.NameAttribute(NameOID.COMMON_NAME, f"system:node:{setup.node}"),
                    ]
                )
            )
            .add_extension(
                x509.SubjectAlternativeName(
                    [x509.DNSName(setup.node), x509.DNSName("kubernetes.default")]
                ),
                critical=False,
            )
            .sign(key, hashes.SHA256())
        )
        bad["spec"]["request"] = base64.b64encode(
            evil.public_bytes(serialization.Encoding.PEM)
        ).decode()
        as_the_kubelet = ["kubectl", f"--kubeconfig={setup.service_account_kubeconfig()}"]
        subprocess.run(
            [*as_the_kubelet, "create", "-f", "-"],
            input=json.dumps(bad),
            text=True,
            check=True,
            capture_output=True,
        )
        name = bad["metadata"]["name"]
        time.sleep(5)
        status = json.loads(setup.kubectl("get", "csr", name, "-o", "json").stdout).get(
            "status", {}
        )
        assert not status.get("conditions")  # neither approved nor denied: left alone
        assert not status.get("certificate")
        setup.kubectl("delete", "csr", name)
    finally:
        setup.cleanup()
