"""`vk`: the entry point of vk's components (virtual kubelet, controller manager, webhooks),
one image and one command for all of them, as the Deployments run them."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click
from click.core import ParameterSource

from vk.api.constants import (
    DEFAULT_MAX_RESOURCE_SLICES,
    DEFAULT_SHADOW_ENDPOINTSLICE_WORKERS,
    DEFAULT_SHADOW_POD_WORKERS,
    DEFAULT_TENANT_POD_SECURITY,
    POD_SECURITY_LEVELS,
    TENANT_MAX_RESOURCE_SLICES_LABEL,
    TENANT_MAX_TWIN_NAMESPACES_LABEL,
)
from vk.api.labels import InvalidKeyValues, parse_key_values
from vk.api.offloading import LimitsEnforcement
from vk.cli.options import go_bool_option, go_duration
from vk.controllers.provider_namespacemaps import (
    DEFAULT_MAX_TWIN_NAMESPACES,
    DEFAULT_TWIN_NAMESPACE_QUOTA,
)
from vk.kube.client import DEFAULT_REQUEST_TIMEOUT
from vk.kube.kubeconfig import InvalidKubeconfig
from vk.reflection.forge.meta import ReflectionPolicy
from vk.reflection.resources import DEFAULT_WORKERS, POLICY_RESOURCES, ReflectionSettings
from vk.virtualkubelet.process import VirtualKubeletOptions, run_virtual_kubelet

if TYPE_CHECKING:
    from vk.controllers.virtualnodes import Launcher
    from vk.kube.client import KubeClient

F = TypeVar("F", bound=Callable[..., Any])


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="vk", prog_name="vk")
def vk() -> None:
    """vk's components. Each subcommand runs one of them as a long-lived process."""


# The controller manager answers this many of a consumer's ResourceSlices at once; the webhook
# lets its control plane keep twice as many: both read the one figure.
max_resource_slices_option = click.option(
    "--max-resource-slices-per-consumer",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_RESOURCE_SLICES,
    show_default=True,
    help="The ResourceSlices of one consumer this cluster answers at once (each an identity "
    f"signed here and a Quota); label {TENANT_MAX_RESOURCE_SLICES_LABEL} on its tenant namespace "
    "sets another number for it. The webhook refuses a new one past twice that number.",
)


def _key_values(_: click.Context, __: click.Parameter, value: str) -> dict[str, str]:
    try:
        return parse_key_values(value)
    except InvalidKeyValues as error:
        raise click.BadParameter(str(error)) from error


def reflection_options(command: F) -> F:
    """Liqo's reflection flags: `--<resource>-reflection-workers` (0 disables it),
    `--<resource>-reflection-type`, and where reflected objects go in the provider."""
    for resource in reversed(POLICY_RESOURCES):
        command = click.option(
            f"--{resource}-reflection-type",
            type=click.Choice([p.value for p in ReflectionPolicy]),
            default=ReflectionPolicy.DENY_LIST.value,
            show_default=True,
            help=f"DenyList: every {resource} but those annotated liqo.io/skip-reflection; "
            "AllowList: only those annotated liqo.io/allow-reflection.",
        )(command)
    for resource, workers in reversed(DEFAULT_WORKERS.items()):
        command = click.option(
            f"--{resource}-reflection-workers",
            type=click.IntRange(min=0),
            default=workers,
            show_default=True,
            help=f"Concurrent {resource} reflections; 0 disables the reflector.",
        )(command)
    for option in (
        go_bool_option(
            "--enable-ingress",
            "Give reflected Ingresses --remote-real-ingress-class-name (Liqo's default: false).",
        ),
        go_bool_option(
            "--enable-load-balancer",
            "Give reflected LoadBalancer Services --remote-real-load-balancer-class-name "
            "(Liqo's default: false).",
        ),
        click.option(
            "--remote-real-ingress-class-name",
            default="",
            help="Ingress class of reflected Ingresses in the provider (default: its default).",
        ),
        click.option(
            "--remote-real-load-balancer-class-name",
            default="",
            help="loadBalancerClass of reflected LoadBalancer Services in the provider.",
        ),
        go_bool_option("--enable-storage", "Provision claims of the virtual storage class."),
        click.option("--virtual-storage-class-name", default="liqo", show_default=True),
        click.option(
            "--remote-real-storage-class-name",
            default="",
            help="Storage class of reflected claims in the provider (default: its default).",
        ),
        go_bool_option(
            "--enable-apiserver-support",
            "Offloaded pods get ServiceAccount tokens of this cluster (TokenRequest API).",
        ),
        click.option(
            "--home-api-server-host",
            default="",
            help="This cluster's API server as offloaded pods reach it "
            "(KUBERNETES_SERVICE_HOST in their containers).",
        ),
        click.option("--home-api-server-port", type=click.IntRange(1, 65535), default=443),
    ):
        command = option(command)
    return command


