"""The token reflector writes a pod's token Secret once: reconciled again with nothing
changed, it writes nothing, even where the token's JWT claims another lifetime than the
TokenRequest answered (an API server extending kube-api-access tokens writes a year in `exp`),
and neither does a restarted one."""

from __future__ import annotations

import asyncio
import base64
import datetime
from typing import Any

import orjson

from tests.unit.reflectors import reflector_options
from vk.kube.client import JSON
from vk.kube.informer import ADDED, DELETED, MODIFIED, Informer
from vk.reflection.configuration.serviceaccounts import (
    ServiceAccountTokenReflector,
    token_inputs,
)
from vk.reflection.forge.pods import API_SERVER_SUPPORT_ANNOTATION
from vk.reflection.generic import NamespaceReflection

LOCAL, REMOTE = "shop", "shop-home"
NOW = datetime.datetime(2026, 11, 26, 8, 0, tzinfo=datetime.UTC)


def jwt(issued: datetime.datetime, expires: datetime.datetime) -> str:
    def part(value: JSON) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")

    claims = {"iat": int(issued.timestamp()), "exp": int(expires.timestamp())}
    return f"{part({'alg': 'none'})}.{part(claims)}.signature"


class Home:
    """Answers TokenRequests as an API server extending the token's life does: an hour in
    its answer, a year in the token."""

    async def create(self, path: str, body: JSON) -> JSON:
        token = jwt(NOW, NOW + datetime.timedelta(days=365))
        expires = (NOW + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"status": {"token": token, "expirationTimestamp": expires}}


class Provider:
    """Records the Secrets written, each with a resourceVersion."""

    def __init__(self) -> None:
        self.writes: list[tuple[str, JSON]] = []

    async def create(self, path: str, body: JSON) -> JSON:
        return self._written("create", body)

    async def replace(self, path: str, body: JSON) -> JSON:
        return self._written("replace", body)

    def _written(self, verb: str, body: JSON) -> JSON:
        self.writes.append((verb, body))
        return as_stored(body, len(self.writes))


def as_stored(body: JSON, version: int) -> JSON:
    """`body` as the API server keeps it: with a uid and a resourceVersion."""
    stored: JSON = orjson.loads(orjson.dumps(body))
    stored["metadata"].update(uid="secret-uid", resourceVersion=str(version))
    return stored


def token_reflector(pods: Informer) -> ServiceAccountTokenReflector:
    """The token reflector of node far, whose home answers TokenRequests as `Home` does."""
    return ServiceAccountTokenReflector(reflector_options(Home()), pods, now=lambda: NOW)


