"""The Events vk writes about its own work."""

from __future__ import annotations

import datetime

from vk.kube.events import MAX_EVENT_MESSAGE, WARNING, forge_event

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
