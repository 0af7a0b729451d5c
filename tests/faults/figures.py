"""What the fault suite measured, one line per figure, printed by its conftest."""

from __future__ import annotations

FIGURES: list[str] = []


def record(fault: str, what: str, seconds: float) -> None:
    FIGURES.append(f"{fault}: {what} {seconds:.1f} s")
