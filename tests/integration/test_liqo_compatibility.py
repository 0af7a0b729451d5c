"""What a Liqo 1.x user brings over runs unchanged (issue 21): a VirtualNode whose template
carries the arguments Liqo's own chart gives a virtual kubelet, the classes a provider offers,
and the kubeconfigs of managed clusters."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.test_namespace_offloading import get_json, is_peered, vkctl
from tests.liqo import liqo_virtual_kubelet_args
from vk.api.constants import control_plane_user, resource_slice_user

VKCTL = str(Path(sys.executable).parent / "vkctl")
CONSUMER, PROVIDER = "venice", "naples"
TENANT = f"liqo-tenant-{PROVIDER}"
NODE = f"{PROVIDER}-liqo-template"


def node_ready(clusters: Clusters, name: str) -> bool:
    node = get_json(clusters, CONSUMER, "node", name) or {}
    return any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (node.get("status") or {}).get("conditions") or []
    )


@pytest.fixture
def liqo_virtual_node(naples_peered: Clusters) -> Iterator[Clusters]:
    """A second VirtualNode of the peering, its template written as Liqo's webhook writes it."""
    peered = get_json(
        naples_peered, CONSUMER, "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT
    )
    secret = peered["spec"]["kubeconfigSecretRef"]["name"]
    args = liqo_virtual_kubelet_args(
        remote=PROVIDER, node=NODE, tenant_namespace=TENANT, home=CONSUMER, secret=secret
    )
    virtual_node = {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "VirtualNode",
        "metadata": {"name": NODE, "namespace": TENANT},
        "spec": {
            "clusterID": PROVIDER,
            "createNode": True,
            "kubeconfigSecretRef": {"name": secret},
            "resourceQuota": {"hard": {"cpu": "1", "memory": "1Gi", "pods": "10"}},
            "template": {
                "spec": {
                    "replicas": 1,
                    "template": {
                        "spec": {
                            "containers": [
                                {
                                    "name": "virtual-kubelet",
                                    "image": "ghcr.io/liqotech/virtual-kubelet:v1.0.0",
                                    "command": ["/usr/bin/virtual-kubelet"],
                                    "args": args,
                                }
                            ]
                        }
                    },
                }
            },
        },
    }
    naples_peered.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(virtual_node))
    try:
        yield naples_peered
    finally:
        naples_peered.kubectl(
            CONSUMER, "delete", "virtualnodes.offloading.liqo.io", NODE, "-n", TENANT,
            "--ignore-not-found", "--timeout=120s",
        )  # fmt: skip


def test_a_virtual_node_with_liqos_default_arguments_runs(liqo_virtual_node: Clusters) -> None:
    wait_until(lambda: node_ready(liqo_virtual_node, NODE), f"node {NODE} Ready", timeout=90)
    status = get_json(
        liqo_virtual_node, CONSUMER, "virtualnodes.offloading.liqo.io", NODE, "-n", TENANT
    )["status"]
    conditions = {c["type"]: c["status"] for c in status["conditions"]}
    assert conditions == {"VirtualKubelet": "Running", "Node": "Running"}


def test_a_providers_storage_class_appears_on_the_slice_and_the_virtual_node(
    naples_peered: Clusters,
) -> None:
    """Liqo's providers offer their storage classes on the ResourceSlice, and the consumer
    shows them on the VirtualNode (vk's virtual class `liqo`, in every cluster, is not one)."""
    clusters = naples_peered
    storage_class = {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {"name": "vk-test-ssd"},
        "provisioner": "example.com/none",
    }
    offered = {"storageClassName": "vk-test-ssd"}

    def on_virtual_node() -> list[dict[str, object]]:
        virtual_node = get_json(
            clusters, CONSUMER, "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT
        )
        return list(virtual_node["spec"].get("storageClasses") or [])

    slice_name = get_json(
        clusters, CONSUMER, "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT
    )["metadata"]["labels"]["liqo.io/resourceslice-name"]
    assert {"storageClassName": "liqo"} not in on_virtual_node()
    clusters.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(storage_class))
    try:
        wait_until(lambda: offered in on_virtual_node(), "the class on the VirtualNode", 60)
        for cluster, namespace in ((CONSUMER, TENANT), (PROVIDER, f"liqo-tenant-{CONSUMER}")):
            status = get_json(
                clusters, cluster, "resourceslices.authentication.liqo.io", slice_name,
                "-n", namespace,
            )["status"]  # fmt: skip
            assert offered in status["storageClasses"], cluster
            assert {"storageClassName": "liqo"} not in status["storageClasses"]
    finally:
        clusters.kubectl(PROVIDER, "delete", "storageclass", "vk-test-ssd", "--ignore-not-found")
    wait_until(lambda: offered not in on_virtual_node(), "the class gone from the VirtualNode", 60)


