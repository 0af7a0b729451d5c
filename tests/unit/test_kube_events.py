"""The Events vk writes about its own work."""

from __future__ import annotations

import datetime
from typing import Any

from vk.kube.client import NotFound
from vk.kube.events import (
    MAX_EVENT_MESSAGE,
    SPAM_BURST,
    SPAM_REFILL_SECONDS,
    WARNING,
    EventRecorder,
    SpamFilter,
    forge_event,
)

NOW = datetime.datetime(2026, 11, 25, 12, 0, tzinfo=datetime.UTC)
POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "shop"}}


def test_a_message_the_other_cluster_makes_huge_is_cut() -> None:
    """A hostile provider's error answer, quoted in an Event at home, is bounded."""
    hostile = "refused: " + "x" * (8 * 1024 * 1024)
    event = forge_event(POD, WARNING, "FailedReflection", hostile, "vk", NOW)
    assert len(event["message"]) == MAX_EVENT_MESSAGE
    assert event["message"].startswith("refused: xxx")
    assert event["message"].endswith("…")
    # The same report is still the same Event (its count grows), however long it was.
    again = forge_event(POD, WARNING, "FailedReflection", hostile + "y", "vk", NOW)
    assert again["metadata"]["name"] == event["metadata"]["name"]


def test_a_message_of_ordinary_length_is_kept_whole() -> None:
    message = "cluster naples refused the pod: exceeded quota " * 20
    assert forge_event(POD, WARNING, "Refused", message, "vk", NOW)["message"] == message


def test_one_report_gets_a_burst_of_events_then_one_per_refill() -> None:
    spam = SpamFilter()
    assert all(spam.allows("uid/UntrustedMapping", 0.0) for _ in range(SPAM_BURST))
    assert not spam.allows("uid/UntrustedMapping", 1.0)
    # Another reason about the same object, or the same reason about another, is its own.
    assert spam.allows("uid/NotPeered", 1.0)
    assert spam.allows("other/UntrustedMapping", 1.0)
    assert spam.allows("uid/UntrustedMapping", 1.0 + SPAM_REFILL_SECONDS)
    assert not spam.allows("uid/UntrustedMapping", 2.0 + SPAM_REFILL_SECONDS)


class EventsServer:
    """Home's Events API as the recorder uses it: every Event new."""

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []

    async def get(self, path: str) -> Any:
        raise NotFound(404, "NotFound", path)

    async def create(self, path: str, body: dict[str, Any]) -> Any:
        self.created.append(body)
        return body


async def test_a_party_varying_what_is_reported_gets_no_more_events_than_the_burst() -> None:
    """A provider rewriting its status at will, each version quoted in a new message, made vk
    write a new Event for each."""
    home = EventsServer()
    recorder = EventRecorder(home, "crdreplicator")  # type: ignore[arg-type]
    namespace_map = {**POD, "kind": "NamespaceMap", "metadata": {**POD["metadata"], "uid": "u"}}
    for version in range(SPAM_BURST + 10):
        await recorder.record(namespace_map, WARNING, "UntrustedMapping", f"entries v{version}")
    assert len(home.created) == SPAM_BURST
    await recorder.record(namespace_map, WARNING, "NotPeered", "not peered")
    assert len(home.created) == SPAM_BURST + 1
