"""Options `vk` and `vkctl` take alike, parsed as Liqo's Go flags parse them: durations, bools,
the cluster a command talks to (`--kubeconfig`, `--context`, also given before the command as
liqoctl's global flags) and its client, names and cluster IDs, resource quantities, and `-o`.
What a flag cannot be is a usage error (exit 2) saying the rule, before any cluster is asked."""

from __future__ import annotations

import asyncio
import json
import math
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
import yaml

from vk.api.core import (
    CLUSTER_ID_MAX_LENGTH,
    InvalidClusterID,
    is_dns1123_label,
    validate_cluster_id,
)
from vk.api.duration import parse_go_duration
from vk.kube.client import JSON, KubeClient
from vk.kube.kubeconfig import (
    ClusterConnection,
    InvalidKubeconfig,
    default_connection,
    kubeconfig_files,
)
from vk.node.forge import resource_problem

if TYPE_CHECKING:
    from vk.cli.waiting import Deadline

F = TypeVar("F", bound=Callable[..., Any])

OUTPUT_FORMATS = ("yaml", "json")


def go_duration(_: click.Context, __: click.Parameter, value: str) -> float:
    """A click callback: `10s`, `1m30s`, `500ms`, or plain seconds; finite, and not negative
    (a wait of `nan` would never end)."""
    try:
        seconds = float(value)
    except ValueError:
        try:
            seconds = parse_go_duration(value)
        except ValueError as error:
            raise click.BadParameter(f"{value!r} is not a duration like 10s or 2m") from error
    if not math.isfinite(seconds) or seconds < 0:
        raise click.BadParameter(
            f"{value!r} is not a duration of 0 or more, like 10s or 2m: give one"
        )
    return seconds


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


