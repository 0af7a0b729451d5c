"""`vkctl install` and `vkctl uninstall`, as liqoctl's: vk's Helm chart installed (or upgraded)
in the namespace vk with this cluster's identity, and removed again.

Uninstalling is refused while this cluster has peerings (ForeignClusters, or ResourceSlices
in either role): their virtual nodes, offloaded pods and provider namespaces would be left
behind with nothing to clean them up. `--purge` also removes the CRDs, and so every vk object
left (their finalizers first: no controller is left to honour them), and the namespace vk.
Without it, uninstalling is refused while namespaces are offloaded: their NamespaceOffloadings
keep a finalizer only vk's controller removes, and such a namespace could never be deleted.
"""

from __future__ import annotations

import asyncio
import contextlib

import click

from vk.api.authentication import ResourceSlice
from vk.api.constants import IDENTITY_CONTROL_PLANE, IDENTITY_TYPE_LABEL, VK_NAMESPACE
from vk.api.core import ForeignCluster, validate_cluster_id
from vk.api.crds import CUSTOM_RESOURCES
from vk.api.labels import InvalidKeyValues, parse_key_values
from vk.api.offloading import NamespaceOffloading
from vk.cli.chart import (
    RELEASE,
    ChartError,
    chart_dir,
    chart_version,
    find_helm,
    install_chart,
    run_helm,
)
from vk.cli.confirmation import confirm_destruction, skip_confirm_option
from vk.cli.options import cluster_client, cluster_options, go_duration
from vk.cli.progress import Progress
from vk.cli.waiting import Deadline, wait_until_gone
from vk.controllers.replication import IDENTITY_FINALIZER
from vk.kube.client import JSON, KubeClient, NotFound, listed_object_path, resource_path

CRD_API = "apiextensions.k8s.io/v1"
CRD_GROUPS = sorted({resource.model.GROUP for resource in CUSTOM_RESOURCES})


def helm_cluster_args(kubeconfig: str | None, context: str | None) -> list[str]:
    return [
        *([f"--kubeconfig={kubeconfig}"] if kubeconfig else []),
        *([f"--kube-context={context}"] if context else []),
        f"--namespace={VK_NAMESPACE}",
    ]


def helm_duration(seconds: float) -> str:
    """`--timeout` as helm takes it (a Go duration)."""
    return f"{round(seconds * 1000)}ms"


def install_values(cluster_id: str, cluster_labels: dict[str, str], version: str) -> JSON:
    return {"clusterID": cluster_id, "clusterLabels": cluster_labels, "image": {"tag": version}}


@click.command()
@cluster_options
@click.option("--cluster-id", required=True, help="This cluster's name among its peers.")
@click.option(
    "--cluster-labels",
    default="",
    metavar="K=V,...",
    help="Labels peers select this cluster by (e.g. topology.liqo.io/region=north).",
)
@click.option("--version", default=None, help="vk's version (image tag; default: this vkctl's).")
@click.option(
    "--set",
    "overrides",
    multiple=True,
    metavar="KEY=VALUE",
    help="A chart value (repeatable), as helm's --set: e.g. image.repository=ghcr.io/me/vk.",
)
@click.option(
    "--timeout",
    default="5m",
    callback=go_duration,
    show_default=True,
    help="How long to wait for vk.",
)
def install(
    kubeconfig: str | None,
    context: str | None,
    cluster_id: str,
    cluster_labels: str,
    version: str | None,
    overrides: tuple[str, ...],
    timeout: float,
) -> None:
    """Install vk in a cluster, or upgrade it (Helm release `vk` in the namespace vk)."""
    try:
        validate_cluster_id(cluster_id)
    except ValueError as error:
        raise click.BadParameter(str(error), param_hint="--cluster-id") from error
    try:
        labels = parse_key_values(cluster_labels)
    except InvalidKeyValues as error:
        raise click.BadParameter(str(error), param_hint="--cluster-labels") from error
    progress = Progress()
    try:
        helm = find_helm()
        values = install_values(cluster_id, labels, version or chart_version(chart_dir()))
        with progress.step(f"installing vk {values['image']['tag']} as the cluster {cluster_id}"):
            install_chart(
                helm,
                values,
                helm_cluster_args(kubeconfig, context),
                timeout=helm_duration(timeout),
                overrides=overrides,
            )
    except ChartError as error:
        raise click.ClickException(f"installing vk failed: {error}") from error
    click.echo(f"vk is installed: the cluster {cluster_id} can peer (vkctl peer).")


