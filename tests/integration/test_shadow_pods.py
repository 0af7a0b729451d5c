"""A provider is safe from its tenants (issue 18), tried as an attacker would on the playground:
venice peered with naples, each attempt made with the identity vk gives venice there (the
kubeconfig of venice's Secret `kubeconfig-resourceslice-naples`, or impersonated with the same
user and group). A tenant creates no Pod, only ShadowPods, which naples' webhook checks (where
the pod runs, its Pod Security level) and naples' controller manager turns into Pods, which the
API server's Pod Security admission checks again."""

from __future__ import annotations

import base64
import json
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import Clusters, KubectlResult
from tests.integration.polling import wait_until
from tests.integration.test_namespace_offloading import (
    apply,
    deployment,
    vkctl,
)
from tests.integration.test_untrusted_provider import controller_manager_metrics, requests_made
from vk.api.constants import (
    CREATOR_USER_LABEL,
    kubeconfig_secret_name,
    resource_slice_user,
    tenant_group,
)
from vk.controllers.provider_shadowpods import POD_PATCH_BURST, POD_PATCH_INTERVAL_SECONDS
from vk.webhooks.configuration import SHADOW_POD_WEBHOOK, STAMP_WEBHOOK

CONSUMER, PROVIDER = "venice", "naples"
USER = resource_slice_user(CONSUMER, PROVIDER)  # the slice `vkctl peer` makes is named naples
GROUP = tenant_group(CONSUMER)

# The probe: root on the provider's node, if it were admitted.
PROBE_SPEC: dict[str, Any] = {
    "hostNetwork": True,
    "hostPID": True,
    "containers": [
        {
            "name": "app",
            "image": "nginx",
            "securityContext": {"privileged": True},
            "volumeMounts": [{"name": "root", "mountPath": "/host"}],
        }
    ],
    "volumes": [{"name": "root", "hostPath": {"path": "/"}}],
}


@dataclass
class Tenancy:
    clusters: Clusters
    namespace: str  # venice's, offloaded to naples under the same name
    slice_kubeconfig: Path

    def provider(self, *args: str, input: str | None = None, check: bool = True) -> KubectlResult:
        return self.clusters.kubectl(PROVIDER, *args, input=input, check=check)

    def as_slice(self, *args: str, input: str | None = None) -> KubectlResult:
        """kubectl on naples with the slice identity's own kubeconfig."""
        return self.clusters.kubectl(
            PROVIDER, f"--kubeconfig={self.slice_kubeconfig}", *args, input=input, check=False
        )

    def can_i(self, *args: str) -> bool:
        answer = self.provider(
            "auth", "can-i", *args, "-n", self.namespace, f"--as={USER}", f"--as-group={GROUP}",
            check=False,
        )  # fmt: skip
        return answer.stdout.strip() == "yes"

    def shadow_pod(self, name: str, spec: dict[str, Any], namespace: str | None = None) -> str:
        return json.dumps(
            {
                "apiVersion": "offloading.liqo.io/v1beta1",
                "kind": "ShadowPod",
                "metadata": {"name": name, "namespace": namespace or self.namespace},
                "spec": {"pod": spec},
            }
        )

    def get(self, kind: str, name: str, namespace: str | None = None) -> dict[str, Any] | None:
        found = self.provider(
            "get", kind, name, "-n", namespace or self.namespace, "-o", "json", check=False
        )
        return json.loads(found.stdout) if found.returncode == 0 else None


