"""Token forging: the ServiceAccount tokens of an offloaded pod, their lifetime, and the
provider Secret that carries them."""

from __future__ import annotations

import base64
import copy
import datetime
import json
from typing import Any

import pytest

from vk.api.constants import DESTINATION_LABEL, NODENAME_LABEL, ORIGIN_LABEL
from vk.reflection.forge.tokens import (
    EXPIRATION_ANNOTATION,
    Token,
    TokenSource,
    forge_token_request,
    forge_token_secret,
    needs_refresh,
    refresh_at,
    secret_needs_update,
    service_account_name,
    token_from_jwt,
    token_from_request_status,
    token_key,
    token_secret_name,
    token_secret_pod,
    token_sources,
    tokens_from_secret,
)

JSON = dict[str, Any]

HOME = "venice"
PROVIDER = "cool-firefly"
NODE = "cool-firefly"
REMOTE_NAMESPACE = "demo-venice"
POD_UID = "5f0c7a3e-9a51-4a43-8f0e-3b1f1b7d2c11"

UTC = datetime.UTC
ISSUED = datetime.datetime(2025, 5, 6, 9, 12, 44, tzinfo=UTC)
# When the virtual kubelet restarts and reads the tokens back from the provider's Secret.
RESTARTED = ISSUED + datetime.timedelta(minutes=10)


def b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def jwt(claims: Any, header: JSON | None = None) -> str:
    """A JWT as the API server issues one: header.payload.signature, base64url, unpadded."""
    header = header or {"alg": "RS256", "kid": "Xk3Jf0l2"}
    return ".".join(
        [
            b64url(json.dumps(header).encode()),
            b64url(json.dumps(claims).encode()),
            b64url(b"\x8a\x01\xfe signature bytes \xff"),
        ]
    )


def service_account_jwt(issued: datetime.datetime, lifetime: datetime.timedelta) -> str:
    return jwt(
        {
            "aud": ["https://kubernetes.default.svc.cluster.local"],
            "exp": int((issued + lifetime).timestamp()),
            "iat": int(issued.timestamp()),
            "iss": "https://kubernetes.default.svc.cluster.local",
            "kubernetes.io": {
                "namespace": "demo",
                "pod": {"name": "web-7c9f8d6b5-x2k4q", "uid": POD_UID},
                "serviceaccount": {"name": "web", "uid": "0d1e2f3a"},
            },
            "nbf": int(issued.timestamp()),
            "sub": "system:serviceaccount:demo:web",
        }
    )


