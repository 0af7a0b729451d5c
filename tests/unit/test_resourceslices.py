"""The ResourceSlice flow's pure parts: what the provider grants and signs, what the consumer
builds from the answer, and how objects are replicated."""

from __future__ import annotations

import datetime

import pytest

from vk.api.constants import resource_slice_user, tenant_group
from vk.api.offloading import LimitsEnforcement
from vk.cli.peering import forge_resource_slice
from vk.controllers.consumer_resourceslices import (
    forge_virtual_node,
    is_reserved_label,
    labels_set_by_others,
    slice_status_problems,
    trusted_node_labels,
    wants_virtual_node,
)
from vk.controllers.provider_resourceslices import (
    DEFAULT_RESOURCES,
    certificate_usable,
    forge_quota,
    granted_resources,
    set_condition,
    slice_request_verdict,
)
from vk.controllers.replication import (
    REPLICATED_KINDS,
    forge_twin,
    replacement_patch,
    without_empty_maps,
)
from vk.kube.pki import forge_client_csr, load_private_key, new_private_key
from vk.playground.pki import build_ca, issue

NOW = datetime.datetime(2026, 11, 22, 8, 0, tzinfo=datetime.UTC)


def test_slice_users_are_stable_unique_per_consumer_and_name_the_quota() -> None:
    user = resource_slice_user("venice", "mypool")
    assert user == resource_slice_user("venice", "mypool")
    assert user.startswith("mypool-")
    assert len(user) == len("mypool-") + 12
    assert user != resource_slice_user("florence", "mypool")


@pytest.mark.parametrize(
    ("requested", "granted"),
    [
        (None, DEFAULT_RESOURCES),
        ({}, DEFAULT_RESOURCES),
        # What is asked for, and what a node needs that was not asked for; no more.
        ({"cpu": "2"}, {"cpu": "2", "memory": "8Gi", "pods": "110"}),
        (
            {"cpu": "2", "memory": "2Gi", "pods": "10", "nvidia.com/gpu": "1"},
            {"cpu": "2", "memory": "2Gi", "pods": "10", "nvidia.com/gpu": "1"},
        ),
        ({"ephemeral-storage": "1Gi"}, {**DEFAULT_RESOURCES, "ephemeral-storage": "1Gi"}),
        ({"cpu": 8}, {"cpu": "8", "memory": "8Gi", "pods": "110"}),
        # More than any provider has: granted all the same (no capacity check, as Liqo).
        ({"cpu": "100000"}, {"cpu": "100000", "memory": "8Gi", "pods": "110"}),
    ],
)
def test_the_default_class_grants_what_is_asked_and_what_a_node_needs(
    requested: dict[str, str] | None, granted: dict[str, str]
) -> None:
    assert granted_resources(requested, DEFAULT_RESOURCES) == granted


@pytest.mark.parametrize(
    ("requested", "message"),
    [
        ({"cpu": "lots"}, "spec.resources.cpu: 'lots' is not a Kubernetes quantity"),
        ({"memory": "-1Gi"}, "spec.resources.memory: -1Gi is negative"),
    ],
)
def test_bad_requests_are_refused_naming_the_field(requested: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=r"^spec\.resources\.") as error:
        granted_resources(requested, DEFAULT_RESOURCES)
    assert str(error.value).startswith(message)


def test_a_slice_may_only_ask_for_its_own_identity() -> None:
    key = new_private_key()
    user, group = resource_slice_user("venice", "mypool"), tenant_group("venice")
    assert slice_request_verdict(forge_client_csr(key, user, (group,)), "venice", "mypool") is None
    for common_name, groups in [
        (user, ("system:masters",)),
        (user, ()),
        ("admin", (group,)),
        (resource_slice_user("venice", "other"), (group,)),
    ]:
        verdict = slice_request_verdict(
            forge_client_csr(key, common_name, groups), "venice", "mypool"
        )
        assert verdict is not None
        assert f"may only be CN={user} O={group}" in verdict
    assert "not a valid certificate request" in (
        slice_request_verdict(b"junk", "venice", "mypool") or ""
    )


def test_a_condition_keeps_its_transition_time_until_its_status_changes() -> None:
    first = set_condition(None, "Resources", "Accepted", "R", "m", NOW)
    later = NOW + datetime.timedelta(hours=1)
    again = set_condition(first, "Resources", "Accepted", "R", "m2", later)
    assert again[0]["lastTransitionTime"] == "2026-11-22T08:00:00Z"
    assert again[0]["message"] == "m2"
    flipped = set_condition(again, "Resources", "Denied", "D", "m3", later)
    assert flipped[0]["lastTransitionTime"] == "2026-11-22T09:00:00Z"
    both = set_condition(flipped, "Authentication", "Accepted", "A", "m", later)
    assert [c["type"] for c in both] == ["Resources", "Authentication"]