@pytest.fixture
def tenancy(naples_peered: Clusters, tmp_path: Path) -> Iterator[Tenancy]:
    namespace = f"zt-{uuid.uuid4().hex[:8]}"
    naples_peered.kubectl(CONSUMER, "create", "namespace", namespace)
    done = vkctl(
        naples_peered, "offload", "namespace", namespace,
        "--namespace-mapping-strategy", "EnforceSameName", "--pod-offloading-strategy", "Remote",
        "--selector=topology.liqo.io/region=south",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    secret = json.loads(
        naples_peered.kubectl(
            CONSUMER, "get", "secret", kubeconfig_secret_name(PROVIDER),
            "-n", f"liqo-tenant-{PROVIDER}", "-o", "json",
        ).stdout
    )  # fmt: skip
    slice_kubeconfig = tmp_path / "slice.kubeconfig"
    slice_kubeconfig.write_bytes(base64.b64decode(secret["data"]["kubeconfig"]))
    try:
        yield Tenancy(naples_peered, namespace, slice_kubeconfig)
    finally:
        vkctl(naples_peered, "unoffload", "namespace", namespace, "--timeout=120s")
        naples_peered.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def test_the_tenant_writes_shadow_pods_and_only_reads_pods(tenancy: Tenancy) -> None:
    raw = tenancy.as_slice(
        "run", "raw", "-n", tenancy.namespace, "--image=nginx", "--overrides",
        json.dumps({"spec": PROBE_SPEC}),
    )  # fmt: skip
    assert raw.returncode != 0
    assert "Forbidden" in raw.stderr
    assert 'cannot create resource "pods"' in raw.stderr

    for verb in ("create", "update", "patch", "delete", "get", "list", "watch"):
        assert tenancy.can_i(verb, "shadowpods.offloading.liqo.io"), verb
    for verb in ("get", "list", "watch"):
        assert tenancy.can_i(verb, "pods"), verb
    for verb in ("create", "update", "patch", "delete", "deletecollection"):
        assert not tenancy.can_i(verb, "pods"), verb
    # What logs, exec, attach and port-forward need, and no more on a live pod.
    assert tenancy.can_i("get", "pods", "--subresource=log")
    for subresource in ("exec", "attach", "portforward"):
        assert tenancy.can_i("create", "pods", f"--subresource={subresource}"), subresource
    for verb in ("update", "patch"):
        for subresource in ("ephemeralcontainers", "status", "binding"):
            assert not tenancy.can_i(verb, "pods", f"--subresource={subresource}")
    assert not tenancy.can_i("create", "pods", "--subresource=eviction")
    # Nothing of the provider's own.
    for attempt in (
        ("create", "deployments.apps"),
        ("create", "roles.rbac.authorization.k8s.io"),
        ("create", "rolebindings.rbac.authorization.k8s.io"),
        ("update", "namespaces"),
        ("patch", "shadowpods.offloading.liqo.io", "--subresource=status"),
    ):
        assert not tenancy.can_i(*attempt), attempt


def test_the_probe_as_a_shadow_pod_is_refused_naming_each_field(tenancy: Tenancy) -> None:
    refused = tenancy.as_slice("create", "-f", "-", input=tenancy.shadow_pod("probe", PROBE_SPEC))
    assert refused.returncode != 0
    assert 'admission webhook "shadowpod.validate.liqo.io" denied the request' in refused.stderr
    assert 'Pod Security level "baseline"' in refused.stderr
    for field in ("privileged", "hostNetwork", "hostPID", "hostPath"):
        assert field in refused.stderr, field
    assert tenancy.get("shadowpod", "probe") is None


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        ({"priorityClassName": "system-node-critical"}, "spec.priorityClassName"),
        ({"nodeName": "naples-worker-1"}, "spec.nodeName"),
        (
            {
                "tolerations": [
                    {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
                ]
            },
            "tolerates 'node-role.kubernetes.io/control-plane'",
        ),
    ],
)
def test_a_shadow_pod_choosing_where_it_runs_is_refused(
    tenancy: Tenancy, extra: dict[str, Any], says: str
) -> None:
    spec = {"containers": [{"name": "app", "image": "nginx"}], **extra}
    refused = tenancy.as_slice("create", "-f", "-", input=tenancy.shadow_pod("placed", spec))
    assert refused.returncode != 0
    assert "the provider decides where its tenants' pods run" in refused.stderr
    assert says in refused.stderr


