"""vk/kube against a real API server: the informer's cache follows the cluster, Lease leader
election gives the lease to exactly one candidate at a time, and a client certificate from an
exec plugin is renewed when it expires or the server refuses it."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import Clusters
from vk.kube.client import API_REQUESTS, KubeClient, resource_path
from vk.kube.informer import ADDED, DELETED, MODIFIED, Informer, namespace_index
from vk.kube.kubeconfig import EXEC_REFRESH_MARGIN, load_kubeconfig_file
from vk.kube.leaderelection import LeaderElector
from vk.kube.pki import issue
from vk.playground.pki import load_ca


@pytest.fixture
async def venice(clusters: Clusters, namespace_name: str) -> AsyncIterator[KubeClient]:
    clusters.kubectl("venice", "create", "namespace", namespace_name)
    async with KubeClient(load_kubeconfig_file(clusters.kubeconfig("venice"))) as client:
        yield client
    clusters.kubectl("venice", "delete", "namespace", namespace_name, "--wait=false")


def configmap(namespace: str, name: str, value: str) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"v": value},
    }


async def until(condition, timeout: float = 10.0) -> None:  # type: ignore[no-untyped-def]
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.02)


@contextlib.asynccontextmanager
async def running(coroutine) -> AsyncIterator[asyncio.Task]:  # type: ignore[no-untyped-def]
    task = asyncio.create_task(coroutine)
    try:
        yield task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


async def test_informer_cache_follows_creates_updates_and_deletes(
    venice: KubeClient, namespace_name: str
) -> None:
    path = resource_path("v1", "configmaps", namespace=namespace_name)
    await venice.create(path, configmap(namespace_name, "before", "1"))
    informer = Informer(
        venice,
        "v1",
        "configmaps",
        namespace=namespace_name,
        indexers={"namespace": namespace_index},
    )
    events: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, obj, old: events.append((kind, obj["metadata"]["name"])))
    async with running(informer.run()):
        await asyncio.wait_for(informer.synced.wait(), 10)
        assert informer.store.get(f"{namespace_name}/before")["data"] == {"v": "1"}
        await venice.create(path, configmap(namespace_name, "during", "1"))
        await venice.merge_patch(f"{path}/before", {"data": {"v": "2"}})
        await venice.delete(f"{path}/during")
        await until(lambda: (DELETED, "during") in events)
    assert events[0] == (ADDED, "before")  # kube-root-ca.crt may come too, in any order
    assert events.index((ADDED, "during")) < events.index((DELETED, "during"))
    assert (MODIFIED, "before") in events
    assert informer.store.get(f"{namespace_name}/before")["data"] == {"v": "2"}
    assert informer.store.get(f"{namespace_name}/during") is None
    names = {o["metadata"]["name"] for o in informer.store.by_index("namespace", namespace_name)}
    assert "before" in names
    assert "during" not in names
    assert informer.lists == 1  # watched, never listed again


async def test_an_informer_streams_its_list_from_a_real_api_server(
    venice: KubeClient, namespace_name: str
) -> None:
    """The playground's API servers stream lists (1.34 and later): the informer's first list
    is a watch that sends the objects there are first, not a list in pages."""
    path = resource_path("v1", "configmaps", namespace=namespace_name)
    for name in ("one", "two"):
        await venice.create(path, configmap(namespace_name, name, "1"))

    def requests(verb: str) -> float:
        return API_REQUESTS.labels(venice.name, verb, "configmaps", "200")._value.get()

    lists_before, watches_before = requests("GET"), requests("WATCH")
    informer = Informer(venice, "v1", "configmaps", namespace=namespace_name)
    async with running(informer.run()):
        await asyncio.wait_for(informer.synced.wait(), 10)
        names = {obj["metadata"]["name"] for obj in informer.store.objects()}
        assert {"one", "two"} <= names
        await venice.create(path, configmap(namespace_name, "three", "1"))
        await until(lambda: informer.store.get(f"{namespace_name}/three") is not None)
    assert requests("GET") == lists_before  # no page listed
    assert requests("WATCH") >= watches_before + 2  # the streamed list, then the watch


async def test_informer_relist_reports_what_happened_while_it_was_not_watching(
    venice: KubeClient, namespace_name: str
) -> None:
    path = resource_path("v1", "configmaps", namespace=namespace_name)
    for name in ("kept", "changed", "removed"):
        await venice.create(path, configmap(namespace_name, name, "1"))
    informer = Informer(venice, "v1", "configmaps", namespace=namespace_name, label_selector="")
    async with running(informer.run()):
        await asyncio.wait_for(informer.synced.wait(), 10)
    # The gap a 410 Gone leaves: changes no watch event reported.
    await venice.merge_patch(f"{path}/changed", {"data": {"v": "2"}})
    await venice.delete(f"{path}/removed")
    await venice.create(path, configmap(namespace_name, "new", "1"))
    events: list[tuple[str, str]] = []
    informer.add_handler(lambda kind, obj, old: events.append((kind, obj["metadata"]["name"])))
    events.clear()
    await informer._relist()
    assert sorted(e for e in events if e[1] != "kube-root-ca.crt") == [
        (ADDED, "new"),
        (DELETED, "removed"),
        (MODIFIED, "changed"),
    ]


async def test_informer_selects_by_label(venice: KubeClient, namespace_name: str) -> None:
    path = resource_path("v1", "configmaps", namespace=namespace_name)
    labelled = configmap(namespace_name, "mine", "1")
    labelled["metadata"]["labels"] = {"owner": "vk"}
    await venice.create(path, labelled)
    await venice.create(path, configmap(namespace_name, "theirs", "1"))
    informer = Informer(
        venice, "v1", "configmaps", namespace=namespace_name, label_selector="owner=vk"
    )
    async with running(informer.run()):
        await asyncio.wait_for(informer.synced.wait(), 10)
        assert informer.store.keys() == [f"{namespace_name}/mine"]


def lease_path(namespace: str) -> str:
    return resource_path("coordination.k8s.io/v1", "leases", namespace=namespace, name="vk-test")


def elector(client: KubeClient, namespace: str, identity: str) -> LeaderElector:
    return LeaderElector(
        client,
        namespace=namespace,
        name="vk-test",
        identity=identity,
        lease_duration=4,
        renew_deadline=2,
        retry_period=0.2,
    )


@contextlib.asynccontextmanager
async def leading(
    client: KubeClient, namespace: str
) -> AsyncIterator[tuple[LeaderElector, asyncio.Task]]:
    """Candidate `a` running, once it leads; and its task."""
    leader = elector(client, namespace, "a")
    async with running(leader.run()) as task:
        await asyncio.wait_for(leader.is_leader.wait(), 5)
        yield leader, task


async def test_only_one_candidate_leads_and_release_hands_over_at_once(
    venice: KubeClient, namespace_name: str
) -> None:
    first, second = elector(venice, namespace_name, "a"), elector(venice, namespace_name, "b")
    async with running(first.run()):
        await asyncio.wait_for(first.is_leader.wait(), 5)
        async with running(second.run()):
            await asyncio.sleep(1.0)
            assert not second.is_leader.is_set()
            await first.release()
            started = asyncio.get_running_loop().time()
            await asyncio.wait_for(second.is_leader.wait(), 5)
            # Released, not expired: the standby did not wait out the 4 s lease.
            assert asyncio.get_running_loop().time() - started < 2.0
    lease = await venice.get(lease_path(namespace_name))
    assert lease["spec"]["holderIdentity"] == "b"
    assert lease["spec"]["leaseTransitions"] == 1


async def test_a_released_elector_never_takes_the_lease_again(
    venice: KubeClient, namespace_name: str
) -> None:
    # Its `run` still going (a release is not a cancellation): with no one else to take the
    # Lease, it would take it back within a retry period, and a standby would wait for ever.
    async with leading(venice, namespace_name) as (leader, task):
        await leader.release()
        await asyncio.sleep(1.0)  # five retry periods
        assert not leader.is_leader.is_set()
        assert task.done()
    assert not (await venice.get(lease_path(namespace_name)))["spec"].get("holderIdentity")


async def test_standby_takes_over_when_the_leader_stops_renewing(
    venice: KubeClient, namespace_name: str
) -> None:
    first, second = elector(venice, namespace_name, "a"), elector(venice, namespace_name, "b")
    async with running(first.run()):
        await asyncio.wait_for(first.is_leader.wait(), 5)
    # `a` died without releasing; `b` must wait the lease out (4 s), then lead.
    started = asyncio.get_running_loop().time()
    async with running(second.run()):
        await asyncio.wait_for(second.is_leader.wait(), 10)
    assert asyncio.get_running_loop().time() - started >= 3.5


async def test_leader_that_cannot_renew_reports_lost(
    venice: KubeClient, namespace_name: str
) -> None:
    async with leading(venice, namespace_name) as (leader, task):
        path = lease_path(namespace_name)
        # Someone else holds it now, freshly renewed: `a` cannot renew and must step down.
        for _ in range(12):
            await venice.merge_patch(
                path, {"spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 30}}
            )
            await asyncio.sleep(0.2)
        await asyncio.wait_for(leader.lost.wait(), 5)
        assert not leader.is_leader.is_set()
        assert task.done()
    lease = json.dumps(await venice.get(path))
    assert '"holderIdentity": "intruder"' in lease


# --- A client certificate from an exec plugin, renewed --------------------------------------


def exec_certificate_kubeconfig(
    clusters: Clusters, tmp_path: Path, credentials: list[dict]
) -> Path:
    """A kubeconfig for venice whose user is an exec plugin answering `credentials` in turn
    (the last one again once they run out), each run counted in `runs`."""
    for index, credential in enumerate(credentials, start=1):
        (tmp_path / f"credential-{index}.json").write_text(json.dumps(credential))
    script = tmp_path / "plugin.sh"
    script.write_text(
        "#!/bin/sh\n"
        f'cd "{tmp_path}"\n'
        "n=$(( $(cat runs 2>/dev/null || echo 0) + 1 ))\n"
        "echo $n > runs\n"
        f"[ -f credential-$n.json ] || n={len(credentials)}\n"
        "cat credential-$n.json\n"
    )
    script.chmod(0o755)
    venice = yaml.safe_load(clusters.kubeconfig("venice").read_text())
    cluster = venice["clusters"][0]
    path = tmp_path / "config"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "exec",
                "clusters": [{"name": "venice", "cluster": cluster["cluster"]}],
                "contexts": [{"name": "exec", "context": {"cluster": "venice", "user": "exec"}}],
                "users": [
                    {
                        "name": "exec",
                        "user": {
                            "exec": {
                                "apiVersion": "client.authentication.k8s.io/v1",
                                "command": str(script),
                                "interactiveMode": "Never",
                            }
                        },
                    }
                ],
            }
        )
    )
    return path


def certificate_credential(
    clusters: Clusters, user: str, valid_for: datetime.timedelta, expires: datetime.datetime | None
) -> dict:
    """An ExecCredential holding a client certificate for `user`, signed by venice's CA."""
    ca, ca_key = load_ca(clusters.playground.paths("venice").pki.root, "ca")
    issued = issue(ca, ca_key, user, datetime.datetime.now(datetime.UTC), client=True,
                   validity=valid_for)  # fmt: skip
    status = {
        "clientCertificateData": issued.cert_pem.decode(),
        "clientKeyData": issued.key_pem.decode(),
    }
    if expires is not None:
        status["expirationTimestamp"] = expires.isoformat()
    return {"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
            "status": status}  # fmt: skip


