"""What the unit tests of reflectors build them with."""

from __future__ import annotations

from typing import Any

from vk.reflection.generic import ReflectorOptions


def reflector_options(home: Any) -> ReflectorOptions:
    """The options of a reflector of node far (cluster far) for cluster home, talking to
    `home` (a fake of the client), leading, with one worker and no Events recorded."""
    return ReflectorOptions(
        home=home,
        home_cluster_id="home",
        remote_cluster_id="far",
        node_name="far",
        events=None,  # type: ignore[arg-type]
        leading=lambda: True,
        workers=1,
    )
