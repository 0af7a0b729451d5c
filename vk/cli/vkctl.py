"""`vkctl`: the command users run, as `liqoctl` is for Liqo.

Every failure ends in a one-line `error:` saying what went wrong and what to do, and a non-zero
exit code; tracebacks are for bugs only. Commands raise typed errors; `Vkctl` turns the ones a
command did not word itself into that line, with the advice that fits the error: the API
server's refusal of a value, the RBAC right missing, what was not found, or, when the cluster
was not reached, the kubeconfig. `--kubeconfig` and `--context` may come before the command, as
liqoctl's global flags. Tools on top of vk (`vkctl playground`) add their commands as entry
points of the group `vkctl.commands`, imported only when run or listed.
"""

from __future__ import annotations

import re
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import click

from vk.cli.generate import generate
from vk.cli.info import info
from vk.cli.install import install, uninstall
from vk.cli.kubeconfigs import get
from vk.cli.offload import offload, unoffload
from vk.cli.options import cluster_options, takes_cluster_options
from vk.cli.peer import peer_command, unpeer_command
from vk.cli.peering import PeeringError
from vk.cli.resources import create, delete
from vk.cli.tenancy import cordon, drain, uncordon
from vk.kube.client import ApiError
from vk.kube.kubeconfig import InvalidKubeconfig

PLUGINS = "vkctl.commands"

# What is shown of an API server's message at the most (a proxy may answer a page of HTML).
MAX_MESSAGE_SHOWN = 1000
RUN_AGAIN = "run the command again"
CHECK_KUBECONFIG = "check that --kubeconfig and --context reach the right cluster"
# How RBAC words a denial (`pods "p" is forbidden: User "bob" cannot get resource "pods" ...`);
# a webhook's, a quota's or a terminating namespace's refusal is a 403 too.
RBAC_DENIAL = re.compile(r'forbidden: User "(?P<user>[^"]*)" cannot ')


def _one_line(text: str) -> str:
    line = " ".join(text.split())
    return line if len(line) <= MAX_MESSAGE_SHOWN else f"{line[: MAX_MESSAGE_SHOWN - 1]}…"


def api_error_message(error: ApiError) -> str:
    """An API server's error Status as one line: its message, and what to do about it."""
    said = _one_line(error.message) or f"{error.status} {error.reason}".strip()
    if error.status == 401:
        return (
            f"the API server refused the credentials ({said}): {CHECK_KUBECONFIG}, as a user "
            "whose credentials are valid (not expired)"
        )
    if error.status == 403:
        denied = RBAC_DENIAL.search(said)
        if denied is None:  # an admission webhook, a quota, a namespace being deleted
            return f"the API server refused it (Forbidden): {said}"
        if denied["user"] == "system:anonymous":
            return f"{said}: the API server took no credentials of yours; {CHECK_KUBECONFIG}"
        return (
            f"{said}: {denied['user']} lacks that RBAC right; ask the cluster's administrator "
            "for it, or use a kubeconfig (--kubeconfig, --context) whose user has it"
        )
    if error.status == 404:
        if "could not find the requested resource" in said:
            return f"{said}: is vk installed in this cluster (`vkctl info`)?"
        return said if "not found" in said else f"not found: {said}"
    if error.status in (400, 422):
        return f"the API server refused a value ({error.reason or error.status}): {said}"
    if error.status == 409:
        if error.reason == "AlreadyExists":
            return f"{said}: choose another name, or delete it first"
        return f"{said}; {RUN_AGAIN}"
    if error.status >= 500 or error.status == 429:
        return f"the API server failed ({error.status} {error.reason}): {said}; {RUN_AGAIN}"
    return f"the API server answered {error.status} {error.reason}: {said}"


def unreached_message(error: OSError) -> str:
    """A cluster not reached (no connection, no answer in time) as one line."""
    said = _one_line(str(error)) or "an API server did not answer in time"
    return f"{said}: {CHECK_KUBECONFIG}, that it is up and reachable from here, and {RUN_AGAIN}"


class Vkctl(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        plugins = (plugin.name for plugin in entry_points(group=PLUGINS))
        return sorted({*super().list_commands(ctx), *plugins})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        command = super().get_command(ctx, name)
        if command is None:
            for plugin in entry_points(group=PLUGINS, name=name):
                loaded: click.Command = plugin.load()  # the plugin's modules, imported now
                return loaded
        return command

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        name, command, rest = super().resolve_command(ctx, args)
        if command is not None and not takes_cluster_options(command):
            given = [f"--{o}" for o in ("kubeconfig", "context") if ctx.params.get(o) is not None]
            if given:
                raise click.UsageError(
                    f"`vkctl {name}` talks to no cluster of yours: drop {' and '.join(given)}",
                    ctx,
                )
        return name, command, rest

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (PeeringError, InvalidKubeconfig) as error:
            raise click.ClickException(str(error)) from error
        except ApiError as error:
            raise click.ClickException(api_error_message(error)) from error
        except (ConnectionError, TimeoutError) as error:  # no connection, or no answer in time
            raise click.ClickException(unreached_message(error)) from error


@click.group(cls=Vkctl, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vk", prog_name="vkctl")
@cluster_options
def vkctl(kubeconfig: str | None, context: str | None) -> None:
    """vkctl stretches a Kubernetes cluster over provider clusters (Liqo-compatible offloading).

    --kubeconfig and --context given here are every command's, unless it is given its own."""


vkctl.add_command(install)
vkctl.add_command(uninstall)
vkctl.add_command(peer_command)
vkctl.add_command(unpeer_command)
vkctl.add_command(generate)
vkctl.add_command(create)
vkctl.add_command(delete)
vkctl.add_command(info)
# liqoctl's name for it, which Liqo's tutorials run.
vkctl.add_command(info, "status")
vkctl.add_command(offload)
vkctl.add_command(unoffload)
vkctl.add_command(cordon)
vkctl.add_command(uncordon)
vkctl.add_command(drain)
vkctl.add_command(get)


def main() -> None:
    vkctl(prog_name=Path("vkctl").name)