def exec_plugin_kubeconfig(clusters: Clusters, cluster: str, workdir: Path) -> Path:
    """`cluster` as a managed cluster's kubeconfig has it: its user an exec plugin (a script
    printing an ExecCredential, as aws-iam-authenticator or gke-gcloud-auth-plugin do) with a
    token of a ServiceAccount that may do what an administrator may."""
    clusters.kubectl(cluster, "create", "serviceaccount", "vk-test-admin", "-n", "default")
    clusters.kubectl(
        cluster, "create", "clusterrolebinding", "vk-test-admin", "--clusterrole=cluster-admin",
        "--serviceaccount=default:vk-test-admin",
    )  # fmt: skip
    token = clusters.kubectl(
        cluster, "create", "token", "vk-test-admin", "-n", "default", "--duration=1h"
    ).stdout.strip()
    plugin = workdir / "cloud-auth-plugin"
    credential = {
        "apiVersion": "client.authentication.k8s.io/v1",
        "kind": "ExecCredential",
        "status": {"token": token},
    }
    plugin.write_text(
        f"#!/bin/sh\necho run >> {workdir}/plugin-runs\n"
        f"cat <<'EOF'\n{json.dumps(credential)}\nEOF\n"
    )
    plugin.chmod(0o755)
    admin = yaml.safe_load(clusters.kubeconfig(cluster).read_text())
    admin["users"][0]["user"] = {
        "exec": {
            "apiVersion": "client.authentication.k8s.io/v1",
            "command": "./cloud-auth-plugin",  # next to the kubeconfig, as kubectl finds it
            "interactiveMode": "Never",
        }
    }
    path = workdir / f"{cluster}-exec.kubeconfig"
    path.write_text(yaml.safe_dump(admin))
    return path


def split_kubeconfig(clusters: Clusters, cluster: str, workdir: Path, server_name: str) -> str:
    """`cluster`'s kubeconfig as two files for `KUBECONFIG=a:b` (contexts and users in one,
    the cluster in the other, its certificate checked for `server_name`)."""
    admin = yaml.safe_load(clusters.kubeconfig(cluster).read_text())
    first = {key: admin[key] for key in ("current-context", "contexts", "users")}
    second = {"clusters": admin["clusters"]}
    second["clusters"][0]["cluster"]["tls-server-name"] = server_name
    paths = [workdir / f"{cluster}-{server_name}-{n}.yaml" for n in (1, 2)]
    for path, document in zip(paths, (first, second), strict=True):
        path.write_text(yaml.safe_dump(document))
    return os.pathsep.join(map(str, paths))


