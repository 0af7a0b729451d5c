"""The playground's clusters are real Kubernetes: workloads run on kwok nodes, the kubelet API
answers through the API server, the scheduler and controller-manager do their jobs."""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import subprocess
from collections.abc import Iterator

import pytest
import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.streams import attached_line, forwarded_port
from vk.kube.kubeconfig import load_kubeconfig_file
from vk.kube.pki import forge_kubeconfig


@pytest.fixture
def naples_namespace(clusters: Clusters, namespace_name: str) -> Iterator[str]:
    clusters.kubectl("naples", "create", "namespace", namespace_name)
    yield namespace_name
    clusters.kubectl("naples", "delete", "namespace", namespace_name, "--wait=false")


@pytest.fixture
def naples_deployment(clusters: Clusters, naples_namespace: str) -> list[dict]:
    clusters.kubectl(
        "naples",
        "-n",
        naples_namespace,
        "create",
        "deployment",
        "web",
        "--image=nginx",
        "--replicas=3",
    )
    clusters.kubectl(
        "naples", "-n", naples_namespace, "rollout", "status", "deployment/web", "--timeout=60s"
    )
    pods = json.loads(
        clusters.kubectl(
            "naples", "-n", naples_namespace, "get", "pods", "-l", "app=web", "-o", "json"
        ).stdout
    )["items"]
    return pods


def test_deployment_in_naples_runs_on_its_kwok_nodes(naples_deployment: list[dict]) -> None:
    assert len(naples_deployment) == 3
    for pod in naples_deployment:
        assert pod["status"]["phase"] == "Running"
        assert pod["spec"]["nodeName"] in {"naples-worker-1", "naples-worker-2"}
        assert pod["status"]["podIP"].startswith("10.246.")  # naples' own pod CIDR


def test_kubectl_logs_returns_kwok_output_through_the_api_server(
    clusters: Clusters, naples_namespace: str, naples_deployment: list[dict]
) -> None:
    pod = naples_deployment[0]["metadata"]["name"]
    logs = clusters.kubectl("naples", "-n", naples_namespace, "logs", pod).stdout
    assert logs.splitlines()[0] == "hello from naples"
    stamped = clusters.kubectl(
        "naples", "-n", naples_namespace, "logs", pod, "--timestamps", "--tail=1"
    ).stdout
    assert stamped.strip() == "2026-01-01T00:00:02.000000000Z ready"


def test_kubectl_exec_returns_output_and_exit_code(
    clusters: Clusters, naples_namespace: str, naples_deployment: list[dict]
) -> None:
    pod = naples_deployment[0]["metadata"]["name"]
    echoed = clusters.kubectl(
        "naples", "-n", naples_namespace, "exec", pod, "--", "echo", "hello", "vk"
    )
    assert echoed.stdout == "hello vk\n"
    env = clusters.kubectl(
        "naples", "-n", naples_namespace, "exec", pod, "--", "sh", "-c", "echo $PLAYGROUND_CLUSTER"
    )
    assert env.stdout == "naples\n"
    failed = clusters.kubectl(
        "naples",
        "-n",
        naples_namespace,
        "exec",
        pod,
        "--",
        "sh",
        "-c",
        "echo oops >&2; exit 7",
        check=False,
    )
    assert failed.returncode != 0
    assert "oops" in failed.stderr
    assert "exit status 7" in failed.stderr or "exit code 7" in failed.stderr


def test_kubectl_attach_streams_the_pod_output(
    clusters: Clusters, naples_namespace: str, naples_deployment: list[dict]
) -> None:
    pod = naples_deployment[0]["metadata"]["name"]
    # Attached, kubectl streams what the container writes from then on, until it ends (never,
    # for a simulated one). The test plays the container: it writes a line, then detaches.
    line = f"attached to {pod}"
    attach_log = clusters.playground.paths("naples").attach_log
    shown = attached_line(clusters.kubeconfig("naples"), naples_namespace, pod, attach_log, line)
    assert shown == f"{line}\n"


