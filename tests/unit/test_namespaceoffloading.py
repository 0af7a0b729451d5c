"""The NamespaceOffloading controller's pure parts: remote names, selection, conditions with the
tutorial's wording, Liqo's phase rule, and where a pod may stay."""

from __future__ import annotations

import asyncio
import copy
import datetime
from typing import Any

import pytest

from vk.api.constants import NAMESPACE_OFFLOADING_NAME, SCHEDULING_ENABLED_LABEL
from vk.api.offloading import remote_namespace_name_problem
from vk.controllers import namespaceoffloading
from vk.controllers.namespaceoffloading import (
    NamespaceOffloadings,
    VirtualNodeView,
    first_holder,
    forge_cluster_conditions,
    forge_namespace_map,
    is_movable,
    is_placed,
    offloading_phase,
    placement_changed,
    placement_violation,
    pod_placement,
    remote_namespace_name,
    selection,
    status_patch,
    virtual_node_labels,
)
from vk.kube.client import NotFound
from vk.kube.controller import Result
from vk.kube.events import object_reference

NOW = datetime.datetime(2026, 11, 22, 9, 0, tzinfo=datetime.UTC)
REGION = "topology.liqo.io/region"


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({}, "liqo-demo-venice"),
        ({"namespaceMappingStrategy": "DefaultName"}, "liqo-demo-venice"),
        ({"namespaceMappingStrategy": "EnforceSameName"}, "liqo-demo"),
        ({"namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": "x"}, "x"),
        # The other strategies ignore the name, as Liqo does.
        ({"namespaceMappingStrategy": "EnforceSameName", "remoteNamespaceName": "x"}, "liqo-demo"),
    ],
)
def test_remote_names_follow_the_strategy(spec: dict[str, Any], expected: str) -> None:
    assert remote_namespace_name("liqo-demo", spec, "venice") == expected


def test_a_virtual_node_without_its_node_is_seen_through_its_virtualnode() -> None:
    virtual_node = {"spec": {"clusterID": "naples", "labels": {REGION: "south"}}}
    assert virtual_node_labels(virtual_node, None) == {
        REGION: "south",
        "liqo.io/type": "virtual-node",
        "liqo.io/remote-cluster-id": "naples",
    }
    node = {"metadata": {"labels": {REGION: "south", "added-by-admin": "yes"}}}
    assert virtual_node_labels(virtual_node, node)["added-by-admin"] == "yes"


NODES = [
    VirtualNodeView("florence", "florence", {REGION: "center"}),
    VirtualNodeView("naples", "naples", {REGION: "south"}),
    VirtualNodeView("naples-gpu", "naples", {REGION: "south", "gpu": "true"}),
]


def term(*expressions: dict[str, Any]) -> dict[str, Any]:
    return {"matchExpressions": list(expressions)}


def test_selection_picks_nodes_and_their_clusters() -> None:
    south = {"nodeSelectorTerms": [term({"key": REGION, "operator": "In", "values": ["south"]})]}
    assert selection(south, NODES) == ({"naples", "naples-gpu"}, {"naples"})
    gpu = {"nodeSelectorTerms": [term({"key": "gpu", "operator": "Exists"})]}
    assert selection(gpu, NODES) == ({"naples-gpu"}, {"naples"})
    assert selection(None, NODES)[1] == {"florence", "naples"}  # empty selects every cluster


def test_conditions_say_what_the_tutorial_says() -> None:
    florence = forge_cluster_conditions(
        None,
        selected=False,
        remote="liqo-demo",
        cluster_id="florence",
        entry=None,
        peered=True,
        now=NOW,
    )
    assert florence == [
        {
            "type": "OffloadingRequired",
            "status": "False",
            "reason": "ClusterNotSelected",
            "message": "You have not selected this cluster through ClusterSelector fields",
            "lastTransitionTime": "2026-11-22T09:00:00Z",
        }
    ]
    naples = forge_cluster_conditions(
        None,
        selected=True,
        remote="liqo-demo",
        cluster_id="naples",
        entry={"remoteNamespace": "liqo-demo", "phase": "Accepted"},
        peered=True,
        now=NOW,
    )
    assert [(c["type"], c["status"], c["reason"], c["message"]) for c in naples] == [
        (
            "OffloadingRequired",
            "True",
            "ClusterSelected",
            "The remote cluster has been selected through the ClusterSelector field",
        ),
        (
            "Ready",
            "True",
            "RemoteNamespaceCreated",
            "Namespace correctly offloaded on this cluster",
        ),
    ]