def test_vkctl_reads_kubeconfigs_as_kubectl_does(installed: Clusters, tmp_path: Path) -> None:
    """Managed clusters' kubeconfigs (an exec plugin), a merged KUBECONFIG and
    tls-server-name: `vkctl peer` with florence as its provider, through all three."""
    clusters = installed
    was_peered = is_peered(clusters, "florence")
    florence = exec_plugin_kubeconfig(clusters, "florence", tmp_path)
    try:
        # tls-server-name is the name checked: one the API server's certificate does not
        # carry fails, one it carries works, though the URL's host is an IP address.
        wrong = split_kubeconfig(clusters, CONSUMER, tmp_path, "not-the-api-server.example")
        refused = subprocess.run(
            [VKCTL, "info"], env={**os.environ, "KUBECONFIG": wrong}, capture_output=True,
            text=True, timeout=60,
        )  # fmt: skip
        assert refused.returncode == 1
        assert "not-the-api-server.example" in refused.stderr
        merged = split_kubeconfig(clusters, CONSUMER, tmp_path, "kubernetes.default")
        peered = subprocess.run(
            [VKCTL, "peer", f"--remote-kubeconfig={florence}", "--timeout=240s"],
            env={**os.environ, "KUBECONFIG": merged}, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert peered.returncode == 0, peered.stderr
        assert (tmp_path / "plugin-runs").read_text().count("run") >= 1
        wait_until(lambda: node_ready(clusters, "florence"), "the virtual node florence Ready")
    finally:
        if not was_peered:
            subprocess.run(
                [VKCTL, "unpeer", f"--remote-kubeconfig={florence}", "--timeout=240s"],
                env={**os.environ, "KUBECONFIG": str(clusters.kubeconfig(CONSUMER))},
                capture_output=True, text=True, timeout=300,
            )  # fmt: skip
        clusters.kubectl("florence", "delete", "clusterrolebinding", "vk-test-admin", check=False)
        clusters.kubectl(
            "florence", "delete", "serviceaccount", "vk-test-admin", "-n", "default", check=False
        )


def provider_vkctl(clusters: Clusters, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [VKCTL, *args, f"--kubeconfig={clusters.kubeconfig(PROVIDER)}"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip


def offloaded_namespace(clusters: Clusters, prefix: str) -> tuple[str, str]:
    """A new namespace of venice, offloaded: its name, and its twin's on naples."""
    namespace = f"{prefix}-{uuid.uuid4().hex[:6]}"
    clusters.kubectl(CONSUMER, "create", "namespace", namespace)
    offloaded = vkctl(clusters, "offload", "namespace", namespace)
    assert offloaded.returncode == 0, offloaded.stderr
    return namespace, f"{namespace}-{CONSUMER}"


def deployment_on_naples(namespace: str) -> dict[str, object]:
    """Deployment `web` of one replica, on the virtual node naples."""
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "web", "namespace": namespace},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {
                    "nodeSelector": {"kubernetes.io/hostname": PROVIDER},
                    "tolerations": [
                        {"key": "virtual-node.liqo.io/not-allowed", "operator": "Exists",
                         "effect": "NoExecute"}
                    ],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "app", "image": "nginx"}],
                },
            },
        },
    }  # fmt: skip


