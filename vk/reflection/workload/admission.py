"""Whether the provider admits this virtual kubelet's ShadowPods now, as last seen: pure
bookkeeping, no I/O.

A provider whose webhook fails open while it is down (failurePolicy Ignore) stores ShadowPods
unstamped and unreserved and makes no Pod of them (NotReserved). Every pod waiting then would
be withdrawn and asked for again on its own back-off, each costing the provider five writes a
round: instead the gate closes for the whole node, one pod at a time probes the provider (after
1 s, doubling up to 5 s while it keeps refusing: a probe costs a few writes, whatever the number
of pods waiting), and the first ShadowPod the webhook stamps opens it for every pod at once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vk.api.constants import CREATOR_USER_LABEL

FIRST_DELAY, MAX_DELAY = 1.0, 5.0
# How long a probe may stay unanswered before another pod probes instead (its pod was deleted,
# or its ShadowPod's verdict lost).
PROBE_WINDOW = 10.0


def is_stamped(shadow_pod: Mapping[str, Any]) -> bool:
    """Whether the provider's webhook stamped the ShadowPod with its creator: it passed the
    webhook."""
    return bool(((shadow_pod.get("metadata") or {}).get("labels") or {}).get(CREATOR_USER_LABEL))


class AdmissionGate:
    def __init__(self) -> None:
        self.closed = False
        self.delay = FIRST_DELAY
        self._opens_at = 0.0  # once closed: when the next probe may go
        self._probing_since: float | None = None

    def wait(self, now: float) -> float:
        """Seconds a pod must wait before asking for its ShadowPod; 0 lets it ask now (while
        the gate is closed, that pod is the probe)."""
        if not self.closed:
            return 0.0
        if self._probing_since is not None and now - self._probing_since < PROBE_WINDOW:
            return self._probing_since + PROBE_WINDOW - now
        if now < self._opens_at:
            return self._opens_at - now
        self._probing_since = now
        return 0.0

    def refused(self, now: float) -> None:
        """A ShadowPod came back unadmitted: the gate closes, or the probe failed and it stays
        closed twice as long. More refusals of the wave that closed it change nothing."""
        if not self.closed:
            self.closed, self.delay = True, FIRST_DELAY
        elif self._probing_since is not None:
            self.delay = min(self.delay * 2, MAX_DELAY)
            self._probing_since = None
        else:
            return
        self._opens_at = now + self.delay

    def admitted(self) -> bool:
        """A ShadowPod passed the webhook: the gate opens. True if it was closed (the pods
        waiting are to be woken)."""
        was_closed = self.closed
        self.closed, self.delay, self._probing_since = False, FIRST_DELAY, None
        return was_closed
