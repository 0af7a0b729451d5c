"""The virtual node's kubelet API (issue 5, first steps): kubectl logs, exec, attach and
port-forward on an offloaded pod, through venice's API server, reach the pod in the provider;
requests are authenticated and authorized as the real kubelet does."""

from __future__ import annotations

import hashlib
import json
import os
import select
import socket
import ssl
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.virtual_kubelets import VirtualNodeSetup


@pytest.fixture(scope="module")
def offloaded(
    crds: Clusters,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[VirtualNodeSetup, str, str]]:
    setup = VirtualNodeSetup(crds, tmp_path_factory.mktemp("kubelet"))
    setup.create()
    namespace = setup.local_namespace()
    setup.offload_namespace(namespace)
    setup.start()
    wait_until(setup.ready, "the virtual node Ready")
    setup.apply(setup.deployment("web", namespace, 1))
    pod = wait_until(
        lambda: [
            p["metadata"]["name"]
            for p in setup.pods("venice", namespace, "app=web")
            if p.get("status", {}).get("phase") == "Running"
        ],
        "the pod offloaded and Running",
    )[0]
    yield setup, namespace, pod
    setup.cleanup()


def test_kubectl_logs_come_from_the_provider(offloaded) -> None:  # type: ignore[no-untyped-def]
    setup, namespace, pod = offloaded
    logs = setup.kubectl("logs", "-n", namespace, pod).stdout
    assert logs.splitlines()[0] == "hello from naples"
    last = setup.kubectl("logs", "-n", namespace, pod, "--tail=1", "--timestamps").stdout
    assert last.strip() == "2026-01-01T00:00:02.000000000Z ready"
    assert setup.kubectl("logs", "-n", namespace, pod, "--limit-bytes=5").stdout == "hello"
    assert setup.kubectl("logs", "-n", namespace, pod, "-c", "app").stdout == logs


def test_kubectl_logs_follow_streams_and_ends_on_close(offloaded) -> None:  # type: ignore[no-untyped-def]
    setup, namespace, pod = offloaded
    follow = subprocess.Popen(
        [
            "kubectl",
            f"--kubeconfig={setup.clusters.kubeconfig('venice')}",
            "logs",
            "-f",
            "-n",
            namespace,
            pod,
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert follow.stdout is not None
        assert follow.stdout.readline() == "hello from naples\n"
        time.sleep(1)
        assert follow.poll() is None  # still following
    finally:
        follow.terminate()
        follow.wait(timeout=10)


def test_kubectl_exec_runs_in_the_provider(offloaded) -> None:  # type: ignore[no-untyped-def]
    setup, namespace, pod = offloaded
    echoed = setup.kubectl("exec", "-n", namespace, pod, "--", "echo", "hello", "vk")
    assert echoed.stdout == "hello vk\n"
    where = setup.kubectl(
        "exec",
        "-n",
        namespace,
        pod,
        "--",
        "sh",
        "-c",
        "echo $PLAYGROUND_CLUSTER; echo to-stderr >&2",
    )
    assert where.stdout == "naples\n"  # kwok of naples ran it
    assert "to-stderr" in where.stderr
    failed = setup.kubectl("exec", "-n", namespace, pod, "--", "sh", "-c", "exit 7", check=False)
    assert failed.returncode != 0
    assert "exit status 7" in failed.stderr
    piped = setup.kubectl(
        "exec", "-i", "-n", namespace, pod, "--", "head", "-c", "11", input="hello stdin and more"
    )
    assert piped.stdout == "hello stdin"


def test_kubectl_port_forward_carries_data_intact(offloaded) -> None:  # type: ignore[no-untyped-def]
    setup, namespace, pod = offloaded
    forward = subprocess.Popen(
        [
            "kubectl",
            f"--kubeconfig={setup.clusters.kubeconfig('venice')}",
            "-n",
            namespace,
            "port-forward",
            f"pod/{pod}",
            ":8080",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()
        local_port = int(line.split("127.0.0.1:")[1].split()[0])
        payload = os.urandom(1024 * 1024)
        with socket.create_connection(("127.0.0.1", local_port), timeout=30) as connection:
            connection.sendall(payload)
            received = bytearray()
            while len(received) < len(payload):
                chunk = connection.recv(65536)
                if not chunk:
                    break
                received += chunk
        assert hashlib.sha256(received).digest() == hashlib.sha256(payload).digest()
    finally:
        forward.terminate()
        forward.wait(timeout=10)


def test_kubectl_attach_streams_the_provider_pods_output(offloaded) -> None:  # type: ignore[no-untyped-def]
    setup, namespace, pod = offloaded
    attach = subprocess.Popen(
        [
            "kubectl",
            f"--kubeconfig={setup.clusters.kubeconfig('venice')}",
            "-n",
            namespace,
            "attach",
            pod,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert attach.stdout is not None
        line = f"attached through {setup.node}"
        attach_log = setup.clusters.playground.paths("naples").attach_log
        received, deadline = "", time.monotonic() + 30
        while line not in received and time.monotonic() < deadline:
            with attach_log.open("a") as log:
                log.write(f"2026-01-01T00:01:00.000000000Z stdout F {line}\n")
            ready, _, _ = select.select([attach.stdout], [], [], 1)
            if ready:
                received = attach.stdout.readline()
        assert received == f"{line}\n"
    finally:
        attach.terminate()
        attach.wait(timeout=10)


def kubelet_get(
    port: int, path: str, *, token: str | None = None, cert: tuple[Path, Path] | None = None
) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the kubelet's self-signed serving certificate
    if cert is not None:
        context.load_cert_chain(*cert)
    request = urllib.request.Request(f"https://127.0.0.1:{port}{path}")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def test_kubelet_port_refuses_anonymous_and_unauthorized_callers(offloaded) -> None:  # type: ignore[no-untyped-def]
    setup, namespace, pod = offloaded
    port = setup.replicas[0].kubelet_port
    assert kubelet_get(port, "/healthz")[0] == 401
    assert kubelet_get(port, f"/containerLogs/{namespace}/{pod}/app")[0] == 401
    # A real user of venice, without nodes/proxy: authenticated, then forbidden.
    account = f"nobody-{setup.node}"
    setup.kubectl("create", "serviceaccount", account, "-n", namespace)
    token = setup.kubectl("create", "token", account, "-n", namespace).stdout.strip()
    code, body = kubelet_get(port, f"/containerLogs/{namespace}/{pod}/app", token=token)
    assert code == 403
    assert "cannot get nodes/proxy" in json.loads(body)["message"]
    # The API server's own client certificate is let in.
    pki = setup.clusters.playground.paths("venice").pki
    cert = (pki.path("apiserver-kubelet-client.crt"), pki.path("apiserver-kubelet-client.key"))
    code, body = kubelet_get(port, "/pods", cert=cert)
    assert code == 200
    assert [p["metadata"]["name"] for p in json.loads(body)["items"]] == [pod]
    code, body = kubelet_get(port, "/containerLogs/default/not-offloaded/c", cert=cert)
    assert code == 404
    assert "is not offloaded by the virtual node" in json.loads(body)["message"]
