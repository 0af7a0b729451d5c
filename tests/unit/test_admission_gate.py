"""The virtual kubelet's admission gate: while the provider stores ShadowPods unadmitted (its
webhook failing open while down), one pod at a time probes it, on a back-off, and the first
ShadowPod stamped opens the way for all."""

from __future__ import annotations

from vk.api.constants import CREATOR_USER_LABEL
from vk.reflection.workload.admission import (
    FIRST_DELAY,
    MAX_DELAY,
    PROBE_WINDOW,
    AdmissionGate,
    is_stamped,
)


def test_an_open_gate_never_holds_a_pod_back() -> None:
    gate = AdmissionGate()
    assert [gate.wait(t) for t in (0.0, 0.0, 1.0)] == [0.0, 0.0, 0.0]
    assert gate.admitted() is False  # it was open: nobody to wake


def test_a_wave_of_refusals_closes_it_once_and_one_pod_probes_after_the_delay() -> None:
    gate = AdmissionGate()
    for _ in range(50):  # every pod of the wave comes back NotReserved
        gate.refused(10.0)
    assert gate.delay == FIRST_DELAY
    assert gate.wait(10.5) == FIRST_DELAY - 0.5
    assert gate.wait(10.0 + FIRST_DELAY) == 0.0  # the probe
    assert gate.wait(10.1 + FIRST_DELAY) == PROBE_WINDOW - 0.1  # the others wait for its verdict


def test_each_failed_probe_doubles_the_wait_up_to_the_maximum() -> None:
    gate, now, delays = AdmissionGate(), 0.0, []
    gate.refused(now)
    for _ in range(8):
        now += gate.delay
        assert gate.wait(now) == 0.0
        now += 0.1  # the probe's verdict: NotReserved again
        gate.refused(now)
        delays.append(gate.delay)
    assert delays == [2.0, 4.0, MAX_DELAY, MAX_DELAY, MAX_DELAY, MAX_DELAY, MAX_DELAY, MAX_DELAY]


def test_a_probe_that_never_hears_back_lets_another_pod_probe() -> None:
    gate = AdmissionGate()
    gate.refused(0.0)
    assert gate.wait(FIRST_DELAY) == 0.0
    assert gate.wait(FIRST_DELAY + PROBE_WINDOW) == 0.0


def test_a_stamped_shadow_pod_opens_the_gate_for_everyone() -> None:
    gate = AdmissionGate()
    gate.refused(0.0)
    gate.wait(FIRST_DELAY)
    assert gate.admitted() is True
    assert gate.wait(FIRST_DELAY) == 0.0
    assert gate.delay == FIRST_DELAY
    assert is_stamped({"metadata": {"labels": {CREATOR_USER_LABEL: "venice"}}})
    assert not is_stamped({"metadata": {"labels": {"app": "web"}}})
    assert not is_stamped({"metadata": {}})
