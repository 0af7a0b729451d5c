"""What every fake cluster of vkctl's unit tests shares: it is opened as a command opens its
client (`async with cluster_client(...) as client`); each fake answers the calls its test
expects."""

from __future__ import annotations

from typing import Self


class FakeCluster:
    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *_: object) -> None:
        return None
