"""Pod Security Standards on a ShadowPod's pod: Kubernetes' baseline and restricted checks (v1.36,
"latest"), each violation naming its field, and the denial that lists them."""

from __future__ import annotations

from typing import Any

import pytest

from vk.api.constants import POD_SECURITY_LEVELS
from vk.webhooks.podsecurity import (
    PodSecurityLevel,
    parse_level,
    pod_security_message,
    pod_security_violations,
)

JSON = dict[str, Any]
PRIVILEGED = PodSecurityLevel.PRIVILEGED
BASELINE = PodSecurityLevel.BASELINE
RESTRICTED = PodSecurityLevel.RESTRICTED
RESTRICTED_VOLUMES = (
    "configMap, csi, downwardAPI, emptyDir, ephemeral, image, persistentVolumeClaim, projected, "
    "secret"
)


def restricted_pod() -> JSON:
    """A pod every level allows: one container with the settings restricted asks for."""
    return {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {
                "name": "app",
                "image": "nginx",
                "securityContext": {
                    "allowPrivilegeEscalation": False,
                    "capabilities": {"drop": ["ALL"]},
                },
            }
        ],
        "volumes": [{"name": "config", "configMap": {"name": "app"}}],
    }


def merged(base: JSON, patch: JSON) -> JSON:
    """`base` with `patch` merged in: objects merge, anything else replaces, None removes."""
    result = dict(base)
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict) and isinstance(result.get(key), dict):
            result[key] = merged(result[key], value)
        else:
            result[key] = value
    return result


def pod(**patch: Any) -> JSON:
    """The restricted pod with `patch` merged into its spec."""
    return merged(restricted_pod(), patch)


def app(**patch: Any) -> JSON:
    """The restricted pod with `patch` merged into its container "app"."""
    spec = restricted_pod()
    spec["containers"] = [merged(spec["containers"][0], patch)]
    return spec


def restricted_container(name: str) -> JSON:
    return merged(restricted_pod()["containers"][0], {"name": name, "image": "busybox"})


def case(
    name: str,
    spec: JSON,
    violation: str,
    restricted: str | None = None,
    annotations: dict[str, str] | None = None,
) -> Any:
    """A pod that baseline refuses with `violation`, and restricted with its own wording where
    restricted replaces baseline's check."""
    return pytest.param(spec, annotations, violation, restricted or violation, id=name)


PRIVILEGED_CONTEXT: JSON = {"securityContext": {"privileged": True}}

