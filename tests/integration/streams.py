"""kubectl's streaming commands as tests use them: `port-forward` (its local port, while it
runs) and `attach` (the line a simulated container writes while attached)."""

from __future__ import annotations

import select
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def forwarded_port(kubeconfig: Path, namespace: str, pod: str, port: int = 8080) -> Iterator[int]:
    """The local port that `kubectl port-forward pod/<pod> :<port>` listens on, while it runs."""
    forward = subprocess.Popen(
        [
            "kubectl",
            f"--kubeconfig={kubeconfig}",
            "-n",
            namespace,
            "port-forward",
            f"pod/{pod}",
            f":{port}",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert forward.stdout is not None
        line = forward.stdout.readline()  # Forwarding from 127.0.0.1:LOCAL -> PORT
        assert "127.0.0.1:" in line, f"port-forward did not start: {line!r}"
        yield int(line.split("127.0.0.1:")[1].split()[0])
    finally:
        forward.terminate()
        forward.wait(timeout=10)


def attached_line(kubeconfig: Path, namespace: str, pod: str, attach_log: Path, line: str) -> str:
    """What `kubectl attach` shows while the simulated container writes `line` to the kwok
    attach log (kwok streams only what is written after attaching, so it keeps writing until
    the line shows or 30 s pass)."""
    attach = subprocess.Popen(
        ["kubectl", f"--kubeconfig={kubeconfig}", "-n", namespace, "attach", pod],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert attach.stdout is not None
        received, deadline = "", time.monotonic() + 30
        while line not in received and time.monotonic() < deadline:
            with attach_log.open("a") as log:
                log.write(f"2026-01-01T00:01:00.000000000Z stdout F {line}\n")
            ready, _, _ = select.select([attach.stdout], [], [], 1)
            if ready:
                received = attach.stdout.readline()
        return received
    finally:
        attach.terminate()
        attach.wait(timeout=10)
