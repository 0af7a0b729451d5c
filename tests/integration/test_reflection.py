"""Reflection on real clusters (issue 8): what an offloaded pod uses at home — ConfigMaps,
Secrets, Services, its ServiceAccount token, claims, Ingresses — is in the provider, equal to
the local objects, kept so, and the provider's Events about it come back.

Two virtual kubelets serve naples from one tenant namespace, as two ResourceSlices to one
provider make them: one reflects the shared objects (the reflection Lease), each its own pods.
A third, in AllowList mode with a remote ingress class, serves a namespace of its own.
"""

from __future__ import annotations

import base64
import json
import signal
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.virtual_kubelets import HOME, Replica, VirtualNodeSetup
from vk.api.constants import (
    DESTINATION_LABEL,
    NODENAME_LABEL,
    ORIGIN_LABEL,
    SERVICE_ACCOUNT_NAME_LABEL,
)
from vk.reflection.forge.pods import remote_root_ca_configmap_name
from vk.reflection.manager import REFLECTION_LEASE

PROVIDER = "naples"
OURS = {ORIGIN_LABEL, DESTINATION_LABEL, NODENAME_LABEL}


@dataclass
class Reflection:
    first: VirtualNodeSetup
    second: VirtualNodeSetup
    namespace: str  # in venice
    remote: str  # its twin in naples
    replicas: dict[str, Replica]

    @property
    def clusters(self) -> Clusters:
        return self.first.clusters

    def local(self, *args: str, input: str | None = None, check: bool = True) -> Any:
        return self.clusters.kubectl(HOME, *args, input=input, check=check)

    def provider(self, *args: str, check: bool = True) -> Any:
        return self.clusters.kubectl(PROVIDER, *args, check=check)

    def events_about(self, name: str, reason: str) -> list[dict[str, Any]]:
        """The Events with `reason` about the object `name` of the namespace, at home."""
        out = self.local(
            "get", "events", "-n", self.namespace, "-o", "json",
            "--field-selector", f"involvedObject.name={name},reason={reason}",
        ).stdout  # fmt: skip
        items: list[dict[str, Any]] = json.loads(out)["items"]
        return items

    def bare_pod(self, name: str) -> None:
        """A Pod of that name at home, on the first virtual node, owned by nothing."""
        spec = self.first.deployment(name, self.namespace, 1)["spec"]["template"]["spec"]
        self.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})

    def token_warnings(self, pod: str) -> list[dict[str, Any]]:
        """The FailedSATokensReflection Events on `pod`, once there is one."""
        events: list[dict[str, Any]] = wait_until(
            lambda: self.events_about(pod, "FailedSATokensReflection"),
            "a FailedSATokensReflection Event on the pod",
            30,
        )
        return events

    def apply(self, *objects: dict[str, Any]) -> None:
        self.local(
            "apply",
            "-n",
            self.namespace,
            "-f",
            "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)}),
        )

    def remote_object(self, kind: str, name: str, namespace: str | None = None) -> Any:
        result = self.provider(
            "get", kind, name, "-n", namespace or self.remote, "-o", "json", check=False
        )
        return json.loads(result.stdout) if result.returncode == 0 else None

    def local_object(self, kind: str, name: str, namespace: str | None = None) -> Any:
        result = self.local(
            "get", kind, name, "-n", namespace or self.namespace, "-o", "json", check=False
        )
        return json.loads(result.stdout) if result.returncode == 0 else None

    def leader(self) -> str | None:
        result = self.local(
            "get", "lease", REFLECTION_LEASE, "-n", self.first.namespace, "-o", "json", check=False
        )
        if result.returncode != 0:
            return None
        holder: str | None = json.loads(result.stdout)["spec"].get("holderIdentity")
        return holder


def configmap(name: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": name,
            "labels": {"app": "shop", "tier": "config"},
            "annotations": {"example.com/owner": "team-a"},
        },
        "data": data,
    }


def without_ours(labels: dict[str, str] | None) -> dict[str, str]:
    return {k: v for k, v in (labels or {}).items() if k not in OURS}


