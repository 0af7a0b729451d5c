"""The real-node playground the tests of this directory share (built once per session):
`vkctl playground up --real-node`, venice with a real node for vk's pods beside its kwok node,
naples with a real node as its only node (the pods offloaded there run as containers), and the
tutorial's peerings and liqo-demo namespace on it.

The tutorial's manifests name Docker Hub's `nginx`, which this machine cannot pull: the
fixture applies them with the playground's local web-server image instead (WEB_IMAGE, nginx
from Debian's package), and changes nothing else in them.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import yaml

from tests.conftest import Clusters
from tests.integration.polling import wait_until
from tests.integration.test_namespace_offloading import (
    CONSUMER,
    REGION,
    TUTORIAL_DEPLOYMENTS,
    namespace_exists,
    offloading,
    peer,
    running_on,
    vkctl,
    wide,
)
from vk.playground.images import WEB_IMAGE
from vk.playground.playground import Playground
from vk.playground.spec import DEFAULT_CLUSTERS, with_real_node

# Runs last: it takes the session's playground down.
TEARDOWN_TEST = "test_down_removes_every_trace"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=lambda item: item.name == TEARDOWN_TEST)


def with_local_web_image(manifests: str) -> str:
    """The manifests with every `nginx` image replaced by WEB_IMAGE, said on stdout."""
    documents = [d for d in yaml.safe_load_all(manifests) if d]
    for document in documents:
        for container in document["spec"]["template"]["spec"]["containers"]:
            if container["image"].split(":")[0] == "nginx":
                print(f"{document['metadata']['name']}: image nginx -> {WEB_IMAGE} (local)")
                container["image"] = WEB_IMAGE
    return yaml.safe_dump_all(documents)


@pytest.fixture(scope="session")
def real(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[Clusters]:
    playground = Playground(root=tmp_path_factory.mktemp("real-node"))
    capture = pytestconfig.pluginmanager.getplugin("capturemanager")
    try:
        with capture.global_and_fixture_disabled():  # image builds: show their progress
            specs = playground.up(with_real_node(DEFAULT_CLUSTERS))
        yield Clusters(playground, specs)
    finally:
        playground.down()


@pytest.fixture(scope="session")
def peered(real: Clusters) -> Clusters:
    """venice peered with naples and florence, as the tutorial peers them."""
    for provider in ("naples", "florence"):
        peer(real, provider)
    return real


@pytest.fixture(scope="session")
def liqo_demo(peered: Clusters) -> Clusters:
    """The tutorial's liqo-demo: offloaded to the south region (naples) only, LocalAndRemote,
    with its two Deployments applied (nginx substituted, see the module); app-south Running on
    naples, as a container of its real node."""
    clusters = peered
    clusters.kubectl(CONSUMER, "create", "namespace", "liqo-demo")
    offloaded = vkctl(
        clusters,
        "offload",
        "namespace",
        "liqo-demo",
        "--namespace-mapping-strategy=EnforceSameName",
        "--pod-offloading-strategy=LocalAndRemote",
        f"--selector={REGION}=south",
    )
    assert offloaded.returncode == 0, offloaded.stderr
    assert offloading(clusters, "liqo-demo")["status"]["offloadingPhase"] == "Ready"
    assert namespace_exists(clusters, "naples", "liqo-demo")
    assert not namespace_exists(clusters, "florence", "liqo-demo")
    manifests = with_local_web_image(TUTORIAL_DEPLOYMENTS.read_text())
    clusters.kubectl(CONSUMER, "apply", "-f", "-", "-n", "liqo-demo", input=manifests)
    wait_until(
        lambda: running_on(clusters, "liqo-demo", "app=app-south") == ["naples"],
        "app-south Running on the naples virtual node",
        timeout=120,
        explain=lambda: wide(clusters, "liqo-demo"),
    )
    return clusters
