"""vk's Helm chart, the plain manifests rendered from it, `vkctl install` and `vkctl uninstall`:
the chart lints clean, its `localProcesses` values (the playground's) leave out vk's pods and
call the webhook at its URL and change nothing else, it applies to a real API server, and
install then uninstall --purge on a bare playground cluster leaves nothing of vk. The webhook's
own certificate is exercised there as the chart's ServiceAccount, with the chart's RBAC."""

from __future__ import annotations

import base64
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.kubeconfigs import token_kubeconfig
from tests.integration.polling import wait_until
from tests.integration.test_identities import README, identity_tables, parse_can_i
from tests.plain_manifests import CONTROLLER_MANAGER_ACCOUNT, covers, find, granted_rules
from vk.api.constants import CLUSTER_IDENTITY_CONFIGMAP
from vk.api.identity import ClusterIdentity, parse_cluster_identity
from vk.cli.chart import REPOSITORY, ChartError, chart_dir, run_helm
from vk.controllers.local_processes import free_port
from vk.controllers.virtualkubelet_deployment import parse_pod_placement
from vk.playground.binaries import KUBERNETES_VERSION
from vk.playground.manifests import ensure_helm, helm_template, render_plain_manifests
from vk.webhooks.configuration import CONFIGURATION_NAME

BIN = Path(sys.executable).parent
KUBE = KUBERNETES_VERSION.lstrip("v")
VALUES = {"clusterID": "venice", "clusterLabels": {"topology.liqo.io/region": "north"}}


@pytest.fixture(scope="module")
def helm() -> Path:
    """The pinned helm, built into vk's cache, where `vkctl install` finds it."""
    return ensure_helm()


def rendered(helm: Path, values: dict[str, Any] = VALUES) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(helm_template(helm, values)) if d]


def test_the_providers_webhooks_fail_closed_whatever_webhook_failure_policy_says(
    helm: Path,
) -> None:
    """What a consumer writes here (its ShadowPods, what its control plane keeps in its tenant
    namespace) is checked even where the administrator lets the other webhooks fail open."""
    documents = rendered(helm, {**VALUES, "webhook": {"failurePolicy": "Ignore"}})
    policies = {
        hook["name"]: hook["failurePolicy"]
        for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")
        for hook in find(documents, kind, "vk")["webhooks"]
    }
    assert policies == {
        "shadowpod.mutate.liqo.io": "Fail",
        "pod.mutate.liqo.io": "Ignore",
        "shadowpod.validate.liqo.io": "Fail",
        "namespaceoffloading.validate.liqo.io": "Ignore",
        "resourceslice.validate.vk.io": "Fail",
        "namespacemap.validate.vk.io": "Fail",
    }


def test_chart_lints_clean(helm: Path) -> None:
    out = run_helm(helm, ["lint", str(chart_dir()), "--strict", "--namespace=vk"], VALUES)

    assert "1 chart(s) linted, 0 chart(s) failed" in out
    assert "[WARNING]" not in out, out
    assert "[ERROR]" not in out, out


def test_chart_refuses_a_missing_cluster_id_and_another_namespace(helm: Path) -> None:
    with pytest.raises(ChartError, match="clusterID must be a DNS label"):
        helm_template(helm, {"clusterID": ""})
    with pytest.raises(ChartError, match="must be installed in the namespace vk"):
        run_helm(
            helm,
            ["template", "vk", str(chart_dir()), "--namespace=default", f"--kube-version={KUBE}"],
            VALUES,
        )


def test_plain_manifests_are_the_rendered_chart(helm: Path) -> None:
    committed = (REPOSITORY / "deploy" / "vk.yaml").read_text()

    assert committed == render_plain_manifests(helm), (
        "deploy/vk.yaml is out of date with the chart: run `python -m vk.playground.manifests`"
    )


