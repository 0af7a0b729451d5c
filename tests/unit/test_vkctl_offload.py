"""`vkctl offload|unoffload namespace` without a cluster: the NamespaceOffloading it builds (the
tutorial's, printed by `-o yaml|json`), the flags it refuses, how it updates an existing one,
and how it reads the controller's status into success, failure or more waiting."""

from __future__ import annotations

import asyncio
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result

from tests.unit.fake_cluster import FakeCluster
from vk.api.offloading import NamespaceMappingStrategy, PodOffloadingStrategy
from vk.cli import offload
from vk.cli.offload import (
    describe_outcome,
    each_namespace,
    forge_namespace_offloading,
    more_restrictive,
    offloading_update,
    unoffload_state,
)
from vk.cli.peering import PeeringError
from vk.cli.vkctl import vkctl
from vk.cli.waiting import Deadline
from vk.kube.client import ApiError, NotFound

REFERENCE = Path(__file__).parents[1] / "data" / "reference" / "namespaceoffloading_liqo_demo.yaml"
SOUTH = {
    "nodeSelectorTerms": [
        {
            "matchExpressions": [
                {"key": "topology.liqo.io/region", "operator": "In", "values": ["south"]}
            ]
        }
    ]
}


def run(*args: str) -> Result:
    return CliRunner().invoke(vkctl, list(args))


def tutorial_offloading() -> dict[str, Any]:
    """The tutorial's NamespaceOffloading, its status of the generation it shows."""
    loaded: dict[str, Any] = yaml.safe_load(REFERENCE.read_text())
    loaded["metadata"]["generation"] = 1
    loaded["status"]["observedGeneration"] = 1
    return loaded


def offloading(
    phase: str | None,
    conditions: dict[str, list[dict[str, str]]] | None = None,
    *,
    selector: dict[str, Any] | None = None,
    generation: int = 2,
    observed: int | None = 2,
) -> dict[str, Any]:
    status: dict[str, Any] = {"remoteNamespaceName": "liqo-demo"}
    if phase is not None:
        status["offloadingPhase"] = phase
    if observed is not None:
        status["observedGeneration"] = observed
    if conditions is not None:
        status["remoteNamespacesConditions"] = conditions
    spec: dict[str, Any] = {
        "namespaceMappingStrategy": "EnforceSameName",
        "podOffloadingStrategy": "LocalAndRemote",
    }
    if selector is not None:
        spec["clusterSelector"] = selector
    return {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "NamespaceOffloading",
        "metadata": {"name": "offloading", "namespace": "liqo-demo", "generation": generation},
        "spec": spec,
        "status": status,
    }


def selected(ready: str, reason: str, message: str) -> list[dict[str, str]]:
    return [
        {"type": "OffloadingRequired", "status": "True", "reason": "ClusterSelected"},
        {"type": "Ready", "status": ready, "reason": reason, "message": message},
    ]


NOT_SELECTED = [{"type": "OffloadingRequired", "status": "False", "reason": "ClusterNotSelected"}]
CREATED = selected("True", "NamespaceCreated", "Namespace correctly offloaded")
BACK_OFF = selected("False", "CreationLoopBackOff", "Some problems occurred during creation")
CREATING = selected("False", "Creating", "The remote namespace is being created")


# --- The manifest --------------------------------------------------------------------------


