"""`vkctl peer` and `vkctl unpeer`, as liqoctl's: peering this cluster (the consumer) with a
provider (tenant namespaces, the consumer's Tenant and control-plane identity on the provider,
and by default one ResourceSlice named after the provider, whose VirtualNode it waits for), and
undoing it, with the provider's kubeconfig or, out of band, with this cluster's only: the
consumer's Tenant on the provider is deleted, and the provider cleans up after itself."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ssl
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import click
from click.core import ParameterSource

from vk.api.authentication import ResourceSlice, Tenant
from vk.api.constants import (
    CLUSTER_IDENTITY_CONFIGMAP,
    IDENTITY_RESOURCE_SLICE,
    IDENTITY_TYPE_LABEL,
    VK_NAMESPACE,
    control_plane_secret_name,
    tenant_namespace,
)
from vk.api.core import ForeignCluster
from vk.api.identity import ClusterIdentity, InvalidClusterIdentity, parse_cluster_identity
from vk.api.meta import KubeObject
from vk.api.offloading import NamespaceMap, VirtualNode
from vk.cli.options import (
    CommandClient,
    cluster_options,
    go_bool_option,
    go_duration,
    peering_kubeconfigs,
    requested_resources,
    resource_options,
    valid_cluster_id,
)
from vk.cli.peering import (
    PeeringError,
    check_peers,
    cluster_uid,
    establish_control_plane,
    forge_resource_slice,
)
from vk.cli.progress import Progress
from vk.cli.waiting import (
    POLL_SECONDS,
    Deadline,
    get_or_none,
    held_by,
    virtual_node_state,
    wait_for_node_ready,
    wait_for_resource_slice,
    wait_until_gone,
)
from vk.controllers.replication import FINALIZER as REPLICATION_FINALIZER
from vk.controllers.tenants import FINALIZER as TENANT_FINALIZER
from vk.kube.client import (
    JSON,
    PROVIDER_MAX_BODY_BYTES,
    ApiError,
    Conflict,
    KubeClient,
    NotFound,
    delete_options,
    object_path,
    resource_path,
)
from vk.kube.kubeconfig import (
    ClusterConnection,
    InvalidKubeconfig,
    default_connection,
    load_kubeconfig_file,
    parse_secret_kubeconfig,
)

UNPEER_TIMEOUT = "5m"
# How long the consumer's control-plane identity waits for the provider's answer when unpeering
# out of band (a provider out of reach is said, not waited for).
IDENTITY_TIMEOUT = 15.0


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
        CommandClient(consumer_connection, side="local", deadline=deadline) as consumer,
        CommandClient(provider_connection, side="remote", deadline=deadline) as provider,
    ):
        with progress.step("reading both clusters' identities"):
            local = await read_identity(consumer, "local")
            remote = await read_identity(provider, "remote")
            local_uid, remote_uid = await cluster_uid(consumer), await cluster_uid(provider)
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
                consumer_uid=local_uid,
                provider_uid=remote_uid,
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


# --- vkctl unpeer --------------------------------------------------------------------------


@dataclass
class ProviderSide:
    """How unpeering reaches the provider: its administrator's client (`--remote-kubeconfig`),
    the consumer's control-plane identity there (out of band), or nothing (`unreachable` says
    why)."""

    client: KubeClient | None
    administrator: bool = False
    unreachable: str | None = None


def tenant_path(consumer_id: str) -> str:
    """The consumer's Tenant on the provider."""
    return resource_path(
        Tenant.group_version(),
        Tenant.PLURAL,
        namespace=tenant_namespace(consumer_id),
        name=consumer_id,
    )


def left_on_provider(consumer_id: str, provider_id: str, why: str) -> str:
    """What to tell when the provider's side could not be ended from here, `why` saying why."""
    namespace = tenant_namespace(consumer_id)
    return (
        f"the peering with {provider_id} is removed here, but {why}: unless its side was "
        f"ended already, {provider_id} still has what it made for {consumer_id}, the Tenant "
        f"{namespace}/"
        f"{consumer_id} and the namespace {namespace} (with the Quotas of {consumer_id}'s "
        f"slices), and the namespaces offloaded there by {consumer_id}. On {provider_id}, "
        f"`kubectl delete tenants.authentication.liqo.io -n {namespace} {consumer_id}` removes "
        "all of it"
    )


