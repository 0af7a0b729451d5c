"""The ports the playground hands its components."""

from __future__ import annotations

from vk.controllers.local_processes import free_port


def test_no_port_is_handed_out_twice() -> None:
    # Three clusters' worth of components and more, chosen in a row as `up` chooses them: the
    # kernel reoffers a port released a moment ago, and two components given the same one
    # collide once both start (seen in CI: "port ... for kwok is taken by another process").
    ports = [free_port() for _ in range(2000)]
    assert len(set(ports)) == len(ports)