def test_a_twin_namespace_deleted_by_the_provider_is_made_again_and_its_pods_run_again(
    naples_peered: Clusters,
) -> None:
    """naples' administrator deletes a twin namespace: its controller makes it again, but
    without its ResourceQuota and the tenant's RoleBindings (applied once, never again), so
    the virtual kubelet was forbidden there and the pod waited for ever. And either deleted
    alone stayed gone until a restart."""
    clusters = naples_peered
    namespace, twin = offloaded_namespace(clusters, "twin")

    def running_there() -> bool:
        pods = (get_json(clusters, PROVIDER, "pods", "-n", twin) or {}).get("items", [])
        return any(p["status"].get("phase") == "Running" for p in pods)

    try:
        clusters.kubectl(
            CONSUMER, "apply", "-f", "-", input=json.dumps(deployment_on_naples(namespace))
        )
        wait_until(running_there, "the pod running in naples", 90)
        clusters.kubectl(PROVIDER, "delete", "namespace", twin, "--timeout=90s")
        wait_until(running_there, "the pod running in naples again", 120)
        bindings = get_json(clusters, PROVIDER, "rolebindings", "-n", twin)["items"]
        assert {"vk-virtual-kubelet-remote", "vk-virtual-kubelet-draining"} <= {
            b["metadata"]["name"] for b in bindings
        }
        assert get_json(clusters, PROVIDER, "resourcequota", "vk-tenant-objects", "-n", twin)

        # The tenant's binding alone, or the ResourceQuota alone, deleted there: made again.
        def uid(kind: str, name: str) -> str | None:
            found = get_json(clusters, PROVIDER, kind, name, "-n", twin)
            return found["metadata"]["uid"] if found else None

        for kind, name in (
            ("rolebinding", "vk-virtual-kubelet-remote"),
            ("resourcequota", "vk-tenant-objects"),
        ):
            deleted = uid(kind, name)
            clusters.kubectl(PROVIDER, "delete", kind, name, "-n", twin)

            def made_again(kind: str = kind, name: str = name, was: str | None = deleted) -> bool:
                return uid(kind, name) not in (None, was)

            wait_until(made_again, f"the {kind} made again", 30)
    finally:
        vkctl(clusters, "unoffload", "namespace", namespace, "--timeout=120s")
        clusters.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def test_a_provider_cordons_drains_and_uncordons_its_consumer(naples_peered: Clusters) -> None:
    """Liqo's `liqoctl cordon|drain|uncordon tenant` and `cordon resourceslice`, run against
    the provider: cordoned, what runs stays and nothing new is admitted; drained, nothing of
    the consumer runs there; uncordoned, its pods are offloaded again, by themselves."""
    clusters = naples_peered
    namespace, twin = offloaded_namespace(clusters, "cordon")
    deployment = deployment_on_naples(namespace)

    def remote_running() -> int:
        pods = (get_json(clusters, PROVIDER, "pods", "-n", twin, "-l", "app=web") or {}).get(
            "items", []
        )
        return sum(
            p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
            for p in pods
        )

    def shadow_pods() -> int:
        found = get_json(clusters, PROVIDER, "shadowpods.offloading.liqo.io", "-n", twin) or {}
        return len(found.get("items", []))

    def refused_as_cordoned() -> bool:
        pods = get_json(clusters, CONSUMER, "pods", "-n", namespace, "-l", "app=web")["items"]
        return any("cordoned" in (p["status"].get("message") or "") for p in pods)

    try:
        clusters.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(deployment))
        wait_until(lambda: remote_running() == 1, "the first pod running in naples", 90)

        done = provider_vkctl(clusters, "cordon", "tenant", CONSUMER)
        assert done.returncode == 0, done.stderr
        clusters.kubectl(CONSUMER, "scale", "deployment", "web", "-n", namespace, "--replicas=2")
        wait_until(refused_as_cordoned, "the new pod refused: the tenant is cordoned", 60)
        assert remote_running() == 1  # what ran stays
        done = provider_vkctl(clusters, "uncordon", "tenant", CONSUMER)
        assert done.returncode == 0, done.stderr
        wait_until(lambda: remote_running() == 2, "both pods running once uncordoned", 90)

        done = provider_vkctl(clusters, "drain", "tenant", CONSUMER, "--timeout=120s")
        assert done.returncode == 0, done.stderr
        assert shadow_pods() == 0
        slices = get_json(
            clusters, PROVIDER, "resourceslices.authentication.liqo.io", "-n",
            f"liqo-tenant-{CONSUMER}",
        )["items"]  # fmt: skip
        assert all(
            {c["type"]: c["status"] for c in s["status"]["conditions"]}["Resources"] == "Denied"
            for s in slices
        )
        time.sleep(5)  # the consumer asks again meanwhile: refused
        assert remote_running() == 0

        def home_ready() -> list[str]:
            pods = get_json(clusters, CONSUMER, "pods", "-n", namespace, "-l", "app=web")["items"]
            return [
                p["metadata"]["name"]
                for p in pods
                if {c["type"]: c["status"] for c in p["status"].get("conditions") or []}.get(
                    "Ready"
                )
                == "True"
            ]

        # Running nowhere, they are not Ready at home (a Service here sent to them, before).
        wait_until(lambda: home_ready() == [], "home's pods not Ready while drained", 30)
        done = provider_vkctl(clusters, "uncordon", "tenant", CONSUMER)
        assert done.returncode == 0, done.stderr
        wait_until(lambda: remote_running() == 2, "the pods offloaded again once uncordoned", 120)

        def restarts() -> list[int]:
            pods = get_json(clusters, CONSUMER, "pods", "-n", namespace, "-l", "app=web")["items"]
            return [
                c.get("restartCount", 0)
                for p in pods
                for c in p["status"].get("containerStatuses") or []
            ]

        # Made again on the provider, each one's containers started again: a restart.
        wait_until(lambda: restarts() == [1, 1], "a restart counted for each pod", 30)

        # One slice cordoned: its Quota admits nothing new; uncordoned, it does again.
        name = slices[0]["metadata"]["name"]
        done = provider_vkctl(clusters, "cordon", "resourceslice", name)
        assert done.returncode == 0, done.stderr

        def quota_cordoned() -> bool:
            quotas = get_json(
                clusters, PROVIDER, "quotas.offloading.liqo.io", "-n", f"liqo-tenant-{CONSUMER}",
                "-l", f"liqo.io/resourceslice-name={name}",
            )["items"]  # fmt: skip
            return bool(quotas) and all(q["spec"].get("cordoned") for q in quotas)

        wait_until(quota_cordoned, "the slice's Quota cordoned", 30)
        done = provider_vkctl(clusters, "uncordon", "resourceslice", name)
        assert done.returncode == 0, done.stderr
        wait_until(lambda: not quota_cordoned(), "the slice's Quota uncordoned", 30)
        missing = provider_vkctl(clusters, "cordon", "tenant", "nobody")
        assert missing.returncode == 1
        assert "no Tenant nobody" in missing.stderr
    finally:
        provider_vkctl(clusters, "uncordon", "tenant", CONSUMER)
        vkctl(clusters, "unoffload", "namespace", namespace, "--timeout=120s")
        clusters.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def test_vkctl_offloads_several_namespaces_and_a_selection_of_them(
    naples_peered: Clusters,
) -> None:
    """liqoctl's `offload namespace NAME...` and `--ns-selector`, and their undoing."""
    clusters = naples_peered
    team = uuid.uuid4().hex[:6]
    names = [f"multi-{n}-{team}" for n in ("a", "b", "c")]
    for name in names:
        clusters.kubectl(CONSUMER, "create", "namespace", name)
    clusters.kubectl(CONSUMER, "label", "namespace", names[2], f"vk-test-team={team}")
    try:
        done = vkctl(
            clusters,
            "offload",
            "namespace",
            names[0],
            names[1],
            f"--ns-selector=vk-test-team={team}",
        )
        assert done.returncode == 0, done.stderr
        for name in names:
            assert f"namespace {name}" in done.stdout
            assert get_json(clusters, PROVIDER, "namespace", f"{name}-{CONSUMER}") is not None
        nobody = vkctl(clusters, "offload", "namespace", "--ns-selector=vk-test-team=nobody")
        assert nobody.returncode == 1
        assert "no namespace has labels matching" in nobody.stderr
        undone = vkctl(
            clusters, "unoffload", "namespace", names[0], names[1],
            f"--ns-selector=vk-test-team={team}", "--timeout=120s",
        )  # fmt: skip
        assert undone.returncode == 0, undone.stderr
        for name in names:
            assert (
                get_json(clusters, CONSUMER, "namespaceoffloadings.offloading.liqo.io", "-n", name)
                or {}
            ).get("items") == []
    finally:
        for name in names:
            clusters.kubectl(CONSUMER, "delete", "namespace", name, "--wait=false", check=False)


