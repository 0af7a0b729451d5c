"""`vkctl cordon|uncordon tenant|resourceslice`, `vkctl drain tenant`: a provider's say over
what its consumers run, as liqoctl's commands of the same names (run against the provider).

- Cordon a tenant: what it runs stays, nothing new is admitted (its Quotas cordoned: the
  webhook refuses new ShadowPods) or granted (new ResourceSlices denied).
- Drain a tenant: cordoned, its ResourceSlices' resources denied, and every ShadowPod it has
  deleted (their Pods go with them); the command waits until they are gone.
- Uncordon a tenant: Active again, from either.
- Cordon a ResourceSlice (`liqo.io/cordon`): its Quota admits no new pod; the tenant's other
  slices are untouched.
"""

from __future__ import annotations

import asyncio

import click

from vk.api.authentication import ResourceSlice, Tenant, TenantCondition
from vk.api.constants import CORDON_ANNOTATION, REMOTE_CLUSTER_ID_LABEL, tenant_namespace
from vk.api.offloading import ShadowPod
from vk.cli.options import (
    cluster_client,
    cluster_options,
    go_duration,
    valid_cluster_id,
    valid_name,
)
from vk.cli.peering import PeeringError
from vk.cli.progress import Progress
from vk.cli.waiting import POLL_SECONDS, Deadline, get_or_none
from vk.kube.client import JSON, KubeClient, resource_path


def tenant_path(consumer: str) -> str:
    namespace = tenant_namespace(consumer)
    return resource_path(Tenant.group_version(), Tenant.PLURAL, namespace=namespace, name=consumer)


async def set_tenant_condition(
    client: KubeClient, consumer: str, condition: TenantCondition
) -> str:
    """Sets the Tenant of `consumer` to `condition`; what it was."""
    path = tenant_path(consumer)
    tenant = await get_or_none(client, path)
    if tenant is None:
        raise PeeringError(
            f"no Tenant {consumer} in {tenant_namespace(consumer)}: run this against the "
            f"provider, with the consumer's cluster ID (`kubectl get tenants -A` lists them)"
        )
    before = str((tenant.get("spec") or {}).get("tenantCondition") or TenantCondition.ACTIVE)
    if before != condition.value:
        await client.merge_patch(path, {"spec": {"tenantCondition": condition.value}})
    return before


async def shadow_pods_of(client: KubeClient, consumer: str) -> list[JSON]:
    """The ShadowPods in the namespaces this provider made for `consumer`."""
    namespaces, _ = await client.list_all(
        resource_path("v1", "namespaces"),
        {"labelSelector": f"{REMOTE_CLUSTER_ID_LABEL}={consumer}"},
    )
    found: list[JSON] = []
    for namespace in namespaces:
        name = namespace["metadata"]["name"]
        if name == tenant_namespace(consumer):
            continue
        items, _ = await client.list_all(
            resource_path(ShadowPod.group_version(), ShadowPod.PLURAL, namespace=name)
        )
        found += items
    return found


async def drain_tenant(
    client: KubeClient, consumer: str, deadline: Deadline, progress: Progress
) -> None:
    await set_tenant_condition(client, consumer, TenantCondition.DRAINED)
    with progress.step(f"draining tenant {consumer} (its ShadowPods deleted, with their Pods)"):
        reported = -1
        while remaining := len(await shadow_pods_of(client, consumer)):
            if remaining != reported:
                progress.info(f"{remaining} ShadowPods of {consumer} left")
                reported = remaining
            if deadline.passed():
                raise PeeringError(
                    f"{remaining} ShadowPods of {consumer} are still there after "
                    f"{deadline.within:.0f}s: look at their finalizers and their Pods "
                    "(`kubectl get shadowpods -A`), then run the command again"
                )
            await asyncio.sleep(POLL_SECONDS)


async def find_resource_slice(client: KubeClient, name: str, consumer: str | None) -> JSON:
    """The provider's copy of the ResourceSlice `name` (of `consumer`, when several consumers
    have one of that name)."""
    params = {"fieldSelector": f"metadata.name={name}"}
    if consumer:
        params["labelSelector"] = f"{REMOTE_CLUSTER_ID_LABEL}={consumer}"
    found, _ = await client.list_all(
        resource_path(ResourceSlice.group_version(), ResourceSlice.PLURAL), params
    )
    if not found:
        raise PeeringError(
            f"no ResourceSlice {name} here"
            + (f" of {consumer}" if consumer else "")
            + ": run this against the provider "
            "(`kubectl get resourceslices.authentication.liqo.io -A`)"
        )
    if len(found) > 1:
        owners = sorted(s["metadata"]["namespace"] for s in found)
        raise PeeringError(
            f"ResourceSlices named {name} are in {', '.join(owners)}: say whose with "
            "--remote-cluster-id"
        )
    return found[0]


