"""`vkctl`: the command users run, as `liqoctl` is for Liqo.

Every failure ends in a one-line `error:` saying what went wrong and what to do, and a non-zero
exit code; tracebacks are for bugs only.
"""

from __future__ import annotations

from pathlib import Path

import click

from vk.cli.peer import peer_command, unpeer_command
from vk.cli.playground import playground


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vk", prog_name="vkctl")
def vkctl() -> None:
    """vkctl stretches a Kubernetes cluster over provider clusters (Liqo-compatible offloading)."""


vkctl.add_command(playground)
vkctl.add_command(peer_command)
vkctl.add_command(unpeer_command)


def main() -> None:
    vkctl(prog_name=Path("vkctl").name)