def test_vkctl_get_kubeconfig_acts_as_each_identity_on_the_provider(
    naples_peered: Clusters, tmp_path: Path
) -> None:
    """liqoctl's `get kubeconfig`: the control-plane identity's, or a slice's, which kubectl
    then uses on the provider as that identity."""
    clusters = naples_peered
    slice_name = get_json(
        clusters, CONSUMER, "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT
    )["metadata"]["labels"]["liqo.io/resourceslice-name"]
    for extra, user in (
        ((), control_plane_user(CONSUMER)),
        ((f"--resource-slice-name={slice_name}",), resource_slice_user(CONSUMER, slice_name)),
    ):
        printed = vkctl(clusters, "get", "kubeconfig", f"--remote-cluster-id={PROVIDER}", *extra)
        assert printed.returncode == 0, printed.stderr
        path = tmp_path / "identity.kubeconfig"
        path.write_text(printed.stdout)
        whoami = subprocess.run(
            ["kubectl", f"--kubeconfig={path}", "auth", "whoami", "-o", "json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert whoami.returncode == 0, whoami.stderr
        assert json.loads(whoami.stdout)["status"]["userInfo"]["username"] == user
    missing = vkctl(clusters, "get", "kubeconfig", "--remote-cluster-id=nowhere")
    assert missing.returncode == 1
    assert "no identity of the control plane for nowhere" in missing.stderr


def test_labels_the_offloading_patch_keeps_home_stay_off_reflected_objects(
    naples_peered: Clusters,
) -> None:
    """Liqo applies a VirtualNode's labelsNotReflected and annotationsNotReflected to every
    reflected object, not only to pods; vk follows a change without a restart."""
    clusters = naples_peered
    namespace = f"patch-{uuid.uuid4().hex[:6]}"
    twin = f"{namespace}-{CONSUMER}"

    def set_patch(patch: dict[str, object] | None) -> None:
        clusters.kubectl(
            CONSUMER, "patch", "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT,
            "--type=merge", "-p", json.dumps({"spec": {"offloadingPatch": patch}}),
        )  # fmt: skip

    def copy_metadata() -> dict[str, object]:
        found = get_json(clusters, PROVIDER, "configmap", "settings", "-n", twin) or {}
        return found.get("metadata") or {}

    clusters.kubectl(CONSUMER, "create", "namespace", namespace)
    try:
        offloaded = vkctl(clusters, "offload", "namespace", namespace)
        assert offloaded.returncode == 0, offloaded.stderr
        configmap = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {
                "name": "settings",
                "namespace": namespace,
                "labels": {"team": "payments", "app": "shop"},
                "annotations": {"billing/cost-center": "42", "note": "kept"},
            },
            "data": {"mode": "production"},
        }
        clusters.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(configmap))
        wait_until(
            lambda: (copy_metadata().get("labels") or {}).get("team") == "payments",
            "the ConfigMap reflected whole",
        )
        set_patch(
            {"labelsNotReflected": ["team"], "annotationsNotReflected": ["billing/cost-center"]}
        )
        wait_until(
            lambda: (
                "team" not in (copy_metadata().get("labels") or {})
                and "billing/cost-center" not in (copy_metadata().get("annotations") or {})
            ),
            "the labels and annotations kept home left off the copy",
        )
        metadata = copy_metadata()
        assert metadata["labels"]["app"] == "shop"  # type: ignore[index]
        assert metadata["annotations"]["note"] == "kept"  # type: ignore[index]
        assert metadata["labels"]["offloading.liqo.io/origin"] == CONSUMER  # type: ignore[index]
    finally:
        set_patch(None)
        vkctl(clusters, "unoffload", "namespace", namespace, "--timeout=120s")
        clusters.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def test_an_offloading_patch_the_provider_refuses_is_said_on_each_pod_once(
    naples_peered: Clusters,
) -> None:
    """A VirtualNode's offloadingPatch gains a toleration naples' rules do not allow (its
    tenants' pods tolerate only the virtual-node taint there). New pods are refused, as ever;
    a live pod's ShadowPod change is refused too, and that is said on the pod, once, while the
    pod runs on there as it was (it was retried on the work queue's back-off, said nowhere)."""
    clusters = naples_peered
    namespace, twin = offloaded_namespace(clusters, "refused")
    toleration = {"key": "vk.test/gpu", "operator": "Exists", "effect": "NoSchedule"}

    def set_patch(patch: dict[str, object] | None) -> None:
        clusters.kubectl(
            CONSUMER, "patch", "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT,
            "--type=merge", "-p", json.dumps({"spec": {"offloadingPatch": patch}}),
        )  # fmt: skip

    def refusals(pod: str) -> list[dict[str, Any]]:
        events = get_json(
            clusters, CONSUMER, "events", "-n", namespace,
            "--field-selector", f"reason=OffloadedPodChangeRefused,involvedObject.name={pod}",
        )  # fmt: skip
        return list((events or {}).get("items") or [])

    try:
        clusters.kubectl(
            CONSUMER, "apply", "-f", "-", input=json.dumps(deployment_on_naples(namespace))
        )
        remote = wait_until(
            lambda: [
                p
                for p in (get_json(clusters, PROVIDER, "pods", "-n", twin) or {}).get("items", [])
                if p["status"].get("phase") == "Running"
            ],
            "the pod Running on naples",
        )
        (pod,) = [p["metadata"]["name"] for p in remote]
        set_patch({"tolerations": [toleration]})
        (said,) = wait_until(lambda: refusals(pod), "the refusal said on the pod")
        assert "refused a change of this pod, which runs on there as it was" in said["message"]
        assert "vk.test/gpu" in said["message"]
        time.sleep(25)  # two retries and more
        assert [e.get("count", 1) for e in refusals(pod)] == [1]
        remote_pod = get_json(clusters, PROVIDER, "pod", pod, "-n", twin)
        assert remote_pod["status"]["phase"] == "Running"
        assert toleration not in remote_pod["spec"]["tolerations"]
        local = get_json(clusters, CONSUMER, "pod", pod, "-n", namespace)
        assert local["status"]["phase"] == "Running"
    finally:
        set_patch(None)
        vkctl(clusters, "unoffload", "namespace", namespace, "--timeout=120s")
        clusters.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def test_a_virtual_node_runs_with_the_vk_options_template_it_names(
    naples_peered: Clusters,
) -> None:
    """Liqo's VkOptionsTemplate: a VirtualNode naming one gets its options (here the Node's
    extra labels and a reflector's policy); one naming a template that does not exist is not
    launched, and says why."""
    clusters = naples_peered
    secret = get_json(
        clusters, CONSUMER, "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT
    )["spec"]["kubeconfigSecretRef"]["name"]
    template = {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "VkOptionsTemplate",
        "metadata": {"name": "vk-test-options", "namespace": TENANT},
        "spec": {
            "createNode": True,
            "nodeExtraLabels": {"vk.test/tier": "gold"},
            "reflectorsConfig": {"configmap": {"workers": 1, "type": "AllowList"}},
            "extraArgs": ["--node-ping-interval=2s"],
        },
    }

    def virtual_node(name: str, template_name: str) -> dict[str, object]:
        return {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "VirtualNode",
            "metadata": {"name": name, "namespace": TENANT},
            "spec": {
                "clusterID": PROVIDER,
                "kubeconfigSecretRef": {"name": secret},
                "vkOptionsTemplateRef": {"name": template_name, "namespace": TENANT},
                "resourceQuota": {"hard": {"cpu": "1", "memory": "1Gi", "pods": "10"}},
            },
        }

    templated, orphan = f"{PROVIDER}-templated", f"{PROVIDER}-no-template"
    clusters.kubectl(CONSUMER, "apply", "-f", "-", input=json.dumps(template))
    for node, template_name in ((templated, "vk-test-options"), (orphan, "vk-test-missing")):
        clusters.kubectl(
            CONSUMER, "apply", "-f", "-", input=json.dumps(virtual_node(node, template_name))
        )
    try:
        wait_until(lambda: node_ready(clusters, templated), f"node {templated} Ready", 90)
        labels = get_json(clusters, CONSUMER, "node", templated)["metadata"]["labels"]
        assert labels["vk.test/tier"] == "gold"

        def said() -> str:
            found = get_json(
                clusters, CONSUMER, "virtualnodes.offloading.liqo.io", orphan, "-n", TENANT
            )
            conditions = (found.get("status") or {}).get("conditions") or []
            return " ".join(c.get("message") or "" for c in conditions)

        wait_until(
            lambda: "vk-test-missing" in said() and "does not exist" in said(),
            "the missing template reported",
        )
        assert get_json(clusters, CONSUMER, "node", orphan) is None
    finally:
        for node in (templated, orphan):
            clusters.kubectl(
                CONSUMER, "delete", "virtualnodes.offloading.liqo.io", node, "-n", TENANT,
                "--ignore-not-found", "--timeout=120s", check=False,
            )  # fmt: skip
        clusters.kubectl(
            CONSUMER, "delete", "vkoptionstemplates.offloading.liqo.io", "vk-test-options",
            "-n", TENANT, "--ignore-not-found", check=False,
        )  # fmt: skip


