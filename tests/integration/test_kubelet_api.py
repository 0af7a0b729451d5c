"""The virtual node's kubelet API (issue 5, first steps): kubectl logs, exec, attach and
port-forward on an offloaded pod, through venice's API server, reach the pod in the provider;
requests are authenticated and authorized as the real kubelet does."""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import hashlib
import json
import os
import pty
import select
import signal
import socket
import ssl
import struct
import subprocess
import termios
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import Clusters
from tests.integration.kubeconfigs import token_kubeconfig
from tests.integration.polling import wait_until
from tests.integration.streams import attached_line, forwarded_port
from tests.integration.virtual_kubelets import Offloaded, VirtualNodeSetup
from vk.controllers.provider_namespacemaps import VIRTUAL_KUBELET_REMOTE_ROLE


@pytest.fixture(scope="module")
def offloaded(
    hand_made_virtual_kubelets: Clusters,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[VirtualNodeSetup, str, str]]:
    setup = VirtualNodeSetup(hand_made_virtual_kubelets, tmp_path_factory.mktemp("kubelet"))
    setup.create()
    namespace = setup.local_namespace()
    setup.offload_namespace(namespace)
    setup.start()
    wait_until(setup.ready, "the virtual node Ready")
    setup.apply(setup.deployment("web", namespace, 1))
    pod = setup.running_pod(namespace)
    yield setup, namespace, pod
    setup.cleanup()


def test_kubectl_logs_come_from_the_provider(offloaded: Offloaded) -> None:
    setup, namespace, pod = offloaded
    logs = setup.kubectl("logs", "-n", namespace, pod).stdout
    assert logs.splitlines()[0] == "hello from naples"
    last = setup.kubectl("logs", "-n", namespace, pod, "--tail=1", "--timestamps").stdout
    assert last.strip() == "2026-01-01T00:00:02.000000000Z ready"
    assert setup.kubectl("logs", "-n", namespace, pod, "--limit-bytes=5").stdout == "hello"
    assert setup.kubectl("logs", "-n", namespace, pod, "-c", "app").stdout == logs


def test_kubectl_logs_follow_streams_and_ends_on_close(offloaded: Offloaded) -> None:
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


def test_kubectl_exec_runs_in_the_provider(offloaded: Offloaded) -> None:
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


def test_kubectl_port_forward_carries_data_intact(offloaded: Offloaded) -> None:
    setup, namespace, pod = offloaded
    payload = os.urandom(1024 * 1024)
    with (
        forwarded_port(setup.clusters.kubeconfig("venice"), namespace, pod) as local_port,
        socket.create_connection(("127.0.0.1", local_port), timeout=30) as connection,
    ):
        connection.sendall(payload)
        received = bytearray()
        while len(received) < len(payload):
            chunk = connection.recv(65536)
            if not chunk:
                break
            received += chunk
    assert hashlib.sha256(received).digest() == hashlib.sha256(payload).digest()


def test_kubectl_attach_streams_the_provider_pods_output(offloaded: Offloaded) -> None:
    setup, namespace, pod = offloaded
    line = f"attached through {setup.node}"
    attach_log = setup.clusters.playground.paths("naples").attach_log
    shown = attached_line(setup.clusters.kubeconfig("venice"), namespace, pod, attach_log, line)
    assert shown == f"{line}\n"


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


def test_kubelet_port_refuses_anonymous_and_unauthorized_callers(offloaded: Offloaded) -> None:
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
    # A certificate of another cluster's CA (naples's administrator): not a user here.
    naples = setup.clusters.playground.paths("naples").pki
    foreign = (naples.path("admin.crt"), naples.path("admin.key"))
    code, body = kubelet_get(port, f"/containerLogs/{namespace}/{pod}/app", cert=foreign)
    assert (code, json.loads(body)["reason"]) == (401, "Unauthorized")
    # The API server's own client certificate is let in.
    pki = setup.clusters.playground.paths("venice").pki
    cert = (pki.path("apiserver-kubelet-client.crt"), pki.path("apiserver-kubelet-client.key"))
    code, body = kubelet_get(port, "/pods", cert=cert)
    assert code == 200
    assert [p["metadata"]["name"] for p in json.loads(body)["items"]] == [pod]
    code, body = kubelet_get(port, "/containerLogs/default/not-offloaded/c", cert=cert)
    assert code == 404
    assert "is not offloaded by the virtual node" in json.loads(body)["message"]


def api_server_certificate(setup: VirtualNodeSetup) -> tuple[Path, Path]:
    """The client certificate venice's API server presents to kubelets."""
    pki = setup.clusters.playground.paths("venice").pki
    return pki.path("apiserver-kubelet-client.crt"), pki.path("apiserver-kubelet-client.key")