def test_kubectl_port_forward_reaches_the_pod(
    clusters: Clusters, naples_namespace: str, naples_deployment: list[dict]
) -> None:
    pod = naples_deployment[0]["metadata"]["name"]
    payload = os.urandom(256 * 1024)
    with (
        forwarded_port(clusters.kubeconfig("naples"), naples_namespace, pod) as local_port,
        socket.create_connection(("127.0.0.1", local_port), timeout=20) as connection,
    ):
        connection.sendall(payload)
        connection.shutdown(socket.SHUT_WR)
        received = bytearray()
        while len(received) < len(payload):
            chunk = connection.recv(65536)
            if not chunk:
                break
            received += chunk
    # The playground's simulated pods answer every port with an echo.
    assert hashlib.sha256(received).hexdigest() == hashlib.sha256(payload).hexdigest()


def test_pod_nobody_can_host_stays_pending_with_failed_scheduling(
    clusters: Clusters, naples_namespace: str
) -> None:
    clusters.kubectl(
        "naples",
        "-n",
        naples_namespace,
        "run",
        "nowhere",
        "--image=nginx",
        "--overrides",
        json.dumps({"spec": {"nodeSelector": {"no-such": "node"}}}),
    )

    def failed_scheduling_event() -> list[dict]:
        events = json.loads(
            clusters.kubectl(
                "naples",
                "-n",
                naples_namespace,
                "get",
                "events",
                "-o",
                "json",
                "--field-selector",
                "involvedObject.name=nowhere,reason=FailedScheduling",
            ).stdout
        )
        return events["items"]

    events = wait_until(failed_scheduling_event, "a FailedScheduling event")
    assert "didn't match Pod's node affinity/selector" in events[0]["message"]
    phase = clusters.kubectl(
        "naples", "-n", naples_namespace, "get", "pod", "nowhere", "-o", "jsonpath={.status.phase}"
    ).stdout
    assert phase == "Pending"


def test_new_namespace_gets_default_service_account_and_root_ca(
    clusters: Clusters, naples_namespace: str
) -> None:
    wait_until(
        lambda: (
            clusters.kubectl(
                "naples", "-n", naples_namespace, "get", "serviceaccount", "default", check=False
            ).returncode
            == 0
        ),
        "the default ServiceAccount",
    )
    ca = wait_until(
        lambda: (
            clusters.kubectl(
                "naples",
                "-n",
                naples_namespace,
                "get",
                "configmap",
                "kube-root-ca.crt",
                "-o",
                "jsonpath={.data.ca\\.crt}",
                check=False,
            ).stdout
        ),
        "kube-root-ca.crt",
    )
    assert ca.startswith("-----BEGIN CERTIFICATE-----")


def test_approved_csr_gets_a_certificate_that_authenticates(
    clusters: Clusters, namespace_name: str, tmp_path
) -> None:
    key = ec.generate_private_key(ec.SECP256R1())
    user = f"csr-user-{namespace_name}"
    request = (
        x509.CertificateSigningRequestBuilder()
        .subject_name(
            x509.Name(
                [
                    x509.NameAttribute(NameOID.COMMON_NAME, user),
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "vk-tests"),
                ]
            )
        )
        .sign(key, hashes.SHA256())
    )
    csr = {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": user},
        "spec": {
            "request": base64.b64encode(request.public_bytes(serialization.Encoding.PEM)).decode(),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["client auth"],
            "expirationSeconds": 3600,
        },
    }
    clusters.kubectl("florence", "apply", "-f", "-", input=json.dumps(csr))
    try:
        clusters.kubectl("florence", "certificate", "approve", user)
        certificate = wait_until(
            lambda: (
                clusters.kubectl(
                    "florence", "get", "csr", user, "-o", "jsonpath={.status.certificate}"
                ).stdout
            ),
            "the signed certificate",
        )
        admin = load_kubeconfig_file(clusters.kubeconfig("florence"))
        assert admin.ca_pem is not None
        user_kubeconfig = tmp_path / "user.kubeconfig"
        user_kubeconfig.write_text(
            yaml.safe_dump(
                forge_kubeconfig(
                    "florence",
                    admin.server,
                    admin.ca_pem,
                    base64.b64decode(certificate),
                    key.private_bytes(
                        serialization.Encoding.PEM,
                        serialization.PrivateFormat.PKCS8,
                        serialization.NoEncryption(),
                    ),
                    user,
                )
            )
        )
        whoami = subprocess.run(
            [
                "kubectl",
                f"--kubeconfig={user_kubeconfig}",
                "auth",
                "whoami",
                "-o",
                "jsonpath={.status.userInfo.username}",
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        assert whoami.stdout == user
    finally:
        clusters.kubectl("florence", "delete", "csr", user, "--ignore-not-found")
