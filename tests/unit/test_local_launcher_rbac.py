"""Minting virtual kubelets' tokens is the playground's local launcher's need, not vk's: the
installation (the chart's rules) leaves it out, and the playground grants it to the same
ServiceAccount on the side."""

from __future__ import annotations

from vk.controllers.installation import controller_manager_user, forge_installation
from vk.controllers.virtualkubelet_local import forge_local_launcher_rbac
from vk.kube.client import JSON


def grants(rules: list[JSON], group: str, resource: str, verb: str) -> bool:
    return any(
        group in rule.get("apiGroups", [])
        and resource in rule.get("resources", [])
        and verb in rule["verbs"]
        for rule in rules
    )


def test_the_installation_does_not_let_the_controller_manager_mint_tokens() -> None:
    for document in forge_installation("venice", {}):
        if document["kind"] in ("ClusterRole", "Role") and "controller-manager" in str(
            document["metadata"]["name"]
        ):
            assert not grants(document["rules"], "", "serviceaccounts/token", "create")


def test_the_local_launcher_binds_token_minting_to_the_controller_manager() -> None:
    role, binding = forge_local_launcher_rbac()

    assert grants(role["rules"], "", "serviceaccounts/token", "create")
    assert binding["roleRef"]["name"] == role["metadata"]["name"]
    [subject] = binding["subjects"]
    user = f"system:serviceaccount:{subject['namespace']}:{subject['name']}"
    assert user == controller_manager_user()
