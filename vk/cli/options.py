"""Options `vk` and `vkctl` take alike, parsed as Liqo's Go flags parse them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from vk.api.duration import parse_go_duration

F = TypeVar("F", bound=Callable[..., Any])


def go_duration(_: click.Context, __: click.Parameter, value: str) -> float:
    """A click callback: `10s`, `1m30s`, `500ms`, or plain seconds."""
    try:
        return float(value)
    except ValueError:
        pass
    try:
        return parse_go_duration(value)
    except ValueError as error:
        raise click.BadParameter(f"{value!r} is not a duration like 10s or 2m") from error


def go_bool_option(name: str, help_text: str) -> Callable[[F], F]:
    """A boolean flag, true by default, taken bare or as `=true|false` (a Go bool flag)."""
    return click.option(
        name,
        type=click.BOOL,
        default=True,
        show_default=True,
        is_flag=False,
        flag_value=True,
        help=help_text,
    )


def peering_kubeconfigs(command: F) -> F:
    """`--kubeconfig` (the consumer, this cluster) and `--remote-kubeconfig` (the provider)."""
    command = click.option(
        "--remote-kubeconfig",
        required=True,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="The provider (remote) cluster.",
    )(command)
    return click.option(
        "--kubeconfig", envvar="KUBECONFIG", default=None, help="The consumer (local) cluster."
    )(command)