def describe_remaining(items: list[tuple[str, JSON]]) -> str:
    """`VirtualNode florence: Node Draining; ResourceSlice florence: held by ...`."""
    return "; ".join(
        f"{kind} {obj['metadata']['name']}: "
        + ((virtual_node_state(obj) if kind == VirtualNode.KIND else held_by(obj)) or "deleting")
        for kind, obj in items
    )


async def wait_until_empty(
    client: KubeClient,
    kinds: list[type[KubeObject]],
    namespace: str,
    *,
    deadline: Deadline,
    progress: Progress,
    release: str | None = None,
) -> None:
    """Until `namespace` holds no object of `kinds`; with `release`, taking that finalizer off
    them as they wait (the one the provider can no longer answer for)."""
    reported = ""
    while True:
        remaining: list[tuple[str, JSON]] = []
        for kind in kinds:
            path = resource_path(kind.group_version(), kind.PLURAL, namespace=namespace)
            for obj in (await client.get(path)).get("items") or []:
                remaining.append((kind.KIND, obj))
                if release and release in (obj["metadata"].get("finalizers") or []):
                    with contextlib.suppress(NotFound, Conflict):
                        await client.set_finalizer(
                            resource_path(
                                kind.group_version(),
                                kind.PLURAL,
                                namespace=namespace,
                                name=obj["metadata"]["name"],
                            ),
                            obj,
                            release,
                            present=False,
                        )
        if not remaining:
            return
        state = describe_remaining(remaining)
        if state != reported:
            progress.info(state)
            reported = state
        if deadline.passed():
            raise PeeringError(
                f"still in {namespace} after {deadline.within:.0f}s: {state}; look at their "
                "conditions and finalizers (`kubectl get -o yaml`), then run `vkctl unpeer` "
                "again (it resumes)"
            )
        await asyncio.sleep(POLL_SECONDS)


async def remove_consumer_objects(
    consumer: KubeClient,
    provider_id: str,
    *,
    release: bool,
    deadline: Deadline,
    progress: Progress,
) -> None:
    """The consumer's ResourceSlices, VirtualNodes and NamespaceMaps for `provider_id`, virtual
    nodes drained first: slices go first (none makes its VirtualNode again then), their
    kubeconfig Secrets orphaned, so that the virtual kubelets keep their provider identity
    (one whose Secret is gone drops it) while their nodes are drained and the provider still
    runs what they offloaded; then those Secrets, and the namespace maps (the provider's twin
    namespaces). With `release`, the provider is out of reach: the replication finalizer, which
    waits for it, is taken off."""
    namespace = tenant_namespace(provider_id)
    release_finalizer = REPLICATION_FINALIZER if release else None
    orphan = delete_options(propagation="Orphan")
    for kind, options in ((ResourceSlice, orphan), (VirtualNode, None)):
        with contextlib.suppress(NotFound):
            await consumer.delete(
                resource_path(kind.group_version(), kind.PLURAL, namespace=namespace),
                body=options,
            )
    await wait_until_empty(consumer, [VirtualNode], namespace, deadline=deadline, progress=progress)
    identities = f"{IDENTITY_TYPE_LABEL}={IDENTITY_RESOURCE_SLICE}"
    with contextlib.suppress(NotFound):
        await consumer.delete(
            resource_path("v1", "secrets", namespace=namespace)
            + f"?labelSelector={quote(identities)}"
        )
    with contextlib.suppress(NotFound):
        await consumer.delete(
            resource_path(NamespaceMap.group_version(), NamespaceMap.PLURAL, namespace=namespace)
        )
    await wait_until_empty(
        consumer,
        [ResourceSlice, NamespaceMap],
        namespace,
        deadline=deadline,
        progress=progress,
        release=release_finalizer,
    )