def test_the_identity_the_chart_writes_is_the_one_vk_reads(helm: Path) -> None:
    identity = find(rendered(helm), "ConfigMap", CLUSTER_IDENTITY_CONFIGMAP, namespace="vk")

    assert parse_cluster_identity(identity) == ClusterIdentity("venice", VALUES["clusterLabels"])


LOCAL_URL = "https://127.0.0.1:9443"
LOCAL_VALUES = {
    **VALUES,
    "localProcesses": {
        "enabled": True,
        "webhookURL": f"{LOCAL_URL}/",
        "webhookCABundle": base64.b64encode(b"PEM").decode(),
        "metricsAgentPort": 9444,
    },
}
MINT_TOKENS = {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]}


def without_client_configs(documents: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Without where the API server calls the webhook and its metrics agent."""
    for document in documents:
        for webhook in document.get("webhooks") or []:
            del webhook["clientConfig"]
        if document["kind"] == "APIService":
            document["spec"].pop("caBundle", None)
            del document["spec"]["service"]["port"]
    return documents


def test_local_processes_have_no_pods_and_the_webhook_is_called_at_its_url(helm: Path) -> None:
    local = rendered(helm, LOCAL_VALUES)

    assert [d["kind"] for d in local if d["kind"] == "Deployment"] == []
    # One Service: the metrics agent's, naming localhost for the aggregator.
    (service,) = [d for d in local if d["kind"] == "Service"]
    assert service["spec"] == {"type": "ExternalName", "externalName": "localhost"}
    api_service = find(local, "APIService", "v1alpha1.metrics.vk.io")
    assert api_service["spec"]["service"] == {"namespace": "vk", "name": "vk-webhook", "port": 9444}
    assert api_service["spec"]["caBundle"] == base64.b64encode(b"PEM").decode()
    for kind in ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration"):
        for webhook in find(local, kind, CONFIGURATION_NAME)["webhooks"]:
            path = webhook["clientConfig"].get("url", "").removeprefix(LOCAL_URL)
            assert path.startswith("/"), webhook["clientConfig"]
            assert webhook["clientConfig"] == {
                "url": f"{LOCAL_URL}{path}",
                "caBundle": base64.b64encode(b"PEM").decode(),
            }
    # The local launcher requests each virtual kubelet's token, as a pod's kubelet would.
    assert covers(granted_rules(local, CONTROLLER_MANAGER_ACCOUNT), MINT_TOKENS)
    assert not covers(granted_rules(rendered(helm), CONTROLLER_MANAGER_ACCOUNT), MINT_TOKENS)


def test_local_processes_change_nothing_else(helm: Path) -> None:
    """The same RBAC, identity, classes, policies and webhooks (but where they are called) as
    vk's pods get: the playground installs what a real cluster does."""
    launcher = "vk-controller-manager-local-launcher"
    local = [
        d
        for d in without_client_configs(rendered(helm, LOCAL_VALUES))
        if d["metadata"]["name"] != launcher and d["kind"] != "Service"
    ]
    pods = [
        d
        for d in without_client_configs(rendered(helm))
        if d["kind"] not in ("Deployment", "Service")
    ]

    assert local == pods
    assert len(local) > 30


def test_local_processes_need_the_webhooks_https_url_and_ca(helm: Path) -> None:
    local = LOCAL_VALUES["localProcesses"]
    with pytest.raises(ChartError, match=r"localProcesses\.webhookURL must be the webhook's https"):
        helm_template(helm, {**VALUES, "localProcesses": {**local, "webhookURL": "http://x"}})
    with pytest.raises(ChartError, match=r"localProcesses\.webhookCABundle"):
        helm_template(helm, {**VALUES, "localProcesses": {**local, "webhookCABundle": ""}})
    with pytest.raises(ChartError, match=r"localProcesses\.metricsAgentPort"):
        helm_template(helm, {**VALUES, "localProcesses": {**local, "metricsAgentPort": 0}})


def test_the_webhook_answers_the_api_server_alone_when_given_its_ca(helm: Path) -> None:
    callers = {"caConfigMap": "api-server-ca", "names": ["kube-apiserver"]}
    chart = rendered(helm, {**VALUES, "webhook": {"admissionCallers": callers}})
    deployment = find(chart, "Deployment", "vk-webhook", namespace="vk")
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert "--admission-caller-ca-file=/etc/vk/admission-callers/ca.crt" in container["args"]
    assert "--admission-caller-names=kube-apiserver" in container["args"]
    assert {"name": "admission-callers", "configMap": {"name": "api-server-ca"}} in pod["volumes"]
    # Without it (the default), no such flags; with a CA and no names, no chart.
    (plain,) = find(rendered(helm), "Deployment", "vk-webhook", namespace="vk")["spec"]["template"][
        "spec"
    ]["containers"]
    assert not [arg for arg in plain["args"] if arg.startswith("--admission-caller")]
    with pytest.raises(ChartError, match=r"admissionCallers\.names"):
        helm_template(helm, {**VALUES, "webhook": {"admissionCallers": {"caConfigMap": "x"}}})


def test_every_vk_pod_runs_the_image_as_its_non_root_user(helm: Path) -> None:
    for deployment in (d for d in rendered(helm) if d["kind"] == "Deployment"):
        pod = deployment["spec"]["template"]["spec"]
        assert pod["securityContext"]["runAsUser"] == 65532
        assert pod["securityContext"]["runAsNonRoot"] is True
        container = pod["containers"][0]
        assert container["image"] == "localhost/vk:0.1.0"
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["prometheus.io/scrape"] == "true"


# -- vkctl install / uninstall on a bare cluster ------------------------------------------


@pytest.fixture(scope="module")
def bare_cluster(helm: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """A playground of one cluster without vk, torn down afterwards; `vkctl install` there
    runs the pinned helm."""
    root = tmp_path_factory.mktemp("bare") / "pg"
    env = {**os.environ, "VK_PLAYGROUND_DIR": str(root)}
    up = subprocess.run(
        [str(BIN / "vkctl"), "playground", "up", "--without-vk", "--cluster", "scratch:provider:1"],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert up.returncode == 0, up.stderr
    env["KUBECONFIG"] = str(root / "scratch" / "kubeconfig")
    try:
        yield env
    finally:
        subprocess.run([str(BIN / "vkctl"), "playground", "down"], env=env, capture_output=True)


def run(
    env: dict[str, str], *command: str, input: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / command[0]), *command[1:]],
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=300,
    )


def vk_leftovers(env: dict[str, str]) -> list[str]:
    """Every object of vk's in the cluster: by name, by group and by the chart's label."""
    found = []
    for kind in (
        "customresourcedefinitions",
        "clusterroles",
        "clusterrolebindings",
        "mutatingwebhookconfigurations",
        "validatingwebhookconfigurations",
        "runtimeclasses",
        "storageclasses",
        "namespaces",
    ):
        names = run(env, "kubectl", "get", kind, "-o", "name").stdout.split()
        found += [
            n
            for n in names
            if "liqo.io" in n or n.split("/")[-1].startswith("vk") or n.endswith("/liqo")
        ]
    labelled = run(
        env, "kubectl", "get", "all", "-A", "-l", "app.kubernetes.io/name=vk", "-o", "name"
    )
    return found + labelled.stdout.split()


def test_template_applies_to_a_real_api_server(helm: Path, bare_cluster: dict[str, str]) -> None:
    env = bare_cluster
    # Server-side dry runs of namespaced objects need their namespace to exist.
    assert run(env, "kubectl", "create", "namespace", "vk").returncode == 0
    applied = run(
        env,
        "kubectl",
        "apply",
        "--server-side",
        "--dry-run=server",
        "-f",
        "-",
        input=helm_template(helm, VALUES),
    )
    assert run(env, "kubectl", "delete", "namespace", "vk", "--wait").returncode == 0

    assert applied.returncode == 0, applied.stderr
    lines = applied.stdout.splitlines()
    assert len(lines) == len(rendered(helm))
    assert all(line.endswith("serverside-applied (server dry run)") for line in lines)


def test_install_then_uninstall_purge_leaves_nothing(bare_cluster: dict[str, str]) -> None:
    env = bare_cluster
    assert vk_leftovers(env) == []

    installed = run(
        env,
        "vkctl",
        "install",
        "--cluster-id",
        "scratch",
        "--cluster-labels",
        "topology.liqo.io/region=east",
        "--set",
        "webhook.replicas=2",
    )
    assert installed.returncode == 0, installed.stderr
    identity = yaml.safe_load(
        run(
            env, "kubectl", "-n", "vk", "get", "configmap", "vk-cluster-identity", "-o", "yaml"
        ).stdout
    )
    assert identity["data"]["clusterID"] == "scratch"
    replicas = run(
        env, "kubectl", "-n", "vk", "get", "deploy", "vk-webhook", "-o", "jsonpath={.spec.replicas}"
    )
    assert replicas.stdout == "2"
    info = run(env, "vkctl", "info")  # reads the identity as users do
    assert info.returncode == 0, info.stderr
    assert "Cluster ID: scratch" in info.stdout

    # A peering blocks it, with the way out in the message.
    run(
        env,
        "kubectl",
        "apply",
        "-f",
        "-",
        input=(
            "apiVersion: core.liqo.io/v1beta1\nkind: ForeignCluster\n"
            "metadata: {name: naples}\nspec: {clusterID: naples}\n"
        ),
    )
    refused = run(env, "vkctl", "uninstall", "--purge")
    assert refused.returncode == 1
    assert "active peerings (ForeignCluster naples)" in refused.stderr
    assert "vkctl unpeer" in refused.stderr
    assert "--force" in refused.stderr
    assert run(env, "kubectl", "-n", "vk", "get", "deploy", "vk-controller-manager").returncode == 0

    run(env, "kubectl", "delete", "foreigncluster", "naples")
    purged = run(env, "vkctl", "uninstall", "--purge")
    assert purged.returncode == 0, purged.stderr
    assert vk_leftovers(env) == []


def test_webhook_keeps_its_own_certificate_with_the_charts_rbac(
    bare_cluster: dict[str, str], tmp_path: Path
) -> None:
    """`vk webhook --certificate-secret`, authenticated as the chart's vk-webhook
    ServiceAccount: makes its Secret once, writes its CA into both configurations, and a
    restart reuses the same certificate."""
    env = bare_cluster
    assert run(env, "vkctl", "install", "--cluster-id", "scratch").returncode == 0
    token = run(env, "kubectl", "-n", "vk", "create", "token", "vk-webhook").stdout.strip()
    admin = yaml.safe_load(Path(env["KUBECONFIG"]).read_text())
    as_webhook = tmp_path / "webhook.kubeconfig"
    as_webhook.write_text(yaml.safe_dump(token_kubeconfig(admin, token)))

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                str(BIN / "vk"),
                "webhook",
                f"--kubeconfig={as_webhook}",
                f"--listen-address=127.0.0.1:{free_port()}",
                "--certificate-secret=vk-webhook-certs",
                "--namespace=vk",
            ],
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "webhook.log", "ab"),
        )

    def secret_data(key: str) -> str | None:
        jsonpath = "jsonpath={.data." + key.replace(".", "\\.") + "}"
        got = run(env, "kubectl", "-n", "vk", "get", "secret", "vk-webhook-certs", "-o", jsonpath)
        return got.stdout or None

    def secret_ca() -> str | None:
        return secret_data("ca.crt")

    def bundles() -> set[str]:
        values = set()
        for kind in ("mutatingwebhookconfiguration", "validatingwebhookconfiguration"):
            got = run(
                env,
                "kubectl",
                "get",
                kind,
                "vk",
                "-o",
                'jsonpath={range .webhooks[*]}{.clientConfig.caBundle}{"\\n"}{end}',
            )
            values |= set(got.stdout.splitlines())
        return values

    webhook = start()
    try:
        ca = wait_until(secret_ca, "the webhook's certificate Secret")
        wait_until(lambda: bundles() == {ca}, "its CA in both webhook configurations")
        cert = secret_data("tls.crt") or ""
        assert b"BEGIN CERTIFICATE" in base64.b64decode(cert)
    finally:
        webhook.send_signal(signal.SIGTERM)
        webhook.wait(timeout=30)
    again = start()
    try:
        time.sleep(3)
        assert again.poll() is None, (tmp_path / "webhook.log").read_text()
        assert secret_ca() == ca
        assert bundles() == {ca}
    finally:
        again.send_signal(signal.SIGTERM)
        again.wait(timeout=30)
    log = (tmp_path / "webhook.log").read_text()
    assert "forbidden" not in log.lower(), log
    assert log.count("webhook certificate issued") == 1, log
    assert run(env, "vkctl", "uninstall", "--purge").returncode == 0


