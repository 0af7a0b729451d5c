"""Who may call the kubelet API, decided as the real kubelet decides it: a client certificate
signed by the cluster's client CA (`vk.kubelet.tls`) or a bearer token (TokenReview), then a
SubjectAccessReview on `nodes/<node>/<subresource>`. Anonymous requests are refused: the
relay holds the provider identity, so an open port would hand it out."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from vk.kube.client import JSON, KubeClient, resource_path

CLIENT_CA_CONFIGMAP = ("kube-system", "extension-apiserver-authentication")
ALLOW_TTL, DENY_TTL, TOKEN_TTL = 300.0, 30.0, 120.0  # the kubelet's webhook cache times
CACHE_LIMIT = 4096
# Reviews sent to the home API server at once: the virtual kubelet's client to it, which keeps
# its node's Lease and its pods going, is not to be taken up by callers of the kubelet port
# with bearer tokens made up (each one a review: none is cached for them).
MAX_REVIEWS_IN_FLIGHT = 16


@dataclass(frozen=True)
class User:
    name: str
    groups: tuple[str, ...] = ()
    uid: str = ""
    extra: tuple[tuple[str, tuple[str, ...]], ...] = field(default=())


def forge_subject_access_review(user: User, verb: str, node: str, subresource: str) -> JSON:
    return {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {
            "user": user.name,
            "groups": list(user.groups),
            "uid": user.uid,
            "extra": {k: list(v) for k, v in user.extra},
            "resourceAttributes": {
                "verb": verb,
                "resource": "nodes",
                "name": node,
                "subresource": subresource,
            },
        },
    }


class KubeletAuth:
    def __init__(self, home: KubeClient, node_name: str) -> None:
        self.home = home
        self.node_name = node_name
        self._decisions: dict[tuple[User, str, str], tuple[bool, float]] = {}
        self._tokens: dict[str, tuple[User | None, float]] = {}
        self._reviews = asyncio.Semaphore(MAX_REVIEWS_IN_FLIGHT)

    async def client_ca(self) -> str:
        namespace, name = CLIENT_CA_CONFIGMAP
        configmap = await self.home.get(
            resource_path("v1", "configmaps", namespace=namespace, name=name)
        )
        ca: str = configmap.get("data", {}).get("client-ca-file", "")
        if not ca:
            raise RuntimeError(
                f"{namespace}/{name} has no client-ca-file: no client CA to "
                "verify the API server's kubelet-client certificate against"
            )
        return ca

    async def user_from_token(self, token: str) -> User | None:
        cached = self._tokens.get(token)
        if cached and cached[1] > time.monotonic():
            return cached[0]
        async with self._reviews:
            review = await self.home.create(
                "/apis/authentication.k8s.io/v1/tokenreviews",
                {
                    "apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview",
                    "spec": {"token": token},
                },
            )
        status = review.get("status", {})
        user = None
        if status.get("authenticated"):
            info = status.get("user", {})
            user = User(
                info.get("username", ""),
                tuple(info.get("groups", [])),
                info.get("uid", ""),
                tuple((k, tuple(v)) for k, v in (info.get("extra") or {}).items()),
            )
        _remember(self._tokens, token, (user, time.monotonic() + TOKEN_TTL))
        return user

    async def allowed(self, user: User, verb: str, subresource: str) -> bool:
        key = (user, verb, subresource)
        cached = self._decisions.get(key)
        if cached and cached[1] > time.monotonic():
            return cached[0]
        async with self._reviews:
            review = await self.home.create(
                "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                forge_subject_access_review(user, verb, self.node_name, subresource),
            )
        allowed = bool(review.get("status", {}).get("allowed"))
        _remember(
            self._decisions, key, (allowed, time.monotonic() + (ALLOW_TTL if allowed else DENY_TTL))
        )
        return allowed


def _remember(cache: dict[Any, tuple[Any, float]], key: Any, entry: tuple[Any, float]) -> None:
    """Caches `entry` (value, expiry); past CACHE_LIMIT entries, the expired ones go first, so
    many callers over a long life cannot grow the cache without bound."""
    if len(cache) >= CACHE_LIMIT:
        now = time.monotonic()
        for stale in [k for k, (_, expiry) in cache.items() if expiry <= now]:
            del cache[stale]
        if len(cache) >= CACHE_LIMIT:
            cache.clear()
    cache[key] = entry
