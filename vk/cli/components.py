"""`vk`: the entry point of vk's components (virtual kubelet, controller manager, webhooks),
one image and one command for all of them, as the Deployments run them."""

from __future__ import annotations

import click


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vk", prog_name="vk")
def vk() -> None:
    """vk's components. Each subcommand runs one of them as a long-lived process."""


def main() -> None:
    vk(prog_name="vk")