def test_the_quota_is_named_after_the_identity_and_owned_by_the_slice() -> None:
    resource_slice = {
        "metadata": {"name": "mypool", "namespace": "liqo-tenant-venice", "uid": "u1"},
        "spec": {"consumerClusterID": "venice"},
    }
    quota = forge_quota(resource_slice, "mypool-abc", {"cpu": "4"}, LimitsEnforcement.HARD)
    assert quota["metadata"]["name"] == "mypool-abc"
    assert quota["metadata"]["ownerReferences"][0]["uid"] == "u1"
    assert quota["spec"] == {
        "user": "mypool-abc",
        "limitsEnforcement": "Hard",
        "resources": {"cpu": "4"},
    }


def test_a_certificate_is_reused_only_for_its_own_key_and_until_renewal_is_due() -> None:
    ca, ca_key = build_ca("naples-ca", NOW)
    issued = issue(ca, ca_key, "mypool-abc", NOW, client=True)  # valid 365 days
    key = load_private_key(issued.key_pem)
    own_csr = forge_client_csr(key, "mypool-abc", ())
    other_csr = forge_client_csr(new_private_key(), "mypool-abc", ())
    assert certificate_usable(issued.cert_pem, own_csr, NOW)
    assert not certificate_usable(issued.cert_pem, other_csr, NOW)
    assert not certificate_usable(issued.cert_pem, own_csr, NOW + datetime.timedelta(days=300))


def test_the_virtual_node_of_a_slice_carries_what_the_provider_granted() -> None:
    resource_slice = {
        "metadata": {
            "name": "mypool",
            "namespace": "liqo-tenant-naples",
            "uid": "u1",
            "annotations": {"liqo.io/create-virtual-node": "true"},
        },
        "status": {
            "resources": {"cpu": "4", "memory": "8Gi"},
            "nodeLabels": {"topology.liqo.io/region": "south"},
        },
    }
    assert wants_virtual_node(resource_slice)
    virtual_node = forge_virtual_node(
        resource_slice, "naples", {"topology.liqo.io/region": "south"}
    )
    assert virtual_node["metadata"]["name"] == "mypool"
    assert virtual_node["metadata"]["ownerReferences"][0]["controller"] is True
    assert virtual_node["spec"] == {
        "clusterID": "naples",
        "createNode": True,
        "kubeconfigSecretRef": {"name": "kubeconfig-resourceslice-mypool"},
        "labels": {"liqo.io/remote-cluster-id": "naples", "topology.liqo.io/region": "south"},
        "resourceQuota": {"hard": {"cpu": "4", "memory": "8Gi"}},
    }


@pytest.mark.parametrize(("value", "wanted"), [("true", True), ("false", False), ("", False)])
def test_the_annotation_asks_for_a_virtual_node(value: str, wanted: bool) -> None:
    assert (
        wants_virtual_node({"metadata": {"annotations": {"liqo.io/create-virtual-node": value}}})
        is wanted
    )


def test_the_provider_copy_is_our_spec_marked_as_a_replica() -> None:
    ours = forge_resource_slice("mypool", "naples")
    ours["metadata"]["uid"] = "u1"
    ours["status"] = {"resources": {"cpu": "1"}}
    twin = forge_twin(ours, REPLICATED_KINDS[0], "venice")
    assert twin["metadata"] == {
        "name": "mypool",
        "namespace": "liqo-tenant-venice",
        "labels": {
            "liqo.io/remote-cluster-id": "venice",
            "liqo.io/replication": "false",
            "liqo.io/replicated": "true",
        },
    }
    assert twin["spec"] == ours["spec"]
    assert "status" not in twin  # the provider's own


def test_status_copied_back_drops_what_the_provider_dropped() -> None:
    old = {"currentMapping": {"a": {"phase": "Accepted"}, "b": {"phase": "Accepted"}}, "x": 1}
    new = {"currentMapping": {"a": {"phase": "Terminating"}}}
    assert replacement_patch(old, new) == {
        "x": None,
        "currentMapping": {"b": None, "a": {"phase": "Terminating"}},
    }


def test_a_namespace_map_emptied_is_copied_without_its_empty_mapping() -> None:
    """Server-side apply would read `desiredMapping: {}` as null, which the schema refuses;
    left out, the provider's last mapping is removed all the same."""
    emptied = {
        "metadata": {"name": "naples", "labels": {"liqo.io/remoteID": "naples"}},
        "spec": {"desiredMapping": {}},
    }
    twin = without_empty_maps(forge_twin(emptied, REPLICATED_KINDS[1], "venice"))
    assert "spec" not in twin
    assert twin["metadata"]["name"] == "naples"