def meta(obj: dict[str, Any]) -> tuple[dict[str, str], dict[str, str]]:
    metadata = obj["metadata"]
    annotations = {
        k: v
        for k, v in (metadata.get("annotations") or {}).items()
        if k != "kubectl.kubernetes.io/last-applied-configuration"
    }
    return without_ours(metadata.get("labels")), annotations


@pytest.fixture(scope="module")
def reflection(
    hand_made_virtual_kubelets: Clusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Reflection]:
    workdir = tmp_path_factory.mktemp("reflection")
    first = VirtualNodeSetup(hand_made_virtual_kubelets, workdir, provider=PROVIDER)
    first.create()
    second = VirtualNodeSetup(
        hand_made_virtual_kubelets, workdir, provider=PROVIDER, tenant=first.namespace
    )
    second.create()
    try:
        namespace = first.local_namespace()
        remote = first.offload_namespace(namespace)
        second.bind_offloaded(namespace)
        replicas = {"vk-a": first.start("vk-a"), "vk-b": second.start("vk-b")}
        wait_until(lambda: first.ready() and second.ready(), "both virtual nodes Ready", 60)
        state = Reflection(first, second, namespace, remote, replicas)
        wait_until(state.leader, "a reflection leader", 30)
        yield state
    finally:
        second.cleanup()
        first.cleanup()


def test_a_deployment_using_configmap_secret_and_services_runs_offloaded_on_equal_copies(
    reflection: Reflection,
) -> None:
    r = reflection
    r.apply(
        configmap("shop-settings", mode="production", greeting="hello"),
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "shop-credentials", "labels": {"app": "shop"}},
            "type": "Opaque",
            "stringData": {"password": "s3cret"},
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "shop-backend", "labels": {"app": "shop"}},
            "spec": {
                "type": "NodePort",
                "selector": {"app": "shop"},
                "sessionAffinity": "ClientIP",
                "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "shop-peers"},
            "spec": {"clusterIP": "None", "selector": {"app": "shop"}, "ports": [{"port": 7000}]},
        },
    )
    deployment = r.first.deployment("shop", r.namespace, 1)
    pod_spec = deployment["spec"]["template"]["spec"]
    pod_spec["containers"][0]["env"] = [
        {"name": "BACKEND", "value": "shop-backend"},
        {
            "name": "MODE",
            "valueFrom": {"configMapKeyRef": {"name": "shop-settings", "key": "mode"}},
        },
        {
            "name": "PASSWORD",
            "valueFrom": {"secretKeyRef": {"name": "shop-credentials", "key": "password"}},
        },
    ]
    pod_spec["containers"][0]["volumeMounts"] = [
        {"name": "settings", "mountPath": "/etc/shop"},
        {"name": "credentials", "mountPath": "/etc/credentials"},
    ]
    pod_spec["volumes"] = [
        {"name": "settings", "configMap": {"name": "shop-settings"}},
        {"name": "credentials", "secret": {"secretName": "shop-credentials"}},
    ]
    r.apply(deployment)
    pod = r.first.running_pod(r.namespace, "shop")
    remote_pod = wait_until(lambda: r.remote_object("pod", pod), "the remote pod")
    assert remote_pod["status"]["phase"] == "Running"

    for kind, name in (
        ("configmap", "shop-settings"),
        ("secret", "shop-credentials"),
        ("service", "shop-backend"),
        ("service", "shop-peers"),
    ):
        local = r.local_object(kind, name)
        copy = wait_until(lambda k=kind, n=name: r.remote_object(k, n), f"the {kind} {name}")
        assert meta(copy) == meta(local), f"{kind} {name}: labels and annotations"
        assert copy["metadata"]["labels"][ORIGIN_LABEL] == "venice"
        assert copy["metadata"]["labels"][DESTINATION_LABEL] == PROVIDER
        if kind in ("configmap", "secret"):
            assert copy.get("data") == local.get("data")
        if kind == "secret":
            assert copy["type"] == "Opaque"
        if kind == "service":
            for field in ("type", "selector", "sessionAffinity"):
                assert copy["spec"].get(field) == local["spec"].get(field), field
            assert [
                {k: v for k, v in port.items() if k != "nodePort"} for port in copy["spec"]["ports"]
            ] == [
                {k: v for k, v in port.items() if k != "nodePort"}
                for port in local["spec"]["ports"]
            ]
    assert r.remote_object("service", "shop-peers")["spec"]["clusterIP"] == "None"
    backend = r.remote_object("service", "shop-backend")
    assert (
        backend["spec"]["clusterIP"]
        != r.local_object("service", "shop-backend")["spec"]["clusterIP"]
    ), "the provider allocates its own cluster IP"