def first_then_second(
    clusters: Clusters,
    tmp_path: Path,
    first_valid_for: datetime.timedelta,
    first_said_to_expire: datetime.datetime | None,
) -> Path:
    """A kubeconfig whose plugin gives a certificate for vk-exec-first, then one for
    vk-exec-second (valid for an hour, no expiry said) at every run after."""
    return exec_certificate_kubeconfig(
        clusters,
        tmp_path,
        [
            certificate_credential(
                clusters, "vk-exec-first", first_valid_for, first_said_to_expire
            ),
            certificate_credential(clusters, "vk-exec-second", datetime.timedelta(hours=1), None),
        ],
    )


async def who_am_i(client: KubeClient) -> str:
    review = await client.create(
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    return str(review["status"]["userInfo"]["username"])


def refused(client: KubeClient) -> float:
    return float(API_REQUESTS.labels(client.name, "POST", "selfsubjectreviews", "401")._value.get())


async def test_an_exec_plugins_certificate_the_server_refuses_is_renewed(
    clusters: Clusters, tmp_path: Path
) -> None:
    # The first certificate expires in 3 s and the plugin does not say so: the server's 401
    # is the only sign. A connection kept alive presented it; a new one must present the next.
    path = first_then_second(clusters, tmp_path, datetime.timedelta(seconds=3), None)
    async with KubeClient(load_kubeconfig_file(path), name="exec-refused") as client:
        assert await who_am_i(client) == "vk-exec-first"
        await asyncio.sleep(4)
        assert await who_am_i(client) == "vk-exec-second"
        assert refused(client) == 1
    assert (tmp_path / "runs").read_text().strip() == "2"


async def test_an_exec_plugins_certificate_is_renewed_before_it_expires(
    clusters: Clusters, tmp_path: Path
) -> None:
    # The plugin says its first credential expires 5 s past the margin: vk asks again once
    # the margin is reached, with no request refused.
    soon = datetime.datetime.now(datetime.UTC) + EXEC_REFRESH_MARGIN + datetime.timedelta(seconds=5)
    path = first_then_second(clusters, tmp_path, datetime.timedelta(hours=1), soon)
    async with KubeClient(load_kubeconfig_file(path), name="exec-expiring") as client:
        assert await who_am_i(client) == "vk-exec-first"
        due = soon - EXEC_REFRESH_MARGIN + datetime.timedelta(seconds=1)
        await asyncio.sleep(max(0.0, (due - datetime.datetime.now(datetime.UTC)).total_seconds()))
        assert await who_am_i(client) == "vk-exec-second"
        assert refused(client) == 0