def test_virtual_kubelet_placement_values_reach_the_launcher_as_flags_it_accepts(
    helm: Path,
) -> None:
    toleration = {"key": "dedicated", "operator": "Equal", "value": "vk", "effect": "NoSchedule"}
    values = {
        **VALUES,
        "virtualKubelet": {"nodeSelector": {"pool": "vk"}, "tolerations": [toleration]},
    }
    manager = find(rendered(helm, values), "Deployment", "vk-controller-manager")
    args = manager["spec"]["template"]["spec"]["containers"][0]["args"]
    selector = [
        a.split("=", 1)[1] for a in args if a.startswith("--virtual-kubelet-node-selector=")
    ]
    tolerations = [
        a.split("=", 1)[1] for a in args if a.startswith("--virtual-kubelet-tolerations=")
    ]
    assert selector == ["pool=vk"]
    assert parse_pod_placement({"pool": "vk"}, tolerations[0]) == {
        "nodeSelector": {"pool": "vk"},
        "tolerations": [toleration],
    }
    plain = find(rendered(helm), "Deployment", "vk-controller-manager")
    plain_args = plain["spec"]["template"]["spec"]["containers"][0]["args"]
    assert not [
        a for a in plain_args if a.startswith(("--virtual-kubelet-node", "--virtual-kubelet-tol"))
    ]


