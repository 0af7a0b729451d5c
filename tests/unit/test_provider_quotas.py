"""The provider's recount of a Quota's ledger, over hand-filled caches: the usage it writes
follows every change of its user's ShadowPods (each one's share worked out once per version of
it, and forgotten with it)."""

from __future__ import annotations

import asyncio
from typing import Any

from vk.api.constants import CREATOR_USER_LABEL
from vk.api.offloading import ShadowPodConditionType
from vk.controllers.provider_quotas import ProviderQuotaUsage
from vk.controllers.provider_shadowpods import ProviderShadowPods
from vk.kube.informer import DELETED, MODIFIED, informer_scope

JSON = dict[str, Any]
USER = "venice-naples"
QUOTA_STATUS_PATH = (
    "/apis/offloading.liqo.io/v1beta1/namespaces/liqo-tenant-venice/quotas/naples/status"
)


class StatusWrites:
    """The provider's API server, for the recount's writes of the Quota's status."""

    name = "provider"

    def __init__(self) -> None:
        self.written: list[JSON] = []

    async def replace(self, path: str, body: JSON) -> JSON:
        assert path == QUOTA_STATUS_PATH
        self.written.append(body["status"])
        return body


def accounted_shadow_pod(name: str, cpu: str, version: str, phase: str = "Running") -> JSON:
    reserved = {"type": ShadowPodConditionType.QUOTA_RESERVED.value, "status": "True"}
    return {
        "metadata": {
            "name": name,
            "namespace": "shop-venice",
            "uid": f"uid-{name}",
            "resourceVersion": version,
            "labels": {CREATOR_USER_LABEL: USER},
        },
        "spec": {"pod": {"containers": [{"name": "app", "resources": {"requests": {"cpu": cpu}}}]}},
        "status": {"phase": phase, "conditions": [reserved]},
    }


def recount_of_one_quota() -> tuple[StatusWrites, ProviderQuotaUsage, JSON]:
    """A recount whose cache holds one Quota, of USER, and the API server it writes to."""
    api = StatusWrites()
    recount = ProviderQuotaUsage(api)  # type: ignore[arg-type]
    quota = {
        "metadata": {"name": "naples", "namespace": "liqo-tenant-venice", "resourceVersion": "1"},
        "spec": {"user": USER},
    }
    recount.quotas.store.upsert(quota)
    return api, recount, quota


def test_the_recount_follows_each_shadow_pods_changes_and_forgets_the_deleted() -> None:
    api, recount, quota = recount_of_one_quota()

    def shows(shadow_pod: JSON, event: str = MODIFIED) -> None:
        """What the informer does with a ShadowPod's event: its cache, then the handler."""
        store = recount.shadow_pods.store
        if event == DELETED:
            store.delete(f"shop-venice/{shadow_pod['metadata']['name']}")
        else:
            store.upsert(shadow_pod)
        recount._on_shadow_pod(event, shadow_pod, None)

    async def used() -> JSON:
        await recount.reconcile("liqo-tenant-venice/naples")
        quota["status"] = api.written[-1]  # the cache shows the write
        return dict(quota["status"]["used"])

    async def scenario() -> None:
        shows(accounted_shadow_pod("a", "1", "10"))
        shows(accounted_shadow_pod("b", "500m", "11"))
        assert await used() == {"cpu": "1500m", "pods": "2"}
        # b finished: its next version counts nothing; a's share is as it was.
        shows(accounted_shadow_pod("b", "500m", "12", phase="Succeeded"))
        assert await used() == {"cpu": "1", "pods": "1"}
        shows(accounted_shadow_pod("c", "2", "13"))
        assert await used() == {"cpu": "3", "pods": "2"}
        shows(accounted_shadow_pod("a", "1", "10"), DELETED)
        assert await used() == {"cpu": "2", "pods": "1"}

    asyncio.run(scenario())
    assert sorted(recount._shares) == ["shop-venice/b", "shop-venice/c"]


def test_the_recount_and_the_shadow_pod_controller_share_one_watch_of_the_shadow_pods() -> None:
    """In the controller manager's scope, one informer of ShadowPods serves both: the
    provider's API server sends each ShadowPod's changes to it once."""
    api = StatusWrites()
    with informer_scope():
        recount = ProviderQuotaUsage(api)  # type: ignore[arg-type]
        controller = ProviderShadowPods(api, recount.quotas)  # type: ignore[arg-type]
    assert controller.shadow_pods is recount.shadow_pods
    assert recount.shadow_pods.params == {}  # every ShadowPod, the unstamped too


def test_a_shadow_pod_without_a_stamp_counts_nowhere_and_one_losing_it_leaves_its_quota() -> None:
    api, recount, _ = recount_of_one_quota()
    recounts: list[str] = []
    recount._recount_soon = lambda q: recounts.append(q["metadata"]["name"])  # type: ignore[method-assign]
    store = recount.shadow_pods.store

    stamped = accounted_shadow_pod("a", "1", "10")
    unstamped = accounted_shadow_pod("b", "2", "11")
    del unstamped["metadata"]["labels"]
    for shadow_pod in (stamped, unstamped):
        store.upsert(shadow_pod)
        recount._on_shadow_pod(MODIFIED, shadow_pod, None)
    assert recounts == ["naples"]  # the unstamped one is no Quota's

    async def used() -> JSON:
        await recount.reconcile("liqo-tenant-venice/naples")
        return dict(api.written[-1]["used"])

    assert asyncio.run(used()) == {"cpu": "1", "pods": "1"}
    assert sorted(recount._shares) == ["shop-venice/a"]

    # An admin takes the stamp off: the Quota it counted in is counted again, without it.
    unstamped_now = accounted_shadow_pod("a", "1", "12")
    del unstamped_now["metadata"]["labels"]
    store.upsert(unstamped_now)
    recount._on_shadow_pod(MODIFIED, unstamped_now, stamped)
    assert recounts == ["naples", "naples"]
    assert asyncio.run(used()) == {}
    assert recount._shares == {}
