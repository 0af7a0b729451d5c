"""Go durations (`10s`, `1m30s`, `500ms`), as Liqo's flags and metrics.k8s.io windows write
them, in seconds. Pure."""

from __future__ import annotations

import re

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(value: str) -> float:
    """Seconds of a Go duration (`15.023s`, `1m0s`, `500ms`); ValueError otherwise."""
    parts = _DURATION_PART.findall(value)
    if not parts or "".join(n + u for n, u in parts) != value:
        raise ValueError(f"{value!r} is not a duration")
    return sum(float(number) * _DURATION_UNITS[unit] for number, unit in parts)
