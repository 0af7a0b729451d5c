"""The fault suite's figures, printed at the end of the run (and kept in `faults-figures.txt`
under the suite's playground directory while it runs)."""

from __future__ import annotations

import pytest

from tests.faults.figures import FIGURES


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if FIGURES:
        terminalreporter.section("fault suite: measured recoveries")
        for line in FIGURES:
            terminalreporter.write_line(line)
