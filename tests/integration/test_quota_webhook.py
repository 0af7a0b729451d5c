"""Quota enforcement on the provider (issue 6, on ShadowPods since issue 18): `vk webhook`,
installed in naples by the playground and registered with its kube-apiserver, stamps the
ShadowPods a consumer's identity creates and denies those its Quota does not admit; the API
server passes the reason on to the creator.

The consumer's identity is impersonated (`kubectl --as USER --as-group vk-tenant:venice`): the
API server hands the webhook the same userInfo as for the slice's client certificate. The
end-to-end path, from a consumer's pod to its refusal, is in test_peering.py.
"""

from __future__ import annotations

import asyncio
import json
import os
import ssl
import subprocess
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from tests.conftest import Clusters
from tests.integration.conftest import VK, installed_controller_manager_stopped
from tests.integration.polling import wait_until
from tests.integration.test_metrics_agent import twin_namespace
from vk.api.constants import CREATOR_USER_LABEL, tenant_group
from vk.controllers.local_processes import free_port

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
        """A ShadowPod asking for nothing, created as `user` with a server-side dry run."""
        return self.as_tenant(
            user, "create", "--dry-run=server", "-o", "json", "-f", "-", input=self.pod("probe")
        )

    def pod(self, name: str, requests: dict[str, str] | None = None, **resources: Any) -> str:
        container: dict[str, Any] = {"name": "app", "image": PAUSE}
        if requests is not None or resources:
            container["resources"] = {**({"requests": requests} if requests else {}), **resources}
        return yaml.safe_dump(
            {
                "apiVersion": "offloading.liqo.io/v1beta1",
                "kind": "ShadowPod",
                "metadata": {"name": name, "namespace": self.namespace},
                "spec": {"pod": {"containers": [container]}},
            }
        )

    def create(self, user: str, name: str, **kwargs: Any) -> Any:
        return self.as_tenant(user, "create", "-f", "-", input=self.pod(name, **kwargs))

    def creator(self, name: str) -> str:
        out = self.kubectl("get", "shadowpod", name, "-n", self.namespace, "-o", "json").stdout
        return str(json.loads(out)["metadata"].get("labels", {}).get(CREATOR_USER_LABEL, ""))


def new_user() -> str:
    return f"slice-{uuid.uuid4().hex[:8]}-0123456789ab"


@pytest.fixture(scope="module")
def webhook(installed: Clusters) -> Iterator[QuotaWebhook]:
    # A twin namespace, as the provider makes one for venice, where venice's slices may
    # create ShadowPods.
    namespace = twin_namespace(installed, CONSUMER, GROUP)
    setup = QuotaWebhook(installed, namespace)
    try:
        probe = new_user()
        setup.quota(probe, {"cpu": "1", "pods": "1"})
        assert CREATOR_USER_LABEL in setup.dry_run(probe).stdout
        yield setup
    finally:
        setup.kubectl("delete", "namespace", namespace, "--wait=false", check=False)


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


def test_a_pod_beyond_the_quota_is_denied_and_counts_until_it_is_gone(
    webhook: QuotaWebhook,
) -> None:
    user = new_user()
    webhook.quota(user, {"cpu": "1", "memory": "1Gi", "pods": "10"})
    first = webhook.create(user, "first", requests={"cpu": "600m"})
    assert first.returncode == 0, first.stderr

    second = webhook.create(user, "second", requests={"cpu": "600m"})
    assert second.returncode != 0
    assert 'admission webhook "shadowpod.validate.liqo.io" denied the request' in second.stderr
    assert "cpu: asks 600m, 600m used, 1 allowed" in second.stderr

    # Its Pod held in Terminating (kwok stops it at once): the ShadowPod still counts.
    wait_until(
        lambda: (
            webhook.kubectl("get", "pod", "first", "-n", webhook.namespace, check=False).returncode
            == 0
        ),
        "the Pod made of the ShadowPod first",
    )
    hold = json.dumps({"metadata": {"finalizers": ["vk.test/hold"]}})
    webhook.kubectl("patch", "pod", "first", "-n", webhook.namespace, "--type=merge", "-p", hold)
    webhook.kubectl("delete", "shadowpod", "first", "-n", webhook.namespace, "--wait=false")
    wait_until(
        lambda: json.loads(
            webhook.kubectl("get", "pod", "first", "-n", webhook.namespace, "-o", "json").stdout
        )["metadata"].get("deletionTimestamp"),
        "the Pod of first terminating",
    )
    still = webhook.create(user, "second", requests={"cpu": "600m"})
    assert still.returncode != 0
    assert "cpu: asks 600m, 600m used, 1 allowed" in still.stderr
    release = json.dumps({"metadata": {"finalizers": None}})
    webhook.kubectl("patch", "pod", "first", "-n", webhook.namespace, "--type=merge", "-p", release)
    wait_until(
        lambda: webhook.create(user, "second", requests={"cpu": "600m"}).returncode == 0,
        "the deleted pod's cpu given back once it is gone",
    )


