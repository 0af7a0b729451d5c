"""Fixtures shared by the integration tests."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Clusters
from vk.playground.processes import free_port

REPOSITORY = Path(__file__).resolve().parents[2]
VK = str(Path(sys.executable).parent / "vk")


@pytest.fixture(scope="session")
def crds(clusters: Clusters) -> Clusters:
    """vk's CRDs installed in every cluster (what `vkctl install` will do)."""
    for cluster in ("venice", "florence", "naples"):
        clusters.kubectl(
            cluster, "apply", "--server-side", "-f", str(REPOSITORY / "deploy" / "crds")
        )
        clusters.kubectl(
            cluster,
            "wait",
            "--for=condition=Established",
            "--timeout=60s",
            "crd/virtualnodes.offloading.liqo.io",
            "crd/namespacemaps.offloading.liqo.io",
            "crd/resourceslices.authentication.liqo.io",
            "crd/quotas.offloading.liqo.io",
        )
    return clusters


def start_controller_manager(
    clusters: Clusters, cluster: str, log: Path, *extra: str
) -> subprocess.Popen[bytes]:
    env = {**os.environ, "KUBECONFIG": str(clusters.kubeconfig(cluster))}
    with open(log, "wb") as out:
        return subprocess.Popen(
            [VK, "controller-manager", f"--metrics-address=127.0.0.1:{free_port()}", *extra],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def stop_controller_manager(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0


@pytest.fixture(scope="module")
def controller_manager(
    crds: Clusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    """`vk controller-manager` on venice: it approves virtual kubelets' serving certificates."""
    log = tmp_path_factory.mktemp("controller-manager") / "controller-manager.log"
    process = start_controller_manager(crds, "venice", log)
    yield process
    stop_controller_manager(process)
