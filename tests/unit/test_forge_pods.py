"""Pod forging: the consumer pod → the provider Pod, and the provider's status → the consumer's."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from vk.api.constants import (
    DESTINATION_LABEL,
    LOCAL_POD_UID_ANNOTATION,
    NODENAME_LABEL,
    ORIGIN_LABEL,
    VIRTUAL_NODE_TAINT_EFFECT,
    VIRTUAL_NODE_TAINT_KEY,
    VIRTUAL_NODE_TAINT_VALUE,
)
from vk.reflection.forge.meta import is_owned_by_us, ownership_labels
from vk.reflection.forge.pods import (
    REMOTE_UNAVAILABLE_LABEL,
    changed_beyond_status,
    deletion_grace_period,
    desired_remote_pod,
    forge_local_pod_status,
    forge_rejected_status,
    forge_remote_pod,
    forge_status_patch,
    live_pod_patch,
    local_pod_uid,
    local_status_needs_update,
    mounted_token_secret,
    node_admission_refusal,
    patches_containers,
    remote_root_ca_configmap_name,
    shadow_pod_as_pod,
    shadow_pod_as_read,
    shadow_pod_patch,
    status_worth_reporting,
    uses_home_tokens,
)
from vk.reflection.workload.pods import STATUS_REFUSED, remote_pod_as_read

JSON = dict[str, Any]

HOME = "venice"
PROVIDER = "cool-firefly"
NODE = "cool-firefly"
REMOTE_NAMESPACE = "demo-venice"
NODE_IP = "10.0.0.17"

VIRTUAL_NODE_TOLERATION = {
    "effect": "NoExecute",
    "key": VIRTUAL_NODE_TAINT_KEY,
    "operator": "Exists",
}
NOT_READY_TOLERATION = {
    "effect": "NoExecute",
    "key": "node.kubernetes.io/not-ready",
    "operator": "Exists",
    "tolerationSeconds": 300,
}
UNREACHABLE_TOLERATION = {
    "effect": "NoExecute",
    "key": "node.kubernetes.io/unreachable",
    "operator": "Exists",
    "tolerationSeconds": 300,
}


def local_pod() -> JSON:
    """A Deployment's pod in an offloaded namespace, as `kubectl get pod -o json` shows it once
    the API server defaulted it, Liqo's pod webhook added the virtual-node toleration and node
    affinity, the scheduler bound it to the virtual node and vk marked it offloaded."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-7c9f8d6b5-x2k4q",
            "generateName": "web-7c9f8d6b5-",
            "namespace": "demo",
            "uid": "5f0c7a3e-9a51-4a43-8f0e-3b1f1b7d2c11",
            "resourceVersion": "48213",
            "generation": 1,
            "creationTimestamp": "2025-05-06T09:12:44Z",
            "labels": {
                "app": "web",
                "pod-template-hash": "7c9f8d6b5",
                "liqo.io/shadowPod": "true",
            },
            "annotations": {"kubectl.kubernetes.io/restartedAt": "2025-05-06T09:12:40Z"},
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "ReplicaSet",
                    "name": "web-7c9f8d6b5",
                    "uid": "0c2d7f0e-1d0b-4b7e-a1a4-8f5f2e0f6a90",
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
            "managedFields": [
                {
                    "manager": "kube-controller-manager",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2025-05-06T09:12:44Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}},
                }
            ],
        },
        "spec": {
            "affinity": {
                "nodeAffinity": {
                    "requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [
                            {
                                "matchExpressions": [
                                    {
                                        "key": "liqo.io/type",
                                        "operator": "In",
                                        "values": ["virtual-node"],
                                    }
                                ]
                            }
                        ]
                    }
                }
            },
            "containers": [
                {
                    "name": "web",
                    "image": "nginx:1.27",
                    "imagePullPolicy": "IfNotPresent",
                    "ports": [{"containerPort": 80, "name": "http", "protocol": "TCP"}],
                    "env": [
                        {
                            "name": "SERVICE_ACCOUNT",
                            "valueFrom": {
                                "fieldRef": {
                                    "apiVersion": "v1",
                                    "fieldPath": "spec.serviceAccountName",
                                }
                            },
                        },
                        {
                            "name": "POD_NAME",
                            "valueFrom": {
                                "fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}
                            },
                        },
                    ],
                    "resources": {
                        "limits": {"memory": "128Mi"},
                        "requests": {"cpu": "100m", "memory": "64Mi"},
                    },
                    "terminationMessagePath": "/dev/termination-log",
                    "terminationMessagePolicy": "File",
                    "volumeMounts": [
                        {
                            "mountPath": "/var/run/secrets/kubernetes.io/serviceaccount",
                            "name": "kube-api-access-7xk2p",
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "dnsPolicy": "ClusterFirst",
            "enableServiceLinks": True,
            "nodeName": NODE,
            "preemptionPolicy": "PreemptLowerPriority",
            "priority": 0,
            "restartPolicy": "Always",
            "schedulerName": "default-scheduler",
            "securityContext": {},
            "serviceAccount": "web",
            "serviceAccountName": "web",
            "terminationGracePeriodSeconds": 30,
            "tolerations": [VIRTUAL_NODE_TOLERATION, NOT_READY_TOLERATION, UNREACHABLE_TOLERATION],
            "volumes": [
                {
                    "name": "kube-api-access-7xk2p",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                            {
                                "downwardAPI": {
                                    "items": [
                                        {
                                            "fieldRef": {
                                                "apiVersion": "v1",
                                                "fieldPath": "metadata.namespace",
                                            },
                                            "path": "namespace",
                                        }
                                    ]
                                }
                            },
                        ],
                    },
                }
            ],
        },
        "status": {
            "phase": "Pending",
            "qosClass": "Burstable",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "True",
                    "lastProbeTime": None,
                    "lastTransitionTime": "2025-05-06T09:12:44Z",
                    "observedGeneration": 1,
                }
            ],
        },
    }


def forge(pod: JSON | None = None, **options: Any) -> JSON:
    return forge_remote_pod(
        local_pod() if pod is None else pod,
        remote_namespace=REMOTE_NAMESPACE,
        local_cluster_id=HOME,
        remote_cluster_id=PROVIDER,
        node_name=NODE,
        **options,
    )


def as_created_by_provider(remote: JSON) -> JSON:
    """`remote` as the provider's API server stores it and its kubelet reports it: defaults,
    a CNI's annotations, and a running status."""
    pod = copy.deepcopy(remote)
    pod["metadata"].update(
        uid="b8d3c1f2-3e4a-4c55-9d6e-7f8a9b0c1d2e",
        resourceVersion="901",
        generation=1,
        creationTimestamp="2025-05-06T09:12:45Z",
    )
    pod["metadata"].setdefault("annotations", {}).update(
        {
            "cni.projectcalico.org/containerID": "4f1a9d",
            "cni.projectcalico.org/podIP": "10.244.1.17/32",
        }
    )
    pod["spec"].update(
        nodeName="provider-worker-1",
        schedulerName="default-scheduler",
        serviceAccount="default",
        serviceAccountName="default",
        priority=0,
        preemptionPolicy="PreemptLowerPriority",
    )
    pod["status"] = running_status()
    return pod


def condition(kind: str, status: str = "True", **extra: Any) -> JSON:
    return {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": "2025-05-06T09:12:50Z",
        **extra,
    }


def running_status() -> JSON:
    return {
        "phase": "Running",
        "observedGeneration": 1,
        "conditions": [
            condition("PodReadyToStartContainers", observedGeneration=1),
            condition("Initialized", observedGeneration=1),
            condition("Ready", observedGeneration=1),
            condition("ContainersReady", observedGeneration=1),
            condition("PodScheduled", observedGeneration=1),
        ],
        "hostIP": "172.18.0.3",
        "hostIPs": [{"ip": "172.18.0.3"}],
        "podIP": "10.244.1.17",
        "podIPs": [{"ip": "10.244.1.17"}, {"ip": "fd00:10:244:1::11"}],
        "startTime": "2025-05-06T09:12:45Z",
        "qosClass": "Burstable",
        "containerStatuses": [
            {
                "name": "web",
                "image": "docker.io/library/nginx:1.27",
                "imageID": "docker.io/library/nginx@sha256:6784fb0834aa",
                "containerID": "containerd://1f2e3d4c5b6a",
                "ready": True,
                "started": True,
                "restartCount": 2,
                "lastState": {},
                "state": {"running": {"startedAt": "2025-05-06T09:12:49Z"}},
            }
        ],
    }


def running_remote_pod() -> JSON:
    return as_created_by_provider(forge())


# --- Ownership ---------------------------------------------------------------------------


def test_ownership_labels_are_liqos_origin_destination_and_node_name() -> None:
    assert ownership_labels(HOME, PROVIDER, NODE) == {
        "offloading.liqo.io/origin": HOME,
        "offloading.liqo.io/destination": PROVIDER,
        "offloading.liqo.io/nodename": NODE,
    }
    assert ownership_labels(HOME, PROVIDER) == {
        "offloading.liqo.io/origin": HOME,
        "offloading.liqo.io/destination": PROVIDER,
    }