def test_a_second_create_of_a_name_never_lets_the_first_run_on_the_seconds_share(
    webhook: QuotaWebhook,
) -> None:
    """An attacker's try: a big ShadowPod admitted, then the same name created again asking
    for little. The API server refuses the second as AlreadyExists, but only after the webhook
    reserved for it in the ledger, in place of the first's (one reservation per name, so that
    a retried creation is not counted twice), of each resource the larger share of the two (so
    that the big one's is not shrunk while it may hold a Pod). The provider's controller,
    stopped meanwhile so that the second review surely comes first, must not take that
    reservation for the big one's (it names the second's uid): the big one gets no Pod and
    says NotReserved, and the Quota is spent on neither once the reservation lapses."""
    user = new_user()
    webhook.quota(user, {"cpu": "2", "pods": "10"})
    with installed_controller_manager_stopped(webhook.clusters, PROVIDER):
        big = webhook.create(user, "big", requests={"cpu": "1500m"})
        assert big.returncode == 0, big.stderr
        small = webhook.create(user, "big", requests={"cpu": "100m"})
        assert small.returncode != 0
        assert "AlreadyExists" in small.stderr or "already exists" in small.stderr

    def reasons() -> set[str]:
        out = webhook.kubectl("get", "shadowpod", "big", "-n", webhook.namespace, "-o", "json")
        conditions = (json.loads(out.stdout).get("status") or {}).get("conditions") or []
        return {str(c.get("reason")) for c in conditions}

    wait_until(lambda: "NotReserved" in reasons(), "the big ShadowPod refused")
    pod = webhook.kubectl("get", "pod", "big", "-n", webhook.namespace, check=False)
    assert pod.returncode != 0, "a Pod was made on a share reserved for another ShadowPod"
    wait_until(
        lambda: webhook.create(user, "third", requests={"cpu": "1"}).returncode == 0,
        "a pod admitted on the share no Pod holds",
        timeout=90,
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
        "label",
        "shadowpod",
        "immutable",
        "-n",
        webhook.namespace,
        f"{CREATOR_USER_LABEL}-",
        check=False,
    )
    assert removed.returncode != 0
    assert "is immutable" in removed.stderr

    forged = yaml.safe_load(webhook.pod("forged"))
    forged["metadata"]["labels"] = {CREATOR_USER_LABEL: user}
    refused = webhook.kubectl("create", "-f", "-", input=json.dumps(forged), check=False)
    assert refused.returncode != 0
    assert "set only by the provider's quota webhook" in refused.stderr


@dataclass
class Replica:
    """A `vk webhook` of naples' besides the installed one, as a second replica would run."""

    process: subprocess.Popen[bytes]
    url: str


@pytest.fixture
def two_replicas(webhook: QuotaWebhook, tmp_path: Path) -> Iterator[tuple[list[Replica], bytes]]:
    paths = webhook.clusters.playground.paths(PROVIDER)
    env = {**os.environ, "KUBECONFIG": str(paths.component_kubeconfig("vk-webhook"))}
    replicas = []
    for index in range(2):
        port = free_port()
        with open(tmp_path / f"webhook-{index}.log", "wb") as log:
            process = subprocess.Popen(
                [
                    VK, "webhook", f"--listen-address=127.0.0.1:{port}",
                    f"--tls-cert-file={paths.pki.path('vk-webhook-serving.crt')}",
                    f"--tls-private-key-file={paths.pki.path('vk-webhook-serving.key')}",
                ],
                env=env, stdout=log, stderr=subprocess.STDOUT,
            )  # fmt: skip
        replicas.append(Replica(process, f"https://127.0.0.1:{port}"))
    ca = paths.pki.ca_crt.read_bytes()
    trust = ssl.create_default_context(cadata=ca.decode())

    def ready(replica: Replica) -> bool:
        try:
            with urllib.request.urlopen(f"{replica.url}/readyz", context=trust, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    try:
        for replica in replicas:
            wait_until(lambda r=replica: ready(r), "a webhook replica ready")
        yield replicas, ca
    finally:
        for replica in replicas:
            replica.process.terminate()
            replica.process.wait(timeout=20)


def shadow_pod_review(
    namespace: str, user: str, name: str, dry_run: bool = False
) -> dict[str, Any]:
    """The AdmissionReview the API server would send for a tenant's stamped ShadowPod."""
    container = {"name": "app", "image": PAUSE, "resources": {"requests": {"cpu": "1"}}}
    shadow_pod = {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "ShadowPod",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": str(uuid.uuid4()),  # the API server's, given before validation
            "labels": {CREATOR_USER_LABEL: user},
        },
        "spec": {"pod": {"containers": [container]}},
    }
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": str(uuid.uuid4()),
            "kind": {"group": "offloading.liqo.io", "version": "v1beta1", "kind": "ShadowPod"},
            "namespace": namespace,
            "name": name,
            "operation": "CREATE",
            "userInfo": {"username": user, "groups": [GROUP, "system:authenticated"]},
            "object": shadow_pod,
            "dryRun": dry_run,
        },
    }