def tls_connection(
    port: int, cert: tuple[Path, Path] | None = None, source: tuple[str, int] | None = None
) -> ssl.SSLSocket:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    if cert is not None:
        context.load_cert_chain(*cert)
    raw = socket.create_connection(("127.0.0.1", port), timeout=10, source_address=source)
    return context.wrap_socket(raw)


def read_to_close(connection: socket.socket, limit: float = 15.0) -> bytes:
    """What the other side sends until it closes (within `limit` seconds)."""
    connection.settimeout(limit)
    received = b""
    with contextlib.suppress(ConnectionError, ssl.SSLError):
        while chunk := connection.recv(65536):
            received += chunk
    return received


def test_the_kubelet_port_closes_slow_and_oversized_request_heads(offloaded: Offloaded) -> None:
    setup, _, _ = offloaded
    port = setup.replicas[0].kubelet_port
    # Slowloris: connections that start a head and never finish it, no credentials.
    slow = [tls_connection(port) for _ in range(20)]
    for connection in slow:
        connection.sendall(b"GET /pods HTTP/1.1\r\nX-Slow: ")
    oversized = tls_connection(port)
    oversized.sendall(b"GET /pods HTTP/1.1\r\n" + b"X-Big: " + b"a" * 64 * 1024)
    started = time.monotonic()
    assert read_to_close(oversized, 5) == b""  # closed at once, unanswered
    # Meanwhile the port serves.
    assert kubelet_get(port, "/pods", cert=api_server_certificate(setup))[0] == 200
    for connection in slow:
        assert read_to_close(connection) == b""
    closed_after = time.monotonic() - started
    assert closed_after < 13, f"slow heads closed after {closed_after:.1f} s"
    for connection in [*slow, oversized]:
        connection.close()


def test_connections_beyond_one_sources_cap_are_closed_before_tls(offloaded: Offloaded) -> None:
    setup, _, _ = offloaded
    port = setup.replicas[0].kubelet_port
    # From another address than the API server's, as a pod elsewhere would attack.
    attacker = ("127.0.0.2", 0)
    idle = [
        socket.create_connection(("127.0.0.1", port), timeout=10, source_address=attacker)
        for _ in range(128)
    ]
    try:
        time.sleep(0.5)
        with pytest.raises((ssl.SSLError, ConnectionError, OSError)):
            tls_connection(port, source=attacker).close()  # the 129th: closed before TLS
        # The API server's address is served all the while.
        assert kubelet_get(port, "/pods", cert=api_server_certificate(setup))[0] == 200
        # The idle ones never sent a ClientHello: closed after the handshake's deadline.
        for connection in idle:
            assert read_to_close(connection, 10) == b""
        tls_connection(port, source=attacker).close()  # and the address may connect again
    finally:
        for connection in idle:
            connection.close()


def test_nothing_rides_the_providers_connection_after_a_plain_request(
    offloaded: Offloaded,
) -> None:
    setup, namespace, pod = offloaded
    port = setup.replicas[0].kubelet_port
    with tls_connection(port, api_server_certificate(setup)) as connection:
        # A logs request posing as an upgrade, and a second request pipelined behind it: were
        # the first relayed as an upgrade, the second would reach the provider as the tenant.
        connection.sendall(
            f"GET /containerLogs/{namespace}/{pod}/app HTTP/1.1\r\nHost: x\r\n"
            "Connection: Upgrade\r\nUpgrade: SPDY/3.1\r\n\r\n"
            f"GET /api/v1/namespaces/{namespace}-venice/pods HTTP/1.1\r\nHost: x\r\n\r\n".encode()
        )
        answer = read_to_close(connection)
    assert answer.startswith(b"HTTP/1.1 200 ")
    assert b"hello from naples" in answer
    assert answer.count(b"HTTP/1.1 ") == 1, answer[-2000:]
    assert b"PodList" not in answer


def test_an_unknown_method_gets_405(offloaded: Offloaded) -> None:
    setup, _, _ = offloaded
    port = setup.replicas[0].kubelet_port
    with tls_connection(port, api_server_certificate(setup)) as connection:
        connection.sendall(b"BREW /pods HTTP/1.1\r\nHost: x\r\n\r\n")
        assert read_to_close(connection).startswith(b"HTTP/1.1 405 ")


