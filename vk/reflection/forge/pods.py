"""The pod vk asks a provider to run for a consumer pod, and the consumer pod's status from it.

The virtual kubelet offloads each pod bound to its node as a ShadowPod in the provider (DESIGN
§4.6), which the provider turns into the Pod of the same name, and reports that Pod's status as
the local pod's. The rules are Liqo's
(`pkg/virtualKubelet/forge/pods.go`, `meta.go`) unless a docstring says otherwise, so a pod
offloaded by vk looks in the provider as one offloaded by Liqo. Before any of it, the pod is
admitted to the virtual node as a kubelet admits one to its node, or refused with the status a
kubelet gives (Liqo's virtual kubelet, and the virtual-kubelet library under it, admit every
pod). Objects are the API's own JSON.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from vk.api.constants import (
    DELETION_GRACE_ANNOTATION,
    DESTINATION_LABEL,
    LOCAL_POD_UID_ANNOTATION,
    OFFLOADED_POD_LABEL,
    ORIGIN_LABEL,
    POD_TERMINAL_PHASES,
    REMOTE_UNAVAILABLE_LABEL,
    RUNTIME_CLASS_NAME,
    VIRTUAL_NODE_TAINT_KEY,
)
from vk.api.jsondata import as_mapping, cut_text, is_integer, json_copy
from vk.api.nodeselector import pod_node_affinity_matches
from vk.api.offloading import ShadowPod, ShadowPodConditionType
from vk.reflection.forge.meta import ownership_labels, without_keys
from vk.reflection.forge.tokens import (
    service_account_name,
    token_key,
    token_secret_name,
    token_sources,
)

JSON = dict[str, Any]

# --- Liqo's pod annotations and labels (pkg/consts), read or written only by pod forging ------

# Per-pod choice of how the offloaded pod reaches an API server: "remote" runs it with a
# ServiceAccount of the provider, "disabled" with none.
API_SERVER_SUPPORT_ANNOTATION = "liqo.io/api-server-support"
API_SERVER_SUPPORT_REMOTE = "remote"
API_SERVER_SUPPORT_DISABLED = "disabled"
# With "remote" API-server support, the provider's ServiceAccount to run as (default: the pod's).
REMOTE_SERVICE_ACCOUNT_NAME_ANNOTATION = "liqo.io/remote-service-account-name"
# RuntimeClass to use in the provider, whatever the pod and the virtual node say.
REMOTE_RUNTIME_CLASS_ANNOTATION = "liqo.io/remote-runtime-class-name"
# Anti-affinity among offloaded pods: "propagate" the pod's own, or "soft"/"hard" against pods
# sharing its labels (all of them, or the comma-separated keys of the labels annotation).
ANTI_AFFINITY_PRESET_ANNOTATION = "liqo.io/anti-affinity-preset"
ANTI_AFFINITY_LABELS_ANNOTATION = "liqo.io/anti-affinity-labels"

# The ConfigMap with the cluster's CA that every namespace has and kube-api-access volumes use.
ROOT_CA_CONFIGMAP = "kube-root-ca.crt"

# What a pod spec keeps in the provider (Liqo's list, plus hostUsers): the workload itself.
# Everything else is dropped: local scheduling (nodeName, nodeSelector, affinity, schedulerName,
# priority, priorityClassName, preemptionPolicy, schedulingGates), what the provider's admission
# would refuse or recompute (overhead, runtimeClassName, the deprecated serviceAccount),
# ephemeral containers (not settable at creation), and what Liqo does not reflect either (os,
# pod-level resources, resourceClaims, and any field Kubernetes adds later).
_SPEC_FIELDS_KEPT = (
    "containers",
    "initContainers",
    "volumes",
    "activeDeadlineSeconds",
    "dnsConfig",
    "dnsPolicy",
    "enableServiceLinks",
    "hostAliases",
    "hostname",
    "imagePullSecrets",
    "readinessGates",
    "restartPolicy",
    "securityContext",
    "setHostnameAsFQDN",
    "shareProcessNamespace",
    "subdomain",
    "terminationGracePeriodSeconds",
    "topologySpreadConstraints",
    # Not in Liqo's list: dropping it would run a pod that asked for a user namespace without
    # one, with real root in the provider's nodes. A provider that cannot do it fails the pod.
    "hostUsers",
)

# Labels a controller stamps on its pods to tell revisions apart: useless to keep pods apart.
_REVISION_LABELS = (
    "controller-revision-hash",
    "pod-template-hash",
    "statefulset.kubernetes.io/pod-name",
)

# Conditions the provider's kubelet owns: the local pod shows the provider's, or none.
_KUBELET_CONDITIONS = frozenset(
    {
        "PodReadyToStartContainers",
        "Initialized",
        "ContainersReady",
        "Ready",
        "PodResizePending",
        "PodResizeInProgress",
    }
)


# --- The consumer's cluster CA ------------------------------------------------------------


def remote_root_ca_configmap_name(local_cluster_id: str) -> str:
    """The provider-side name of the consumer's `kube-root-ca.crt` when the ConfigMap
    reflection copies it (Liqo's `RemoteConfigMapName`): suffixed with the first five characters
    of the consumer's cluster ID, so it does not collide with the provider's own."""
    name = f"{ROOT_CA_CONFIGMAP}.{local_cluster_id[:5]}"
    # A name cut after a dash would end in one, which no object name may.
    return name if name[-1].isalnum() else name + "a"


# --- Admission to the virtual node ---------------------------------------------------------

# The kubelet's admission predicates a virtual node applies (`pkg/kubelet/lifecycle/
# predicate.go`, `generalFilter`), in the kubelet's order, by the name a refused pod's reason
# gives, with what each says of a node that fails it. The rest are the provider's to judge: its
# Quota and scheduler the resources and host ports, its kubelets the OS.
NODE_AFFINITY = "NodeAffinity"
NODE_NAME = "NodeName"
TAINT_TOLERATION = "TaintToleration"
_PREDICATE_FAILURES = {
    NODE_AFFINITY: "node(s) didn't match Pod's node affinity/selector",
    NODE_NAME: "node(s) didn't match the requested node name",
    TAINT_TOLERATION: "node(s) had taints that the pod didn't tolerate",
}


def node_admission_refusal(
    local_pod: Mapping[str, Any], node: Mapping[str, Any] | None
) -> tuple[str, str] | None:
    """(reason, message) when a kubelet would refuse `local_pod` on `node`, None when it admits
    it: the first predicate failed, and what the kubelet says of it (its Event's message).

    A pod reaches a node the scheduler did not choose when it is bound by hand (`nodeName` set
    at creation): nothing else checked its node affinity, nodeSelector and tolerations against
    the node's labels and NoExecute taints. No Node (the VirtualNode's `createNode: false`, or
    one deleted) leaves nothing to judge against: the pod is admitted. A pod that started
    already (`status.startTime`: its ShadowPod made a Pod, since gone) is judged on its node
    name alone, as a kubelet with NotEvictPodOnKubeletRestart judges the pods it ran before a
    restart: a node label changed since must not fail a pod that runs."""
    if node is None:
        return None
    spec = local_pod.get("spec") or {}
    metadata = node.get("metadata") or {}
    name = str(metadata.get("name") or "")
    started = bool((local_pod.get("status") or {}).get("startTime"))
    if not started and not pod_node_affinity_matches(spec, metadata.get("labels") or {}, name):
        failed = NODE_AFFINITY
    elif spec.get("nodeName") not in (None, "", name):
        failed = NODE_NAME
    elif not started and _untolerated_no_execute_taint(
        (node.get("spec") or {}).get("taints") or [], spec.get("tolerations") or []
    ):
        failed = TAINT_TOLERATION
    else:
        return None
    return failed, f"Predicate {failed} failed: {_PREDICATE_FAILURES[failed]}"


def forge_rejected_status(
    local_pod: Mapping[str, Any], reason: str, message: str, now: str
) -> JSON:
    """What a kubelet writes of the status of a pod its node refuses (`rejectPod`), here one
    `node_admission_refusal` refuses: Failed, the predicate's name as reason, its message after
    "Pod was rejected: ", and a startTime (`now`, unless it has one). A merge patch's: the rest
    of the status (qosClass, the scheduler's condition) stays as it is."""
    start = (local_pod.get("status") or {}).get("startTime") or now
    return {
        "phase": "Failed",
        "reason": reason,
        "message": f"Pod was rejected: {message}",
        "startTime": start,
    }


def _untolerated_no_execute_taint(taints: list[JSON], tolerations: list[JSON]) -> bool:
    """Whether a NoExecute taint (the only effect a kubelet admits by) is tolerated by none of
    the tolerations (component-helpers' `FindMatchingUntoleratedTaint`)."""
    return any(
        taint.get("effect") == "NoExecute"
        and not any(_tolerates(toleration, taint) for toleration in tolerations)
        for taint in taints
    )


def _tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """core/v1's `Toleration.ToleratesTaint`: no effect or no key matches any; Exists matches
    any value, Equal (or no operator) the same value; any other operator matches nothing."""
    for field in ("effect", "key"):
        if toleration.get(field) and toleration.get(field) != taint.get(field):
            return False
    match toleration.get("operator") or "Equal":
        case "Exists":
            return True
        case "Equal":
            return (toleration.get("value") or "") == (taint.get("value") or "")
        case _:
            return False


# --- Local pod → remote Pod --------------------------------------------------------------


def uses_home_tokens(local_pod: Mapping[str, Any], service_account_tokens: bool) -> bool:
    """Whether the offloaded pod gets ServiceAccount tokens of its home cluster: the token
    reflection runs, and the pod did not choose another way (`liqo.io/api-server-support`
    `remote`: the provider's ServiceAccount; `disabled`: none)."""
    annotations = (local_pod.get("metadata") or {}).get("annotations") or {}
    choice = annotations.get(API_SERVER_SUPPORT_ANNOTATION)
    return service_account_tokens and choice not in (
        API_SERVER_SUPPORT_REMOTE,
        API_SERVER_SUPPORT_DISABLED,
    )


def mounted_token_secret(local_pod: Mapping[str, Any], service_account_tokens: bool) -> str | None:
    """The name of the provider Secret of home ServiceAccount tokens that the remote pod
    mounts (`forge_remote_pod`), or None: the pod projects a token, and gets its home
    cluster's. The provider's kubelet starts none of the pod's containers until that Secret
    is there."""
    if not uses_home_tokens(local_pod, service_account_tokens) or not token_sources(local_pod):
        return None
    return token_secret_name(local_pod["metadata"]["name"])


# The host namespaces a pod may ask for, none of which it gets in the provider.
HOST_NAMESPACE_FIELDS = ("hostNetwork", "hostPID", "hostIPC")


def host_namespaces_not_offloaded(local_pod: Mapping[str, Any]) -> list[str]:
    """The host namespaces `local_pod` asks for that its remote pod runs without."""
    spec = local_pod.get("spec") or {}
    return [field for field in HOST_NAMESPACE_FIELDS if spec.get(field) is True]


def forge_remote_pod(
    local_pod: Mapping[str, Any],
    *,
    remote_namespace: str,
    local_cluster_id: str,
    remote_cluster_id: str,
    node_name: str,
    offloading_patch: Mapping[str, Any] | None = None,
    root_ca_reflected: bool = False,
    service_account_tokens: bool = False,
    home_api_server: tuple[str, int] | None = None,
) -> JSON:
    """The Pod to create in the provider for `local_pod`: same name, in `remote_namespace`,
    local labels and annotations plus the ownership labels, and a spec for the workload alone.

    `offloading_patch` is the VirtualNode's `spec.offloadingPatch` as JSON: labels and
    annotations it names are not reflected; its nodeSelector, tolerations, node affinity and
    runtimeClassName apply in the provider, as in Liqo.

    Service accounts, three ways (Liqo's API-server support modes). In all but the last, the
    pod runs with no serviceAccountName (the provider's `default`, which is not its own) and
    `automountServiceAccountToken: false`, and a `spec.serviceAccountName` fieldRef in env
    becomes the local name, which the pod would otherwise no longer see:
    - Disabled (without `service_account_tokens`): the serviceAccountToken sources of
      projected volumes (kube-api-access and any other) are removed, so no pod waits for a
      token the provider does not have; the environment is left to the provider.
    - Token API (`service_account_tokens`, once the token reflection writes each pod's tokens
      to the provider Secret `<pod>-token`, see `tokens`): each such source becomes, in its
      place, a projection of that Secret's key `token_key(volume, path)` at the same path, so
      the pod holds a token of the consumer for its own ServiceAccount. With
      `home_api_server` (host, port), every container and init container also gets the
      KUBERNETES_SERVICE_HOST/PORT and KUBERNETES_PORT* variables naming it, so in-cluster
      clients reach the consumer's API server rather than the provider's. (Liqo names
      `kubernetes.default` instead and adds a host alias to the remapped API-server IP, which
      vk, without IP remapping, does not have.) A token is useless without the way to its
      API server and the reverse, so the caller passes both; the CA that verifies that server
      is the consumer's only with `root_ca_reflected`.
    - Remote (pod annotation `liqo.io/api-server-support: remote`): the pod runs with a
      provider ServiceAccount (the pod's name, or the one in
      `liqo.io/remote-service-account-name`), its volumes and env untouched: that
      ServiceAccount must exist in the provider.

    The `kube-root-ca.crt` reference of kube-api-access volumes is renamed to the reflected copy
    (`remote_root_ca_configmap_name`) only with `root_ca_reflected`, i.e. once the ConfigMap
    reflection runs: before, the renamed ConfigMap would not exist and the volume would never
    mount. Liqo always renames it.
    """
    metadata = local_pod.get("metadata") or {}
    local_spec = local_pod.get("spec") or {}
    annotations: Mapping[str, str] = metadata.get("annotations") or {}
    patch = offloading_patch or {}

    spec: JSON = {key: json_copy(local_spec[key]) for key in _SPEC_FIELDS_KEPT if key in local_spec}
    spec["tolerations"] = _remote_tolerations(local_spec, patch)
    # Liqo forces these off: host namespaces of a provider's node are not the consumer's to use
    # (`host_namespaces_not_offloaded` says so on the pod).
    for field in HOST_NAMESPACE_FIELDS:
        spec[field] = False

    if annotations.get(API_SERVER_SUPPORT_ANNOTATION) == API_SERVER_SUPPORT_REMOTE:
        spec["serviceAccountName"] = annotations.get(
            REMOTE_SERVICE_ACCOUNT_NAME_ANNOTATION, service_account_name(local_pod)
        )
        spec["automountServiceAccountToken"] = True
    else:
        spec["automountServiceAccountToken"] = False
        root_ca = remote_root_ca_configmap_name(local_cluster_id) if root_ca_reflected else None
        tokens = uses_home_tokens(local_pod, service_account_tokens)
        token_secret = mounted_token_secret(local_pod, service_account_tokens)
        spec["volumes"] = _remote_volumes(spec.get("volumes") or [], root_ca, token_secret)
        api_server_env = (
            _api_server_env(*home_api_server) if tokens and home_api_server is not None else []
        )
        for key in ("containers", "initContainers"):
            for container in spec.get(key) or []:
                _hardcode_service_account_name(container, service_account_name(local_pod))
                if api_server_env:
                    _set_env_first(container, api_server_env)

    if node_selector := patch.get("nodeSelector"):
        spec["nodeSelector"] = dict(node_selector)
    labels = _remote_labels(metadata, local_cluster_id, remote_cluster_id, node_name, patch)
    if affinity := _remote_affinity(local_spec, annotations, labels, patch):
        spec["affinity"] = affinity
    if runtime_class := _remote_runtime_class(local_spec, annotations, patch):
        spec["runtimeClassName"] = runtime_class
    for key in ("tolerations", "volumes"):
        if not spec.get(key):
            spec.pop(key, None)

    remote_metadata: JSON = {
        "name": metadata["name"],
        "namespace": remote_namespace,
        "labels": labels,
    }
    if remote_annotations := _remote_annotations(metadata, patch):
        remote_metadata["annotations"] = remote_annotations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": remote_metadata, "spec": spec}


def desired_remote_pod(
    local_pod: Mapping[str, Any],
    *,
    local_cluster_id: str,
    remote_cluster_id: str,
    node_name: str,
    offloading_patch: Mapping[str, Any] | None = None,
) -> JSON:
    """What the remote pod of a live local pod is to be, in what a live pod may change (its
    labels, annotations, images, activeDeadlineSeconds, tolerations): what `live_pod_patch`
    brings the ShadowPod (seen as a pod, `shadow_pod_as_pod`) in line with when the local pod
    changes, and what `shadow_pod_as_read` keeps of it. Liqo forges the spec only at creation
    and so ignores such changes (reference §8); vk propagates them."""
    patch = offloading_patch or {}
    local_metadata = local_pod.get("metadata") or {}
    local_spec = local_pod.get("spec") or {}
    return {
        "metadata": {
            "labels": _remote_labels(
                local_metadata, local_cluster_id, remote_cluster_id, node_name, patch
            ),
            "annotations": _remote_annotations(local_metadata, patch),
        },
        "spec": {
            **{key: local_spec[key] for key in _LIVE_SPEC_FIELDS if key in local_spec},
            "tolerations": _remote_tolerations(local_spec, patch),
        },
    }


# What Kubernetes lets change on a live pod, and a desired pod may ask for besides tolerations.
_LIVE_SPEC_FIELDS = ("containers", "initContainers", "activeDeadlineSeconds")


def live_pod_patch(desired_pod: Mapping[str, Any], live_pod: Mapping[str, Any]) -> JSON | None:
    """A JSON merge patch bringing `live_pod` in line with `desired_pod` in what a live pod may
    change, or None when nothing differs. The virtual kubelet uses it for its ShadowPods, the
    provider's ShadowPod controller for the Pods it makes of them.

    Metadata: desired labels and annotations that are new or changed are set; keys are never
    removed, because the provider's own controllers add labels and annotations to its pods (a
    CNI's, a mesh's) that cannot be told from reflected ones and must not be stripped. So a
    label removed locally stays remotely; Liqo, too, never removes the keys a pod was created
    with.

    Spec: container and init-container images, activeDeadlineSeconds, and tolerations (added
    ones, or a changed tolerationSeconds; the live pod's others are kept). List fields are sent
    whole, built on the live pod's own lists, since a merge patch replaces lists."""
    desired_metadata = desired_pod.get("metadata") or {}
    live_metadata = live_pod.get("metadata") or {}
    desired_spec = desired_pod.get("spec") or {}
    live_spec = live_pod.get("spec") or {}

    metadata_patch: JSON = {}
    for key in ("labels", "annotations"):
        changed = _changed_keys(desired_metadata.get(key) or {}, live_metadata.get(key) or {})
        if changed:
            metadata_patch[key] = changed

    spec_patch: JSON = {}
    for key in ("containers", "initContainers"):
        images = {c["name"]: c.get("image") for c in desired_spec.get(key) or []}
        live_containers = live_spec.get(key) or []
        if any(
            images.get(c["name"]) and images[c["name"]] != c.get("image") for c in live_containers
        ):
            spec_patch[key] = [
                {**json_copy(c), "image": images.get(c["name"]) or c.get("image")}
                for c in live_containers
            ]
    deadline = desired_spec.get("activeDeadlineSeconds")
    if deadline is not None and deadline != live_spec.get("activeDeadlineSeconds"):
        spec_patch["activeDeadlineSeconds"] = deadline
    tolerations = _tolerations_update(
        live_spec.get("tolerations") or [], list(desired_spec.get("tolerations") or [])
    )
    if tolerations is not None:
        spec_patch["tolerations"] = tolerations

    result: JSON = {}
    if metadata_patch:
        result["metadata"] = metadata_patch
    if spec_patch:
        result["spec"] = spec_patch
    return result or None


# --- Remote pod ↔ ShadowPod -----------------------------------------------------------------


def forge_shadow_pod(remote_pod: Mapping[str, Any]) -> JSON:
    """The ShadowPod asking the provider for `remote_pod` (`forge_remote_pod`): its metadata,
    and the pod spec as `spec.pod`. The provider makes the Pod of the same name from it. It
    takes them as they are, not copied: `remote_pod` was just forged, a copy already."""
    return {
        "apiVersion": ShadowPod.group_version(),
        "kind": ShadowPod.KIND,
        "metadata": dict(remote_pod.get("metadata") or {}),
        "spec": {"pod": dict(remote_pod.get("spec") or {})},
    }


def shadow_pod_as_pod(shadow_pod: Mapping[str, Any]) -> JSON:
    """A ShadowPod seen as the pod it asks for (its metadata, `spec.pod` as the spec, the phase
    the provider recorded), for the functions that compare or count pods."""
    pod: JSON = {
        "metadata": shadow_pod.get("metadata") or {},
        "spec": (shadow_pod.get("spec") or {}).get("pod") or {},
    }
    if phase := (shadow_pod.get("status") or {}).get("phase"):
        pod["status"] = {"phase": phase}
    return pod


# The provider's words shown at home (why it made no Pod: a ShadowPod condition's, an API
# error's) are cut to this length, its reasons to this one: input from the other side.
MAX_PROVIDER_MESSAGE = 2048
MAX_PROVIDER_REASON = 128
# What of a ShadowPod's metadata the virtual kubelet reads besides its labels and annotations:
# which one it is, whether it is going.
_SHADOW_METADATA_READ = ("name", "namespace", "uid", "resourceVersion", "deletionTimestamp")
# The local pod's UID a ShadowPod records is kept up to this length (a UID has 36 characters):
# a longer one is not the pod's, and still read as another pod's.
_MAX_UID = 64
# Tolerations of a ShadowPod beyond those its pod asks for, kept (and left on it when a
# toleration is patched, as a live pod keeps its own): more are the provider's doing, and a
# toleration patch leaves them out.
_EXTRA_TOLERATIONS = 16
_TOLERATION_FIELDS = 5  # key, operator, value, effect, tolerationSeconds
_MAX_TOLERATION_FIELD = 320  # a toleration's key: a 253-character prefix and a 63-character name
_SHADOW_SPEC_COUNTS = ("activeDeadlineSeconds", "terminationGracePeriodSeconds")
_CONTAINER_LISTS = ("containers", "initContainers")
_POD_PHASES = ("Pending", "Running", "Succeeded", "Failed", "Unknown")


def shadow_pod_as_read(shadow_pod: Mapping[str, Any], desired: Mapping[str, Any]) -> JSON:
    """What the virtual kubelet's cache keeps of a ShadowPod: what it reads, no more. `desired`
    is what its local pod asks of it now (`desired_remote_pod`; of no known pod, the ownership
    labels alone).

    A ShadowPod is the consumer's, but the provider writes its status, and may write its
    labels, annotations and `spec.pod` (the CRD checks nothing there) up to the 1.5 MiB of an
    object, ten thousand times. So of its labels, annotations and containers' images only those
    `desired` has a value for are kept, each at most one character longer than that value:
    enough to tell that it differs, and never more than the local pod holds itself. Of its
    status, the phase and its conditions' type, status, reason and message (bounded): all that
    `provider_refusal` and a finished pod's report read. Of its spec, besides the images,
    what `live_pod_patch` and the deletion read: the tolerations (a few beyond those asked for)
    and two numbers. A patch of its containers is built from the whole ShadowPod, read afresh
    (`patches_containers`). Nothing here raises on what the provider wrote: the keep runs in
    the informer, where a raise would stop the cache of the whole twin namespace."""
    metadata = as_mapping(shadow_pod.get("metadata"))
    desired_metadata = desired.get("metadata") or {}
    desired_spec = desired.get("spec") or {}
    kept_metadata: JSON = {key: metadata[key] for key in _SHADOW_METADATA_READ if key in metadata}
    kept_metadata["labels"] = _values_as_compared(
        metadata.get("labels"), desired_metadata.get("labels") or {}
    )
    annotations = as_mapping(metadata.get("annotations"))
    kept_metadata["annotations"] = _values_as_compared(
        annotations, desired_metadata.get("annotations") or {}
    )
    if isinstance(uid := annotations.get(LOCAL_POD_UID_ANNOTATION), str):
        kept_metadata["annotations"][LOCAL_POD_UID_ANNOTATION] = uid[:_MAX_UID]
    if (grace := consumer_grace_period(shadow_pod)) is not None:
        # The grace period its deletion told the provider: a shorter one is told again.
        kept_metadata["annotations"][DELETION_GRACE_ANNOTATION] = str(grace)

    spec = as_mapping(as_mapping(shadow_pod.get("spec")).get("pod"))
    kept_spec: JSON = {key: spec[key] for key in _SHADOW_SPEC_COUNTS if is_integer(spec.get(key))}
    for key in _CONTAINER_LISTS:
        images = {c["name"]: c.get("image") or "" for c in desired_spec.get(key) or []}
        if isinstance(containers := spec.get(key), list):
            kept_spec[key] = [
                {"name": name, "image": _as_compared(container.get("image"), images[name])}
                for container in containers
                if isinstance(container, dict)
                and isinstance(name := container.get("name"), str)
                and name in images
            ]
    if isinstance(tolerations := spec.get("tolerations"), list):
        asked = len(desired_spec.get("tolerations") or [])
        kept_spec["tolerations"] = [t for t in tolerations if _is_toleration(t)][
            : asked + _EXTRA_TOLERATIONS
        ]

    read: JSON = {"metadata": kept_metadata, "spec": {"pod": kept_spec}}
    if "status" in shadow_pod:
        read["status"] = _shadow_pod_status_as_read(as_mapping(shadow_pod["status"]))
    return read


def _shadow_pod_status_as_read(status: Mapping[str, Any]) -> JSON:
    kept: JSON = {}
    if (phase := status.get("phase")) in _POD_PHASES:
        kept["phase"] = phase
    conditions = status.get("conditions")
    if isinstance(conditions, list):
        kept["conditions"] = [
            {
                "type": condition["type"],
                "status": condition.get("status") if condition.get("status") in _BOOLS else "",
                "reason": cut_text(condition.get("reason"), MAX_PROVIDER_REASON),
                "message": cut_text(condition.get("message"), MAX_PROVIDER_MESSAGE),
            }
            for condition in conditions
            if isinstance(condition, dict) and condition.get("type") in _SHADOW_CONDITIONS
        ][: len(_SHADOW_CONDITIONS)]
    return kept


_SHADOW_CONDITIONS = tuple(ShadowPodConditionType)
_BOOLS = ("True", "False", "Unknown")


def _values_as_compared(written: Any, desired: Mapping[str, str]) -> dict[str, str]:
    """Of the labels or annotations a provider wrote, those `desired` has, each as compared."""
    written = as_mapping(written)
    kept = {}
    for key, like in desired.items():
        value = _as_compared(written.get(key), like)
        if value is not None:
            kept[key] = value
    return kept


def _as_compared(value: Any, like: str) -> str | None:
    """A string the provider wrote, compared with `like`: whole when it is no longer than
    `like` and a character, else cut to that (it differs either way); None if no string."""
    if not isinstance(value, str):
        return None
    return value if len(value) <= len(like) + 1 else value[: len(like) + 1]


def _is_toleration(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and len(value) <= _TOLERATION_FIELDS
        and all(
            is_integer(field) or (isinstance(field, str) and len(field) <= _MAX_TOLERATION_FIELD)
            for field in value.values()
        )
    )


def controller_uid(pod: Mapping[str, Any]) -> str | None:
    """The UID of the ShadowPod controlling `pod`, if one does. Raises nothing on what a
    provider writes there (the virtual kubelet's cache reads it)."""
    metadata = pod.get("metadata")
    owners = metadata.get("ownerReferences") if isinstance(metadata, Mapping) else None
    for owner in owners if isinstance(owners, list) else []:
        if (
            isinstance(owner, Mapping)
            and owner.get("controller")
            and owner.get("kind") == ShadowPod.KIND
        ):
            uid = owner.get("uid")
            return uid if isinstance(uid, str) else None
    return None


def is_evicted(pod: Mapping[str, Any]) -> bool:
    """A pod that failed because it was put out (evicted by its kubelet for node pressure,
    preempted, or taken off its node), not because its containers failed."""
    status = pod.get("status") or {}
    if status.get("phase") != "Failed":
        return False
    if status.get("reason") == "Evicted":
        return True
    return any(
        c.get("type") == "DisruptionTarget" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )


def shadow_pod_finished(shadow_pod: Mapping[str, Any]) -> bool:
    """Whether the ShadowPod's pod finished by its own containers: it is never run again."""
    return (shadow_pod.get("status") or {}).get("phase") in POD_TERMINAL_PHASES


def replaces_containers(pod_patch: JSON | None) -> bool:
    """Whether a pod's patch (`live_pod_patch`) replaces a container list: a merge patch sends
    lists whole, so it must be built on the whole object, not on the part a cache keeps."""
    spec = (pod_patch or {}).get("spec") or {}
    return any(key in spec for key in _CONTAINER_LISTS)


def patches_containers(shadow_patch: JSON | None) -> bool:
    """`replaces_containers`, of a ShadowPod's patch (`shadow_pod_patch`)."""
    return replaces_containers({"spec": ((shadow_patch or {}).get("spec") or {}).get("pod")})


def shadow_pod_patch(pod_patch: JSON | None) -> JSON | None:
    """A merge patch of a pod (`live_pod_patch`) as the merge patch of its ShadowPod."""
    if pod_patch is None:
        return None
    patch = {key: value for key, value in pod_patch.items() if key != "spec"}
    if "spec" in pod_patch:
        patch["spec"] = {"pod": pod_patch["spec"]}
    return patch


# The longest grace period a consumer's deletion may ask for its remote Pod: a day.
MAX_GRACE_SECONDS = 24 * 3600


def consumer_grace_period(shadow_pod: Mapping[str, Any]) -> int | None:
    """The grace period a ShadowPod being deleted asks for its Pod: the consumer's (its
    annotation) when sane, else None (the pod's own)."""
    value = as_mapping(as_mapping(shadow_pod.get("metadata")).get("annotations")).get(
        DELETION_GRACE_ANNOTATION
    )
    try:
        seconds = int(value) if isinstance(value, str) else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= MAX_GRACE_SECONDS else None


def deletion_grace_period(local_pod: Mapping[str, Any]) -> int | None:
    """The grace period for deleting the remote Pod of a local pod being deleted: the one the
    local deletion asked for, else the pod's own; None leaves it to the provider. (Liqo deletes
    without one, so the remote pod always gets its full terminationGracePeriodSeconds.)"""
    requested = (local_pod.get("metadata") or {}).get("deletionGracePeriodSeconds")
    if requested is not None:
        return int(requested)
    own = (local_pod.get("spec") or {}).get("terminationGracePeriodSeconds")
    return None if own is None else int(own)


# --- Remote Pod status → local pod status ------------------------------------------------


def forge_local_pod_status(
    remote_pod: Mapping[str, Any],
    local_pod: Mapping[str, Any],
    *,
    node_ip: str,
    extra_restarts: int = 0,
) -> JSON:
    """The whole `status` to write on the local pod, from the remote Pod's (Liqo's
    `LocalPodStatus`): phase, conditions, container statuses of all kinds, pod IPs (as the
    provider assigned them: no IP remapping, DESIGN §9), startTime, reason, message and the
    rest, with `hostIP`/`hostIPs` set to the virtual node's IP.

    `extra_restarts` is added to every container's restartCount: the caller counts the remote
    pods that were lost and recreated (a new remote UID), which Liqo reports as restarts; after
    a restart of the virtual kubelet, Liqo infers it as the local minus the remote restartCount
    of the first container, when positive.

    Where vk departs from Liqo's plain copy, it is to keep the local pod's own truths:
    - `qosClass` stays the local one: the API server fixes it at creation and refuses a change,
      and the provider may compute another one (a LimitRange adding limits).
    - Conditions that neither the remote status carries nor a kubelet owns stay as they are
      locally: PodScheduled until the provider's scheduler reports one, DisruptionTarget (set
      here by an eviction, read by Jobs' podFailurePolicy), readiness-gate conditions.
    - `observedGeneration` (status and conditions) is about the remote pod's generation: it is
      reported as the local pod's generation once the remote one is caught up, and otherwise
      left at its local value (a value the API server would keep anyway if cleared).
    A local pod labelled `liqo.io/remote-unavailable=true` is reported not Ready, as in Liqo.
    """
    # A shallow copy: what is changed below is copied first (the top level, the conditions,
    # the container statuses given restarts); the rest is shared with `remote_pod` and must
    # be read only (deep copies were a sixth of the virtual kubelet's profiled CPU per pod).
    status: JSON = dict(remote_pod.get("status") or {})
    local_status = local_pod.get("status") or {}
    local_conditions = {c.get("type"): c for c in local_status.get("conditions") or []}

    if local_status.get("qosClass"):
        status["qosClass"] = local_status["qosClass"]
    if not status.get("phase") and local_status.get("phase"):
        # An API server always sets one; a status without it would store an empty phase.
        status["phase"] = local_status["phase"]
    if status.get("phase") == "Pending" and local_status.get("phase") == "Running":
        # A remote Pod made again while its pod ran (put out, or deleted by hand, on the
        # provider): a restart of its containers, as a kubelet reports one. A pod's phase never
        # goes back to Pending, nor does it start twice.
        status["phase"] = "Running"
        if local_status.get("startTime"):
            status["startTime"] = local_status["startTime"]
    if node_ip:
        status["hostIP"] = node_ip
        status["hostIPs"] = [{"ip": node_ip}]
    else:
        status.pop("hostIP", None)
        status.pop("hostIPs", None)

    if extra_restarts and status.get("containerStatuses"):
        status["containerStatuses"] = [
            {**container, "restartCount": int(container.get("restartCount") or 0) + extra_restarts}
            for container in status["containerStatuses"]
        ]

    remote_generation = (remote_pod.get("metadata") or {}).get("generation")
    local_generation = (local_pod.get("metadata") or {}).get("generation")

    def translate_generation(target: JSON, local_value: int | None) -> None:
        value = _local_observed_generation(
            target.get("observedGeneration"), remote_generation, local_generation, local_value
        )
        if value is None:
            target.pop("observedGeneration", None)
        else:
            target["observedGeneration"] = value

    translate_generation(status, local_status.get("observedGeneration"))
    conditions: list[JSON] = [dict(c) for c in status.get("conditions") or []]  # flat dicts
    for condition in conditions:
        previous = local_conditions.get(condition.get("type")) or {}
        translate_generation(condition, previous.get("observedGeneration"))
    remote_types = {c.get("type") for c in conditions}
    conditions.extend(
        dict(c)
        for kind, c in local_conditions.items()
        if kind not in remote_types and kind not in _KUBELET_CONDITIONS
    )

    local_labels = (local_pod.get("metadata") or {}).get("labels") or {}
    if local_labels.get(REMOTE_UNAVAILABLE_LABEL) == "true":
        ready = next((c for c in conditions if c.get("type") == "Ready"), None)
        if ready is None:
            conditions.append({"type": "Ready", "status": "False"})
        else:
            ready["status"] = "False"

    if conditions:
        status["conditions"] = conditions
    return status


def forge_stopped_status(
    local_pod: Mapping[str, Any], now: str, waiting_reason: str = "ContainerCreating"
) -> JSON | None:
    """The status of a running pod whose remote Pod is gone, or put out, while the provider
    makes it again: what a kubelet reports of a pod whose containers stopped and are started
    again. Still Running (a pod's phase never goes back), not Ready, each container not ready
    and waiting (`waiting_reason`: to be created, or why it cannot be, which `kubectl get
    pods` shows); its restart is counted once the new Pod shows. So a Service stops sending to
    it meanwhile, which the last status, Ready, kept doing. `now`: the conditions' transition
    time. None for a pod that is not Running."""
    status: JSON = dict(local_pod.get("status") or {})
    if status.get("phase") != "Running":
        return None
    containers = status.get("containerStatuses") or []
    waiting = {"waiting": {"reason": waiting_reason}}
    status["containerStatuses"] = [
        {**container, "ready": False, "started": False, "state": waiting}
        for container in containers
    ]
    names = " ".join(str(container.get("name")) for container in containers)
    not_ready = {
        "status": "False",
        "reason": "ContainersNotReady",
        "message": f"containers with unready status: [{names}]",
    }
    conditions = [dict(c) for c in status.get("conditions") or []]
    for condition in conditions:
        if condition.get("type") in ("Ready", "ContainersReady"):
            if condition.get("status") != "False":
                condition["lastTransitionTime"] = now
            condition.update(not_ready)
    status["conditions"] = conditions
    return status


# What every write of an object changes, whatever it wrote.
_CHANGED_BY_EVERY_WRITE = ("resourceVersion", "managedFields")


def changed_beyond_status(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a Pod or ShadowPod changed anywhere but in its status (and in what every write
    changes). Two versions in a cache share their unchanged parts (vk/kube/compaction.py), so
    most of the comparison is of a part with itself."""
    if any(
        old.get(key) != new.get(key)
        for key in old.keys() | new.keys()
        if key not in ("metadata", "status")
    ):
        return True
    old_metadata, new_metadata = as_mapping(old.get("metadata")), as_mapping(new.get("metadata"))
    return any(
        old_metadata.get(key) != new_metadata.get(key)
        for key in old_metadata.keys() | new_metadata.keys()
        if key not in _CHANGED_BY_EVERY_WRITE
    )


def local_status_needs_update(
    local_pod: Mapping[str, Any], desired_status: Mapping[str, Any]
) -> bool:
    """Whether `desired_status` says something the local pod's status does not. Key order,
    and fields that are null or empty on one side and absent on the other (the API server
    drops them), make no difference; list order does."""
    current = local_pod.get("status") or {}
    # Equal as they are, most often (a pod reconciled again, a restart): compared in C first,
    # then without empties only when they differ.
    if current == desired_status:
        return False
    return bool(_semantic(current) != _semantic(desired_status))


# --- The pieces ----------------------------------------------------------------------------


def _remote_labels(
    metadata: Mapping[str, Any],
    local_cluster_id: str,
    remote_cluster_id: str,
    node_name: str,
    patch: Mapping[str, Any],
) -> dict[str, str]:
    not_reflected = [
        OFFLOADED_POD_LABEL,
        REMOTE_UNAVAILABLE_LABEL,
        *(patch.get("labelsNotReflected") or []),
    ]
    labels = without_keys(metadata.get("labels") or {}, not_reflected)
    return {**labels, **ownership_labels(local_cluster_id, remote_cluster_id, node_name)}


def _remote_annotations(metadata: Mapping[str, Any], patch: Mapping[str, Any]) -> dict[str, str]:
    """The local pod's annotations (but those the patch keeps home) and its UID's."""
    annotations = without_keys(
        metadata.get("annotations") or {}, patch.get("annotationsNotReflected") or []
    )
    if metadata.get("uid"):
        annotations[LOCAL_POD_UID_ANNOTATION] = str(metadata["uid"])
    return annotations


def local_pod_uid(remote_pod: Mapping[str, Any]) -> str | None:
    """The UID of the local pod a ShadowPod or remote Pod stands for, if it records one (those
    an older vk made do not)."""
    annotations = (remote_pod.get("metadata") or {}).get("annotations") or {}
    uid = annotations.get(LOCAL_POD_UID_ANNOTATION)
    return str(uid) if uid else None


def _changed_keys(desired: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in desired.items() if current.get(k) != v}


def _remote_tolerations(spec: Mapping[str, Any], patch: Mapping[str, Any]) -> list[JSON]:
    # Without the virtual-node toleration, the pod cannot land on a virtual node of the
    # provider in turn (no recursive offloading by default).
    kept = [t for t in spec.get("tolerations") or [] if t.get("key") != VIRTUAL_NODE_TAINT_KEY]
    # A toleration is flat (strings and a number): a copy of each dict is a deep one.
    return [dict(t) for t in [*kept, *(patch.get("tolerations") or [])]]


def _tolerations_update(current: list[JSON], desired: list[JSON]) -> list[JSON] | None:
    """The remote tolerations with the desired ones added, or None if none is missing.
    Kubernetes lets a live pod gain tolerations and change an existing one's tolerationSeconds,
    nothing else, so every current toleration stays."""
    # Only computed when a toleration is missing: every reconcile of every pod asks.
    exact = [t for t in desired if t in current]
    if len(exact) == len(desired):
        return None
    result = [dict(t) for t in current]  # flat dicts: copied whole
    unmatched = [i for i, t in enumerate(current) if t not in exact]
    for toleration in desired:
        if toleration in exact:
            continue
        same_but_seconds = next(
            (i for i in unmatched if _but_seconds(current[i]) == _but_seconds(toleration)), None
        )
        if same_but_seconds is None:
            result.append(dict(toleration))
        else:
            unmatched.remove(same_but_seconds)
            result[same_but_seconds] = dict(toleration)
    return result


def _but_seconds(toleration: Mapping[str, Any]) -> JSON:
    return {k: v for k, v in toleration.items() if k != "tolerationSeconds"}


def _remote_volumes(
    volumes: list[JSON], root_ca: str | None, token_secret: str | None
) -> list[JSON]:
    """Projected volumes with their serviceAccountToken sources turned into projections of
    the reflected token Secret or, without one, removed and, if the CA is reflected, with the
    reflected CA's name (Liqo's `RemoteVolumes`, TokenAPI mode or API-server support disabled).
    Other volume kinds are the provider's to resolve, like any ConfigMap or Secret."""
    for volume in volumes:
        projected = volume.get("projected")
        if not projected:
            continue
        sources = []
        for source in projected.get("sources") or []:
            token = source.get("serviceAccountToken")
            if token is not None:
                if token_secret is not None:
                    key = token_key(volume["name"], token["path"])
                    items = [{"key": key, "path": token["path"]}]
                    sources.append({"secret": {"name": token_secret, "items": items}})
                continue
            config_map = source.get("configMap")
            if root_ca and config_map and config_map.get("name") == ROOT_CA_CONFIGMAP:
                config_map["name"] = root_ca
            sources.append(source)
        projected["sources"] = sources
    return volumes


def _hardcode_service_account_name(container: JSON, name: str) -> None:
    for env in container.get("env") or []:
        field_ref = (env.get("valueFrom") or {}).get("fieldRef") or {}
        if field_ref.get("fieldPath") == "spec.serviceAccountName":
            env.pop("valueFrom")
            env["value"] = name


def _api_server_env(host: str, port: int) -> list[JSON]:
    """The variables the kubelet sets for the `kubernetes` Service, naming `host:port`: what
    client libraries read for their in-cluster configuration."""
    # An IPv6 address is bracketed in the URLs, as the kubelet does (net.JoinHostPort).
    url = f"tcp://[{host}]:{port}" if ":" in host else f"tcp://{host}:{port}"
    prefix = f"KUBERNETES_PORT_{port}_TCP"
    return [
        {"name": "KUBERNETES_SERVICE_HOST", "value": host},
        {"name": "KUBERNETES_SERVICE_PORT", "value": str(port)},
        {"name": "KUBERNETES_PORT", "value": url},
        {"name": prefix, "value": url},
        {"name": f"{prefix}_PROTO", "value": "tcp"},
        {"name": f"{prefix}_ADDR", "value": host},
        {"name": f"{prefix}_PORT", "value": str(port)},
    ]


def _set_env_first(container: JSON, env: list[JSON]) -> None:
    """`env` at the head of the container's own, replacing its entries of the same names:
    first, so that the container's later variables can refer to them as $(NAME)."""
    names = {variable["name"] for variable in env}
    own = [variable for variable in container.get("env") or [] if variable["name"] not in names]
    container["env"] = json_copy(env) + own


def _remote_affinity(
    spec: Mapping[str, Any],
    annotations: Mapping[str, str],
    remote_labels: Mapping[str, str],
    patch: Mapping[str, Any],
) -> JSON:
    """The provider-side affinity: the pod's anti-affinity preset, if any, and the offloading
    patch's node affinity. (Liqo applies the preset last and so loses the patch's node
    affinity whenever a preset is set; vk keeps both.)"""
    affinity: JSON = {}
    preset = annotations.get(ANTI_AFFINITY_PRESET_ANNOTATION)
    if preset == "propagate":
        if anti := (spec.get("affinity") or {}).get("podAntiAffinity"):
            affinity["podAntiAffinity"] = json_copy(anti)
    elif preset in ("soft", "hard"):
        term = {
            "topologyKey": "kubernetes.io/hostname",
            "labelSelector": {
                "matchLabels": _anti_affinity_labels(
                    remote_labels, annotations.get(ANTI_AFFINITY_LABELS_ANNOTATION, "")
                )
            },
        }
        if preset == "soft":
            affinity["podAntiAffinity"] = {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": term}
                ]
            }
        else:
            affinity["podAntiAffinity"] = {"requiredDuringSchedulingIgnoredDuringExecution": [term]}
    if node_affinity := (patch.get("affinity") or {}).get("nodeAffinity"):
        affinity["nodeAffinity"] = json_copy(node_affinity)
    return affinity


def _anti_affinity_labels(labels: Mapping[str, str], keys: str) -> dict[str, str]:
    # Liqo selects on the labels the remote pod gets from the local one, plus the node name.
    labels = without_keys(labels, (ORIGIN_LABEL, DESTINATION_LABEL))
    wanted = [key.strip() for key in keys.split(",") if key.strip()]
    if wanted:
        return {k: v for k, v in labels.items() if k in wanted}
    return without_keys(labels, _REVISION_LABELS)


def _remote_runtime_class(
    spec: Mapping[str, Any], annotations: Mapping[str, str], patch: Mapping[str, Any]
) -> str | None:
    """Liqo's order: the pod's annotation, as it is; the pod's own class unless it is `liqo`
    (which only steers pods to virtual nodes); the offloading patch's, likewise; else none,
    i.e. the provider's default."""
    if chosen := annotations.get(REMOTE_RUNTIME_CLASS_ANNOTATION):
        return str(chosen)
    for candidate in (spec.get("runtimeClassName"), patch.get("runtimeClassName")):
        if candidate and candidate != RUNTIME_CLASS_NAME:
            return str(candidate)
    return None


def _local_observed_generation(
    remote_observed: int | None,
    remote_generation: int | None,
    local_generation: int | None,
    local_value: int | None,
) -> int | None:
    """A remote `observedGeneration` in the local pod's terms: the local generation once the
    remote pod's is observed, else the local value as it stands."""
    caught_up = remote_observed is not None and (
        remote_generation is None or remote_observed >= remote_generation
    )
    return local_generation if caught_up and local_generation is not None else local_value


def _semantic(value: Any) -> Any:
    """`value` without the nulls and empties that the API server drops when it stores it."""
    kind = type(value)  # exact types: what JSON decodes to (an ABC check per leaf is slow)
    if kind is dict:
        cleaned = {k: _semantic(v) for k, v in value.items()}
        return {k: v for k, v in cleaned.items() if v not in _EMPTY}
    if kind is list:
        return [_semantic(item) for item in value]
    return value


_EMPTY: tuple[Any, ...] = (None, "", [], {})


def status_worth_reporting(remote_pod: Mapping[str, Any]) -> bool:
    """False while the remote pod says nothing the local pod does not already say: Pending,
    no container statuses yet, no condition failing. Skipping that state saves a write per pod
    without hiding anything: a pull, a wait reason or Unschedulable all make it worth it."""
    status = remote_pod.get("status") or {}
    if status.get("phase", "Pending") != "Pending":
        return True
    if status.get("containerStatuses") or status.get("initContainerStatuses"):
        return True
    return any(c.get("status") == "False" for c in status.get("conditions") or [])


def forge_status_patch(local_pod: Mapping[str, Any], desired_status: Mapping[str, Any]) -> JSON:
    """A merge patch turning the local pod's status into `desired_status`: keys the provider
    no longer reports are nulled. No resourceVersion: the status is the virtual kubelet's alone
    to write, so there is nothing to conflict with (a PUT would fail on every unrelated change
    of the pod)."""
    current = local_pod.get("status") or {}
    patch: JSON = {key: None for key in current if key not in desired_status}
    patch.update(desired_status)
    return {"status": patch}