@pytest.mark.parametrize(
    ("key", "reserved"),
    [
        ("topology.liqo.io/region", False),
        ("topology.kubernetes.io/zone", False),
        ("team", False),
        ("example.com/pool", False),
        ("liqo.io/type", True),
        ("liqo.io/remote-cluster-id", True),
        ("kubernetes.io/hostname", True),
        ("node-role.kubernetes.io/control-plane", True),
        ("node.kubernetes.io/exclude-from-external-load-balancers", True),
        ("node-restriction.kubernetes.io/trusted", True),
        ("k8s.io/anything", True),
        ("kubelet.kubernetes.io/x", True),
        # Liqo's subdomains are vk's too (the kubelet's storage label, Liqo's taint domain),
        # but the topology one, where providers' cluster labels go.
        ("storage.liqo.io/available", True),
        ("offloading.liqo.io/destination", True),
        ("virtual-node.liqo.io/not-allowed", True),
        ("topology.liqo.io/zone", False),
        ("type", True),  # the kubelet's own, unprefixed
    ],
)
def test_a_provider_cannot_set_what_vk_or_kubernetes_keeps_for_nodes(
    key: str, reserved: bool
) -> None:
    assert is_reserved_label(key) is reserved


def test_the_providers_labels_never_override_the_consumers_administrator() -> None:
    virtual_node = {
        "metadata": {
            "managedFields": [
                {"manager": "vk", "fieldsV1": {"f:spec": {"f:labels": {"f:region": {}}}}},
                {
                    "manager": "kubectl-edit",
                    "fieldsV1": {"f:spec": {"f:labels": {"f:tier": {}, ".": {}}}},
                },
            ]
        }
    }
    admins = labels_set_by_others(virtual_node)
    assert admins == {"tier"}
    status = {"nodeLabels": {"region": "south", "tier": "gold", "kubernetes.io/hostname": "x"}}
    assert trusted_node_labels(status, admins) == (
        {"region": "south"},
        [
            "reserved for vk and Kubernetes: kubernetes.io/hostname",
            "set here by this cluster's administrator: tier",
        ],
    )
    assert labels_set_by_others(None) == set()


def test_a_providers_node_labels_that_are_no_labels_are_left_out_and_said() -> None:
    """One such label on the VirtualNode would make every write of its Node fail."""
    status = {
        "nodeLabels": {
            "region": "south",
            "bad key": "x",
            "zone": "not a value",
            "team": "v" * 64,
            f"{'d' * 300}/x": "1",
        }
    }
    labels, left_out = trusted_node_labels(status, set())
    assert labels == {"region": "south"}
    assert len(left_out) == 1
    assert left_out[0].startswith("not labels: ")
    for key in ("bad key", "zone", "team", "ddd"):
        assert key in left_out[0]
    assert len(left_out[0]) < 400  # a 300-character key is not said whole


def test_a_provider_puts_at_most_64_labels_on_its_virtual_node() -> None:
    status = {"nodeLabels": {f"label-{i:03}": "x" for i in range(100)}}
    labels, left_out = trusted_node_labels(status, set())
    assert sorted(labels) == [f"label-{i:03}" for i in range(64)]
    assert left_out == [
        "beyond the 64 a virtual node takes: "
        + ", ".join(f"'label-{i:03}'" for i in range(64, 72))
        + ", …"
    ]


@pytest.mark.parametrize(
    ("status", "problem"),
    [
        ({"authParams": {"apiServer": "http://naples:6443"}}, "is not an https URL"),
        ({"authParams": {"apiServer": "https://"}}, "is not an https URL"),
        ({"resources": {"cpu": "1e30000000"}}, "resources.cpu: '1e30000000' is out of range"),
        ({"resources": {"pods": "-5"}}, "resources.pods is negative"),
        # What the API server refuses on a Node, and so on every write of its status.
        ({"resources": {"bad name": "1"}}, "'bad name' is not a resource name"),
        ({"resources": {"pods": "110.5"}}, "resources.pods: '110.5' is not a whole number"),
        # What overflows the scheduler's int64 score (CPU counted in millicores).
        ({"resources": {"cpu": "1e15"}}, "resources.cpu: '1e15' is more than the scheduler"),
        (
            {"resources": {f"example.com/r{i}": "1" for i in range(65)}},
            "resources offers 65, more than 64",
        ),
    ],
)
def test_a_slice_status_the_consumer_cannot_use_says_why(status: dict, problem: str) -> None:
    problems = slice_status_problems(status)
    assert len(problems) == 1
    assert problem in problems[0]


def test_a_sound_slice_status_has_no_problem() -> None:
    status = {
        "authParams": {"apiServer": "https://naples.example:6443"},
        "resources": {"cpu": "4", "memory": "8Gi", "pods": "110"},
    }
    assert slice_status_problems(status) == []