def test_configmap_updates_edits_and_deletion_follow_the_local_one(reflection: Reflection) -> None:
    r = reflection
    r.apply(configmap("feature-flags", checkout="off"))
    wait_until(lambda: r.remote_object("configmap", "feature-flags"), "the copy")

    r.local(
        "patch", "configmap", "feature-flags", "-n", r.namespace, "-p", '{"data":{"checkout":"on"}}'
    )
    wait_until(
        lambda: (
            (r.remote_object("configmap", "feature-flags") or {}).get("data") == {"checkout": "on"}
        ),
        "the update in the provider",
        10,
    )

    # Edited by hand in the provider: set back, a key added by hand included.
    r.provider(
        "patch", "configmap", "feature-flags", "-n", r.remote,
        "-p", '{"data":{"checkout":"broken","extra":"x"},"metadata":{"labels":{"hand":"made"}}}',
    )  # fmt: skip
    copy = wait_until(
        lambda: (
            (c := r.remote_object("configmap", "feature-flags"))
            and c.get("data") == {"checkout": "on"}
            and "hand" not in c["metadata"]["labels"]
            and c
        ),
        "the hand edit set back",
        10,
    )
    assert copy["metadata"]["labels"][ORIGIN_LABEL] == "venice"

    # Deleted by hand in the provider: made again.
    uid = copy["metadata"]["uid"]
    r.provider("delete", "configmap", "feature-flags", "-n", r.remote)
    wait_until(
        lambda: (
            (c := r.remote_object("configmap", "feature-flags")) and c["metadata"]["uid"] != uid
        ),
        "the copy made again",
        10,
    )

    r.local("delete", "configmap", "feature-flags", "-n", r.namespace)
    wait_until(
        lambda: r.remote_object("configmap", "feature-flags") is None, "the copy deleted", 10
    )


def test_skip_reflection_keeps_a_secret_home_and_removes_its_copy(reflection: Reflection) -> None:
    r = reflection
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "home-only"},
        "stringData": {"key": "value"},
    }
    r.apply(secret)
    wait_until(lambda: r.remote_object("secret", "home-only"), "the copy")
    r.local("annotate", "secret", "home-only", "-n", r.namespace, "liqo.io/skip-reflection=true")
    wait_until(lambda: r.remote_object("secret", "home-only") is None, "the copy removed", 10)

    secret["metadata"] = {"name": "never-sent", "annotations": {"liqo.io/skip-reflection": ""}}
    r.apply(secret, configmap("sent-after-it"))
    wait_until(lambda: r.remote_object("configmap", "sent-after-it"), "a later ConfigMap's copy")
    assert r.remote_object("secret", "never-sent") is None


def test_a_foreign_remote_configmap_is_left_untouched_and_reported(
    reflection: Reflection,
) -> None:
    r = reflection
    foreign = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "taken", "namespace": r.remote, "labels": {"owner": "naples-admin"}},
        "data": {"theirs": "yes"},
    }
    r.clusters.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(foreign))
    before = r.remote_object("configmap", "taken")
    r.apply(configmap("taken", ours="yes"))

    events = wait_until(
        lambda: r.events_about("taken", "FailedReflection"),
        "a FailedReflection Event on the local ConfigMap",
        15,
    )
    assert "already exists" in events[0]["message"]
    assert events[0]["involvedObject"]["kind"] == "ConfigMap"
    after = r.remote_object("configmap", "taken")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    assert after["data"] == {"theirs": "yes"}

    r.local("delete", "configmap", "taken", "-n", r.namespace)
    r.local("apply", "-n", r.namespace, "-f", "-", input=json.dumps(configmap("after-taken")))
    wait_until(lambda: r.remote_object("configmap", "after-taken"), "a later copy")
    assert r.remote_object("configmap", "taken")["data"] == {"theirs": "yes"}, "never deleted"


