"""The one way vk writes a moment: Kubernetes' Time and MicroTime."""

from __future__ import annotations

import datetime

from vk.api.timestamps import kube_micro_time, kube_time

MOMENT = datetime.datetime(2026, 11, 26, 8, 0, 5, 123456, tzinfo=datetime.UTC)


def test_a_time_is_written_in_utc_to_the_second() -> None:
    assert kube_time(MOMENT) == "2026-11-26T08:00:05Z"
    paris = datetime.timezone(datetime.timedelta(hours=1))
    assert kube_time(MOMENT.astimezone(paris)) == "2026-11-26T08:00:05Z", "converted to UTC"
    assert kube_time(MOMENT.replace(tzinfo=None)) == "2026-11-26T08:00:05Z", "naive: UTC"


def test_a_micro_time_keeps_the_microseconds() -> None:
    assert kube_micro_time(MOMENT) == "2026-11-26T08:00:05.123456Z"
    assert kube_micro_time(MOMENT.replace(microsecond=0)) == "2026-11-26T08:00:05.000000Z"
