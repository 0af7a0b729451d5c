"""Pod Security Standards' verdict on a pod spec, for the provider's webhook: pure, no I/O.

Pod Security admission refuses a ShadowPod's Pod only when the provider creates it, out of the
consumer's sight; the webhook gives the same verdict on the ShadowPod, at once and naming the
field, while the namespace's enforce label stays the enforcement. The checks follow Kubernetes'
pod-security-admission `policy/` at version "latest" of v1.36.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Mapping
from enum import StrEnum
from typing import Any


class PodSecurityLevel(StrEnum):
    PRIVILEGED = "privileged"
    BASELINE = "baseline"
    RESTRICTED = "restricted"


def parse_level(value: str) -> PodSecurityLevel:
    try:
        return PodSecurityLevel(value)
    except ValueError:
        allowed = ", ".join(f'"{level}"' for level in PodSecurityLevel)
        raise ValueError(
            f"{value!r} is not a Pod Security level: expected one of {allowed}"
        ) from None


# What baseline lets a container add: the container runtimes' default set, without NET_RAW.
BASELINE_CAPABILITIES = frozenset(
    {
        "AUDIT_WRITE",
        "CHOWN",
        "DAC_OVERRIDE",
        "FOWNER",
        "FSETID",
        "KILL",
        "MKNOD",
        "NET_BIND_SERVICE",
        "SETFCAP",
        "SETGID",
        "SETPCAP",
        "SETUID",
        "SYS_CHROOT",
    }
)
# Namespaced sysctls isolated from other pods on the node (v1.36; v1.37 adds two more).
SAFE_SYSCTLS = frozenset(
    {
        "kernel.shm_rmid_forced",
        "net.ipv4.ip_local_port_range",
        "net.ipv4.ip_local_reserved_ports",
        "net.ipv4.ip_unprivileged_port_start",
        "net.ipv4.ping_group_range",
        "net.ipv4.tcp_fin_timeout",
        "net.ipv4.tcp_keepalive_intvl",
        "net.ipv4.tcp_keepalive_probes",
        "net.ipv4.tcp_keepalive_time",
        "net.ipv4.tcp_rmem",
        "net.ipv4.tcp_syncookies",
        "net.ipv4.tcp_wmem",
    }
)
SELINUX_TYPES = frozenset(
    {"", "container_t", "container_init_t", "container_kvm_t", "container_engine_t"}
)
RESTRICTED_VOLUME_TYPES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "image",
    "persistentVolumeClaim",
    "projected",
    "secret",
)
_ALLOWED_PROFILE_TYPES = frozenset({"RuntimeDefault", "Localhost"})
_APPARMOR_ANNOTATION_PREFIX = "container.apparmor.security.beta.kubernetes.io/"
_CONTAINER_KINDS = (
    ("initContainers", "init container"),
    ("containers", "container"),
    ("ephemeralContainers", "ephemeral container"),
)

_Check = Callable[[Mapping[str, Any], Mapping[str, str]], Iterator[str]]


def pod_security_violations(
    spec: Mapping[str, Any],
    level: PodSecurityLevel,
    annotations: Mapping[str, str] | None = None,
) -> list[str]:
    """Every way the pod `spec` (with its `annotations`) breaks `level`, each naming the check
    and the field; an empty list when the pod is allowed."""
    checks = {
        PodSecurityLevel.PRIVILEGED: (),
        PodSecurityLevel.BASELINE: _BASELINE_CHECKS,
        PodSecurityLevel.RESTRICTED: _RESTRICTED_CHECKS,
    }[level]
    return [violation for check in checks for violation in check(spec, annotations or {})]


def pod_security_message(violations: list[str], level: PodSecurityLevel) -> str:
    """The denial of a pod that breaks `level`."""
    return (
        f'the provider enforces Pod Security level "{level}" on its tenants\' pods, and this pod '
        f"violates it: {'; '.join(violations)}. Change the pod, or ask the provider for another "
        "level (see https://kubernetes.io/docs/concepts/security/pod-security-standards/)"
    )


# --- Reading the API's JSON -------------------------------------------------------------------


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _set(check: str, who: str, field: str, value: Any) -> str:
    """A violation of `check` by `who` (the pod, or a container) setting `field` to `value`."""
    return f"{check}: {who} sets {field}={json.dumps(value)}"


def _quoted(values: list[Any]) -> str:
    return ", ".join(json.dumps(value) for value in values)


def _is_one_of(value: Any, allowed: frozenset[str]) -> bool:
    # spec.pod is free JSON (the CRD preserves unknown fields): a value may be of any type.
    return isinstance(value, str) and value in allowed


def _containers(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """Each container of every kind, with the words naming it in a violation."""
    for field, kind in _CONTAINER_KINDS:
        for container in map(_mapping, _list(spec.get(field))):
            yield f'{kind} "{container.get("name", "")}"', container


def _security_contexts(spec: Mapping[str, Any]) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """The pod's securityContext, then each container's."""
    yield "pod", _mapping(spec.get("securityContext"))
    for who, container in _containers(spec):
        yield who, _mapping(container.get("securityContext"))


def _is_windows(spec: Mapping[str, Any]) -> bool:
    return _mapping(spec.get("os")).get("name") == "windows"


def _in_user_namespace(spec: Mapping[str, Any]) -> bool:
    # Root in a user namespace is not root on the node, so Kubernetes relaxes the checks on it.
    return spec.get("hostUsers") is False


# --- Baseline ---------------------------------------------------------------------------------


def _windows_host_process(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    for who, context in _security_contexts(spec):
        if _mapping(context.get("windowsOptions")).get("hostProcess") is True:
            yield _set("hostProcess", who, "securityContext.windowsOptions.hostProcess", True)


def _host_namespaces(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if spec.get(field) is True:
            yield f"host namespaces: {field}=true"


def _privileged(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    for who, container in _containers(spec):
        if _mapping(container.get("securityContext")).get("privileged") is True:
            yield _set("privileged", who, "securityContext.privileged", True)


def _added_capabilities(container: Mapping[str, Any]) -> list[Any]:
    capabilities = _mapping(_mapping(container.get("securityContext")).get("capabilities"))
    return _list(capabilities.get("add"))


def _capabilities_baseline(
    spec: Mapping[str, Any], annotations: Mapping[str, str]
) -> Iterator[str]:
    for who, container in _containers(spec):
        beyond = [
            c for c in _added_capabilities(container) if not _is_one_of(c, BASELINE_CAPABILITIES)
        ]
        if beyond:
            yield (
                f"non-default capabilities: {who} adds {_quoted(beyond)} in "
                "securityContext.capabilities.add, beyond the runtime's default set"
            )


def _host_path_volumes(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    for volume in map(_mapping, _list(spec.get("volumes"))):
        if volume.get("hostPath") is not None:
            yield f'hostPath volumes: volume "{volume.get("name", "")}" is a hostPath'


def _host_ports(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    for who, container in _containers(spec):
        for index, port in enumerate(_list(container.get("ports"))):
            host_port = _mapping(port).get("hostPort")
            if host_port:
                yield _set("hostPort", who, f"ports[{index}].hostPort", host_port)


def _host_probes_and_lifecycle(
    spec: Mapping[str, Any], annotations: Mapping[str, str]
) -> Iterator[str]:
    # A probe or hook aimed at another host makes the kubelet a proxy into the node's network.
    for who, container in _containers(spec):
        handlers = [
            (probe, _mapping(container.get(probe)))
            for probe in ("livenessProbe", "readinessProbe", "startupProbe")
        ]
        lifecycle = _mapping(container.get("lifecycle"))
        handlers += [
            (f"lifecycle.{hook}", _mapping(lifecycle.get(hook)))
            for hook in ("postStart", "preStop")
        ]
        for path, handler in handlers:
            for action in ("httpGet", "tcpSocket"):
                host = _mapping(handler.get(action)).get("host")
                if host:
                    yield _set("probe or lifecycle host", who, f"{path}.{action}.host", host)


def _app_armor(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    for who, context in _security_contexts(spec):
        profile = context.get("appArmorProfile")
        if profile is not None:
            profile_type = _mapping(profile).get("type") or ""
            if not _is_one_of(profile_type, _ALLOWED_PROFILE_TYPES):
                yield _set(
                    "forbidden AppArmor profile",
                    who,
                    "securityContext.appArmorProfile.type",
                    profile_type,
                )
    # The legacy annotations still set a profile (the API server copies them to the fields).
    for key, value in sorted(annotations.items()):
        if key.startswith(_APPARMOR_ANNOTATION_PREFIX) and not (
            value in ("", "runtime/default") or value.startswith("localhost/")
        ):
            yield f"forbidden AppArmor profile: annotation {key}={json.dumps(value)}"


def _selinux(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    for who, context in _security_contexts(spec):
        options = _mapping(context.get("seLinuxOptions"))
        selinux_type = options.get("type") or ""
        if not _is_one_of(selinux_type, SELINUX_TYPES):
            yield _set("seLinuxOptions", who, "securityContext.seLinuxOptions.type", selinux_type)
        for field in ("user", "role"):
            if options.get(field):
                yield _set(
                    "seLinuxOptions", who, f"securityContext.seLinuxOptions.{field}", options[field]
                )


def _proc_mount_restricted(
    spec: Mapping[str, Any], annotations: Mapping[str, str]
) -> Iterator[str]:
    for who, container in _containers(spec):
        proc_mount = _mapping(container.get("securityContext")).get("procMount")
        if proc_mount is not None and proc_mount != "Default":
            yield _set("procMount", who, "securityContext.procMount", proc_mount)


def _proc_mount_baseline(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    # An unmasked /proc in a user namespace shows only what the namespace owns.
    if not _in_user_namespace(spec):
        yield from _proc_mount_restricted(spec, annotations)


def _seccomp_type(context: Mapping[str, Any]) -> Any:
    """The seccomp profile type a securityContext sets, "" for a profile without one, None when
    it sets no profile."""
    profile = context.get("seccompProfile")
    return None if profile is None else _mapping(profile).get("type") or ""


def _seccomp_baseline(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    for who, context in _security_contexts(spec):
        profile_type = _seccomp_type(context)
        if profile_type is not None and not _is_one_of(profile_type, _ALLOWED_PROFILE_TYPES):
            yield _set("seccompProfile", who, "securityContext.seccompProfile.type", profile_type)


def _sysctls(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    sysctls = _list(_mapping(spec.get("securityContext")).get("sysctls"))
    for index, sysctl in enumerate(sysctls):
        name = _mapping(sysctl).get("name")
        if not _is_one_of(name, SAFE_SYSCTLS):
            yield _set("forbidden sysctls", "pod", f"securityContext.sysctls[{index}].name", name)


_BASELINE_CHECKS: tuple[_Check, ...] = (
    _windows_host_process,
    _host_namespaces,
    _privileged,
    _capabilities_baseline,
    _host_path_volumes,
    _host_ports,
    _host_probes_and_lifecycle,
    _app_armor,
    _selinux,
    _proc_mount_baseline,
    _seccomp_baseline,
    _sysctls,
)


# --- Restricted -------------------------------------------------------------------------------


def _restricted_volumes(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    for volume in map(_mapping, _list(spec.get("volumes"))):
        sources = [key for key, value in volume.items() if key != "name" and value is not None]
        # A volume without a source is defaulted to an emptyDir before admission sees it.
        if sources and not any(source in RESTRICTED_VOLUME_TYPES for source in sources):
            yield (
                f'restricted volume types: volume "{volume.get("name", "")}" uses {sources[0]} '
                f"(restricted allows only {', '.join(RESTRICTED_VOLUME_TYPES)})"
            )


def _allow_privilege_escalation(
    spec: Mapping[str, Any], annotations: Mapping[str, str]
) -> Iterator[str]:
    # Windows has no setuid nor no_new_privs: Kubernetes skips the check for its pods.
    if _is_windows(spec):
        return
    for who, container in _containers(spec):
        allowed = _mapping(container.get("securityContext")).get("allowPrivilegeEscalation")
        if allowed is not False:
            yield (
                "allowPrivilegeEscalation != false: "
                f"{who} must set securityContext.allowPrivilegeEscalation=false"
            )


def _run_as_non_root(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    if _in_user_namespace(spec):
        return
    pod = _mapping(spec.get("securityContext")).get("runAsNonRoot")
    if pod is False:
        yield _set("runAsNonRoot != true", "pod", "securityContext.runAsNonRoot", False)
    for who, container in _containers(spec):
        own = _mapping(container.get("securityContext")).get("runAsNonRoot")
        if own is False:
            yield _set("runAsNonRoot != true", who, "securityContext.runAsNonRoot", False)
        elif own is None and pod is None:
            # A pod that sets false is named above: setting it true there fixes its containers.
            yield (
                f"runAsNonRoot != true: neither the pod nor {who} "
                "sets securityContext.runAsNonRoot=true"
            )


def _run_as_user(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    if _in_user_namespace(spec):
        return
    for who, context in _security_contexts(spec):
        if context.get("runAsUser") == 0:
            yield _set("runAsUser=0", who, "securityContext.runAsUser", 0)


def _seccomp_restricted(spec: Mapping[str, Any], annotations: Mapping[str, str]) -> Iterator[str]:
    # Windows has no seccomp: Kubernetes skips the check, and with it baseline's (it replaces it).
    if _is_windows(spec):
        return
    yield from _seccomp_baseline(spec, annotations)
    pod = _seccomp_type(_mapping(spec.get("securityContext")))
    if pod is not None:
        return  # a valid pod profile covers its containers; an invalid one is named above
    for who, container in _containers(spec):
        if _seccomp_type(_mapping(container.get("securityContext"))) is None:
            yield (
                f"seccompProfile: neither the pod nor {who} sets "
                'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
            )


def _capabilities_restricted(
    spec: Mapping[str, Any], annotations: Mapping[str, str]
) -> Iterator[str]:
    # Windows has no Linux capabilities: Kubernetes skips the check, and baseline's with it.
    if _is_windows(spec):
        return
    for who, container in _containers(spec):
        capabilities = _mapping(_mapping(container.get("securityContext")).get("capabilities"))
        if "ALL" not in _list(capabilities.get("drop")):
            yield (
                f"unrestricted capabilities: {who} must set "
                'securityContext.capabilities.drop=["ALL"]'
            )
        added = [c for c in _list(capabilities.get("add")) if c != "NET_BIND_SERVICE"]
        if added:
            yield (
                f"unrestricted capabilities: {who} adds {_quoted(added)} in "
                'securityContext.capabilities.add, where only "NET_BIND_SERVICE" is allowed'
            )


# Restricted replaces four baseline checks by stricter ones of its own, as Kubernetes does: so a
# Windows pod, exempt from restricted's capabilities and seccomp, is exempt from baseline's too.
_REPLACED_BY_RESTRICTED: frozenset[_Check] = frozenset(
    {_capabilities_baseline, _host_path_volumes, _proc_mount_baseline, _seccomp_baseline}
)
_RESTRICTED_CHECKS: tuple[_Check, ...] = (
    *(check for check in _BASELINE_CHECKS if check not in _REPLACED_BY_RESTRICTED),
    _restricted_volumes,
    _proc_mount_restricted,
    _seccomp_restricted,
    _capabilities_restricted,
    _allow_privilege_escalation,
    _run_as_non_root,
    _run_as_user,
)