@pytest.mark.parametrize(
    ("labels", "ours"),
    [
        ({ORIGIN_LABEL: HOME, DESTINATION_LABEL: PROVIDER, NODENAME_LABEL: NODE}, True),
        # Another virtual kubelet of ours towards the same provider: still ours.
        ({ORIGIN_LABEL: HOME, DESTINATION_LABEL: PROVIDER, NODENAME_LABEL: "other"}, True),
        ({ORIGIN_LABEL: HOME, DESTINATION_LABEL: PROVIDER}, True),
        (None, False),
        ({}, False),
        ({"app": "web"}, False),
        ({ORIGIN_LABEL: HOME}, False),
        ({DESTINATION_LABEL: PROVIDER}, False),
        ({ORIGIN_LABEL: "another-consumer", DESTINATION_LABEL: PROVIDER}, False),
        ({ORIGIN_LABEL: HOME, DESTINATION_LABEL: "another-provider"}, False),
    ],
)
def test_object_without_ownership_labels_is_not_ours(
    labels: dict[str, str] | None, ours: bool
) -> None:
    remote = {"metadata": {"name": "web", "labels": labels}}

    assert is_owned_by_us(remote, HOME, PROVIDER) is ours


def test_a_pod_we_forged_is_ours() -> None:
    assert is_owned_by_us(forge(), HOME, PROVIDER)
    assert not is_owned_by_us(forge(), PROVIDER, HOME)


# --- The remote pod: metadata --------------------------------------------------------------


def test_remote_pod_is_a_plain_v1_pod_with_the_same_name_in_the_mapped_namespace() -> None:
    remote = forge()

    assert remote["apiVersion"] == "v1"
    assert remote["kind"] == "Pod"
    assert remote["metadata"]["name"] == "web-7c9f8d6b5-x2k4q"
    assert remote["metadata"]["namespace"] == REMOTE_NAMESPACE
    json.dumps(remote)  # plain JSON, ready for the API


def test_remote_pod_has_nothing_the_api_server_or_the_local_cluster_owns() -> None:
    remote = forge()

    assert set(remote) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(remote["metadata"]) == {"name", "namespace", "labels", "annotations"}


def test_remote_pod_carries_the_local_labels_and_ours_but_not_the_offloaded_marker() -> None:
    assert forge()["metadata"]["labels"] == {
        "app": "web",
        "pod-template-hash": "7c9f8d6b5",
        ORIGIN_LABEL: HOME,
        DESTINATION_LABEL: PROVIDER,
        NODENAME_LABEL: NODE,
    }


def test_ownership_labels_win_over_local_labels_with_the_same_keys() -> None:
    pod = local_pod()
    # A pod that is itself offloaded from a third cluster, offloaded again.
    pod["metadata"]["labels"].update(
        {ORIGIN_LABEL: "rome", DESTINATION_LABEL: HOME, NODENAME_LABEL: "venice-node"}
    )

    labels = forge(pod)["metadata"]["labels"]

    assert (labels[ORIGIN_LABEL], labels[DESTINATION_LABEL], labels[NODENAME_LABEL]) == (
        HOME,
        PROVIDER,
        NODE,
    )


LOCAL_UID = {"shadowpod.vk.io/local-pod-uid": "5f0c7a3e-9a51-4a43-8f0e-3b1f1b7d2c11"}


def test_remote_pod_keeps_the_local_annotations_and_records_the_local_uid() -> None:
    assert forge()["metadata"]["annotations"] == {
        "kubectl.kubernetes.io/restartedAt": "2025-05-06T09:12:40Z",
        **LOCAL_UID,
    }


def test_remote_pod_has_only_the_local_uid_when_the_local_one_has_no_annotations() -> None:
    pod = local_pod()
    del pod["metadata"]["annotations"]

    assert forge(pod)["metadata"]["annotations"] == LOCAL_UID
    assert local_pod_uid(forge(pod)) == pod["metadata"]["uid"]
    assert local_pod_uid({"metadata": {}}) is None  # made by an older vk


def test_the_local_uid_cannot_be_forged_by_a_local_annotation() -> None:
    pod = local_pod()
    pod["metadata"]["annotations"]["shadowpod.vk.io/local-pod-uid"] = "someone-elses"
    assert local_pod_uid(forge(pod)) == pod["metadata"]["uid"]


def test_labels_and_annotations_the_virtual_node_does_not_reflect_are_dropped() -> None:
    pod = local_pod()
    pod["metadata"]["annotations"]["metallb.universe.tf/address-pool"] = "public"
    patch = {
        "labelsNotReflected": ["pod-template-hash"],
        "annotationsNotReflected": ["metallb.universe.tf/address-pool"],
    }

    metadata = forge(pod, offloading_patch=patch)["metadata"]

    assert "pod-template-hash" not in metadata["labels"]
    assert metadata["labels"]["app"] == "web"
    assert metadata["annotations"] == {
        "kubectl.kubernetes.io/restartedAt": "2025-05-06T09:12:40Z",
        **LOCAL_UID,
    }


# --- The remote pod: spec ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("nodeName", NODE),
        ("nodeSelector", {"liqo.io/type": "virtual-node"}),
        ("affinity", {"podAntiAffinity": {}}),
        ("schedulerName", "default-scheduler"),
        ("priority", 1000),
        ("priorityClassName", "high"),
        ("preemptionPolicy", "Never"),
        ("schedulingGates", [{"name": "wait"}]),
        ("overhead", {"cpu": "10m"}),
        ("runtimeClassName", "liqo"),
        ("serviceAccount", "web"),
        ("ephemeralContainers", [{"name": "debug", "image": "busybox"}]),
        ("os", {"name": "linux"}),
    ],
)
def test_remote_pod_drops_node_name_and_scheduling_fields(field: str, value: Any) -> None:
    pod = local_pod()
    pod["spec"][field] = value

    assert field not in forge(pod)["spec"]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("restartPolicy", "OnFailure"),
        ("dnsPolicy", "None"),
        ("dnsConfig", {"nameservers": ["1.1.1.1"], "options": [{"name": "ndots", "value": "2"}]}),
        ("enableServiceLinks", False),
        ("hostAliases", [{"ip": "10.1.2.3", "hostnames": ["db.local"]}]),
        ("hostname", "web-0"),
        ("subdomain", "web"),
        ("setHostnameAsFQDN", True),
        ("shareProcessNamespace", True),
        ("imagePullSecrets", [{"name": "registry"}]),
        ("readinessGates", [{"conditionType": "example.com/ready"}]),
        ("securityContext", {"runAsNonRoot": True, "fsGroup": 2000}),
        ("terminationGracePeriodSeconds", 45),
        ("activeDeadlineSeconds", 600),
        ("hostUsers", False),
        (
            "topologySpreadConstraints",
            [
                {
                    "maxSkew": 1,
                    "topologyKey": "topology.kubernetes.io/zone",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {"app": "web"}},
                }
            ],
        ),
    ],
)
def test_remote_pod_keeps_what_the_workload_needs(field: str, value: Any) -> None:
    pod = local_pod()
    pod["spec"][field] = value

    assert forge(pod)["spec"][field] == value


def test_remote_pod_keeps_containers_as_they_are_but_the_service_account_name_env() -> None:
    pod = local_pod()
    pod["spec"]["initContainers"] = [
        {"name": "init", "image": "busybox:1.36", "command": ["true"]},
    ]

    spec = forge(pod)["spec"]

    assert spec["initContainers"] == pod["spec"]["initContainers"]
    container = spec["containers"][0]
    expected = copy.deepcopy(pod["spec"]["containers"][0])
    expected["env"][0] = {"name": "SERVICE_ACCOUNT", "value": "web"}
    assert container == expected


def test_remote_pod_keeps_user_tolerations_but_not_the_virtual_node_one() -> None:
    pod = local_pod()
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    pod["spec"]["tolerations"].append(gpu)

    assert forge(pod)["spec"]["tolerations"] == [
        NOT_READY_TOLERATION,
        UNREACHABLE_TOLERATION,
        gpu,
    ]


def test_remote_pod_without_tolerations_left_has_no_tolerations_field() -> None:
    pod = local_pod()
    pod["spec"]["tolerations"] = [VIRTUAL_NODE_TOLERATION]

    assert "tolerations" not in forge(pod)["spec"]


@pytest.mark.parametrize("field", ["hostNetwork", "hostIPC", "hostPID"])
def test_remote_pod_never_uses_the_providers_host_namespaces(field: str) -> None:
    pod = local_pod()
    pod["spec"][field] = True

    assert forge(pod)["spec"][field] is False


def test_remote_pod_does_not_depend_on_a_service_account_token() -> None:
    spec = forge()["spec"]

    assert spec["automountServiceAccountToken"] is False
    assert "serviceAccountName" not in spec
    assert spec["volumes"] == [
        {
            "name": "kube-api-access-7xk2p",
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "fieldRef": {
                                        "apiVersion": "v1",
                                        "fieldPath": "metadata.namespace",
                                    },
                                    "path": "namespace",
                                }
                            ]
                        }
                    },
                ],
            },
        }
    ]
    # The mount stays, so the container finds the CA and the namespace where it expects them.
    assert (
        spec["containers"][0]["volumeMounts"]
        == local_pod()["spec"]["containers"][0]["volumeMounts"]
    )