async def set_slice_cordon(
    client: KubeClient, name: str, consumer: str | None, cordon: bool
) -> str:
    resource_slice = await find_resource_slice(client, name, consumer)
    metadata = resource_slice["metadata"]
    await client.merge_patch(
        resource_path(
            ResourceSlice.group_version(),
            ResourceSlice.PLURAL,
            namespace=metadata["namespace"],
            name=metadata["name"],
        ),
        {"metadata": {"annotations": {CORDON_ANNOTATION: "true" if cordon else None}}},
    )
    return f"{metadata['namespace']}/{metadata['name']}"


consumer_cluster_id = click.argument("consumer_cluster_id", callback=valid_cluster_id)
slice_name = click.argument("name", callback=valid_name("ResourceSlice", existing=True))
slice_consumer = click.option(
    "--remote-cluster-id",
    default=None,
    callback=valid_cluster_id,
    help="The consumer whose slice it is.",
)


@click.group("cordon")
def cordon() -> None:
    """Admit nothing new from a consumer, or from one of its ResourceSlices (provider)."""


@click.group("uncordon")
def uncordon() -> None:
    """Undo `vkctl cordon` or `vkctl drain` (provider)."""


@click.group("drain")
def drain() -> None:
    """Remove what a consumer runs here (provider)."""


@cordon.command("tenant")
@consumer_cluster_id
@cluster_options
def cordon_tenant(consumer_cluster_id: str, kubeconfig: str | None, context: str | None) -> None:
    """Keep what CONSUMER_CLUSTER_ID runs here; admit and grant nothing new."""

    async def run() -> str:
        async with cluster_client(kubeconfig, context) as client:
            return await set_tenant_condition(client, consumer_cluster_id, TenantCondition.CORDONED)

    before = asyncio.run(run())
    click.echo(f"tenant {consumer_cluster_id} cordoned (was {before}): its new pods are refused")


@uncordon.command("tenant")
@consumer_cluster_id
@cluster_options
def uncordon_tenant(consumer_cluster_id: str, kubeconfig: str | None, context: str | None) -> None:
    """Let CONSUMER_CLUSTER_ID run and ask for resources here again."""

    async def run() -> str:
        async with cluster_client(kubeconfig, context) as client:
            return await set_tenant_condition(client, consumer_cluster_id, TenantCondition.ACTIVE)

    before = asyncio.run(run())
    click.echo(f"tenant {consumer_cluster_id} active (was {before})")


@drain.command("tenant")
@consumer_cluster_id
@click.option("--timeout", default="2m", callback=go_duration, show_default=True)
@cluster_options
def drain_tenant_command(
    consumer_cluster_id: str, timeout: float, kubeconfig: str | None, context: str | None
) -> None:
    """Cordon CONSUMER_CLUSTER_ID, deny its resources, delete its ShadowPods (and so their
    Pods), and wait until they are gone."""

    async def run() -> None:
        deadline = Deadline.after(timeout)
        async with cluster_client(kubeconfig, context, deadline=deadline) as client:
            await drain_tenant(client, consumer_cluster_id, deadline, Progress())

    asyncio.run(run())
    click.echo(f"tenant {consumer_cluster_id} drained: nothing of it runs here")


@cordon.command("resourceslice")
@slice_name
@slice_consumer
@cluster_options
def cordon_resource_slice(
    name: str, remote_cluster_id: str | None, kubeconfig: str | None, context: str | None
) -> None:
    """Admit no new pod on the ResourceSlice NAME's Quota."""

    async def run() -> str:
        async with cluster_client(kubeconfig, context) as client:
            return await set_slice_cordon(client, name, remote_cluster_id, True)

    click.echo(f"ResourceSlice {asyncio.run(run())} cordoned")


@uncordon.command("resourceslice")
@slice_name
@slice_consumer
@cluster_options
def uncordon_resource_slice(
    name: str, remote_cluster_id: str | None, kubeconfig: str | None, context: str | None
) -> None:
    """Admit new pods on the ResourceSlice NAME's Quota again."""

    async def run() -> str:
        async with cluster_client(kubeconfig, context) as client:
            return await set_slice_cordon(client, name, remote_cluster_id, False)

    click.echo(f"ResourceSlice {asyncio.run(run())} uncordoned")
