"""`vkctl generate peer-command`: run against a provider, it prints the `vkctl peer` command
that peers a consumer with it, as in the tutorial:
`PEER_FLORENCE=$(vkctl generate peer-command --only-command --kubeconfig $KUBECONFIG_FLORENCE)`,
then `echo "$PEER_FLORENCE" | bash` with KUBECONFIG set to the consumer.

Where liqoctl's command carries a token, `vkctl peer` needs the provider's kubeconfig itself, so
the command names that file, and the context this command used in it (were it to switch its
current context before the command runs, it would peer with another cluster): it runs wherever
the file can be read.
"""

from __future__ import annotations

import asyncio
import shlex
from pathlib import Path

import click

from vk.api.identity import ClusterIdentity
from vk.cli.options import CommandClient, cluster_options
from vk.cli.peer import read_identity
from vk.cli.peering import PeeringError
from vk.kube.kubeconfig import (
    ClusterConnection,
    kubeconfig_context,
    kubeconfig_files,
    load_kubeconfig_files,
)


def forge_peer_command(provider_kubeconfig: Path, provider_context: str | None) -> str:
    """The shell command a consumer runs to peer with the provider of that kubeconfig."""
    words = ["vkctl", "peer", "--remote-kubeconfig", str(provider_kubeconfig)]
    if provider_context:
        words += ["--remote-context", provider_context]
    return shlex.join(words)


async def _identity(connection: ClusterConnection) -> ClusterIdentity:
    async with CommandClient(connection) as client:
        return await read_identity(client, "provider")


@click.group("generate")
def generate() -> None:
    """Generate what another cluster runs."""


@generate.command("peer-command")
@cluster_options
@click.option(
    "--only-command", is_flag=True, help="Print the command alone (for `$(...)` in a script)."
)
def peer_command(kubeconfig: str | None, context: str | None, only_command: bool) -> None:
    """The `vkctl peer` command that peers a consumer with this cluster (the provider)."""
    paths = kubeconfig_files(kubeconfig)
    if paths is None:
        raise PeeringError(
            "no kubeconfig file to name in the command (running in a pod): pass --kubeconfig "
            "with this cluster's kubeconfig file"
        )
    if len(paths) > 1:
        raise PeeringError(
            "$KUBECONFIG names several files, and the command names one: pass --kubeconfig "
            "with this cluster's kubeconfig file"
        )
    path = paths[0].expanduser().absolute()
    identity = asyncio.run(_identity(load_kubeconfig_files([path], context=context)))
    command = forge_peer_command(path, kubeconfig_context([path], context=context))
    if only_command:
        click.echo(command)
        return
    click.echo(
        f"Run this command with the consumer's kubeconfig (KUBECONFIG or --kubeconfig) to peer "
        f"it with {identity.cluster_id}:\n\n{command}"
    )