def test_every_projected_token_goes_not_only_kube_api_access() -> None:
    pod = local_pod()
    pod["spec"]["volumes"].append(
        {
            "name": "vault-token",
            "projected": {
                "sources": [{"serviceAccountToken": {"audience": "vault", "path": "token"}}]
            },
        }
    )

    volumes = {v["name"]: v for v in forge(pod)["spec"]["volumes"]}

    assert volumes["vault-token"]["projected"]["sources"] == []


@pytest.mark.parametrize(
    ("reflected", "config_map"),
    [(False, "kube-root-ca.crt"), (True, "kube-root-ca.crt.venic")],
)
def test_root_ca_is_the_reflected_copy_only_once_config_maps_are_reflected(
    reflected: bool, config_map: str
) -> None:
    sources = forge(root_ca_reflected=reflected)["spec"]["volumes"][0]["projected"]["sources"]

    assert sources[0]["configMap"]["name"] == config_map


@pytest.mark.parametrize(
    ("cluster_id", "name"),
    [
        ("venice", "kube-root-ca.crt.venic"),
        ("rome", "kube-root-ca.crt.rome"),
        ("cool-firefly", "kube-root-ca.crt.cool-a"),
        ("a1b2c3", "kube-root-ca.crt.a1b2c"),
    ],
)
def test_reflected_root_ca_is_named_after_the_consumer_as_liqo_names_it(
    cluster_id: str, name: str
) -> None:
    assert remote_root_ca_configmap_name(cluster_id) == name


@pytest.mark.parametrize(
    ("annotations", "service_account"),
    [
        ({"liqo.io/api-server-support": "remote"}, "web"),
        (
            {
                "liqo.io/api-server-support": "remote",
                "liqo.io/remote-service-account-name": "web-provider",
            },
            "web-provider",
        ),
    ],
)
def test_remote_api_server_support_runs_the_pod_with_a_provider_service_account(
    annotations: dict[str, str], service_account: str
) -> None:
    pod = local_pod()
    pod["metadata"]["annotations"].update(annotations)

    spec = forge(pod)["spec"]

    assert spec["serviceAccountName"] == service_account
    assert spec["automountServiceAccountToken"] is True
    assert spec["volumes"] == local_pod()["spec"]["volumes"]
    assert spec["containers"][0]["env"] == local_pod()["spec"]["containers"][0]["env"]


def test_disabled_api_server_support_annotation_is_the_default_behaviour() -> None:
    pod = local_pod()
    pod["metadata"]["annotations"]["liqo.io/api-server-support"] = "disabled"

    assert forge(pod)["spec"] == forge()["spec"]


@pytest.mark.parametrize(
    ("annotation", "pod_class", "patch_class", "expected"),
    [
        (None, None, None, None),
        (None, "liqo", None, None),
        (None, "gvisor", None, "gvisor"),
        (None, "liqo", "kata", "kata"),
        (None, "gvisor", "kata", "gvisor"),
        (None, None, "liqo", None),
        ("runc", "gvisor", "kata", "runc"),
    ],
)
def test_remote_runtime_class_follows_liqos_order(
    annotation: str | None, pod_class: str | None, patch_class: str | None, expected: str | None
) -> None:
    pod = local_pod()
    if annotation:
        pod["metadata"]["annotations"]["liqo.io/remote-runtime-class-name"] = annotation
    if pod_class:
        pod["spec"]["runtimeClassName"] = pod_class
    patch = {"runtimeClassName": patch_class} if patch_class else None

    assert forge(pod, offloading_patch=patch)["spec"].get("runtimeClassName") == expected


def test_offloading_patch_places_the_pod_in_the_provider() -> None:
    dedicated = {
        "key": "dedicated",
        "operator": "Equal",
        "value": "tenants",
        "effect": "NoSchedule",
    }
    node_affinity = {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["tenants"]}]}
            ]
        }
    }
    patch = {
        "nodeSelector": {"kubernetes.io/arch": "amd64"},
        "tolerations": [dedicated],
        "affinity": {"nodeAffinity": node_affinity},
    }

    spec = forge(offloading_patch=patch)["spec"]

    assert spec["nodeSelector"] == {"kubernetes.io/arch": "amd64"}
    assert spec["tolerations"] == [NOT_READY_TOLERATION, UNREACHABLE_TOLERATION, dedicated]
    assert spec["affinity"] == {"nodeAffinity": node_affinity}


SPREAD_TERM_LABELS = {"app": "web", NODENAME_LABEL: NODE}


@pytest.mark.parametrize(
    ("annotations", "anti_affinity"),
    [
        (
            {"liqo.io/anti-affinity-preset": "soft"},
            {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 1,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": SPREAD_TERM_LABELS},
                        },
                    }
                ]
            },
        ),
        (
            {"liqo.io/anti-affinity-preset": "hard"},
            {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": SPREAD_TERM_LABELS},
                    }
                ]
            },
        ),
        (
            {"liqo.io/anti-affinity-preset": "hard", "liqo.io/anti-affinity-labels": "app"},
            {
                "requiredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "topologyKey": "kubernetes.io/hostname",
                        "labelSelector": {"matchLabels": {"app": "web"}},
                    }
                ]
            },
        ),
    ],
)
def test_anti_affinity_presets_spread_the_pods_in_the_provider(
    annotations: dict[str, str], anti_affinity: JSON
) -> None:
    pod = local_pod()
    pod["metadata"]["annotations"].update(annotations)

    assert forge(pod)["spec"]["affinity"] == {"podAntiAffinity": anti_affinity}


def test_propagate_preset_keeps_the_pods_own_anti_affinity_and_nothing_else() -> None:
    pod = local_pod()
    anti = {
        "requiredDuringSchedulingIgnoredDuringExecution": [
            {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"a": "b"}}}
        ]
    }
    pod["spec"]["affinity"]["podAntiAffinity"] = anti
    pod["metadata"]["annotations"]["liqo.io/anti-affinity-preset"] = "propagate"

    assert forge(pod)["spec"]["affinity"] == {"podAntiAffinity": anti}


def test_anti_affinity_preset_and_offloading_patch_node_affinity_both_apply() -> None:
    pod = local_pod()
    pod["metadata"]["annotations"]["liqo.io/anti-affinity-preset"] = "soft"
    node_affinity = {"preferredDuringSchedulingIgnoredDuringExecution": []}

    affinity = forge(pod, offloading_patch={"affinity": {"nodeAffinity": node_affinity}})["spec"][
        "affinity"
    ]

    assert set(affinity) == {"podAntiAffinity", "nodeAffinity"}


def test_forging_leaves_the_local_pod_untouched() -> None:
    pod = local_pod()
    pod["metadata"]["annotations"]["liqo.io/anti-affinity-preset"] = "propagate"
    before = copy.deepcopy(pod)

    remote = forge(pod, root_ca_reflected=True)
    remote["spec"]["containers"][0]["image"] = "changed"

    assert pod == before


# --- Updating the remote pod -------------------------------------------------------------


def desired(local: JSON, **options: Any) -> JSON:
    """What `local` asks of its ShadowPod, as the pod reflector works it out."""
    return desired_remote_pod(
        local, local_cluster_id=HOME, remote_cluster_id=PROVIDER, node_name=NODE, **options
    )


def update(local: JSON, remote: JSON, **options: Any) -> JSON | None:
    """The patch bringing `remote` in line with `local`, as the pod reflector makes it."""
    return live_pod_patch(desired(local, **options), remote)


def test_remote_pod_needs_no_update_as_the_provider_created_and_ran_it() -> None:
    assert update(local_pod(), running_remote_pod()) is None


def test_changed_and_added_labels_and_annotations_are_patched() -> None:
    pod = local_pod()
    pod["metadata"]["labels"]["app"] = "web-canary"
    pod["metadata"]["labels"]["track"] = "canary"
    pod["metadata"]["annotations"]["note"] = "hello"

    assert update(pod, running_remote_pod()) == {
        "metadata": {
            "labels": {"app": "web-canary", "track": "canary"},
            "annotations": {"note": "hello"},
        }
    }


def test_keys_the_provider_added_or_the_local_pod_lost_are_left_alone() -> None:
    pod = local_pod()
    del pod["metadata"]["labels"]["pod-template-hash"]
    del pod["metadata"]["annotations"]["kubectl.kubernetes.io/restartedAt"]

    assert update(pod, running_remote_pod()) is None


def test_ownership_labels_are_put_back_in_an_update() -> None:
    remote = running_remote_pod()
    remote["metadata"]["labels"][NODENAME_LABEL] = "stale"

    assert update(local_pod(), remote) == {"metadata": {"labels": {NODENAME_LABEL: NODE}}}


def test_labels_not_reflected_are_not_patched() -> None:
    pod = local_pod()
    pod["metadata"]["labels"]["pod-template-hash"] = "new"

    assert (
        update(
            pod,
            running_remote_pod(),
            offloading_patch={"labelsNotReflected": ["pod-template-hash"]},
        )
        is None
    )


