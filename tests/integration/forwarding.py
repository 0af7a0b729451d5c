"""`kubectl port-forward` as tests use it: started, its local port read, stopped."""

from __future__ import annotations

import subprocess
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
