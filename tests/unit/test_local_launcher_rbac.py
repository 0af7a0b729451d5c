"""Minting virtual kubelets' tokens is the local launcher's need, not vk's: the chart with its
defaults (deploy/vk.yaml) grants it to the controller manager nowhere; its `localProcesses`
values add it (tests/integration/test_chart.py renders those)."""

from __future__ import annotations

from tests.plain_manifests import CONTROLLER_MANAGER_ACCOUNT, covers, granted_rules, plain_manifests
from vk.api.constants import VK_NAMESPACE

MINT_TOKENS = {"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"]}


def test_the_chart_does_not_let_the_controller_manager_mint_tokens() -> None:
    documents = plain_manifests()
    for namespace in (None, VK_NAMESPACE, "kube-node-lease", "liqo-tenant-naples"):
        held = granted_rules(documents, CONTROLLER_MANAGER_ACCOUNT, namespace)
        assert held, namespace
        assert not covers(held, MINT_TOKENS), namespace