def test_offloaded_pods_token_authenticates_at_home_as_its_service_account(
    reflection: Reflection,
) -> None:
    r = reflection
    r.local("create", "serviceaccount", "shop-reader", "-n", r.namespace)
    deployment = r.first.deployment("reader", r.namespace, 1)
    deployment["spec"]["template"]["spec"]["serviceAccountName"] = "shop-reader"
    r.apply(deployment)
    pod = r.first.running_pod(r.namespace, "reader")

    secret = wait_until(lambda: r.remote_object("secret", f"{pod}-token"), "the token Secret")
    assert secret["metadata"]["labels"][NODENAME_LABEL] == r.first.node
    tokens = [base64.b64decode(v).decode() for v in secret["data"].values()]
    assert len(tokens) == 1
    review = json.loads(
        r.local(
            "create", "-o", "json", "-f", "-",
            input=json.dumps({
                "apiVersion": "authentication.k8s.io/v1",
                "kind": "TokenReview",
                "spec": {"token": tokens[0]},
            }),
        ).stdout
    )  # fmt: skip
    assert review["status"]["authenticated"] is True, review["status"]
    assert review["status"]["user"]["username"] == (
        f"system:serviceaccount:{r.namespace}:shop-reader"
    )

    # The remote pod mounts that Secret where the projected token was, and the home CA.
    remote_pod = r.remote_object("pod", pod)
    access = next(v for v in remote_pod["spec"]["volumes"] if v["name"].startswith("kube-api"))
    sources = access["projected"]["sources"]
    assert {
        "secret": {
            "name": f"{pod}-token",
            "items": [{"key": next(iter(secret["data"])), "path": "token"}],
        }
    } in sources
    root_ca = remote_root_ca_configmap_name("venice")
    assert any((s.get("configMap") or {}).get("name") == root_ca for s in sources)
    ca = wait_until(lambda: r.remote_object("configmap", root_ca), "the home CA")
    assert ca["data"] == r.local_object("configmap", "kube-root-ca.crt")["data"]

    r.local("delete", "deployment", "reader", "-n", r.namespace)
    wait_until(
        lambda: r.remote_object("secret", f"{pod}-token") is None, "the token Secret removed", 30
    )


def test_a_token_secret_the_provider_made_first_is_left_untouched_and_reported(
    reflection: Reflection,
) -> None:
    """The Secret reflector and the token reflector share one cache of the provider's Secrets:
    a Secret named as a pod's token Secret that this virtual kubelet did not write is never
    written over nor deleted, and the pod's owner is told. Nor is the pod offloaded meanwhile:
    it would mount the provider's Secret as its token."""
    r = reflection
    planted = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "planted-token", "namespace": r.remote},
        "stringData": {"token": "the provider's"},
    }
    r.clusters.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(planted))
    before = r.remote_object("secret", "planted-token")
    r.bare_pod("planted")
    events = r.token_warnings("planted")
    assert "did not write" in events[0]["message"]
    time.sleep(2)  # the pod reflector had its turn: a ShadowPod would be there by now
    assert r.remote_object("shadowpod", "planted") is None
    after = r.remote_object("secret", "planted-token")
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]
    # The provider's Secret gone, the pod gets its own tokens, then its ShadowPod.
    r.provider("delete", "secret", "planted-token", "-n", r.remote)
    secret = wait_until(
        lambda: r.remote_object("secret", "planted-token"), "the virtual kubelet's token Secret"
    )
    assert secret["metadata"]["labels"][SERVICE_ACCOUNT_NAME_LABEL] == "default"
    wait_until(lambda: r.remote_object("shadowpod", "planted"), "the ShadowPod, after the Secret")
    r.local("delete", "pod", "planted", "-n", r.namespace, "--wait=false")
    wait_until(lambda: r.remote_object("pod", "planted") is None, "the remote pod gone", 30)