async def end_tenant(
    provider: ProviderSide,
    consumer_id: str,
    provider_id: str,
    tenant: JSON,
    *,
    deadline: Deadline,
    progress: Progress,
) -> str | None:
    """Deletes the consumer's Tenant on the provider and waits until the provider has removed
    what it made for the consumer; why that is not confirmed, if it is not."""
    assert provider.client is not None
    client = provider.client
    path = tenant_path(consumer_id)
    held = TENANT_FINALIZER in (tenant["metadata"].get("finalizers") or [])
    if not tenant["metadata"].get("deletionTimestamp"):
        with contextlib.suppress(NotFound):
            await client.delete(path)
    reported = ""
    while True:
        try:
            current = await get_or_none(client, path)
        except ApiError as error:
            if error.status != 403:
                raise
            break  # the identity's last right went with the namespace: the Tenant is going
        if current is None:
            break
        state = held_by(current)
        if state and state != reported:
            progress.info(f"Tenant {consumer_id} on {provider_id}: {state}")
            reported = state
        if deadline.passed():
            raise PeeringError(
                f"the Tenant {tenant_namespace(consumer_id)}/{consumer_id} on {provider_id} is "
                f"still there after {deadline.within:.0f}s ({state}): is vk controller-manager "
                f"running there? `kubectl get tenants.authentication.liqo.io -A` and its log on "
                f"{provider_id} say what it waits for; then run `vkctl unpeer` again"
            )
        await asyncio.sleep(POLL_SECONDS)
    if provider.administrator:
        namespace_path = resource_path("v1", "namespaces", name=tenant_namespace(consumer_id))
        namespace = await get_or_none(client, namespace_path)
        if namespace is not None and namespace["metadata"].get("deletionTimestamp"):
            await wait_until_gone(
                client,
                namespace_path,
                f"namespace {tenant_namespace(consumer_id)} on {provider_id}",
                deadline=deadline,
                progress=progress,
            )
    if not held:
        return (
            f"the Tenant on {provider_id} had no finalizer of vk's, so nothing there waited to "
            f"clean up (is vk controller-manager running on {provider_id}?)"
        )
    return None


async def provides_to(client: KubeClient, cluster_id: str) -> bool:
    """This cluster keeps a Tenant for `cluster_id`: it is also `cluster_id`'s provider, and
    that peering lives in the same tenant namespace."""
    path = resource_path(
        Tenant.group_version(), Tenant.PLURAL, namespace=tenant_namespace(cluster_id)
    )
    with contextlib.suppress(NotFound):
        for tenant in (await client.get(path)).get("items") or []:
            if (tenant.get("spec") or {}).get("clusterID") == cluster_id and not tenant[
                "metadata"
            ].get("deletionTimestamp"):
                return True
    return False


async def remove_local_records(
    consumer: KubeClient, provider_id: str, *, deadline: Deadline, progress: Progress
) -> None:
    """The control-plane identity, the tenant namespace and the ForeignCluster of `provider_id`
    here; the namespace and the ForeignCluster stay if `provider_id` consumes from us too."""
    namespace = tenant_namespace(provider_id)
    with contextlib.suppress(NotFound):
        await consumer.delete(
            resource_path(
                "v1", "secrets", namespace=namespace, name=control_plane_secret_name(provider_id)
            )
        )
    if await provides_to(consumer, provider_id):
        progress.info(
            f"{provider_id} consumes from this cluster too: its tenant namespace {namespace} and "
            "ForeignCluster stay for that peering"
        )
        return
    path = resource_path("v1", "namespaces", name=namespace)
    with contextlib.suppress(NotFound):
        await consumer.delete(path)
    await wait_until_gone(
        consumer, path, f"namespace {namespace}", deadline=deadline, progress=progress
    )
    # Last: while the tenant namespace was there, the controllers kept it up to date.
    with contextlib.suppress(NotFound):
        await consumer.delete(
            resource_path(ForeignCluster.group_version(), ForeignCluster.PLURAL, name=provider_id)
        )


