"""Asking before a destructive command, as liqoctl does, and `--skip-confirm` to not ask. Only
someone at a terminal is asked: scripts, tests and CI, whose stdin is not one, go on unasked."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

F = TypeVar("F", bound=Callable[..., Any])


def skip_confirm_option(command: F) -> F:
    """`--skip-confirm`, liqoctl's flag: do not ask."""
    return click.option(
        "--skip-confirm",
        is_flag=True,
        help="Do not ask for confirmation (it is asked only when stdin is a terminal).",
    )(command)


def at_terminal() -> bool:
    """Someone may answer: stdin is a terminal."""
    return sys.stdin.isatty()


def confirm_destruction(what: str, *, skip: bool) -> None:
    """Asks whether to go on, saying `what` will be deleted; click.Abort (exit 1) on no."""
    if skip or not at_terminal():
        return
    click.confirm(f"{what}. Go on?", abort=True, err=True)