async def review_all(
    replicas: list[Replica], ca: bytes, reviews: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Every review at once, spread over the replicas; their answers."""
    trust = ssl.create_default_context(cadata=ca.decode())
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as session:

        async def send(index: int, review: dict[str, Any]) -> dict[str, Any]:
            url = replicas[index % len(replicas)].url + "/validate-shadowpod"
            async with session.post(url, json=review) as response:
                answer: dict[str, Any] = (await response.json())["response"]
                return answer

        return list(await asyncio.gather(*(send(i, r) for i, r in enumerate(reviews))))


def reservations(webhook: QuotaWebhook, user: str) -> dict[str, Any]:
    quota = json.loads(
        webhook.kubectl("get", "quotas.offloading.liqo.io", user, "-n", webhook.namespace,
                        "-o", "json").stdout
    )  # fmt: skip
    return dict((quota.get("status") or {}).get("reservations") or {})


def test_two_webhook_replicas_admit_exactly_the_quota_under_a_burst(
    webhook: QuotaWebhook, two_replicas: tuple[list[Replica], bytes]
) -> None:
    replicas, ca = two_replicas
    for round_ in range(5):
        user = new_user()
        webhook.quota(user, {"cpu": "10", "pods": "100"})  # room for 10 pods of 1 cpu

        def known_to_both(u: str = user) -> bool:
            probes = [shadow_pod_review(webhook.namespace, u, "probe", dry_run=True)] * 2
            answers = asyncio.run(review_all(replicas, ca, probes))
            return all(a["allowed"] for a in answers)

        wait_until(known_to_both, f"round {round_}: both replicas knowing the Quota")
        burst = [shadow_pod_review(webhook.namespace, user, f"p{i}") for i in range(50)]
        answers = asyncio.run(review_all(replicas, ca, burst))
        admitted = [a for a in answers if a["allowed"]]
        assert len(admitted) == 10, f"round {round_}: {len(admitted)} admitted"
        refused = [a["status"]["message"] for a in answers if not a["allowed"]]
        assert all("cpu: asks 1, 10 used, 10 allowed" in m for m in refused), refused[:3]
        assert len(reservations(webhook, user)) == 10

    # Those reviews were never the API server's: no ShadowPod shows up, and the recount undoes
    # their reservations once they expire.
    wait_until(lambda: not reservations(webhook, user), "the forged reservations undone", 45)


def test_the_playgrounds_webhook_answers_its_api_server_only(webhook: QuotaWebhook) -> None:
    """A forged AdmissionReview, sent straight to naples' webhook: refused unless it comes with
    the client certificate naples' API server presents to webhooks."""
    paths = webhook.clusters.playground.paths(PROVIDER)
    port = json.loads(paths.ports_file.read_text())["vk-webhook"]
    user = new_user()
    webhook.quota(user, {"cpu": "10", "pods": "100"})
    forged = shadow_pod_review(webhook.namespace, user, "forged")

    async def send(client: str | None) -> int:
        trust = ssl.create_default_context(cadata=paths.pki.ca_crt.read_text())
        if client is not None:
            trust.load_cert_chain(paths.pki.path(f"{client}.crt"), paths.pki.path(f"{client}.key"))
        url = f"https://127.0.0.1:{port}/validate-shadowpod"
        async with (
            aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=trust)) as session,
            session.post(url, json=forged) as response,
        ):
            return response.status

    assert asyncio.run(send(None)) == 403
    assert asyncio.run(send("vk-webhook")) == 403  # a certificate of the cluster, not the caller's
    assert reservations(webhook, user) == {}
    assert asyncio.run(send("apiserver-webhook-client")) == 200  # what the API server presents
