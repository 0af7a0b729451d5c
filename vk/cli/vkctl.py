"""`vkctl`: the command users run, as `liqoctl` is for Liqo.

Every failure ends in a one-line `error:` saying what went wrong and what to do, and a non-zero
exit code; tracebacks are for bugs only. Commands raise typed errors; `Vkctl` turns the ones a
command did not word itself into that line. Tools on top of vk (`vkctl playground`) add their
commands as entry points of the group `vkctl.commands`, imported only when run or listed.
"""

from __future__ import annotations

from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

import aiohttp
import click

from vk.cli.generate import generate
from vk.cli.info import info
from vk.cli.install import install, uninstall
from vk.cli.kubeconfigs import get
from vk.cli.offload import offload, unoffload
from vk.cli.peer import peer_command, unpeer_command
from vk.cli.peering import PeeringError
from vk.cli.resources import create, delete
from vk.cli.tenancy import cordon, drain, uncordon
from vk.kube.client import ApiError
from vk.kube.kubeconfig import InvalidKubeconfig

PLUGINS = "vkctl.commands"


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

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except PeeringError as error:
            raise click.ClickException(str(error)) from error
        except InvalidKubeconfig as error:
            raise click.ClickException(
                f"{error}; pass --kubeconfig (and --context) for the cluster to use"
            ) from error
        except (ApiError, ConnectionError, aiohttp.ClientError, TimeoutError) as error:
            raise click.ClickException(
                f"talking to the cluster failed: {error}; check that --kubeconfig and --context "
                "reach the right cluster, as a user allowed to do this, and run the command again"
            ) from error


@click.group(cls=Vkctl, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vk", prog_name="vkctl")
def vkctl() -> None:
    """vkctl stretches a Kubernetes cluster over provider clusters (Liqo-compatible offloading)."""


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