def local_pod() -> JSON:
    """An offloaded pod with the kube-api-access volume and a Vault token of its own."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "web-7c9f8d6b5-x2k4q", "namespace": "demo", "uid": POD_UID},
        "spec": {
            "serviceAccountName": "web",
            "serviceAccount": "web",
            "containers": [{"name": "web", "image": "nginx:1.27"}],
            "volumes": [
                {
                    "name": "kube-api-access-7xk2p",
                    "projected": {
                        "defaultMode": 420,
                        "sources": [
                            {"serviceAccountToken": {"expirationSeconds": 3607, "path": "token"}},
                            {
                                "configMap": {
                                    "name": "kube-root-ca.crt",
                                    "items": [{"key": "ca.crt", "path": "ca.crt"}],
                                }
                            },
                        ],
                    },
                },
                {"name": "data", "emptyDir": {}},
                {
                    "name": "vault",
                    "projected": {
                        "sources": [
                            {"serviceAccountToken": {"audience": "vault", "path": "vault/token"}}
                        ]
                    },
                },
            ],
        },
    }


API_ACCESS_KEY = "kube-api-access-7xk2p-3c469e"
VAULT_KEY = "vault-927385"


# --- Names ---------------------------------------------------------------------------------


def test_token_secret_is_named_after_the_pod() -> None:
    assert token_secret_name("web-7c9f8d6b5-x2k4q") == "web-7c9f8d6b5-x2k4q-token"
    assert token_secret_pod("web-7c9f8d6b5-x2k4q-token") == "web-7c9f8d6b5-x2k4q"


@pytest.mark.parametrize("name", ["web", "token", "-token", "web-tokens", "web-token-2", ""])
def test_a_secret_named_as_no_token_secret_is_of_no_pod(name: str) -> None:
    assert token_secret_pod(name) is None


@pytest.mark.parametrize(
    ("volume", "path", "key"),
    [
        ("kube-api-access-7xk2p", "token", "kube-api-access-7xk2p-3c469e"),
        ("vault", "vault/token", "vault-927385"),
        # Two tokens of one volume get two keys.
        ("vault", "token", "vault-3c469e"),
        ("vault", "token-2", "vault-0f6bff"),
    ],
)
def test_token_key_is_the_volume_and_six_hex_digits_of_the_path_hash(
    volume: str, path: str, key: str
) -> None:
    assert token_key(volume, path) == key


@pytest.mark.parametrize(
    ("spec", "name"),
    [
        ({"serviceAccountName": "web", "serviceAccount": "web"}, "web"),
        ({"serviceAccount": "legacy"}, "legacy"),
        ({}, "default"),
    ],
)
def test_service_account_is_the_pods_or_default(spec: JSON, name: str) -> None:
    assert service_account_name({"spec": spec}) == name


# --- What to request -------------------------------------------------------------------------


def test_every_projected_token_source_is_requested_with_its_audience_and_expiration() -> None:
    assert token_sources(local_pod()) == [
        TokenSource(
            volume="kube-api-access-7xk2p", path="token", audience=None, expiration_seconds=3607
        ),
        # No expirationSeconds: the API server's default, one hour.
        TokenSource(volume="vault", path="vault/token", audience="vault", expiration_seconds=3600),
    ]


@pytest.mark.parametrize(
    "volumes",
    [
        None,
        [],
        [{"name": "data", "emptyDir": {}}],
        [{"name": "ca", "projected": {"sources": [{"configMap": {"name": "kube-root-ca.crt"}}]}}],
    ],
)
def test_pod_without_projected_tokens_needs_none(volumes: list[JSON] | None) -> None:
    pod = local_pod()
    pod["spec"]["volumes"] = volumes

    assert token_sources(pod) == []


def test_token_source_key_is_its_secret_key() -> None:
    assert [source.key for source in token_sources(local_pod())] == [API_ACCESS_KEY, VAULT_KEY]


def test_token_request_is_bound_to_the_local_pod() -> None:
    api_access, vault = token_sources(local_pod())

    assert forge_token_request(api_access, local_pod()) == {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            # None: the API server's own audience.
            "audiences": [],
            "expirationSeconds": 3607,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": "web-7c9f8d6b5-x2k4q",
                "uid": POD_UID,
            },
        },
    }
    assert forge_token_request(vault, local_pod())["spec"]["audiences"] == ["vault"]
    assert forge_token_request(vault, local_pod())["spec"]["expirationSeconds"] == 3600


# --- Tokens and their lifetime ---------------------------------------------------------------


def test_token_lifetime_is_read_from_its_jwt_claims() -> None:
    value = service_account_jwt(ISSUED, datetime.timedelta(hours=1))

    assert token_from_jwt(value) == Token(
        value=value,
        issued_at=ISSUED,
        expires_at=datetime.datetime(2025, 5, 6, 10, 12, 44, tzinfo=UTC),
    )


@pytest.mark.parametrize(
    "value",
    [
        "",
        "opaque-token",
        "header.payload",
        "a.b.c.d",
        "eyJhbGciOiJSUzI1NiJ9.!!!.c2ln",
        jwt({"iat": 1746522764, "exp": 1746526364}).replace(".", "..", 1),
        ".".join([b64url(b"{}"), b64url(b"not json"), "c2ln"]),
        ".".join([b64url(b"{}"), b64url(b"\xff\xfe"), "c2ln"]),
        jwt([1746522764, 1746526364]),
        jwt({"exp": 1746526364}),
        jwt({"iat": 1746522764}),
        jwt({"iat": "1746522764", "exp": 1746526364}),
        jwt({"iat": True, "exp": 1746526364}),
        jwt({"iat": 1746522764, "exp": 10**30}),
    ],
)
def test_anything_but_a_jwt_with_both_times_is_refused(value: str) -> None:
    with pytest.raises(ValueError, match="JWT"):
        token_from_jwt(value)


def test_token_from_the_token_request_answer_is_issued_now() -> None:
    assert token_from_request_status("opaque", "2025-05-06T10:12:44Z", ISSUED) == Token(
        value="opaque",
        issued_at=ISSUED,
        expires_at=datetime.datetime(2025, 5, 6, 10, 12, 44, tzinfo=UTC),
    )


def test_token_request_expiration_in_another_zone_is_the_same_instant() -> None:
    token = token_from_request_status("opaque", "2025-05-06T12:12:44.5+02:00", ISSUED)

    assert token.expires_at == datetime.datetime(2025, 5, 6, 10, 12, 44, 500000, tzinfo=UTC)


@pytest.mark.parametrize("stamp", ["", "tomorrow", "2025-05-06T10:12:44"])
def test_token_request_expiration_must_be_rfc3339(stamp: str) -> None:
    with pytest.raises(ValueError, match=r"isoformat|time zone"):
        token_from_request_status("opaque", stamp, ISSUED)


def test_token_refresh_before_expiry_with_a_short_lived_token() -> None:
    """The acceptance test: a real-shaped token of ten minutes is replaced from its eighth
    minute (80 % of its life), never before, and well before it expires."""
    value = service_account_jwt(ISSUED, datetime.timedelta(minutes=10))
    token = token_from_jwt(value)
    second = datetime.timedelta(seconds=1)

    assert token.expires_at - token.issued_at == datetime.timedelta(minutes=10)
    assert refresh_at(token) == ISSUED + datetime.timedelta(minutes=8)
    assert not needs_refresh(token, ISSUED)
    assert not needs_refresh(token, ISSUED + datetime.timedelta(minutes=8) - second)
    assert needs_refresh(token, ISSUED + datetime.timedelta(minutes=8))
    assert needs_refresh(token, token.expires_at - second)
    assert refresh_at(token) < token.expires_at


@pytest.mark.parametrize(
    ("lifetime", "refresh_after"),
    [
        (datetime.timedelta(hours=1), datetime.timedelta(minutes=48)),
        (datetime.timedelta(seconds=3607), datetime.timedelta(seconds=2885.6)),
        (datetime.timedelta(days=365), datetime.timedelta(days=292)),
        (datetime.timedelta(minutes=10), datetime.timedelta(minutes=8)),
    ],
)
def test_token_is_refreshed_at_80_percent_of_its_lifetime(
    lifetime: datetime.timedelta, refresh_after: datetime.timedelta
) -> None:
    token = Token(value="t", issued_at=ISSUED, expires_at=ISSUED + lifetime)

    assert refresh_at(token) == ISSUED + refresh_after


def test_an_expired_token_needs_refresh() -> None:
    token = Token(value="t", issued_at=ISSUED, expires_at=ISSUED + datetime.timedelta(hours=1))

    assert needs_refresh(token, ISSUED + datetime.timedelta(hours=2))


# --- The provider Secret ---------------------------------------------------------------------


def tokens() -> dict[str, Token]:
    return {
        API_ACCESS_KEY: token_from_jwt(service_account_jwt(ISSUED, datetime.timedelta(hours=1))),
        VAULT_KEY: token_from_jwt(
            service_account_jwt(
                ISSUED + datetime.timedelta(minutes=5), datetime.timedelta(minutes=20)
            )
        ),
    }


def forge_secret(pod: JSON | None = None, pod_tokens: dict[str, Token] | None = None) -> JSON:
    return forge_token_secret(
        local_pod() if pod is None else pod,
        tokens() if pod_tokens is None else pod_tokens,
        remote_namespace=REMOTE_NAMESPACE,
        local_cluster_id=HOME,
        remote_cluster_id=PROVIDER,
        node_name=NODE,
    )


def b64(value: str) -> str:
    return base64.b64encode(value.encode()).decode()


def test_token_secret_holds_the_tokens_and_says_whose_they_are() -> None:
    pod_tokens = tokens()

    assert forge_secret(pod_tokens=pod_tokens) == {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": "web-7c9f8d6b5-x2k4q-token",
            "namespace": REMOTE_NAMESPACE,
            "labels": {
                ORIGIN_LABEL: HOME,
                DESTINATION_LABEL: PROVIDER,
                NODENAME_LABEL: NODE,
                "offloading.liqo.io/service-account-name": "web",
            },
            "annotations": {
                "offloading.liqo.io/service-account-for-pod-name": "web-7c9f8d6b5-x2k4q",
                "offloading.liqo.io/service-account-for-pod-uid": POD_UID,
                # The Vault token's: it expires first (09:17:44 + 20 min).
                "offloading.liqo.io/service-account-expiration": "2025-05-06T09:37:44Z",
            },
        },
        "data": {
            API_ACCESS_KEY: b64(pod_tokens[API_ACCESS_KEY].value),
            VAULT_KEY: b64(pod_tokens[VAULT_KEY].value),
        },
    }
    json.dumps(forge_secret())  # plain JSON, ready for the API


def test_token_secret_expiration_is_utc_whatever_the_tokens_zone() -> None:
    paris = datetime.timezone(datetime.timedelta(hours=2))
    token = Token(
        value="t",
        issued_at=ISSUED,
        expires_at=datetime.datetime(2025, 5, 6, 12, 12, 44, 900000, tzinfo=paris),
    )

    annotations = forge_secret(pod_tokens={API_ACCESS_KEY: token})["metadata"]["annotations"]

    assert annotations["offloading.liqo.io/service-account-expiration"] == "2025-05-06T10:12:44Z"


def test_token_secret_without_tokens_has_no_expiration() -> None:
    secret = forge_secret(pod_tokens={})

    assert "offloading.liqo.io/service-account-expiration" not in secret["metadata"]["annotations"]
    assert secret["data"] == {}


def stored(secret: JSON) -> JSON:
    """`secret` as the provider's API server returns it."""
    secret = copy.deepcopy(secret)
    secret["metadata"].update(
        uid="b8d3c1f2-3e4a-4c55-9d6e-7f8a9b0c1d2e",
        resourceVersion="902",
        creationTimestamp="2025-05-06T09:12:46Z",
    )
    return secret


