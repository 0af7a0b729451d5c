"""`vkctl playground` as a user drives it: up is idempotent and repairs, errors say what and
where, and down leaves no process, port or file behind. Runs a small playground of its own."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from vk.controllers.local_processes import port_in_use, processes_with

VKCTL = str(Path(sys.executable).parent / "vkctl")


def vkctl(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "VK_PLAYGROUND_DIR": str(root)}
    return subprocess.run(
        [VKCTL, "playground", *args], env=env, capture_output=True, text=True, timeout=600
    )


def test_playground_up_repairs_reports_and_down_leaves_nothing(tmp_path: Path) -> None:
    root = tmp_path / "pg"
    cluster = "cool-firefly:provider:1:topology.liqo.io/region=east"

    first = vkctl(root, "up", "--cluster", cluster)
    assert first.returncode == 0, first.stderr
    assert 'export KUBECONFIG_COOL_FIREFLY="' in first.stdout

    kubeconfig = vkctl(root, "kubeconfig", "cool-firefly").stdout.strip()
    identity = json.loads(
        subprocess.run(
            [
                "kubectl",
                f"--kubeconfig={kubeconfig}",
                "-n",
                "vk",
                "get",
                "configmap",
                "vk-cluster-identity",
                "-o",
                "json",
            ],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )
    assert identity["data"]["clusterID"] == "cool-firefly"
    assert json.loads(identity["data"]["clusterLabels"]) == {"topology.liqo.io/region": "east"}

    again = vkctl(root, "up", "--cluster", cluster)
    assert again.returncode == 0, again.stderr
    assert "cool-firefly: ready at" in again.stderr
    assert "(already running)" in again.stderr

    different = vkctl(root, "up", "--cluster", "other")
    assert different.returncode != 0
    assert "run `vkctl playground down` first" in different.stderr

    cluster_dir = root / "cool-firefly"
    ports = json.loads((cluster_dir / "ports.json").read_text())
    for component in ("kube-apiserver", "kube-scheduler"):
        pid = int((cluster_dir / "run" / f"{component}.pid").read_text())
        os.kill(pid, signal.SIGKILL)
    status = vkctl(root, "status")
    assert status.returncode == 1
    assert "down: kube-apiserver, kube-scheduler" in status.stdout

    # Something else took the API server's port: up says so instead of starting a broken cluster.
    squatter = socket.socket()
    squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    squatter.bind(("127.0.0.1", ports["apiserver"]))
    squatter.listen()
    try:
        blocked = vkctl(root, "up")
        assert blocked.returncode != 0
        assert f"port {ports['apiserver']} for kube-apiserver is taken" in blocked.stderr
    finally:
        squatter.close()

    repaired = vkctl(root, "up")
    assert repaired.returncode == 0, repaired.stderr
    # The API server was down: what depends on it is restarted with it.
    assert (
        "started kube-apiserver, kube-controller-manager, kube-scheduler, kwok" in repaired.stderr
    )
    assert vkctl(root, "status").returncode == 0

    down = vkctl(root, "down")
    assert down.returncode == 0, down.stderr
    assert processes_with(str(root)) == []
    assert not [name for name, port in ports.items() if port_in_use(port)]
    assert not root.exists()


def test_commands_on_a_playground_that_does_not_exist_say_how_to_start_one(
    tmp_path: Path,
) -> None:
    for args in (("status",), ("env",), ("kubeconfig", "venice")):
        result = vkctl(tmp_path / "none", *args)
        assert result.returncode == 1
        assert "run `vkctl playground up` first" in result.stderr


def test_unknown_cluster_name_lists_the_clusters_there_are(tmp_path: Path) -> None:
    root = tmp_path / "pg"
    root.mkdir()
    (root / "playground.json").write_text(json.dumps({"clusters": [{"name": "venice"}]}))
    result = vkctl(root, "kubeconfig", "rome")
    assert result.returncode == 1
    assert "no cluster 'rome' in the playground (it has venice)" in result.stderr
