"""A provider's say over its consumers: which Quotas are cordoned."""

from __future__ import annotations

from typing import Any

import pytest

from vk.api.authentication import TenantCondition
from vk.api.offloading import LimitsEnforcement
from vk.controllers.provider_resourceslices import forge_quota, is_cordoned, tenant_condition


def resource_slice(**annotations: str) -> dict[str, Any]:
    return {
        "metadata": {"name": "mypool", "namespace": "liqo-tenant-venice", "uid": "u1",
                     "annotations": annotations},
        "spec": {"consumerClusterID": "venice"},
    }  # fmt: skip


def tenant(condition: str | None) -> dict[str, Any]:
    return {
        "spec": {"clusterID": "venice", **({"tenantCondition": condition} if condition else {})}
    }


@pytest.mark.parametrize(
    ("annotations", "condition", "cordoned"),
    [
        ({}, None, False),
        ({}, "Active", False),
        ({}, "Cordoned", True),
        ({}, "Drained", True),
        ({"liqo.io/cordon": "true"}, "Active", True),
        ({"liqo.io/cordon": ""}, None, True),  # any value but false, as Liqo reads it
        ({"liqo.io/cordon": "false"}, None, False),
        ({"liqo.io/cordon": "0"}, None, False),
        ({"liqo.io/cordon": "false"}, "Drained", True),
    ],
)
def test_a_quota_is_cordoned_by_its_slice_or_its_tenant(
    annotations: dict[str, str], condition: str | None, cordoned: bool
) -> None:
    assert is_cordoned(resource_slice(**annotations), tenant(condition)) is cordoned


def test_no_tenant_or_an_unknown_condition_is_active() -> None:
    assert tenant_condition(None) is TenantCondition.ACTIVE
    assert tenant_condition(tenant("Frozen")) is TenantCondition.ACTIVE
    assert is_cordoned(resource_slice(), None) is False


def test_the_quota_says_whether_it_is_cordoned() -> None:
    quota = forge_quota(
        resource_slice(), "mypool-abc", {"cpu": "4"}, LimitsEnforcement.NONE, cordoned=True
    )
    assert quota["spec"]["cordoned"] is True
    plain = forge_quota(resource_slice(), "mypool-abc", {"cpu": "4"}, LimitsEnforcement.NONE)
    assert "cordoned" not in plain["spec"]  # applied server-side: an admin's own cordon stays
