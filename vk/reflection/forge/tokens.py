"""The ServiceAccount tokens of an offloaded pod, as the provider sees them (Liqo's TokenAPI
mode, `forge/secrets.go`): requested from the consumer's TokenRequest API for the pod's own
ServiceAccount, bound to the local pod, and written into one provider Secret `<pod>-token`
that the remote pod mounts in place of its projected tokens, so it talks to its home API
server as itself.

Pure: the requests, the Secret, the lifetimes and when to refresh; the reflector does the I/O.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import datetime
import hashlib
import json
from collections.abc import Mapping
from typing import Any

from vk.api.constants import SERVICE_ACCOUNT_NAME_LABEL
from vk.api.timestamps import kube_time
from vk.reflection.forge.meta import metadata_differs, ownership_labels

JSON = dict[str, Any]

# Liqo's annotations on the token Secret: which local pod the tokens are bound to, and when the
# first of them expires.
POD_NAME_ANNOTATION = "offloading.liqo.io/service-account-for-pod-name"
POD_UID_ANNOTATION = "offloading.liqo.io/service-account-for-pod-uid"
EXPIRATION_ANNOTATION = "offloading.liqo.io/service-account-expiration"

# What the API server defaults a projected token's expirationSeconds to.
DEFAULT_EXPIRATION_SECONDS = 3600
# Tokens are replaced once this share of their lifetime has passed (the kubelet's and Liqo's).
REFRESH_AT_LIFETIME_FRACTION = 0.8


@dataclasses.dataclass(frozen=True)
class TokenSource:
    """A `serviceAccountToken` source of a projected volume: what to request, where it goes."""

    volume: str
    path: str
    audience: str | None
    expiration_seconds: int

    @property
    def key(self) -> str:
        return token_key(self.volume, self.path)


@dataclasses.dataclass(frozen=True)
class Token:
    """A token and its lifetime, in UTC."""

    value: str
    issued_at: datetime.datetime
    expires_at: datetime.datetime


# --- Names ---------------------------------------------------------------------------------


_TOKEN_SECRET_SUFFIX = "-token"


def token_secret_name(pod_name: str) -> str:
    """The provider Secret holding the tokens of the offloaded pod `pod_name`."""
    return f"{pod_name}{_TOKEN_SECRET_SUFFIX}"


def token_secret_pod(secret_name: str) -> str | None:
    """The pod whose token Secret a Secret of that name would be (`token_secret_name`'s
    inverse), whoever wrote it; None for a name no token Secret has."""
    pod = secret_name.removesuffix(_TOKEN_SECRET_SUFFIX)
    return pod if pod and pod != secret_name else None


def token_key(volume_name: str, path: str) -> str:
    """The key of one token in that Secret (Liqo's `ServiceAccountTokenKey`): the volume's name
    and the first six hex digits of the SHA-256 of the path, since a volume may project several
    tokens and a path may hold slashes, which a key may not."""
    return f"{volume_name}-{hashlib.sha256(path.encode()).hexdigest()[:6]}"


def service_account_name(local_pod: Mapping[str, Any]) -> str:
    """The ServiceAccount the local pod runs as (the API server sets `default` when absent)."""
    spec = local_pod.get("spec") or {}
    return str(spec.get("serviceAccountName") or spec.get("serviceAccount") or "default")


# --- What to request -------------------------------------------------------------------------


def token_sources(local_pod: Mapping[str, Any]) -> list[TokenSource]:
    """Every `serviceAccountToken` source of every projected volume of `local_pod`, in order:
    not only kube-api-access, since a pod may project tokens for other audiences (Vault's)."""
    sources = []
    for volume in (local_pod.get("spec") or {}).get("volumes") or []:
        for source in (volume.get("projected") or {}).get("sources") or []:
            token = source.get("serviceAccountToken")
            if token is None:
                continue
            expiration = token.get("expirationSeconds")
            sources.append(
                TokenSource(
                    volume=volume["name"],
                    path=token["path"],
                    audience=token.get("audience") or None,
                    expiration_seconds=(
                        DEFAULT_EXPIRATION_SECONDS if expiration is None else int(expiration)
                    ),
                )
            )
    return sources


def forge_token_request(source: TokenSource, local_pod: Mapping[str, Any]) -> JSON:
    """The TokenRequest to post to the local pod's ServiceAccount (`.../serviceaccounts/<sa>/
    token`) for `source`: bound to the local pod, so the token dies with it. No audience means
    the API server's own."""
    metadata = local_pod.get("metadata") or {}
    return {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": [] if source.audience is None else [source.audience],
            "expirationSeconds": source.expiration_seconds,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": metadata["name"],
                "uid": metadata["uid"],
            },
        },
    }


