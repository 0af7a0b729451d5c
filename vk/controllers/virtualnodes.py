"""The VirtualNode controller: a virtual kubelet for every VirtualNode, and a clean end for it.

The kubelet is started through a `Launcher`: a Deployment in a real cluster, a local process in
the playground (whose nodes run no containers), with the same arguments and environment but
for what the launcher must assign itself. The controller gives it its ServiceAccount and RBAC,
reports conditions VirtualKubelet and Node (Creating, Running, Draining, Deleting), and on
deletion cordons and drains the Node through the Eviction API before it removes the kubelet,
the Node and the RBAC.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import datetime
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import structlog

from vk.api.constants import (
    POD_TERMINAL_PHASES,
    REMOTE_CLUSTER_ID_LABEL,
    TYPE_LABEL,
    TYPE_VIRTUAL_NODE,
    virtual_kubelet_service_account,
)
from vk.api.offloading import NamespaceMap, VirtualNode, VkOptionsTemplate
from vk.controllers.virtualkubelet_rbac import (
    IDENTITY_KINDS,
    IDENTITY_SELECTOR,
    NODE_NAME_LABEL,
    OFFLOADED_ACCESS_LABEL,
    RBAC_API,
    forge_offloaded_namespace_binding,
    forge_virtual_kubelet_rbac,
    offloaded_namespaces,
)
from vk.kube.client import (
    JSON,
    ApiError,
    AppliedObjects,
    KubeClient,
    NotFound,
    listed_object_path,
    object_path,
    resource_path,
)
from vk.kube.conditions import forge_condition
from vk.kube.controller import Controller, Reconciler, Result, run_with_informers
from vk.kube.events import WARNING, EventRecorder
from vk.kube.eviction import evict
from vk.kube.informer import (
    DELETED,
    EventHandler,
    Informer,
    object_key,
    shared_informer,
    split_key,
)

log = structlog.get_logger("vk.controllers.virtualnodes")

# The virtual kubelet's interpreter runs without docstrings and asserts (python -OO): a
# consumer runs one per VirtualNode, and importing vk costs 5.3 MiB with them, 2.2 without. Its
# asserts narrow types for mypy, never check input (tests/unit/test_virtualnodes.py holds them
# to that).
VIRTUAL_KUBELET_PYTHON_ENV = (("PYTHONOPTIMIZE", "2"),)

FINALIZER = "virtualnode-controller.liqo.io/finalizer"
DRAIN_POLL = 2.0
NONE, CREATING, RUNNING, DRAINING, DELETING = "None", "Creating", "Running", "Draining", "Deleting"


@dataclass(frozen=True)
class VirtualKubeletSpec:
    """What a launcher runs: `vk kubelet` with these arguments and environment, for the
    VirtualNode `namespace/name` of provider `cluster_id`; `template` is the VirtualNode's
    DeploymentTemplate (replicas, pod resources, tolerations...), for launchers that run pods."""

    namespace: str
    name: str
    args: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cluster_id: str = ""
    template: Mapping[str, Any] = field(default_factory=dict)
    # The UID of the ServiceAccount it runs as: tokens are bound to it, so one made again (by
    # the controller, after someone deleted it) needs a virtual kubelet with a new token.
    service_account_uid: str = ""


class Launcher(abc.ABC):
    """Runs the virtual kubelet of a VirtualNode. Implementations are idempotent: `ensure`
    starts or updates it and says whether it runs; `remove` stops it and says whether it is
    gone (the controller asks again until it is)."""

    # How often a running virtual kubelet is looked at again, for launchers that learn of its
    # death from nothing else (None: `watch` tells).
    liveness_poll: float | None = None

    @abc.abstractmethod
    async def ensure(self, spec: VirtualKubeletSpec) -> bool: ...

    @abc.abstractmethod
    async def remove(self, namespace: str, name: str) -> bool: ...

    def watch(self, changed: Callable[[str, str], None]) -> list[Informer]:
        """Informers for the controller to run, whose handlers call `changed(namespace,
        name)` when a virtual kubelet changes, so that its VirtualNode is looked at again."""
        return []


def forge_virtual_kubelet_spec(
    virtual_node: Mapping[str, Any],
    home_cluster_id: str,
    options_template: Mapping[str, Any] | None = None,
) -> VirtualKubeletSpec:
    """Liqo's arguments for the virtual kubelet of a VirtualNode, then those of the
    VkOptionsTemplate it names (`options_template`, its spec), then the classes its provider
    offers, then the arguments of the VirtualNode's own template (its first container), which
    may add or override flags. The Deployment's template is the VkOptionsTemplate's, field by
    field overridden by the VirtualNode's own."""
    metadata, spec = virtual_node["metadata"], virtual_node.get("spec") or {}
    options = options_template or {}
    secret = (spec.get("kubeconfigSecretRef") or {}).get("name", "")
    create_node = spec.get("createNode")
    if create_node is None:
        create_node = options.get("createNode")
    args = [
        f"--foreign-cluster-id={spec.get('clusterID', '')}",
        f"--nodename={metadata['name']}",
        f"--tenant-namespace={metadata['namespace']}",
        f"--home-cluster-id={home_cluster_id}",
        f"--foreign-kubeconfig-secret-name={secret}",
        f"--create-node={'false' if create_node is False else 'true'}",
        *options_template_args(options),
    ]
    # The provider's default class of each kind for the copies the virtual kubelet makes there
    # (the one marked default, else the first, as Liqo picks it).
    for kind, name_field, flag in (
        ("storageClasses", "storageClassName", "--remote-real-storage-class-name"),
        ("ingressClasses", "ingressClassName", "--remote-real-ingress-class-name"),
        ("loadBalancerClasses", "loadBalancerClassName", "--remote-real-load-balancer-class-name"),
    ):
        if name := default_class(spec.get(kind) or [], name_field):
            args.append(f"{flag}={name}")
    own_template = spec.get("template") or {}
    containers = (((own_template.get("spec") or {}).get("template") or {}).get("spec") or {}).get(
        "containers"
    ) or []
    if containers:
        args += [str(a) for a in containers[0].get("args") or []]
    env = (
        ("POD_NAMESPACE", metadata["namespace"]),
        ("VIRTUALNODE_NAME", metadata["name"]),
        *VIRTUAL_KUBELET_PYTHON_ENV,
    )
    return VirtualKubeletSpec(
        metadata["namespace"],
        metadata["name"],
        tuple(args),
        env,
        cluster_id=spec.get("clusterID", ""),
        template=merge_deployment_templates(options_template_deployment(options), own_template),
    )


