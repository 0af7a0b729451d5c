"""`vkctl playground up` waiting for a cluster's nodes: an agent that runs them (kwok, a real
node's kubelet) gone is said at once, with its log, rather than after the wait's timeout."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.unit.playground_fakes import FAKE_BINARIES
from vk.playground.cluster import ClusterRuntime, PlaygroundError
from vk.playground.cluster_objects import node_names
from vk.playground.spec import DEFAULT_CLUSTERS

VENICE = DEFAULT_CLUSTERS[0]


class ReadyCluster:
    """An API server whose nodes are all Ready, with its default ServiceAccount."""

    def __init__(self, node_names: list[str]) -> None:
        self.node_names = node_names
        self.paths: list[str] = []

    async def get(self, path: str) -> Any:
        self.paths.append(path)
        if path == "/api/v1/nodes":
            ready = {"conditions": [{"type": "Ready", "status": "True"}]}
            return {"items": [{"metadata": {"name": n}, "status": ready} for n in self.node_names]}
        return {"metadata": {"name": "default", "namespace": "default"}}


@pytest.fixture
def runtime(tmp_path: Path) -> ClusterRuntime:
    cluster = ClusterRuntime(VENICE, tmp_path, FAKE_BINARIES, "10.244.0.0/24")
    cluster.paths.pid("kwok").parent.mkdir(parents=True)
    cluster.paths.log("kwok").parent.mkdir(parents=True)
    cluster.paths.log("kwok").write_text("starting\nfatal: cannot reach the API server\n")
    return cluster


@pytest.fixture
def kwok_running(runtime: ClusterRuntime) -> Iterator[None]:
    """A process standing for kwok: alive, and naming the cluster's directory, as the
    playground's processes do."""
    process = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", str(runtime.paths.root)]
    )
    runtime.paths.pid("kwok").write_text(str(process.pid))
    # Its command line reads empty for a moment after Popen returns (the kernel has closed
    # the exec's pipe, Popen's signal, before it sets the new program's arguments): under
    # load, the wait read it then, and took kwok for exited.
    cmdline = Path(f"/proc/{process.pid}/cmdline")
    deadline = time.monotonic() + 10
    while str(runtime.paths.root).encode() not in cmdline.read_bytes():
        assert time.monotonic() < deadline, "the stand-in for kwok never started"
        time.sleep(0.01)
    try:
        yield
    finally:
        process.kill()
        process.wait()


def test_an_exited_kwok_is_said_at_once_with_its_log(runtime: ClusterRuntime) -> None:
    exited = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], check=True,
                            capture_output=True, text=True).stdout.strip()  # fmt: skip
    runtime.paths.pid("kwok").write_text(exited)
    cluster = ReadyCluster(node_names(VENICE))

    with pytest.raises(PlaygroundError) as raised:
        asyncio.run(runtime._wait_usable(cluster))  # type: ignore[arg-type]

    message = str(raised.value)
    assert message.startswith("venice: kwok exited before its nodes were Ready; its log: ")
    assert str(runtime.paths.log("kwok")) in message
    assert "fatal: cannot reach the API server" in message
    assert cluster.paths == []  # said before asking the API server anything


def test_a_process_of_another_cluster_under_the_pid_is_not_kwok(runtime: ClusterRuntime) -> None:
    # A pid file left behind, its number since taken by a process that is not this cluster's.
    runtime.paths.pid("kwok").write_text("1")

    with pytest.raises(PlaygroundError, match="kwok exited before its nodes were Ready"):
        asyncio.run(runtime._wait_usable(ReadyCluster(node_names(VENICE))))  # type: ignore[arg-type]


@pytest.mark.usefixtures("kwok_running")
def test_with_kwok_running_the_wait_ends_once_the_nodes_are_ready(
    runtime: ClusterRuntime,
) -> None:
    cluster = ReadyCluster(node_names(VENICE))

    asyncio.run(runtime._wait_usable(cluster))  # type: ignore[arg-type]

    assert cluster.paths == [
        "/api/v1/nodes",
        "/api/v1/namespaces/default/serviceaccounts/default",
    ]
