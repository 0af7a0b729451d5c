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
    """vk's CRDs installed in venice (what `vkctl install` will do)."""
    clusters.kubectl("venice", "apply", "--server-side", "-f", str(REPOSITORY / "deploy" / "crds"))
    clusters.kubectl(
        "venice",
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/virtualnodes.offloading.liqo.io",
        "crd/namespacemaps.offloading.liqo.io",
    )
    return clusters


@pytest.fixture(scope="module")
def controller_manager(
    crds: Clusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[subprocess.Popen[bytes]]:
    """`vk controller-manager` on venice: it approves virtual kubelets' serving certificates."""
    log = tmp_path_factory.mktemp("controller-manager") / "controller-manager.log"
    env = {**os.environ, "KUBECONFIG": str(crds.kubeconfig("venice"))}
    with open(log, "wb") as out:
        process = subprocess.Popen(
            [VK, "controller-manager", f"--metrics-address=127.0.0.1:{free_port()}"],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    yield process
    process.send_signal(signal.SIGTERM)
    assert process.wait(timeout=20) == 0