def test_offload_o_yaml_prints_the_tutorials_namespace_offloading() -> None:
    result = run(
        "offload", "namespace", "liqo-demo", "--namespace-mapping-strategy", "EnforceSameName",
        "--pod-offloading-strategy", "LocalAndRemote",
        "--selector", "topology.liqo.io/region=south", "-o", "yaml",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    expected = yaml.safe_load(REFERENCE.read_text())
    del expected["status"]
    assert yaml.safe_load(result.stdout) == expected


def test_offload_defaults_are_liqoctls_and_select_every_cluster() -> None:
    result = run("offload", "namespace", "foo", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == {
        "apiVersion": "offloading.liqo.io/v1beta1",
        "kind": "NamespaceOffloading",
        "metadata": {"name": "offloading", "namespace": "foo"},
        "spec": {
            "namespaceMappingStrategy": "DefaultName",
            "podOffloadingStrategy": "LocalAndRemote",
        },
    }


def test_commas_and_within_one_selector_and_repeated_selectors_are_alternatives() -> None:
    nsoff = forge_namespace_offloading(
        "foo",
        NamespaceMappingStrategy.DEFAULT_NAME,
        None,
        PodOffloadingStrategy.REMOTE,
        ["region in (europe,us-west), !staging", "tier=gold"],
    )
    assert nsoff["spec"]["clusterSelector"] == {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "region", "operator": "In", "values": ["europe", "us-west"]},
                    {"key": "staging", "operator": "DoesNotExist"},
                ]
            },
            {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]},
        ]
    }
    assert nsoff["spec"]["podOffloadingStrategy"] == "Remote"


def test_selected_name_puts_the_remote_namespace_name_in_the_spec() -> None:
    result = run(
        "offload", "namespace", "foo", "--namespace-mapping-strategy", "SelectedName",
        "--remote-namespace-name", "bar", "-o", "yaml",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert yaml.safe_load(result.stdout)["spec"] == {
        "namespaceMappingStrategy": "SelectedName",
        "remoteNamespaceName": "bar",
        "podOffloadingStrategy": "LocalAndRemote",
    }


def test_selected_name_without_a_remote_namespace_name_is_a_usage_error() -> None:
    result = run("offload", "namespace", "foo", "--namespace-mapping-strategy", "SelectedName")
    assert result.exit_code == 2
    assert "SelectedName needs --remote-namespace-name" in result.stderr
    assert result.stdout == ""


def test_a_remote_namespace_name_with_another_strategy_is_ignored_with_a_warning() -> None:
    result = run(
        "offload", "namespace", "foo", "--namespace-mapping-strategy", "EnforceSameName",
        "--remote-namespace-name", "bar", "-o", "json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "warning: --remote-namespace-name is ignored" in result.stderr
    assert "remoteNamespaceName" not in json.loads(result.stdout)["spec"]


def test_an_invalid_selector_is_a_bad_parameter_saying_how_to_write_one() -> None:
    result = run("offload", "namespace", "foo", "--selector", "region in ()", "-o", "yaml")
    assert result.exit_code == 2
    assert "Invalid value for '--selector'" in result.stderr
    assert "lists no values" in result.stderr
    assert result.stdout == ""


def test_an_unknown_pod_offloading_strategy_is_refused() -> None:
    result = run("offload", "namespace", "foo", "--pod-offloading-strategy", "Everywhere")
    assert result.exit_code == 2
    assert "'Everywhere' is not one of" in result.stderr


# --- What vk would refuse, refused before anything is written ---------------------------------


@pytest.mark.parametrize(
    "namespace", ["kube-system", "kube-public", "kube-node-lease", "vk", "liqo-tenant-naples"]
)
@pytest.mark.parametrize("printed", [(), ("-o", "yaml")])
def test_a_system_namespace_is_refused_before_any_cluster_is_asked(
    namespace: str, printed: tuple[str, ...]
) -> None:
    result = run("offload", "namespace", "shop", namespace, *printed)
    assert result.exit_code == 2
    assert f"Invalid value for 'NAMES...': namespace {namespace} is " in result.stderr
    assert "so vk never offloads it: offload the namespaces of your workloads instead" in (
        result.stderr
    )
    assert result.stdout == ""


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("--namespace-mapping-strategy", "SelectedName", "--remote-namespace-name", "Shop_EU"),
            "Invalid value for '--remote-namespace-name': 'Shop_EU' is not a valid namespace name",
        ),
        (
            ("--namespace-mapping-strategy", "SelectedName", "--remote-namespace-name", "s" * 64),
            "is 64 characters long, over the 63 of a namespace name",
        ),
        (("Shop",), "Invalid value for 'NAMES...': 'Shop' is not a valid namespace name"),
    ],
)
def test_a_name_no_namespace_could_have_is_refused_before_any_cluster_is_asked(
    args: tuple[str, ...], said: str
) -> None:
    result = run("offload", "namespace", "shop", *args, "-o", "yaml")
    assert result.exit_code == 2
    assert said in result.stderr
    assert result.stdout == ""


