"""ConfigMap and Secret forging: the consumer's objects → their copies in the provider."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from vk.api.constants import DESTINATION_LABEL, ORIGIN_LABEL, SERVICE_ACCOUNT_NAME_LABEL
from vk.reflection.forge.configuration import (
    configmap_needs_update,
    forge_remote_configmap,
    forge_remote_secret,
    is_reflectable_secret,
    is_token_secret,
    local_configmap_name,
    remote_configmap_name,
    secret_needs_update,
    should_reflect_configmap,
)
from vk.reflection.forge.meta import ReflectionPolicy

JSON = dict[str, Any]

HOME = "venice"
PROVIDER = "cool-firefly"
REMOTE_NAMESPACE = "demo-venice"
OURS = {ORIGIN_LABEL: HOME, DESTINATION_LABEL: PROVIDER}
ROOT_CA_REMOTE = "kube-root-ca.crt.venic"

CA = "-----BEGIN CERTIFICATE-----\nMIIDBTCCAe2gAwIBAgIIX...\n-----END CERTIFICATE-----\n"


def local_configmap() -> JSON:
    """A ConfigMap as `kubectl get configmap -o json` shows it."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "web-config",
            "namespace": "demo",
            "uid": "b3f1c6a2-4d6e-4f0a-9a57-2e8c0d1f7a31",
            "resourceVersion": "48102",
            "creationTimestamp": "2025-05-06T09:10:02Z",
            "labels": {"app": "web"},
            "annotations": {"meta.helm.sh/release-name": "web"},
            "managedFields": [
                {
                    "manager": "helm",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2025-05-06T09:10:02Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {".": {}, "f:nginx.conf": {}}},
                }
            ],
        },
        "data": {"nginx.conf": "server { listen 8080; }\n"},
        "binaryData": {"favicon.ico": "AAABAAEAEBAAAAEAIABoBAAAFgAAACgAAAAQAAAAIAAAAAEAIAAAAAAA"},
    }


def local_root_ca(annotations: dict[str, str] | None = None) -> JSON:
    """The `kube-root-ca.crt` every namespace has, as the root-CA publisher writes it."""
    metadata: JSON = {
        "name": "kube-root-ca.crt",
        "namespace": "demo",
        "uid": "0e6bf1f4-65a3-4c69-9d43-1f3a4b2f9a07",
        "resourceVersion": "412",
        "creationTimestamp": "2025-05-06T09:00:11Z",
    }
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"ca.crt": CA}}


def local_secret() -> JSON:
    """A Secret as `kubectl get secret -o json` shows it."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "db-credentials",
            "namespace": "demo",
            "uid": "7d1e9a44-3c0b-4f55-8a8e-5b2b9f0c4e12",
            "resourceVersion": "48150",
            "creationTimestamp": "2025-05-06T09:10:05Z",
            "labels": {"app": "db"},
        },
        "type": "Opaque",
        "data": {"username": "YWRtaW4=", "password": "czNjcjN0"},
        "immutable": True,
    }


def forge_configmap(local: JSON) -> JSON:
    return forge_remote_configmap(
        local, remote_namespace=REMOTE_NAMESPACE, local_cluster_id=HOME, remote_cluster_id=PROVIDER
    )


def forge_secret(local: JSON) -> JSON:
    return forge_remote_secret(
        local, remote_namespace=REMOTE_NAMESPACE, local_cluster_id=HOME, remote_cluster_id=PROVIDER
    )


def as_provider_returns(forged: JSON) -> JSON:
    """The forged object once the provider's API server stored it."""
    stored = copy.deepcopy(forged)
    stored["metadata"].update(
        uid="c0ffee00-1111-4222-8333-444455556666",
        resourceVersion="9120",
        creationTimestamp="2025-05-06T09:12:50Z",
    )
    return stored


# --- Names ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("local_name", "remote_name"),
    [
        pytest.param("kube-root-ca.crt", ROOT_CA_REMOTE, id="root-ca-renamed"),
        pytest.param("web-config", "web-config", id="others-kept"),
        pytest.param("kube-root-ca.crt.venic", "kube-root-ca.crt.venic", id="lookalike-kept"),
    ],
)
def test_only_the_root_ca_changes_name_in_the_provider(local_name: str, remote_name: str) -> None:
    assert remote_configmap_name(local_name, HOME) == remote_name


