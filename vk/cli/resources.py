"""`vkctl create|delete resourceslice|virtualnode`: the steps of `vkctl peer` one at a time, as
liqoctl's commands of the same names take them, for more slices or virtual nodes than the one
`peer` makes. Each waits for the controllers (slice accepted, node Ready, drained and gone);
`-o yaml|json` prints the manifest instead, for `kubectl apply`.

A VirtualNode made from a slice is owned by it (liqoctl leaves it unowned): it runs on the
slice's identity, which goes with the slice, so it goes too, and `vkctl unpeer` removes it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import click

from vk.api.authentication import ResourceSlice
from vk.api.constants import (
    REMOTE_CLUSTER_ID_LABEL,
    control_plane_secret_name,
    tenant_namespace,
)
from vk.api.offloading import VirtualNode
from vk.cli.options import (
    cluster_client,
    cluster_options,
    go_duration,
    output_option,
    render,
    requested_resources,
    resource_options,
    valid_cluster_id,
    valid_name,
    valid_secret_name,
)
from vk.cli.peering import PeeringError, forge_resource_slice
from vk.cli.progress import Progress
from vk.cli.waiting import (
    Deadline,
    condition_statuses,
    get_or_none,
    held_by,
    slice_path,
    slice_state,
    virtual_node_path,
    virtual_node_state,
    wait_for_node_ready,
    wait_for_resource_slice,
    wait_until_gone,
)
from vk.controllers.consumer_resourceslices import (
    KUBECONFIG_FIELD,
    forge_virtual_node,
    owner_reference,
    slice_status_problems,
    trusted_node_labels,
    wants_virtual_node,
)
from vk.controllers.provider_resourceslices import ACCEPTED, AUTHENTICATION
from vk.kube.client import JSON, AlreadyExists, KubeClient, NotFound, object_path, resource_path

# liqoctl's defaults for a VirtualNode made from a kubeconfig Secret.
DEFAULT_VIRTUAL_NODE_RESOURCES = {"cpu": "2", "memory": "4Gi", "pods": "110"}


def forge_slice_virtual_node(
    name: str, resource_slice: Mapping[str, Any], provider_id: str, overrides: Mapping[str, str]
) -> JSON:
    """A VirtualNode `name` on the identity of an accepted slice, with what the provider granted
    it (`overrides` replacing some): the slice's own VirtualNode, renamed and owned, not
    controlled, by the slice (whose controller keeps only its own)."""
    labels, _ = trusted_node_labels(resource_slice.get("status") or {}, admins=set())
    virtual_node = forge_virtual_node(resource_slice, provider_id, labels)
    virtual_node["metadata"]["name"] = name
    virtual_node["metadata"]["ownerReferences"] = [
        owner_reference(resource_slice, controller=False)
    ]
    virtual_node["spec"]["resourceQuota"]["hard"].update(overrides)
    return virtual_node


def forge_secret_virtual_node(
    name: str, provider_id: str, secret_name: str, resources: Mapping[str, str]
) -> JSON:
    """A VirtualNode `name` on the provider identity of an existing kubeconfig Secret, offering
    liqoctl's defaults (cpu 2, memory 4Gi, pods 110) or `resources` over them."""
    return {
        "apiVersion": VirtualNode.group_version(),
        "kind": VirtualNode.KIND,
        "metadata": {
            "name": name,
            "namespace": tenant_namespace(provider_id),
            "labels": {REMOTE_CLUSTER_ID_LABEL: provider_id},
        },
        "spec": {
            "clusterID": provider_id,
            "createNode": True,
            "kubeconfigSecretRef": {"name": secret_name},
            "labels": {REMOTE_CLUSTER_ID_LABEL: provider_id},
            "resourceQuota": {"hard": {**DEFAULT_VIRTUAL_NODE_RESOURCES, **resources}},
        },
    }


def controlling_slice(virtual_node: Mapping[str, Any]) -> str | None:
    """The ResourceSlice that made this VirtualNode and would make it again, if any."""
    for owner in virtual_node["metadata"].get("ownerReferences") or []:
        if owner.get("kind") == ResourceSlice.KIND and owner.get("controller"):
            return str(owner.get("name"))
    return None


def owned_by(objects: list[JSON], owner: Mapping[str, Any]) -> list[JSON]:
    uid = owner["metadata"]["uid"]
    return [
        obj
        for obj in objects
        if any(o.get("uid") == uid for o in obj["metadata"].get("ownerReferences") or [])
    ]