def test_restarted_virtual_kubelet_recovers_the_tokens_from_the_secret() -> None:
    # Each ends by the Secret's one expiration, the first of them: the Vault token's.
    pod_tokens = tokens()
    vault_expires = pod_tokens[VAULT_KEY].expires_at
    api_access = pod_tokens[API_ACCESS_KEY]

    assert tokens_from_secret(stored(forge_secret()), local_pod(), RESTARTED) == {
        VAULT_KEY: pod_tokens[VAULT_KEY],
        API_ACCESS_KEY: Token(api_access.value, api_access.issued_at, vault_expires),
    }


def extended_token_secret(annotation: str | None) -> tuple[JSON, JSON]:
    """A pod with the kube-api-access token only, and its Secret as written from the
    TokenRequest's answer of an API server extending that token: an hour in the answer, a
    year in the JWT; its expiration annotation replaced by `annotation` (None: removed)."""
    pod = local_pod()
    pod["spec"]["volumes"] = pod["spec"]["volumes"][:1]
    value = service_account_jwt(ISSUED, datetime.timedelta(days=365))
    token = Token(value, ISSUED, ISSUED + datetime.timedelta(hours=1))
    secret = stored(forge_secret(pod, {API_ACCESS_KEY: token}))
    annotations = secret["metadata"]["annotations"]
    if annotation is None:
        del annotations[EXPIRATION_ANNOTATION]
    elif annotation != "as written":
        annotations[EXPIRATION_ANNOTATION] = annotation
    return pod, secret