def test_image_change_is_patched_on_the_remote_containers() -> None:
    pod = local_pod()
    pod["spec"]["containers"][0]["image"] = "nginx:1.28"
    remote = running_remote_pod()
    # What the provider's admission added (a LimitRange) is kept in the whole list sent back.
    remote["spec"]["containers"][0]["resources"]["limits"]["cpu"] = "500m"

    patch = update(pod, remote)

    expected = copy.deepcopy(remote["spec"]["containers"])
    expected[0]["image"] = "nginx:1.28"
    assert patch == {"spec": {"containers": expected}}


def shadow_of(remote: JSON) -> JSON:
    return {
        "metadata": remote["metadata"],
        "spec": {"pod": remote["spec"]},
        "status": {"phase": "Running"},
    }


def test_a_shadow_pod_as_cached_decides_every_update_as_the_whole_one_does() -> None:
    """The cache keeps a ShadowPod's metadata, status and the spec fields a live pod may
    change, as compared with its local pod: every decision taken on it is the one the whole
    ShadowPod gives, but for a container patch, which is flagged to be built on the whole
    one."""
    pod = local_pod()
    pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox:1.36"}]
    pod["spec"]["activeDeadlineSeconds"] = 600
    whole = shadow_of(as_created_by_provider(forge(pod)))
    cached = shadow_pod_as_read(whole, desired(pod))

    metadata = whole["metadata"]
    assert cached["metadata"] == {
        **{key: metadata[key] for key in ("name", "namespace", "uid", "resourceVersion")},
        "labels": desired(pod)["metadata"]["labels"],
        "annotations": desired(pod)["metadata"]["annotations"],
    }
    assert cached["status"] == whole["status"]
    assert set(cached["spec"]["pod"]) == {
        "containers",
        "initContainers",
        "activeDeadlineSeconds",
        "tolerations",
        "terminationGracePeriodSeconds",
    }
    assert cached["spec"]["pod"]["containers"] == [
        {"name": c["name"], "image": c["image"]} for c in whole["spec"]["pod"]["containers"]
    ]
    changed = copy.deepcopy(pod)
    changed["metadata"]["labels"]["tier"] = "gold"
    changed["metadata"]["labels"]["app"] = "web-canary-of-a-longer-name"
    changed["metadata"]["annotations"]["note"] = "hello"
    changed["spec"]["activeDeadlineSeconds"] = 300
    changed["spec"]["tolerations"] = [{"key": "gpu", "operator": "Exists"}]
    for local in (pod, changed):
        on_cached = shadow_pod_patch(update(local, shadow_pod_as_pod(cached)))
        on_whole = shadow_pod_patch(update(local, shadow_pod_as_pod(whole)))
        assert on_cached == on_whole
        assert not patches_containers(on_cached)
    changed["spec"]["containers"][0]["image"] = "nginx:1.28"
    on_cached = shadow_pod_patch(update(changed, shadow_pod_as_pod(cached)))
    assert patches_containers(on_cached)
    on_whole = shadow_pod_patch(update(changed, shadow_pod_as_pod(whole)))
    assert on_whole["spec"]["pod"]["containers"][0] == {
        **whole["spec"]["pod"]["containers"][0],
        "image": "nginx:1.28",
    }


def bloated_by_the_provider(shadow: JSON) -> JSON:
    """`shadow` as a provider turned attacker rewrites it: a megabyte and more of labels,
    annotations, status and spec of its own, and the pod's own label and image made huge."""
    bloated = copy.deepcopy(shadow)
    metadata, spec = bloated["metadata"], bloated["spec"]["pod"]
    metadata["labels"].update({f"ballast.example/{i}": "x" * 63 for i in range(2000)})
    metadata["labels"]["app"] = "web" + "x" * 100_000
    metadata["annotations"]["ballast"] = "x" * 250 * 1024
    spec["containers"][0]["image"] += "x" * 100_000
    spec["containers"] += [{"name": f"extra-{i}", "image": "x" * 1000} for i in range(100)]
    spec["tolerations"] += [{"key": f"k{i}", "operator": "Exists"} for i in range(1000)]
    spec["tolerations"].append({"key": "x" * 100_000, "operator": "Exists"})
    spec["terminationGracePeriodSeconds"] = "x" * 100_000
    bloated["status"] = {
        "phase": "Running",
        "ballast": "x" * 100_000,
        "conditions": [
            {
                "type": "PodCreated",
                "status": "False",
                "reason": "Refused" + "x" * 100_000,
                "message": "m" * 500_000,
                "ballast": "x" * 100_000,
            },
            *({"type": f"Ballast{i}", "status": "True"} for i in range(1000)),
        ],
    }
    return bloated


def test_what_a_provider_writes_into_a_shadow_pod_is_kept_no_larger_than_its_local_pod() -> None:
    """Ten thousand ShadowPods, each rewritten by the provider to a megabyte and a half, would
    be 15 GiB in a virtual kubelet: kept, each is what its local pod asks of it, and a few
    bounded words of the provider's, whatever the provider wrote. The decisions taken on it
    stay those the whole one gives."""
    pod = local_pod()
    clean = shadow_of(as_created_by_provider(forge(pod)))
    whole = bloated_by_the_provider(clean)

    cached = shadow_pod_as_read(whole, desired(pod))

    assert len(json.dumps(whole)) > 1_500_000
    assert len(json.dumps(cached)) < len(json.dumps(shadow_pod_as_read(clean, desired(pod)))) + 3000
    assert cached["metadata"]["labels"]["app"] == "webx"  # told apart from "web", no more
    assert (
        cached["spec"]["pod"]["containers"][0]["image"]
        == pod["spec"]["containers"][0]["image"] + "x"
    )
    assert "terminationGracePeriodSeconds" not in cached["spec"]["pod"]
    assert cached["status"] == {
        "phase": "Running",
        "conditions": [
            {
                "type": "PodCreated",
                "status": "False",
                "reason": ("Refused" + "x" * 200)[:128],
                "message": "m" * 2048,
            }
        ],
    }
    # The local pod's label is put back, as on the whole one, and its image flagged to be,
    # on the whole one read afresh; the provider's own keys and tolerations are left alone.
    on_cached = shadow_pod_patch(update(pod, shadow_pod_as_pod(cached)))
    on_whole = shadow_pod_patch(update(pod, shadow_pod_as_pod(whole)))
    assert on_cached is not None
    assert on_whole is not None
    assert on_cached["metadata"] == on_whole["metadata"] == {"labels": {"app": "web"}}
    assert patches_containers(on_cached)
    assert patches_containers(on_whole)
    assert set(on_cached["spec"]["pod"]) == set(on_whole["spec"]["pod"]) == {"containers"}


def test_a_shadow_pod_of_no_known_local_pod_is_kept_as_whose_it_is() -> None:
    """Its local pod gone (an orphan to delete) or not seen yet: what says whose it is and
    which pod it stood for is kept, and nothing else of its metadata."""
    whole = bloated_by_the_provider(shadow_of(as_created_by_provider(forge())))
    whole["metadata"]["annotations"][LOCAL_POD_UID_ANNOTATION] = "u" * 100_000

    cached = shadow_pod_as_read(
        whole, {"metadata": {"labels": ownership_labels(HOME, PROVIDER, NODE)}}
    )

    assert is_owned_by_us(cached, HOME, PROVIDER)
    assert cached["metadata"]["labels"] == ownership_labels(HOME, PROVIDER, NODE)
    assert cached["metadata"]["annotations"] == {LOCAL_POD_UID_ANNOTATION: "u" * 64}
    assert cached["spec"]["pod"]["containers"] == []
    assert len(cached["spec"]["pod"]["tolerations"]) == 16


@pytest.mark.parametrize("containers", [["app", 3, None, {"name": ["app"]}], "app", 7, None])
@pytest.mark.parametrize("metadata", [{"labels": "junk", "annotations": ["junk"]}, {}])
def test_a_shadow_pod_a_provider_mangled_is_cached_without_raising(
    containers: Any, metadata: JSON
) -> None:
    """The provider may write anything in `spec.pod` (the CRD checks nothing there), and any
    metadata and status its own API server lets through: the cache's keep function runs in the
    informer, where a raise would stop the whole twin namespace's cache."""
    whole = shadow_of(as_created_by_provider(forge()))
    whole["metadata"].update(metadata)
    whole["spec"]["pod"]["containers"] = containers
    whole["spec"]["pod"]["initContainers"] = [{"name": "init", "image": "busybox"}, "junk"]
    whole["spec"]["pod"]["tolerations"] = ["junk", {"key": ["k"]}, {"key": "k"}]
    whole["status"] = {"phase": ["Running"], "conditions": ["junk", {"type": ["PodCreated"]}]}
    pod = local_pod()
    pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox"}]

    cached = shadow_pod_as_read(whole, desired(pod))

    if isinstance(containers, list):
        assert cached["spec"]["pod"]["containers"] == []
    else:
        assert "containers" not in cached["spec"]["pod"]
    assert cached["spec"]["pod"]["initContainers"] == [{"name": "init", "image": "busybox"}]
    assert cached["spec"]["pod"]["tolerations"] == [{"key": "k"}]
    assert cached["status"] == {"conditions": []}
    assert shadow_pod_patch(update(pod, shadow_pod_as_pod(cached))) is not None


