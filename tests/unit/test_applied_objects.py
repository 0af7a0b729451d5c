"""An apply that would change nothing is not sent again."""

from __future__ import annotations

from typing import Any

from vk.kube.client import AppliedObjects


class RecordingClient:
    """Stands in for the transport only: records what would be sent."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, dict[str, Any]]] = []

    async def apply(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.sent.append((path, body))
        return body


async def test_the_same_body_is_applied_once_and_a_change_or_a_forget_sends_it_again() -> None:
    client = RecordingClient()
    applied = AppliedObjects(client)  # type: ignore[arg-type]
    body = {"kind": "Quota", "spec": {"resources": {"cpu": "4"}}}
    assert await applied.apply("/q", body)
    assert not await applied.apply("/q", {"spec": {"resources": {"cpu": "4"}}, "kind": "Quota"})
    assert await applied.apply("/q", {"kind": "Quota", "spec": {"resources": {"cpu": "8"}}})
    applied.forget("/q")
    assert await applied.apply("/q", {"kind": "Quota", "spec": {"resources": {"cpu": "8"}}})
    assert [path for path, _ in client.sent] == ["/q", "/q", "/q"]