# The reflectors whose workers and policy a VkOptionsTemplate may set, as `vk kubelet` names
# them (Liqo's names; those vk has no reflector for are accepted by the kubelet and ignored).
POLICY_REFLECTORS = ("service", "ingress", "configmap", "secret", "event")
POLICIES = ("DenyList", "AllowList")


def options_template_args(options: Mapping[str, Any]) -> list[str]:
    """The `vk kubelet` arguments of a VkOptionsTemplate's spec, as Liqo's VirtualNode webhook
    writes them: reflector workers and policies, the Node's extra labels and annotations, the
    labels and annotations kept home, then its extra arguments."""
    args: list[str] = []
    for resource, config in sorted((options.get("reflectorsConfig") or {}).items()):
        if not isinstance(config, Mapping):
            continue
        if isinstance(config.get("workers"), int):
            args.append(f"--{resource}-reflection-workers={config['workers']}")
        # Liqo's CustomLiqo is its default policy: no flag, the kubelet's default.
        if resource in POLICY_REFLECTORS and config.get("type") in POLICIES:
            args.append(f"--{resource}-reflection-type={config['type']}")
    for option, flag in (
        ("nodeExtraLabels", "--node-extra-labels"),
        ("nodeExtraAnnotations", "--node-extra-annotations"),
    ):
        if pairs := options.get(option):
            args.append(f"{flag}={','.join(f'{k}={v}' for k, v in sorted(pairs.items()))}")
    for option, flag in (
        ("labelsNotReflected", "--labels-not-reflected"),
        ("annotationsNotReflected", "--annotations-not-reflected"),
    ):
        if keys := options.get(option):
            args.append(f"{flag}={','.join(keys)}")
    if options.get("metricsEnabled") is not None:
        args.append(f"--metrics-enabled={str(bool(options['metricsEnabled'])).lower()}")
    args += [str(a) for a in options.get("extraArgs") or []]
    return args