def test_a_probe_the_providers_admin_writes_gets_no_pod_and_says_why(tenancy: Tenancy) -> None:
    """The provider's own administrator is no tenant: the webhook lets the ShadowPod through
    unstamped. In a namespace of the provider's own, the API server's Pod Security admission
    refuses the Pod made of it; in a namespace made for a consumer, whatever is there is the
    consumer's, and runs only if the consumer's Quota admitted it."""
    own = f"admins-{uuid.uuid4().hex[:6]}"
    tenancy.provider("create", "namespace", own)
    tenancy.provider("label", "namespace", own, "pod-security.kubernetes.io/enforce=baseline")
    try:
        for namespace, reason, message in (
            (own, "PodSecurity", 'violates PodSecurity "baseline:latest"'),
            (tenancy.namespace, "NotReserved", "carries no creator stamp"),
        ):
            probe = tenancy.shadow_pod("admins-probe", PROBE_SPEC, namespace)
            tenancy.provider("create", "-n", namespace, "-f", "-", input=probe)

            def refusal(namespace: str = namespace) -> dict[str, Any] | None:
                shadow = tenancy.get("shadowpod", "admins-probe", namespace) or {}
                conditions = (shadow.get("status") or {}).get("conditions") or []
                return next(
                    (c for c in conditions if c["type"] == "PodCreated" and c["status"] == "False"),
                    None,
                )

            condition = wait_until(refusal, f"the ShadowPod's PodCreated False in {namespace}")
            assert condition["reason"] == reason
            assert message in condition["message"]
            assert tenancy.get("pod", "admins-probe", namespace) is None
            tenancy.provider("delete", "shadowpod", "admins-probe", "-n", namespace)
    finally:
        tenancy.provider("delete", "namespace", own, "--wait=false")


@contextmanager
def without_webhooks(tenancy: Tenancy, *, stamp: bool = False) -> Iterator[None]:
    """naples' ShadowPod validating webhook taken out of its configuration for a while, as on a
    cluster where it was never installed, and with `stamp` the stamping one too (as when both
    fail open, failurePolicy Ignore, while the webhook is down); put back after."""
    removed = {("validatingwebhookconfiguration", SHADOW_POD_WEBHOOK)}
    if stamp:
        removed.add(("mutatingwebhookconfiguration", STAMP_WEBHOOK))
    saved = {}
    for kind, webhook in removed:
        configuration = json.loads(tenancy.provider("get", kind, "vk", "-o", "json").stdout)
        for field in ("resourceVersion", "uid", "creationTimestamp", "managedFields", "generation"):
            configuration["metadata"].pop(field, None)
        saved[kind] = configuration
        bypassed = {
            **configuration,
            "webhooks": [w for w in configuration["webhooks"] if w["name"] != webhook],
        }
        tenancy.provider("replace", "-f", "-", input=json.dumps(bypassed))
    try:
        yield
    finally:
        for configuration in saved.values():
            tenancy.provider("replace", "-f", "-", input=json.dumps(configuration))


def test_a_consumers_shadow_pod_that_bypassed_the_webhook_gets_no_pod(tenancy: Tenancy) -> None:
    # Within naples' rules in every way, but never admitted: no Quota's ledger holds it.
    spec = {"containers": [{"name": "app", "image": "nginx"}]}
    with without_webhooks(tenancy):
        created = tenancy.as_slice(
            "create", "-f", "-", input=tenancy.shadow_pod("unadmitted", spec)
        )
    assert created.returncode == 0, created.stderr
    admitted = tenancy.as_slice("create", "-f", "-", input=tenancy.shadow_pod("admitted", spec))
    assert admitted.returncode == 0, admitted.stderr

    def conditions(name: str) -> dict[str, dict[str, Any]] | None:
        shadow = tenancy.get("shadowpod", name) or {}
        found = (shadow.get("status") or {}).get("conditions") or []
        by_type = {c["type"]: c for c in found}
        return by_type if "QuotaReserved" in by_type else None

    refused = wait_until(lambda: conditions("unadmitted"), "the unadmitted ShadowPod's verdict")
    assert refused["QuotaReserved"]["status"] == "False"
    assert refused["QuotaReserved"]["reason"] == "NotReserved"
    assert (refused["PodCreated"]["status"], refused["PodCreated"]["reason"]) == (
        "False",
        "NotReserved",
    )
    assert "did not pass the provider's ShadowPod webhook" in refused["PodCreated"]["message"]
    accounted = wait_until(lambda: conditions("admitted"), "the admitted ShadowPod's verdict")
    assert accounted["QuotaReserved"]["status"] == "True"
    assert wait_until(lambda: tenancy.get("pod", "admitted"), "the admitted ShadowPod's Pod")
    assert tenancy.get("pod", "unadmitted") is None
    # The admitted one's reservation is folded into the usage once accounted; the other never
    # had one.
    admitted_key, unadmitted_key = (f"{tenancy.namespace}/{n}" for n in ("admitted", "unadmitted"))
    wait_until(
        lambda: admitted_key not in (quota_status(tenancy).get("reservations") or {}),
        "the admitted ShadowPod's reservation folded into the usage",
    )
    assert unadmitted_key not in (quota_status(tenancy).get("reservations") or {})
    for name in ("unadmitted", "admitted"):
        tenancy.provider("delete", "shadowpod", name, "-n", tenancy.namespace)