def _given_above(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A command's own `--kubeconfig` or `--context`, else the one given to a command it is
    under: `vkctl --kubeconfig K status` (liqoctl's global flags), `vkctl info --context C peer
    ID`. The nearest wins."""
    parent = ctx.parent
    while value is None and parent is not None:
        value = parent.params.get(param.name or "")
        parent = parent.parent
    return value


def cluster_options(command: F) -> F:
    """`--kubeconfig` and `--context`: the cluster a command talks to, chosen as kubectl
    chooses it (`vk.kube.kubeconfig.default_connection`); taken from `vkctl` itself, or a group
    above, when the command is not given its own."""
    command = click.option(
        "--context",
        default=None,
        callback=_given_above,
        help="The kubeconfig context (default: its current context).",
    )(command)
    return click.option(
        "--kubeconfig",
        default=None,
        callback=_given_above,
        help="The kubeconfig file (default: $KUBECONFIG's files, else ~/.kube/config).",
    )(command)


def takes_cluster_options(command: click.Command) -> bool:
    """Whether `command`, or a command under it, takes `cluster_options`."""
    if any(param.name == "kubeconfig" for param in command.params):
        return True
    return isinstance(command, click.Group) and any(
        takes_cluster_options(sub) for sub in command.commands.values()
    )


def cluster_connection(kubeconfig: str | None, context: str | None) -> ClusterConnection:
    """The connection `cluster_options` chose; when the user named no kubeconfig, its errors
    say where the one read came from."""
    try:
        return default_connection(kubeconfig, context=context)
    except InvalidKubeconfig as error:
        if kubeconfig or kubeconfig_files() is None:  # the user's file, or in-cluster: said
            raise
        if os.environ.get("KUBECONFIG"):
            raise InvalidKubeconfig(f"{error} (from $KUBECONFIG)") from error
        raise InvalidKubeconfig(
            f"{error}; pass --kubeconfig with the cluster's kubeconfig, or set KUBECONFIG"
        ) from error


# How long one request of a command may go unanswered (KubeClient's bound).
REQUEST_SECONDS = 30.0
# A request is given what is left of the command's deadline, but at least this long: the last
# poll of a wait, made as the deadline passes, says where things stand.
LAST_ANSWER_SECONDS = 5.0


def _seconds(value: float) -> str:
    return f"{value:.1f}".rstrip("0").rstrip(".") + "s"


class ServerSilent(TimeoutError):
    """An API server did not answer a request of a vkctl command in time."""

    def __init__(self, server: str, waited: float, *, side: str | None, within: float | None):
        which = f"the {side} cluster's API server" if side else "the API server"
        bound = f", what was left of --timeout {_seconds(within)}" if within is not None else ""
        super().__init__(f"{which} {server} did not answer within {_seconds(waited)}{bound}")
        self.server = server


class CommandClient(KubeClient):
    """The client of a vkctl command: a request left unanswered is a `ServerSilent` naming the
    server (and `side`, where a command talks to two: `local`, `remote`), and none waits past
    the command's `deadline` (but for `LAST_ANSWER_SECONDS`, so that the last poll of a wait
    still says where things stand)."""

    def __init__(
        self,
        connection: ClusterConnection,
        *,
        side: str | None = None,
        deadline: Deadline | None = None,
    ) -> None:
        super().__init__(connection, timeout=REQUEST_SECONDS)
        self.side = side
        self.deadline = deadline

    async def request(self, method: str, path: str, **options: Any) -> JSON:
        limit, within = REQUEST_SECONDS, None
        if self.deadline is not None:
            left = self.deadline.remaining()
            if left < LAST_ANSWER_SECONDS:
                limit = LAST_ANSWER_SECONDS
            elif left < REQUEST_SECONDS:
                limit, within = left, self.deadline.within  # said: the deadline cut it short
        try:
            async with asyncio.timeout(limit):
                return await super().request(method, path, **options)
        except TimeoutError as error:
            raise ServerSilent(
                self.connection.server, limit, side=self.side, within=within
            ) from error


def cluster_client(
    kubeconfig: str | None, context: str | None, *, deadline: Deadline | None = None
) -> KubeClient:
    """A client of the cluster `cluster_options` chose, its requests bounded by `deadline`."""
    return CommandClient(cluster_connection(kubeconfig, context), deadline=deadline)


def _name_problem(value: str, what: str) -> str | None:
    if is_dns1123_label(value):
        return None
    if not value:
        return f"{what} is empty: give one"
    shown = repr(value if len(value) <= 80 else f"{value[:79]}…")
    if len(value) > CLUSTER_ID_MAX_LENGTH:
        return (
            f"{shown} is {len(value)} characters long: a {what} is at most "
            f"{CLUSTER_ID_MAX_LENGTH} (a DNS-1123 label, as it becomes a label's value)"
        )
    return (
        f"{shown} is not a DNS-1123 label, as a {what} must be: use lower-case letters, digits "
        "and '-', starting and ending with a letter or digit"
    )


def _object_name_problem(value: str, what: str) -> str | None:
    """Why `value` is no object's name (a DNS-1123 subdomain: labels joined by dots)."""
    if not value:
        return f"{what} is empty: give one"
    if len(value) <= 253 and not any(_name_problem(part, what) for part in value.split(".")):
        return None
    return (
        f"{value[:80]!r} is not a {what}: lower-case letters, digits, '-' and '.', starting and "
        "ending with a letter or digit, at most 253 characters"
    )


def valid_name(
    what: str, *, existing: bool = False
) -> Callable[[click.Context, click.Parameter, Any], Any]:
    """A click callback: the name of a `what` (a ResourceSlice, a VirtualNode). A new one is
    a DNS-1123 label, as vk uses it as a Node's name and a label's value; one that `existing`
    names may be any object's name (kubectl may have made it)."""

    def check(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
        if value is None:
            return None
        name = f"{what} name"
        if problem := (_object_name_problem if existing else _name_problem)(value, name):
            raise click.BadParameter(problem)
        return value

    return check


def valid_secret_name(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
    """A click callback: a Secret's name, a DNS-1123 subdomain (labels joined by dots)."""
    if value is not None and (problem := _object_name_problem(value, "Secret's name")):
        raise click.BadParameter(problem)
    return value


def valid_cluster_id(_: click.Context, __: click.Parameter, value: str | None) -> str | None:
    """A click callback: a cluster ID (a DNS-1123 label: it names the tenant namespace)."""
    if value is None:
        return None
    try:
        return validate_cluster_id(value)
    except InvalidClusterID as error:
        raise click.BadParameter(str(error)) from error


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


def _quantity(_: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """What a Node can offer of the resource the flag is named after (`--pods`: pods)."""
    if value is not None and (problem := resource_problem(param.name, value)):
        raise click.BadParameter(problem)
    return value


def _named_quantities(
    _: click.Context, __: click.Parameter, values: tuple[str, ...]
) -> dict[str, str]:
    named: dict[str, str] = {}
    for value in values:
        name, sep, quantity = value.partition("=")
        if not sep or not name:
            raise click.BadParameter(f"{value!r} is not NAME=QUANTITY (e.g. nvidia.com/gpu=2)")
        if problem := resource_problem(name, quantity):
            raise click.BadParameter(problem)
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
