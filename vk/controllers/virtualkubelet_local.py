"""Virtual kubelets as local processes: the VirtualNode controller's launcher for clusters whose
nodes run no containers (the playground's), beside `virtualkubelet_deployment` for real ones.

A virtual kubelet runs on this machine instead of in a pod, with the arguments and environment
its Deployment would give it, except what must be assigned here: its ports on the shared
loopback, and its home kubeconfig (the ServiceAccount token the pod would have mounted,
requested through the TokenRequest API and refreshed in a token file that the kubelet re-reads,
as a projected token is: the chart grants the controller manager this with `localProcesses`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import sys
import time
from pathlib import Path

import yaml

from vk.api.constants import virtual_kubelet_service_account
from vk.controllers.local_processes import (
    free_port,
    is_running,
    port_in_use,
    read_pid,
    start_daemon,
    stop_processes,
)
from vk.controllers.virtualnodes import Launcher, VirtualKubeletSpec
from vk.kube.client import KubeClient, resource_path

TOKEN_SECONDS = 3600
TOKEN_REFRESH = TOKEN_SECONDS / 2


def forge_home_kubeconfig(server: str, ca_file: Path, token_file: Path) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "home", "cluster": {"server": server, "certificate-authority": str(ca_file)}}
        ],
        "users": [{"name": "virtual-kubelet", "user": {"tokenFile": str(token_file)}}],
        "contexts": [{"name": "home", "context": {"cluster": "home", "user": "virtual-kubelet"}}],
        "current-context": "home",
    }


def write_if_changed(path: Path, content: bytes) -> None:
    """`ensure` runs every `liveness_poll`: the files stay as they are unless they change."""
    if not path.exists() or path.read_bytes() != content:
        path.write_bytes(content)


class LocalProcessLauncher(Launcher):
    """One directory per VirtualNode under `root`: its kubeconfig, token, ports, pid and log.
    A virtual kubelet that dies is started again within `liveness_poll`, as a Deployment's
    pod would be."""

    liveness_poll = 2.0

    def __init__(self, client: KubeClient, root: Path) -> None:
        self.client = client
        self.root = root
        # The ServiceAccount UID each token was minted for: a token of one deleted (and made
        # again) is refused, so it is minted anew (once more after a restart of this process).
        self._token_account: dict[Path, str] = {}

    def directory(self, namespace: str, name: str) -> Path:
        return self.root / namespace / name

    async def _refresh_token(self, spec: VirtualKubeletSpec, directory: Path) -> None:
        token_file = directory / "token"
        fresh = token_file.exists() and time.time() - token_file.stat().st_mtime < TOKEN_REFRESH
        if fresh and self._token_account.get(directory) == spec.service_account_uid:
            return
        review = await self.client.create(
            resource_path(
                "v1",
                "serviceaccounts",
                namespace=spec.namespace,
                name=virtual_kubelet_service_account(spec.name),
                subresource="token",
            ),
            {
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenRequest",
                "spec": {"expirationSeconds": TOKEN_SECONDS},
            },
        )
        scratch = directory / "token.new"
        fd = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(review["status"]["token"])
        scratch.replace(token_file)  # whole, never half-written, for the kubelet re-reading it
        self._token_account[directory] = spec.service_account_uid

    async def ensure(self, spec: VirtualKubeletSpec) -> bool:
        directory = self.directory(spec.namespace, spec.name)
        directory.mkdir(parents=True, exist_ok=True)
        await self._refresh_token(spec, directory)
        connection = self.client.connection
        ca_file = directory / "ca.crt"
        write_if_changed(ca_file, connection.ca_pem or b"")
        kubeconfig = directory / "kubeconfig"
        write_if_changed(
            kubeconfig,
            yaml.safe_dump(
                forge_home_kubeconfig(connection.server, ca_file, directory / "token")
            ).encode(),
        )
        ports = self._ports(directory, self._running(directory))
        args = [
            str(Path(sys.executable).parent / "vk"),
            "kubelet",
            *spec.args,
            f"--home-kubeconfig={kubeconfig}",
            "--node-ip=127.0.0.1",
            f"--listen-port={ports['kubelet']}",
            f"--metrics-address=127.0.0.1:{ports['metrics']}",
        ]
        env = {**os.environ, **dict(spec.env), "POD_NAME": f"{spec.name}-local"}
        env.pop("KUBECONFIG", None)
        fingerprint = hashlib.sha256(json.dumps([args, sorted(spec.env)]).encode()).hexdigest()
        fingerprint_file = directory / "fingerprint"
        pid_file = directory / "pid"
        pid = read_pid(pid_file)
        marker = str(directory)
        running = pid is not None and is_running(pid, marker)
        if running and fingerprint_file.exists() and fingerprint_file.read_text() == fingerprint:
            return True
        # Stopping waits for the process to exit: off the event loop, which serves every
        # other reconcile meanwhile.
        if running and pid is not None:
            await asyncio.to_thread(stop_processes, [pid], marker=marker)
        await asyncio.to_thread(
            start_daemon,
            args,
            log_path=directory / "log",
            pid_path=pid_file,
            cwd=directory,
            env=env,
        )
        fingerprint_file.write_text(fingerprint)
        return False  # started: running once the next look finds it alive

    def _running(self, directory: Path) -> bool:
        pid = read_pid(directory / "pid")
        return pid is not None and is_running(pid, str(directory))

    def _ports(self, directory: Path, running: bool) -> dict[str, int]:
        """The kubelet's ports, kept across restarts; new ones when another process took one
        while it was down (the playground hands out ports afresh to whatever it restarts)."""
        ports_file = directory / "ports.json"
        ports: dict[str, int] = json.loads(ports_file.read_text()) if ports_file.exists() else {}
        if not ports or (not running and any(port_in_use(p) for p in ports.values())):
            ports = {"kubelet": free_port(), "metrics": free_port()}
            ports_file.write_text(json.dumps(ports))
        return ports

    async def remove(self, namespace: str, name: str) -> bool:
        directory = self.directory(namespace, name)
        pid = read_pid(directory / "pid")
        if pid is not None:
            await asyncio.to_thread(stop_processes, [pid], marker=str(directory))
        shutil.rmtree(directory, ignore_errors=True)
        self._token_account.pop(directory, None)
        return True  # stopping waits for the process to exit