class ProviderUnanswered(PeeringError):
    """The provider did not answer unpeering, and nothing was removed: without --force, the
    consumer keeps its identity there, the only way left to end the provider's side."""


async def remove_peering(
    consumer: KubeClient,
    provider: ProviderSide,
    *,
    consumer_id: str,
    provider_id: str,
    deadline: Deadline,
    progress: Progress,
    force: bool = False,
) -> None:
    """Undoes `vkctl peer`, both forms of `vkctl unpeer` alike: the consumer's virtual nodes
    (drained), ResourceSlices and NamespaceMaps; then the consumer's Tenant on the provider,
    whose deletion makes the provider remove what it made for the consumer (Quotas, twin
    namespaces, the control-plane identity's rights, its ForeignCluster, the tenant
    namespace); then the identity, tenant namespace and ForeignCluster here. A provider that
    does not answer stops it before anything is removed, unless `force`: then the local side is
    removed all the same, and a PeeringError at the end says what is left there. (Without a
    control-plane identity here, there is nothing to ask the provider with: it goes on.)"""
    unreachable = provider.unreachable
    tenant: JSON | None = None
    ended_there = False
    if provider.client is not None and unreachable is None:
        try:
            tenant = await get_or_none(provider.client, tenant_path(consumer_id))
        except ApiError as error:
            if error.status != 403:
                unreachable = str(error)
            else:
                ended_there = True
                progress.info(
                    f"{provider_id} no longer lets {consumer_id}'s identity in: it has ended the "
                    "peering on its side already"
                )
        except (TimeoutError, OSError) as error:
            unreachable = str(error) or f"no answer in time ({type(error).__name__})"
        if unreachable is not None and not force:
            raise ProviderUnanswered(
                f"{provider_id} did not answer, or refused, at {provider.client.connection.server} "
                f"({unreachable}): nothing was removed; run `vkctl unpeer` again once it "
                f"answers, or add --force to remove the peering on this side only ({provider_id} "
                f"then keeps running {consumer_id}'s offloaded pods, and this cluster's identity "
                "there, which could end them, is deleted)"
            )
    if unreachable is not None:
        progress.info(
            f"{provider_id} cannot be reached ({unreachable}): removing the peering on this "
            "side only"
        )
    with progress.step(
        f"removing the virtual nodes (drained), ResourceSlices and NamespaceMaps of {provider_id}"
    ):
        # Without the control-plane identity here (deleted by hand), the replication
        # controller cannot let the twins go, and nothing else would take its finalizer off:
        # released, as for a provider out of reach (the Tenant's end removes them there).
        identity = await get_or_none(
            consumer,
            resource_path(
                "v1",
                "secrets",
                namespace=tenant_namespace(provider_id),
                name=control_plane_secret_name(provider_id),
            ),
        )
        await remove_consumer_objects(
            consumer,
            provider_id,
            release=unreachable is not None or identity is None,
            deadline=deadline,
            progress=progress,
        )
    unconfirmed: str | None = None
    if unreachable is None and not ended_there:
        if tenant is None:
            progress.info(f"{provider_id} keeps no Tenant of {consumer_id}: nothing to end there")
        else:
            with progress.step(
                f"ending the peering on {provider_id}: its Tenant {consumer_id}, and all it made "
                f"for {consumer_id}"
            ):
                unconfirmed = await end_tenant(
                    provider,
                    consumer_id,
                    provider_id,
                    tenant,
                    deadline=deadline,
                    progress=progress,
                )
    with progress.step(
        f"removing the identity, tenant namespace and ForeignCluster of {provider_id} here"
    ):
        await remove_local_records(consumer, provider_id, deadline=deadline, progress=progress)
    if unreachable is not None:
        raise PeeringError(
            left_on_provider(
                consumer_id, provider_id, f"{provider_id} was not reached ({unreachable})"
            )
        )
    if unconfirmed is not None:
        raise PeeringError(left_on_provider(consumer_id, provider_id, unconfirmed))