def test_init_container_image_change_is_patched() -> None:
    pod = local_pod()
    pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox:1.36"}]
    remote = as_created_by_provider(forge(pod))
    pod["spec"]["initContainers"][0]["image"] = "busybox:1.37"

    assert update(pod, remote) == {
        "spec": {"initContainers": [{"name": "init", "image": "busybox:1.37"}]}
    }


@pytest.mark.parametrize(
    ("local_deadline", "remote_deadline", "patch"),
    [
        (600, None, {"spec": {"activeDeadlineSeconds": 600}}),
        (300, 600, {"spec": {"activeDeadlineSeconds": 300}}),
        (600, 600, None),
        (None, None, None),
    ],
)
def test_active_deadline_change_is_patched(
    local_deadline: int | None, remote_deadline: int | None, patch: JSON | None
) -> None:
    pod = local_pod()
    remote = running_remote_pod()
    if local_deadline is not None:
        pod["spec"]["activeDeadlineSeconds"] = local_deadline
    if remote_deadline is not None:
        remote["spec"]["activeDeadlineSeconds"] = remote_deadline

    assert update(pod, remote) == patch


def test_added_toleration_is_appended_to_the_remote_ones() -> None:
    pod = local_pod()
    gpu = {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    pod["spec"]["tolerations"].append(gpu)
    remote = running_remote_pod()
    provider_added = {"key": "tenant", "operator": "Exists", "effect": "NoSchedule"}
    remote["spec"]["tolerations"].append(provider_added)

    assert update(pod, remote) == {
        "spec": {"tolerations": [NOT_READY_TOLERATION, UNREACHABLE_TOLERATION, provider_added, gpu]}
    }


def test_changed_toleration_seconds_replace_the_existing_toleration() -> None:
    pod = local_pod()
    pod["spec"]["tolerations"][1] = {**NOT_READY_TOLERATION, "tolerationSeconds": 30}

    assert update(pod, running_remote_pod()) == {
        "spec": {
            "tolerations": [
                {**NOT_READY_TOLERATION, "tolerationSeconds": 30},
                UNREACHABLE_TOLERATION,
            ]
        }
    }


def test_two_changed_tolerations_do_not_take_the_same_remote_one() -> None:
    pod = local_pod()
    pod["spec"]["tolerations"][1] = {**NOT_READY_TOLERATION, "tolerationSeconds": 30}
    pod["spec"]["tolerations"].append({**NOT_READY_TOLERATION, "tolerationSeconds": 60})
    remote = running_remote_pod()

    patch = update(pod, remote)

    assert patch == {
        "spec": {
            "tolerations": [
                {**NOT_READY_TOLERATION, "tolerationSeconds": 30},
                UNREACHABLE_TOLERATION,
                {**NOT_READY_TOLERATION, "tolerationSeconds": 60},
            ]
        }
    }
    remote["spec"]["tolerations"] = patch["spec"]["tolerations"]
    assert update(pod, remote) is None


def test_tolerations_differing_only_in_seconds_settle_after_one_patch() -> None:
    pod = local_pod()
    pod["spec"]["tolerations"].append({**NOT_READY_TOLERATION, "tolerationSeconds": 30})
    remote = running_remote_pod()

    patch = update(pod, remote)
    assert patch is not None
    remote["spec"]["tolerations"] = patch["spec"]["tolerations"]

    assert update(pod, remote) is None


# --- Deleting the remote pod -------------------------------------------------------------


@pytest.mark.parametrize(
    ("deletion_grace", "termination_grace", "expected"),
    [
        (10, 30, 10),
        (0, 30, 0),
        (None, 30, 30),
        (None, 0, 0),
        (None, None, None),
    ],
)
def test_remote_deletion_honours_the_local_grace_period(
    deletion_grace: int | None, termination_grace: int | None, expected: int | None
) -> None:
    pod = local_pod()
    pod["metadata"]["deletionTimestamp"] = "2025-05-06T10:00:00Z"
    if deletion_grace is not None:
        pod["metadata"]["deletionGracePeriodSeconds"] = deletion_grace
    if termination_grace is None:
        del pod["spec"]["terminationGracePeriodSeconds"]
    else:
        pod["spec"]["terminationGracePeriodSeconds"] = termination_grace

    assert deletion_grace_period(pod) == expected


# --- Status back to the local pod --------------------------------------------------------


def local_status(remote: JSON | None = None, local: JSON | None = None, **options: Any) -> JSON:
    return forge_local_pod_status(
        running_remote_pod() if remote is None else remote,
        local_pod() if local is None else local,
        node_ip=NODE_IP,
        **options,
    )


@pytest.mark.parametrize(
    "field",
    [
        "phase",
        "podIP",
        "podIPs",
        "startTime",
        "containerStatuses",
        "initContainerStatuses",
        "ephemeralContainerStatuses",
        "reason",
        "message",
        "resize",
    ],
)
def test_local_status_reports_what_the_provider_reports(field: str) -> None:
    remote = running_remote_pod()
    remote["status"].update(
        reason="Evicted",
        message="The node was low on resource: memory.",
        initContainerStatuses=[{"name": "init", "ready": True, "restartCount": 0}],
        ephemeralContainerStatuses=[{"name": "debugger", "ready": False, "restartCount": 0}],
        resize="InProgress",
    )

    assert local_status(remote)[field] == remote["status"][field]


def test_local_status_reports_virtual_node_ip_as_host_ip() -> None:
    status = local_status()

    assert status["hostIP"] == NODE_IP
    assert status["hostIPs"] == [{"ip": NODE_IP}]


def test_local_status_reports_no_host_ip_without_a_node_ip() -> None:
    status = forge_local_pod_status(running_remote_pod(), local_pod(), node_ip="")

    assert "hostIP" not in status
    assert "hostIPs" not in status


def test_local_status_reports_the_remote_pod_ips_as_assigned() -> None:
    status = local_status()

    assert status["podIP"] == "10.244.1.17"
    assert status["podIPs"] == [{"ip": "10.244.1.17"}, {"ip": "fd00:10:244:1::11"}]


def test_local_status_keeps_the_local_qos_class() -> None:
    remote = running_remote_pod()
    remote["status"]["qosClass"] = "Guaranteed"

    assert local_status(remote)["qosClass"] == "Burstable"


@pytest.mark.parametrize(("extra", "restarts"), [(0, 2), (1, 3), (4, 6)])
def test_local_status_counts_lost_remote_pods_as_restarts(extra: int, restarts: int) -> None:
    status = local_status(extra_restarts=extra)

    assert status["containerStatuses"][0]["restartCount"] == restarts


def test_local_status_shows_the_remote_conditions() -> None:
    kinds = [c["type"] for c in local_status()["conditions"]]

    assert kinds == [
        "PodReadyToStartContainers",
        "Initialized",
        "Ready",
        "ContainersReady",
        "PodScheduled",
    ]


def test_local_only_conditions_survive_but_stale_kubelet_ones_do_not() -> None:
    pod = local_pod()
    disruption = condition("DisruptionTarget", reason="EvictionByEvictionAPI")
    gate = condition("example.com/ready")
    pod["status"]["conditions"] += [disruption, gate, condition("Ready")]
    remote = running_remote_pod()
    # The remote pod was recreated and its kubelet has reported nothing yet.
    remote["status"] = {"phase": "Pending", "qosClass": "Burstable"}

    conditions = local_status(remote, pod)["conditions"]

    assert conditions == [pod["status"]["conditions"][0], disruption, gate]


def test_local_pod_scheduled_stays_until_the_provider_reports_its_own() -> None:
    remote = running_remote_pod()
    remote["status"] = {"phase": "Pending", "qosClass": "Burstable"}

    assert local_status(remote)["conditions"] == local_pod()["status"]["conditions"]


def test_remote_pod_scheduled_replaces_the_local_one() -> None:
    remote = running_remote_pod()
    unschedulable = condition(
        "PodScheduled", "False", reason="Unschedulable", message="0/3 nodes are available"
    )
    remote["status"] = {"phase": "Pending", "conditions": [unschedulable]}

    # With the local observedGeneration, which the API server would keep anyway.
    assert local_status(remote)["conditions"] == [{**unschedulable, "observedGeneration": 1}]


def test_status_of_a_remote_pod_without_one_keeps_the_local_phase() -> None:
    remote = running_remote_pod()
    del remote["status"]

    assert local_status(remote)["phase"] == "Pending"


@pytest.mark.parametrize(
    ("remote_generation", "remote_observed", "local_generation", "local_observed", "expected"),
    [
        # The remote pod is caught up: the local one is, as far as vk can tell.
        (1, 1, 1, None, 1),
        (3, 3, 2, 1, 2),
        # Not caught up: what the local status already says stays.
        (3, 2, 2, 1, 1),
        (3, 2, 2, None, None),
        # Nothing observed remotely (an older kubelet): nothing to report.
        (1, None, 1, None, None),
        (1, None, 2, 1, 1),
    ],
)
def test_observed_generation_is_reported_in_local_terms(
    remote_generation: int,
    remote_observed: int | None,
    local_generation: int,
    local_observed: int | None,
    expected: int | None,
) -> None:
    remote = running_remote_pod()
    remote["metadata"]["generation"] = remote_generation
    remote["status"]["observedGeneration"] = remote_observed
    for remote_condition in remote["status"]["conditions"]:
        remote_condition["observedGeneration"] = remote_observed
    pod = local_pod()
    pod["metadata"]["generation"] = local_generation
    pod["status"]["observedGeneration"] = local_observed
    pod["status"]["conditions"][0]["observedGeneration"] = local_observed

    status = local_status(remote, pod)

    assert status.get("observedGeneration") == expected
    scheduled = next(c for c in status["conditions"] if c["type"] == "PodScheduled")
    assert scheduled.get("observedGeneration") == expected


@pytest.mark.parametrize("remote_reports_ready", [True, False])
def test_pod_whose_provider_is_unavailable_is_not_ready(remote_reports_ready: bool) -> None:
    pod = local_pod()
    pod["metadata"]["labels"]["liqo.io/remote-unavailable"] = "true"
    remote = running_remote_pod()
    if not remote_reports_ready:
        remote["status"]["conditions"] = [
            c for c in remote["status"]["conditions"] if c["type"] != "Ready"
        ]

    ready = [c for c in local_status(remote, pod)["conditions"] if c["type"] == "Ready"]

    assert len(ready) == 1
    assert ready[0]["status"] == "False"


def test_forging_the_status_leaves_both_pods_untouched() -> None:
    remote, pod = running_remote_pod(), local_pod()
    pod["status"]["conditions"].append(condition("DisruptionTarget"))
    before = copy.deepcopy((remote, pod))

    status = local_status(remote, pod, extra_restarts=1)
    status["conditions"][-1]["status"] = "changed"

    assert (remote, pod) == before


# --- Writing the status only on change ---------------------------------------------------


def stored(status: JSON) -> JSON:
    """`status` as the API server stores and returns it: other key order, empties dropped."""

    def roundtrip(value: Any) -> Any:
        if isinstance(value, dict):
            kept = {k: roundtrip(v) for k, v in reversed(value.items())}
            return {k: v for k, v in kept.items() if v not in ("", [], {})}
        if isinstance(value, list):
            return [roundtrip(item) for item in value]
        return value

    return roundtrip(copy.deepcopy(status))


def test_status_update_is_skipped_when_nothing_changed() -> None:
    pod = local_pod()
    desired = local_status(local=pod)
    pod["status"] = stored(desired)

    assert not local_status_needs_update(pod, desired)
    # And the next reconcile, from the stored status, wants nothing new either.
    assert not local_status_needs_update(pod, local_status(local=pod))


def test_status_update_is_skipped_for_empty_fields_the_api_server_drops() -> None:
    pod = local_pod()
    desired = local_status(local=pod)
    pod["status"] = stored(desired)
    desired = {**desired, "message": "", "reason": None, "nominatedNodeName": ""}
    desired["containerStatuses"][0]["lastState"] = {}

    assert not local_status_needs_update(pod, desired)


def test_status_update_is_needed_for_a_new_pod() -> None:
    assert local_status_needs_update(local_pod(), local_status())


@pytest.mark.parametrize(
    "change",
    [
        lambda s: s.update(phase="Succeeded"),
        lambda s: s.update(podIP="10.244.1.18", podIPs=[{"ip": "10.244.1.18"}]),
        lambda s: s["conditions"][2].update(status="False"),
        lambda s: s["containerStatuses"][0].update(restartCount=3),
        lambda s: s["containerStatuses"][0].update(
            state={"terminated": {"exitCode": 0, "reason": "Completed"}}
        ),
        lambda s: s.update(message="Pod was terminated"),
    ],
)
def test_status_update_is_needed_when_the_remote_status_changed(change: Any) -> None:
    pod = local_pod()
    pod["status"] = stored(local_status(local=pod))
    remote = running_remote_pod()
    change(remote["status"])

    assert local_status_needs_update(pod, local_status(remote, pod))


@pytest.mark.parametrize(
    ("status", "worth"),
    [
        ({}, False),
        ({"phase": "Pending"}, False),
        ({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]}, False),
        (
            {
                "phase": "Pending",
                "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}
                ],
            },
            True,
        ),
        (
            {
                "phase": "Pending",
                "containerStatuses": [
                    {"name": "c", "state": {"waiting": {"reason": "ImagePullBackOff"}}}
                ],
            },
            True,
        ),
        ({"phase": "Running"}, True),
        ({"phase": "Failed"}, True),
    ],
)
def test_an_empty_pending_remote_status_is_not_worth_a_write(status: dict, worth: bool) -> None:
    assert status_worth_reporting({"status": status}) is worth