async def require_peering(client: KubeClient, provider_id: str, *, identity: bool) -> None:
    """This cluster consumes from `provider_id`: its tenant namespace is here and, with
    `identity`, the control-plane identity that replicates slices there."""
    namespace = tenant_namespace(provider_id)
    peer_first = f"run `vkctl peer --remote-kubeconfig <{provider_id}'s kubeconfig>` first"
    if await get_or_none(client, resource_path("v1", "namespaces", name=namespace)) is None:
        raise PeeringError(
            f"not peered with {provider_id} (no namespace {namespace}): {peer_first}"
        )
    if identity and (
        await get_or_none(
            client,
            resource_path(
                "v1", "secrets", namespace=namespace, name=control_plane_secret_name(provider_id)
            ),
        )
        is None
    ):
        raise PeeringError(
            f"{provider_id} provides nothing to this cluster (no control-plane identity in "
            f"{namespace}): {peer_first}"
        )


async def require_free_node_name(client: KubeClient, name: str) -> None:
    if await get_or_none(client, resource_path("v1", "nodes", name=name)) is not None:
        raise PeeringError(f"a node named {name} exists already: choose another name")


async def create_and_wait_resource_slice(
    client: KubeClient, resource_slice: JSON, *, deadline: Deadline, progress: Progress
) -> str:
    """Creates the slice and waits until it is accepted and, when it asks for one, until its
    virtual node is Ready; what became of it, in a line."""
    metadata = resource_slice["metadata"]
    namespace, name = metadata["namespace"], metadata["name"]
    provider = metadata["labels"][REMOTE_CLUSTER_ID_LABEL]
    await require_peering(client, provider, identity=True)
    wants_node = wants_virtual_node(resource_slice)
    if wants_node:
        await require_free_node_name(client, name)
    try:
        await client.create(
            resource_path(ResourceSlice.group_version(), ResourceSlice.PLURAL, namespace=namespace),
            resource_slice,
        )
    except AlreadyExists as error:
        raise PeeringError(
            f"a ResourceSlice {name} exists already in {namespace}: choose another name, or "
            f"delete it first (`vkctl delete resourceslice {name} --remote-cluster-id "
            f"{provider}`)"
        ) from error
    with progress.step(f"waiting for {provider} to accept the ResourceSlice {name}"):
        accepted = await wait_for_resource_slice(
            client, namespace, name, deadline=deadline, progress=progress
        )
    outcome = f"ResourceSlice {namespace}/{name}: {slice_state(accepted)}"
    if not wants_node:
        return outcome
    with progress.step(f"waiting for the virtual node {name} to be Ready"):
        await wait_for_node_ready(client, namespace, name, deadline=deadline, progress=progress)
    return f"{outcome}; node {name} Ready"


async def read_accepted_slice(client: KubeClient, provider_id: str, name: str) -> JSON:
    namespace = tenant_namespace(provider_id)
    resource_slice = await get_or_none(client, slice_path(namespace, name))
    if resource_slice is None:
        raise PeeringError(
            f"no ResourceSlice {name} in {namespace}: create it first (`vkctl create "
            f"resourceslice {name} --remote-cluster-id {provider_id}`)"
        )
    if condition_statuses(resource_slice).get(AUTHENTICATION) != ACCEPTED:
        raise PeeringError(
            f"the ResourceSlice {namespace}/{name} is not accepted yet "
            f"({slice_state(resource_slice)}): wait for it (`vkctl info peer {provider_id}`)"
        )
    # What the consumer's controller refuses to use, a VirtualNode made here must not use
    # either: its kubeconfig would never be written and its resources are the provider's word.
    problems = slice_status_problems(resource_slice.get("status") or {})
    if problems:
        raise PeeringError(
            f"the status {provider_id} wrote on the ResourceSlice {namespace}/{name} is refused: "
            f"{'; '.join(problems)}; ask the provider's administrator to fix it"
        )
    return resource_slice


async def read_kubeconfig_secret(client: KubeClient, provider_id: str, name: str) -> None:
    namespace = tenant_namespace(provider_id)
    secret = await get_or_none(
        client, resource_path("v1", "secrets", namespace=namespace, name=name)
    )
    if secret is None or KUBECONFIG_FIELD not in (secret.get("data") or {}):
        raise PeeringError(
            f"no Secret {name} with a `{KUBECONFIG_FIELD}` key in {namespace}: create it with "
            "the provider's kubeconfig under that key"
        )


async def create_and_wait_virtual_node(
    client: KubeClient, virtual_node: JSON, *, deadline: Deadline, progress: Progress
) -> str:
    namespace, name = virtual_node["metadata"]["namespace"], virtual_node["metadata"]["name"]
    await require_free_node_name(client, name)
    try:
        await client.create(virtual_node_path(namespace), virtual_node)
    except AlreadyExists as error:
        raise PeeringError(
            f"a VirtualNode {name} exists already in {namespace}: choose another name"
        ) from error
    with progress.step(f"waiting for the virtual node {name} to be Ready"):
        await wait_for_node_ready(client, namespace, name, deadline=deadline, progress=progress)
    return f"VirtualNode {namespace}/{name} created; node {name} Ready"


