"""vk's chart as tests read it without helm: `deploy/vk.yaml`, the chart rendered with its default
values (tests/integration/test_chart.py checks that it is current, and renders other values),
and what its RBAC grants a ServiceAccount, as the API server reckons it."""

from __future__ import annotations

import copy
import functools
from pathlib import Path
from typing import Any

import yaml

from vk.api.constants import CONTROLLER_MANAGER, VK_NAMESPACE, WEBHOOK

JSON = dict[str, Any]
PLAIN_MANIFESTS = Path(__file__).resolve().parents[1] / "deploy" / "vk.yaml"
# (namespace, name) of the ServiceAccounts the chart binds.
CONTROLLER_MANAGER_ACCOUNT = (VK_NAMESPACE, CONTROLLER_MANAGER)
WEBHOOK_ACCOUNT = (VK_NAMESPACE, WEBHOOK)


@functools.cache
def _documents() -> tuple[JSON, ...]:
    return tuple(d for d in yaml.safe_load_all(PLAIN_MANIFESTS.read_text()) if d)


def plain_manifests() -> list[JSON]:
    """Every object of deploy/vk.yaml (a copy: the caller may change it)."""
    return copy.deepcopy(list(_documents()))


def find(documents: list[JSON], kind: str, name: str, namespace: str | None = None) -> JSON:
    """The one object of `kind` and `name` (in `namespace`, if given) among `documents`."""
    matches = [
        d
        for d in documents
        if d["kind"] == kind
        and d["metadata"]["name"] == name
        and namespace in (None, d["metadata"].get("namespace"))
    ]
    assert len(matches) == 1, f"{kind} {name}: {len(matches)} in the chart"
    return matches[0]


def installed(kind: str, name: str, namespace: str | None = None) -> JSON:
    """One object of deploy/vk.yaml."""
    return find(plain_manifests(), kind, name, namespace)


def granted_rules(
    documents: list[JSON], account: tuple[str, str], namespace: str | None = None
) -> list[JSON]:
    """The rules `documents` grant the ServiceAccount `account` cluster-wide (and, with a
    `namespace`, those its RoleBindings there add): what it may do, or grant, there."""
    subject = {"kind": "ServiceAccount", "namespace": account[0], "name": account[1]}

    def binds(binding: JSON) -> bool:
        return any(
            {k: s.get(k) for k in ("kind", "namespace", "name")} == subject
            for s in binding.get("subjects") or []
        )

    def role_rules(kind: str, name: str, role_namespace: str | None) -> list[JSON]:
        rules: list[JSON] = find(documents, kind, name, role_namespace).get("rules") or []
        return rules

    rules = [
        rule
        for binding in documents
        if binding["kind"] == "ClusterRoleBinding" and binds(binding)
        for rule in role_rules("ClusterRole", binding["roleRef"]["name"], None)
    ]
    if namespace is not None:
        rules += [
            rule
            for binding in documents
            if binding["kind"] == "RoleBinding"
            and binding["metadata"]["namespace"] == namespace
            and binds(binding)
            for rule in role_rules(
                binding["roleRef"]["kind"],
                binding["roleRef"]["name"],
                namespace if binding["roleRef"]["kind"] == "Role" else None,
            )
        ]
    return rules


def covers(held: list[JSON], rule: JSON) -> bool:
    """Whether `held` grants everything `rule` does (RBAC's escalation check, by rule)."""
    names = rule.get("resourceNames") or [None]
    for group in rule.get("apiGroups", []):
        for resource in rule.get("resources", []):
            for verb in rule["verbs"]:
                for name in names:
                    if not any(
                        group in h.get("apiGroups", [])
                        and resource in h.get("resources", [])
                        and verb in h["verbs"]
                        and (not h.get("resourceNames") or name in h["resourceNames"])
                        for h in held
                    ):
                        return False
    return True


def may_bind(held: list[JSON], role_ref: JSON) -> bool:
    """Whether `held` has `bind` on the role `role_ref` names (so that a binding of it is
    allowed whatever the role grants)."""
    plural = {"ClusterRole": "clusterroles", "Role": "roles"}[role_ref["kind"]]
    bind = {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": [plural],
        "verbs": ["bind"],
        "resourceNames": [role_ref["name"]],
    }
    return covers(held, bind)
