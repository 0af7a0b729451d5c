"""The provider's metrics agent (`vk webhook --metrics-agent-address`) behind naples' API server,
as an attacker tries it: a tenant asking for a namespace not made for it, even where a careless
RoleBinding lets the API server pass it on; anyone reaching its port directly, with no client
certificate or with one of the cluster's CA (not the front proxy's), whatever headers they send.
A consumer's own twin namespace is served, through the API server only.

The consumer's identity is impersonated (`--as USER --as-group vk-tenant:venice`): the API server
hands the agent the same user and groups as for the slice's client certificate.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import uuid
from collections.abc import Iterator

import aiohttp
import pytest

from tests.conftest import Clusters
from vk.api.constants import REMOTE_CLUSTER_ID_LABEL, tenant_group
from vk.controllers.provider_namespacemaps import VIRTUAL_KUBELET_REMOTE_ROLE
from vk.kube.kubeconfig import load_kubeconfig_file

PROVIDER, CONSUMER = "naples", "venice"
USER = "slice-metrics-0123456789ab"
USAGE = "/apis/metrics.vk.io/v1alpha1/namespaces/{}/pods"


def twin_namespace(clusters: Clusters, consumer: str, bound_group: str) -> str:
    """A namespace labelled as made for `consumer`, where `bound_group` gets the tenant role."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    clusters.kubectl(PROVIDER, "create", "namespace", name)
    clusters.kubectl(PROVIDER, "label", "namespace", name, f"{REMOTE_CLUSTER_ID_LABEL}={consumer}")
    clusters.kubectl(
        PROVIDER,
        "create",
        "rolebinding",
        "tenant",
        "-n",
        name,
        f"--clusterrole={VIRTUAL_KUBELET_REMOTE_ROLE}",
        f"--group={bound_group}",
    )
    return name


@pytest.fixture(scope="module")
def namespaces(installed: Clusters) -> Iterator[tuple[str, str]]:
    """venice's twin namespace, and rome's where venice's group is bound by mistake."""
    own = twin_namespace(installed, CONSUMER, tenant_group(CONSUMER))
    others = twin_namespace(installed, "rome", tenant_group(CONSUMER))
    yield own, others
    for name in (own, others):
        installed.kubectl(PROVIDER, "delete", "namespace", name, "--wait=false", check=False)


def as_venice(clusters: Clusters, path: str) -> tuple[int, str]:
    result = clusters.kubectl(
        PROVIDER, "get", "--raw", path, f"--as={USER}", f"--as-group={tenant_group(CONSUMER)}",
        check=False,
    )  # fmt: skip
    return result.returncode, result.stdout + result.stderr


def test_a_tenant_reads_its_own_twin_namespace_through_the_api_server(
    installed: Clusters, namespaces: tuple[str, str]
) -> None:
    own, _ = namespaces
    code, out = as_venice(installed, USAGE.format(own))
    assert code == 0, out
    answer = json.loads(out)
    assert answer["kind"] == "PodUsageList"
    assert answer["items"] == []  # nothing runs there


def test_a_tenant_is_refused_another_consumers_namespace_even_where_rbac_lets_it_pass(
    installed: Clusters, namespaces: tuple[str, str]
) -> None:
    _, others = namespaces
    code, out = as_venice(installed, USAGE.format(others))
    assert code != 0
    assert f"is not a namespace this provider made for {CONSUMER}" in out
    # And where no RoleBinding lets it pass, the API server refuses it first.
    code, out = as_venice(installed, USAGE.format("kube-system"))
    assert code != 0
    assert "forbidden" in out.lower()


async def direct(installed: Clusters, *, with_client_certificate: bool) -> str:
    """A request straight to the agent's port, claiming to be venice in the front proxy's
    headers; what went wrong (it must)."""
    ports = json.loads(installed.playground.paths(PROVIDER).ports_file.read_text())
    admin = load_kubeconfig_file(installed.kubeconfig(PROVIDER))
    connection = dataclasses.replace(
        admin,
        server=f"https://127.0.0.1:{ports['vk-metrics-agent']}",
        # The cluster's CA signed the administrator's certificate; the front proxy's did not.
        client_cert_pem=admin.client_cert_pem if with_client_certificate else None,
        client_key_pem=admin.client_key_pem if with_client_certificate else None,
        token=None,
    )
    headers = {"X-Remote-User": USER, "X-Remote-Group": tenant_group(CONSUMER)}
    connector = aiohttp.TCPConnector(ssl=connection.ssl_context())
    async with aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=10)
    ) as session:
        try:
            async with session.get(
                connection.server + USAGE.format("kube-system"), headers=headers
            ) as response:
                return f"answered {response.status}: {await response.text()}"
        except (aiohttp.ClientError, OSError) as error:
            return f"refused: {error!r}"


@pytest.mark.parametrize("with_client_certificate", [False, True])
def test_the_agents_port_refuses_anyone_but_the_front_proxy(
    installed: Clusters, with_client_certificate: bool
) -> None:
    outcome = asyncio.run(direct(installed, with_client_certificate=with_client_certificate))
    assert outcome.startswith("refused"), outcome