# 57 characters: with '-venice' (DefaultName), 64.
LONG_NAMESPACE = "shop-" + "x" * 52


def test_a_default_name_is_judged_knowing_this_clusters_id() -> None:
    default = wanted(NamespaceMappingStrategy.DEFAULT_NAME)["spec"]
    refusal = offload.offloading_refusal(LONG_NAMESPACE, default, "venice")
    assert refusal is not None
    assert f"'{LONG_NAMESPACE}-venice' is 64 characters long" in refusal
    assert "--namespace-mapping-strategy SelectedName --remote-namespace-name NAME" in refusal
    assert offload.offloading_refusal(LONG_NAMESPACE, default, None) is None  # left to the webhook
    assert offload.offloading_refusal("s" * 56, default, "venice") is None
    same = wanted(NamespaceMappingStrategy.ENFORCE_SAME_NAME)["spec"]
    assert offload.offloading_refusal(LONG_NAMESPACE, same, "venice") is None


class HomeCluster(FakeCluster):
    """This cluster as `vkctl offload namespace` reads it: `namespaces` match any selector, its
    ID is venice; no write is expected."""

    def __init__(self, *namespaces: str) -> None:
        self.namespaces = namespaces

    async def list_all(
        self, path: str, params: dict[str, str] | None = None
    ) -> tuple[list[dict[str, Any]], str]:
        assert path == "/api/v1/namespaces"
        return [{"metadata": {"name": name}} for name in self.namespaces], "1"

    async def get(self, path: str, params: dict[str, str] | None = None) -> dict[str, Any]:
        assert path == "/api/v1/namespaces/vk/configmaps/vk-cluster-identity"
        return {"data": {"clusterID": "venice"}}

    async def create(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"written: {path}")

    async def merge_patch(self, path: str, patch: dict[str, Any]) -> dict[str, Any]:
        raise AssertionError(f"written: {path}")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (
            ("--ns-selector", "team=platform"),
            "kube-system (matched by --ns-selector: narrow it): namespace kube-system is one of "
            "Kubernetes' own namespaces",
        ),
        (
            (LONG_NAMESPACE,),
            f"{LONG_NAMESPACE}: the remote namespace name '{LONG_NAMESPACE}-venice'",
        ),
    ],
)
def test_what_the_cluster_tells_is_judged_before_any_namespace_is_offloaded(
    monkeypatch: pytest.MonkeyPatch, args: tuple[str, ...], said: str
) -> None:
    monkeypatch.setattr(offload, "cluster_client", lambda *_: HomeCluster("shop", "kube-system"))
    result = run("offload", "namespace", "shop", *args)
    assert result.exit_code == 1, result.output
    assert f"Error: nothing was offloaded: {said}" in result.stderr


# --- Updating an offloaded namespace ----------------------------------------------------------


def wanted(
    mapping: NamespaceMappingStrategy = NamespaceMappingStrategy.ENFORCE_SAME_NAME,
    remote_name: str | None = None,
    pods: PodOffloadingStrategy = PodOffloadingStrategy.LOCAL_AND_REMOTE,
    selectors: tuple[str, ...] = (),
) -> dict[str, Any]:
    return forge_namespace_offloading("liqo-demo", mapping, remote_name, pods, selectors)