def test_status_patch_nulls_what_the_provider_no_longer_reports() -> None:
    local = {
        "status": {
            "phase": "Pending",
            "reason": "NamespaceNotOffloaded",
            "message": "m",
            "qosClass": "BestEffort",
        }
    }
    desired = {"phase": "Running", "qosClass": "BestEffort", "podIP": "10.0.0.1"}
    assert forge_status_patch(local, desired) == {
        "status": {
            "reason": None,
            "message": None,
            "phase": "Running",
            "qosClass": "BestEffort",
            "podIP": "10.0.0.1",
        }
    }


# --- Service account tokens of the consumer (token API) ------------------------------------

HOME_API_SERVER = ("venice-control-plane.example.com", 6443)


def test_token_api_projects_the_reflected_token_secret_in_place_of_the_token() -> None:
    spec = forge(service_account_tokens=True, root_ca_reflected=True)["spec"]

    assert spec["volumes"] == [
        {
            "name": "kube-api-access-7xk2p",
            "projected": {
                "defaultMode": 420,
                "sources": [
                    {
                        "secret": {
                            "name": "web-7c9f8d6b5-x2k4q-token",
                            "items": [{"key": "kube-api-access-7xk2p-3c469e", "path": "token"}],
                        }
                    },
                    {
                        "configMap": {
                            "name": "kube-root-ca.crt.venic",
                            "items": [{"key": "ca.crt", "path": "ca.crt"}],
                        }
                    },
                    {
                        "downwardAPI": {
                            "items": [
                                {
                                    "fieldRef": {
                                        "apiVersion": "v1",
                                        "fieldPath": "metadata.namespace",
                                    },
                                    "path": "namespace",
                                }
                            ]
                        }
                    },
                ],
            },
        }
    ]


def test_token_api_projects_every_token_each_under_its_own_key() -> None:
    pod = local_pod()
    pod["spec"]["volumes"].append(
        {
            "name": "vault",
            "projected": {
                "sources": [
                    {"configMap": {"name": "vault-ca"}},
                    {"serviceAccountToken": {"audience": "vault", "path": "vault/token"}},
                    {"serviceAccountToken": {"audience": "other", "path": "token-2"}},
                ]
            },
        }
    )

    volumes = {v["name"]: v for v in forge(pod, service_account_tokens=True)["spec"]["volumes"]}

    assert volumes["vault"]["projected"]["sources"] == [
        {"configMap": {"name": "vault-ca"}},
        {
            "secret": {
                "name": "web-7c9f8d6b5-x2k4q-token",
                "items": [{"key": "vault-927385", "path": "vault/token"}],
            }
        },
        {
            "secret": {
                "name": "web-7c9f8d6b5-x2k4q-token",
                "items": [{"key": "vault-0f6bff", "path": "token-2"}],
            }
        },
    ]


def test_token_api_still_runs_the_pod_without_a_provider_service_account() -> None:
    spec = forge(service_account_tokens=True, home_api_server=HOME_API_SERVER)["spec"]

    assert "serviceAccountName" not in spec
    assert spec["automountServiceAccountToken"] is False
    assert {"name": "SERVICE_ACCOUNT", "value": "web"} in spec["containers"][0]["env"]


def test_token_api_points_in_cluster_clients_at_the_home_api_server() -> None:
    env = forge(service_account_tokens=True, home_api_server=HOME_API_SERVER)["spec"]["containers"][
        0
    ]["env"]

    assert env == [
        {"name": "KUBERNETES_SERVICE_HOST", "value": "venice-control-plane.example.com"},
        {"name": "KUBERNETES_SERVICE_PORT", "value": "6443"},
        {"name": "KUBERNETES_PORT", "value": "tcp://venice-control-plane.example.com:6443"},
        {
            "name": "KUBERNETES_PORT_6443_TCP",
            "value": "tcp://venice-control-plane.example.com:6443",
        },
        {"name": "KUBERNETES_PORT_6443_TCP_PROTO", "value": "tcp"},
        {"name": "KUBERNETES_PORT_6443_TCP_ADDR", "value": "venice-control-plane.example.com"},
        {"name": "KUBERNETES_PORT_6443_TCP_PORT", "value": "6443"},
        {"name": "SERVICE_ACCOUNT", "value": "web"},
        {
            "name": "POD_NAME",
            "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}},
        },
    ]