def test_a_token_secret_is_written_once_whatever_its_jwt_says_restarted_or_not() -> None:
    client: Any = object()
    pods = Informer(client, "v1", "pods")
    token_source = {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
    volume = {"name": "kube-api-access-x", "projected": {"sources": [token_source]}}
    pods.store.upsert(
        {
            "metadata": {"name": "web", "namespace": LOCAL, "uid": "pod-uid"},
            "spec": {"serviceAccountName": "default", "volumes": [volume]},
        }
    )
    pods.synced.set()
    secrets = Informer(client, "v1", "secrets", namespace=REMOTE)
    secrets.synced.set()
    tokens = token_reflector(pods)
    provider = Provider()
    tokens.namespaces[LOCAL] = NamespaceReflection(LOCAL, REMOTE, provider, [secrets])  # type: ignore[arg-type]

    asyncio.run(tokens.reconcile(f"{LOCAL}/web"))
    assert [verb for verb, _ in provider.writes] == ["create"]
    created = as_stored(provider.writes[0][1], 1)  # the cache shows our write
    secrets.store.upsert(created)
    tokens.recent.observe(f"{REMOTE}/web-token", "ADDED", created)

    asyncio.run(tokens.reconcile(f"{LOCAL}/web"))
    assert [verb for verb, _ in provider.writes] == ["create"], "written again for nothing"

    # Restarted: a new reflector, which knows the token's life from the Secret alone.
    restarted = token_reflector(pods)
    restarted.namespaces[LOCAL] = NamespaceReflection(LOCAL, REMOTE, provider, [secrets])  # type: ignore[arg-type]
    result = asyncio.run(restarted.reconcile(f"{LOCAL}/web"))
    assert [verb for verb, _ in provider.writes] == ["create"], "written again after a restart"
    assert result.requeue_after == 48 * 60, "refreshed at 80% of the hour answered, not the year"


def test_a_pod_reconciled_before_the_secrets_are_synced_waits_for_them_and_comes_again() -> None:
    """Not retried every 0.2 s meanwhile: enqueued once the provider's Secrets and the pods
    are synced (after a restart, ten thousand pods polling took more CPU than their
    reconciles)."""

    async def scenario() -> None:
        client: Any = object()
        pods = Informer(client, "v1", "pods")
        pods.store.upsert({"metadata": {"name": "web", "namespace": LOCAL, "uid": "pod-uid"}})
        pods.synced.set()
        secrets = Informer(client, "v1", "secrets", namespace=REMOTE)
        tokens = token_reflector(pods)
        state = NamespaceReflection(LOCAL, REMOTE, Provider(), [secrets])  # type: ignore[arg-type]
        tokens.namespaces[LOCAL] = state
        result = await tokens.reconcile(f"{LOCAL}/web")
        assert result.requeue_after is None
        assert len(tokens.controller.queue) == 0
        waiting = asyncio.create_task(tokens._reconcile_once_synced(state))
        await asyncio.sleep(0.01)
        assert len(tokens.controller.queue) == 0
        secrets.synced.set()
        await asyncio.wait_for(waiting, 1)
        assert len(tokens.controller.queue) == 1  # the pod, again

    asyncio.run(scenario())


def bound_pod(**changes: Any) -> JSON:
    """A pod bound to the node, Running, with one projected token; `changes` merged into its
    metadata, spec and status."""
    token_source = {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}}
    pod: JSON = {
        "metadata": {"name": "web", "namespace": LOCAL, "uid": "pod-uid", "resourceVersion": "4"},
        "spec": {
            "serviceAccountName": "default",
            "volumes": [{"name": "kube-api-access-x", "projected": {"sources": [token_source]}}],
        },
        "status": {"phase": "Running", "podIP": "10.0.0.7"},
    }
    for part, values in changes.items():
        pod[part] = {**pod[part], **values}
    return pod


def test_what_a_pods_tokens_depend_on_and_what_not() -> None:
    pod = bound_pod()
    assert token_inputs(bound_pod(status={"phase": "Running", "podIP": "10.0.0.8"})) == (
        token_inputs(pod)
    ), "its status written: nothing to its tokens"
    assert token_inputs(bound_pod(metadata={"resourceVersion": "5"})) == token_inputs(pod)
    for changed in (
        bound_pod(metadata={"uid": "another"}),
        bound_pod(metadata={"deletionTimestamp": "2026-11-26T08:00:00Z"}),
        bound_pod(status={"phase": "Succeeded"}),
        bound_pod(metadata={"annotations": {API_SERVER_SUPPORT_ANNOTATION: "disabled"}}),
        bound_pod(spec={"serviceAccountName": "builder"}),
        bound_pod(spec={"volumes": []}),
    ):
        assert token_inputs(changed) != token_inputs(pod), changed


def test_a_pod_event_wakes_the_token_reflection_only_when_its_tokens_may_change() -> None:
    client: Any = object()
    pods = Informer(client, "v1", "pods")
    tokens = token_reflector(pods)
    woken = tokens.controller.queue._dirty
    tokens._on_pod(ADDED, bound_pod(), None)
    assert woken == {f"{LOCAL}/web"}
    woken.clear()
    tokens._on_pod(MODIFIED, bound_pod(status={"phase": "Running"}), bound_pod())
    assert woken == set(), "a status written"
    tokens._on_pod(MODIFIED, bound_pod(status={"phase": "Failed"}), bound_pod())
    assert woken == {f"{LOCAL}/web"}, "finished: its Secret goes"
    woken.clear()
    tokens._on_pod(DELETED, bound_pod(), bound_pod())
    assert woken == {f"{LOCAL}/web"}