def test_a_token_recovered_lives_as_the_token_request_said_not_as_its_jwt() -> None:
    pod, secret = extended_token_secret("as written")

    recovered = tokens_from_secret(secret, pod, RESTARTED)

    assert recovered[API_ACCESS_KEY].expires_at == ISSUED + datetime.timedelta(hours=1)
    assert refresh_at(recovered[API_ACCESS_KEY]) == ISSUED + datetime.timedelta(minutes=48)
    # So the restarted virtual kubelet forges the very Secret it finds: no write.
    assert not secret_needs_update(forge_secret(pod, recovered), secret)


@pytest.mark.parametrize("annotation", [None, "", "next week", "2025-05-06T09:30:00"])
def test_without_a_usable_expiration_annotation_a_token_lives_as_long_as_requested(
    annotation: str | None,
) -> None:
    # Its JWT says a year; the pod's volume asks for 3607 s, which is all vk believes.
    pod, secret = extended_token_secret(annotation)

    recovered = tokens_from_secret(secret, pod, RESTARTED)

    assert recovered[API_ACCESS_KEY].expires_at == ISSUED + datetime.timedelta(seconds=3607)


def test_an_expiration_annotation_after_the_requested_lifetime_does_not_lengthen_it() -> None:
    # A hostile provider's annotation: the token still ends when vk's request said.
    pod, secret = extended_token_secret("2125-01-01T00:00:00Z")

    recovered = tokens_from_secret(secret, pod, RESTARTED)

    assert recovered[API_ACCESS_KEY].expires_at == ISSUED + datetime.timedelta(seconds=3607)