BASELINE_REFUSES = [
    case(
        "a windows hostProcess pod",
        pod(securityContext={"windowsOptions": {"hostProcess": True}}),
        "hostProcess: pod sets securityContext.windowsOptions.hostProcess=true",
    ),
    case(
        "a windows hostProcess container",
        app(securityContext={"windowsOptions": {"hostProcess": True}}),
        'hostProcess: container "app" sets securityContext.windowsOptions.hostProcess=true',
    ),
    case("the host network", pod(hostNetwork=True), "host namespaces: hostNetwork=true"),
    case("the host PID namespace", pod(hostPID=True), "host namespaces: hostPID=true"),
    case("the host IPC namespace", pod(hostIPC=True), "host namespaces: hostIPC=true"),
    case(
        "a privileged container",
        app(securityContext={"privileged": True}),
        'privileged: container "app" sets securityContext.privileged=true',
    ),
    case(
        "a privileged init container",
        pod(initContainers=[merged(restricted_container("setup"), PRIVILEGED_CONTEXT)]),
        'privileged: init container "setup" sets securityContext.privileged=true',
    ),
    case(
        "a privileged ephemeral container",
        pod(ephemeralContainers=[merged(restricted_container("debug"), PRIVILEGED_CONTEXT)]),
        'privileged: ephemeral container "debug" sets securityContext.privileged=true',
    ),
    case(
        "a capability beyond the default set",
        app(securityContext={"capabilities": {"add": ["CHOWN", "NET_RAW"]}}),
        'non-default capabilities: container "app" adds "NET_RAW" in '
        "securityContext.capabilities.add, beyond the runtime's default set",
        restricted='unrestricted capabilities: container "app" adds "CHOWN", "NET_RAW" in '
        'securityContext.capabilities.add, where only "NET_BIND_SERVICE" is allowed',
    ),
    case(
        "a hostPath volume",
        pod(volumes=[{"name": "root", "hostPath": {"path": "/"}}]),
        'hostPath volumes: volume "root" is a hostPath',
        restricted=f'restricted volume types: volume "root" uses hostPath '
        f"(restricted allows only {RESTRICTED_VOLUMES})",
    ),
    case(
        "a host port",
        app(ports=[{"containerPort": 80}, {"containerPort": 443, "hostPort": 8443}]),
        'hostPort: container "app" sets ports[1].hostPort=8443',
    ),
    case(
        "a probe aimed at another host",
        app(livenessProbe={"httpGet": {"port": 80, "host": "10.0.0.1"}}),
        'probe or lifecycle host: container "app" sets livenessProbe.httpGet.host="10.0.0.1"',
    ),
    case(
        "a lifecycle hook aimed at another host",
        app(lifecycle={"preStop": {"tcpSocket": {"port": 80, "host": "metadata"}}}),
        'probe or lifecycle host: container "app" sets lifecycle.preStop.tcpSocket.host="metadata"',
    ),
    case(
        "an unconfined AppArmor pod",
        pod(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
        'forbidden AppArmor profile: pod sets securityContext.appArmorProfile.type="Unconfined"',
    ),
    case(
        "an unconfined AppArmor container",
        app(securityContext={"appArmorProfile": {"type": "Unconfined"}}),
        'forbidden AppArmor profile: container "app" sets '
        'securityContext.appArmorProfile.type="Unconfined"',
    ),
    case(
        "an unconfined AppArmor annotation",
        restricted_pod(),
        "forbidden AppArmor profile: annotation "
        'container.apparmor.security.beta.kubernetes.io/app="unconfined"',
        annotations={"container.apparmor.security.beta.kubernetes.io/app": "unconfined"},
    ),
    case(
        "an SELinux type outside the container types",
        pod(securityContext={"seLinuxOptions": {"type": "spc_t"}}),
        'seLinuxOptions: pod sets securityContext.seLinuxOptions.type="spc_t"',
    ),
    case(
        "an SELinux user",
        app(securityContext={"seLinuxOptions": {"user": "system_u"}}),
        'seLinuxOptions: container "app" sets securityContext.seLinuxOptions.user="system_u"',
    ),
    case(
        "an SELinux role",
        app(securityContext={"seLinuxOptions": {"role": "system_r"}}),
        'seLinuxOptions: container "app" sets securityContext.seLinuxOptions.role="system_r"',
    ),
    case(
        "an unmasked /proc",
        app(securityContext={"procMount": "Unmasked"}),
        'procMount: container "app" sets securityContext.procMount="Unmasked"',
    ),
    case(
        "an unconfined seccomp pod",
        pod(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        'seccompProfile: pod sets securityContext.seccompProfile.type="Unconfined"',
    ),
    case(
        "an unconfined seccomp pod whose containers set their own",
        merged(
            app(securityContext={"seccompProfile": {"type": "RuntimeDefault"}}),
            {"securityContext": {"seccompProfile": {"type": "Unconfined"}}},
        ),
        'seccompProfile: pod sets securityContext.seccompProfile.type="Unconfined"',
    ),
    case(
        "an unconfined seccomp container",
        app(securityContext={"seccompProfile": {"type": "Unconfined"}}),
        'seccompProfile: container "app" sets securityContext.seccompProfile.type="Unconfined"',
    ),
    case(
        "an unsafe sysctl",
        pod(securityContext={"sysctls": [{"name": "kernel.msgmax", "value": "65536"}]}),
        'forbidden sysctls: pod sets securityContext.sysctls[0].name="kernel.msgmax"',
    ),
    case(
        "a sysctl that only Kubernetes v1.37 deems safe",
        pod(securityContext={"sysctls": [{"name": "net.ipv4.tcp_notsent_lowat", "value": "1"}]}),
        'forbidden sysctls: pod sets securityContext.sysctls[0].name="net.ipv4.tcp_notsent_lowat"',
    ),
]


@pytest.mark.parametrize(("spec", "annotations", "violation", "restricted"), BASELINE_REFUSES)
def test_baseline_refuses_an_unsafe_setting_naming_its_field(
    spec: JSON, annotations: dict[str, str] | None, violation: str, restricted: str
) -> None:
    assert pod_security_violations(spec, BASELINE, annotations) == [violation]


@pytest.mark.parametrize(("spec", "annotations", "violation", "restricted"), BASELINE_REFUSES)
def test_restricted_refuses_what_baseline_refuses(
    spec: JSON, annotations: dict[str, str] | None, violation: str, restricted: str
) -> None:
    assert pod_security_violations(spec, RESTRICTED, annotations) == [restricted]


@pytest.mark.parametrize(("spec", "annotations", "violation", "restricted"), BASELINE_REFUSES)
def test_privileged_allows_what_baseline_refuses(
    spec: JSON, annotations: dict[str, str] | None, violation: str, restricted: str
) -> None:
    assert pod_security_violations(spec, PRIVILEGED, annotations) == []


SAFE_SYSCTLS = [
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
]
RESTRICTED_VOLUME_SOURCES: list[JSON] = [
    {"configMap": {"name": "app"}},
    {"csi": {"driver": "secrets-store.csi.k8s.io"}},
    {"downwardAPI": {"items": []}},
    {"emptyDir": {}},
    {"ephemeral": {"volumeClaimTemplate": {"spec": {}}}},
    {"image": {"reference": "registry.example/data:1"}},
    {"persistentVolumeClaim": {"claimName": "data"}},
    {"projected": {"sources": []}},
    {"secret": {"secretName": "tls"}},
    {},  # no source: the API server makes it an emptyDir
]

EVERY_LEVEL_ALLOWS = [
    pytest.param(restricted_pod(), None, id="the restricted pod"),
    *(
        pytest.param(
            pod(securityContext={"sysctls": [{"name": name, "value": "1"}]}), None, id=name
        )
        for name in SAFE_SYSCTLS
    ),
    *(
        pytest.param(pod(volumes=[{"name": "v", **source}]), None, id=f"volume {[*source]}")
        for source in RESTRICTED_VOLUME_SOURCES
    ),
    *(
        pytest.param(
            app(securityContext={"seLinuxOptions": {"type": kind, "level": "s0:c1,c2"}}),
            None,
            id=f"SELinux type {kind!r}",
        )
        for kind in ("", "container_t", "container_init_t", "container_kvm_t", "container_engine_t")
    ),
    *(
        pytest.param(
            merged(
                pod(securityContext={"appArmorProfile": {"type": kind}}),
                {"securityContext": {"seccompProfile": {"type": kind}}},
            ),
            None,
            id=f"AppArmor and seccomp {kind}",
        )
        for kind in ("RuntimeDefault", "Localhost")
    ),
    *(
        pytest.param(
            restricted_pod(),
            {"container.apparmor.security.beta.kubernetes.io/app": value},
            id=f"AppArmor annotation {value!r}",
        )
        for value in ("runtime/default", "localhost/k8s-nginx", "")
    ),
    pytest.param(
        app(securityContext={"capabilities": {"add": ["NET_BIND_SERVICE"]}}),
        None,
        id="adding NET_BIND_SERVICE",
    ),
    pytest.param(app(ports=[{"containerPort": 80, "hostPort": 0}]), None, id="hostPort 0"),
    pytest.param(app(securityContext={"procMount": "Default"}), None, id="procMount Default"),
    pytest.param(
        app(
            readinessProbe={"httpGet": {"port": 80, "host": ""}},
            lifecycle={"postStart": {"httpGet": {"port": 80}}},
        ),
        None,
        id="probes on the pod itself",
    ),
    pytest.param(
        pod(hostNetwork=False, hostPID=False, hostIPC=False), None, id="host namespaces false"
    ),
]


@pytest.mark.parametrize("level", list(PodSecurityLevel))
@pytest.mark.parametrize(("spec", "annotations"), EVERY_LEVEL_ALLOWS)
def test_every_level_allows_a_safe_setting(
    spec: JSON, annotations: dict[str, str] | None, level: PodSecurityLevel
) -> None:
    assert pod_security_violations(spec, level, annotations) == []


RESTRICTED_REFUSES = [
    pytest.param(
        app(securityContext={"capabilities": {"add": ["CHOWN"]}}),
        [
            'unrestricted capabilities: container "app" adds "CHOWN" in '
            'securityContext.capabilities.add, where only "NET_BIND_SERVICE" is allowed'
        ],
        id="a default capability other than NET_BIND_SERVICE",
    ),
    pytest.param(
        app(securityContext={"capabilities": {"drop": ["NET_RAW"]}}),
        [
            'unrestricted capabilities: container "app" must set '
            'securityContext.capabilities.drop=["ALL"]'
        ],
        id="capabilities not dropped",
    ),
    pytest.param(
        pod(volumes=[{"name": "data", "nfs": {"server": "nas", "path": "/data"}}]),
        [
            f'restricted volume types: volume "data" uses nfs '
            f"(restricted allows only {RESTRICTED_VOLUMES})"
        ],
        id="an nfs volume",
    ),
    pytest.param(
        app(securityContext={"allowPrivilegeEscalation": True}),
        [
            'allowPrivilegeEscalation != false: container "app" must set '
            "securityContext.allowPrivilegeEscalation=false"
        ],
        id="privilege escalation allowed",
    ),
    pytest.param(
        app(securityContext={"allowPrivilegeEscalation": None}),
        [
            'allowPrivilegeEscalation != false: container "app" must set '
            "securityContext.allowPrivilegeEscalation=false"
        ],
        id="privilege escalation not forbidden",
    ),
    pytest.param(
        pod(securityContext={"runAsNonRoot": None}),
        [
            'runAsNonRoot != true: neither the pod nor container "app" sets '
            "securityContext.runAsNonRoot=true"
        ],
        id="runAsNonRoot unset",
    ),
    pytest.param(
        pod(securityContext={"runAsNonRoot": False}),
        ["runAsNonRoot != true: pod sets securityContext.runAsNonRoot=false"],
        id="runAsNonRoot false on the pod",
    ),
    pytest.param(
        app(securityContext={"runAsNonRoot": False}),
        ['runAsNonRoot != true: container "app" sets securityContext.runAsNonRoot=false'],
        id="runAsNonRoot false on a container",
    ),
    pytest.param(
        pod(securityContext={"runAsUser": 0}),
        ["runAsUser=0: pod sets securityContext.runAsUser=0"],
        id="root on the pod",
    ),
    pytest.param(
        app(securityContext={"runAsUser": 0}),
        ['runAsUser=0: container "app" sets securityContext.runAsUser=0'],
        id="root on a container",
    ),
    pytest.param(
        pod(securityContext={"seccompProfile": None}),
        [
            'seccompProfile: neither the pod nor container "app" sets '
            'securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost"'
        ],
        id="no seccomp profile",
    ),
    pytest.param(
        merged(
            app(securityContext={"procMount": "Unmasked"}),
            {"hostUsers": False},
        ),
        ['procMount: container "app" sets securityContext.procMount="Unmasked"'],
        id="an unmasked /proc even in a user namespace",
    ),
    pytest.param(
        pod(initContainers=[{"name": "setup", "image": "busybox"}]),
        [
            'unrestricted capabilities: init container "setup" must set '
            'securityContext.capabilities.drop=["ALL"]',
            'allowPrivilegeEscalation != false: init container "setup" must set '
            "securityContext.allowPrivilegeEscalation=false",
        ],
        id="an init container without the restricted settings",
    ),
]


@pytest.mark.parametrize(("spec", "violations"), RESTRICTED_REFUSES)
def test_restricted_refuses_what_baseline_allows(spec: JSON, violations: list[str]) -> None:
    assert pod_security_violations(spec, BASELINE) == []
    assert pod_security_violations(spec, RESTRICTED) == violations


RESTRICTED_ALLOWS = [
    pytest.param(
        merged(
            app(securityContext={"runAsNonRoot": True}),
            {"securityContext": {"runAsNonRoot": None}},
        ),
        id="runAsNonRoot on every container instead of the pod",
    ),
    pytest.param(
        merged(
            app(securityContext={"seccompProfile": {"type": "Localhost", "localhostProfile": "p"}}),
            {"securityContext": {"seccompProfile": None}},
        ),
        id="seccomp on every container instead of the pod",
    ),
    pytest.param(
        merged(
            pod(securityContext={"runAsNonRoot": None, "runAsUser": 0}),
            {"hostUsers": False},
        ),
        id="root in a user namespace",
    ),
    pytest.param(
        {
            "os": {"name": "windows"},
            "securityContext": {"runAsNonRoot": True},
            "containers": [{"name": "app", "image": "mcr.microsoft.com/windows/nanoserver"}],
        },
        id="a windows pod without the linux-only settings",
    ),
]


@pytest.mark.parametrize("spec", RESTRICTED_ALLOWS)
def test_restricted_allows_the_equivalent_settings(spec: JSON) -> None:
    assert pod_security_violations(spec, RESTRICTED) == []


def test_restricted_spares_a_windows_pod_baselines_capability_and_seccomp_checks() -> None:
    """Kubernetes' restricted replaces those two baseline checks by its own, which skip Windows:
    a Windows pod adding NET_RAW with seccomp Unconfined passes restricted, not baseline."""
    spec = merged(
        app(securityContext={"capabilities": {"add": ["NET_RAW"]}}),
        {"os": {"name": "windows"}, "securityContext": {"seccompProfile": {"type": "Unconfined"}}},
    )
    assert pod_security_violations(spec, RESTRICTED) == []
    assert len(pod_security_violations(spec, BASELINE)) == 2


def test_a_user_namespace_relaxes_procmount_under_baseline() -> None:
    spec = merged(app(securityContext={"procMount": "Unmasked"}), {"hostUsers": False})
    assert pod_security_violations(spec, BASELINE) == []
    assert pod_security_violations(merged(spec, {"hostUsers": True}), BASELINE) != []


def probe_pod() -> JSON:
    """The pod a node probe runs: the host's namespaces and its root filesystem."""
    return {
        "hostNetwork": True,
        "hostPID": True,
        "containers": [
            {
                "name": "probe",
                "image": "busybox",
                "securityContext": {"privileged": True},
                "volumeMounts": [{"name": "root", "mountPath": "/host"}],
            }
        ],
        "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
    }


def test_baseline_refuses_the_probe_pod_four_times() -> None:
    assert pod_security_violations(probe_pod(), BASELINE) == [
        "host namespaces: hostNetwork=true",
        "host namespaces: hostPID=true",
        'privileged: container "probe" sets securityContext.privileged=true',
        'hostPath volumes: volume "root" is a hostPath',
    ]


def test_privileged_allows_the_probe_pod() -> None:
    assert pod_security_violations(probe_pod(), PRIVILEGED) == []


def test_the_denial_names_the_level_every_violation_and_what_to_change() -> None:
    violations = pod_security_violations(probe_pod(), BASELINE)
    message = pod_security_message(violations, BASELINE)
    assert 'Pod Security level "baseline"' in message
    assert "tenants' pods" in message
    for field in ("hostNetwork=true", "hostPID=true", "securityContext.privileged=true"):
        assert field in message
    assert 'volume "root" is a hostPath' in message
    assert "Change the pod, or ask the provider for another level" in message


@pytest.mark.parametrize("level", ["privileged", "baseline", "restricted"])
def test_parse_level_reads_the_namespace_label_values(level: str) -> None:
    assert parse_level(level) == PodSecurityLevel(level)
    assert parse_level(level) == level


@pytest.mark.parametrize("value", ["", "Restricted", "strict", "latest"])
def test_parse_level_refuses_anything_else_naming_the_three_levels(value: str) -> None:
    with pytest.raises(ValueError, match=r'"privileged", "baseline", "restricted"'):
        parse_level(value)


def test_the_levels_are_the_ones_the_controller_manager_labels_namespaces_with() -> None:
    assert tuple(level.value for level in PodSecurityLevel) == POD_SECURITY_LEVELS
