"""Progress for long vkctl operations: a live spinner on a terminal, plain lines in CI.

Peering, installing and the playground wait seconds to minutes; either way the user should see
what is happening and for how long, without a log to tail.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console


class Progress:
    """Reports steps. On a terminal each step shows a spinner with its elapsed time; elsewhere
    (CI, pipes) one line when a step starts and one when it ends, with its duration."""

    def __init__(self, *, quiet: bool = False) -> None:
        self.quiet = quiet
        self.console = Console(stderr=True, highlight=False, soft_wrap=True)
        self.interactive = sys.stderr.isatty()

    def info(self, message: str) -> None:
        if not self.quiet:
            self.console.print(f"[vk] {message}", markup=False)

    @contextmanager
    def step(self, message: str) -> Iterator[None]:
        start = time.monotonic()
        if self.quiet:
            yield
            return
        if self.interactive:
            with self.console.status(f"{message} ...", spinner="dots"):
                yield
        else:
            self.console.print(f"[vk] {message} ...", markup=False)
            yield
        elapsed = time.monotonic() - start
        self.console.print(f"[vk] {message}: done in {elapsed:.1f}s", markup=False)