def options_template_deployment(options: Mapping[str, Any]) -> JSON:
    """A VkOptionsTemplate's spec as the DeploymentTemplate of a VirtualNode: replicas, the
    pod's labels and annotations, tolerations, image pull secrets, and the container's
    resources and pull policy. Its containerImage is not used: vk runs its own image."""
    container: JSON = {}
    if options.get("resources"):
        container["resources"] = options["resources"]
    if options.get("pullPolicy"):
        container["imagePullPolicy"] = options["pullPolicy"]
    pod: JSON = {}
    for option in ("tolerations", "imagePullSecrets"):
        if options.get(option):
            pod[option] = options[option]
    if container:
        pod["containers"] = [container]
    template: JSON = {}
    metadata = {
        key: options[option]
        for key, option in (("labels", "extraLabels"), ("annotations", "extraAnnotations"))
        if options.get(option)
    }
    if metadata:
        template["metadata"] = metadata
    deployment_spec: JSON = {}
    if isinstance(options.get("replicas"), int):
        deployment_spec["replicas"] = options["replicas"]
    if pod:
        deployment_spec["template"] = {"spec": pod}
    if deployment_spec:
        template["spec"] = deployment_spec
    return template


def merge_deployment_templates(base: Mapping[str, Any], override: Mapping[str, Any]) -> JSON:
    """`override` (a VirtualNode's template) over `base` (its VkOptionsTemplate's): labels and
    annotations key by key, the rest field by field; the first container's fields likewise."""
    if not base:
        return dict(override)
    base_meta, over_meta = base.get("metadata") or {}, override.get("metadata") or {}
    base_spec, over_spec = base.get("spec") or {}, override.get("spec") or {}
    base_pod = (base_spec.get("template") or {}).get("spec") or {}
    over_pod = (over_spec.get("template") or {}).get("spec") or {}
    base_container = (base_pod.get("containers") or [{}])[0]
    over_containers = over_pod.get("containers") or [{}]
    pod = {**base_pod, **over_pod}
    if base_pod.get("containers") or over_pod.get("containers"):
        pod["containers"] = [{**base_container, **over_containers[0]}, *over_containers[1:]]
    merged: JSON = {
        **override,
        "metadata": {
            **base_meta,
            **over_meta,
            **{
                key: {**(base_meta.get(key) or {}), **(over_meta.get(key) or {})}
                for key in ("labels", "annotations")
                if base_meta.get(key) or over_meta.get(key)
            },
        },
        "spec": {
            **base_spec,
            **over_spec,
            "template": {**(over_spec.get("template") or {}), "spec": pod},
        },
    }
    return merged


def options_template_key(virtual_node: Mapping[str, Any]) -> str | None:
    """`namespace/name` of the VkOptionsTemplate a VirtualNode names (its own namespace when
    the reference gives none), or None."""
    ref = (virtual_node.get("spec") or {}).get("vkOptionsTemplateRef") or {}
    if not ref.get("name"):
        return None
    namespace = ref.get("namespace") or virtual_node["metadata"]["namespace"]
    return f"{namespace}/{ref['name']}"


