"""The kubelet port's reviews: sent to the home API server a few at a time whatever the
callers do, and cached as the kubelet caches them."""

from __future__ import annotations

import asyncio
from typing import Any

from vk.kube.client import JSON
from vk.kubelet.auth import MAX_REVIEWS_IN_FLIGHT, KubeletAuth, User


class SlowHome:
    """A home API server answering reviews once `answer` is set: every token is unknown, every
    access allowed. Counts the reviews in flight at most."""

    def __init__(self) -> None:
        self.answer = asyncio.Event()
        self.in_flight = 0
        self.most_in_flight = 0
        self.reviews = 0

    async def create(self, path: str, body: JSON) -> JSON:
        self.reviews += 1
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.answer.wait()
        finally:
            self.in_flight -= 1
        if body["kind"] == "TokenReview":
            return {"status": {"authenticated": False}}
        return {"status": {"allowed": True}}


async def test_made_up_tokens_take_a_few_of_the_home_clients_requests_at_most() -> None:
    home = SlowHome()
    auth = KubeletAuth(home, "naples")  # type: ignore[arg-type]
    callers = [asyncio.create_task(auth.user_from_token(f"made-up-{n}")) for n in range(40)]
    access = asyncio.create_task(auth.allowed(User("monitoring"), "get", "metrics"))
    await asyncio.sleep(0.1)
    assert home.in_flight == MAX_REVIEWS_IN_FLIGHT
    home.answer.set()
    users: list[Any] = await asyncio.gather(*callers)
    assert users == [None] * 40
    assert await access is True
    assert home.most_in_flight == MAX_REVIEWS_IN_FLIGHT
    assert home.reviews == 41


async def test_a_token_reviewed_once_is_not_reviewed_again_within_its_ttl() -> None:
    home = SlowHome()
    home.answer.set()
    auth = KubeletAuth(home, "naples")  # type: ignore[arg-type]
    assert await auth.user_from_token("made-up") is None
    assert await auth.user_from_token("made-up") is None
    assert home.reviews == 1
