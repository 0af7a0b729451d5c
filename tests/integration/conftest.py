"""Fixtures shared by the integration tests."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import Clusters
from tests.integration.test_namespace_offloading import is_peered, peer, unpeer
from vk.controllers.local_processes import free_port

REPOSITORY = Path(__file__).resolve().parents[2]
VK = str(Path(sys.executable).parent / "vk")


@pytest.fixture(scope="session")
def installed(clusters: Clusters) -> Clusters:
    """vk as `vkctl playground up` installs it in every cluster: CRDs, identity, RBAC and a
    running controller manager."""
    for cluster in ("venice", "florence", "naples"):
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
    """`vk controller-manager` as the installed one runs, as its ServiceAccount."""
    paths = clusters.playground.paths(cluster)
    env = {**os.environ, "KUBECONFIG": str(paths.component_kubeconfig("vk-controller-manager"))}
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


@contextlib.contextmanager
def installed_controller_manager_stopped(clusters: Clusters, cluster: str) -> Iterator[None]:
    """A cluster without its installed controller manager (as if scaled to zero), started
    again afterwards, even after a failure."""
    clusters.playground.stop_component(cluster, "vk-controller-manager")
    try:
        yield
    finally:
        clusters.playground.up()


@pytest.fixture(scope="module")
def without_vk_controllers(installed: Clusters) -> Iterator[Clusters]:
    """florence with vk's CRDs but none of its controllers: objects written by hand stay as
    written."""
    with installed_controller_manager_stopped(installed, "florence"):
        yield installed


@pytest.fixture(scope="module")
def hand_made_virtual_kubelets(
    installed: Clusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Clusters]:
    """venice's controller manager without its VirtualNode controller, for tests that start
    virtual kubelets by hand (with what the controllers would create written by hand, as
    issue 4 asks): the installed one would launch its own for their VirtualNodes. It still
    approves the virtual kubelets' serving certificates."""
    log = tmp_path_factory.mktemp("controller-manager") / "controller-manager.log"
    with installed_controller_manager_stopped(installed, "venice"):
        process = start_controller_manager(installed, "venice", log)
        try:
            yield installed
        finally:
            stop_controller_manager(process)


@pytest.fixture(scope="module")
def naples_peered(installed: Clusters) -> Iterator[Clusters]:
    """venice peered with naples as the tutorial peers them, for a module's tests; unpeered
    afterwards unless it was peered before (the README's first command peers them)."""
    was_peered = is_peered(installed, "naples")
    if not was_peered:
        peer(installed, "naples")
    yield installed
    if not was_peered and is_peered(installed, "naples"):
        unpeer(installed, "naples")
