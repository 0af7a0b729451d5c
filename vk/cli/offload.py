"""`vkctl offload namespace NAME` and `vkctl unoffload namespace NAME`, as liqoctl's: extend a
namespace to the peered clusters (all, or those whose virtual nodes match `--selector`) by
creating, or updating, its NamespaceOffloading, then wait until the controller says where it
stands; unoffloading deletes it and waits until the controller has brought the pods home and
removed the remote namespaces. `-o yaml|json` prints the NamespaceOffloading instead.

What vk's webhook and controller would refuse is refused before anything is written: a system
namespace (Kubernetes', vk's, a tenant namespace), and a remote name no namespace could have.

The manifest, the update of an existing one and the reading of its status are pure functions;
the commands only read, write and wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from vk.api.constants import NAMESPACE_OFFLOADING_NAME
from vk.api.nodeselector import InvalidSelector, format_selector, node_selector_from_flags
from vk.api.offloading import (
    ConditionStatus,
    NamespaceMappingStrategy,
    NamespaceOffloading,
    OffloadingPhase,
    PodOffloadingStrategy,
    RemoteNamespaceConditionType,
    namespace_name_problem,
    remote_namespace_name_problem,
    system_namespace_problem,
)
from vk.cli.confirmation import confirm_destruction, skip_confirm_option
from vk.cli.options import cluster_client, cluster_options, go_duration, output_option, render
from vk.cli.peer import read_identity
from vk.cli.peering import PeeringError
from vk.cli.progress import Progress
from vk.cli.waiting import POLL_SECONDS, Deadline, get_or_none, held_by, wait_until_gone
from vk.kube.client import JSON, AlreadyExists, ApiError, KubeClient, NotFound, resource_path

F = TypeVar("F", bound=Callable[..., Any])

READY = RemoteNamespaceConditionType.READY.value
REQUIRED = RemoteNamespaceConditionType.OFFLOADING_REQUIRED.value
TRUE = ConditionStatus.TRUE.value

# --- The NamespaceOffloading -----------------------------------------------------------------


def forge_namespace_offloading(
    namespace: str,
    mapping_strategy: NamespaceMappingStrategy,
    remote_namespace_name: str | None,
    pod_strategy: PodOffloadingStrategy,
    selectors: Sequence[str],
) -> JSON:
    """The NamespaceOffloading that offloads `namespace`: `remote_namespace_name` only with
    SelectedName (Liqo ignores it otherwise), one NodeSelectorTerm per selector string (ORed),
    no clusterSelector without any (every peered cluster). Raises InvalidSelector."""
    spec: JSON = {"namespaceMappingStrategy": mapping_strategy.value}
    if mapping_strategy is NamespaceMappingStrategy.SELECTED_NAME and remote_namespace_name:
        spec["remoteNamespaceName"] = remote_namespace_name
    spec["podOffloadingStrategy"] = pod_strategy.value
    cluster_selector = node_selector_from_flags(selectors)
    if cluster_selector is not None:
        spec["clusterSelector"] = cluster_selector
    return {
        "apiVersion": NamespaceOffloading.group_version(),
        "kind": NamespaceOffloading.KIND,
        "metadata": {"name": NAMESPACE_OFFLOADING_NAME, "namespace": namespace},
        "spec": spec,
    }


def offloading_refusal(
    namespace: str, spec: Mapping[str, Any], home_cluster_id: str | None
) -> str | None:
    """Why vk would refuse to offload `namespace` as `spec` says, or None: a system namespace,
    a name that is no namespace's, or a remote name no namespace could have (DefaultName's is
    judged only knowing this cluster's ID)."""
    if problem := system_namespace_problem(namespace):
        return f"{problem}: offload the namespaces of your workloads instead"
    if problem := namespace_name_problem(namespace):
        return problem
    strategy = spec.get("namespaceMappingStrategy") or NamespaceMappingStrategy.DEFAULT_NAME
    if home_cluster_id is None and strategy == NamespaceMappingStrategy.DEFAULT_NAME:
        return None
    return remote_namespace_name_problem(namespace, spec, home_cluster_id or "")