@pytest.mark.parametrize(
    ("entry", "peered", "reason"),
    [
        (None, True, "Creating"),
        (
            {"remoteNamespace": "liqo-demo", "phase": "CreationLoopBackOff"},
            True,
            "CreationLoopBackOff",
        ),
        ({"remoteNamespace": "liqo-demo", "phase": "Terminating"}, True, "Terminating"),
        (None, False, "NotPeered"),
    ],
)
def test_a_twin_not_ready_says_why(entry: dict[str, str] | None, peered: bool, reason: str) -> None:
    conditions = forge_cluster_conditions(
        None,
        selected=True,
        remote="liqo-demo",
        cluster_id="naples",
        entry=entry,
        peered=peered,
        now=NOW,
    )
    assert conditions[-1]["status"] == "False"
    assert conditions[-1]["reason"] == reason
    assert "naples" in conditions[-1]["message"]


def test_a_name_another_namespace_of_this_cluster_holds_is_named() -> None:
    desired = {"shop": "shared", "shop-2": "shared", "web": "web"}
    current = {
        "shop": {"remoteNamespace": "shared", "phase": "Accepted"},
        "shop-2": {"remoteNamespace": "shared", "phase": "CreationLoopBackOff"},
        # The provider's word about a namespace this cluster did not map there names nothing.
        "kube-system": {"remoteNamespace": "shared", "phase": "Accepted"},
    }
    assert first_holder("shop-2", "shared", desired, current) == "shop"
    assert first_holder("shop", "shared", desired, current) is None
    assert first_holder("web", "web", desired, current) is None
    only_claimed = {k: v for k, v in current.items() if k != "shop"}
    assert first_holder("shop-2", "shared", desired, only_claimed) is None
    conditions = forge_cluster_conditions(
        None,
        selected=True,
        remote="shared",
        cluster_id="naples",
        entry=current["shop-2"],
        peered=True,
        now=NOW,
        holder="shop",
    )
    assert conditions[-1]["reason"] == "CreationLoopBackOff"
    assert (
        "already holds this cluster's namespace shop, mapped to that name first"
        in (conditions[-1]["message"])
    )


def test_transition_times_stay_while_statuses_do() -> None:
    first = forge_cluster_conditions(
        None, selected=True, remote="d", cluster_id="n", entry=None, peered=True, now=NOW
    )
    later = forge_cluster_conditions(
        first,
        selected=True,
        remote="d",
        cluster_id="n",
        entry={"remoteNamespace": "d", "phase": "Accepted"},
        peered=True,
        now=NOW + datetime.timedelta(seconds=10),
    )
    assert later[0]["lastTransitionTime"] == "2026-11-22T09:00:00Z"
    assert later[1]["lastTransitionTime"] == "2026-11-22T09:00:10Z"


def conditions(required: str, ready: str | None = None, reason: str = "") -> list[dict[str, Any]]:
    found = [{"type": "OffloadingRequired", "status": required}]
    if ready:
        found.append({"type": "Ready", "status": ready, "reason": reason})
    return found


@pytest.mark.parametrize(
    ("by_cluster", "phase"),
    [
        ({}, "NoClusterSelected"),
        ({"a": conditions("False")}, "NoClusterSelected"),
        ({"a": conditions("True", "True"), "b": conditions("False")}, "Ready"),
        ({"a": conditions("True", "False", "Creating")}, "InProgress"),
        ({"a": conditions("True", "False", "CreationLoopBackOff")}, "AllFailed"),
        (
            {
                "a": conditions("True", "False", "CreationLoopBackOff"),
                "b": conditions("True", "True"),
            },
            "SomeFailed",
        ),
    ],
)
def test_the_phase_follows_liqos_rule(by_cluster: dict[str, Any], phase: str) -> None:
    assert offloading_phase(by_cluster, deleting=False) == phase
    assert offloading_phase(by_cluster, deleting=True) == "Terminating"