async def delete_and_wait(
    client: KubeClient,
    obj: JSON,
    dependents: list[JSON],
    *,
    deadline: Deadline,
    progress: Progress,
) -> None:
    """Deletes `obj` and waits until it and its `dependents` (VirtualNodes, which the garbage
    collector deletes after it, and their controller drains) are gone."""
    path = object_path(obj)
    name = f"{obj['kind']} {obj['metadata']['namespace']}/{obj['metadata']['name']}"
    try:
        await client.delete(path)
    except NotFound:
        return
    with progress.step(f"deleting the {name}"):
        describe = virtual_node_state if obj["kind"] == VirtualNode.KIND else held_by
        await wait_until_gone(
            client, path, name, deadline=deadline, progress=progress, describe=describe
        )
    for dependent in dependents:
        dependent_name = dependent["metadata"]["name"]
        with progress.step(f"draining and removing the virtual node {dependent_name}"):
            await wait_until_gone(
                client,
                object_path(dependent),
                f"virtual node {dependent_name}",
                deadline=deadline,
                progress=progress,
                describe=virtual_node_state,
            )


async def delete_resource_slice(
    client: KubeClient, provider_id: str, name: str, *, deadline: Deadline, progress: Progress
) -> str:
    namespace = tenant_namespace(provider_id)
    resource_slice = await get_or_none(client, slice_path(namespace, name))
    if resource_slice is None:
        raise PeeringError(
            f"no ResourceSlice {name} in {namespace}: `vkctl info peer {provider_id}` lists "
            f"the slices of {provider_id}"
        )
    virtual_nodes = owned_by(
        (await client.get(virtual_node_path(namespace))).get("items") or [], resource_slice
    )
    await delete_and_wait(
        client, resource_slice, virtual_nodes, deadline=deadline, progress=progress
    )
    names = ", ".join(v["metadata"]["name"] for v in virtual_nodes)
    return f"ResourceSlice {namespace}/{name} deleted" + (
        f", with its virtual nodes {names}" if names else ""
    )


async def delete_virtual_node(
    client: KubeClient, provider_id: str, name: str, *, deadline: Deadline, progress: Progress
) -> str:
    namespace = tenant_namespace(provider_id)
    virtual_node = await get_or_none(client, virtual_node_path(namespace, name))
    if virtual_node is None:
        raise PeeringError(
            f"no VirtualNode {name} in {namespace}: `vkctl info peer {provider_id}` lists the "
            f"virtual nodes of {provider_id}"
        )
    maker = controlling_slice(virtual_node)
    if maker:
        raise PeeringError(
            f"the VirtualNode {name} is the ResourceSlice {maker}'s, which would make it again: "
            f"delete the slice (`vkctl delete resourceslice {maker} --remote-cluster-id "
            f"{provider_id}`)"
        )
    await delete_and_wait(client, virtual_node, [], deadline=deadline, progress=progress)
    return f"VirtualNode {namespace}/{name} deleted"


remote_cluster_id = click.option(
    "--remote-cluster-id",
    required=True,
    callback=valid_cluster_id,
    help="The provider's cluster ID (its tenant namespace is liqo-tenant-<ID>).",
)
slice_name = click.argument("name", callback=valid_name("ResourceSlice"))
virtual_node_name = click.argument("name", callback=valid_name("VirtualNode"))
# Of objects that exist: named by whoever made them.
existing_slice_name = click.argument("name", callback=valid_name("ResourceSlice", existing=True))
existing_virtual_node_name = click.argument(
    "name", callback=valid_name("VirtualNode", existing=True)
)


@click.group("create")
def create() -> None:
    """Create a ResourceSlice or a VirtualNode, as liqoctl does."""