def test_a_token_secret_the_provider_refuses_is_reported_and_written_once_allowed(
    reflection: Reflection,
) -> None:
    """The twin namespace's `secrets` quota full: the pod's owner is told why its pod has no
    tokens, and the Secret is written once the provider makes room."""
    r = reflection
    full = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-room", "namespace": r.remote},
        "spec": {"hard": {"secrets": "0"}},  # below what is there: no new Secret at all
    }
    r.clusters.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(full))
    try:
        wait_until(
            lambda: (
                "secrets"
                in (r.remote_object("resourcequota", "no-room") or {})
                .get("status", {})
                .get("used", {})
            ),
            "the provider's quota counted",
        )
        r.bare_pod("crowded")
        events = r.token_warnings("crowded")
        assert "refused the pod's ServiceAccount token Secret" in events[0]["message"]
        assert "exceeded quota: no-room" in events[0]["message"]
        assert r.remote_object("secret", "crowded-token") is None
        # Its ShadowPod waits for the Secret: the provider's kubelet would start nothing.
        assert r.remote_object("shadowpod", "crowded") is None
    finally:
        r.provider("delete", "resourcequota", "no-room", "-n", r.remote, check=False)
    wait_until(
        lambda: r.remote_object("secret", "crowded-token"), "the token Secret, with room", 60
    )
    wait_until(lambda: r.remote_object("shadowpod", "crowded"), "the ShadowPod, after the Secret")
    r.local("delete", "pod", "crowded", "-n", r.namespace, "--wait=false")
    wait_until(lambda: r.remote_object("pod", "crowded") is None, "the remote pod gone", 30)


def test_services_the_provider_gives_no_node_ports_are_reflected_as_cluster_ip_until_it_does(
    reflection: Reflection,
) -> None:
    """A vk provider gives its consumers no node ports or load balancers by default: such a
    Service was not reflected at all, and the offloaded pods there could not reach it by its
    name. Now it is, as ClusterIP, said once on the Service; and whole once the provider allows."""
    r = reflection
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "no-node-ports", "namespace": r.remote},
        "spec": {"hard": {"services.nodeports": "0", "services.loadbalancers": "0"}},
    }
    r.clusters.kubectl(PROVIDER, "apply", "-f", "-", input=json.dumps(quota))
    exposed = {"NodePort": "storefront", "LoadBalancer": "storefront-public"}
    try:
        wait_until(
            lambda: (
                "services.nodeports"
                in (r.remote_object("resourcequota", "no-node-ports") or {})
                .get("status", {})
                .get("used", {})
            ),
            "the provider's quota counted",
        )
        r.apply(
            *(
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "metadata": {"name": name},
                    "spec": {
                        "type": kind,
                        "selector": {"app": "storefront"},
                        "externalTrafficPolicy": "Local",
                        "ports": [{"name": "http", "port": 80, "targetPort": 8080}],
                    },
                }
                for kind, name in exposed.items()
            )
        )
        for kind, name in exposed.items():
            [said] = wait_until(
                lambda n=name: r.events_about(n, "ReflectedLessened"),
                f"the {kind} Service said reflected in part",
                30,
            )
            assert "exceeded quota: no-node-ports" in said["message"]
            assert "reflected there as a ClusterIP Service" in said["message"]
            copy = r.remote_object("service", name)
            assert copy["spec"]["type"] == "ClusterIP"
            assert copy["spec"]["selector"] == {"app": "storefront"}
            assert [(p["port"], p["targetPort"]) for p in copy["spec"]["ports"]] == [(80, 8080)]
            assert "externalTrafficPolicy" not in copy["spec"]
        # Tried again every 10 s, refused again each time: said once all the same.
        time.sleep(25)
        for name in exposed.values():
            [said] = r.events_about(name, "ReflectedLessened")
            assert said.get("count", 1) == 1, said
            assert r.events_about(name, "FailedReflection") == []
    finally:
        r.provider("delete", "resourcequota", "no-node-ports", "-n", r.remote, check=False)
    for kind, name in exposed.items():
        wait_until(
            lambda n=name, k=kind: (r.remote_object("service", n) or {})["spec"]["type"] == k,
            f"the {kind} Service whole, once the provider allows it",
            60,
        )
    r.local("delete", "service", *exposed.values(), "-n", r.namespace)