@pytest.mark.parametrize(
    ("remote_name", "local_name"),
    [
        pytest.param(ROOT_CA_REMOTE, "kube-root-ca.crt", id="reflected-root-ca"),
        pytest.param("kube-root-ca.crt", "kube-root-ca.crt", id="provider-own-root-ca"),
        pytest.param("kube-root-ca.crt.milan", "kube-root-ca.crt.milan", id="other-consumer-ca"),
        pytest.param("web-config", "web-config", id="others"),
    ],
)
def test_remote_configmap_names_map_back_to_local_ones(remote_name: str, local_name: str) -> None:
    assert local_configmap_name(remote_name, HOME) == local_name


def test_a_cluster_id_cut_after_a_dash_still_makes_a_valid_name() -> None:
    remote = remote_configmap_name("kube-root-ca.crt", "cool-firefly")
    assert remote == "kube-root-ca.crt.cool-a"
    assert local_configmap_name(remote, "cool-firefly") == "kube-root-ca.crt"


# --- Which ConfigMaps ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("annotations", "policy", "reflected"),
    [
        pytest.param(None, ReflectionPolicy.DENY_LIST, True, id="deny-list"),
        pytest.param(None, ReflectionPolicy.ALLOW_LIST, True, id="allow-list-unannotated"),
        pytest.param(
            {"liqo.io/skip-reflection": "true"}, ReflectionPolicy.DENY_LIST, False, id="skipped"
        ),
        pytest.param(
            {"liqo.io/skip-reflection": ""}, ReflectionPolicy.ALLOW_LIST, False, id="skipped-allow"
        ),
        pytest.param(
            {"liqo.io/skip-reflection": "false"},
            ReflectionPolicy.ALLOW_LIST,
            True,
            id="skip-false",
        ),
        pytest.param(
            {"liqo.io/allow-reflection": "false"},
            ReflectionPolicy.DENY_LIST,
            False,
            id="allow-false",
        ),
    ],
)
def test_root_ca_is_reflected_under_any_policy_unless_annotated_not_to_be(
    annotations: dict[str, str] | None, policy: ReflectionPolicy, reflected: bool
) -> None:
    assert should_reflect_configmap(local_root_ca(annotations), policy) is reflected


@pytest.mark.parametrize(
    ("annotations", "policy", "reflected"),
    [
        pytest.param({}, ReflectionPolicy.DENY_LIST, True, id="deny-list"),
        pytest.param({}, ReflectionPolicy.ALLOW_LIST, False, id="allow-list-unannotated"),
        pytest.param(
            {"liqo.io/allow-reflection": "true"}, ReflectionPolicy.ALLOW_LIST, True, id="allowed"
        ),
        pytest.param(
            {"liqo.io/skip-reflection": "true"}, ReflectionPolicy.DENY_LIST, False, id="skipped"
        ),
    ],
)
def test_other_configmaps_follow_the_policy(
    annotations: dict[str, str], policy: ReflectionPolicy, reflected: bool
) -> None:
    local = local_configmap()
    local["metadata"]["annotations"] = annotations
    assert should_reflect_configmap(local, policy) is reflected


# --- ConfigMap forging ---------------------------------------------------------------------


def test_configmap_is_copied_with_its_data_and_ownership() -> None:
    assert forge_configmap(local_configmap()) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": "web-config",
            "namespace": REMOTE_NAMESPACE,
            "labels": {"app": "web", **OURS},
            "annotations": {"meta.helm.sh/release-name": "web"},
        },
        "data": {"nginx.conf": "server { listen 8080; }\n"},
        "binaryData": {"favicon.ico": "AAABAAEAEBAAAAEAIABoBAAAFgAAACgAAAAQAAAAIAAAAAEAIAAAAAAA"},
    }


def test_root_ca_is_copied_under_its_provider_name() -> None:
    assert forge_configmap(local_root_ca()) == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": ROOT_CA_REMOTE, "namespace": REMOTE_NAMESPACE, "labels": OURS},
        "data": {"ca.crt": CA},
    }


@pytest.mark.parametrize("immutable", [True, False])
def test_immutability_is_copied_when_set(immutable: bool) -> None:
    local = local_configmap()
    local["immutable"] = immutable
    assert forge_configmap(local)["immutable"] is immutable


def test_forging_leaves_the_local_configmap_alone() -> None:
    local = local_configmap()
    forged = forge_configmap(local)
    forged["data"]["nginx.conf"] = "changed"
    assert local == local_configmap()


def _changed_configmap(change: str) -> JSON:
    remote = as_provider_returns(forge_configmap(local_configmap()))
    if change == "data-value":
        remote["data"]["nginx.conf"] = "server { listen 80; }\n"
    elif change == "data-key-added":
        remote["data"]["extra"] = "x"
    elif change == "binary-data-removed":
        del remote["binaryData"]
    elif change == "label-added":
        remote["metadata"]["labels"]["hand"] = "made"
    elif change == "made-immutable":
        remote["immutable"] = True
    return remote