def test_a_token_a_provider_forged_is_refreshed_within_one_requested_lifetime() -> None:
    # The provider holds the Secret: it can write a JWT of its own, issued in ten years and
    # expiring in a hundred, with an annotation to match. Unsigned claims never make vk keep a
    # token longer than it asks for one, counted from now at the latest.
    pod, secret = extended_token_secret(None)
    forged = service_account_jwt(
        RESTARTED + datetime.timedelta(days=3650), datetime.timedelta(days=36500)
    )
    secret["data"][API_ACCESS_KEY] = b64(forged)
    secret["metadata"]["annotations"][EXPIRATION_ANNOTATION] = "2125-01-01T00:00:00Z"

    recovered = tokens_from_secret(secret, pod, RESTARTED)

    assert recovered[API_ACCESS_KEY].value == forged  # the pod runs on with what it has
    assert recovered[API_ACCESS_KEY].issued_at == RESTARTED
    assert refresh_at(recovered[API_ACCESS_KEY]) == RESTARTED + datetime.timedelta(
        seconds=3607 * 0.8
    )


def test_an_expiration_annotation_before_the_tokens_issue_only_refreshes_it_at_once() -> None:
    pod, secret = extended_token_secret("2000-01-01T00:00:00Z")

    recovered = tokens_from_secret(secret, pod, RESTARTED)

    assert recovered[API_ACCESS_KEY].expires_at == ISSUED
    assert needs_refresh(recovered[API_ACCESS_KEY], ISSUED)


@pytest.mark.parametrize("uid", ["9e8d7c6b-another-pod", None])
def test_tokens_of_another_pod_of_the_same_name_are_not_recovered(uid: str | None) -> None:
    secret = stored(forge_secret())
    secret["metadata"]["annotations"]["offloading.liqo.io/service-account-for-pod-uid"] = uid

    assert tokens_from_secret(secret, local_pod(), RESTARTED) == {}


def test_tokens_that_do_not_decode_are_skipped_and_so_requested_again() -> None:
    secret = stored(forge_secret())
    pod_tokens = tokens()
    secret["data"][API_ACCESS_KEY] = "not base64!"
    secret["data"][VAULT_KEY] = b64("opaque-token")

    assert tokens_from_secret(secret, local_pod(), RESTARTED) == {}
    secret["data"][VAULT_KEY] = b64(pod_tokens[VAULT_KEY].value)
    assert tokens_from_secret(secret, local_pod(), RESTARTED) == {VAULT_KEY: pod_tokens[VAULT_KEY]}


def test_keys_no_token_source_of_the_pod_names_are_not_recovered() -> None:
    secret = stored(forge_secret())
    secret["data"]["added-by-hand"] = secret["data"][API_ACCESS_KEY]

    assert set(tokens_from_secret(secret, local_pod(), RESTARTED)) == {API_ACCESS_KEY, VAULT_KEY}


def test_secret_without_data_recovers_nothing() -> None:
    secret = stored(forge_secret())
    del secret["data"]

    assert tokens_from_secret(secret, local_pod(), RESTARTED) == {}


def test_token_secret_is_not_rewritten_when_nothing_changed() -> None:
    assert not secret_needs_update(forge_secret(), stored(forge_secret()))


def refreshed_vault_token(secret: JSON) -> None:
    later = ISSUED + datetime.timedelta(minutes=21)
    secret["data"][VAULT_KEY] = b64(service_account_jwt(later, datetime.timedelta(minutes=20)))


@pytest.mark.parametrize(
    "change",
    [
        refreshed_vault_token,
        lambda s: s["data"].pop(VAULT_KEY),
        lambda s: s["data"].update({"added-by-hand": "eA=="}),
        lambda s: s["metadata"]["labels"].update({"offloading.liqo.io/service-account-name": "x"}),
        lambda s: s["metadata"]["labels"].pop(NODENAME_LABEL),
        lambda s: s["metadata"]["annotations"].update(
            {"offloading.liqo.io/service-account-expiration": "2025-05-06T09:58:44Z"}
        ),
        lambda s: s["metadata"]["annotations"].update(
            {"offloading.liqo.io/service-account-for-pod-uid": "9e8d7c6b-another-pod"}
        ),
    ],
)
def test_token_secret_is_rewritten_when_it_differs(change: Any) -> None:
    current = stored(forge_secret())
    change(current)

    assert secret_needs_update(forge_secret(), current)