def test_an_update_changes_the_pod_strategy_and_the_selector_only() -> None:
    patch = offloading_update(
        tutorial_offloading(),
        wanted(pods=PodOffloadingStrategy.REMOTE, selectors=("topology.liqo.io/region=north",)),
    )
    assert patch == {
        "spec": {
            "podOffloadingStrategy": "Remote",
            "clusterSelector": {
                "nodeSelectorTerms": [
                    {
                        "matchExpressions": [
                            {
                                "key": "topology.liqo.io/region",
                                "operator": "In",
                                "values": ["north"],
                            }
                        ]
                    }
                ]
            },
        }
    }


def test_an_update_without_selectors_removes_the_selector_to_select_every_cluster() -> None:
    patch = offloading_update(tutorial_offloading(), wanted())
    assert patch["spec"]["clusterSelector"] is None


@pytest.mark.parametrize(
    ("mapping", "remote_name"),
    [
        (NamespaceMappingStrategy.DEFAULT_NAME, None),
        (NamespaceMappingStrategy.SELECTED_NAME, "liqo-demo"),
    ],
)
def test_another_mapping_strategy_asks_to_unoffload_first(
    mapping: NamespaceMappingStrategy, remote_name: str | None
) -> None:
    with pytest.raises(PeeringError, match="EnforceSameName, which cannot change") as error:
        offloading_update(tutorial_offloading(), wanted(mapping, remote_name))
    assert "vkctl unoffload namespace liqo-demo" in str(error.value)


def test_another_selected_remote_name_asks_to_unoffload_first() -> None:
    current = tutorial_offloading()
    current["spec"].update(namespaceMappingStrategy="SelectedName", remoteNamespaceName="old")
    with pytest.raises(PeeringError, match=r"\(remote name old\)"):
        offloading_update(current, wanted(NamespaceMappingStrategy.SELECTED_NAME, "new"))


def test_a_remote_name_liqo_ignored_does_not_block_an_update() -> None:
    current = tutorial_offloading()  # liqoctl keeps a given name whatever the strategy
    current["spec"]["remoteNamespaceName"] = "ignored"
    assert offloading_update(current, wanted())["spec"]["podOffloadingStrategy"] == "LocalAndRemote"


