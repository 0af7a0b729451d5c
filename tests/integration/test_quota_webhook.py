"""Quota enforcement on the provider (issue 8): `vk webhook` on naples, registered with its
kube-apiserver, stamps the pods a consumer's identity creates and denies those its Quota does
not admit; the API server passes the reason on to the creator.

The consumer's identity is impersonated (`kubectl --as USER --as-group vk-tenant:venice`): the
API server hands the webhook the same userInfo as for the slice's client certificate. The
webhook configurations are the forged ones, narrowed to this module's namespace so that other
tests on the shared playground never wait on this webhook.
"""

from __future__ import annotations

import datetime
import json
import signal
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
import yaml
from cryptography.hazmat.primitives import serialization

from tests.conftest import Clusters
from tests.integration.conftest import VK
from tests.integration.polling import wait_until
from vk.api.constants import CREATOR_USER_LABEL, REMOTE_CLUSTER_ID_LABEL, tenant_group
from vk.playground.pki import build_ca, issue
from vk.playground.processes import free_port
from vk.webhooks.configuration import forge_webhook_configurations

PROVIDER, CONSUMER = "naples", "venice"
GROUP = tenant_group(CONSUMER)
PAUSE = "registry.k8s.io/pause:3.10"


@dataclass
class QuotaWebhook:
    clusters: Clusters
    namespace: str

    def kubectl(self, *args: str, input: str | None = None, check: bool = True) -> Any:
        return self.clusters.kubectl(PROVIDER, *args, input=input, check=check)

    def as_tenant(self, user: str, *args: str, input: str | None = None) -> Any:
        return self.kubectl(f"--as={user}", f"--as-group={GROUP}", *args, input=input, check=False)

    def quota(self, user: str, resources: dict[str, str], **spec: Any) -> None:
        """A Quota for `user`, once the webhook has it in its cache (a slice identity without
        one is refused)."""
        manifest = {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "Quota",
            "metadata": {"name": user, "namespace": self.namespace},
            "spec": {"user": user, "limitsEnforcement": "None", "resources": resources, **spec},
        }
        self.kubectl("apply", "-f", "-", input=json.dumps(manifest))
        wait_until(
            lambda: "no Quota of this provider names" not in self.dry_run(user).stderr,
            f"the webhook knowing the Quota of {user}",
        )

    def dry_run(self, user: str) -> Any:
        """A pod asking for nothing, created as `user` with a server-side dry run."""
        return self.as_tenant(
            user, "create", "--dry-run=server", "-o", "json", "-f", "-", input=self.pod("probe")
        )

    def pod(self, name: str, requests: dict[str, str] | None = None, **resources: Any) -> str:
        container: dict[str, Any] = {"name": "app", "image": PAUSE}
        if requests is not None or resources:
            container["resources"] = {**({"requests": requests} if requests else {}), **resources}
        return yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"containers": [container]},
            }
        )

    def create(self, user: str, name: str, **kwargs: Any) -> Any:
        return self.as_tenant(user, "create", "-f", "-", input=self.pod(name, **kwargs))

    def creator(self, name: str) -> str:
        out = self.kubectl("get", "pod", name, "-n", self.namespace, "-o", "json").stdout
        return str(json.loads(out)["metadata"].get("labels", {}).get(CREATOR_USER_LABEL, ""))


def new_user() -> str:
    return f"slice-{uuid.uuid4().hex[:8]}-0123456789ab"


def narrowed(configuration: dict[str, Any], namespace: str) -> dict[str, Any]:
    """The forged configuration, named for this run and matching this namespace only."""
    configuration["metadata"]["name"] = f"vk-pod-quota-{namespace}"
    only_here = {"key": "kubernetes.io/metadata.name", "operator": "In", "values": [namespace]}
    for hook in configuration["webhooks"]:
        selector = hook.setdefault("namespaceSelector", {})
        selector["matchExpressions"] = [*selector.get("matchExpressions", []), only_here]
    return configuration