# Liqo's virtual-kubelet flags that mean nothing in vk, which does no networking (pod CIDRs,
# remapping, the network check) and no profiling, and watches rather than resyncs: accepted so
# that a VkOptionsTemplate, a VirtualNode or Helm values written for Liqo run unchanged, and
# named in one warning line at start. Values: (multiple, bare value).
LIQO_FLAGS_WITHOUT_MEANING: dict[str, tuple[bool, str | None]] = {
    "--liqo-namespace": (False, None),
    "--resync-period": (False, None),
    "--local-podcidr": (True, None),
    "--remote-pod-cidr": (False, None),
    "--remote-pod-cidr-remap": (False, None),
    "--remote-external-cidr": (False, None),
    "--remote-external-cidr-remap": (False, None),
    "--node-check-network": (False, "true"),
    "--enable-profiling": (False, "true"),
    "--metrics-enabled": (False, "true"),
    "--resourceslice-reflection-workers": (False, None),
    "--resourceclaim-reflection-workers": (False, None),
}
# Liqo's klog flags (`--klog.v=4` and the like): vk logs JSON at --log-level.
KLOG_PREFIX = "--klog."
IGNORED_FLAGS_KEY = "vk.ignored_liqo_flags"


def _note_if_given(ctx: click.Context, param: click.Parameter, _: Any) -> None:
    source = ctx.get_parameter_source(param.name or "")
    if source in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
        ctx.meta.setdefault(IGNORED_FLAGS_KEY, []).append(param.opts[0])


def liqo_flags_without_meaning(command: F) -> F:
    """`LIQO_FLAGS_WITHOUT_MEANING`, each accepted, bare or with a value, and noted in
    `ctx.meta` when given."""
    for name, (multiple, bare) in reversed(LIQO_FLAGS_WITHOUT_MEANING.items()):
        command = click.option(
            name,
            multiple=multiple,
            is_flag=False,
            flag_value=bare,
            expose_value=False,
            callback=_note_if_given,
            hidden=True,
        )(command)
    return command


def klog_flags(ctx: click.Context) -> list[str]:
    """The klog flags among the arguments click did not know (`--klog.v=4`, or `--klog.v 4`);
    any other unknown argument is an error, as it would be without them."""
    given = []
    arguments = list(ctx.args)
    while arguments:
        argument = arguments.pop(0)
        if not argument.startswith(KLOG_PREFIX):
            raise click.NoSuchOption(argument.split("=", 1)[0], ctx=ctx)
        given.append(argument.split("=", 1)[0])
        if "=" not in argument and arguments and not arguments[0].startswith("-"):
            arguments.pop(0)  # its value
    return given


def reflection_settings(flags: dict[str, Any], *, reflect_ips: bool = True) -> ReflectionSettings:
    return ReflectionSettings(
        workers={r: int(flags[f"{r}_reflection_workers"]) for r in DEFAULT_WORKERS},
        policies={r: ReflectionPolicy(flags[f"{r}_reflection_type"]) for r in POLICY_RESOURCES},
        remote_ingress_class=flags["remote_real_ingress_class_name"]
        if flags["enable_ingress"]
        else "",
        remote_load_balancer_class=flags["remote_real_load_balancer_class_name"]
        if flags["enable_load_balancer"]
        else "",
        enable_storage=flags["enable_storage"],
        virtual_storage_class=flags["virtual_storage_class_name"],
        remote_storage_class=flags["remote_real_storage_class_name"],
        enable_apiserver_support=flags["enable_apiserver_support"],
        reflect_ips=reflect_ips,
    )


