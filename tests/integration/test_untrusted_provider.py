"""The consumer is safe from its providers (issue 19), tried as a provider turned attacker would
on the playground: venice peered with naples, naples writing whatever it likes into what it
reports back to venice."""

from __future__ import annotations

import json
import time
import urllib.request
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import Clusters
from tests.integration.conftest import installed_controller_manager_stopped
from tests.integration.polling import wait_until
from tests.integration.test_namespace_offloading import vkctl

CONSUMER, PROVIDER = "venice", "naples"


@pytest.fixture
def offloaded(naples_peered: Clusters) -> Iterator[str]:
    """A namespace of venice offloaded to naples under its own name."""
    namespace = f"ut-{uuid.uuid4().hex[:8]}"
    naples_peered.kubectl(CONSUMER, "create", "namespace", namespace)
    done = vkctl(
        naples_peered, "offload", "namespace", namespace,
        "--namespace-mapping-strategy", "EnforceSameName",
        "--selector=topology.liqo.io/region=south",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    try:
        yield namespace
    finally:
        vkctl(naples_peered, "unoffload", "namespace", namespace, "--timeout=120s")
        naples_peered.kubectl(CONSUMER, "delete", "namespace", namespace, "--wait=false")


def items(clusters: Clusters, cluster: str, *args: str) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = json.loads(
        clusters.kubectl(cluster, "get", *args, "-o", "json").stdout
    )["items"]
    return found


def controller_manager_metrics(clusters: Clusters, cluster: str) -> str:
    ports = json.loads(clusters.playground.paths(cluster).ports_file.read_text())
    url = f"http://127.0.0.1:{ports['vk-controller-manager']}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text: str = response.read().decode()
    return text


def test_a_namespace_the_provider_reports_that_was_never_offloaded_reflects_nothing(
    naples_peered: Clusters, offloaded: str
) -> None:
    clusters = naples_peered
    bait = f"bait-{uuid.uuid4().hex[:6]}"
    loot = f"loot-{uuid.uuid4().hex[:6]}"
    clusters.kubectl(CONSUMER, "create", "secret", "generic", bait, "-n", "kube-system",
                     "--from-literal=password=hunter2")  # fmt: skip
    clusters.kubectl(PROVIDER, "create", "namespace", loot)
    tenant = f"liqo-tenant-{CONSUMER}"
    try:
        with installed_controller_manager_stopped(clusters, PROVIDER):
            # naples' own controller no longer rewrites the status: naples says what it likes.
            twin = items(clusters, PROVIDER, "namespacemaps.offloading.liqo.io", "-n", tenant)[0]
            injected = {"kube-system": {"remoteNamespace": loot, "phase": "Accepted"}}
            clusters.kubectl(
                PROVIDER, "patch", "namespacemaps.offloading.liqo.io", twin["metadata"]["name"],
                "-n", tenant, "--subresource=status", "--type=merge",
                "-p", json.dumps({"status": {"currentMapping": injected}}),
            )  # fmt: skip

            def said() -> str | None:
                events = items(
                    clusters, CONSUMER, "events", "-n", f"liqo-tenant-{PROVIDER}",
                    "--field-selector=reason=UntrustedMapping",
                )  # fmt: skip
                return next((e["message"] for e in events if loot in e["message"]), None)

            message = wait_until(said, "venice's Event on the untrusted entry")
            assert f"kube-system -> {loot}" in message
            assert "ignored" in message
            metrics = controller_manager_metrics(clusters, CONSUMER)
            assert f'vk_untrusted_mappings_total{{provider="{PROVIDER}"}}' in metrics
            # The entry never reaches venice's NamespaceMap, whose own entry stays.
            local = items(
                clusters, CONSUMER, "namespacemaps.offloading.liqo.io", "-n",
                f"liqo-tenant-{PROVIDER}",
            )[0]  # fmt: skip
            current = local["status"]["currentMapping"]
            assert "kube-system" not in current
            assert current[offloaded]["phase"] == "Accepted"
            # What reflection would have copied by now: nothing of venice's kube-system.
            time.sleep(5)  # reflection starts within a second of a mapping: give it five
            for kind in ("secrets", "configmaps"):
                names = [o["metadata"]["name"] for o in items(clusters, PROVIDER, kind, "-n", loot)]
                assert bait not in names
                assert "extension-apiserver-authentication" not in names
                assert set(names) <= {"kube-root-ca.crt"}, names
    finally:
        clusters.kubectl(CONSUMER, "delete", "secret", bait, "-n", "kube-system")
        clusters.kubectl(PROVIDER, "delete", "namespace", loot, "--wait=false")