def test_an_event_in_the_provider_about_an_offloaded_pod_shows_in_describe(
    reflection: Reflection,
) -> None:
    r = reflection
    r.apply(r.first.deployment("watched", r.namespace, 1))
    pod = r.first.running_pod(r.namespace, "watched")
    remote_pod = wait_until(lambda: r.remote_object("pod", pod), "the remote pod")
    name = f"{pod}.{uuid.uuid4().hex[:12]}"
    event = {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": name, "namespace": r.remote},
        "involvedObject": {
            "apiVersion": "v1",
            "kind": "Pod",
            "name": pod,
            "namespace": r.remote,
            "uid": remote_pod["metadata"]["uid"],
        },
        "type": "Warning",
        "reason": "BackOff",
        "message": "Back-off pulling image nginx (seen in naples)",
        "source": {"component": "kubelet", "host": "naples-worker-1"},
        "firstTimestamp": "2026-11-22T10:00:00Z",
        "lastTimestamp": "2026-11-22T10:00:00Z",
        "count": 1,
    }
    r.clusters.kubectl(PROVIDER, "create", "-f", "-", input=json.dumps(event))
    local = wait_until(lambda: r.local_object("event", name), "the Event at home", 15)
    assert local["involvedObject"]["uid"] == r.local_object("pod", pod)["metadata"]["uid"]
    assert local["involvedObject"]["namespace"] == r.namespace
    assert local["source"]["component"] == "kubelet (remote)"
    described = r.local("describe", "pod", pod, "-n", r.namespace).stdout
    assert "Back-off pulling image nginx (seen in naples)" in described

    r.provider("delete", "event", name, "-n", r.remote)
    wait_until(lambda: r.local_object("event", name) is None, "the Event removed at home", 15)


def test_a_claim_of_the_liqo_class_is_provisioned_in_the_provider(reflection: Reflection) -> None:
    r = reflection
    volume = f"static-{uuid.uuid4().hex[:6]}"
    r.clusters.kubectl(
        PROVIDER, "apply", "-f", "-",
        input=json.dumps({
            "apiVersion": "v1",
            "kind": "PersistentVolume",
            "metadata": {"name": volume},
            "spec": {
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "hostPath": {"path": f"/tmp/{volume}"},
                "claimRef": {"namespace": r.remote, "name": "shop-data"},
            },
        }),
    )  # fmt: skip
    r.first.cleanups.append(
        lambda: r.clusters.kubectl(PROVIDER, "delete", "pv", volume, "--wait=false", check=False)
    )
    r.apply(
        {
            "apiVersion": "v1",
            "kind": "PersistentVolumeClaim",
            "metadata": {"name": "shop-data"},
            "spec": {
                "storageClassName": "liqo",
                "accessModes": ["ReadWriteOnce"],
                "resources": {"requests": {"storage": "1Gi"}},
            },
        }
    )
    deployment = r.first.deployment("stateful", r.namespace, 1)
    spec = deployment["spec"]["template"]["spec"]
    spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": "shop-data"}}]
    spec["containers"][0]["volumeMounts"] = [{"name": "data", "mountPath": "/data"}]
    r.apply(deployment)
    pod = r.first.running_pod(r.namespace, "stateful")
    local_claim = r.local_object("pvc", "shop-data")
    assert local_claim["status"]["phase"] == "Bound"
    assert local_claim["spec"]["volumeName"] == f"pvc-{local_claim['metadata']['uid']}"
    local_volume = r.local_object("pv", local_claim["spec"]["volumeName"], namespace="default")
    assert local_volume["metadata"]["labels"][NODENAME_LABEL] == r.first.node
    remote_claim = wait_until(
        lambda: (
            (c := r.remote_object("pvc", "shop-data"))
            and c.get("status", {}).get("phase") == "Bound"
            and c
        ),
        "the remote claim Bound",
        30,
    )
    assert remote_claim["spec"]["volumeName"] == volume
    assert r.remote_object("pod", pod)["spec"]["volumes"][0]["persistentVolumeClaim"] == {
        "claimName": "shop-data"
    }

    r.local("delete", "deployment", "stateful", "-n", r.namespace, "--wait=true")
    r.local("delete", "pvc", "shop-data", "-n", r.namespace)
    wait_until(lambda: r.remote_object("pvc", "shop-data") is None, "the remote claim gone", 60)
    wait_until(
        lambda: r.local_object("pv", local_claim["spec"]["volumeName"]) is None,
        "the local volume gone",
        30,
    )