async def unpeer(
    consumer_connection: ClusterConnection,
    provider_connection: ClusterConnection,
    within: float,
    progress: Progress,
    *,
    force: bool = False,
) -> None:
    """`vkctl unpeer --remote-kubeconfig`: with the provider's administrator."""
    deadline = Deadline.after(within)
    async with (
        CommandClient(consumer_connection, side="local", deadline=deadline) as consumer,
        CommandClient(provider_connection, side="remote", deadline=deadline) as provider,
    ):
        local = await read_identity(consumer, "local")
        try:
            remote = await read_identity(provider, "remote")
        except (TimeoutError, OSError) as error:
            # Which provider it is only it can say: --force cannot go on from here.
            raise PeeringError(
                f"{error or 'the provider did not answer'}: nothing was removed; run this again "
                "once it answers, or `vkctl unpeer out-of-band <its cluster ID> --force` to "
                "remove the peering on this side only"
            ) from error
        if local.cluster_id == remote.cluster_id:
            raise PeeringError(
                f"both kubeconfigs reach cluster {local.cluster_id}: --remote-kubeconfig must "
                "be the provider's"
            )
        # Only the peering of these very clusters: not one that another claiming an ID names.
        await check_peers(
            consumer,
            provider,
            consumer_id=local.cluster_id,
            provider_id=remote.cluster_id,
            consumer_uid=await cluster_uid(consumer),
            provider_uid=await cluster_uid(provider),
        )
        await remove_peering(
            consumer,
            ProviderSide(provider, administrator=True),
            consumer_id=local.cluster_id,
            provider_id=remote.cluster_id,
            deadline=deadline,
            progress=progress,
            force=force,
        )


async def control_plane_client(consumer: KubeClient, provider_id: str) -> ProviderSide:
    """The provider as the consumer's control-plane identity reaches it, from its Secret."""
    namespace = tenant_namespace(provider_id)
    name = control_plane_secret_name(provider_id)
    secret = await get_or_none(
        consumer, resource_path("v1", "secrets", namespace=namespace, name=name)
    )
    data = ((secret or {}).get("data") or {}).get("kubeconfig")
    if not data:
        return ProviderSide(
            None, unreachable=f"no control-plane identity here ({namespace}/{name})"
        )
    try:
        connection = parse_secret_kubeconfig(base64.b64decode(data))
        return ProviderSide(
            KubeClient(
                connection,
                name="provider",
                timeout=IDENTITY_TIMEOUT,
                max_body=PROVIDER_MAX_BODY_BYTES,
            )
        )
    except (InvalidKubeconfig, ValueError, ssl.SSLError) as error:
        return ProviderSide(None, unreachable=f"the Secret {namespace}/{name} is unusable: {error}")


async def unpeer_out_of_band(
    consumer_connection: ClusterConnection,
    provider_id: str,
    within: float,
    progress: Progress,
    *,
    force: bool = False,
) -> None:
    """`vkctl unpeer out-of-band`: with the consumer's kubeconfig only; the provider is reached
    with the control-plane identity, which may delete its own Tenant there."""
    deadline = Deadline.after(within)
    async with CommandClient(consumer_connection, side="local", deadline=deadline) as consumer:
        local = await read_identity(consumer, "local")
        if local.cluster_id == provider_id:
            raise PeeringError(f"{provider_id} is this cluster: name the provider to unpeer from")
        namespace = await get_or_none(
            consumer, resource_path("v1", "namespaces", name=tenant_namespace(provider_id))
        )
        foreign_cluster = await get_or_none(
            consumer,
            resource_path(ForeignCluster.group_version(), ForeignCluster.PLURAL, name=provider_id),
        )
        if namespace is None and foreign_cluster is None:
            raise PeeringError(
                f"{local.cluster_id} has no peering with {provider_id} (no namespace "
                f"{tenant_namespace(provider_id)}, no ForeignCluster {provider_id}): "
                "`kubectl get foreignclusters` lists the peered clusters"
            )
        provider = await control_plane_client(consumer, provider_id)
        try:
            await remove_peering(
                consumer,
                provider,
                consumer_id=local.cluster_id,
                provider_id=provider_id,
                deadline=deadline,
                progress=progress,
                force=force,
            )
        finally:
            if provider.client is not None:
                await provider.client.close()


