"""A virtual kubelet the local launcher starts again keeps its ports, unless another process
took one while it was down (the playground hands out ports afresh to whatever it restarts)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from vk.controllers.virtualkubelet_local import LocalProcessLauncher


def test_ports_are_kept_across_restarts_unless_taken(tmp_path: Path) -> None:
    launcher = LocalProcessLauncher(client=None, root=tmp_path)  # type: ignore[arg-type]
    first = launcher._ports(tmp_path, running=False)
    assert launcher._ports(tmp_path, running=False) == first
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", first["kubelet"]))
        squatter.listen()
        assert launcher._ports(tmp_path, running=True) == first  # its own, while it runs
        moved = launcher._ports(tmp_path, running=False)
    assert moved["kubelet"] != first["kubelet"]
    assert json.loads((tmp_path / "ports.json").read_text()) == moved
