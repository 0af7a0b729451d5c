"""A ForeignCluster's status, from what this cluster sees of the peering."""

from __future__ import annotations

import datetime

from vk.controllers.foreignclusters import forge_foreign_cluster_status

NOW = datetime.datetime(2026, 11, 22, 8, 0, tzinfo=datetime.UTC)


def conditions(status: dict[str, object]) -> dict[str, str]:
    modules = status["modules"]
    assert isinstance(modules, dict)
    return {c["type"]: c["status"] for m in modules.values() for c in m.get("conditions") or []}


def forge(**kwargs: object) -> dict[str, object]:
    arguments: dict[str, object] = {
        "outgoing": False,
        "incoming": False,
        "virtual_nodes_ready": [],
        "api_server_url": None,
        "previous": None,
        "now": NOW,
    }
    arguments.update(kwargs)
    return forge_foreign_cluster_status("naples", **arguments)  # type: ignore[arg-type]


def test_a_provider_we_consume_from() -> None:
    status = forge(outgoing=True, virtual_nodes_ready=[True, True])
    assert status["role"] == "Provider"
    assert conditions(status) == {
        "AuthIdentityControlPlaneStatus": "Established",
        "AuthTenantStatus": "None",
        "OffloadingVirtualNodeStatus": "Established",
    }
    assert status["modules"]["networking"] == {"enabled": False}  # type: ignore[index]


def test_a_consumer_of_ours_and_both_ways() -> None:
    assert forge(incoming=True)["role"] == "Consumer"
    assert forge(incoming=True, outgoing=True)["role"] == "ConsumerAndProvider"


def test_virtual_nodes_not_all_ready_or_none_at_all() -> None:
    assert (
        conditions(forge(outgoing=True, virtual_nodes_ready=[True, False]))[
            "OffloadingVirtualNodeStatus"
        ]
        == "NotReady"
    )
    assert conditions(forge(outgoing=True))["OffloadingVirtualNodeStatus"] == "None"


def test_transition_times_move_only_with_the_status() -> None:
    first = forge(outgoing=True, virtual_nodes_ready=[True])
    later = NOW + datetime.timedelta(hours=1)
    same = forge(outgoing=True, virtual_nodes_ready=[True], previous=first, now=later)
    assert same == first
    changed = forge(outgoing=True, virtual_nodes_ready=[False], previous=first, now=later)
    offloading = changed["modules"]["offloading"]["conditions"][0]  # type: ignore[index]
    assert offloading["lastTransitionTime"] == "2026-11-22T09:00:00Z"


def test_a_control_plane_identity_that_cannot_be_used_is_an_error_saying_why() -> None:
    why = "Secret t/k: users[0].user.exec: a kubeconfig Secret takes inline credentials only"
    status = forge(outgoing=True, identity_problem=why)
    [condition] = [
        c
        for c in status["modules"]["authentication"]["conditions"]  # type: ignore[index]
        if c["type"] == "AuthIdentityControlPlaneStatus"
    ]
    assert condition["status"] == "Error"
    assert condition["message"] == f"our control-plane identity on naples cannot be used: {why}"