def test_a_consumer_changing_a_shadow_pod_on_and_on_has_its_pod_patched_at_a_pace(
    tenancy: Tenancy,
) -> None:
    """The attack: venice relabels one of its ShadowPods on and on. Each change was a patch of
    its Pod on naples, and an event of it for each of the Pod's watchers; past a burst, one is
    patched every POD_PATCH_INTERVAL_SECONDS, and the Pod ends as the ShadowPod says last."""
    spec = {"containers": [{"name": "app", "image": "nginx"}]}
    made = tenancy.as_slice("create", "-f", "-", input=tenancy.shadow_pod("relabelled", spec))
    assert made.returncode == 0, made.stderr
    wait_until(lambda: tenancy.get("pod", "relabelled"), "its Pod")

    def patches() -> float:
        metrics = controller_manager_metrics(tenancy.clusters, PROVIDER)
        return requests_made(metrics, "home", "PATCH", "pods")

    def flip() -> str | None:
        labels = ((tenancy.get("pod", "relabelled") or {}).get("metadata") or {}).get("labels")
        return (labels or {}).get("flip")

    before, started = patches(), time.monotonic()
    rewrites = 30
    for rewrite in range(rewrites):
        relabelled = tenancy.as_slice(
            "label", "shadowpod", "relabelled", "-n", tenancy.namespace, f"flip={rewrite}",
            "--overwrite",
        )  # fmt: skip
        assert relabelled.returncode == 0, relabelled.stderr
    elapsed = time.monotonic() - started
    wait_until(lambda: flip() == str(rewrites - 1), "the Pod as its ShadowPod says last")
    patched = patches() - before
    assert patched <= POD_PATCH_BURST + elapsed / POD_PATCH_INTERVAL_SECONDS + 1 < rewrites, (
        patched,
        elapsed,
    )
    tenancy.provider("delete", "shadowpod", "relabelled", "-n", tenancy.namespace)


def test_a_shadow_pod_that_bypassed_every_webhook_is_still_the_consumers_and_gets_no_pod(
    tenancy: Tenancy,
) -> None:
    """Unstamped, it once passed for the provider's own, and got a Pod that no Quota counted
    and no scheduling rule checked (here: a node of its choosing)."""
    node = json.loads(tenancy.provider("get", "nodes", "-o", "json").stdout)["items"][0]
    spec = {
        "nodeName": node["metadata"]["name"],
        "containers": [{"name": "app", "image": "nginx"}],
    }
    with without_webhooks(tenancy, stamp=True):
        created = tenancy.as_slice("create", "-f", "-", input=tenancy.shadow_pod("unstamped", spec))
    assert created.returncode == 0, created.stderr
    try:
        stored = tenancy.get("shadowpod", "unstamped") or {}
        assert CREATOR_USER_LABEL not in (stored["metadata"].get("labels") or {})

        def verdict() -> dict[str, Any] | None:
            shadow = tenancy.get("shadowpod", "unstamped") or {}
            found = (shadow.get("status") or {}).get("conditions") or []
            return {c["type"]: c for c in found} or None

        conditions = wait_until(verdict, "the unstamped ShadowPod's verdict")
        assert (conditions["PodCreated"]["status"], conditions["PodCreated"]["reason"]) == (
            "False",
            "NotReserved",
        )
        assert conditions["QuotaReserved"]["status"] == "False"
        assert "carries no creator stamp" in conditions["PodCreated"]["message"]
        assert tenancy.get("pod", "unstamped") is None
    finally:
        tenancy.provider("delete", "shadowpod", "unstamped", "-n", tenancy.namespace)