def default_class(classes: list[Mapping[str, Any]], name_field: str) -> str | None:
    """The name of the class marked default, else of the first; None without any."""
    for entry in classes:
        if entry.get("default"):
            return str(entry.get(name_field) or "") or None
    return str(classes[0].get(name_field) or "") or None if classes else None


def flag_value(args: tuple[str, ...], flag: str) -> str:
    """The value the last `--flag=value` of `args` gives (the template's override Liqo's)."""
    value = ""
    for arg in args:
        if arg.startswith(f"{flag}="):
            value = arg[len(flag) + 1 :]
    return value


def is_namespace_terminating(error: ApiError) -> bool:
    """Whether the API server refused a write because its namespace is being deleted."""
    return error.status == 403 and "being terminated" in error.message


def forge_conditions(
    current: list[JSON] | None, wanted: Mapping[str, tuple[str, str]], now: datetime.datetime
) -> list[JSON]:
    """VirtualNode conditions `type -> (status, message)`, transition times kept while the
    status stays."""
    by_type = {c.get("type"): c for c in current or []}
    return [
        forge_condition(by_type.get(kind), kind, status, message, now)
        for kind, (status, message) in wanted.items()
    ]


def is_drainable(pod: Mapping[str, Any]) -> bool:
    """A pod eviction should move: not a DaemonSet's (it would come straight back), not a
    mirror pod, not finished."""
    metadata = pod["metadata"]
    if any(o.get("kind") == "DaemonSet" for o in metadata.get("ownerReferences") or []):
        return False
    if "kubernetes.io/config.mirror" in (metadata.get("annotations") or {}):
        return False
    return (pod.get("status") or {}).get("phase") not in POD_TERMINAL_PHASES


def node_ready(node: Mapping[str, Any] | None) -> bool:
    return bool(node) and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in ((node or {}).get("status") or {}).get("conditions") or []
    )