def test_the_charts_identities_may_do_what_the_readme_says_and_nothing_else(
    bare_cluster: dict[str, str],
) -> None:
    """The README's rows for the controller manager and the webhook as the chart installs
    them as pods (the *local processes* ones left out), against `kubectl auth can-i --list`
    for the chart's ServiceAccounts."""
    env = bare_cluster
    installed = run(env, "vkctl", "install", "--cluster-id", "scratch")
    assert installed.returncode == 0, installed.stderr
    tables = identity_tables(README.read_text(), local_processes=False)

    def can_i(namespace: str, who: str) -> set[tuple[str, str, str]]:
        listed = run(env, "kubectl", "auth", "can-i", "--list", "-n", namespace, f"--as={who}")
        assert listed.returncode == 0, listed.stderr
        return parse_can_i(listed.stdout)

    for title in ("Controller manager", "Webhook"):
        user, rows = tables[title]
        for namespace in {*rows, "default"} - {"cluster"}:
            shown = can_i(namespace, user) - can_i(namespace, "vk-nobody")
            expected = rows.get("cluster", set()) | rows.get(namespace, set())
            assert shown == expected, (
                f"{title} in namespace {namespace}: not in the README {sorted(shown - expected)}, "
                f"not granted {sorted(expected - shown)}"
            )