def offloading_path(namespace: str, *, named: bool = True) -> str:
    return resource_path(
        NamespaceOffloading.group_version(),
        NamespaceOffloading.PLURAL,
        namespace=namespace,
        name=NAMESPACE_OFFLOADING_NAME if named else None,
    )


def _remote_name(spec: Mapping[str, Any]) -> str | None:
    """The remote name the spec chose, which only SelectedName has."""
    if spec.get("namespaceMappingStrategy") == NamespaceMappingStrategy.SELECTED_NAME:
        return spec.get("remoteNamespaceName") or None
    return None


def offloading_update(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> JSON:
    """The merge patch that turns the `current` NamespaceOffloading into the `wanted` one: its
    pod offloading strategy and cluster selector. Its naming cannot change (Liqo's webhook
    forbids it): PeeringError if `wanted` names the remote namespaces otherwise."""
    namespace = current["metadata"]["namespace"]
    if current["metadata"].get("deletionTimestamp"):
        raise PeeringError(
            f"namespace {namespace} is being unoffloaded: wait until `vkctl unoffload namespace "
            f"{namespace}` ends, then offload it again"
        )
    spec, new = current.get("spec") or {}, wanted["spec"]
    strategy = spec.get("namespaceMappingStrategy") or NamespaceMappingStrategy.DEFAULT_NAME.value
    if strategy != new["namespaceMappingStrategy"] or _remote_name(spec) != _remote_name(new):
        named = f" (remote name {_remote_name(spec)})" if _remote_name(spec) else ""
        raise PeeringError(
            f"namespace {namespace} is offloaded already with the namespace mapping strategy "
            f"{strategy}{named}, which cannot change: unoffload it first (`vkctl unoffload "
            f"namespace {namespace}`), then offload it again"
        )
    return {
        "spec": {
            "podOffloadingStrategy": new["podOffloadingStrategy"],
            "clusterSelector": new.get("clusterSelector"),  # None removes it: every cluster
        }
    }


def more_restrictive(current: Mapping[str, Any], wanted: Mapping[str, Any]) -> bool:
    """Whether the update narrows where pods may run (vk's controller then evicts the pods
    running where it no longer allows, which Liqo does not)."""
    before = (current.get("spec") or {}).get("podOffloadingStrategy")
    after: str = wanted["spec"]["podOffloadingStrategy"]
    return before != after and after != PodOffloadingStrategy.LOCAL_AND_REMOTE


# --- Reading its status ----------------------------------------------------------------------


@dataclass(frozen=True)
class Outcome:
    """Where an offloading stands: `done` once the controller is through with this generation
    (`ok` or not); `message` says so in a line, `warning` what the user may not expect."""

    done: bool
    ok: bool
    message: str
    warning: str | None = None


def cluster_conditions(offloading: Mapping[str, Any]) -> dict[str, dict[str, Mapping[str, Any]]]:
    """Each cluster's remote namespace conditions, by type."""
    by_cluster = (offloading.get("status") or {}).get("remoteNamespacesConditions") or {}
    return {
        cluster: {c.get("type", ""): c for c in conditions or []}
        for cluster, conditions in sorted(by_cluster.items())
    }


def ready_clusters(offloading: Mapping[str, Any]) -> list[str]:
    return [
        cluster
        for cluster, conditions in cluster_conditions(offloading).items()
        if (conditions.get(READY) or {}).get("status") == TRUE
    ]


def unready_clusters(offloading: Mapping[str, Any]) -> list[str]:
    """`naples: CreationLoopBackOff (namespace liqo-demo already exists ...)`, for each cluster
    whose twin namespace is wanted, or still there, but not Ready, and each the controller could
    not decide on (an invalid selector); clusters told the same thing share a line."""
    told: dict[tuple[str, str], list[str]] = {}
    for cluster, conditions in cluster_conditions(offloading).items():
        required, ready = conditions.get(REQUIRED) or {}, conditions.get(READY)
        if required.get("status") == ConditionStatus.UNKNOWN:
            why = required
        elif (ready or required.get("status") == TRUE) and (ready or {}).get("status") != TRUE:
            why = ready or {}
        else:
            continue
        said = (why.get("reason") or "not reported yet", why.get("message") or "")
        told.setdefault(said, []).append(cluster)
    return [
        f"{', '.join(clusters)}: {reason}" + (f" ({message})" if message else "")
        for (reason, message), clusters in told.items()
    ]


def describe_outcome(offloading: Mapping[str, Any]) -> Outcome:
    """How the offloading of this NamespaceOffloading went, once the controller has processed
    its generation: Ready and NoClusterSelected are successes (the latter with a warning),
    SomeFailed, AllFailed and Terminating failures, anything else still under way."""
    metadata = offloading["metadata"]
    namespace = metadata["namespace"]
    status = offloading.get("status") or {}
    if (status.get("observedGeneration") or 0) < (metadata.get("generation") or 0):
        return Outcome(False, False, "waiting for the namespace offloading to be processed")
    phase = status.get("offloadingPhase")
    remote_name = status.get("remoteNamespaceName") or "not chosen yet"
    if phase == OffloadingPhase.READY:
        clusters = ", ".join(ready_clusters(offloading)) or "no cluster"
        message = f"namespace {namespace} offloaded: remote name {remote_name}, ready on {clusters}"
        return Outcome(True, True, message)
    if phase == OffloadingPhase.NO_CLUSTER_SELECTED:
        message = (
            f"namespace {namespace} offloaded, to no cluster for now: remote name {remote_name}"
        )
        return Outcome(True, True, message, no_cluster_warning(offloading))
    if phase in (OffloadingPhase.SOME_FAILED, OffloadingPhase.ALL_FAILED):
        failing = "; ".join(unready_clusters(offloading)) or "no cluster said why"
        message = f"the offloading of namespace {namespace} failed ({phase}): {failing}"
        return Outcome(True, False, message)
    if phase == OffloadingPhase.TERMINATING:
        message = (
            f"namespace {namespace} is being unoffloaded (phase Terminating): wait until `vkctl "
            f"unoffload namespace {namespace}` ends, then offload it again"
        )
        return Outcome(True, False, message)
    pending = "; ".join(unready_clusters(offloading))
    message = f"phase {phase or 'not reported yet'}" + (f": {pending}" if pending else "")
    return Outcome(False, False, message)


def no_cluster_warning(offloading: Mapping[str, Any]) -> str:
    """Why an offloading selected no cluster: its selector matches none, or none is peered."""
    selector = (offloading.get("spec") or {}).get("clusterSelector")
    if selector and selector.get("nodeSelectorTerms"):
        return (
            f"no cluster matches the selector '{format_selector(selector)}': see the labels of "
            "the virtual nodes (`kubectl get nodes -l liqo.io/type=virtual-node --show-labels`)"
        )
    return "no cluster is peered with this one yet: peer one (`vkctl peer`)"


def unoffload_state(offloading: Mapping[str, Any]) -> str:
    """What a deleted NamespaceOffloading still waits for: its finalizers, and the clusters
    whose remote namespace is not gone yet."""
    phase = (offloading.get("status") or {}).get("offloadingPhase")
    parts = [f"phase {phase}" if phase else "", held_by(offloading)]
    remaining = [
        f"{cluster} ({conditions[READY].get('reason') or 'not reported yet'})"
        for cluster, conditions in cluster_conditions(offloading).items()
        if READY in conditions
    ]
    if remaining:
        parts.append(f"remote namespaces left on {', '.join(remaining)}")
    return ", ".join(part for part in parts if part)


# --- Talking to the cluster ------------------------------------------------------------------


async def home_cluster_id(client: KubeClient) -> str | None:
    """This cluster's ID, which DefaultName's remote names end with; None where it cannot be
    read (a user allowed only their own namespaces: the webhook judges the name then)."""
    try:
        return (await read_identity(client, "home")).cluster_id
    except (PeeringError, ApiError):
        return None


async def write_offloading(client: KubeClient, wanted: JSON) -> None:
    """Creates the NamespaceOffloading, or updates the one there."""
    namespace = wanted["metadata"]["namespace"]
    if await get_or_none(client, resource_path("v1", "namespaces", name=namespace)) is None:
        raise PeeringError(
            f"namespace {namespace} not found: create it first (kubectl create namespace "
            f"{namespace})"
        )
    current = await get_or_none(client, offloading_path(namespace))
    if current is None:
        try:
            await client.create(offloading_path(namespace, named=False), wanted)
        except AlreadyExists as error:
            raise PeeringError(
                f"namespace {namespace} was offloaded by someone else meanwhile: run the "
                "command again to update it"
            ) from error
        return
    patch = offloading_update(current, wanted)
    if more_restrictive(current, wanted):
        click.echo(
            f"warning: the pod offloading strategy of {namespace} goes from "
            f"{current['spec'].get('podOffloadingStrategy')} to "
            f"{wanted['spec']['podOffloadingStrategy']}: pods running against it are evicted and "
            "recreated by their controllers; pods without one keep running, with an Event",
            err=True,
        )
    await client.merge_patch(offloading_path(namespace), patch)


async def wait_for_offloading(
    client: KubeClient, namespace: str, *, deadline: Deadline, progress: Progress
) -> Outcome:
    """Until the controller has processed the NamespaceOffloading and reached a final phase,
    reporting each change of what it says."""
    reported = ""
    while True:
        current = await get_or_none(client, offloading_path(namespace))
        if current is None:
            raise PeeringError(
                f"the NamespaceOffloading of {namespace} was deleted while waiting: someone "
                f"unoffloaded the namespace; offload it again if you want it offloaded"
            )
        outcome = describe_outcome(current)
        if outcome.done:
            return outcome
        if outcome.message != reported:
            progress.info(f"namespace {namespace}: {outcome.message}")
            reported = outcome.message
        if deadline.passed():
            raise PeeringError(
                f"namespace {namespace} was not offloaded within {deadline.within:.0f}s (last "
                f"seen: {outcome.message}): is vk controller-manager running (`vkctl info`)? "
                f"See `kubectl get namespaceoffloadings -n {namespace} "
                f"{NAMESPACE_OFFLOADING_NAME} -o yaml`"
            )
        await asyncio.sleep(POLL_SECONDS)


async def offload_namespace(
    client: KubeClient, wanted: JSON, *, deadline: Deadline, progress: Progress
) -> Outcome:
    namespace = wanted["metadata"]["namespace"]
    await write_offloading(client, wanted)
    with progress.step(f"waiting for the offloading of namespace {namespace}"):
        outcome = await wait_for_offloading(client, namespace, deadline=deadline, progress=progress)
    if not outcome.ok:
        raise PeeringError(
            f"{outcome.message}: see `kubectl describe namespaceoffloadings -n {namespace} "
            f"{NAMESPACE_OFFLOADING_NAME}` (its status and events)"
        )
    return outcome


async def unoffload_namespace(
    client: KubeClient, namespace: str, *, deadline: Deadline, progress: Progress
) -> str:
    try:
        await client.delete(offloading_path(namespace))
    except NotFound:
        return f"namespace {namespace} is not offloaded"
    with progress.step(f"bringing the pods of {namespace} home and removing its remote namespaces"):
        await wait_until_gone(
            client,
            offloading_path(namespace),
            f"the NamespaceOffloading of {namespace}",
            deadline=deadline,
            progress=progress,
            describe=unoffload_state,
        )
    return f"namespace {namespace} unoffloaded"


# --- Commands --------------------------------------------------------------------------------


def as_list(manifests: list[JSON]) -> JSON:
    """Several manifests as one `kubectl apply -f` takes."""
    return {"apiVersion": "v1", "kind": "List", "items": manifests}


class NamespaceAliases(click.Group):
    """A group whose `namespace` command is also `ns` and `namespaces`, liqoctl's aliases."""

    ALIASES = ("ns", "namespaces")

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        return super().get_command(ctx, "namespace" if cmd_name in self.ALIASES else cmd_name)


@click.group("offload", cls=NamespaceAliases)
def offload() -> None:
    """Offload a namespace to the peered clusters (`namespace`, or `ns`)."""


def namespaces_option(command: F) -> F:
    """NAME... and `--ns-selector`: the namespaces a command acts on, as liqoctl takes them."""
    command = click.option(
        "--ns-selector",
        default=None,
        help="Also every namespace whose labels match this selector (e.g. 'team=shop').",
    )(command)
    return click.argument("names", nargs=-1)(command)


async def selected_namespaces(
    client: KubeClient, names: tuple[str, ...], ns_selector: str | None
) -> list[str]:
    """`names` and the namespaces `ns_selector` matches, each once, in that order."""
    chosen = list(dict.fromkeys(names))
    if ns_selector:
        matched, _ = await client.list_all(
            resource_path("v1", "namespaces"), {"labelSelector": ns_selector}
        )
        if not matched:
            raise PeeringError(f"no namespace has labels matching --ns-selector {ns_selector!r}")
        chosen += [n["metadata"]["name"] for n in matched if n["metadata"]["name"] not in chosen]
    return chosen


def require_namespaces(names: tuple[str, ...], ns_selector: str | None) -> None:
    if not names and not ns_selector:
        raise click.UsageError("name the namespaces (NAME...), or select them with --ns-selector")


def refuse_names(refused: list[str]) -> None:
    """A usage error naming each of NAMES... refused, and why, before any cluster is asked."""
    if refused:
        raise click.BadParameter("; ".join(dict.fromkeys(refused)), param_hint="'NAMES...'")


async def each_namespace(namespaces: list[str], act: Callable[[str], Awaitable[str]]) -> list[str]:
    """`act` on every namespace, the ones after a failure too (the API server's refusal of
    one included); the outcomes, or PeeringError naming every namespace that failed and why."""
    outcomes, failures = [], []
    for namespace in namespaces:
        try:
            outcomes.append(await act(namespace))
        except (PeeringError, ApiError) as error:
            failures.append(f"{namespace}: {error}")
    if failures:
        done = f" ({'; '.join(outcomes)})" if outcomes else ""
        raise PeeringError("; ".join(failures) + done)
    return outcomes


@offload.command("namespace")
@namespaces_option
@click.option(
    "--namespace-mapping-strategy",
    type=click.Choice([s.value for s in NamespaceMappingStrategy]),
    default=NamespaceMappingStrategy.DEFAULT_NAME.value,
    show_default=True,
    help="How the remote namespaces are named: NAME-<this cluster's name>, NAME, or "
    "--remote-namespace-name (immutable).",
)
@click.option(
    "--remote-namespace-name",
    default=None,
    help="The remote namespaces' name: required with SelectedName, ignored otherwise.",
)
@click.option(
    "--pod-offloading-strategy",
    type=click.Choice([s.value for s in PodOffloadingStrategy]),
    default=PodOffloadingStrategy.LOCAL_AND_REMOTE.value,
    show_default=True,
    help="Where the namespace's pods may run: both, local nodes only, or virtual nodes only.",
)
@click.option(
    "-l",
    "--selector",
    "selectors",
    multiple=True,
    help="The clusters to offload to, by the labels of their virtual nodes (a kubectl label "
    "selector, e.g. 'region in (europe,us-west), !staging'); repeat it for alternatives "
    "(ORed). Default: every peered cluster.",
)
@output_option("Print the NamespaceOffloading instead of creating it.")
@click.option("--timeout", default="2m", callback=go_duration, show_default=True)
@cluster_options
def offload_namespace_command(
    names: tuple[str, ...],
    ns_selector: str | None,
    namespace_mapping_strategy: str,
    remote_namespace_name: str | None,
    pod_offloading_strategy: str,
    selectors: tuple[str, ...],
    output: str | None,
    timeout: float,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Extend each namespace NAME (and those --ns-selector matches) to the peered clusters: a
    twin namespace on each selected one, its resources reflected there, and its pods scheduled
    there as --pod-offloading-strategy says."""
    require_namespaces(names, ns_selector)
    mapping_strategy = NamespaceMappingStrategy(namespace_mapping_strategy)
    if mapping_strategy is NamespaceMappingStrategy.SELECTED_NAME and not remote_namespace_name:
        raise click.UsageError(
            "--namespace-mapping-strategy SelectedName needs --remote-namespace-name (the name "
            "of the remote namespaces)"
        )
    if mapping_strategy is not NamespaceMappingStrategy.SELECTED_NAME and remote_namespace_name:
        click.echo(
            f"warning: --remote-namespace-name is ignored with --namespace-mapping-strategy "
            f"{mapping_strategy} (only SelectedName uses it)",
            err=True,
        )
    if mapping_strategy is NamespaceMappingStrategy.SELECTED_NAME and (
        problem := namespace_name_problem(remote_namespace_name or "")
    ):
        raise click.BadParameter(problem, param_hint="'--remote-namespace-name'")

    def wanted(namespace: str) -> JSON:
        return forge_namespace_offloading(
            namespace,
            mapping_strategy,
            remote_namespace_name,
            PodOffloadingStrategy(pod_offloading_strategy),
            selectors,
        )

    try:
        node_selector_from_flags(selectors)  # refused before any namespace is touched
    except InvalidSelector as error:
        raise click.BadParameter(str(error), param_hint="'--selector'") from error
    refuse_names([why for n in names if (why := offloading_refusal(n, wanted(n)["spec"], None))])
    if output and not ns_selector:
        manifests = [wanted(name) for name in dict.fromkeys(names)]
        click.echo(render(manifests[0] if len(manifests) == 1 else as_list(manifests), output))
        return

    async def run() -> list[str]:
        async with cluster_client(kubeconfig, context) as client:
            namespaces = await selected_namespaces(client, names, ns_selector)
            home = None
            if mapping_strategy is NamespaceMappingStrategy.DEFAULT_NAME:
                home = await home_cluster_id(client)
            refusals = [
                f"{n}{'' if n in names else ' (matched by --ns-selector: narrow it)'}: {why}"
                for n in namespaces
                if (why := offloading_refusal(n, wanted(n)["spec"], home))
            ]
            if refusals:
                raise PeeringError("nothing was offloaded: " + "; ".join(refusals))
            if output:
                click.echo(render(as_list([wanted(n) for n in namespaces]), output))
                return []

            async def one(namespace: str) -> str:
                outcome = await offload_namespace(
                    client, wanted(namespace), deadline=Deadline.after(timeout), progress=Progress()
                )
                if outcome.warning:
                    click.echo(f"warning: {outcome.warning}", err=True)
                return outcome.message

            return await each_namespace(namespaces, one)

    for message in asyncio.run(run()):
        click.echo(message)


@click.group("unoffload", cls=NamespaceAliases)
def unoffload() -> None:
    """Stop offloading a namespace (`namespace`, or `ns`)."""


@unoffload.command("namespace")
@namespaces_option
@click.option("--timeout", default="2m", callback=go_duration, show_default=True)
@skip_confirm_option
@cluster_options
def unoffload_namespace_command(
    names: tuple[str, ...],
    ns_selector: str | None,
    timeout: float,
    skip_confirm: bool,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """Stop offloading each namespace NAME (and those --ns-selector matches): its offloaded
    pods are rescheduled locally, then its remote namespaces are deleted with everything in
    them (persistent volumes included)."""
    require_namespaces(names, ns_selector)
    refuse_names([problem for n in names if (problem := namespace_name_problem(n))])
    chosen = ", ".join(dict.fromkeys(names))
    selected = f"those matching {ns_selector!r}" if ns_selector else ""
    confirm_destruction(
        f"unoffloading {' and '.join(filter(None, (chosen, selected)))} deletes their remote "
        "namespaces with everything in them (persistent volumes included), their offloaded pods "
        "rescheduled here",
        skip=skip_confirm,
    )

    async def run() -> list[str]:
        async with cluster_client(kubeconfig, context) as client:
            namespaces = await selected_namespaces(client, names, ns_selector)
            return await each_namespace(
                namespaces,
                lambda namespace: unoffload_namespace(
                    client, namespace, deadline=Deadline.after(timeout), progress=Progress()
                ),
            )

    for message in asyncio.run(run()):
        click.echo(message)
