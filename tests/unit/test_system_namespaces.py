"""The namespaces vk never offloads (`system_namespace_problem`): Kubernetes' own, vk's, and its
tenant namespaces. The webhook, the controller and vkctl all ask this one table."""

from __future__ import annotations

import pytest

from vk.api.offloading import system_namespace_problem


@pytest.mark.parametrize(
    ("namespace", "what"),
    [
        ("kube-system", "one of Kubernetes' own namespaces"),
        ("kube-public", "one of Kubernetes' own namespaces"),
        ("kube-node-lease", "one of Kubernetes' own namespaces"),
        ("kube-flannel", "one of Kubernetes' own namespaces"),  # the prefix is Kubernetes'
        ("vk", "vk's own namespace"),
        ("liqo-tenant-naples", "a tenant namespace of vk"),
    ],
)
def test_a_system_namespace_is_never_offloaded_and_the_reason_says_what_it_holds(
    namespace: str, what: str
) -> None:
    problem = system_namespace_problem(namespace)
    assert problem is not None
    assert problem.startswith(f"namespace {namespace} is {what}")
    assert "its Secrets (" in problem
    assert "would be copied to the providers" in problem
    assert problem.endswith("so vk never offloads it")


@pytest.mark.parametrize(
    "namespace",
    ["default", "liqo-demo", "shop", "kubeflow", "my-kube-system", "vk-apps", "tenant-naples"],
)
def test_any_other_namespace_may_be_offloaded(namespace: str) -> None:
    assert system_namespace_problem(namespace) is None


def test_vks_namespace_is_the_one_it_was_told_and_vk_too() -> None:
    assert "vk's own namespace" in (system_namespace_problem("vk-system", "vk-system") or "")
    assert system_namespace_problem("vk", "vk-system") is not None
    assert system_namespace_problem("vk-system") is None
