"""Which of a provider's NamespaceMap entries this cluster trusts: only those it asked for."""

from __future__ import annotations

from typing import Any

from vk.reflection.namespacemap import accepted_mappings, untrusted_mappings, without_untrusted


def namespace_map(desired: dict[str, str], current: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"desiredMapping": desired}, "status": {"currentMapping": current}}


ACCEPTED_SHOP = {"remoteNamespace": "shop", "phase": "Accepted"}


def test_only_what_this_cluster_asked_for_and_the_provider_accepted_is_reflected() -> None:
    injected = namespace_map(
        {"shop": "shop", "web": "web-venice"},
        {
            "shop": ACCEPTED_SHOP,
            "web": {"remoteNamespace": "web-venice", "phase": "CreationLoopBackOff"},
            # The provider's word alone: this cluster's kube-system, and a name it did not ask.
            "kube-system": {"remoteNamespace": "loot", "phase": "Accepted"},
            "other": {"remoteNamespace": "shop", "phase": "Accepted"},
        },
    )
    assert accepted_mappings([injected]) == {"shop": "shop"}
    assert untrusted_mappings(injected) == {"kube-system": "loot", "other": "shop"}


def test_a_remote_name_the_provider_changed_is_not_trusted() -> None:
    moved = namespace_map(
        {"shop": "shop"}, {"shop": {"remoteNamespace": "loot", "phase": "Accepted"}}
    )
    assert accepted_mappings([moved]) == {}
    assert untrusted_mappings(moved) == {"shop": "loot"}


def test_the_status_copied_home_drops_the_untrusted_entries_only() -> None:
    local = namespace_map({"shop": "shop"}, {})
    status = {
        "currentMapping": {
            "shop": ACCEPTED_SHOP,
            "gone": {"remoteNamespace": "gone", "phase": "Terminating"},
            "kube-system": {"remoteNamespace": "loot", "phase": "Accepted"},
        }
    }
    assert without_untrusted(local, status) == {
        "currentMapping": {
            "shop": ACCEPTED_SHOP,
            "gone": {"remoteNamespace": "gone", "phase": "Terminating"},
        }
    }
    assert without_untrusted(local, {}) == {}