@click.command()
@cluster_options
@click.option("--purge", is_flag=True, help="Also remove the CRDs (every vk object left).")
@click.option("--force", is_flag=True, help="Uninstall even while peerings are active.")
@click.option(
    "--timeout", default="5m", callback=go_duration, show_default=True, help="How long to wait."
)
@skip_confirm_option
def uninstall(
    kubeconfig: str | None,
    context: str | None,
    purge: bool,
    force: bool,
    timeout: float,
    skip_confirm: bool,
) -> None:
    """Remove vk from a cluster (refused while it has peerings, unless --force, or offloaded
    namespaces, unless --purge)."""
    peerings, offloaded = asyncio.run(_in_use(kubeconfig, context))
    if peerings and not force:
        raise click.ClickException(
            f"this cluster has active peerings ({', '.join(peerings)}): run `vkctl unpeer` "
            "for each first, or pass --force to leave their virtual nodes, offloaded pods and "
            "provider namespaces behind"
        )
    if offloaded and not purge:
        raise click.ClickException(
            f"namespaces are offloaded ({', '.join(offloaded)}): their NamespaceOffloadings "
            "keep a finalizer only vk removes, so without vk they could never be deleted; run "
            f"`vkctl unoffload namespace {' '.join(offloaded)}` first, or pass --purge to "
            "remove them with vk's CRDs"
        )
    confirm_destruction(
        "uninstalling removes vk (the Helm release vk), and with it all offloading from this "
        "cluster"
        + (
            "; --purge also deletes vk's CRDs with every object of theirs, and the namespace vk"
            if purge
            else ""
        ),
        skip=skip_confirm,
    )
    progress = Progress()
    try:
        helm = find_helm()
        with progress.step("uninstalling vk"):
            installed = run_helm(
                helm, ["list", "--short", *helm_cluster_args(kubeconfig, context)]
            ).split()
            if RELEASE in installed:
                run_helm(
                    helm,
                    [
                        "uninstall",
                        RELEASE,
                        *helm_cluster_args(kubeconfig, context),
                        "--wait",
                        f"--timeout={helm_duration(timeout)}",
                    ],
                )
    except ChartError as error:
        raise click.ClickException(f"uninstalling vk failed: {error}") from error
    if purge:
        with progress.step("removing vk's CRDs, their objects and the namespace vk"):
            asyncio.run(_purge(kubeconfig, context, progress, within=timeout))
    click.echo("vk is uninstalled" + (" and purged." if purge else " (its CRDs are kept)."))


async def _in_use(kubeconfig: str | None, context: str | None) -> tuple[list[str], list[str]]:
    """The peerings (`ForeignCluster naples`, `ResourceSlice liqo-tenant-naples/naples`), and
    the offloaded namespaces."""
    async with cluster_client(kubeconfig, context) as client:
        peerings = []
        for model in (ForeignCluster, ResourceSlice):
            for item in await _listed(client, model.group_version(), model.PLURAL):
                metadata = item["metadata"]
                where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
                peerings.append(f"{model.KIND} {where}{metadata['name']}")
        offloadings = await _listed(
            client, NamespaceOffloading.group_version(), NamespaceOffloading.PLURAL
        )
        return peerings, [item["metadata"]["namespace"] for item in offloadings]


async def _listed(client: KubeClient, group_version: str, plural: str) -> list[JSON]:
    """Every object of a kind; none where vk's CRDs are not installed."""
    try:
        return list((await client.get(resource_path(group_version, plural)))["items"])
    except NotFound:
        return []


async def _purge(
    kubeconfig: str | None, context: str | None, progress: Progress, *, within: float
) -> None:
    async with cluster_client(kubeconfig, context) as client:
        for resource in CUSTOM_RESOURCES:
            await _drop_finalizers(client, resource.model.group_version(), resource.model.PLURAL)
        await _release_identities(client)
        gone = [
            *(
                (f"CRD {r.name}", resource_path(CRD_API, "customresourcedefinitions", name=r.name))
                for r in CUSTOM_RESOURCES
            ),
            (f"namespace {VK_NAMESPACE}", resource_path("v1", "namespaces", name=VK_NAMESPACE)),
        ]
        for _, path in gone:
            with contextlib.suppress(NotFound):
                await client.delete(path)
        deadline = Deadline.after(within)
        for what, path in gone:
            await wait_until_gone(client, path, what, deadline=deadline, progress=progress)


async def _release_identities(client: KubeClient) -> None:
    """The control-plane identities left (peerings left behind with --force) lose the finalizer
    vk's replication holds them by: none is left to take it off, and their tenant namespaces
    could never be deleted."""
    identities = await client.get(
        resource_path("v1", "secrets"),
        params={"labelSelector": f"{IDENTITY_TYPE_LABEL}={IDENTITY_CONTROL_PLANE}"},
    )
    for secret in identities["items"]:
        path = listed_object_path("v1", "secrets", secret)
        with contextlib.suppress(NotFound):
            await client.set_finalizer(path, secret, IDENTITY_FINALIZER, present=False)


async def _drop_finalizers(client: KubeClient, group_version: str, plural: str) -> None:
    for item in await _listed(client, group_version, plural):
        if not item["metadata"].get("finalizers"):
            continue
        with contextlib.suppress(NotFound):
            await client.merge_patch(
                listed_object_path(group_version, plural, item), {"metadata": {"finalizers": None}}
            )