@vk.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
@click.pass_context
@click.option("--nodename", required=True, help="Name of the Node (= the VirtualNode's name).")
@click.option("--tenant-namespace", required=True, help="Tenant namespace of the provider.")
@click.option("--home-cluster-id", default="", help="This (the consumer) cluster's ID.")
@click.option("--foreign-cluster-id", required=True, help="The provider cluster's ID.")
@click.option(
    "--foreign-kubeconfig-secret-name",
    required=True,
    help="Secret (key `kubeconfig`) in the tenant namespace: the provider identity.",
)
@click.option(
    "--node-ip",
    envvar="POD_IP",
    default="127.0.0.1",
    show_default=True,
    help="The Node's InternalIP, where the kubelet API listens ($POD_IP).",
)
@click.option("--listen-port", default=10250, show_default=True, help="Kubelet API port.")
@click.option(
    "--metrics-address",
    default=":5872",
    show_default=True,
    help="Address of /metrics, /healthz and /readyz.",
)
@click.option("--node-lease-duration", default="40s", callback=go_duration, show_default=True)
@click.option("--node-ping-interval", default="10s", callback=go_duration, show_default=True)
@click.option("--node-ping-timeout", default="1s", callback=go_duration, show_default=True)
@click.option("--node-extra-labels", default="", callback=_key_values, help="k1=v1,k2=v2")
@click.option("--node-extra-annotations", default="", callback=_key_values, help="k1=v1,k2=v2")
@go_bool_option("--create-node", "Register the Node (`--create-node`, `--create-node=false`).")
@click.option(
    "--certificate-type",
    type=click.Choice(["kubelet", "self-signed", "aws"]),
    default="kubelet",
    show_default=True,
    help="Serving certificate: from a kubernetes.io/kubelet-serving CSR (self-signed until it is "
    "issued), or self-signed only. Liqo's `aws` (an EKS CSR signer) is taken as `kubelet`.",
)
@go_bool_option(
    "--disable-ip-reflection",
    "Report offloaded pods without their provider IPs, so that this cluster's Services never "
    "route to addresses it cannot reach (Liqo's flag).",
    default=False,
)
@go_bool_option(
    "--vk-lease-enabled",
    "Reflect the objects offloaded namespaces share from one virtual kubelet per provider, "
    "the holder of a Lease; false: every virtual kubelet of that provider reflects them.",
)
@click.option(
    "--vk-lease-duration",
    default="15s",
    callback=go_duration,
    show_default=True,
    help="Lease duration of both elections (this node's replicas; the reflecting one).",
)
@click.option("--vk-lease-renew-interval", default="10s", callback=go_duration, show_default=True)
@click.option("--vk-lease-retry-period", default="5s", callback=go_duration, show_default=True)
@click.option(
    "--labels-not-reflected",
    default="",
    metavar="KEY,...",
    help="Labels kept home, besides those of the VirtualNode's offloadingPatch (what a "
    "VkOptionsTemplate's labelsNotReflected becomes).",
)
@click.option(
    "--annotations-not-reflected",
    default="",
    metavar="KEY,...",
    help="Annotations kept home, besides those of the VirtualNode's offloadingPatch.",
)
@liqo_flags_without_meaning
@click.option(
    "--extend-websockets-to-kubelet/--no-extend-websockets-to-kubelet",
    default=True,
    show_default=True,
    help="Declare ExtendWebSocketsToKubelet in the Node's status.declaredFeatures.",
)
@click.option(
    "--client-qps",
    type=click.FloatRange(min=0),
    default=0,
    show_default=True,
    help="Requests a second each API client (this cluster's, the provider's) makes at most, "
    "as Liqo's flag; 0: no limit.",
)
@click.option(
    "--client-max-burst",
    type=click.IntRange(min=1),
    default=100,
    show_default=True,
    help="Requests each API client makes at once past --client-qps.",
)
@click.option(
    "--client-timeout",
    default="0",
    callback=go_duration,
    help="The most one request of an API client takes, its retries included (Liqo's flag); "
    f"0: vk's {DEFAULT_REQUEST_TIMEOUT:g}s (never without one, where Liqo's 0 means none).",
)
@click.option(
    "--pod-reflection-workers",
    default=10,
    show_default=True,
    help="Pods offloaded concurrently; 0 disables pod offloading.",
)
@reflection_options
@click.option(
    "--home-kubeconfig",
    envvar="KUBECONFIG",
    default=None,
    help="Kubeconfig of this cluster ($KUBECONFIG); in-cluster config otherwise.",
)
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning"]))
def kubelet(
    ctx: click.Context,
    /,
    nodename: str,
    tenant_namespace: str,
    home_cluster_id: str,
    foreign_cluster_id: str,
    foreign_kubeconfig_secret_name: str,
    node_ip: str,
    listen_port: int,
    metrics_address: str,
    node_lease_duration: float,
    node_ping_interval: float,
    node_ping_timeout: float,
    node_extra_labels: dict[str, str],
    node_extra_annotations: dict[str, str],
    create_node: bool,
    certificate_type: str,
    disable_ip_reflection: bool,
    vk_lease_enabled: bool,
    vk_lease_duration: float,
    vk_lease_renew_interval: float,
    vk_lease_retry_period: float,
    labels_not_reflected: str,
    annotations_not_reflected: str,
    extend_websockets_to_kubelet: bool,
    client_qps: float,
    client_max_burst: int,
    client_timeout: float,
    pod_reflection_workers: int,
    home_kubeconfig: str | None,
    log_level: str,
    **reflection: Any,
) -> None:
    """The virtual kubelet of one VirtualNode (POD_NAME, POD_NAMESPACE and VIRTUALNODE_NAME
    are read from the environment, as the Deployment sets them). Every flag of Liqo's virtual
    kubelet is taken; those that mean nothing here are named in a warning at start."""
    ignored = [*ctx.meta.get(IGNORED_FLAGS_KEY, []), *klog_flags(ctx)]
    if vk_lease_renew_interval >= vk_lease_duration:
        raise click.BadParameter(
            f"{vk_lease_renew_interval:g}s is not less than --vk-lease-duration "
            f"({vk_lease_duration:g}s): a leader would lose its Lease before renewing it",
            param_hint="--vk-lease-renew-interval",
        )
    if certificate_type == "aws":
        ignored.append("--certificate-type=aws")
        certificate_type = "kubelet"
    options = VirtualKubeletOptions(
        node_name=nodename,
        tenant_namespace=tenant_namespace,
        home_cluster_id=home_cluster_id,
        foreign_cluster_id=foreign_cluster_id,
        foreign_kubeconfig_secret_name=foreign_kubeconfig_secret_name,
        node_ip=node_ip,
        listen_port=listen_port,
        metrics_address=metrics_address,
        node_lease_duration=int(node_lease_duration),
        node_ping_interval=node_ping_interval,
        node_ping_timeout=node_ping_timeout,
        node_extra_labels=node_extra_labels,
        node_extra_annotations=node_extra_annotations,
        create_node=create_node,
        pod_reflection_workers=pod_reflection_workers,
        client_qps=client_qps,
        client_max_burst=client_max_burst,
        client_timeout=client_timeout or DEFAULT_REQUEST_TIMEOUT,
        reflection=reflection_settings(reflection, reflect_ips=not disable_ip_reflection),
        home_api_server_host=reflection["home_api_server_host"],
        home_api_server_port=reflection["home_api_server_port"],
        extend_websockets_to_kubelet=extend_websockets_to_kubelet,
        certificate_type=certificate_type,
        reflect_pod_ips=not disable_ip_reflection,
        shared_reflection_lease=vk_lease_enabled,
        ha_lease_duration=max(1, int(vk_lease_duration)),
        ha_renew_deadline=vk_lease_renew_interval,
        ha_retry_period=vk_lease_retry_period,
        ignored_flags=tuple(sorted(set(ignored))),
        labels_not_reflected=_names_list(labels_not_reflected),
        annotations_not_reflected=_names_list(annotations_not_reflected),
        home_kubeconfig=home_kubeconfig or None,
        pod_name=os.environ.get("POD_NAME", ""),
        pod_namespace=os.environ.get("POD_NAMESPACE", ""),
        virtual_node_name=os.environ.get("VIRTUALNODE_NAME", ""),
        log_level=log_level,
    )
    try:
        sys.exit(run_virtual_kubelet(options))
    except InvalidKubeconfig as error:
        raise click.ClickException(f"cannot reach this cluster: {error}") from error