def test_home_api_server_env_replaces_the_containers_own_and_comes_first() -> None:
    pod = local_pod()
    pod["spec"]["initContainers"] = [
        {
            "name": "init",
            "image": "busybox:1.36",
            "env": [
                {"name": "API", "value": "https://$(KUBERNETES_SERVICE_HOST)"},
                {"name": "KUBERNETES_SERVICE_HOST", "value": "10.96.0.1"},
                {"name": "KUBERNETES_PORT_6443_TCP_PORT", "value": "443"},
            ],
        },
        {"name": "no-env", "image": "busybox:1.36"},
    ]

    init = forge(pod, service_account_tokens=True, home_api_server=("10.0.0.1", 6443))["spec"][
        "initContainers"
    ]

    names = [variable["name"] for variable in init[0]["env"]]
    assert names == [
        "KUBERNETES_SERVICE_HOST",
        "KUBERNETES_SERVICE_PORT",
        "KUBERNETES_PORT",
        "KUBERNETES_PORT_6443_TCP",
        "KUBERNETES_PORT_6443_TCP_PROTO",
        "KUBERNETES_PORT_6443_TCP_ADDR",
        "KUBERNETES_PORT_6443_TCP_PORT",
        "API",
    ]
    assert init[0]["env"][0] == {"name": "KUBERNETES_SERVICE_HOST", "value": "10.0.0.1"}
    assert init[0]["env"][6] == {"name": "KUBERNETES_PORT_6443_TCP_PORT", "value": "6443"}
    assert init[1]["env"] == init[0]["env"][:7]


def test_home_api_server_on_ipv6_is_bracketed_in_urls() -> None:
    env = forge(service_account_tokens=True, home_api_server=("fd00:10:96::1", 443))["spec"][
        "containers"
    ][0]["env"]

    values = {variable["name"]: variable.get("value") for variable in env}
    assert values["KUBERNETES_SERVICE_HOST"] == "fd00:10:96::1"
    assert values["KUBERNETES_PORT"] == "tcp://[fd00:10:96::1]:443"
    assert values["KUBERNETES_PORT_443_TCP"] == "tcp://[fd00:10:96::1]:443"
    assert values["KUBERNETES_PORT_443_TCP_ADDR"] == "fd00:10:96::1"


def test_home_api_server_alone_leaves_the_environment_to_the_provider() -> None:
    assert forge(home_api_server=HOME_API_SERVER) == forge()


def test_token_api_without_home_api_server_leaves_the_environment_to_the_provider() -> None:
    spec = forge(service_account_tokens=True)["spec"]

    assert spec["containers"] == forge()["spec"]["containers"]


def test_remote_api_server_support_ignores_the_token_api() -> None:
    pod = local_pod()
    pod["metadata"]["annotations"]["liqo.io/api-server-support"] = "remote"

    tokens_on = forge(pod, service_account_tokens=True, home_api_server=HOME_API_SERVER)

    assert tokens_on == forge(pod)
    assert tokens_on["spec"]["volumes"] == local_pod()["spec"]["volumes"]


def test_forging_with_the_token_api_leaves_the_local_pod_untouched() -> None:
    pod = local_pod()
    pod["spec"]["initContainers"] = [{"name": "init", "image": "busybox:1.36"}]
    before = copy.deepcopy(pod)

    forge(pod, service_account_tokens=True, home_api_server=HOME_API_SERVER)

    assert pod == before


@pytest.mark.parametrize(
    ("annotation", "tokens_reflected", "home_tokens"),
    [
        (None, True, True),
        (None, False, False),
        ("disabled", True, False),
        ("remote", True, False),
        ("anything-else", True, True),
    ],
)
def test_a_pod_may_opt_out_of_home_tokens(
    annotation: str | None, tokens_reflected: bool, home_tokens: bool
) -> None:
    pod = local_pod()
    if annotation is not None:
        pod["metadata"].setdefault("annotations", {})["liqo.io/api-server-support"] = annotation
    assert uses_home_tokens(pod, tokens_reflected) is home_tokens


def test_api_server_support_disabled_drops_the_token_even_with_the_token_reflection() -> None:
    pod = local_pod()
    pod["metadata"].setdefault("annotations", {})["liqo.io/api-server-support"] = "disabled"
    spec = forge(pod, service_account_tokens=True, home_api_server=("10.0.0.1", 6443))["spec"]
    sources = spec["volumes"][0]["projected"]["sources"]
    assert not any("serviceAccountToken" in s or "secret" in s for s in sources)
    assert not any(
        e["name"] == "KUBERNETES_SERVICE_HOST" for e in spec["containers"][0].get("env") or []
    )


def test_the_local_status_forge_leaves_the_cached_remote_and_local_pods_as_they_were() -> None:
    """It copies only what it changes (the cache's objects are shared, never written)."""
    remote = running_remote_pod()
    remote["metadata"]["generation"] = 3
    local = local_pod()
    local["metadata"]["labels"][REMOTE_UNAVAILABLE_LABEL] = "true"
    local["status"] = {"conditions": [condition("DisruptionTarget")], "qosClass": "Burstable"}
    remote_before, local_before = copy.deepcopy(remote), copy.deepcopy(local)

    status = forge_local_pod_status(remote, local, node_ip=NODE_IP, extra_restarts=2)

    assert remote == remote_before
    assert local == local_before
    assert {c["restartCount"] for c in status["containerStatuses"]} == {
        c["restartCount"] + 2 for c in remote["status"]["containerStatuses"]
    }
    assert next(c for c in status["conditions"] if c["type"] == "Ready")["status"] == "False"


def test_a_remote_pod_as_cached_gives_the_local_status_the_whole_one_gives() -> None:
    remote = running_remote_pod()
    remote["metadata"]["generation"] = 2
    remote["status"]["observedGeneration"] = 2
    cached = remote_pod_as_read(remote)

    assert "labels" not in cached["metadata"]
    assert "spec" not in cached
    assert forge_local_pod_status(cached, local_pod(), node_ip=NODE_IP) == forge_local_pod_status(
        remote, local_pod(), node_ip=NODE_IP
    )
    assert STATUS_REFUSED not in cached


def test_a_remote_pod_status_too_large_to_be_a_kubelets_is_kept_as_its_size_alone() -> None:
    """A provider writes its pods' status as it likes: one of a megabyte is neither held by the
    virtual kubelet nor copied home, and says how large it was."""
    remote = running_remote_pod()
    remote["status"]["conditions"][0]["message"] = "m" * 1_000_000
    cached = remote_pod_as_read(remote)
    assert cached["status"] == {}
    assert cached[STATUS_REFUSED] > 1_000_000
    assert cached["metadata"]["uid"] == remote["metadata"]["uid"]  # still the same pod


def test_a_remote_pod_of_no_local_pod_is_kept_as_which_pod_it_is_alone() -> None:
    """Its local pod gone, or none ever (the provider labelling Pods of its own as ours): no
    status of it is read, so none is kept, whatever its size."""
    remote = running_remote_pod()
    remote["status"]["conditions"][0]["message"] = "m" * 30_000  # under the bound

    cached = remote_pod_as_read(remote, of_a_local_pod=False)

    assert cached == {
        "metadata": {
            key: remote["metadata"][key]
            for key in ("name", "namespace", "uid", "resourceVersion", "generation")
        }
    }


