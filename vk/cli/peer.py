"""`vkctl peer`: peer this cluster (the consumer) with a provider, as `liqoctl peer` does, with
liqoctl's flags: tenant namespaces, the control-plane identity, and by default one
ResourceSlice named after the provider, whose VirtualNode it waits for."""

from __future__ import annotations

import asyncio
from pathlib import Path

import click

from vk.api.constants import CLUSTER_IDENTITY_CONFIGMAP, VK_NAMESPACE, tenant_namespace
from vk.api.identity import ClusterIdentity, InvalidClusterIdentity, parse_cluster_identity
from vk.cli.options import (
    go_bool_option,
    go_duration,
    peering_kubeconfigs,
    requested_resources,
    resource_options,
)
from vk.cli.peering import (
    PeeringError,
    establish_control_plane,
    forge_resource_slice,
    remove_peering,
)
from vk.cli.waiting import Deadline, wait_for_node_ready, wait_for_resource_slice
from vk.kube.client import ApiError, KubeClient, NotFound, object_path, resource_path
from vk.kube.kubeconfig import (
    ClusterConnection,
    InvalidKubeconfig,
    default_connection,
    load_kubeconfig_file,
)
from vk.playground.progress import Progress


async def read_identity(client: KubeClient, which: str) -> ClusterIdentity:
    try:
        configmap = await client.get(
            resource_path(
                "v1", "configmaps", namespace=VK_NAMESPACE, name=CLUSTER_IDENTITY_CONFIGMAP
            )
        )
    except NotFound as error:
        raise PeeringError(
            f"vk is not installed in the {which} cluster (no {VK_NAMESPACE}/"
            f"{CLUSTER_IDENTITY_CONFIGMAP}): install it there first"
        ) from error
    try:
        return parse_cluster_identity(configmap)
    except InvalidClusterIdentity as error:
        raise PeeringError(f"the {which} cluster's identity is malformed: {error}") from error


async def peer(
    consumer_connection: ClusterConnection,
    provider_connection: ClusterConnection,
    *,
    create_resource_slice: bool,
    create_virtual_node: bool,
    slice_class: str,
    resources: dict[str, str],
    within: float,
    progress: Progress,
) -> None:
    deadline = Deadline.after(within)
    async with (
        KubeClient(consumer_connection) as consumer,
        KubeClient(provider_connection) as provider,
    ):
        with progress.step("reading both clusters' identities"):
            local = await read_identity(consumer, "local")
            remote = await read_identity(provider, "remote")
        if local.cluster_id == remote.cluster_id:
            raise PeeringError(
                f"both kubeconfigs reach cluster {local.cluster_id}: --remote-kubeconfig must "
                "be the provider's"
            )
        with progress.step(
            f"tenant namespaces and the control-plane identity of {local.cluster_id} on "
            f"{remote.cluster_id}"
        ):
            await establish_control_plane(
                consumer,
                provider,
                consumer_id=local.cluster_id,
                provider_id=remote.cluster_id,
                provider_server=provider_connection.server,
                provider_ca=provider_connection.ca_pem or b"",
            )
        if not create_resource_slice:
            return
        resource_slice = forge_resource_slice(
            remote.cluster_id,
            remote.cluster_id,
            slice_class=slice_class,
            resources=resources,
            create_virtual_node=create_virtual_node,
        )
        namespace = tenant_namespace(remote.cluster_id)
        await consumer.apply(object_path(resource_slice), resource_slice)
        with progress.step(f"waiting for {remote.cluster_id} to accept the ResourceSlice"):
            await wait_for_resource_slice(
                consumer, namespace, remote.cluster_id, deadline=deadline, progress=progress
            )
        if not create_virtual_node:
            return
        with progress.step(f"waiting for the virtual node {remote.cluster_id} to be Ready"):
            await wait_for_node_ready(
                consumer, namespace, remote.cluster_id, deadline=deadline, progress=progress
            )


@click.command("peer")
@peering_kubeconfigs
@go_bool_option(
    "--create-resource-slice", "Ask the provider for resources with a ResourceSlice named after it."
)
@go_bool_option("--create-virtual-node", "Make a VirtualNode of that ResourceSlice.")
@click.option("--resource-slice-class", default="default", show_default=True)
@resource_options("the provider's")
@click.option("--timeout", default="2m", callback=go_duration, show_default=True)
def peer_command(
    kubeconfig: str | None,
    context: str | None,
    remote_kubeconfig: Path,
    remote_context: str | None,
    create_resource_slice: bool,
    create_virtual_node: bool,
    resource_slice_class: str,
    cpu: str | None,
    memory: str | None,
    pods: str | None,
    other_resources: dict[str, str],
    timeout: float,
) -> None:
    """Peer this cluster with a provider: after it, the provider is a virtual node here."""
    try:
        asyncio.run(
            peer(
                default_connection(kubeconfig, context=context),
                load_kubeconfig_file(remote_kubeconfig, context=remote_context),
                create_resource_slice=create_resource_slice,
                create_virtual_node=create_virtual_node,
                slice_class=resource_slice_class,
                resources=requested_resources(cpu, memory, pods, other_resources),
                within=timeout,
                progress=Progress(),
            )
        )
    except (PeeringError, InvalidKubeconfig) as error:
        raise click.ClickException(str(error)) from error
    except (ApiError, OSError) as error:
        raise click.ClickException(
            f"peering failed talking to a cluster: {error}; check both kubeconfigs and run "
            "`vkctl peer` again (it resumes)"
        ) from error
    click.echo("peered")


async def unpeer(
    consumer_connection: ClusterConnection,
    provider_connection: ClusterConnection,
    within: float,
    progress: Progress,
) -> None:
    async with (
        KubeClient(consumer_connection) as consumer,
        KubeClient(provider_connection) as provider,
    ):
        local = await read_identity(consumer, "local")
        remote = await read_identity(provider, "remote")
        with progress.step(
            f"removing the peering of {local.cluster_id} with {remote.cluster_id} "
            "(virtual nodes first)"
        ):
            await remove_peering(
                consumer,
                provider,
                consumer_id=local.cluster_id,
                provider_id=remote.cluster_id,
                within=within,
            )


@click.command("unpeer")
@peering_kubeconfigs
@click.option("--timeout", default="5m", callback=go_duration, show_default=True)
def unpeer_command(
    kubeconfig: str | None,
    context: str | None,
    remote_kubeconfig: Path,
    remote_context: str | None,
    timeout: float,
) -> None:
    """Undo `vkctl peer`: drain and remove the virtual nodes, then everything peering made on
    both sides."""
    try:
        asyncio.run(
            unpeer(
                default_connection(kubeconfig, context=context),
                load_kubeconfig_file(remote_kubeconfig, context=remote_context),
                timeout,
                Progress(),
            )
        )
    except (PeeringError, InvalidKubeconfig) as error:
        raise click.ClickException(str(error)) from error
    except (ApiError, OSError) as error:
        raise click.ClickException(
            f"unpeering failed talking to a cluster: {error}; run `vkctl unpeer` again (it resumes)"
        ) from error
    click.echo("unpeered")