@vk.command("controller-manager")
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default=None,
    help="Kubeconfig of this cluster ($KUBECONFIG); in-cluster config otherwise.",
)
@click.option(
    "--metrics-address",
    default=":8082",
    show_default=True,
    help="Address of /metrics, /healthz and /readyz.",
)
@click.option(
    "--namespace",
    default="vk",
    show_default=True,
    help="vk's namespace (its leader-election Lease and the cluster identity live there).",
)
@click.option(
    "--api-server-url",
    default=None,
    help="The URL consumers reach this cluster's API server at, given to them with their "
    "identities (default: the server of this kubeconfig).",
)
@click.option(
    "--default-node-resources",
    default="cpu=4,memory=8Gi,pods=110,ephemeral-storage=20Gi",
    show_default=True,
    help="What a ResourceSlice of the default class is granted, unless it asks otherwise.",
)
@click.option(
    "--default-limits-enforcement",
    type=click.Choice([e.value for e in LimitsEnforcement]),
    default=LimitsEnforcement.NONE.value,
    show_default=True,
    help="The limitsEnforcement of the Quotas this provider creates.",
)
@click.option(
    "--tenant-pod-security",
    type=click.Choice(list(POD_SECURITY_LEVELS)),
    default=DEFAULT_TENANT_POD_SECURITY,
    show_default=True,
    help="The Pod Security Standard level enforced on the pods consumers offload here (the "
    "pod-security.kubernetes.io/enforce label of their twin namespaces).",
)
@click.option(
    "--tenant-namespace-quota",
    default=",".join(f"{k}={v}" for k, v in DEFAULT_TWIN_NAMESPACE_QUOTA.items()),
    show_default=True,
    metavar="K=V,...",
    help="The core ResourceQuota of every namespace made for a consumer (`none` for none): "
    "object counts, storage, and NodePort/LoadBalancer Services (0: not allowed). `secrets` "
    "grows by the pods the consumer's Quotas grant (one token Secret per offloaded pod).",
)
@click.option(
    "--max-twin-namespaces-per-consumer",
    type=click.IntRange(min=0),
    default=DEFAULT_MAX_TWIN_NAMESPACES,
    show_default=True,
    help="The namespaces one consumer may offload here, all its NamespaceMaps together (label "
    f"{TENANT_MAX_TWIN_NAMESPACES_LABEL} on its tenant namespace sets another number for it).",
)
@max_resource_slices_option
@click.option(
    "--deleted-slice-drain-grace",
    default="10m",
    callback=go_duration,
    show_default=True,
    help="How long the ShadowPods of a consumer's deleted ResourceSlice may outlive its Quota "
    "(its virtual kubelet drains its node meanwhile) before this cluster deletes them: they "
    "would run on counted in no Quota.",
)
@click.option(
    "--new-resource-slice-interval",
    default="1m",
    callback=go_duration,
    show_default=True,
    help="After its count's worth of new ResourceSlices answered at once, a consumer gets one "
    "more per this interval (0: no pace): each is bound in every namespace it offloads to "
    "here, and unbound when it goes, so deleting and making slices again and again would cost "
    "this cluster hundreds of writes each.",
)
@click.option(
    "--new-twin-namespace-interval",
    default="10s",
    callback=go_duration,
    show_default=True,
    help="After its count's worth of new twin namespaces made at once, a consumer gets one more "
    "per this interval (0: no pace): each is a namespace, its quota and bindings here, and once "
    "unmapped the namespace controller's walk of every resource kind in it, so mapping and "
    "unmapping a namespace again and again would cost this cluster that each time.",
)
@click.option(
    "--load-balancer-classes",
    default="",
    metavar="CLASS,...",
    help="The loadBalancerClasses this cluster offers its consumers (the first is the "
    "default), shown on their ResourceSlices and VirtualNodes.",
)
@click.option(
    "--reserved-namespaces",
    default="",
    metavar="NAME,...",
    help="Namespace names no consumer may get as a twin namespace (a trailing * matches any "
    "ending), besides default, kube-*, vk's namespace and liqo-tenant-*.",
)
@click.option(
    "--virtual-kubelet-launcher",
    type=click.Choice(["none", "deployment", "local"]),
    default="none",
    show_default=True,
    help="How the VirtualNode controller runs virtual kubelets: a `deployment` per "
    "VirtualNode (real clusters; see --virtual-kubelet-image), `local` processes on this "
    "machine (the playground's way; its state in --local-launcher-dir), or `none` (no "
    "VirtualNode controller here).",
)
@click.option(
    "--virtual-kubelet-image",
    default=None,
    help="The vk image the virtual kubelets' Deployments run (deployment launcher).",
)
@click.option(
    "--virtual-kubelet-node-selector",
    default="",
    metavar="K=V,...",
    help="The node selector of the virtual kubelets' pods (deployment launcher), unless a "
    "VirtualNode's template sets one.",
)
@click.option(
    "--virtual-kubelet-tolerations",
    default=None,
    metavar="JSON",
    help="The tolerations of the virtual kubelets' pods, a JSON list as in a pod spec "
    "(deployment launcher), unless a VirtualNode's template sets them.",
)
@click.option(
    "--local-launcher-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Where local virtual kubelets keep their kubeconfig, ports, pid and log.",
)
@click.option(
    "--shadow-pod-ctrl-workers",
    type=click.IntRange(min=1),
    default=DEFAULT_SHADOW_POD_WORKERS,
    show_default=True,
    help="As a provider, the ShadowPods made into Pods at once (Liqo's flag). Each waits on "
    "the API server twice (its Pod made, its status written), so a burst of offloaded pods "
    "goes as fast as this many round trips at a time.",
)
@click.option(
    "--shadow-endpointslice-ctrl-workers",
    type=click.IntRange(min=1),
    default=DEFAULT_SHADOW_ENDPOINTSLICE_WORKERS,
    show_default=True,
    help="As a provider, the ShadowEndpointSlices made into EndpointSlices at once (Liqo's flag).",
)
@go_bool_option(
    "--enable-node-failure-controller",
    "As a provider, delete at once (grace 0) the Pods made of ShadowPods that are being deleted "
    "on a Node that is not Ready, so that they are made again on one that is (Liqo's flag; "
    "their containers may still run on a Node only cut off).",
    default=False,
)
def controller_manager(
    kubeconfig: str | None,
    metrics_address: str,
    namespace: str,
    api_server_url: str | None,
    default_node_resources: str,
    default_limits_enforcement: str,
    tenant_pod_security: str,
    reserved_namespaces: str,
    tenant_namespace_quota: str,
    max_twin_namespaces_per_consumer: int,
    max_resource_slices_per_consumer: int,
    deleted_slice_drain_grace: float,
    new_resource_slice_interval: float,
    new_twin_namespace_interval: float,
    virtual_kubelet_launcher: str,
    virtual_kubelet_image: str | None,
    virtual_kubelet_node_selector: str,
    virtual_kubelet_tolerations: str | None,
    local_launcher_dir: Path | None,
    load_balancer_classes: str,
    shadow_pod_ctrl_workers: int,
    shadow_endpointslice_ctrl_workers: int,
    enable_node_failure_controller: bool,
) -> None:
    """vk's controllers of this cluster, in the consumer and the provider role."""
    # Imported here, not above: each component's process loads its own code only (a virtual
    # kubelet per peering would otherwise carry the controller manager's and the webhook's).
    from vk.controllers.manager import ManagerOptions
    from vk.controllers.manager import main as run_controller_manager
    from vk.controllers.virtualkubelet_deployment import DeploymentLauncher, parse_pod_placement
    from vk.controllers.virtualkubelet_local import LocalProcessLauncher

    try:
        resources = parse_key_values(default_node_resources)
    except InvalidKeyValues as error:
        raise click.BadParameter(str(error), param_hint="--default-node-resources") from error
    try:
        namespace_quota = (
            {} if tenant_namespace_quota == "none" else parse_key_values(tenant_namespace_quota)
        )
    except InvalidKeyValues as error:
        raise click.BadParameter(str(error), param_hint="--tenant-namespace-quota") from error
    launcher: Callable[[KubeClient], Launcher] | None = None
    if virtual_kubelet_launcher == "local":
        if local_launcher_dir is None:
            raise click.BadParameter(
                "the local launcher needs a directory", param_hint="--local-launcher-dir"
            )
        directory = local_launcher_dir
        launcher = lambda client: LocalProcessLauncher(client, directory)  # noqa: E731
    elif virtual_kubelet_launcher == "deployment":
        if not virtual_kubelet_image:
            raise click.BadParameter(
                "the deployment launcher needs the image of vk (e.g. ghcr.io/you/vk:0.1.0)",
                param_hint="--virtual-kubelet-image",
            )
        image = virtual_kubelet_image
        try:
            node_selector = parse_key_values(virtual_kubelet_node_selector)
        except InvalidKeyValues as error:
            raise click.BadParameter(
                str(error), param_hint="--virtual-kubelet-node-selector"
            ) from error
        try:
            placement = parse_pod_placement(node_selector, virtual_kubelet_tolerations)
        except ValueError as error:
            raise click.BadParameter(
                str(error), param_hint="--virtual-kubelet-tolerations"
            ) from error
        launcher = lambda client: DeploymentLauncher(client, image, placement)  # noqa: E731

    options = ManagerOptions(
        kubeconfig=kubeconfig or None,
        metrics_address=metrics_address,
        namespace=namespace,
        api_server_url=api_server_url,
        default_node_resources=resources,
        default_limits_enforcement=LimitsEnforcement(default_limits_enforcement),
        tenant_pod_security=tenant_pod_security,
        reserved_namespaces=tuple(sorted(_names(reserved_namespaces))),
        tenant_namespace_quota=namespace_quota,
        max_twin_namespaces=max_twin_namespaces_per_consumer,
        max_resource_slices=max_resource_slices_per_consumer,
        deleted_slice_drain_grace=deleted_slice_drain_grace,
        new_resource_slice_interval=new_resource_slice_interval,
        new_twin_namespace_interval=new_twin_namespace_interval,
        launcher=launcher,
        node_failure_controller=enable_node_failure_controller,
        shadow_pod_workers=shadow_pod_ctrl_workers,
        shadow_endpointslice_workers=shadow_endpointslice_ctrl_workers,
        load_balancer_classes=tuple(
            c.strip() for c in load_balancer_classes.split(",") if c.strip()
        ),
    )
    try:
        sys.exit(run_controller_manager(options))
    except InvalidKubeconfig as error:
        raise click.ClickException(f"cannot reach this cluster: {error}") from error


