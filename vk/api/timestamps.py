"""How Kubernetes writes a moment, and the one place vk writes them: a `Time` (RFC 3339 in UTC,
to the second: conditions, Events, annotations, the timestamps of most fields) and a
`MicroTime` (to the microsecond: Leases). Pure."""

from __future__ import annotations

import datetime


def kube_time(moment: datetime.datetime) -> str:
    """`2026-11-26T08:00:00Z`: metav1.Time's wire format. A moment without a time zone is
    taken as UTC, as every moment Kubernetes writes is."""
    return _in_utc(moment).strftime("%Y-%m-%dT%H:%M:%SZ")


def kube_micro_time(moment: datetime.datetime) -> str:
    """`2026-11-26T08:00:00.000000Z`: metav1.MicroTime's wire format (a Lease's times)."""
    return _in_utc(moment).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _in_utc(moment: datetime.datetime) -> datetime.datetime:
    if moment.tzinfo is None:
        return moment.replace(tzinfo=datetime.UTC)
    return moment.astimezone(datetime.UTC)