@pytest.fixture(scope="module")
def webhook(
    installed: Clusters, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[QuotaWebhook]:
    workdir = tmp_path_factory.mktemp("quota-webhook")
    now = datetime.datetime.now(datetime.UTC)
    ca, ca_key = build_ca("vk-webhook-test-ca", now)
    leaf = issue(ca, ca_key, "vk-webhook", now, ip_addresses=("127.0.0.1",), server=True)
    (workdir / "tls.crt").write_bytes(leaf.cert_pem)
    (workdir / "tls.key").write_bytes(leaf.key_pem)
    port, metrics_port = free_port(), free_port()
    namespace = f"t-{uuid.uuid4().hex[:10]}"
    setup = QuotaWebhook(installed, namespace)
    # A twin namespace, as the provider makes one for venice, where venice's slices may
    # create pods.
    setup.kubectl("create", "namespace", namespace)
    setup.kubectl("label", "namespace", namespace, f"{REMOTE_CLUSTER_ID_LABEL}={CONSUMER}")
    setup.kubectl(
        "create", "rolebinding", "tenant", "-n", namespace, "--clusterrole=edit", f"--group={GROUP}"
    )
    with open(workdir / "webhook.log", "wb") as log:
        process = subprocess.Popen(
            [
                VK,
                "webhook",
                f"--kubeconfig={installed.kubeconfig(PROVIDER)}",
                f"--listen-address=127.0.0.1:{port}",
                f"--tls-cert-file={workdir / 'tls.crt'}",
                f"--tls-private-key-file={workdir / 'tls.key'}",
                f"--metrics-address=127.0.0.1:{metrics_port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    configurations = [
        narrowed(c, namespace)
        for c in forge_webhook_configurations(
            f"https://127.0.0.1:{port}", ca.public_bytes(serialization.Encoding.PEM)
        )
    ]
    try:
        wait_until(lambda: _ready(metrics_port), "the webhook's caches synced")
        manifests = {"apiVersion": "v1", "kind": "List", "items": configurations}
        setup.kubectl("apply", "-f", "-", input=json.dumps(manifests))
        # The API server picks configurations up asynchronously: until a dry run comes back
        # stamped, pods would slip through unchecked.
        probe = new_user()
        setup.quota(probe, {"cpu": "1", "pods": "1"})
        wait_until(
            lambda: CREATOR_USER_LABEL in setup.dry_run(probe).stdout,
            "the API server calling the webhook",
        )
        yield setup
    finally:
        for configuration in configurations:
            kind = configuration["kind"].lower()
            name = configuration["metadata"]["name"]
            setup.kubectl("delete", kind, name, "--ignore-not-found", check=False)
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=20) == 0, (workdir / "webhook.log").read_text()
        setup.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def test_a_tenants_pod_is_stamped_with_its_identity_and_others_are_not(
    webhook: QuotaWebhook,
) -> None:
    user = new_user()
    webhook.quota(user, {"cpu": "4", "memory": "8Gi", "pods": "10"})
    created = webhook.create(user, "stamped")
    assert created.returncode == 0, created.stderr
    assert webhook.creator("stamped") == user

    webhook.kubectl("create", "-f", "-", input=webhook.pod("admins"))
    assert webhook.creator("admins") == ""


def test_a_pod_beyond_the_quota_is_denied_and_deleting_one_gives_its_share_back(
    webhook: QuotaWebhook,
) -> None:
    user = new_user()
    webhook.quota(user, {"cpu": "1", "memory": "1Gi", "pods": "10"})
    first = webhook.create(user, "first", requests={"cpu": "600m"})
    assert first.returncode == 0, first.stderr

    second = webhook.create(user, "second", requests={"cpu": "600m"})
    assert second.returncode != 0
    assert 'admission webhook "pod-quota.validate.liqo.io" denied the request' in second.stderr
    assert "cpu: asks 600m, 600m used, 1 allowed" in second.stderr

    webhook.kubectl("delete", "pod", "first", "-n", webhook.namespace, "--wait=false")
    wait_until(
        lambda: webhook.create(user, "second", requests={"cpu": "600m"}).returncode == 0,
        "the deleted pod's cpu given back",
    )


def test_a_resource_the_quota_lacks_is_denied(webhook: QuotaWebhook) -> None:
    user = new_user()
    webhook.quota(user, {"cpu": "4", "memory": "8Gi", "pods": "10"})
    denied = webhook.create(user, "gpu", limits={"nvidia.com/gpu": "1"})
    assert denied.returncode != 0
    assert "asks for nvidia.com/gpu, which the Quota" in denied.stderr


def test_hard_enforcement_wants_requests_equal_to_limits(webhook: QuotaWebhook) -> None:
    user = new_user()
    webhook.quota(user, {"cpu": "4", "memory": "8Gi", "pods": "10"}, limitsEnforcement="Hard")
    unequal = webhook.create(
        user,
        "burstable",
        requests={"cpu": "100m", "memory": "64Mi"},
        limits={"cpu": "200m", "memory": "64Mi"},
    )
    assert unequal.returncode != 0
    assert "container app requests 100m cpu but limits it to 200m" in unequal.stderr

    guaranteed = webhook.create(user, "guaranteed", limits={"cpu": "100m", "memory": "64Mi"})
    assert guaranteed.returncode == 0, guaranteed.stderr


def test_a_cordoned_quota_admits_nothing_new(webhook: QuotaWebhook) -> None:
    user = new_user()
    webhook.quota(user, {"cpu": "4", "memory": "8Gi", "pods": "10"}, cordoned=True)
    denied = webhook.create(user, "cordoned")
    assert denied.returncode != 0
    assert f"the Quota {webhook.namespace}/{user} is cordoned" in denied.stderr


def test_the_stamp_can_be_neither_removed_nor_forged(webhook: QuotaWebhook) -> None:
    user = new_user()
    webhook.quota(user, {"cpu": "4", "memory": "8Gi", "pods": "10"})
    assert webhook.create(user, "immutable").returncode == 0
    removed = webhook.kubectl(
        "label", "pod", "immutable", "-n", webhook.namespace, f"{CREATOR_USER_LABEL}-", check=False
    )
    assert removed.returncode != 0
    assert "is immutable" in removed.stderr

    forged = webhook.kubectl(
        "run",
        "forged",
        "-n",
        webhook.namespace,
        f"--image={PAUSE}",
        f"--labels={CREATOR_USER_LABEL}={user}",
        check=False,
    )
    assert forged.returncode != 0
    assert "set only by the provider's quota webhook" in forged.stderr