def test_a_kubelets_status_of_twenty_containers_at_their_longest_is_kept() -> None:
    """The longest termination messages a kubelet keeps (12 KiB for a pod in all) over twenty
    containers stay under the bound."""
    remote = running_remote_pod()
    template = remote["status"]["containerStatuses"][0]
    remote["status"]["containerStatuses"] = [
        {
            **template,
            "name": f"container-{i:02}",
            "lastState": {
                "terminated": {
                    "exitCode": 1,
                    "reason": "Error",
                    "message": "t" * (12 * 1024 // 20),
                    "startedAt": "2026-11-27T06:00:00Z",
                    "finishedAt": "2026-11-27T06:01:00Z",
                    "containerID": "containerd://" + "c" * 64,
                }
            },
        }
        for i in range(20)
    ]
    cached = remote_pod_as_read(remote)
    assert STATUS_REFUSED not in cached
    assert cached["status"] == remote["status"]


def test_a_pod_changed_only_in_its_status_is_told_from_one_changed_elsewhere() -> None:
    before = {
        "metadata": {"name": "web", "resourceVersion": "1", "labels": {"app": "web"}},
        "spec": {"containers": [{"name": "app", "image": "nginx"}]},
        "status": {"phase": "Pending"},
    }
    written = copy.deepcopy(before)
    written["metadata"]["resourceVersion"] = "2"
    written["metadata"]["managedFields"] = [{"manager": "vk"}]
    written["status"] = {"phase": "Running"}
    assert not changed_beyond_status(before, written)
    assert not changed_beyond_status(before, before)
    for change in (
        lambda pod: pod["metadata"]["labels"].update(tier="front"),
        lambda pod: pod["metadata"].update(deletionTimestamp="2026-11-27T00:00:00Z"),
        lambda pod: pod["spec"]["containers"][0].update(image="nginx:2"),
        lambda pod: pod.pop("spec"),
        lambda pod: pod.update(kind="Pod"),
    ):
        changed = copy.deepcopy(written)
        change(changed)
        assert changed_beyond_status(before, changed), changed


@pytest.mark.parametrize(
    ("annotation", "tokens_reflected", "volumes", "secret"),
    [
        (None, True, None, "web-token"),  # local_pod's kube-api-access token
        (None, False, None, None),
        ("remote", True, None, None),
        ("disabled", True, None, None),
        (None, True, [{"name": "data", "emptyDir": {}}], None),  # it projects no token
    ],
)
def test_the_token_secret_a_remote_pod_mounts_is_the_one_its_volumes_name(
    annotation: str | None, tokens_reflected: bool, volumes: list[JSON] | None, secret: str | None
) -> None:
    """What the pod reflector waits for before the ShadowPod: the Secret the forged pod's
    volumes would name, and nothing when they name none."""
    pod = local_pod()
    pod["metadata"]["name"] = "web"
    if annotation is not None:
        pod["metadata"].setdefault("annotations", {})["liqo.io/api-server-support"] = annotation
    if volumes is not None:
        pod["spec"]["volumes"] = volumes
    assert mounted_token_secret(pod, tokens_reflected) == secret
    spec = forge(pod, service_account_tokens=tokens_reflected)["spec"]
    named = {
        source["secret"]["name"]
        for volume in spec.get("volumes") or []
        for source in (volume.get("projected") or {}).get("sources") or []
        if "secret" in source
    }
    assert named == ({secret} if secret else set())


# --- Admission to the virtual node: a kubelet's predicates, on a pod bound to it by hand ------

VIRTUAL_NODE_TAINT = {
    "key": VIRTUAL_NODE_TAINT_KEY,
    "value": VIRTUAL_NODE_TAINT_VALUE,
    "effect": VIRTUAL_NODE_TAINT_EFFECT,
}
AFFINITY_REFUSED = (
    "NodeAffinity",
    "Predicate NodeAffinity failed: node(s) didn't match Pod's node affinity/selector",
)
TAINT_REFUSED = (
    "TaintToleration",
    "Predicate TaintToleration failed: node(s) had taints that the pod didn't tolerate",
)
NAME_REFUSED = (
    "NodeName",
    "Predicate NodeName failed: node(s) didn't match the requested node name",
)


def virtual_node(*taints: JSON, **labels: str) -> JSON:
    """The Node of virtual node cool-firefly, labelled as vk labels it (and `labels`), tainted
    with the virtual-node taint and `taints`."""
    return {
        "metadata": {
            "name": NODE,
            "labels": {
                "kubernetes.io/hostname": NODE,
                "liqo.io/type": "virtual-node",
                "liqo.io/remote-cluster-id": PROVIDER,
                **labels,
            },
        },
        "spec": {"taints": [VIRTUAL_NODE_TAINT, *taints]},
    }


def bound(
    *,
    node_selector: dict[str, str] | None = None,
    required: JSON | None = None,
    tolerations: list[JSON] | None = None,
    node_name: str = NODE,
    started: bool = False,
) -> JSON:
    """A pod bound by hand to `node_name`, tolerating the virtual-node taint unless
    `tolerations` says otherwise."""
    spec: JSON = {
        "nodeName": node_name,
        "containers": [{"name": "app", "image": "nginx"}],
        "tolerations": [VIRTUAL_NODE_TOLERATION] if tolerations is None else tolerations,
    }
    if node_selector is not None:
        spec["nodeSelector"] = node_selector
    if required is not None:
        spec["affinity"] = {
            "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": required}
        }
    status: JSON = {"phase": "Running" if started else "Pending"}
    if started:
        status["startTime"] = "2025-05-06T09:12:50Z"
    return {
        "metadata": {"name": "web", "namespace": "demo", "uid": "u"},
        "spec": spec,
        "status": status,
    }


def region(*values: str) -> JSON:
    return {
        "nodeSelectorTerms": [
            {"matchExpressions": [{"key": "region", "operator": "In", "values": list(values)}]}
        ]
    }


def toleration(key: str, operator: str, value: str | None = None, effect: str = "") -> JSON:
    built = {"key": key, "operator": operator}
    if value is not None:
        built["value"] = value
    if effect:
        built["effect"] = effect
    return built


@pytest.mark.parametrize(
    ("pod", "node", "refusal"),
    [
        # What the scheduler would have checked.
        (bound(), virtual_node(), None),
        (bound(node_selector={"region": "europe"}), virtual_node(region="europe"), None),
        (bound(node_selector={"region": "europe"}), virtual_node(region="asia"), AFFINITY_REFUSED),
        (bound(node_selector={"region": "europe"}), virtual_node(), AFFINITY_REFUSED),
        (bound(required=region("europe", "asia")), virtual_node(region="asia"), None),
        (bound(required=region("europe")), virtual_node(region="asia"), AFFINITY_REFUSED),
        (
            bound(
                required={
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": ["other"]}
                            ]
                        }
                    ]
                }
            ),
            virtual_node(),
            AFFINITY_REFUSED,
        ),
        # The kubelet admits by NoExecute taints alone.
        (bound(tolerations=[]), virtual_node(), TAINT_REFUSED),
        (bound(tolerations=[NOT_READY_TOLERATION]), virtual_node(), TAINT_REFUSED),
        (
            bound(tolerations=[toleration(VIRTUAL_NODE_TAINT_KEY, "Exists", effect="NoSchedule")]),
            virtual_node(),
            TAINT_REFUSED,
        ),
        (
            bound(tolerations=[toleration(VIRTUAL_NODE_TAINT_KEY, "Equal", "false")]),
            virtual_node(),
            TAINT_REFUSED,
        ),
        (
            bound(tolerations=[toleration(VIRTUAL_NODE_TAINT_KEY, "Equal", "true")]),
            virtual_node(),
            None,
        ),
        (bound(tolerations=[toleration(VIRTUAL_NODE_TAINT_KEY, "", "true")]), virtual_node(), None),
        (bound(tolerations=[toleration("", "Exists")]), virtual_node(), None),
        (
            bound(tolerations=[toleration(VIRTUAL_NODE_TAINT_KEY, "Gt", "1")]),
            virtual_node(),
            TAINT_REFUSED,
        ),
        (bound(), virtual_node({"key": "dedicated", "value": "ml", "effect": "NoSchedule"}), None),
        (
            bound(),
            virtual_node({"key": "dedicated", "value": "ml", "effect": "PreferNoSchedule"}),
            None,
        ),
        (
            bound(),
            virtual_node({"key": "dedicated", "value": "ml", "effect": "NoExecute"}),
            TAINT_REFUSED,
        ),
        (
            bound(tolerations=[VIRTUAL_NODE_TOLERATION, toleration("dedicated", "Equal", "ml")]),
            virtual_node({"key": "dedicated", "value": "ml", "effect": "NoExecute"}),
            None,
        ),
        # The kubelet's order: the first predicate failed is the reason.
        (bound(required=region("europe"), tolerations=[]), virtual_node(), AFFINITY_REFUSED),
        (bound(node_name="other", tolerations=[]), virtual_node(), NAME_REFUSED),
        # No Node to judge against (`createNode: false`): as before, admitted.
        (bound(required=region("europe"), tolerations=[]), None, None),
        # A pod that ran (its ShadowPod gone since) is not failed for what changed since.
        (bound(required=region("europe"), tolerations=[], started=True), virtual_node(), None),
        (bound(node_name="other", started=True), virtual_node(), NAME_REFUSED),
    ],
)
def test_a_pod_is_admitted_to_the_virtual_node_as_a_kubelet_admits_it(
    pod: JSON, node: JSON | None, refusal: tuple[str, str] | None
) -> None:
    assert node_admission_refusal(pod, node) == refusal


def test_a_pod_the_webhook_placed_is_admitted_to_the_virtual_node() -> None:
    assert node_admission_refusal(local_pod(), virtual_node()) is None


def test_a_refused_pod_is_failed_with_the_status_a_kubelet_writes() -> None:
    pod = local_pod()
    pod["status"]["reason"], pod["status"]["message"] = "OffloadingBackOff", "the provider said no"

    status = forge_rejected_status(pod, *AFFINITY_REFUSED, "2025-05-06T09:13:00Z")

    assert status == {
        "phase": "Failed",
        "reason": "NodeAffinity",
        "message": (
            "Pod was rejected: Predicate NodeAffinity failed: node(s) didn't match Pod's node "
            "affinity/selector"
        ),
        "startTime": "2025-05-06T09:13:00Z",
    }
    pod["status"]["startTime"] = "2025-05-06T09:12:50Z"
    assert (
        forge_rejected_status(pod, *TAINT_REFUSED, "later")["startTime"] == "2025-05-06T09:12:50Z"
    )