@create.command("resourceslice")
@slice_name
@remote_cluster_id
@click.option("--class", "slice_class", default="default", show_default=True)
@resource_options("the provider's")
@click.option(
    "--no-virtual-node", is_flag=True, help="Do not make a VirtualNode of the slice once accepted."
)
@output_option("Print the ResourceSlice instead of creating it.")
@click.option("--timeout", default="2m", callback=go_duration, show_default=True)
@cluster_options
def create_resource_slice_command(
    name: str,
    remote_cluster_id: str,
    slice_class: str,
    cpu: str | None,
    memory: str | None,
    pods: str | None,
    other_resources: dict[str, str],
    no_virtual_node: bool,
    output: str | None,
    timeout: float,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Ask a peered provider for resources: a ResourceSlice NAME, and (unless
    --no-virtual-node) a virtual node NAME once the provider grants them."""
    resource_slice = forge_resource_slice(
        name,
        remote_cluster_id,
        slice_class=slice_class,
        resources=requested_resources(cpu, memory, pods, other_resources),
        create_virtual_node=not no_virtual_node,
    )
    if output:
        click.echo(render(resource_slice, output))
        return

    async def run() -> str:
        deadline = Deadline.after(timeout)
        async with cluster_client(kubeconfig, context, deadline=deadline) as client:
            return await create_and_wait_resource_slice(
                client, resource_slice, deadline=deadline, progress=Progress()
            )

    click.echo(asyncio.run(run()))


@create.command("virtualnode")
@virtual_node_name
@remote_cluster_id
@click.option(
    "--resource-slice-name",
    default=None,
    callback=valid_name("ResourceSlice"),
    help="Use the identity of this slice.",
)
@click.option(
    "--kubeconfig-secret-name",
    default=None,
    callback=valid_secret_name,
    help="Use the provider kubeconfig in this Secret (key `kubeconfig`) of the tenant namespace.",
)
@resource_options(
    {
        name: f"the slice's, or {value} with --kubeconfig-secret-name"
        for name, value in DEFAULT_VIRTUAL_NODE_RESOURCES.items()
    }
)
@output_option("Print the VirtualNode instead of creating it.")
@click.option("--timeout", default="2m", callback=go_duration, show_default=True)
@cluster_options
def create_virtual_node_command(
    name: str,
    remote_cluster_id: str,
    resource_slice_name: str | None,
    kubeconfig_secret_name: str | None,
    cpu: str | None,
    memory: str | None,
    pods: str | None,
    other_resources: dict[str, str],
    output: str | None,
    timeout: float,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Make a provider a virtual node NAME, on the identity of a ResourceSlice
    (--resource-slice-name) or of a kubeconfig Secret (--kubeconfig-secret-name)."""
    if (resource_slice_name is None) == (kubeconfig_secret_name is None):
        raise click.UsageError(
            "give exactly one of --resource-slice-name and --kubeconfig-secret-name"
        )
    resources = requested_resources(cpu, memory, pods, other_resources)
    if output and kubeconfig_secret_name is not None:  # nothing to read: no cluster needed
        virtual_node = forge_secret_virtual_node(
            name, remote_cluster_id, kubeconfig_secret_name, resources
        )
        click.echo(render(virtual_node, output))
        return

    async def run() -> str:
        deadline = Deadline.after(timeout)
        async with cluster_client(kubeconfig, context, deadline=deadline) as client:
            await require_peering(client, remote_cluster_id, identity=False)
            if resource_slice_name is not None:
                resource_slice = await read_accepted_slice(
                    client, remote_cluster_id, resource_slice_name
                )
                virtual_node = forge_slice_virtual_node(
                    name, resource_slice, remote_cluster_id, resources
                )
                if output:
                    return render(virtual_node, output)
            else:
                assert kubeconfig_secret_name is not None
                await read_kubeconfig_secret(client, remote_cluster_id, kubeconfig_secret_name)
                virtual_node = forge_secret_virtual_node(
                    name, remote_cluster_id, kubeconfig_secret_name, resources
                )
            return await create_and_wait_virtual_node(
                client, virtual_node, deadline=deadline, progress=Progress()
            )

    click.echo(asyncio.run(run()))


@click.group("delete")
def delete() -> None:
    """Delete a ResourceSlice or a VirtualNode, and wait until it is gone."""


@delete.command("resourceslice")
@existing_slice_name
@remote_cluster_id
@click.option("--timeout", default="5m", callback=go_duration, show_default=True)
@cluster_options
def delete_resource_slice_command(
    name: str, remote_cluster_id: str, timeout: float, kubeconfig: str | None, context: str | None
) -> None:
    """Give a ResourceSlice back: its virtual nodes are drained and removed, the provider
    removes its Quota."""

    async def run() -> str:
        deadline = Deadline.after(timeout)
        async with cluster_client(kubeconfig, context, deadline=deadline) as client:
            return await delete_resource_slice(
                client, remote_cluster_id, name, deadline=deadline, progress=Progress()
            )

    click.echo(asyncio.run(run()))


@delete.command("virtualnode")
@existing_virtual_node_name
@remote_cluster_id
@click.option("--timeout", default="5m", callback=go_duration, show_default=True)
@cluster_options
def delete_virtual_node_command(
    name: str, remote_cluster_id: str, timeout: float, kubeconfig: str | None, context: str | None
) -> None:
    """Remove a virtual node: its pods are evicted (drained), then its kubelet and Node go."""

    async def run() -> str:
        deadline = Deadline.after(timeout)
        async with cluster_client(kubeconfig, context, deadline=deadline) as client:
            return await delete_virtual_node(
                client, remote_cluster_id, name, deadline=deadline, progress=Progress()
            )

    click.echo(asyncio.run(run()))
