"""`vkctl get kubeconfig`: the kubeconfig of an identity peering made on this (the consumer)
cluster, to act as it on the provider (`kubectl --kubeconfig`), as liqoctl's command of the
same name: the control-plane identity by default, a ResourceSlice's (its virtual kubelets')
with --resource-slice-name."""

from __future__ import annotations

import asyncio
import base64
import binascii

import click

from vk.api.constants import control_plane_secret_name, kubeconfig_secret_name, tenant_namespace
from vk.cli.options import cluster_client, cluster_options, valid_cluster_id, valid_name
from vk.cli.peering import PeeringError
from vk.cli.waiting import get_or_none
from vk.kube.client import KubeClient, resource_path


async def read_identity_kubeconfig(
    client: KubeClient, provider: str, resource_slice: str | None
) -> str:
    namespace = tenant_namespace(provider)
    name = (
        kubeconfig_secret_name(resource_slice)
        if resource_slice
        else control_plane_secret_name(provider)
    )
    secret = await get_or_none(
        client, resource_path("v1", "secrets", namespace=namespace, name=name)
    )
    what = f"the ResourceSlice {resource_slice}" if resource_slice else "the control plane"
    if secret is None:
        raise PeeringError(
            f"no identity of {what} for {provider} here (Secret {namespace}/{name}): is this "
            f"the consumer, peered with {provider}?"
        )
    data = (secret.get("data") or {}).get("kubeconfig")
    if not data:
        raise PeeringError(
            f"the Secret {namespace}/{name} holds no kubeconfig yet: the provider has not "
            f"signed {what}'s identity (see `vkctl info peer {provider}`)"
        )
    try:
        return base64.b64decode(data, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError) as error:
        raise PeeringError(f"the Secret {namespace}/{name} holds no readable kubeconfig") from error


@click.group("get")
def get() -> None:
    """Print what peering made."""


@get.command("kubeconfig")
@click.option("--remote-cluster-id", required=True, callback=valid_cluster_id, help="The provider.")
@click.option(
    "--resource-slice-name",
    default=None,
    callback=valid_name("ResourceSlice", existing=True),
    help="That slice's identity (its virtual kubelets'), not the control plane's.",
)
@cluster_options
def get_kubeconfig(
    remote_cluster_id: str,
    resource_slice_name: str | None,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """The kubeconfig of an identity this cluster holds on provider REMOTE_CLUSTER_ID."""

    async def run() -> str:
        async with cluster_client(kubeconfig, context) as client:
            return await read_identity_kubeconfig(client, remote_cluster_id, resource_slice_name)

    click.echo(asyncio.run(run()), nl=False)