def test_allow_list_mode_and_the_remote_ingress_class(
    hand_made_virtual_kubelets: Clusters, tmp_path: Path
) -> None:
    setup = VirtualNodeSetup(hand_made_virtual_kubelets, tmp_path, provider=PROVIDER)
    setup.create()
    try:
        namespace = setup.local_namespace()
        remote = setup.offload_namespace(namespace)
        setup.start(
            "vk-allow",
            "--configmap-reflection-type=AllowList",
            "--remote-real-ingress-class-name=provider-nginx",
        )
        wait_until(setup.ready, "the virtual node Ready", 60)
        allowed = configmap("allowed", a="1")
        allowed["metadata"]["annotations"]["liqo.io/allow-reflection"] = "true"
        ingress = {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "Ingress",
            "metadata": {"name": "shop", "annotations": {"kubernetes.io/ingress.class": "home"}},
            "spec": {
                "rules": [
                    {
                        "host": "shop.example.com",
                        "http": {
                            "paths": [
                                {
                                    "path": "/",
                                    "pathType": "Prefix",
                                    "backend": {
                                        "service": {"name": "shop", "port": {"number": 80}}
                                    },
                                }
                            ]
                        },
                    }
                ],
            },
        }
        setup.kubectl(
            "apply", "-n", namespace, "-f", "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List",
                              "items": [configmap("not-allowed", b="2"), allowed, ingress]}),
        )  # fmt: skip

        def copy_of(kind: str, name: str) -> Any:
            result = setup.clusters.kubectl(
                PROVIDER, "get", kind, name, "-n", remote, "-o", "json", check=False
            )
            return json.loads(result.stdout) if result.returncode == 0 else None

        wait_until(lambda: copy_of("configmap", "allowed"), "the allowed ConfigMap's copy")
        copy = wait_until(lambda: copy_of("ingress", "shop"), "the Ingress's copy")
        assert copy["spec"]["ingressClassName"] == "provider-nginx"
        assert "kubernetes.io/ingress.class" not in (copy["metadata"].get("annotations") or {})
        assert copy["spec"]["rules"][0]["host"] == "shop.example.com"
        assert copy_of("configmap", "not-allowed") is None
        # kube-root-ca.crt is reflected whatever the policy: offloaded pods verify home with it.
        wait_until(
            lambda: copy_of("configmap", remote_root_ca_configmap_name("venice")), "the home CA"
        )
    finally:
        setup.cleanup()


def test_a_namespace_of_the_same_name_in_the_provider_is_reflected_without_churn(
    reflection: Reflection,
) -> None:
    """EnforceSameName: both sides' objects live in namespaces of one name, and the home CA's
    copy (`kube-root-ca.crt.<id>`) must not be taken for a local object of that name."""
    r = reflection
    namespace = r.first.local_namespace()
    r.first.offload_namespace(namespace, remote=namespace)
    r.second.bind_offloaded(namespace)
    r.local("create", "configmap", "same-name", "-n", namespace, "--from-literal=a=1")
    root_ca = remote_root_ca_configmap_name("venice")
    copies = wait_until(
        lambda: (
            (ca := r.remote_object("configmap", root_ca, namespace))
            and (cm := r.remote_object("configmap", "same-name", namespace))
            and (ca, cm)
        ),
        "the ConfigMap and the home CA in the provider's namespace of the same name",
        30,
    )
    time.sleep(3)
    for before in copies:
        after = r.remote_object("configmap", before["metadata"]["name"], namespace)
        assert after["metadata"]["uid"] == before["metadata"]["uid"], "never deleted"
        assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_the_other_virtual_kubelet_takes_over_when_the_reflecting_one_is_killed(
    reflection: Reflection,
) -> None:
    r = reflection
    leader = wait_until(r.leader, "a reflection leader")
    other = next(identity for identity in r.replicas if identity != leader)
    r.replicas[leader].signal(signal.SIGKILL)
    r.replicas[leader].wait()
    r.apply(configmap("created-meanwhile", when="after the kill"))
    copy = wait_until(
        lambda: r.remote_object("configmap", "created-meanwhile"),
        "the ConfigMap reflected by the other virtual kubelet",
        60,
    )
    assert copy["data"] == {"when": "after the kill"}
    assert r.leader() == other