def pod(node: str, runtime_class: str | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": node}
    if runtime_class:
        spec["runtimeClassName"] = runtime_class
    return {"metadata": {"name": "p"}, "spec": spec}


@pytest.mark.parametrize(
    ("the_pod", "cluster", "strategy", "selected", "violates"),
    [
        (pod("venice-1"), None, "LocalAndRemote", {"naples"}, False),
        (pod("venice-1"), None, "Remote", {"naples"}, True),
        (pod("venice-1", "liqo"), None, "Remote", {"naples"}, False),
        (pod("naples"), "naples", "Remote", {"naples"}, False),
        (pod("florence"), "florence", "LocalAndRemote", {"naples"}, True),
        (pod("naples"), "naples", "Local", {"naples"}, True),
        (pod("naples", "liqo"), "naples", "Local", {"naples"}, False),
        (pod("venice-1"), None, "Local", {"naples"}, False),
    ],
)
def test_where_a_pod_may_stay(
    the_pod: dict[str, Any], cluster: str | None, strategy: str, selected: set[str], violates: bool
) -> None:
    why = placement_violation(the_pod, cluster, strategy, selected)
    assert (why is not None) == violates
    if why:
        assert the_pod["spec"]["nodeName"] in why


def running_pod(**status: Any) -> dict[str, Any]:
    """A ReplicaSet's pod as the API server sends it, running on virtual node naples."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": "web-1",
            "namespace": "shop",
            "uid": "u1",
            "resourceVersion": "7",
            "labels": {"app": "web"},
            "ownerReferences": [{"kind": "ReplicaSet", "name": "web", "controller": True}],
            "managedFields": [{"manager": "kube-scheduler"}],
        },
        "spec": {
            "nodeName": "naples",
            "runtimeClassName": "liqo",
            "containers": [{"name": "app", "image": "nginx"}],
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
        | status,
    }


def test_the_pod_cache_keeps_what_the_placement_decisions_read() -> None:
    whole = running_pod()
    kept = pod_placement(whole)
    dropped = ("labels", "managedFields")
    assert kept["metadata"] == {k: v for k, v in whole["metadata"].items() if k not in dropped}
    assert kept["spec"] == {"nodeName": "naples", "runtimeClassName": "liqo"}
    assert kept["status"] == {"phase": "Running"}
    # Every decision is the same on what is kept as on the whole pod.
    assert is_placed(kept)
    assert is_movable(kept)
    for strategy in ("Local", "Remote", "LocalAndRemote"):
        for selected in (set(), {"naples"}):
            assert placement_violation(kept, "naples", strategy, selected) == placement_violation(
                whole, "naples", strategy, selected
            )
    assert object_reference(kept) == object_reference(whole)


def test_only_a_change_of_where_a_pod_runs_or_whether_it_runs_on_looks_again() -> None:
    kept = pod_placement(running_pod())
    written = pod_placement(running_pod(conditions=[]))  # its status, not its phase
    written["metadata"]["resourceVersion"] = "8"
    assert not placement_changed("MODIFIED", written, kept)
    finished = pod_placement(running_pod(phase="Succeeded"))
    assert placement_changed("MODIFIED", finished, kept)
    leaving = pod_placement(running_pod())
    leaving["metadata"]["deletionTimestamp"] = "2026-11-26T12:00:00Z"
    assert placement_changed("MODIFIED", leaving, kept)
    assert placement_changed("ADDED", kept, None)
    assert placement_changed("DELETED", kept, kept)


class NamespacePods:
    """Home's API server as the controller's informer of namespace shop reads it: one running
    pod, listed whole; a quiet watch."""

    name = "home"

    async def current_objects(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        assert path == "/api/v1/namespaces/shop/pods"
        yield [running_pod()], "7"

    async def watch(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        await asyncio.sleep(3600)
        yield {}


async def test_a_namespaces_pods_are_cached_as_placed_and_looked_at_again_batched(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(namespaceoffloading, "PODS_BATCH_SECONDS", 0.1)
    controller = NamespaceOffloadings(NamespacePods(), "venice")  # type: ignore[arg-type]
    key = f"shop/{NAMESPACE_OFFLOADING_NAME}"
    controller.offloadings.store.upsert(
        {"metadata": {"name": NAMESPACE_OFFLOADING_NAME, "namespace": "shop"}}
    )
    pods = controller._pods_of("shop")
    try:
        await asyncio.wait_for(pods.synced.wait(), 2)
        assert pods.store.objects() == [pod_placement(running_pod())]
        queue = controller.controller.queue
        await asyncio.sleep(0.3)
        assert len(queue) == 1  # the listed pod's ADDED
        await queue.get()
        queue.done(key)
        kept = pods.store.objects()[0]
        written = pod_placement(running_pod(conditions=[]))
        written["metadata"]["resourceVersion"] = "8"
        controller._on_pod("shop", "MODIFIED", written, kept)
        await asyncio.sleep(0.3)
        assert len(queue) == 0, "a status written, not a placement changed, looked at again"
        finished = pod_placement(running_pod(phase="Succeeded"))
        controller._on_pod("shop", "MODIFIED", finished, kept)
        assert len(queue) == 0, "looked at again at once, not batched"
        await asyncio.sleep(0.3)
        assert len(queue) == 1
        controller._on_pod("elsewhere", "ADDED", finished, None)  # no offloading there
        await asyncio.sleep(0.3)
        assert len(queue) == 1
    finally:
        controller._stop_pods("shop")


def test_the_status_patch_removes_providers_that_left() -> None:
    current = {
        "offloadingPhase": "Ready",
        "remoteNamespacesConditions": {"florence": [], "naples": []},
    }
    wanted = {"offloadingPhase": "Ready", "remoteNamespacesConditions": {"naples": []}}
    assert status_patch(current, wanted) == {
        "offloadingPhase": "Ready",
        "remoteNamespacesConditions": {"florence": None, "naples": []},
    }
    assert status_patch(wanted, wanted) is None


def test_the_namespace_map_is_replicated_to_its_provider() -> None:
    namespace_map = forge_namespace_map("naples", {"liqo-demo": "liqo-demo"})
    assert namespace_map["metadata"]["namespace"] == "liqo-tenant-naples"
    assert namespace_map["metadata"]["labels"] == {
        "liqo.io/remote-cluster-id": "naples",
        "liqo.io/remoteID": "naples",
        "liqo.io/replication": "true",
    }
    assert namespace_map["spec"] == {"desiredMapping": {"liqo-demo": "liqo-demo"}}


# A namespace name of 57 characters: with '-venice' (DefaultName), 64.
LONG_NAMESPACE = "shop-" + "x" * 52


@pytest.mark.parametrize(
    ("namespace", "spec", "found"),
    [
        ("shop", {}, None),
        ("s" * 56, {}, None),  # 56 + '-venice': 63, the most a namespace name may have
        (LONG_NAMESPACE, {}, "is 64 characters long, over the 63 of a namespace name"),
        (LONG_NAMESPACE, {"namespaceMappingStrategy": "EnforceSameName"}, None),
        (LONG_NAMESPACE, {"namespaceMappingStrategy": "SelectedName"}, "needs remoteNamespaceName"),
        (
            "shop",
            {"namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": "Shop_EU"},
            "remoteNamespaceName 'Shop_EU' is not a valid namespace name",
        ),
        ("shop", {"namespaceMappingStrategy": "SelectedName", "remoteNamespaceName": "s"}, None),
    ],
)
def test_a_remote_name_no_namespace_could_have_is_found_before_asking_a_provider(
    namespace: str, spec: dict[str, Any], found: str | None
) -> None:
    problem = remote_namespace_name_problem(namespace, spec, "venice")
    if found is None:
        assert problem is None
        return
    assert problem is not None
    assert found in problem
    assert "--namespace-mapping-strategy SelectedName --remote-namespace-name NAME" in problem
    if not spec:  # DefaultName: the name, and why it is that name
        assert f"'{LONG_NAMESPACE}-venice'" in problem
        assert "this cluster's ID venice" in problem


class HomeApi:
    """Home's API server as the controller writes to it, for a namespace without pods: what it
    was sent."""

    name = "home"

    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.patched: dict[str, list[dict[str, Any]]] = {}

    async def current_objects(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        yield [], "1"  # no pods

    async def watch(
        self, path: str, params: dict[str, str] | None = None, *, timeout_seconds: int = 300
    ):  # type: ignore[no-untyped-def]
        await asyncio.sleep(3600)
        yield {}

    async def set_finalizer(self, *_: Any, **__: Any) -> bool:
        return False  # the offloading has it

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        raise NotFound(404, "NotFound", path)

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        self.created.append(body)
        return body

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patched.setdefault(path, []).append(patch)
        return patch


def peered_controller(api: HomeApi, namespace: str, spec: dict[str, Any]) -> NamespaceOffloadings:
    """The controller over `api`, with the NamespaceOffloading of `namespace` (as the webhook
    may not have seen it) and one provider, naples: its virtual node, and peered."""
    controller = NamespaceOffloadings(api, "venice")  # type: ignore[arg-type]
    controller.offloadings.store.upsert(
        {
            "apiVersion": "offloading.liqo.io/v1beta1",
            "kind": "NamespaceOffloading",
            "metadata": {
                "name": NAMESPACE_OFFLOADING_NAME,
                "namespace": namespace,
                "uid": "o",
                "generation": 1,
                "finalizers": [namespaceoffloading.FINALIZER],
            },
            "spec": spec,
        }
    )
    controller.virtual_nodes.store.upsert(
        {"metadata": {"name": "naples"}, "spec": {"clusterID": "naples"}}
    )
    controller.namespaces.store.upsert({"metadata": {"name": "liqo-tenant-naples"}})
    return controller


async def reconciled(
    controller: NamespaceOffloadings, namespace: str, pods: tuple[dict[str, Any], ...] = ()
) -> Result:
    """One look at the offloading of `namespace`, whose pods are `pods`."""
    informer = controller._pods_of(namespace)
    try:
        await asyncio.wait_for(informer.synced.wait(), 2)
        for pod in pods:
            informer.store.upsert(pod)
        return await controller.reconcile(f"{namespace}/{NAMESPACE_OFFLOADING_NAME}")
    finally:
        controller._stop_pods(namespace)


def status_path(namespace: str) -> str:
    return (
        f"/apis/offloading.liqo.io/v1beta1/namespaces/{namespace}"
        f"/namespaceoffloadings/{NAMESPACE_OFFLOADING_NAME}/status"
    )


async def test_an_offloading_whose_remote_name_cannot_be_is_reported_not_mapped() -> None:
    api = HomeApi()
    result = await reconciled(peered_controller(api, LONG_NAMESPACE, {}), LONG_NAMESPACE)
    assert result.requeue_after is None  # nothing on its way
    assert not any(c["kind"] == "NamespaceMap" for c in api.created)  # no provider asked
    [status] = api.patched[status_path(LONG_NAMESPACE)]
    assert status["status"]["offloadingPhase"] == "AllFailed"
    ready = status["status"]["remoteNamespacesConditions"]["naples"][-1]
    assert ready["reason"] == "InvalidRemoteNamespaceName"
    assert "64 characters long" in ready["message"]
    assert f"vkctl unoffload namespace {LONG_NAMESPACE}" in ready["message"]
    [event] = [c for c in api.created if c["kind"] == "Event"]
    assert event["message"] == ready["message"]


INVALID_SELECTOR = {
    "nodeSelectorTerms": [{"matchExpressions": [{"key": REGION, "operator": "In"}]}]
}


@pytest.mark.parametrize("spec", [{}, {"clusterSelector": INVALID_SELECTOR}])
async def test_an_offloading_of_a_system_namespace_maps_nothing_and_says_why(
    spec: dict[str, Any],
) -> None:
    """Got in without the webhook: no provider is asked, the namespace loses the label that
    has the pod webhook place its pods, and the status and an Event say why (an invalid
    selector changes none of it)."""
    api = HomeApi()
    controller = peered_controller(api, "kube-system", spec)
    controller.namespaces.store.upsert(
        {"metadata": {"name": "kube-system", "labels": {SCHEDULING_ENABLED_LABEL: "true"}}}
    )
    result = await reconciled(controller, "kube-system")
    assert result.requeue_after is None
    assert not any(c["kind"] == "NamespaceMap" for c in api.created)
    assert api.patched["/api/v1/namespaces/kube-system"] == [
        {"metadata": {"labels": {SCHEDULING_ENABLED_LABEL: None}}}
    ]
    [status] = api.patched[status_path("kube-system")]
    assert status["status"]["offloadingPhase"] == "AllFailed"
    [event] = [c for c in api.created if c["kind"] == "Event"]
    assert event["reason"] == "SystemNamespace"
    assert event["message"].startswith("namespace kube-system is one of Kubernetes' own namespaces")
    assert "vkctl unoffload namespace kube-system" in event["message"]
    if not spec:  # naples selected: its condition says it
        ready = status["status"]["remoteNamespacesConditions"]["naples"][-1]
        assert (ready["status"], ready["reason"]) == ("False", "SystemNamespace")
        assert ready["message"] == event["message"]


def naples_map(namespace: str) -> dict[str, Any]:
    """naples' NamespaceMap with `namespace` mapped to `<namespace>-venice`, Accepted."""
    twin = f"{namespace}-venice"
    return {
        "metadata": {"name": "naples", "namespace": "liqo-tenant-naples"},
        "spec": {"desiredMapping": {namespace: twin}},
        "status": {"currentMapping": {namespace: {"remoteNamespace": twin, "phase": "Accepted"}}},
    }


async def test_a_system_namespace_offloaded_already_comes_home_then_loses_its_mapping() -> None:
    """Offloaded before vk refused it: its pods on the provider's virtual node are evicted
    (those at home are left alone), then the provider loses the mapping, and its twin."""
    api = HomeApi()
    controller = peered_controller(api, "kube-system", {})
    controller.maps.store.upsert(naples_map("kube-system"))
    coredns = pod_placement(running_pod())
    coredns["metadata"].update(name="coredns-1", namespace="kube-system", uid="c1")
    at_home = copy.deepcopy(coredns)
    at_home["metadata"].update(name="coredns-2", uid="c2")
    at_home["spec"] = {"nodeName": "venice-1"}
    result = await reconciled(controller, "kube-system", (coredns, at_home))
    assert result.requeue_after == namespaceoffloading.RETRY
    evictions = [c["metadata"] for c in api.created if c["kind"] == "Eviction"]
    assert evictions == [{"name": "coredns-1", "namespace": "kube-system"}]
    map_path = "/apis/offloading.liqo.io/v1beta1/namespaces/liqo-tenant-naples/namespacemaps/naples"
    assert map_path not in api.patched  # its pods first
    await reconciled(controller, "kube-system", (at_home,))
    assert api.patched[map_path] == [{"spec": {"desiredMapping": {"kube-system": None}}}]


def leaving(controller: NamespaceOffloadings, namespace: str, labelled: bool) -> None:
    """The NamespaceOffloading of `namespace` being deleted; the namespace with the scheduling
    label or without."""
    key = f"{namespace}/{NAMESPACE_OFFLOADING_NAME}"
    offloading = copy.deepcopy(controller.offloadings.store.get(key))
    assert offloading is not None
    offloading["metadata"]["deletionTimestamp"] = "2026-12-07T16:00:00Z"
    controller.offloadings.store.upsert(offloading)
    labels = {SCHEDULING_ENABLED_LABEL: "true"} if labelled else {}
    controller.namespaces.store.upsert({"metadata": {"name": namespace, "labels": labels}})


async def test_a_leaving_namespace_keeps_its_label_until_it_has_left() -> None:
    """The webhook keeps a leaving namespace's new pods on local nodes only while the label is
    on: taken off at once, a pod asking for a virtual node itself went back there, and the
    namespace never left. Off once no provider has it, before the finalizer."""
    api = HomeApi()
    controller = peered_controller(api, "shop", {})
    controller.maps.store.upsert(naples_map("shop"))
    leaving(controller, "shop", labelled=True)
    web = pod_placement(running_pod())
    web["metadata"].update(name="web-1", namespace="shop", uid="w1")
    await reconciled(controller, "shop", (web,))
    assert "/api/v1/namespaces/shop" not in api.patched  # labelled still, its pod evicted
    controller.maps.store.upsert(
        {"metadata": {"name": "naples", "namespace": "liqo-tenant-naples"}, "spec": {}}
    )
    await reconciled(controller, "shop")
    assert api.patched["/api/v1/namespaces/shop"] == [
        {"metadata": {"labels": {SCHEDULING_ENABLED_LABEL: None}}}
    ]


async def test_a_leaving_system_namespace_is_never_labelled() -> None:
    api = HomeApi()
    controller = peered_controller(api, "kube-system", {})
    leaving(controller, "kube-system", labelled=False)
    await reconciled(controller, "kube-system")
    assert "/api/v1/namespaces/kube-system" not in api.patched


async def test_a_namespace_whose_offloading_is_gone_unfinished_loses_its_label() -> None:
    """Its finalizer removed by hand while it left: the label kept meanwhile would have the
    webhook refuse the namespace's pods ("no NamespaceOffloading yet") for ever."""
    api = HomeApi()
    controller = peered_controller(api, "shop", {})
    leaving(controller, "shop", labelled=True)
    controller.offloadings.store.delete(f"shop/{NAMESPACE_OFFLOADING_NAME}")
    await controller.reconcile(f"shop/{NAMESPACE_OFFLOADING_NAME}")
    assert api.patched["/api/v1/namespaces/shop"] == [
        {"metadata": {"labels": {SCHEDULING_ENABLED_LABEL: None}}}
    ]