def quota_status(tenancy: Tenancy) -> dict[str, Any]:
    """The status of the Quota of venice's slice identity on naples."""
    quotas = json.loads(
        tenancy.provider("get", "quotas.offloading.liqo.io", "-A", "-o", "json").stdout
    )["items"]
    mine = next(q for q in quotas if q["spec"]["user"] == USER)
    return dict(mine.get("status") or {})


def test_a_consumer_pod_breaking_the_providers_level_waits_at_home_with_its_reason(
    tenancy: Tenancy,
) -> None:
    spec = {k: v for k, v in PROBE_SPEC.items() if k != "containers"}
    spec["containers"] = [{**PROBE_SPEC["containers"][0], "name": "app"}]
    probe = deployment("probe", 1, **spec)
    apply(tenancy.clusters, tenancy.namespace, probe)

    def local() -> dict[str, Any] | None:
        pods = json.loads(
            tenancy.clusters.kubectl(
                CONSUMER, "get", "pods", "-n", tenancy.namespace, "-l", "app=probe", "-o", "json"
            ).stdout
        )["items"]
        return pods[0] if pods and pods[0].get("status", {}).get("reason") else None

    pod = wait_until(local, "the probe's reason at home")
    assert pod["status"]["phase"] == "Pending"
    assert pod["status"]["reason"] == "OffloadingBackOff"
    message = pod["status"]["message"]
    assert message.startswith("cluster naples refused the pod")
    assert "privileged" in message
    assert "hostPath" in message
    assert "Change the pod" in message
    events = json.loads(
        tenancy.clusters.kubectl(
            CONSUMER, "get", "events", "-n", tenancy.namespace, "-o", "json",
            f"--field-selector=involvedObject.name={pod['metadata']['name']},"
            "reason=OffloadingBackOff",
        ).stdout
    )["items"]  # fmt: skip
    assert events
    assert "privileged" in events[0]["message"]
    # Nothing of it runs in naples.
    remote = json.loads(
        tenancy.provider("get", "pods", "-n", tenancy.namespace, "-o", "json").stdout
    )
    assert remote["items"] == []


def test_offloaded_pods_run_as_shadow_pods_the_provider_turned_into_pods(
    tenancy: Tenancy,
) -> None:
    apply(tenancy.clusters, tenancy.namespace, deployment("web", 2))

    def running() -> list[dict[str, Any]] | None:
        shadows = json.loads(
            tenancy.provider("get", "shadowpods", "-n", tenancy.namespace, "-o", "json").stdout
        )["items"]
        phases = [(s.get("status") or {}).get("phase") for s in shadows]
        return shadows if len(shadows) == 2 and phases == ["Running", "Running"] else None

    shadows = wait_until(running, "2 ShadowPods Running")
    table = tenancy.provider("get", "shp", "-n", tenancy.namespace).stdout
    assert "STATUS" in table.splitlines()[0]
    assert "Running" in table
    for shadow in shadows:
        name = shadow["metadata"]["name"]
        assert shadow["metadata"]["labels"]["liqo.io/creator-user"] == USER
        assert "shadowpod.vk.io/pod-gone" in shadow["metadata"]["finalizers"]
        pod = tenancy.get("pod", name)
        assert pod is not None
        owner = pod["metadata"]["ownerReferences"][0]
        assert (owner["kind"], owner["uid"], owner["controller"]) == (
            "ShadowPod",
            shadow["metadata"]["uid"],
            True,
        )
        assert pod["metadata"]["labels"]["app"] == "web"