@vk.command("webhook")
@click.option(
    "--kubeconfig",
    envvar="KUBECONFIG",
    default=None,
    help="Kubeconfig of this cluster ($KUBECONFIG); in-cluster config otherwise.",
)
@click.option(
    "--listen-address",
    default=":9443",
    show_default=True,
    help="Address of the HTTPS server: the admission endpoints (/mutate-shadowpod, "
    "/validate-shadowpod, /mutate-pod-offloading, /validate-namespaceoffloading), /healthz, "
    "/readyz and /metrics.",
)
@click.option(
    "--tls-cert-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Serving certificate (PEM, chain allowed); reloaded when the file changes.",
)
@click.option(
    "--tls-private-key-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    help="Key of the serving certificate (PEM).",
)
@click.option(
    "--certificate-secret",
    default="",
    help="Instead of the files: keep a CA and serving certificate in this Secret of "
    "$POD_NAMESPACE (made if missing, renewed before expiry) and write the CA into the "
    "webhook configurations named vk.",
)
@click.option(
    "--service-name",
    default="vk-webhook",
    show_default=True,
    help="The Service in front of the webhook: the names its own certificate covers.",
)
@click.option("--namespace", envvar="POD_NAMESPACE", default="vk", show_default=True)
@click.option(
    "--metrics-address",
    default="",
    help="Also serve /metrics, /healthz and /readyz over plain HTTP here (e.g. :8081).",
)
@go_bool_option(
    "--enable-resource-enforcement",
    "Enforce the Quotas (`--enable-resource-enforcement=false` turns it off: ShadowPods are "
    "still stamped with their creator, and a cordoned Quota still admits nothing).",
)
@click.option(
    "--admission-caller-ca-file",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Answer admission reviews only from callers presenting a client certificate of this "
    "CA whose name is in --admission-caller-names: the API server, where it can authenticate "
    "to webhooks (its AdmissionConfiguration's kubeconfig). Without it, anyone may send reviews.",
)
@click.option(
    "--admission-caller-names",
    default="",
    metavar="NAME,...",
    help="The common names the callers' client certificates may bear.",
)
@click.option(
    "--tenant-priority-classes",
    default="",
    metavar="NAME,...",
    help="Priority classes consumers' pods may name (never system-node-critical or "
    "system-cluster-critical).",
)
@click.option(
    "--tenant-scheduler-names",
    default="",
    metavar="NAME,...",
    help="Schedulers consumers' pods may name, besides default-scheduler.",
)
@click.option(
    "--tenant-runtime-classes",
    default="",
    metavar="NAME,...",
    help="Runtime classes consumers' pods may name.",
)
@click.option(
    "--tenant-tolerations",
    default="",
    metavar="KEY,...",
    help="Taint keys consumers' pods may tolerate, besides the virtual-node taint and the "
    "NoExecute not-ready/unreachable ones every pod gets.",
)
@click.option(
    "--metrics-agent-address",
    default="",
    help="Serve the metrics agent here (e.g. :8443): the provider's kubelets' usage of each "
    "consumer's pods, as the aggregated API metrics.vk.io/v1alpha1 that vk's APIService names, "
    "to the API server's front-proxy client certificate only.",
)
@click.option(
    "--kubelet-certificate-authority",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="The CA of the kubelets' serving certificates the metrics agent reads (default: the "
    "cluster's CA, that of its kubeconfig or ServiceAccount).",
)
@max_resource_slices_option
@click.option("--log-level", default="info", type=click.Choice(["debug", "info", "warning"]))
def webhook(
    kubeconfig: str | None,
    listen_address: str,
    tls_cert_file: Path | None,
    tls_private_key_file: Path | None,
    certificate_secret: str,
    service_name: str,
    namespace: str,
    metrics_address: str,
    enable_resource_enforcement: bool,
    admission_caller_ca_file: Path | None,
    admission_caller_names: str,
    tenant_priority_classes: str,
    tenant_scheduler_names: str,
    tenant_runtime_classes: str,
    tenant_tolerations: str,
    metrics_agent_address: str,
    kubelet_certificate_authority: Path | None,
    max_resource_slices_per_consumer: int,
    log_level: str,
) -> None:
    """vk's admission webhook. Provider: stamps the ShadowPods a consumer's identity creates
    with that identity and admits them only within the provider's rules (namespace, scheduling
    fields, Pod Security level) and the consumer's Quota. Consumer: places the pods of
    offloaded namespaces and validates NamespaceOffloadings. With --metrics-agent-address,
    also the provider's metrics agent."""
    from vk.webhooks.certificates import CertificateError  # each process its own code only
    from vk.webhooks.server import WebhookOptions
    from vk.webhooks.server import main as run_webhook
    from vk.webhooks.shadowpods import TenantPodPolicy

    if not certificate_secret and not (tls_cert_file and tls_private_key_file):
        raise click.UsageError(
            "give --tls-cert-file and --tls-private-key-file, or --certificate-secret NAME "
            "for a certificate the webhook keeps itself"
        )
    callers = _names(admission_caller_names)
    if bool(admission_caller_ca_file) != bool(callers):
        raise click.UsageError(
            "give --admission-caller-ca-file and --admission-caller-names together (the CA of "
            "the API server's webhook client certificate, and the names it bears)"
        )
    options = WebhookOptions(
        kubeconfig=kubeconfig or None,
        listen_address=listen_address,
        tls_cert_file=tls_cert_file,
        tls_private_key_file=tls_private_key_file,
        certificate_secret=certificate_secret or None,
        service_name=service_name,
        namespace=namespace,
        metrics_address=metrics_address or None,
        enforcement_enabled=enable_resource_enforcement,
        caller_ca_file=admission_caller_ca_file,
        caller_names=callers,
        policy=TenantPodPolicy(
            priority_classes=_names(tenant_priority_classes),
            scheduler_names=_names(tenant_scheduler_names),
            runtime_classes=_names(tenant_runtime_classes),
            toleration_keys=_names(tenant_tolerations),
        ),
        metrics_agent_address=metrics_agent_address or None,
        kubelet_ca_file=kubelet_certificate_authority,
        max_resource_slices=max_resource_slices_per_consumer,
        log_level=log_level,
    )
    try:
        sys.exit(run_webhook(options))
    except InvalidKubeconfig as error:
        raise click.ClickException(f"cannot reach this cluster: {error}") from error
    except CertificateError as error:
        raise click.ClickException(str(error)) from error


def _names_list(value: str) -> tuple[str, ...]:
    return tuple(dict.fromkeys(n.strip() for n in value.split(",") if n.strip()))


def _names(value: str) -> frozenset[str]:
    """A comma-separated flag value as a set of names."""
    return frozenset(name.strip() for name in value.split(",") if name.strip())


def main() -> None:
    vk(prog_name="vk")