# --- Tokens and their lifetime ---------------------------------------------------------------


def token_from_jwt(value: str) -> Token:
    """`value` with the lifetime its own `iat` and `exp` claims say. The signature is not
    checked: the token is one we requested, and only its lifetime is wanted from it.

    Raises ValueError if `value` is not a JWT carrying both claims as numbers."""
    parts = value.split(".")
    if len(parts) != 3:
        raise ValueError("not a JWT: it has no three dot-separated parts")
    payload = parts[1]
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    except (binascii.Error, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"not a JWT: its payload does not decode: {error}") from None
    if not isinstance(claims, dict):
        raise ValueError("not a JWT: its payload is not a JSON object")
    return Token(
        value=value,
        issued_at=_claimed_time(claims, "iat"),
        expires_at=_claimed_time(claims, "exp"),
    )


def _claimed_time(claims: Mapping[str, Any], claim: str) -> datetime.datetime:
    seconds = claims.get(claim)
    if isinstance(seconds, bool) or not isinstance(seconds, int | float):
        raise ValueError(f"JWT without a numeric {claim!r} claim")
    try:
        return datetime.datetime.fromtimestamp(seconds, datetime.UTC)
    except (OverflowError, OSError, ValueError) as error:
        raise ValueError(f"JWT {claim!r} claim out of range: {seconds}") from error


def token_from_request_status(
    value: str, expiration_timestamp: str, now: datetime.datetime
) -> Token:
    """A token from the TokenRequest answer (`status.token`, `status.expirationTimestamp`),
    issued `now`. Raises ValueError if the timestamp is not RFC 3339."""
    expires_at = datetime.datetime.fromisoformat(expiration_timestamp.replace("Z", "+00:00"))
    if expires_at.tzinfo is None:
        raise ValueError(f"expiration timestamp without a time zone: {expiration_timestamp!r}")
    return Token(
        value=value,
        issued_at=now.astimezone(datetime.UTC),
        expires_at=expires_at.astimezone(datetime.UTC),
    )


def refresh_at(token: Token) -> datetime.datetime:
    """When to replace `token`: once 80 % of its lifetime has passed, so the pod always holds
    one with a fifth of its life left, whatever the API server cut its expiration to."""
    lifetime = token.expires_at - token.issued_at
    return token.issued_at + lifetime * REFRESH_AT_LIFETIME_FRACTION


def needs_refresh(token: Token, now: datetime.datetime) -> bool:
    return now >= refresh_at(token)


# --- The provider Secret ---------------------------------------------------------------------


