"""The FlowSchemas that put peers' requests in a priority level of their own: who they name
(whatever a Tenant or a VirtualNode says, only vk's own identities), and what the chart gives
the controller manager to write them (these two FlowSchemas' rules, nothing more)."""

from __future__ import annotations

from typing import Any

from tests.plain_manifests import CONTROLLER_MANAGER_ACCOUNT, granted_rules, installed
from tests.plain_manifests import plain_manifests as chart_documents
from vk.api.constants import (
    TENANT_GROUP_PREFIX,
    control_plane_user,
    tenant_group,
    tenant_namespace,
)
from vk.controllers.peer_flowschemas import (
    PEERS_PRIORITY_LEVEL,
    TENANTS_FLOW_SCHEMA,
    VIRTUAL_KUBELETS_FLOW_SCHEMA,
    forge_flow_schema_rules,
    tenant_subjects,
    virtual_kubelet_subjects,
)
from vk.webhooks.tenancy import CONTROL_PLANE_USER_PREFIX

JSON = dict[str, Any]


def tenant(cluster_id: str, namespace: str | None = None) -> JSON:
    return {
        "metadata": {"name": cluster_id, "namespace": namespace or tenant_namespace(cluster_id)},
        "spec": {"clusterID": cluster_id},
    }


def virtual_node(name: str, namespace: str) -> JSON:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {}}


def test_each_consumer_is_its_control_plane_user_and_its_slices_group_once() -> None:
    subjects = tenant_subjects([tenant("venice"), tenant("florence"), tenant("venice")])
    assert subjects == [
        {"kind": "User", "user": {"name": control_plane_user("florence")}},
        {"kind": "Group", "group": {"name": tenant_group("florence")}},
        {"kind": "User", "user": {"name": control_plane_user("venice")}},
        {"kind": "Group", "group": {"name": tenant_group("venice")}},
    ]


def test_a_tenant_names_no_identity_but_vks_own_for_its_consumer() -> None:
    """A Tenant outside its consumer's tenant namespace stands for no one; one whose cluster ID
    reads as another identity still names only vk's prefixed user and group."""
    misplaced = tenant("venice", namespace="default")
    aiming = [tenant(name) for name in ("system:masters", "*", "system:serviceaccounts")]
    assert tenant_subjects([misplaced, {"metadata": {"namespace": "x"}, "spec": {}}]) == []
    names = [
        (subject.get("user") or subject["group"])["name"] for subject in tenant_subjects(aiming)
    ]
    assert len(names) == 6
    assert all(
        name.startswith(CONTROL_PLANE_USER_PREFIX) or name.startswith(TENANT_GROUP_PREFIX)
        for name in names
    ), names


def test_each_virtual_node_is_its_virtual_kubelets_service_account_in_its_namespace() -> None:
    nodes = [
        virtual_node("naples", "liqo-tenant-naples"),
        virtual_node("naples-2", "liqo-tenant-naples"),
        virtual_node("florence", "liqo-tenant-florence"),
        virtual_node("naples", "liqo-tenant-naples"),
    ]
    assert [s["serviceAccount"] for s in virtual_kubelet_subjects(nodes)] == [
        {"namespace": "liqo-tenant-florence", "name": "vk-florence"},
        {"namespace": "liqo-tenant-naples", "name": "vk-naples"},
        {"namespace": "liqo-tenant-naples", "name": "vk-naples-2"},
    ]
    assert {s["kind"] for s in virtual_kubelet_subjects(nodes)} == {"ServiceAccount"}


def test_no_subject_no_rule_and_a_rule_takes_every_request_of_its_subjects() -> None:
    assert forge_flow_schema_rules([]) == []
    subjects = tenant_subjects([tenant("venice")])
    (rule,) = forge_flow_schema_rules(subjects)
    assert rule["subjects"] == subjects
    assert rule["resourceRules"] == [
        {
            "verbs": ["*"],
            "apiGroups": ["*"],
            "resources": ["*"],
            "clusterScope": True,
            "namespaces": ["*"],
        }
    ]
    assert rule["nonResourceRules"] == [{"verbs": ["*"], "nonResourceURLs": ["*"]}]


def test_the_chart_makes_the_level_and_both_flowschemas_without_rules() -> None:
    """Without rules in the templates, `helm upgrade` leaves the controller manager's alone."""
    level = installed("PriorityLevelConfiguration", PEERS_PRIORITY_LEVEL)
    assert level["spec"]["type"] == "Limited"
    assert level["spec"]["limited"]["limitResponse"]["type"] == "Queue"
    for name in (TENANTS_FLOW_SCHEMA, VIRTUAL_KUBELETS_FLOW_SCHEMA):
        spec = installed("FlowSchema", name)["spec"]
        assert "rules" not in spec, name
        assert spec["priorityLevelConfiguration"] == {"name": PEERS_PRIORITY_LEVEL}
        assert spec["distinguisherMethod"] == {"type": "ByUser"}
        # Before the schemas every other ServiceAccount and user falls in, after the cluster's
        # own components' (kube-system-service-accounts is 900).
        assert 900 < spec["matchingPrecedence"] < 9000, name


def test_the_controller_manager_may_patch_these_two_flowschemas_and_create_none() -> None:
    rules = [
        rule
        for rule in granted_rules(chart_documents(), CONTROLLER_MANAGER_ACCOUNT)
        if "flowcontrol.apiserver.k8s.io" in rule["apiGroups"] or "*" in rule["apiGroups"]
    ]
    assert rules == [
        {
            "apiGroups": ["flowcontrol.apiserver.k8s.io"],
            "resources": ["flowschemas"],
            "verbs": ["get", "list", "watch", "patch"],
            "resourceNames": [TENANTS_FLOW_SCHEMA, VIRTUAL_KUBELETS_FLOW_SCHEMA],
        }
    ]