def test_a_pod_listed_before_its_namespaces_caches_are_whole_is_reconciled_once_they_are() -> None:
    """A restart's list of the local pods tells each to the handlers just before the cache is
    marked whole: `namespace_synced` enqueues every pod then, and the event doing so too had
    each pod's tokens judged twice. A pod deleted meanwhile wakes its key at once."""
    client: Any = object()
    pods = Informer(client, "v1", "pods")
    tokens = token_reflector(pods)
    secrets = Informer(client, "v1", "secrets")
    tokens.namespaces[LOCAL] = NamespaceReflection(LOCAL, REMOTE, client, [secrets])
    woken = tokens.controller.queue._dirty
    secrets.synced.set()

    tokens._on_pod(ADDED, bound_pod(), None)
    assert woken == set(), "the local pods not listed yet"
    tokens._on_pod(DELETED, bound_pod(), bound_pod())
    assert woken == {f"{LOCAL}/web"}
    woken.clear()
    pods.synced.set()
    tokens._on_pod(ADDED, bound_pod(), None)
    assert woken == {f"{LOCAL}/web"}


def test_the_pod_reflector_is_told_once_a_pods_own_token_secret_is_there() -> None:
    """What the pod reflector waits on before a pod's ShadowPod: the provider holding that
    pod's token Secret, as this reflector wrote it. A Secret of the provider's own making, or
    one for an earlier pod of that name, is not it; its going wakes the pod's reconcile (it
    may have its own now)."""
    client: Any = object()
    pods = Informer(client, "v1", "pods")
    token_source = {"serviceAccountToken": {"path": "token"}}
    pod = {
        "metadata": {"name": "web", "namespace": LOCAL, "uid": "pod-uid"},
        "spec": {
            "volumes": [{"name": "kube-api-access-x", "projected": {"sources": [token_source]}}]
        },
    }
    pods.store.upsert(pod)
    pods.synced.set()
    secrets = Informer(client, "v1", "secrets", namespace=REMOTE)
    secrets.synced.set()
    tokens = token_reflector(pods)
    provider = Provider()
    state = NamespaceReflection(LOCAL, REMOTE, provider, [secrets])  # type: ignore[arg-type]
    told: list[str] = []
    tokens.on_tokens_written(told.append)
    assert not tokens.holds_tokens_of(pod), "no twin namespace reflected yet"
    tokens.namespaces[LOCAL] = state

    planted = {
        "metadata": {"name": "web-token", "namespace": REMOTE, "uid": "p", "resourceVersion": "1"}
    }
    secrets.store.upsert(planted)
    tokens.on_event(state, 0, ADDED, planted)
    assert told == [f"{LOCAL}/web"]  # told: the reconcile judges whose it is
    assert not tokens.holds_tokens_of(pod), "the provider's own Secret"
    assert len(tokens.controller.queue) == 1
    tokens.controller.queue.done(asyncio.run(tokens.controller.queue.get()))
    secrets.store.delete(f"{REMOTE}/web-token")
    tokens.on_event(state, 0, DELETED, planted)
    assert told == [f"{LOCAL}/web"]
    assert len(tokens.controller.queue) == 1, "its going reconciles the pod"

    asyncio.run(tokens.reconcile(f"{LOCAL}/web"))
    assert [verb for verb, _ in provider.writes] == ["create"]
    assert told == [f"{LOCAL}/web"] * 2
    assert tokens.holds_tokens_of(pod), "our write, before the cache shows it"
    assert not tokens.holds_tokens_of({**pod, "metadata": {**pod["metadata"], "uid": "next"}})
