"""Kubeconfigs the tests make for identities other than the playground's administrator."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def token_kubeconfig(admin: Mapping[str, Any], token: str) -> dict[str, Any]:
    """The API server of `admin`'s current context, for a bearer `token` and no other
    credential (the administrator's certificate left out)."""
    current = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])
    cluster = next(c for c in admin["clusters"] if c["name"] == current["context"]["cluster"])
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [cluster],
        "users": [{"name": "token", "user": {"token": token}}],
        "contexts": [{"name": "token", "context": {"cluster": cluster["name"], "user": "token"}}],
        "current-context": "token",
    }
