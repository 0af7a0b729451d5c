"""`vkctl playground`: real local clusters to try vk on, and for tests and benchmarks.

A plugin of vkctl (the entry point `vkctl.commands` of pyproject.toml): the playground is a tool
on top of the product, and nothing of the product imports it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from vk.cli.chart import ChartError
from vk.cli.progress import Progress
from vk.playground.binaries import BuildError
from vk.playground.cluster import PlaygroundError
from vk.playground.playground import Playground
from vk.playground.spec import (
    DEFAULT_CLUSTERS,
    ClusterSpec,
    InvalidPlaygroundSpec,
    parse_cluster_flag,
    parse_playground_file,
    validate_clusters,
    with_real_node,
)

# helm's refusal of vk's chart (its message is helm's) included.
PLAYGROUND_ERRORS = (PlaygroundError, BuildError, InvalidPlaygroundSpec, ChartError)


def _fail(error: Exception) -> click.ClickException:
    return click.ClickException(str(error))


@click.group()
def playground() -> None:
    """Real local clusters (etcd, kube-apiserver, controller-manager, scheduler, kwok nodes)."""


@playground.command()
@click.option(
    "--config",
    "config_file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="YAML file: `clusters: [{name, role, nodes, labels, nodeCapacity, vk, realNode, "
    "controllerQPS}]` (README: the playground).",
)
@click.option(
    "--cluster",
    "cluster_flags",
    multiple=True,
    metavar="NAME:ROLE:NODES:K=V,...",
    help="A cluster to run (repeatable), "
    "e.g. cool-firefly:provider:2:topology.liqo.io/region=east. "
    "Default: venice (consumer), florence and naples (providers), as in the tutorial.",
)
@click.option(
    "--without-vk",
    is_flag=True,
    help="Bare clusters, vk not installed: to try `vkctl install` (or Helm) on.",
)
@click.option(
    "--real-node",
    is_flag=True,
    help="Give the consumer a real node (kubelet and containerd, in a network namespace) where vk "
    "runs as pods, installed with its Helm chart from vk's image built from the Dockerfile and "
    "scraped by a Prometheus; and give the last provider (naples) a real node as its only node, "
    "so that the pods offloaded there run as containers (of the local images "
    "playground.local/shell and playground.local/web). Needs root and Debian's containerd, runc, "
    "containernetworking-plugins, iptables, debootstrap and buildah.",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only errors.")
def up(
    config_file: Path | None,
    cluster_flags: tuple[str, ...],
    without_vk: bool,
    real_node: bool,
    quiet: bool,
) -> None:
    """Build the binaries (once) and start the clusters; repair a running playground."""
    try:
        clusters: tuple[ClusterSpec, ...] | None = None
        if config_file is not None and cluster_flags:
            raise InvalidPlaygroundSpec("give either --config or --cluster, not both")
        if config_file is not None:
            clusters = parse_playground_file(config_file.read_text())
        elif cluster_flags:
            clusters = validate_clusters(tuple(parse_cluster_flag(f) for f in cluster_flags))
        if without_vk:
            clusters = tuple(dataclasses.replace(c, vk=False) for c in clusters or DEFAULT_CLUSTERS)
        if real_node:
            clusters = validate_clusters(with_real_node(clusters or DEFAULT_CLUSTERS))
        pg = Playground(progress=Progress(quiet=quiet))
        pg.up(clusters)
        if not quiet:
            click.echo("\nThe playground is up. Use it with:\n")
            click.echo("\n".join(pg.env()))
            click.echo('\n(or: eval "$(vkctl playground env)")')
    except PLAYGROUND_ERRORS as error:
        raise _fail(error) from error


@playground.command()
def down() -> None:
    """Stop every playground process and remove its files."""
    pg = Playground()
    try:
        stopped = pg.down()
    except PLAYGROUND_ERRORS as error:
        raise _fail(error) from error
    click.echo(f"playground down: {stopped} processes stopped, {pg.root} removed")


@playground.command()
def status() -> None:
    """Show each cluster and its components; exit 1 if anything is not running."""
    try:
        statuses = Playground().status()
    except PLAYGROUND_ERRORS as error:
        raise _fail(error) from error
    table = Table(box=None, pad_edge=False)
    for column in ("CLUSTER", "ROLE", "NODES", "API SERVER", "COMPONENTS", "LABELS"):
        table.add_column(column, no_wrap=True)
    for cluster in statuses:
        down_components = [c.name for c in cluster.components if not c.running]
        components = "all running" if not down_components else "down: " + ", ".join(down_components)
        labels = ",".join(f"{k}={v}" for k, v in cluster.spec.labels.items())
        table.add_row(
            cluster.spec.name,
            cluster.spec.role,
            str(cluster.spec.nodes),
            cluster.server or "-",
            components,
            labels or "-",
        )
    Console(width=200).print(table)
    if not all(c.running for c in statuses):
        raise click.exceptions.Exit(1)


@playground.command()
@click.argument("name")
def kubeconfig(name: str) -> None:
    """Print the path of cluster NAME's kubeconfig."""
    try:
        click.echo(str(Playground().kubeconfig(name)))
    except PLAYGROUND_ERRORS as error:
        raise _fail(error) from error


@playground.command()
def env() -> None:
    """Print `export KUBECONFIG=...` lines; use as `eval "$(vkctl playground env)"`."""
    try:
        click.echo("\n".join(Playground().env()))
    except PLAYGROUND_ERRORS as error:
        raise _fail(error) from error