def forge_token_secret(
    local_pod: Mapping[str, Any],
    tokens: Mapping[str, Token],
    *,
    remote_namespace: str,
    local_cluster_id: str,
    remote_cluster_id: str,
    node_name: str,
) -> JSON:
    """The provider Secret holding `tokens` (by `token_key`) for `local_pod`: Liqo's, so that
    each virtual kubelet lists its own by node name and finds, after a restart, which pod the
    tokens are bound to and when the first expires (no expiration without tokens)."""
    metadata = local_pod.get("metadata") or {}
    annotations = {
        POD_NAME_ANNOTATION: metadata["name"],
        POD_UID_ANNOTATION: metadata["uid"],
    }
    if tokens:
        earliest = min(token.expires_at for token in tokens.values())
        annotations[EXPIRATION_ANNOTATION] = kube_time(earliest)
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {
            "name": token_secret_name(metadata["name"]),
            "namespace": remote_namespace,
            "labels": {
                **ownership_labels(local_cluster_id, remote_cluster_id, node_name),
                SERVICE_ACCOUNT_NAME_LABEL: service_account_name(local_pod),
            },
            "annotations": annotations,
        },
        "data": {
            key: base64.b64encode(token.value.encode()).decode() for key, token in tokens.items()
        },
    }


def tokens_from_secret(
    remote_secret: Mapping[str, Any], local_pod: Mapping[str, Any], now: datetime.datetime
) -> dict[str, Token]:
    """The tokens a restarted virtual kubelet finds in the provider Secret of `local_pod`, by
    key: only those of the pod's own token sources, and none if the Secret is bound to another
    pod of the same name (a recreated one), whose tokens the API server no longer accepts.
    A value that is not a JWT is skipped: it is requested again.

    The provider holds the Secret and may have written any of it, so each token's lifetime is
    read as the shortest of what it claims and what vk asks for (`recovered_lifetime`): a
    provider's edit can make vk refresh a token early, never later than it would have."""
    pod_uid = (local_pod.get("metadata") or {}).get("uid")
    annotations = (remote_secret.get("metadata") or {}).get("annotations") or {}
    if not pod_uid or annotations.get(POD_UID_ANNOTATION) != pod_uid:
        return {}
    annotated = _annotated_expiration(annotations.get(EXPIRATION_ANNOTATION))
    requested = {source.key: source.expiration_seconds for source in token_sources(local_pod)}
    tokens = {}
    for key, encoded in (remote_secret.get("data") or {}).items():
        if key not in requested:
            continue
        try:
            token = token_from_jwt(base64.b64decode(encoded, validate=True).decode())
        except ValueError:  # binascii.Error and UnicodeDecodeError are ValueErrors too
            continue
        tokens[key] = recovered_lifetime(token, annotated, requested[key], now)
    return tokens


def recovered_lifetime(
    token: Token,
    annotated: datetime.datetime | None,
    requested_seconds: int,
    now: datetime.datetime,
) -> Token:
    """`token` (its lifetime from its JWT's `iat` and `exp`), as long as a Secret the provider
    holds lets vk believe: issued no later than `now`, and ending at the first of its `exp`,
    the Secret's expiration annotation (the TokenRequest's answer, which the JWT may
    overstate: an API server extending kube-api-access tokens writes a year in `exp` and
    answers an hour) and its issue plus the lifetime vk requests for it. So a restart neither
    rewrites a Secret whose annotation is right nor, whatever the provider wrote in the JWT
    or the annotation, refreshes a token later than one requested lifetime from now; with
    several tokens, each is taken to end with the first (refreshed early, at worst once).
    Never ending before its issue: at worst it is refreshed at once."""
    issued = min(token.issued_at, now)
    expires = min(token.expires_at, issued + datetime.timedelta(seconds=requested_seconds))
    if annotated is not None:
        expires = min(expires, annotated)
    return Token(token.value, issued, max(expires, issued))


def _annotated_expiration(value: object) -> datetime.datetime | None:
    """The Secret's expiration annotation as a time in UTC; None if absent or not RFC 3339
    with a time zone."""
    if not isinstance(value, str):
        return None
    try:
        moment = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return moment.astimezone(datetime.UTC) if moment.tzinfo is not None else None


def secret_needs_update(desired: Mapping[str, Any], current: Mapping[str, Any]) -> bool:
    """Whether the provider Secret must be rewritten: labels, annotations or tokens differ."""
    return metadata_differs(desired, current) or (desired.get("data") or {}) != (
        current.get("data") or {}
    )
