"""What reflection needs of the provider connection: the current client, and word when it
changes (a rotated or fixed kubeconfig Secret)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from vk.kube.client import KubeClient


class Provider(Protocol):
    @property
    def client(self) -> KubeClient | None:
        """The provider API server as the tenant identity; None while it cannot be used."""

    def on_change(self, listener: Callable[[], None]) -> None:
        """Calls `listener` whenever `client` changes."""