def run_unpeer(coroutine: Coroutine[Any, Any, None]) -> None:
    """Runs an unpeering; its errors as one `error:` line."""
    try:
        asyncio.run(coroutine)
    except (PeeringError, InvalidKubeconfig) as error:
        raise click.ClickException(str(error)) from error
    except (ApiError, OSError) as error:
        raise click.ClickException(
            f"unpeering failed talking to a cluster: {error}; run `vkctl unpeer` again (it resumes)"
        ) from error
    click.echo("unpeered")


FORCE_HELP = (
    "Go on when the provider does not answer, or refuses (but for 403, which says it ended the "
    "peering): remove the peering on this side only, this cluster's identity there included, "
    "leaving the provider running what was offloaded."
)


@click.group("unpeer", invoke_without_command=True)
@cluster_options
@click.option(
    "--remote-kubeconfig",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The provider (remote) cluster; required unless `out-of-band` is used.",
)
@click.option(
    "--remote-context",
    default=None,
    help="The context of --remote-kubeconfig (default: its current context).",
)
@click.option("--timeout", default=UNPEER_TIMEOUT, callback=go_duration, show_default=True)
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.pass_context
def unpeer_command(
    ctx: click.Context,
    kubeconfig: str | None,
    context: str | None,
    remote_kubeconfig: Path | None,
    remote_context: str | None,
    timeout: float,
    force: bool,
) -> None:
    """Undo `vkctl peer`: drain and remove the virtual nodes, then everything peering made on
    both sides. With the provider's kubeconfig (--remote-kubeconfig), or, with this cluster's
    only, `vkctl unpeer out-of-band CLUSTER_ID`: the provider then cleans up after itself."""
    if ctx.invoked_subcommand is not None:
        if remote_kubeconfig is not None:
            raise click.UsageError(
                "`out-of-band` reaches the provider with this cluster's identity there: drop "
                "--remote-kubeconfig, or drop `out-of-band`"
            )
        return
    if remote_kubeconfig is None:
        raise click.UsageError(
            "Missing option '--remote-kubeconfig' (the provider's), or use `vkctl unpeer "
            "out-of-band CLUSTER_ID` with this cluster's kubeconfig only"
        )
    run_unpeer(
        unpeer(
            default_connection(kubeconfig, context=context),
            load_kubeconfig_file(remote_kubeconfig, context=remote_context),
            timeout,
            Progress(),
            force=force,
        )
    )


def _inherited(ctx: click.Context, name: str, value: Any) -> Any:
    """An option given to `vkctl unpeer` before the subcommand, unless given to it as well."""
    parent = ctx.parent
    if (
        parent is not None
        and ctx.get_parameter_source(name) == ParameterSource.DEFAULT
        and parent.get_parameter_source(name) != ParameterSource.DEFAULT
    ):
        return parent.params[name]
    return value


@unpeer_command.command("out-of-band")
@click.argument("cluster_id", metavar="CLUSTER_ID", callback=valid_cluster_id)
@cluster_options
@click.option("--timeout", default=UNPEER_TIMEOUT, callback=go_duration, show_default=True)
@click.option("--force", is_flag=True, help=FORCE_HELP)
@click.pass_context
def unpeer_out_of_band_command(
    ctx: click.Context,
    cluster_id: str,
    kubeconfig: str | None,
    context: str | None,
    timeout: float,
    force: bool,
) -> None:
    """Undo `vkctl peer` with this cluster's kubeconfig only: drain and remove the virtual
    nodes of provider CLUSTER_ID and what peering made here, and delete this cluster's Tenant
    on CLUSTER_ID with its identity there: the provider then removes what it made for it."""
    run_unpeer(
        unpeer_out_of_band(
            default_connection(
                _inherited(ctx, "kubeconfig", kubeconfig),
                context=_inherited(ctx, "context", context),
            ),
            cluster_id,
            _inherited(ctx, "timeout", timeout),
            Progress(),
            force=_inherited(ctx, "force", force),
        )
    )