class VirtualNodeReconciler(Reconciler):
    name = "virtualnodes"

    def __init__(self, client: KubeClient, home_cluster_id: str, launcher: Launcher) -> None:
        self.client = client
        self.home_cluster_id = home_cluster_id
        self.launcher = launcher
        self.virtual_nodes = shared_informer(
            client, VirtualNode.group_version(), VirtualNode.PLURAL
        )
        self.nodes = shared_informer(
            client, "v1", "nodes", label_selector=f"{TYPE_LABEL}={TYPE_VIRTUAL_NODE}"
        )
        # Which namespaces each provider is offloaded, so which its virtual kubelets may read.
        self.namespace_maps = shared_informer(
            client,
            NamespaceMap.group_version(),
            NamespaceMap.PLURAL,
            label_selector=REMOTE_CLUSTER_ID_LABEL,
        )
        # What each virtual kubelet is (`forge_virtual_kubelet_rbac`, and its bindings in the
        # offloaded namespaces), watched so that one deleted by someone else is made again.
        self.identity = {
            kind: shared_informer(client, *kind, label_selector=IDENTITY_SELECTOR)
            for kind in IDENTITY_KINDS
        }
        self.role_bindings = self.identity[RBAC_API, "rolebindings"]
        # The VkOptionsTemplates VirtualNodes name: a change relaunches their virtual kubelets.
        self.options_templates = shared_informer(
            client, VkOptionsTemplate.group_version(), VkOptionsTemplate.PLURAL
        )
        self.events = EventRecorder(client, "virtualnode-controller")
        self.applied = AppliedObjects(client)
        self.controller = Controller(self, workers=4)
        self._missing_templates: dict[str, str] = {}  # VirtualNode -> template told missing

    def _on_node(self, _: str, node: JSON, __: JSON | None) -> None:
        for virtual_node in self.virtual_nodes.store.objects():
            if virtual_node["metadata"]["name"] == node["metadata"]["name"]:
                self.controller.enqueue(object_key(virtual_node))

    def _on_namespace_map(self, _: str, namespace_map: JSON, __: JSON | None) -> None:
        for virtual_node in self.virtual_nodes.store.objects():
            if virtual_node["metadata"]["namespace"] == namespace_map["metadata"]["namespace"]:
                self.controller.enqueue(object_key(virtual_node))

    def _on_identity(self, kind: tuple[str, str]) -> EventHandler:
        def changed(event: str, obj: JSON, __: JSON | None) -> None:
            if event == DELETED:
                # Deleted by someone else (or by this controller, undoing it): applied again
                # if still wanted, not taken as applied for ever.
                self.applied.forget(listed_object_path(*kind, obj))
            node = (obj["metadata"].get("labels") or {}).get(NODE_NAME_LABEL)
            for virtual_node in self.virtual_nodes.store.objects():
                if virtual_node["metadata"]["name"] == node:
                    self.controller.enqueue(object_key(virtual_node))

        return changed

    def _on_options_template(self, _: str, template: JSON, __: JSON | None) -> None:
        key = object_key(template)
        for virtual_node in self.virtual_nodes.store.objects():
            if options_template_key(virtual_node) == key:
                self.controller.enqueue(object_key(virtual_node))

    async def run(self) -> None:
        self.virtual_nodes.add_handler(lambda _, obj, __: self.controller.enqueue(object_key(obj)))
        self.options_templates.add_handler(self._on_options_template)
        self.nodes.add_handler(self._on_node)
        self.namespace_maps.add_handler(self._on_namespace_map)
        for kind, informer in self.identity.items():
            informer.add_handler(self._on_identity(kind))
        launcher_informers = self.launcher.watch(
            lambda namespace, name: self.controller.enqueue(f"{namespace}/{name}")
        )
        await run_with_informers(
            self.controller,
            self.virtual_nodes,
            self.nodes,
            self.namespace_maps,
            *self.identity.values(),
            self.options_templates,
            *launcher_informers,
        )

    def _path(self, namespace: str, name: str, subresource: str | None = None) -> str:
        return resource_path(
            VirtualNode.group_version(),
            VirtualNode.PLURAL,
            namespace=namespace,
            name=name,
            subresource=subresource,
        )

    async def _set_conditions(
        self, virtual_node: JSON, wanted: Mapping[str, tuple[str, str]]
    ) -> JSON:
        """Writes the conditions if they change; returns the VirtualNode as it now is."""
        current = (virtual_node.get("status") or {}).get("conditions")
        conditions = forge_conditions(current, wanted, datetime.datetime.now(datetime.UTC))
        if conditions == current:
            return virtual_node
        metadata = virtual_node["metadata"]
        return await self.client.merge_patch(
            self._path(metadata["namespace"], metadata["name"], "status"),
            {"status": {"conditions": conditions}},
        )

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        assert namespace is not None
        virtual_node = self.virtual_nodes.store.get(key)
        if virtual_node is None:
            self._missing_templates.pop(key, None)
            gone = await self.launcher.remove(namespace, name)
            return Result(requeue_after=None if gone else DRAIN_POLL)
        metadata = virtual_node["metadata"]
        if metadata.get("deletionTimestamp"):
            if FINALIZER not in (metadata.get("finalizers") or []):
                return Result()
            return await self._delete(virtual_node)
        conflict = await self._foreign_node(virtual_node)
        if conflict:
            await self._set_conditions(virtual_node, {"VirtualKubelet": (NONE, conflict)})
            await self.events.record(virtual_node, WARNING, "NodeNameConflict", conflict)
            return Result()
        if await self.client.set_finalizer(
            self._path(namespace, name), virtual_node, FINALIZER, present=True
        ):
            return Result()
        template_key = options_template_key(virtual_node)
        options_template = self.options_templates.store.get(template_key) if template_key else None
        if template_key and options_template is None:
            # Launched without it, its virtual kubelet would run with options nobody chose.
            message = (
                f"the VkOptionsTemplate {template_key} that spec.vkOptionsTemplateRef names does "
                "not exist: the virtual kubelet is not started until it does"
            )
            await self._set_conditions(virtual_node, {"VirtualKubelet": (NONE, message)})
            if self._missing_templates.get(key) != template_key:
                self._missing_templates[key] = template_key
                await self.events.record(
                    virtual_node, WARNING, "VkOptionsTemplateNotFound", message
                )
            return Result()
        self._missing_templates.pop(key, None)
        kubelet = forge_virtual_kubelet_spec(
            virtual_node,
            self.home_cluster_id,
            (options_template or {}).get("spec") or {},
        )
        secret = flag_value(kubelet.args, "--foreign-kubeconfig-secret-name")
        for obj in forge_virtual_kubelet_rbac(name, namespace, secret):
            await self.applied.apply(object_path(obj), obj)
        await self._bind_offloaded_namespaces(virtual_node)
        account = self.identity["v1", "serviceaccounts"].store.get(
            f"{namespace}/{virtual_kubelet_service_account(name)}"
        )
        if account is None:
            # Just made: launched once its UID is known (its event brings it here again).
            return Result(requeue_after=2.0)
        kubelet = dataclasses.replace(kubelet, service_account_uid=account["metadata"]["uid"])
        running = await self.launcher.ensure(kubelet)
        creates_node = (virtual_node.get("spec") or {}).get("createNode") is not False
        node = self.nodes.store.get(name)
        await self._set_conditions(
            virtual_node,
            {
                "VirtualKubelet": (
                    (RUNNING, "the virtual kubelet runs")
                    if running
                    else (CREATING, "starting the virtual kubelet")
                ),
                "Node": (
                    (NONE, "createNode is false")
                    if not creates_node
                    else (RUNNING, f"node {name} is Ready")
                    if node_ready(node)
                    else (CREATING, f"waiting for node {name} to be Ready")
                ),
            },
        )
        return Result(requeue_after=self.launcher.liveness_poll if running else 2.0)

    async def _bind_offloaded_namespaces(self, virtual_node: JSON) -> None:
        """Lets the virtual kubelet read what offloaded pods use in exactly the namespaces this
        cluster offloads to its provider, and nowhere else."""
        metadata = virtual_node["metadata"]
        cluster_id = (virtual_node.get("spec") or {}).get("clusterID")
        maps = [
            m
            for m in self.namespace_maps.store.objects()
            if m["metadata"].get("namespace") == metadata["namespace"]
            and (m["metadata"].get("labels") or {}).get(REMOTE_CLUSTER_ID_LABEL) == cluster_id
        ]
        wanted = offloaded_namespaces(maps)
        for local in sorted(wanted):
            binding = forge_offloaded_namespace_binding(
                metadata["name"], metadata["namespace"], local
            )
            try:
                await self.applied.apply(object_path(binding), binding)
            except NotFound:
                pass  # the namespace is gone: nothing left there to read
            except ApiError as error:
                if not is_namespace_terminating(error):
                    raise
        await self._unbind_offloaded_namespaces(metadata["name"], keep=wanted)

    async def _unbind_offloaded_namespaces(self, node_name: str, keep: set[str]) -> None:
        for binding in self.role_bindings.store.objects():
            binding_metadata = binding["metadata"]
            if (binding_metadata.get("labels") or {}).get(OFFLOADED_ACCESS_LABEL) != node_name:
                continue
            if binding_metadata["namespace"] in keep:
                continue
            path = listed_object_path(RBAC_API, "rolebindings", binding)
            self.applied.forget(path)
            with contextlib.suppress(NotFound):
                await self.client.delete(path)
            log.info(
                "offloaded namespace unbound",
                node=node_name,
                namespace=binding_metadata["namespace"],
            )

    async def _foreign_node(self, virtual_node: JSON) -> str | None:
        """Why this VirtualNode may not have its Node: one of that name exists that is not
        this virtual node's (a real node, or another provider's)."""
        name = virtual_node["metadata"]["name"]
        cluster_id = (virtual_node.get("spec") or {}).get("clusterID")

        def is_ours(node: JSON) -> bool:
            labels = node["metadata"].get("labels") or {}
            return (
                labels.get(TYPE_LABEL) == TYPE_VIRTUAL_NODE
                and labels.get(REMOTE_CLUSTER_ID_LABEL) == cluster_id
            )

        cached = self.nodes.store.get(name)  # virtual nodes only: a real one is never there
        if cached is not None and is_ours(cached):
            return None
        try:
            node = await self.client.get(resource_path("v1", "nodes", name=name))
        except NotFound:
            return None
        if is_ours(node):
            return None
        return (
            f"a Node named {name} already exists and is not this virtual node: rename the "
            "VirtualNode (the Node takes its name)"
        )

    async def _delete(self, virtual_node: JSON) -> Result:
        metadata = virtual_node["metadata"]
        namespace, name = metadata["namespace"], metadata["name"]
        node = self.nodes.store.get(name)
        if node is not None:
            await self._set_conditions(
                virtual_node,
                {
                    "VirtualKubelet": (RUNNING, "draining the node before stopping"),
                    "Node": (DRAINING, f"evicting the pods of node {name}"),
                },
            )
            if not node.get("spec", {}).get("unschedulable"):
                await self.client.merge_patch(
                    resource_path("v1", "nodes", name=name), {"spec": {"unschedulable": True}}
                )
            if await self._evict_pods(name) and not await self._leaving_with_namespace(namespace):
                return Result(requeue_after=DRAIN_POLL)
        virtual_node = await self._set_conditions(
            virtual_node,
            {
                "VirtualKubelet": (DELETING, "stopping the virtual kubelet"),
                "Node": (DELETING, f"deleting node {name}"),
            },
        )
        # The Node goes only once no kubelet is left to register it again.
        if not await self.launcher.remove(namespace, name):
            return Result(requeue_after=DRAIN_POLL)
        with contextlib.suppress(NotFound):
            await self.client.delete(resource_path("v1", "nodes", name=name))
        await self._unbind_offloaded_namespaces(name, keep=set())
        for obj in forge_virtual_kubelet_rbac(name, namespace, ""):
            self.applied.forget(object_path(obj))
            with contextlib.suppress(NotFound):
                await self.client.delete(object_path(obj))
        await self.client.set_finalizer(
            self._path(namespace, name), virtual_node, FINALIZER, present=False
        )
        log.info("virtual node removed", virtual_node=f"{namespace}/{name}")
        return Result()

    async def _leaving_with_namespace(self, namespace: str) -> bool:
        """Whether the tenant namespace is being deleted: the virtual kubelet's ServiceAccount
        and provider kubeconfig go with it, and it can finish no pod's deletion. Its pods,
        evicted, are left to go with the Node, as Kubernetes removes a deleted Node's pods
        (the pod garbage collector); the provider removes their copies with the namespace's
        slices and maps. Waiting for them held the namespace Terminating for ever."""
        try:
            found = await self.client.get(resource_path("v1", "namespaces", name=namespace))
        except NotFound:
            return True
        return bool(found["metadata"].get("deletionTimestamp"))

    async def _evict_pods(self, node_name: str) -> bool:
        """Asks the Eviction API to move every pod of the node (PodDisruptionBudgets have
        their say); True while some are still there."""
        pods = (
            await self.client.get(
                resource_path("v1", "pods"), params={"fieldSelector": f"spec.nodeName={node_name}"}
            )
        )["items"]
        remaining = [p for p in pods if is_drainable(p)]
        for pod in remaining:
            if not pod["metadata"].get("deletionTimestamp"):
                await evict(self.client, pod, f"draining node {node_name}")
        return bool(remaining)
