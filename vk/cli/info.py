"""`vkctl info` and `vkctl info peer ID`, as liqoctl's: this cluster's identity, whether its
controller manager runs, and its peerings; for one peered cluster, the peering's state, the
ResourceSlices and what they acquired, what the pods on its virtual nodes use, and those nodes.

Pure functions build the reports from the objects read; `format_report` prints any of them for
people, `-o yaml|json` for machines.
"""

from __future__ import annotations

import asyncio
import datetime
import re
from collections.abc import Iterable, Mapping
from decimal import Decimal
from typing import Any

import click

from vk.api.authentication import ResourceSlice
from vk.api.constants import (
    CONTROLLER_MANAGER,
    POD_TERMINAL_PHASES,
    REMOTE_CLUSTER_ID_LABEL,
    REPLICATED_LABEL,
    RESOURCE_SLICE_NAME_LABEL,
    TYPE_LABEL,
    TYPE_VIRTUAL_NODE,
    VK_NAMESPACE,
    tenant_namespace,
)
from vk.api.core import ForeignCluster
from vk.api.identity import ClusterIdentity
from vk.api.offloading import VirtualNode
from vk.api.quantity import InvalidQuantity, format_quantity, parse_quantity
from vk.api.usage import pod_usage
from vk.cli.options import (
    cluster_client,
    cluster_options,
    output_option,
    render,
    valid_cluster_id,
)
from vk.cli.peer import read_identity
from vk.cli.peering import PeeringError
from vk.cli.waiting import (
    condition_statuses,
    get_or_none,
    node_is_ready,
    virtual_node_path,
)
from vk.controllers.provider_resourceslices import ACCEPTED, RESOURCES
from vk.kube.client import JSON, KubeClient, NotFound, resource_path
from vk.webhooks.configuration import CONFIGURATION_NAME as WEBHOOK_CONFIGURATION_NAME

# --- Resources -----------------------------------------------------------------------------