def test_an_offloading_being_deleted_is_not_updated() -> None:
    current = tutorial_offloading()
    current["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    with pytest.raises(PeeringError, match="is being unoffloaded"):
        offloading_update(current, wanted())


@pytest.mark.parametrize(
    ("before", "after", "restrictive"),
    [
        ("LocalAndRemote", "Remote", True),
        ("Remote", "Local", True),
        ("Local", "LocalAndRemote", False),
        ("Remote", "Remote", False),
    ],
)
def test_only_narrowing_where_pods_run_is_more_restrictive(
    before: str, after: str, restrictive: bool
) -> None:
    current = tutorial_offloading()
    current["spec"]["podOffloadingStrategy"] = before
    assert more_restrictive(current, wanted(pods=PodOffloadingStrategy(after))) is restrictive


# --- Reading the status --------------------------------------------------------------------


def test_the_tutorials_ready_offloading_names_the_remote_namespace_and_the_ready_clusters() -> None:
    outcome = describe_outcome(tutorial_offloading())
    assert (outcome.done, outcome.ok, outcome.warning) == (True, True, None)
    assert outcome.message == (
        "namespace liqo-demo offloaded: remote name liqo-demo, ready on naples-7881be"
    )


def test_a_status_of_an_older_generation_is_not_an_outcome_yet() -> None:
    outcome = describe_outcome(offloading("Ready", {"naples": CREATED}, generation=3, observed=2))
    assert not outcome.done
    assert outcome.message == "waiting for the namespace offloading to be processed"


def test_a_status_never_written_is_waited_for() -> None:
    assert not describe_outcome(offloading(None, observed=None)).done


def test_in_progress_keeps_waiting_and_says_which_clusters_are_not_ready() -> None:
    outcome = describe_outcome(
        offloading("InProgress", {"naples": CREATING, "florence": NOT_SELECTED})
    )
    assert not outcome.done
    assert outcome.message == (
        "phase InProgress: naples: Creating (The remote namespace is being created)"
    )


def test_no_cluster_matching_the_selector_succeeds_with_a_warning_naming_it() -> None:
    outcome = describe_outcome(
        offloading("NoClusterSelected", {"florence": NOT_SELECTED}, selector=SOUTH)
    )
    assert (outcome.done, outcome.ok) == (True, True)
    assert outcome.warning is not None
    assert outcome.warning.startswith(
        "no cluster matches the selector 'topology.liqo.io/region=south'"
    )


def test_no_cluster_without_a_selector_means_none_is_peered() -> None:
    outcome = describe_outcome(offloading("NoClusterSelected", {}))
    assert (outcome.done, outcome.ok) == (True, True)
    assert outcome.warning is not None
    assert "vkctl peer" in outcome.warning


@pytest.mark.parametrize("phase", ["SomeFailed", "AllFailed"])
def test_a_failed_offloading_lists_each_failing_clusters_reason_and_message(phase: str) -> None:
    conditions = {"naples": BACK_OFF, "venice": CREATED, "florence": NOT_SELECTED}
    outcome = describe_outcome(offloading(phase, conditions))
    assert (outcome.done, outcome.ok) == (True, False)
    assert outcome.message == (
        f"the offloading of namespace liqo-demo failed ({phase}): "
        "naples: CreationLoopBackOff (Some problems occurred during creation)"
    )


def test_clusters_told_the_same_share_a_line_and_an_undecided_selection_counts() -> None:
    invalid = [
        {
            "type": "OffloadingRequired",
            "status": "Unknown",
            "reason": "InvalidClusterSelector",
            "message": "the clusterSelector is invalid",
        }
    ]
    outcome = describe_outcome(offloading("AllFailed", {"naples": invalid, "florence": invalid}))
    assert outcome.message == (
        "the offloading of namespace liqo-demo failed (AllFailed): "
        "florence, naples: InvalidClusterSelector (the clusterSelector is invalid)"
    )


def test_a_terminating_offloading_is_a_failure_to_offload() -> None:
    outcome = describe_outcome(offloading("Terminating", {"naples": CREATED}))
    assert (outcome.done, outcome.ok) == (True, False)
    assert "being unoffloaded" in outcome.message


def test_unoffloading_reports_the_finalizers_and_the_remote_namespaces_left() -> None:
    nsoff = offloading(
        "Terminating",
        {"naples": selected("False", "Terminating", "The remote namespace is being deleted")}
        | {"florence": NOT_SELECTED},
    )
    nsoff["metadata"]["finalizers"] = ["namespaceoffloading-controller.liqo.io/finalizer"]
    assert unoffload_state(nsoff) == (
        "phase Terminating, held by namespaceoffloading-controller.liqo.io/finalizer, "
        "remote namespaces left on naples (Terminating)"
    )


def test_unoffloading_an_unprocessed_offloading_reports_nothing_to_wait_for() -> None:
    nsoff = copy.deepcopy(offloading(None, observed=None))
    assert unoffload_state(nsoff) == ""


# --- Commands ------------------------------------------------------------------------------


def test_status_is_liqoctls_name_for_info() -> None:
    assert vkctl.commands["status"] is vkctl.commands["info"]


@pytest.mark.parametrize("group", ["offload", "unoffload"])
def test_offload_and_unoffload_take_a_namespace(group: str) -> None:
    result = run(group, "namespace", "--help")
    assert result.exit_code == 0, result.output
    assert "--timeout" in result.stdout


def test_several_namespaces_print_as_one_list_to_apply() -> None:
    result = run("offload", "namespace", "shop", "cart", "shop", "-o", "json")
    assert result.exit_code == 0, result.output
    printed = json.loads(result.output)
    assert printed["kind"] == "List"
    assert [i["metadata"]["namespace"] for i in printed["items"]] == ["shop", "cart"]


@pytest.mark.parametrize("command", ["offload", "unoffload"])
def test_without_a_namespace_or_a_selector_it_says_what_to_give(command: str) -> None:
    result = run(command, "namespace")
    assert result.exit_code == 2
    assert "--ns-selector" in result.output


class Answers:
    """What `each_namespace` is given to do: fails for the names in `failing`."""

    def __init__(self, *failing: str) -> None:
        self.failing = failing
        self.done: list[str] = []

    async def __call__(self, namespace: str) -> str:
        self.done.append(namespace)
        if namespace in self.failing:
            raise PeeringError(f"{namespace} is stuck")
        return f"namespace {namespace} offloaded"


def test_every_namespace_is_tried_and_each_failure_is_named() -> None:
    answers = Answers("cart")
    with pytest.raises(PeeringError) as failed:
        asyncio.run(each_namespace(["shop", "cart", "blog"], answers))
    assert answers.done == ["shop", "cart", "blog"]
    assert "cart: cart is stuck" in str(failed.value)
    assert "namespace blog offloaded" in str(failed.value)
    assert asyncio.run(each_namespace(["shop"], Answers())) == ["namespace shop offloaded"]


class Offloaded(FakeCluster):
    """This cluster as `vkctl unoffload namespace` deletes in it: the API server refuses to
    delete the NamespaceOffloading of the namespaces in `forbidden`, the others are not
    offloaded; each deletion asked is recorded."""

    def __init__(self, *forbidden: str) -> None:
        self.forbidden = forbidden
        self.asked: list[str] = []

    async def delete(self, path: str, body: Any = None) -> dict[str, Any]:
        namespace = path.split("/namespaces/")[1].split("/")[0]
        self.asked.append(namespace)
        if namespace in self.forbidden:
            raise ApiError(403, "Forbidden", f"cannot delete in namespace {namespace}")
        raise NotFound(404, "NotFound", "namespaceoffloadings.offloading.liqo.io not found")


def test_unoffloading_goes_on_after_the_api_server_refuses_a_namespace(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = Offloaded("shop")
    monkeypatch.setattr(offload, "cluster_client", lambda *_: cluster)
    result = run("unoffload", "namespace", "shop", "cart")
    assert cluster.asked == ["shop", "cart"]
    assert result.exit_code == 1, result.output
    assert "shop: 403 Forbidden: cannot delete in namespace shop" in result.stderr
    assert "namespace cart is not offloaded" in result.stderr


def test_each_namespace_has_the_whole_timeout_to_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """The first namespace times out; the second still has its own time."""
    left: dict[str, bool] = {}

    async def unoffload_namespace(
        client: object, namespace: str, *, deadline: Deadline, progress: object
    ) -> str:
        left[namespace] = not deadline.passed()
        while not deadline.passed():
            await asyncio.sleep(0.01)
        raise PeeringError(f"still there after {deadline.within:.2f}s")

    monkeypatch.setattr(offload, "cluster_client", lambda *_: Offloaded())
    monkeypatch.setattr(offload, "unoffload_namespace", unoffload_namespace)
    result = run("unoffload", "namespace", "shop", "cart", "--timeout", "50ms")
    assert result.exit_code == 1
    assert left == {"shop": True, "cart": True}


@pytest.mark.parametrize("name", ["Foo_Bar", "shop."])
def test_unoffloading_a_name_no_namespace_could_have_is_refused_before_any_cluster_is_asked(
    monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setattr(offload, "cluster_client", lambda *_: pytest.fail("a cluster was asked"))
    result = run("unoffload", "namespace", "shop", name)
    assert result.exit_code == 2
    assert f"Invalid value for 'NAMES...': '{name}' is not a valid namespace name" in (
        result.stderr
    )


@pytest.mark.parametrize("alias", ["ns", "namespaces"])
def test_ns_and_namespaces_are_liqoctls_aliases_of_namespace(alias: str) -> None:
    result = run("offload", alias, "shop", "-o", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["metadata"]["namespace"] == "shop"
    result = run("unoffload", alias, "--help")
    assert result.exit_code == 0, result.output
    assert "Stop offloading each namespace NAME" in result.stdout