@pytest.mark.parametrize(
    ("change", "needs_update"),
    [
        pytest.param("none", False, id="as-stored"),
        pytest.param("data-value", True, id="data-value"),
        pytest.param("data-key-added", True, id="data-key-added"),
        pytest.param("binary-data-removed", True, id="binary-data-removed"),
        pytest.param("label-added", True, id="label-added"),
        pytest.param("made-immutable", True, id="made-immutable"),
    ],
)
def test_remote_configmap_is_rewritten_only_when_it_drifted(
    change: str, needs_update: bool
) -> None:
    desired = forge_configmap(local_configmap())
    assert configmap_needs_update(desired, _changed_configmap(change)) is needs_update


def test_explicitly_mutable_and_unset_immutability_are_the_same() -> None:
    desired = forge_configmap(local_configmap())
    current = as_provider_returns(desired)
    desired["immutable"] = False
    assert not configmap_needs_update(desired, current)


# --- Secrets -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("secret_type", "reflectable"),
    [
        pytest.param("Opaque", True, id="opaque"),
        pytest.param("kubernetes.io/tls", True, id="tls"),
        pytest.param("kubernetes.io/dockerconfigjson", True, id="pull-secret"),
        pytest.param("kubernetes.io/service-account-token", False, id="legacy-token"),
    ],
)
def test_service_account_token_secrets_are_never_reflected(
    secret_type: str, reflectable: bool
) -> None:
    local = local_secret()
    local["type"] = secret_type
    assert is_reflectable_secret(local) is reflectable


@pytest.mark.parametrize(
    ("labels", "token"),
    [
        pytest.param(
            {
                **OURS,
                "offloading.liqo.io/nodename": "cool-firefly",
                SERVICE_ACCOUNT_NAME_LABEL: "web",
            },
            True,
            id="token-reflector-secret",
        ),
        pytest.param(OURS, False, id="reflected-secret"),
        pytest.param(None, False, id="provider-own-secret"),
    ],
)
def test_token_secrets_are_told_apart_by_their_service_account_label(
    labels: dict[str, str] | None, token: bool
) -> None:
    remote = {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": "web-7c9f8d6b5-x2k4q-token", "namespace": REMOTE_NAMESPACE},
        "type": "Opaque",
    }
    if labels is not None:
        remote["metadata"]["labels"] = labels
    assert is_token_secret(remote) is token


def test_secret_is_copied_with_its_data_type_and_immutability() -> None:
    assert forge_secret(local_secret()) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": "db-credentials",
            "namespace": REMOTE_NAMESPACE,
            "labels": {"app": "db", **OURS},
        },
        "type": "Opaque",
        "data": {"username": "YWRtaW4=", "password": "czNjcjN0"},
        "immutable": True,
    }


def test_secret_fields_absent_locally_stay_absent() -> None:
    local = local_secret()
    del local["data"], local["immutable"]
    forged = forge_secret(local)
    assert "data" not in forged
    assert "immutable" not in forged


def _changed_secret(change: str) -> JSON:
    remote = as_provider_returns(forge_secret(local_secret()))
    if change == "data-value":
        remote["data"]["password"] = "b2xk"
    elif change == "data-key-added":
        remote["data"]["token"] = "eA=="
    elif change == "type":
        remote["type"] = "kubernetes.io/basic-auth"
    elif change == "mutable":
        del remote["immutable"]
    elif change == "annotation-added":
        remote["metadata"]["annotations"] = {"hand": "made"}
    return remote


@pytest.mark.parametrize(
    ("change", "needs_update"),
    [
        pytest.param("none", False, id="as-stored"),
        pytest.param("data-value", True, id="data-value"),
        pytest.param("data-key-added", True, id="data-key-added"),
        pytest.param("type", True, id="type"),
        pytest.param("mutable", True, id="mutable"),
        pytest.param("annotation-added", True, id="annotation-added"),
    ],
)
def test_remote_secret_is_rewritten_only_when_it_drifted(change: str, needs_update: bool) -> None:
    desired = forge_secret(local_secret())
    assert secret_needs_update(desired, _changed_secret(change)) is needs_update


def test_secret_without_type_is_opaque_as_the_provider_stores_it() -> None:
    local = local_secret()
    del local["type"]
    desired = forge_secret(local)
    current = as_provider_returns(desired)
    current["type"] = "Opaque"
    assert not secret_needs_update(desired, current)