def test_a_client_ca_added_or_removed_is_followed_without_a_restart(offloaded: Offloaded) -> None:
    setup, _, _ = offloaded
    port = setup.replicas[0].kubelet_port
    naples = setup.clusters.playground.paths("naples").pki
    foreign = (naples.path("admin.crt"), naples.path("admin.key"))
    assert kubelet_get(port, "/pods", cert=foreign)[0] == 401
    configmap = ("configmap", "extension-apiserver-authentication", "-n", "kube-system")
    original = json.loads(setup.kubectl("get", *configmap, "-o", "json").stdout)["data"][
        "client-ca-file"
    ]

    def write(bundle: str) -> None:
        setup.kubectl("patch", *configmap, "--type=merge",
                      "-p", json.dumps({"data": {"client-ca-file": bundle}}))  # fmt: skip

    try:
        # venice trusts naples' CA for clients too (a rotation's first step): naples' admin,
        # in system:masters, is let in.
        write(original + naples.ca_crt.read_text())
        wait_until(lambda: kubelet_get(port, "/pods", cert=foreign)[0] == 200, "the new CA")
    finally:
        write(original)
    wait_until(lambda: kubelet_get(port, "/pods", cert=foreign)[0] == 401, "the CA removed")
    assert kubelet_get(port, "/pods", cert=api_server_certificate(setup))[0] == 200
    assert setup.replicas[0].process.poll() is None


def test_kubectl_exec_with_a_terminal_follows_its_resizes(offloaded: Offloaded) -> None:
    setup, namespace, pod = offloaded
    controller, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 33, 111, 0, 0))
    exec_ = subprocess.Popen(
        [
            "kubectl",
            f"--kubeconfig={setup.clusters.kubeconfig('venice')}",
            "-n",
            namespace,
            "exec",
            "-it",
            pod,
            "--",
            "sh",
            "-c",
            # The first size comes on its own stream, after the command starts (as with a
            # kubelet's exec): waited for, then the resize.
            'while [ "$(stty size)" = "0 0" ]; do sleep 0.1; done; stty size; sleep 2; stty size',
        ],
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
    )
    output = b""

    def read_until(wanted: bytes) -> None:
        nonlocal output
        deadline = time.monotonic() + 20
        while wanted not in output and time.monotonic() < deadline:
            ready, _, _ = select.select([controller], [], [], 0.5)
            if ready:
                output += os.read(controller, 4096)

    try:
        # Resized once the first size is printed (however long the exec took to start), while
        # the command sleeps before printing it again.
        read_until(b"33 111")
        fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 44, 122, 0, 0))
        exec_.send_signal(signal.SIGWINCH)
        read_until(b"44 122")
    finally:
        exec_.wait(timeout=20)
        os.close(controller)
        os.close(terminal)
    assert output.split() == [b"33", b"111", b"44", b"122"]


def test_kubectl_cp_copies_a_file_out_of_the_pod(offloaded: Offloaded, tmp_path: Path) -> None:
    setup, namespace, pod = offloaded
    # kwok runs a simulated container's commands in the cluster's scratch directory.
    content = os.urandom(64 * 1024)
    source = setup.clusters.playground.paths("naples").kwok_dir / "exec" / f"{setup.node}.bin"
    source.write_bytes(content)
    target = tmp_path / "copied.bin"
    setup.kubectl("cp", f"{namespace}/{pod}:{source.name}", str(target))
    assert target.read_bytes() == content


def test_two_port_forward_connections_at_once(offloaded: Offloaded) -> None:
    setup, namespace, pod = offloaded
    with forwarded_port(setup.clusters.kubeconfig("venice"), namespace, pod) as local_port:
        first = socket.create_connection(("127.0.0.1", local_port), timeout=20)
        second = socket.create_connection(("127.0.0.1", local_port), timeout=20)
        with first, second:
            first.sendall(b"first connection")
            second.sendall(b"second connection")
            assert second.recv(100) == b"second connection"
            assert first.recv(100) == b"first connection"


async def test_python_client_exec_over_websocket(offloaded: Offloaded) -> None:
    setup, namespace, pod = offloaded
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.stream import WsApiClient

    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(setup.clusters.kubeconfig("venice")), client_configuration=configuration
    )
    async with WsApiClient(configuration=configuration) as ws:
        output = await client.CoreV1Api(api_client=ws).connect_get_namespaced_pod_exec(
            pod,
            namespace,
            command=["sh", "-c", "echo from $PLAYGROUND_CLUSTER"],
            stderr=True,
            stdin=False,
            stdout=True,
            tty=False,
        )
    assert output == "from naples\n"