def offload_as(clusters: Clusters, namespace: str, remote: str) -> Any:
    return vkctl(
        clusters, "offload", "namespace", namespace,
        "--namespace-mapping-strategy", "SelectedName", f"--remote-namespace-name={remote}",
        "--selector=topology.liqo.io/region=south", "--timeout=20s",
    )  # fmt: skip


def namespace_map_events(clusters: Clusters) -> str:
    return clusters.kubectl(
        PROVIDER, "get", "events", "-n", f"liqo-tenant-{CONSUMER}",
        "--field-selector=reason=CreationLoopBackOff", "-o", "jsonpath={.items[*].message}",
    ).stdout  # fmt: skip


def ready_condition(clusters: Clusters, namespace: str) -> dict[str, Any]:
    offloading = json.loads(
        clusters.kubectl(
            CONSUMER, "get", "namespaceoffloading", "offloading", "-n", namespace, "-o", "json"
        ).stdout
    )
    conditions = offloading["status"]["remoteNamespacesConditions"][PROVIDER]
    return next(c for c in conditions if c["type"] == "Ready")


def test_a_reserved_name_or_one_another_namespace_holds_is_refused_on_both_sides(
    naples_peered: Clusters,
) -> None:
    first, second, squatter = (f"zt-{uuid.uuid4().hex[:8]}" for _ in range(3))
    shared = f"shared-{uuid.uuid4().hex[:6]}"
    for namespace in (first, second, squatter):
        naples_peered.kubectl(CONSUMER, "create", "namespace", namespace)
    try:
        # A tenant asking for the provider's own namespace gets nothing there.
        refused = offload_as(naples_peered, squatter, "kube-system")
        assert refused.returncode != 0
        assert ready_condition(naples_peered, squatter)["reason"] == "CreationLoopBackOff"
        assert "namespace name kube-system is reserved on this cluster" in (
            wait_until(lambda: namespace_map_events(naples_peered), "the provider's Event")
        )
        kube_system = json.loads(
            naples_peered.kubectl(PROVIDER, "get", "namespace", "kube-system", "-o", "json").stdout
        )
        assert "liqo.io/remote-namespace-managed-by" not in (
            kube_system["metadata"].get("annotations") or {}
        )
        assert not json.loads(
            naples_peered.kubectl(
                PROVIDER, "get", "rolebindings", "-n", "kube-system", "-o", "json",
                "--field-selector=metadata.name=vk-virtual-kubelet-remote",
            ).stdout
        )["items"]  # fmt: skip

        # Two namespaces of one consumer mapped to one name: the first keeps it.
        assert offload_as(naples_peered, first, shared).returncode == 0
        taken = offload_as(naples_peered, second, shared)
        assert taken.returncode != 0
        condition = ready_condition(naples_peered, second)
        assert condition["reason"] == "CreationLoopBackOff"
        assert f"already holds this cluster's namespace {first}" in condition["message"]
        assert f"{first}, mapped to that name first" in taken.stderr  # vkctl says it too
        said = wait_until(
            lambda: (
                f"already holds {CONSUMER}'s namespace {first}"
                in namespace_map_events(naples_peered)
            ),
            "the provider's Event naming the first",
        )
        assert said
        assert ready_condition(naples_peered, first)["reason"] == "RemoteNamespaceCreated"
        # Giving up the second mapping leaves the first's namespace alone.
        vkctl(naples_peered, "unoffload", "namespace", second, "--timeout=60s")
        twin = json.loads(
            naples_peered.kubectl(PROVIDER, "get", "namespace", shared, "-o", "json").stdout
        )
        assert twin["metadata"]["annotations"]["liqo.io/remote-namespace-original-name"] == first
        assert not twin["metadata"].get("deletionTimestamp")
    finally:
        for namespace in (first, second, squatter):
            vkctl(naples_peered, "unoffload", "namespace", namespace, "--timeout=120s")
            naples_peered.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def test_a_service_taking_over_external_ips_is_refused_in_a_twin_namespace(
    tenancy: Tenancy,
) -> None:
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "hijack", "namespace": tenancy.namespace},
        "spec": {"ports": [{"port": 53}], "externalIPs": ["10.96.0.10"]},
    }
    for attempt in (tenancy.as_slice, lambda *a, **k: tenancy.provider(*a, **k, check=False)):
        refused = attempt("create", "-f", "-", input=json.dumps(service))
        assert refused.returncode != 0
        assert "Services with spec.externalIPs are refused" in refused.stderr
    del service["spec"]["externalIPs"]
    allowed = tenancy.as_slice("create", "-f", "-", input=json.dumps(service))
    assert allowed.returncode == 0, allowed.stderr