def test_endpointslice_reflection_lists_home_pods_on_the_provider_within_its_ranges(
    naples_peered: Clusters, tmp_path: Path
) -> None:
    """Liqo's EndpointSlice reflection, on (`--endpointslice-reflection-workers`): the provider's
    copy of a home Service lists the addresses of the pods that run at home, through
    ShadowEndpointSlices the provider checks against the ranges it accepts from the consumer.
    The consumer's identity writes no EndpointSlice; an address outside the ranges is refused."""
    clusters = naples_peered
    namespace = f"eps-{uuid.uuid4().hex[:6]}"
    twin = f"{namespace}-{CONSUMER}"
    provider_tenant = f"liqo-tenant-{CONSUMER}"

    def patch_virtual_node(spec: dict[str, object]) -> None:
        clusters.kubectl(
            CONSUMER, "patch", "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT,
            "--type=merge", "-p", json.dumps({"spec": spec}),
        )  # fmt: skip

    def provider_endpoints() -> set[str]:
        slices = get_json(
            clusters, PROVIDER, "endpointslices", "-n", twin, "-l",
            "liqo.io/managed-by=shadowendpointslice,kubernetes.io/service-name=web",
        ) or {}  # fmt: skip
        return {
            address
            for item in slices.get("items", [])
            for endpoint in item.get("endpoints") or []
            for address in endpoint.get("addresses") or []
        }

    clusters.kubectl(CONSUMER, "create", "namespace", namespace)
    workload = [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "web", "namespace": namespace},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "app", "image": "nginx"}]},
                },
            },
        },
    ]
    try:
        # Pods at home only: the namespace's Services are reflected, its pods stay.
        done = vkctl(clusters, "offload", "namespace", namespace, "--pod-offloading-strategy=Local")
        assert done.returncode == 0, done.stderr
        clusters.kubectl(
            CONSUMER, "apply", "-f", "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": workload}),
        )  # fmt: skip

        def home_ips() -> set[str]:
            pods = get_json(clusters, CONSUMER, "pods", "-n", namespace, "-l", "app=web")["items"]
            return {p["status"]["podIP"] for p in pods if p["status"].get("podIP")}

        ips = wait_until(lambda: len(ips := home_ips()) == 2 and ips, "2 pods running at home")
        first = sorted(ips)[0].split(".")
        clusters.kubectl(
            PROVIDER, "annotate", "namespace", provider_tenant, "--overwrite",
            f"offloading.vk.io/accepted-endpoint-ranges={first[0]}.{first[1]}.0.0/16",
        )  # fmt: skip
        patch_virtual_node(
            {
                "template": {
                    "spec": {
                        "template": {
                            "spec": {
                                "containers": [{"args": ["--endpointslice-reflection-workers=2"]}]
                            }
                        }
                    }
                }
            }
        )
        wait_until(
            lambda: provider_endpoints() == ips,
            "the provider's copy of web listing the home pods",
            timeout=120,
        )

        # As the consumer's slice identity: no EndpointSlice of its own, and a
        # ShadowEndpointSlice naming an address outside the ranges makes none.
        slice_name = get_json(
            clusters, CONSUMER, "virtualnodes.offloading.liqo.io", PROVIDER, "-n", TENANT
        )["metadata"]["labels"]["liqo.io/resourceslice-name"]
        printed = vkctl(
            clusters, "get", "kubeconfig", f"--remote-cluster-id={PROVIDER}",
            f"--resource-slice-name={slice_name}",
        )  # fmt: skip
        identity = tmp_path / "slice.kubeconfig"
        identity.write_text(printed.stdout)

        def as_tenant(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                ["kubectl", f"--kubeconfig={identity}", *args],
                input=stdin, capture_output=True, text=True, timeout=60,
            )  # fmt: skip

        can_i = as_tenant("auth", "can-i", "create", "endpointslices.discovery.k8s.io", "-n", twin)
        assert can_i.stdout.strip() == "no"
        hostile = {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "ShadowEndpointSlice",
            "metadata": {
                "name": "web-elsewhere",
                "namespace": twin,
                "labels": {"kubernetes.io/service-name": "web"},
            },
            "spec": {
                "template": {
                    "addressType": "IPv4",
                    "endpoints": [
                        {"addresses": ["203.0.113.7"]},
                        {"addresses": ["169.254.169.254"]},
                    ],
                    "ports": [{"port": 8080, "protocol": "TCP"}],
                }
            },
        }
        created = as_tenant("apply", "-f", "-", stdin=json.dumps(hostile))
        assert created.returncode == 0, created.stderr

        def refusal() -> str:
            found = get_json(
                clusters, PROVIDER, "shadowendpointslices.offloading.liqo.io", "web-elsewhere",
                "-n", twin,
            ) or {}  # fmt: skip
            conditions = (found.get("status") or {}).get("conditions") or []
            return " ".join(c.get("message", "") for c in conditions if c.get("status") == "False")

        said = wait_until(refusal, "the hostile ShadowEndpointSlice refused")
        assert "203.0.113.7 (outside the ranges" in said
        assert "169.254.169.254 (a loopback, link-local" in said
        assert get_json(clusters, PROVIDER, "endpointslice", "web-elsewhere", "-n", twin) is None
        assert "203.0.113.7" not in provider_endpoints()
    finally:
        patch_virtual_node({"template": None})
        clusters.kubectl(
            PROVIDER, "annotate", "namespace", provider_tenant,
            "offloading.vk.io/accepted-endpoint-ranges-", check=False,
        )  # fmt: skip
        vkctl(clusters, "unoffload", "namespace", namespace, "--timeout=120s")
        clusters.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")
