"""Starting, finding and stopping daemons on this machine: the local launcher's virtual kubelets
and, above the product, the playground's clusters.

A daemon is ours when its command line names a marker (its directory): that survives lost pid
files and pid reuse, and lets the playground's `down` find every process it ever started, even
ones a crashed `up` left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# Popen objects of the daemons this process started: kept so they can be reaped (a dead child
# that is never waited for stays a zombie, and a zombie still answers kill(pid, 0)).
_children: dict[int, subprocess.Popen[bytes]] = {}


def start_daemon(
    args: Sequence[str],
    *,
    log_path: Path,
    pid_path: Path,
    cwd: Path,
    env: Mapping[str, str] | None = None,
) -> int:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        process = subprocess.Popen(
            list(args),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            start_new_session=True,  # Ctrl-C in the user's shell must not take the clusters down
        )
    _children[process.pid] = process
    pid_path.parent.mkdir(parents=True, exist_ok=True)
    pid_path.write_text(f"{process.pid}\n")
    return process.pid


def _cmdline(pid: int) -> str | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rsplit(")", 1)[1].split()[0] in ("Z", "X")


def is_running(pid: int, marker: str) -> bool:
    """True when `pid` is alive and is ours: a child this process started and that has not
    exited, or a process whose command line contains `marker` (one started by an earlier
    vkctl, known from its pid file)."""
    child = _children.get(pid)
    if child is not None:
        # Not by its command line: that reads empty while the child execs (as nsenter does into
        # the daemon it wraps, a large binary), which made a starting daemon look exited.
        return child.poll() is None
    cmdline = _cmdline(pid)
    return cmdline is not None and marker in cmdline and not _is_zombie(pid)


def read_pid(pid_path: Path) -> int | None:
    try:
        return int(pid_path.read_text().strip())
    except (OSError, ValueError):
        return None


def processes_with(marker: str) -> list[int]:
    """Every live process whose command line contains `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            cmdline = _cmdline(int(entry.name))
            if cmdline and marker in cmdline and not _is_zombie(int(entry.name)):
                found.append(int(entry.name))
    return found


def _exiting_or_alive(pid: int) -> bool:
    """Not yet a zombie. An exiting process's command line reads empty before its files (its
    listening sockets) are closed, so `is_running` alone would call it gone too early."""
    return not _is_zombie(pid)


KILLED_EXIT_SECONDS = 30.0


def stop_processes(pids: Sequence[int], *, marker: str, grace: float = 10.0) -> None:
    """SIGTERM, wait up to `grace` seconds, then SIGKILL whatever is left (the apiserver takes
    several seconds to exit on SIGTERM); returns once each has exited, ports released."""
    ours = [pid for pid in pids if is_running(pid, marker)]
    for pid in ours:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not [pid for pid in ours if _exiting_or_alive(pid)]:
            break
        time.sleep(0.1)
    for pid in ours:
        if _exiting_or_alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
    # SIGKILL cannot be refused, but a process holding gigabytes (an API server with 10,000
    # pods) on busy cores takes seconds to be torn down: 5 s was too short there.
    deadline = time.monotonic() + KILLED_EXIT_SECONDS
    while [pid for pid in ours if _exiting_or_alive(pid)] and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        child = _children.pop(pid, None)
        if child is not None:
            child.wait(timeout=5)


# Ports handed out by free_port in this process.
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port free now and never handed out before by this process: a port is released as soon
    as it is chosen, and the kernel may offer it again to the next caller, so two components
    (of two clusters brought up together) could be given the same one before either listens."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            port: int = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def port_in_use(port: int) -> bool:
    """Whether something listens on the port, read from the kernel's socket tables. Neither a
    trial bind (the connections of a component just stopped keep its port bound for a while)
    nor a trial connect (loopback may connect a socket to itself) tells that reliably."""
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state = fields[1], fields[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                return True
    return False


def log_tail(log_path: Path, lines: int = 12) -> str:
    try:
        return "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-lines:])
    except OSError:
        return "(no log)"
