"""Whether a daemon the playground or the local launcher started is running: a child of this
process counts as running until it exits, whatever its command line reads (it reads empty
while the child execs a large binary, as nsenter does into the daemon it wraps)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from vk.controllers.local_processes import is_running, start_daemon, stop_processes


def test_a_child_is_running_until_it_exits_whatever_its_command_line(tmp_path: Path) -> None:
    pid = start_daemon(
        [sys.executable, "-c", "import time; time.sleep(30)"],
        log_path=tmp_path / "daemon.log",
        pid_path=tmp_path / "daemon.pid",
        cwd=tmp_path,
    )
    try:
        # The marker is not in its command line: as when /proc/<pid>/cmdline reads empty.
        assert is_running(pid, marker=str(tmp_path / "not-in-the-command-line"))
    finally:
        stop_processes([pid], marker="time.sleep", grace=1.0)
    assert not is_running(pid, marker="time.sleep")


def test_a_process_known_only_by_its_pid_is_ours_by_its_command_line(tmp_path: Path) -> None:
    other = subprocess.Popen(
        [sys.executable, "-c", "print('started', flush=True); import time; time.sleep(30)"],
        stdout=subprocess.PIPE,
    )
    try:
        # Until the child has exec'd Python, its command line is the forking parent's (or empty).
        assert other.stdout is not None
        assert other.stdout.readline() == b"started\n"
        assert is_running(other.pid, marker="time.sleep")
        assert not is_running(other.pid, marker=str(tmp_path))  # alive, but not ours
    finally:
        other.kill()
        other.wait()