def test_a_twin_namespace_bounds_what_the_tenant_reflects(tenancy: Tenancy) -> None:
    quota = wait_until(
        lambda: tenancy.get("resourcequota", "vk-tenant-objects"), "the twin's ResourceQuota"
    )
    assert quota["spec"]["hard"]["services.nodeports"] == "0"
    # The other objects the tenant may write there are counted, by the API server itself.
    for kind in ("ingresses.networking.k8s.io", "shadowendpointslices.offloading.liqo.io"):
        assert f"count/{kind}" in quota["spec"]["hard"]

    def serviceaccounts_counted() -> int | None:
        quota_now = tenancy.get("resourcequota", "vk-tenant-objects") or {}
        counted = ((quota_now.get("status") or {}).get("used") or {}).get("count/serviceaccounts")
        return None if counted is None else int(counted)

    # Counted by the quota admission as they are made. (Not its `default`: the quota
    # controller may have counted the namespace before that was made, and its admission not
    # yet have seen the quota then: counted at its next resync, minutes later.)
    wait_until(lambda: serviceaccounts_counted() is not None, "the twin's ServiceAccounts counted")
    before = serviceaccounts_counted() or 0
    made = tenancy.as_slice("create", "serviceaccount", "counted", "-n", tenancy.namespace)
    assert made.returncode == 0, made.stderr
    wait_until(
        lambda: (serviceaccounts_counted() or 0) > before, "the tenant's ServiceAccount counted"
    )
    # Room for a token Secret per pod the consumer's Quotas grant, beside the default 2000.
    quotas = json.loads(
        tenancy.provider("get", "quotas", "-n", f"liqo-tenant-{CONSUMER}", "-o", "json").stdout
    )["items"]
    granted = sum(int(q["spec"]["resources"].get("pods", "0")) for q in quotas)
    assert granted > 0
    assert quota["spec"]["hard"]["secrets"] == str(2000 + granted)
    node_port = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "exposed", "namespace": tenancy.namespace},
        "spec": {"type": "NodePort", "ports": [{"port": 80}]},
    }
    refused = tenancy.as_slice("create", "-f", "-", input=json.dumps(node_port))
    assert refused.returncode != 0
    assert "exceeded quota: vk-tenant-objects" in refused.stderr
    assert "services.nodeports=0" in refused.stderr


def test_the_provider_sets_one_consumers_level_where_the_consumer_cannot(
    tenancy: Tenancy,
) -> None:
    tenant_namespace = f"liqo-tenant-{CONSUMER}"
    level_label = "pod-security.vk.io/tenant-level"
    assert not tenancy.can_i("patch", f"namespaces/{tenant_namespace}")
    tenancy.provider("label", "namespace", tenant_namespace, f"{level_label}=restricted")
    try:

        def level() -> str | None:
            twin = tenancy.get("namespace", tenancy.namespace) or {}
            return (
                (twin.get("metadata") or {})
                .get("labels", {})
                .get("pod-security.kubernetes.io/enforce")
            )

        wait_until(lambda: level() == "restricted", "the twin namespace at restricted")
        plain = {"containers": [{"name": "app", "image": "nginx"}]}
        refused = tenancy.as_slice("create", "-f", "-", input=tenancy.shadow_pod("plain", plain))
        assert refused.returncode != 0
        assert 'Pod Security level "restricted"' in refused.stderr
        assert "allowPrivilegeEscalation" in refused.stderr
    finally:
        tenancy.provider("label", "namespace", tenant_namespace, f"{level_label}-")
    wait_until(lambda: level() == "baseline", "the twin namespace back at the default")
