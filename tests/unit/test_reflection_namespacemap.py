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
    assert untrusted_mappings(namespace_map({}, {}), injected["status"]) == {
        "kube-system": "loot",
        "other": "shop",
        "shop": "shop",
    }
    local = namespace_map(injected["spec"]["desiredMapping"], {})
    assert untrusted_mappings(local, injected["status"]) == {"kube-system": "loot", "other": "shop"}


def test_a_remote_name_the_provider_changed_is_not_trusted() -> None:
    moved = namespace_map(
        {"shop": "shop"}, {"shop": {"remoteNamespace": "loot", "phase": "Accepted"}}
    )
    assert accepted_mappings([moved]) == {}
    assert untrusted_mappings(namespace_map({"shop": "shop"}, {}), moved["status"]) == {
        "shop": "loot"
    }


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


def test_an_entry_just_unoffloaded_is_trusted_while_the_provider_removes_it() -> None:
    """The consumer took `shop` out of its spec; the provider has not answered yet. Its status
    says what was true a moment ago: no alarm, and the copy home keeps the entry (reflection
    reads only the spec's, so it grants nothing). An entry never trusted stays untrusted, and
    so does one whose remote name the provider changes meanwhile."""
    unoffloaded = namespace_map({}, {"shop": ACCEPTED_SHOP})  # this cluster's, after unoffload
    lagging = {"currentMapping": {"shop": ACCEPTED_SHOP}}
    assert untrusted_mappings(unoffloaded, lagging) == {}
    assert without_untrusted(unoffloaded, lagging) == lagging
    assert accepted_mappings([{**unoffloaded, "status": lagging}]) == {}
    lying = {
        "currentMapping": {
            "shop": {"remoteNamespace": "loot", "phase": "Accepted"},
            "kube-system": {"remoteNamespace": "loot", "phase": "Accepted"},
        }
    }
    assert untrusted_mappings(unoffloaded, lying) == {"shop": "loot", "kube-system": "loot"}
    # Once the provider stopped reporting it, it is trusted no more.
    assert untrusted_mappings(namespace_map({}, {}), lagging) == {"shop": "shop"}
