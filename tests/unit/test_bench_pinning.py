"""bench/virtual_node.py's `--pin`: which cores the virtual kubelet and the rest get, and that
every thread of a running process is moved, not only its first."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from bench import virtual_node
from bench.virtual_node import PinnedCores, pin, pinned_cores

# A process with a second thread, both asleep.
TWO_THREADS = (
    "import threading, time; threading.Thread(target=time.sleep, args=(30,)).start(); "
    "time.sleep(30)"
)


def test_the_virtual_kubelet_gets_the_last_core_and_the_rest_get_the_others(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(virtual_node.os, "sched_getaffinity", lambda _: {5, 0, 3})
    assert pinned_cores() == PinnedCores(frozenset({5}), frozenset({0, 3}))


def test_one_core_is_refused_with_what_it_needs(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(virtual_node.os, "sched_getaffinity", lambda _: {0})
    with pytest.raises(SystemExit, match="--pin needs 2 cores or more; this process may use 1"):
        pinned_cores()


def test_every_thread_of_a_running_process_is_pinned() -> None:
    allowed = os.sched_getaffinity(0)
    if len(allowed) < 2:
        pytest.skip("needs 2 cores: with one, every thread is on it already")
    core = frozenset({min(allowed)})
    process = subprocess.Popen([sys.executable, "-c", TWO_THREADS])
    try:
        tasks = Path(f"/proc/{process.pid}/task")
        deadline = time.monotonic() + 10
        while len(list(tasks.iterdir())) < 2:
            assert time.monotonic() < deadline, "the child started no second thread"
            time.sleep(0.02)

        def affinities() -> list[set[int]]:
            return [os.sched_getaffinity(int(task.name)) for task in tasks.iterdir()]

        assert affinities() == [allowed, allowed]
        pin(process.pid, core)
        assert affinities() == [set(core), set(core)]
    finally:
        process.kill()
        process.wait()
