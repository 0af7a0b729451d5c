"""What the playground's unit tests stand in for: the binaries it would build."""

from __future__ import annotations

from pathlib import Path

from vk.playground.binaries import Binaries

# Each binary at /bin/<its field's name>: never run, only named on command lines.
FAKE_BINARIES = Binaries(*(Path(f"/bin/{n}") for n in Binaries.__dataclass_fields__))