def sum_resources(lists: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """The sum of resource lists (`{"cpu": "2", "memory": "4Gi"}`), names sorted; a resource
    with a quantity that is none (or beyond what Kubernetes keeps: a provider's status may say
    anything) is shown as invalid, never computed with."""
    total: dict[str, Decimal] = {}
    invalid: dict[str, str] = {}
    for resources in lists:
        for name, quantity in resources.items():
            try:
                total[name] = total.get(name, Decimal(0)) + parse_quantity(quantity)
            except InvalidQuantity:
                invalid[name] = f"invalid ({str(quantity)[:20]})"
    shown = {name: format_quantity(name, value) for name, value in total.items()}
    shown.update(invalid)
    return {name: shown[name] for name in sorted(shown)}


def used_resources(pods: Iterable[Mapping[str, Any]]) -> dict[str, str]:
    """What the pods that still hold their node's resources (not Succeeded or Failed) take."""
    requested = (
        pod_usage(pod)
        for pod in pods
        if (pod.get("status") or {}).get("phase") not in POD_TERMINAL_PHASES
    )
    total: dict[str, Decimal] = {}
    for requests in requested:
        for name, value in requests.items():
            total[name] = total.get(name, Decimal(0)) + value
    return {name: format_quantity(name, total[name]) for name in sorted(total)}


# --- Reports -------------------------------------------------------------------------------


def _parse_time(value: str | None) -> datetime.datetime | None:
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def controller_manager_state(lease: Mapping[str, Any] | None, now: datetime.datetime) -> JSON:
    """Whether vk controller-manager runs: some instance holds its Lease and renewed it within
    the lease's duration (as judged by this machine's clock)."""
    spec = (lease or {}).get("spec") or {}
    holder = spec.get("holderIdentity")
    renewed = _parse_time(spec.get("renewTime"))
    if lease is None or not holder or renewed is None:
        return {"running": False}
    since = (now - renewed).total_seconds()
    return {
        "running": since <= int(spec.get("leaseDurationSeconds") or 15),
        "holder": holder,
        "lastRenewal": spec["renewTime"],
        "secondsSinceRenewal": max(0, round(since)),
    }


def _module_condition(foreign_cluster: Mapping[str, Any], module: str, kind: str) -> str:
    modules = (foreign_cluster.get("status") or {}).get("modules") or {}
    entry = modules.get(module) or {}
    if not entry.get("enabled"):
        return "Disabled" if module == "networking" else "None"
    for condition in entry.get("conditions") or []:
        if condition.get("type") == kind:
            return str(condition.get("status") or "None")
    return "None"


def peering_summary(foreign_cluster: Mapping[str, Any]) -> JSON:
    """One peered cluster as `kubectl get foreignclusters` shows it, with its role."""
    return {
        "clusterID": (foreign_cluster.get("spec") or {}).get("clusterID")
        or foreign_cluster["metadata"]["name"],
        "role": (foreign_cluster.get("status") or {}).get("role") or "Unknown",
        "outgoingPeering": _module_condition(
            foreign_cluster, "offloading", "OffloadingVirtualNodeStatus"
        ),
        "incomingPeering": _module_condition(foreign_cluster, "authentication", "AuthTenantStatus"),
        "authentication": _module_condition(
            foreign_cluster, "authentication", "AuthIdentityControlPlaneStatus"
        ),
        "networking": _module_condition(foreign_cluster, "networking", "NetworkConnectionStatus"),
    }


# The chart's Deployment of the webhook (the playground runs it as a process: none).
WEBHOOK_DEPLOYMENT = "vk-webhook"


def webhook_state(
    configurations: Iterable[Mapping[str, Any]], deployment: Mapping[str, Any] | None
) -> JSON:
    """Whether vk's webhook is registered with the API server (its mutating and validating
    configurations), and, installed by the chart, how many of its replicas are ready."""
    kinds = {c.get("kind") for c in configurations}
    state: JSON = {
        "registered": {"MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"} <= kinds
    }
    if deployment is not None:
        status = deployment.get("status") or {}
        wanted = (deployment.get("spec") or {}).get("replicas", 1)
        state["ready"] = f"{status.get('readyReplicas', 0)}/{wanted}"
    return state


def virtual_kubelet_states(
    virtual_nodes: Iterable[Mapping[str, Any]], nodes: Mapping[str, Mapping[str, Any]]
) -> list[JSON]:
    """Each VirtualNode's virtual kubelet as its controller reports it, and its Node's
    readiness."""
    states = []
    for virtual_node in virtual_nodes:
        metadata = virtual_node["metadata"]
        conditions = {
            c.get("type"): c for c in (virtual_node.get("status") or {}).get("conditions") or []
        }
        kubelet = conditions.get("VirtualKubelet") or {}
        node = nodes.get(metadata["name"])
        state: JSON = {
            "name": f"{metadata['namespace']}/{metadata['name']}",
            "virtualKubelet": kubelet.get("status") or "None",
            "nodeReady": condition_statuses(node).get("Ready") == "True" if node else None,
        }
        if kubelet.get("status") != "Running" and kubelet.get("message"):
            state["message"] = kubelet["message"]
        states.append(state)
    return sorted(states, key=lambda s: s["name"])


def local_report(
    identity: ClusterIdentity,
    lease: Mapping[str, Any] | None,
    foreign_clusters: Iterable[Mapping[str, Any]],
    now: datetime.datetime,
    *,
    webhook: JSON | None = None,
    virtual_kubelets: list[JSON] | None = None,
) -> JSON:
    """`vkctl info`."""
    report: JSON = {
        "clusterID": identity.cluster_id,
        "clusterLabels": dict(sorted(identity.labels.items())),
        "controllerManager": controller_manager_state(lease, now),
    }
    if webhook is not None:
        report["webhook"] = webhook
    if virtual_kubelets is not None:
        report["virtualKubelets"] = virtual_kubelets
    report["peerings"] = sorted(
        (peering_summary(fc) for fc in foreign_clusters), key=lambda p: p["clusterID"]
    )
    return report


def _conditions(obj: Mapping[str, Any]) -> list[JSON]:
    return [
        {
            key: condition[key]
            for key in ("type", "status", "reason", "message")
            if condition.get(key)
        }
        for condition in (obj.get("status") or {}).get("conditions") or []
    ]


def _foreign_cluster_conditions(foreign_cluster: Mapping[str, Any]) -> list[JSON]:
    modules = (foreign_cluster.get("status") or {}).get("modules") or {}
    return [
        condition
        for module in ("authentication", "offloading", "networking")
        for condition in _conditions({"status": modules.get(module) or {}})
    ] + _conditions(foreign_cluster)


def _providing(resource_slice: Mapping[str, Any]) -> bool:
    """A consumer's slice replicated here (we provide), not one of ours (we consume)."""
    return (resource_slice["metadata"].get("labels") or {}).get(REPLICATED_LABEL) == "true"


def resource_slice_summary(resource_slice: Mapping[str, Any]) -> JSON:
    statuses = condition_statuses(resource_slice)
    return {
        "name": resource_slice["metadata"]["name"],
        "action": "Providing" if _providing(resource_slice) else "Consuming",
        "class": (resource_slice.get("spec") or {}).get("class") or "default",
        "accepted": bool(statuses) and all(s == ACCEPTED for s in statuses.values()),
        "resources": dict((resource_slice.get("status") or {}).get("resources") or {}),
        "conditions": _conditions(resource_slice),
    }


def virtual_node_summary(virtual_node: Mapping[str, Any], node: Mapping[str, Any] | None) -> JSON:
    metadata, spec = virtual_node["metadata"], virtual_node.get("spec") or {}
    summary: JSON = {"name": metadata["name"], "ready": node is not None and node_is_ready(node)}
    resource_slice = (metadata.get("labels") or {}).get(RESOURCE_SLICE_NAME_LABEL)
    if resource_slice:
        summary["resourceSlice"] = resource_slice
    summary["secret"] = (spec.get("kubeconfigSecretRef") or {}).get("name")
    summary["resources"] = dict((spec.get("resourceQuota") or {}).get("hard") or {})
    summary["conditions"] = _conditions(virtual_node)
    return summary


def peer_report(
    foreign_cluster: Mapping[str, Any],
    resource_slices: Iterable[Mapping[str, Any]],
    virtual_nodes: Iterable[Mapping[str, Any]],
    nodes: Mapping[str, Mapping[str, Any]],
    pods: Iterable[Mapping[str, Any]],
) -> JSON:
    """`vkctl info peer ID`: `nodes` by name, `pods` those bound to the virtual nodes."""
    summary = peering_summary(foreign_cluster)
    slices = sorted(resource_slices, key=lambda s: s["metadata"]["name"])

    def granted(providing: bool) -> dict[str, str]:
        return sum_resources(
            (s.get("status") or {}).get("resources") or {}
            for s in slices
            if _providing(s) == providing and condition_statuses(s).get(RESOURCES) == ACCEPTED
        )

    report: JSON = {
        "clusterID": summary.pop("clusterID"),
        "role": summary.pop("role"),
        "peering": {**summary, "conditions": _foreign_cluster_conditions(foreign_cluster)},
    }
    api_server = (foreign_cluster.get("status") or {}).get("apiServerUrl")
    if api_server:
        report["apiServer"] = api_server
    report["resources"] = {
        "acquired": granted(providing=False),
        "used": used_resources(pods),
        "provided": granted(providing=True),
    }
    report["resourceSlices"] = [resource_slice_summary(s) for s in slices]
    report["virtualNodes"] = [
        virtual_node_summary(v, nodes.get(v["metadata"]["name"]))
        for v in sorted(virtual_nodes, key=lambda v: v["metadata"]["name"])
    ]
    return report


# --- Printing ------------------------------------------------------------------------------

# Resource lists and labels: one line of `name=value`.
_INLINE = {"clusterLabels", "resources", "acquired", "used", "provided"}
_TITLES = {"apiServer": "API server"}


def _title(key: str) -> str:
    if key in _TITLES:
        return _TITLES[key]
    words = re.sub(r"(?<=[a-z])(?=[A-Z])", " ", key).split()
    text = " ".join(w if w.isupper() else w.lower() for w in words)
    return text[:1].upper() + text[1:]


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def _render(mapping: Mapping[str, Any], depth: int, lines: list[str]) -> None:
    pad = "  " * depth
    for key, value in mapping.items():
        title = _title(key)
        if value is None:
            continue
        if isinstance(value, Mapping) and (
            key in _INLINE and not any(isinstance(v, Mapping | list) for v in value.values())
        ):
            pairs = ", ".join(f"{k}={v}" for k, v in value.items())
            lines.append(f"{pad}{title}: {pairs or 'none'}")
        elif isinstance(value, Mapping):
            lines.append(f"{pad}{title}")
            _render(value, depth + 1, lines)
        elif isinstance(value, list) and not value:
            lines.append(f"{pad}{title}: none")
        elif isinstance(value, list) and all(isinstance(v, Mapping) and "type" in v for v in value):
            lines.append(f"{pad}{title}")
            for condition in value:
                detail = ": ".join(
                    str(condition[k]) for k in ("reason", "message") if condition.get(k)
                )
                line = f"{pad}  {condition['type']}: {condition.get('status', '')}"
                lines.append(f"{line} ({detail})" if detail else line)
        elif isinstance(value, list) and all(isinstance(v, Mapping) for v in value):
            lines.append(f"{pad}{title}")
            for item in value:
                name_key = "name" if "name" in item else "clusterID"
                lines.append(f"{pad}  {item.get(name_key)}")
                _render({k: v for k, v in item.items() if k != name_key}, depth + 2, lines)
        elif isinstance(value, list):
            lines.append(f"{pad}{title}: {'; '.join(_scalar(v) for v in value)}")
        else:
            lines.append(f"{pad}{title}: {_scalar(value)}")


def format_report(report: Mapping[str, Any]) -> str:
    """A report for people: one `Title: value` a line, sections indented."""
    lines: list[str] = []
    _render(report, 0, lines)
    return "\n".join(lines)


# --- Reading -------------------------------------------------------------------------------


async def _items(client: KubeClient, path: str, **params: str) -> list[JSON]:
    try:
        items, _ = await client.list_all(path, params or None)
    except NotFound:  # the CRD is not installed: nothing of that kind
        return []
    return items


async def collect_local(client: KubeClient) -> JSON:
    identity = await read_identity(client, "local")
    lease = await get_or_none(
        client,
        resource_path(
            "coordination.k8s.io/v1",
            "leases",
            namespace=VK_NAMESPACE,
            name=CONTROLLER_MANAGER,
        ),
    )
    foreign_clusters = await _items(
        client, resource_path(ForeignCluster.group_version(), ForeignCluster.PLURAL)
    )
    configurations = [
        {**found, "kind": kind}
        for kind, plural in (
            ("MutatingWebhookConfiguration", "mutatingwebhookconfigurations"),
            ("ValidatingWebhookConfiguration", "validatingwebhookconfigurations"),
        )
        if (
            found := await get_or_none(
                client,
                resource_path(
                    "admissionregistration.k8s.io/v1", plural, name=WEBHOOK_CONFIGURATION_NAME
                ),
            )
        )
        is not None
    ]
    deployment = await get_or_none(
        client,
        resource_path("apps/v1", "deployments", namespace=VK_NAMESPACE, name=WEBHOOK_DEPLOYMENT),
    )
    virtual_nodes = await _items(
        client, resource_path(VirtualNode.group_version(), VirtualNode.PLURAL)
    )
    nodes = {
        n["metadata"]["name"]: n
        for n in await _items(
            client,
            resource_path("v1", "nodes"),
            labelSelector=f"{TYPE_LABEL}={TYPE_VIRTUAL_NODE}",
        )
    }
    return local_report(
        identity,
        lease,
        foreign_clusters,
        datetime.datetime.now(datetime.UTC),
        webhook=webhook_state(configurations, deployment),
        virtual_kubelets=virtual_kubelet_states(virtual_nodes, nodes),
    )


async def collect_peer(client: KubeClient, cluster_id: str) -> JSON:
    foreign_cluster = await get_or_none(
        client,
        resource_path(ForeignCluster.group_version(), ForeignCluster.PLURAL, name=cluster_id),
    )
    if foreign_cluster is None:
        raise PeeringError(
            f"this cluster is not peered with {cluster_id} (no ForeignCluster {cluster_id}): "
            "`vkctl info` lists the peered clusters"
        )
    namespace = tenant_namespace(cluster_id)
    resource_slices = await _items(
        client,
        resource_path(ResourceSlice.group_version(), ResourceSlice.PLURAL, namespace=namespace),
    )
    virtual_nodes = await _items(client, virtual_node_path(namespace))
    nodes = {
        node["metadata"]["name"]: node
        for node in await _items(
            client,
            resource_path("v1", "nodes"),
            labelSelector=f"{TYPE_LABEL}={TYPE_VIRTUAL_NODE},{REMOTE_CLUSTER_ID_LABEL}={cluster_id}",
        )
    }
    pods = [
        pod
        for virtual_node in virtual_nodes
        for pod in await _items(
            client,
            resource_path("v1", "pods"),
            fieldSelector=f"spec.nodeName={virtual_node['metadata']['name']}",
        )
    ]
    return peer_report(foreign_cluster, resource_slices, virtual_nodes, nodes, pods)


def _show(report: JSON, output: str | None) -> str:
    return render(report, output) if output else format_report(report)


@click.group("info", invoke_without_command=True)
@output_option("Print the report as YAML or JSON.")
@cluster_options
@click.pass_context
def info(
    ctx: click.Context, output: str | None, kubeconfig: str | None, context: str | None
) -> None:
    """This cluster: its ID and labels, whether vk's controller manager runs, its peerings.
    `vkctl info peer ID`: one peering in detail."""
    if ctx.invoked_subcommand is not None:
        return

    async def run() -> JSON:
        async with cluster_client(kubeconfig, context) as client:
            return await collect_local(client)

    click.echo(_show(asyncio.run(run()), output))


@info.command("peer")
@click.argument("cluster_id", callback=valid_cluster_id)
@output_option("Print the report as YAML or JSON.")
@cluster_options
@click.pass_context
def info_peer(
    ctx: click.Context,
    cluster_id: str,
    output: str | None,
    kubeconfig: str | None,
    context: str | None,
) -> None:
    """A peering in detail: its state, the ResourceSlices and the resources they acquired,
    the resources the pods on its virtual nodes use, and those nodes."""
    # `vkctl info -o yaml peer ID` is `vkctl info peer ID -o yaml` (as --kubeconfig and
    # --context are: `cluster_options`).
    given = ctx.parent.params if ctx.parent else {}
    output = output or given.get("output")

    async def run() -> JSON:
        async with cluster_client(kubeconfig, context) as client:
            return await collect_peer(client, cluster_id)

    click.echo(_show(asyncio.run(run()), output))
