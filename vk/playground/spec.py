"""What clusters a playground has: names, roles, simulated nodes and cluster labels.

The default is the tutorial's: venice (the consumer, region north), florence and naples
(providers, regions center and south). Any other set comes from a small YAML file or from
`--cluster NAME:ROLE:NODES:LABELS` flags, so that any cluster ID (say `cool-firefly`) works.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml

from vk.api.constants import REGION_LABEL
from vk.api.core import validate_cluster_id
from vk.api.labels import InvalidKeyValues, parse_key_values
from vk.playground.realnode import MAX_REAL_NODES

Role = Literal["consumer", "provider"]
ROLES: tuple[Role, ...] = ("consumer", "provider")

DEFAULT_NODE_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}


class InvalidPlaygroundSpec(ValueError):
    """The playground description cannot be used; the message says what to fix."""


@dataclass(frozen=True)
class ClusterSpec:
    name: str
    role: Role
    nodes: int
    labels: dict[str, str] = field(default_factory=dict)
    node_capacity: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_NODE_CAPACITY))
    # vk installed and running (its controller manager and webhook as processes); without it
    # the cluster is a bare one to try `vkctl install` on.
    vk: bool = True
    # A real node (kubelet and containerd) and vk installed with its Helm chart, running as pods
    # there (`vkctl playground up --real-node`). Beside kwok nodes it takes only vk's pods;
    # with `nodes: 0` it is the cluster's one node and runs every pod (offloaded ones too).
    real_node: bool = False
    # The requests per second its kube-controller-manager and kube-scheduler may send their API
    # server (their burst twice that); None: Kubernetes' defaults, 20 and 50, at which the
    # ReplicaSet controller makes a Deployment's pods 20 a second. The benchmarks raise it: a
    # baseline paced by a client's rate limit says nothing of what is measured against it.
    controller_qps: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "role": self.role,
            "nodes": self.nodes,
            "labels": dict(self.labels),
            "nodeCapacity": dict(self.node_capacity),
            "vk": self.vk,
            "realNode": self.real_node,
            "controllerQPS": self.controller_qps,
        }


DEFAULT_CLUSTERS = (
    ClusterSpec("venice", "consumer", 1, {REGION_LABEL: "north"}),
    ClusterSpec("florence", "provider", 2, {REGION_LABEL: "center"}),
    ClusterSpec("naples", "provider", 2, {REGION_LABEL: "south"}),
)


def parse_labels(text: str) -> dict[str, str]:
    try:
        return parse_key_values(text)
    except InvalidKeyValues as error:
        raise InvalidPlaygroundSpec(f"label {error}") from error


def cluster_spec(data: dict[str, Any]) -> ClusterSpec:
    """Validates one cluster entry of a playground file (or of the recorded state)."""
    name = str(data.get("name", ""))
    try:
        validate_cluster_id(name)
    except ValueError as error:
        raise InvalidPlaygroundSpec(f"cluster name {name!r}: {error}") from error
    role = data.get("role", "provider")
    if role not in ROLES:
        raise InvalidPlaygroundSpec(f"cluster {name}: role must be one of {', '.join(ROLES)}")
    nodes = data.get("nodes", 1)
    if not isinstance(nodes, int) or nodes < 0:
        raise InvalidPlaygroundSpec(f"cluster {name}: nodes must be a whole number >= 0")
    labels = data.get("labels") or {}
    capacity = {**DEFAULT_NODE_CAPACITY, **(data.get("nodeCapacity") or {})}
    if not isinstance(labels, dict) or not isinstance(capacity, dict):
        raise InvalidPlaygroundSpec(f"cluster {name}: labels and nodeCapacity must be mappings")
    vk = data.get("vk", True)
    real_node = data.get("realNode", False)
    if not isinstance(vk, bool) or not isinstance(real_node, bool):
        raise InvalidPlaygroundSpec(f"cluster {name}: vk and realNode must be true or false")
    controller_qps = data.get("controllerQPS")
    if controller_qps is not None and (
        type(controller_qps) is not int or controller_qps < 1  # bool is an int, but not one
    ):
        raise InvalidPlaygroundSpec(
            f"cluster {name}: controllerQPS must be a whole number >= 1 (or left out for "
            "Kubernetes' defaults)"
        )
    return ClusterSpec(
        name,
        role,
        nodes,
        {str(k): str(v) for k, v in labels.items()},
        {str(k): str(v) for k, v in capacity.items()},
        vk,
        real_node,
        controller_qps,
    )


def parse_cluster_flag(flag: str) -> ClusterSpec:
    """`NAME[:ROLE[:NODES[:k=v,...]]]`,
    e.g. `cool-firefly:provider:2:topology.liqo.io/region=east`."""
    name, role, nodes, labels = ([*flag.split(":", 3), "", "", ""])[:4]
    try:
        node_count = int(nodes) if nodes else 1
    except ValueError as error:
        raise InvalidPlaygroundSpec(f"--cluster {flag}: NODES must be a number") from error
    return cluster_spec(
        {
            "name": name,
            "role": role or "provider",
            "nodes": node_count,
            "labels": parse_labels(labels),
        }
    )


def parse_playground_file(text: str) -> tuple[ClusterSpec, ...]:
    """A YAML file `clusters: [{name, role, nodes, labels, nodeCapacity, vk, realNode,
    controllerQPS}]`."""
    try:
        document = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise InvalidPlaygroundSpec(f"not valid YAML: {error}") from error
    if not isinstance(document, dict) or not isinstance(document.get("clusters"), list):
        raise InvalidPlaygroundSpec("expected a mapping with a `clusters:` list")
    return validate_clusters(tuple(cluster_spec(entry) for entry in document["clusters"]))


def validate_clusters(clusters: tuple[ClusterSpec, ...]) -> tuple[ClusterSpec, ...]:
    if not clusters:
        raise InvalidPlaygroundSpec("a playground needs at least one cluster")
    names = [c.name for c in clusters]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise InvalidPlaygroundSpec(f"cluster names must be unique: {', '.join(duplicates)}")
    real_nodes = [c.name for c in clusters if c.real_node]
    if len(real_nodes) > MAX_REAL_NODES:
        raise InvalidPlaygroundSpec(
            f"{MAX_REAL_NODES} clusters at most have a real node (asked for "
            f"{', '.join(real_nodes)})"
        )
    if any(c.real_node and not c.vk for c in clusters):
        raise InvalidPlaygroundSpec(
            "a cluster with a real node runs vk (from its chart): drop vk: false"
        )
    return clusters


def with_real_node(clusters: tuple[ClusterSpec, ...]) -> tuple[ClusterSpec, ...]:
    """The clusters with real nodes, as `--real-node` gives them: the consumer (the first
    cluster, if none is one) keeps its kwok nodes and gets a real one for vk's pods; the last
    provider (the tutorial's naples) gets a real node as its only node, so that the pods
    offloaded there run as containers. Any other cluster is left as it is."""
    consumer = next((c.name for c in clusters if c.role == "consumer"), clusters[0].name)
    providers = [c.name for c in clusters if c.role == "provider" and c.name != consumer]
    provider = providers[-1] if providers else None
    return tuple(
        dataclasses.replace(c, real_node=True)
        if c.name == consumer
        else dataclasses.replace(c, real_node=True, nodes=0)
        if c.name == provider
        else c
        for c in clusters
    )