async def test_python_client_port_forward_over_websocket(offloaded: Offloaded) -> None:
    """kubernetes_asyncio has no port-forward helper: the v4 channel protocol by hand (each
    port a data and an error channel, each opened by the server with the port number)."""
    setup, namespace, pod = offloaded
    from kubernetes_asyncio import client, config
    from kubernetes_asyncio.stream import WsApiClient

    configuration = client.Configuration()
    await config.load_kube_config(
        config_file=str(setup.clusters.kubeconfig("venice")), client_configuration=configuration
    )
    payload = os.urandom(1 << 20)
    received = bytearray()
    opened: dict[int, int] = {}  # channel -> port
    async with WsApiClient(configuration=configuration) as ws:
        connect = await client.CoreV1Api(api_client=ws).connect_get_namespaced_pod_portforward(
            pod, namespace, ports="8080", _preload_content=False
        )
        async with connect as connection:
            for offset in range(0, len(payload), 64 * 1024):
                await connection.send_bytes(b"\x00" + payload[offset : offset + 64 * 1024])
            while len(received) < len(payload):
                message = await asyncio.wait_for(connection.receive(), 30)
                data: bytes = message.data
                channel, body = data[0], data[1:]
                if channel not in opened:
                    opened[channel] = struct.unpack("<H", body[:2])[0]
                    body = body[2:]
                if body:
                    assert channel == 0, f"error channel {channel}: {body!r}"
                    received += body
    assert opened[0] == 8080
    assert hashlib.sha256(received).hexdigest() == hashlib.sha256(payload).hexdigest()


def proxied_websockets(setup: VirtualNodeSetup) -> float:
    """venice's count of WebSocket streams it proxied to a kubelet untranslated."""
    metrics = setup.kubectl("get", "--raw", "/metrics").stdout
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in metrics.splitlines()
        if line.startswith("apiserver_websocket_streaming_requests_total")
        and 'proxy_type="proxied_to_kubelet"' in line
    )


def test_websockets_are_declared_and_then_proxied_untranslated(
    offloaded: Offloaded,
    hand_made_virtual_kubelets: Clusters,
    tmp_path: Path,
) -> None:
    setup, namespace, pod = offloaded
    node = setup.node_object() or {}
    assert node["status"].get("declaredFeatures") == ["ExtendWebSocketsToKubelet"]
    before = proxied_websockets(setup)
    assert setup.kubectl("exec", "-n", namespace, pod, "--", "echo", "ws").stdout == "ws\n"
    assert proxied_websockets(setup) == before + 1

    # A virtual node that does not declare it: the API server translates to SPDY instead.
    plain = VirtualNodeSetup(hand_made_virtual_kubelets, tmp_path)
    try:
        plain.create()
        plain_namespace = plain.local_namespace()
        plain.offload_namespace(plain_namespace)
        plain.start("replica-1", "--no-extend-websockets-to-kubelet")
        wait_until(plain.ready, "the second virtual node Ready")
        assert not (plain.node_object() or {})["status"].get("declaredFeatures")
        plain.apply(plain.deployment("web", plain_namespace, 1))
        plain_pod = plain.running_pod(plain_namespace)
        before = proxied_websockets(setup)
        echoed = plain.kubectl("exec", "-n", plain_namespace, plain_pod, "--", "echo", "spdy")
        assert echoed.stdout == "spdy\n"
        assert proxied_websockets(setup) == before
    finally:
        plain.cleanup()


def test_a_provider_taking_the_tenants_rights_away_makes_logs_and_exec_fail_clearly(
    hand_made_virtual_kubelets: Clusters,
    tmp_path: Path,
) -> None:
    setup = VirtualNodeSetup(hand_made_virtual_kubelets, tmp_path)
    try:
        setup.create()
        namespace = setup.local_namespace()
        remote = setup.offload_namespace(namespace)
        # The identity peering will give the consumer: rights in the twin namespace only.
        naples = setup.clusters
        naples.kubectl("naples", "create", "serviceaccount", "tenant", "-n", remote)
        naples.kubectl(
            "naples",
            "create",
            "rolebinding",
            "tenant",
            "-n",
            remote,
            f"--clusterrole={VIRTUAL_KUBELET_REMOTE_ROLE}",
            f"--serviceaccount={remote}:tenant",
        )
        token = naples.kubectl("naples", "create", "token", "tenant", "-n", remote).stdout
        admin = yaml.safe_load(naples.kubeconfig("naples").read_text())
        setup.write_secret(yaml.safe_dump(token_kubeconfig(admin, token.strip())).encode())
        setup.start()
        wait_until(setup.ready, "the virtual node Ready")
        setup.apply(setup.deployment("web", namespace, 1))
        pod = setup.running_pod(namespace)
        assert "hello from naples" in setup.kubectl("logs", "-n", namespace, pod).stdout
        naples.kubectl("naples", "delete", "rolebinding", "tenant", "-n", remote)
        denied = wait_until(
            lambda: (lambda r: r if r.returncode != 0 else None)(
                setup.kubectl("logs", "-n", namespace, pod, check=False)
            ),
            "logs refused",
        )
        assert "forbidden" in denied.stderr
        # The provider's own words reach the user, as plain words.
        assert (
            f'User "system:serviceaccount:{remote}:tenant" cannot get resource "pods/log"'
            in denied.stderr
        )
        refused = setup.kubectl("exec", "-n", namespace, pod, "--", "echo", "x", check=False)
        assert refused.returncode != 0
        assert "forbidden" in refused.stderr
    finally:
        setup.cleanup()
