"""Options `vk` and `vkctl` take alike, parsed as Liqo's Go flags parse them: durations, bools,
the cluster a command talks to (`--kubeconfig`, `--context`), resource quantities, and `-o`."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import click
import yaml

from vk.api.duration import parse_go_duration
from vk.api.quantity import InvalidQuantity, parse_quantity
from vk.kube.client import KubeClient
from vk.kube.kubeconfig import default_connection

F = TypeVar("F", bound=Callable[..., Any])

OUTPUT_FORMATS = ("yaml", "json")


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


def go_bool_option(name: str, help_text: str, *, default: bool = True) -> Callable[[F], F]:
    """A boolean flag taken bare (true) or as `=true|false`, as a Go bool flag is."""
    return click.option(
        name,
        type=click.BOOL,
        default=default,
        show_default=True,
        is_flag=False,
        flag_value=True,
        help=help_text,
    )


def cluster_options(command: F) -> F:
    """`--kubeconfig` and `--context`: the cluster a command talks to, chosen as kubectl
    chooses it (`vk.kube.kubeconfig.default_connection`)."""
    command = click.option(
        "--context", default=None, help="The kubeconfig context (default: its current context)."
    )(command)
    return click.option(
        "--kubeconfig",
        default=None,
        help="The kubeconfig file (default: $KUBECONFIG's first file, else ~/.kube/config).",
    )(command)


def cluster_client(kubeconfig: str | None, context: str | None) -> KubeClient:
    """A client of the cluster `cluster_options` chose."""
    return KubeClient(default_connection(kubeconfig, context=context))


def peering_kubeconfigs(command: F) -> F:
    """`--kubeconfig` and `--context` (the consumer, this cluster), `--remote-kubeconfig` and
    `--remote-context` (the provider)."""
    command = click.option(
        "--remote-context",
        default=None,
        help="The context of --remote-kubeconfig (default: its current context).",
    )(command)
    command = click.option(
        "--remote-kubeconfig",
        required=True,
        type=click.Path(exists=True, dir_okay=False, path_type=Path),
        help="The provider (remote) cluster.",
    )(command)
    return cluster_options(command)


def _quantity(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        try:
            parse_quantity(value)
        except InvalidQuantity as error:
            raise click.BadParameter(str(error)) from error
    return value


def _named_quantities(
    _: click.Context, __: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    named: dict[str, str] = {}
    for value in values:
        name, sep, quantity = value.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{value!r} is not NAME=QUANTITY (e.g. nvidia.com/gpu=2)")
        try:
            parse_quantity(quantity)
        except InvalidQuantity as error:
            raise click.BadParameter(f"{name}: {error}") from error
        named[name] = quantity
    return named


def resource_options(default: str | Mapping[str, str]) -> Callable[[F], F]:
    """`--cpu`, `--memory`, `--pods` and `--resource NAME=QUANTITY` (repeated), liqoctl's flags
    for the resources a slice asks for or a virtual node offers; `default` says what an
    omitted one means (for each of cpu, memory and pods, or all three)."""

    def decorate(command: F) -> F:
        command = click.option(
            "--resource",
            "other_resources",
            multiple=True,
            callback=_named_quantities,
            metavar="NAME=QUANTITY",
            help="Another resource, e.g. nvidia.com/gpu=2 (repeatable).",
        )(command)
        for name, title in (("pods", "Pods"), ("memory", "Memory"), ("cpu", "CPU")):
            omitted = default if isinstance(default, str) else default[name]
            command = click.option(
                f"--{name}", default=None, callback=_quantity, help=f"{title} (default: {omitted})."
            )(command)
        return command

    return decorate


def requested_resources(
    cpu: str | None, memory: str | None, pods: str | None, other: Mapping[str, str]
) -> dict[str, str]:
    """The resources given with `resource_options`, the omitted ones left out."""
    given = {"cpu": cpu, "memory": memory, "pods": pods, **other}
    return {name: value for name, value in given.items() if value is not None}


def output_option(what: str) -> Callable[[F], F]:
    """`-o yaml|json`: print `what` for machines (or for `kubectl apply`)."""
    return click.option(
        "-o", "--output", type=click.Choice(OUTPUT_FORMATS), default=None, help=what
    )


def render(obj: Any, output: str) -> str:
    """`obj` as `-o yaml` or `-o json` prints it."""
    if output == "json":
        return json.dumps(obj, indent=2)
    return yaml.safe_dump(obj, sort_keys=False).rstrip("\n")
