"""The provider's Tenant of a consumer: the model and its CRD, the Tenant `vkctl peer` makes,
the rights of the consumer's control-plane identity (before and during the teardown), what the
teardown picks, and how `vkctl unpeer` takes its forms and says what it could not do."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from tests.plain_manifests import (
    CONTROLLER_MANAGER_ACCOUNT,
    covers,
    granted_rules,
    plain_manifests,
)
from vk.api.authentication import Tenant, TenantCondition
from vk.api.crds import crd_manifests
from vk.cli import peer
from vk.cli.peer import describe_remaining, left_on_provider
from vk.cli.peering import another_cluster, forge_tenant, forge_tenant_namespace
from vk.cli.vkctl import vkctl
from vk.controllers.provider_namespacemaps import (
    MANAGED_BY_ANNOTATION,
    TWINS_BY_TENANT,
    tenant_of_twin,
    twin_namespaces_of,
)
from vk.controllers.tenants import forge_control_plane_rbac, tenant_consumer
from vk.kube.informer import Store
from vk.kube.kubeconfig import ClusterConnection

TENANT_CRD = next(m for m in crd_manifests() if m["spec"]["names"]["kind"] == "Tenant")


def rules_on_tenants(role: dict[str, Any]) -> list[dict[str, Any]]:
    return [r for r in role["rules"] if "tenants" in r["resources"]]


def test_the_tenant_crd_is_liqos_namespaced_kind_with_its_short_name_and_columns() -> None:
    spec = TENANT_CRD["spec"]
    assert TENANT_CRD["metadata"]["name"] == "tenants.authentication.liqo.io"
    assert spec["scope"] == "Namespaced"
    assert spec["names"]["shortNames"] == ["tn"]
    columns = spec["versions"][0]["additionalPrinterColumns"]
    assert [(c["name"], c["jsonPath"]) for c in columns] == [
        ("Condition", ".spec.tenantCondition"),
        ("Age", ".metadata.creationTimestamp"),
    ]
    fields = spec["versions"][0]["schema"]["openAPIV3Schema"]["properties"]
    condition = fields["spec"]["properties"]["tenantCondition"]
    assert condition["enum"] == ["Active", "Cordoned", "Drained"]
    assert condition["default"] == "Active"
    assert fields["spec"]["properties"]["clusterID"]["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "ClusterID is immutable"}
    ]
    assert fields["status"]["properties"]["tenantNamespace"]["type"] == "string"


def test_a_liqo_tenant_parses_and_keeps_the_fields_vk_does_not_use() -> None:
    tenant = Tenant.model_validate(
        {
            "apiVersion": "authentication.liqo.io/v1beta1",
            "kind": "Tenant",
            "metadata": {"name": "venice", "namespace": "liqo-tenant-venice"},
            "spec": {"clusterID": "venice", "tenantCondition": "Cordoned", "publicKey": "AAEC"},
            "status": {"tenantNamespace": "liqo-tenant-venice"},
        }
    )
    assert tenant.spec.tenant_condition is TenantCondition.CORDONED
    assert tenant.manifest()["spec"]["publicKey"] == "AAEC"
    assert Tenant.model_validate({"spec": {"clusterID": "venice"}}).spec.tenant_condition == (
        TenantCondition.ACTIVE
    )


def test_vkctl_peer_makes_the_tenant_named_after_the_consumer_in_its_tenant_namespace() -> None:
    tenant = forge_tenant("venice")
    assert tenant["metadata"] == {
        "name": "venice",
        "namespace": "liqo-tenant-venice",
        "labels": {"liqo.io/remote-cluster-id": "venice"},
    }
    # The condition is the CRD's default: peering again leaves a cordoned Tenant cordoned.
    assert tenant["spec"] == {"clusterID": "venice"}
    assert tenant_consumer(tenant) == "venice"
    Tenant.model_validate(tenant)


@pytest.mark.parametrize(
    ("namespace", "spec"),
    [
        ("default", {"clusterID": "venice"}),
        ("liqo-tenant-naples", {"clusterID": "venice"}),
        ("liqo-tenant-venice", {}),
    ],
)
def test_a_tenant_outside_its_consumers_tenant_namespace_stands_for_nothing(
    namespace: str, spec: dict[str, str]
) -> None:
    tenant = {"metadata": {"name": "venice", "namespace": namespace}, "spec": spec}
    assert tenant_consumer(tenant) is None


def test_the_control_plane_identity_may_read_and_delete_its_own_tenant_and_nothing_more() -> None:
    role, binding = forge_control_plane_rbac("venice")
    assert role["metadata"] == {"name": "vk-control-plane", "namespace": "liqo-tenant-venice"}
    assert rules_on_tenants(role) == [
        {
            "apiGroups": ["authentication.liqo.io"],
            "resources": ["tenants"],
            "resourceNames": ["venice"],
            "verbs": ["get", "delete"],
        }
    ]
    assert {r for rule in role["rules"] for r in rule["resources"]} == {
        "resourceslices",
        "namespacemaps",
        "resourceslices/status",
        "namespacemaps/status",
        "tenants",
    }
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "vk-control-plane:venice"}
    ]
    assert binding["roleRef"]["name"] == role["metadata"]["name"]


def test_once_its_tenant_is_being_deleted_the_identity_may_only_watch_it_go() -> None:
    role, binding = forge_control_plane_rbac("venice", revoked=True)
    assert role["rules"] == [
        {
            "apiGroups": ["authentication.liqo.io"],
            "resources": ["tenants"],
            "resourceNames": ["venice"],
            "verbs": ["get"],
        }
    ]
    assert binding == forge_control_plane_rbac("venice")[1]


def test_the_controller_manager_holds_every_right_of_the_control_plane_role_it_makes() -> None:
    """The API server refuses a Role granting what its maker does not hold (no escalate)."""
    for revoked in (False, True):
        role, _ = forge_control_plane_rbac("venice", revoked=revoked)
        held = granted_rules(
            plain_manifests(), CONTROLLER_MANAGER_ACCOUNT, role["metadata"]["namespace"]
        )
        for rule in role["rules"]:
            assert covers(held, rule), rule


def test_the_teardown_takes_the_twin_namespaces_of_this_tenant_only() -> None:
    def namespace(name: str, managed_by: str | None) -> dict[str, Any]:
        annotations = {MANAGED_BY_ANNOTATION: managed_by} if managed_by else {}
        return {"metadata": {"name": name, "annotations": annotations}}

    namespaces = Store({TWINS_BY_TENANT: tenant_of_twin})
    for each in (
        namespace("web-venice", "liqo-tenant-venice/florence"),
        namespace("shop-venice", "liqo-tenant-venice/florence"),
        namespace("shop-venice2", "liqo-tenant-venice2/florence"),
        namespace("liqo-tenant-venice", None),
        namespace("default", None),
    ):
        namespaces.upsert(each)
    assert [
        n["metadata"]["name"] for n in twin_namespaces_of(namespaces, "liqo-tenant-venice")
    ] == [
        "shop-venice",
        "web-venice",
    ]


def test_the_controller_manager_may_hold_tenants_and_report_on_them() -> None:
    rules = granted_rules(plain_manifests(), CONTROLLER_MANAGER_ACCOUNT)

    def verbs(resource: str) -> set[str]:
        return {
            verb
            for rule in rules
            if "authentication.liqo.io" in rule["apiGroups"] and resource in rule["resources"]
            for verb in rule["verbs"]
        }

    assert {"get", "list", "watch", "update", "patch", "delete"} <= verbs("tenants")
    assert {"update", "patch"} <= verbs("tenants/finalizers")
    assert {"update", "patch"} <= verbs("tenants/status")


def test_a_provider_out_of_reach_is_told_with_what_it_keeps_and_how_to_remove_it() -> None:
    message = left_on_provider("venice", "florence", "florence was not reached (timeout)")
    assert message.startswith(
        "the peering with florence is removed here, but florence was not reached (timeout)"
    )
    assert "the Tenant liqo-tenant-venice/venice" in message
    assert "`kubectl delete tenants.authentication.liqo.io -n liqo-tenant-venice venice`" in message


def test_what_unpeering_waits_for_is_said_object_by_object() -> None:
    virtual_node = {
        "metadata": {"name": "florence"},
        "status": {"conditions": [{"type": "Node", "status": "Draining"}]},
    }
    resource_slice = {
        "metadata": {"name": "florence", "finalizers": ["crdreplicator.liqo.io/finalizer"]}
    }
    assert describe_remaining(
        [("VirtualNode", virtual_node), ("ResourceSlice", resource_slice)]
    ) == (
        "VirtualNode florence: Node Draining; "
        "ResourceSlice florence: held by crdreplicator.liqo.io/finalizer"
    )


def run(*args: str) -> Any:
    return CliRunner().invoke(vkctl, list(args))


def kubeconfig(path: Path, *servers: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "current-context": servers[0],
                "contexts": [{"name": s, "context": {"cluster": s, "user": "u"}} for s in servers],
                "clusters": [
                    {"name": s, "cluster": {"server": f"https://{s}:6443"}} for s in servers
                ],
                "users": [{"name": "u", "user": {"token": "t"}}],
            }
        )
    )
    return path


def test_unpeer_wants_the_providers_kubeconfig_or_out_of_band() -> None:
    result = run("unpeer")
    assert result.exit_code == 2
    assert "--remote-kubeconfig" in result.output
    assert "out-of-band CLUSTER_ID" in result.output


def test_unpeer_out_of_band_takes_a_cluster_id_and_no_remote_kubeconfig(tmp_path: Path) -> None:
    result = run("unpeer", "out-of-band", "Florence!")
    assert result.exit_code == 2
    assert "is not a DNS-1123 label" in result.output
    provider = kubeconfig(tmp_path / "provider", "florence")
    result = run("unpeer", "--remote-kubeconfig", str(provider), "out-of-band", "florence")
    assert result.exit_code == 2
    assert "drop --remote-kubeconfig" in result.output


def test_unpeer_out_of_band_talks_to_the_cluster_given_before_or_after_it(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    seen: list[tuple[str, str, float]] = []

    async def fake_unpeer(
        consumer: ClusterConnection, provider_id: str, within: float, _: object, **__: object
    ) -> None:
        seen.append((consumer.server, provider_id, within))

    monkeypatch.setattr(peer, "unpeer_out_of_band", fake_unpeer)
    consumer = kubeconfig(tmp_path / "consumer", "venice", "venice-admin")
    monkeypatch.setenv("KUBECONFIG", str(consumer))
    for args in (
        ("unpeer", "out-of-band", "florence"),
        ("unpeer", "out-of-band", "florence", "--context", "venice-admin", "--timeout", "1m"),
        ("unpeer", "--context", "venice-admin", "--timeout", "30s", "out-of-band", "florence"),
    ):
        result = run(*args)
        assert result.exit_code == 0, result.output
        assert result.stdout.strip() == "unpeered"
    assert seen == [
        ("https://venice:6443", "florence", 300.0),
        ("https://venice-admin:6443", "florence", 60.0),
        ("https://venice-admin:6443", "florence", 30.0),
    ]


def test_a_tenant_namespace_names_the_one_cluster_it_was_kept_for() -> None:
    kept = forge_tenant_namespace("naples", "uid-of-naples")
    assert another_cluster(kept, "naples", "uid-of-naples") is None
    impostor = another_cluster(kept, "naples", "uid-of-florence")
    assert impostor is not None
    assert "it is another cluster" in impostor
    assert "uid-of-naples" in impostor
    assert "uid-of-florence" in impostor
    # Peered before vk pinned peers: taken as the cluster reached now (and pinned then).
    del kept["metadata"]["annotations"]
    assert another_cluster(kept, "naples", "uid-of-florence") is None
