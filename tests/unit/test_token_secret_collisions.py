"""A tenant's Secret named as an offloaded pod's token Secret (`web-token` for pod `web`): the
two would be one Secret on the provider. Whichever is there first keeps the name; neither
reflector writes or deletes the other's, and the object not reflected is said in a Warning on
it, with the fix (rename the Secret). The two reflectors run here as in a virtual kubelet:
over one cache of the provider's Secrets, whose watch tells each write once it is answered."""

from __future__ import annotations

import base64
import dataclasses
import datetime
from typing import Any

import orjson
import pytest

from tests.unit.reflectors import reflector_options
from vk.api.constants import (
    NODENAME_LABEL,
    SERVICE_ACCOUNT_NAME_LABEL,
    SKIP_REFLECTION_ANNOTATION,
)
from vk.kube.client import JSON, AlreadyExists, NotFound
from vk.kube.informer import DELETED, Informer, object_key
from vk.reflection.configuration.secrets import SecretReflector
from vk.reflection.configuration.serviceaccounts import ServiceAccountTokenReflector
from vk.reflection.forge.meta import ReflectionPolicy, is_owned_by_us
from vk.reflection.forge.tokens import token_key, token_secret_name
from vk.reflection.generic import NamespacedReflector, NamespaceReflection

LOCAL, REMOTE = "shop", "shop-far"
NOW = datetime.datetime(2026, 11, 26, 8, 0, tzinfo=datetime.UTC)
TENANTS = {"password": base64.b64encode(b"hunter2").decode()}


def jwt() -> str:
    def part(value: JSON) -> str:
        return base64.urlsafe_b64encode(orjson.dumps(value)).decode().rstrip("=")

    claims = {"iat": int(NOW.timestamp()), "exp": int(NOW.timestamp()) + 3600}
    return f"{part({'alg': 'none'})}.{part(claims)}.signature"


class Home:
    """Answers every TokenRequest with an hour's token."""

    async def create(self, path: str, body: JSON) -> JSON:
        expires = (NOW + datetime.timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {"status": {"token": jwt(), "expirationTimestamp": expires}}


class Events:
    def __init__(self) -> None:
        self.said: list[tuple[str, str]] = []  # (Kind/name, message)

    async def record(self, involved: JSON, event_type: str, reason: str, message: str) -> None:
        assert event_type == "Warning"
        self.said.append((f"{involved['kind']}/{involved['metadata']['name']}", message))


class Provider:
    """The provider's API for the twin namespace's Secrets, and the one watch on them that both
    reflectors share, which tells each change after the write has been answered."""

    name = "far"

    def __init__(self, cache: Informer) -> None:
        self.cache = cache
        self.objects: dict[str, JSON] = {}  # by name
        self.watch: list[tuple[bool, JSON]] = []  # (deleted, object) the watch has yet to tell
        self.version = 0

    async def create(self, path: str, body: JSON) -> JSON:
        if body["metadata"]["name"] in self.objects:
            raise AlreadyExists(409, "AlreadyExists", "already exists")
        return self._stored(body, uid=f"uid-{self.version + 1}")

    async def replace(self, path: str, body: JSON) -> JSON:
        return self._stored(body, uid=self.objects[body["metadata"]["name"]]["metadata"]["uid"])

    async def delete(self, path: str, body: Any = None) -> None:
        gone = self.objects.pop(path.rsplit("/", 1)[-1], None)
        if gone is None:
            raise NotFound(404, "NotFound", "not found")
        self.watch.append((True, gone))

    def _stored(self, body: JSON, uid: str) -> JSON:
        self.version += 1
        stored: JSON = orjson.loads(orjson.dumps(body))
        stored["metadata"].update(uid=uid, resourceVersion=str(self.version))
        self.objects[stored["metadata"]["name"]] = stored
        self.watch.append((False, stored))
        return orjson.loads(orjson.dumps(stored))

    def tell(self) -> bool:
        """The watch tells what it has yet to; whether it had anything."""
        told, self.watch = self.watch, []
        for deleted, obj in told:
            if deleted:
                remove(self.cache, object_key(obj))
            else:
                self.cache._take(self.cache._kept(obj))
        return bool(told)


def remove(informer: Informer, key: str) -> None:
    """An object deleted, as its informer's watch tells it."""
    gone = informer.store.delete(key)
    if gone is not None:
        informer._notify(DELETED, gone, gone)


def wire(reflector: NamespacedReflector, state: NamespaceReflection) -> None:
    """`reflector` reflecting one namespace, its informers' events handled as
    `start_namespace` has them (without running the informers)."""
    for side, informer in enumerate(state.informers):
        informer.add_handler(
            lambda event, obj, _, side=side: reflector.on_event(state, side, event, obj)
        )
    reflector.namespaces[state.local_namespace] = state


class Twin:
    """An offloaded namespace `shop` of cluster home, in cluster far: the Secret reflector
    (leading) and node far's token reflector over the provider's Secrets."""

    def __init__(self) -> None:
        client: Any = object()
        self.events = Events()
        options = dataclasses.replace(reflector_options(Home()), events=self.events)
        self.pods = Informer(client, "v1", "pods")
        self.local_secrets = Informer(client, "v1", "secrets", namespace=LOCAL)
        self.secrets = SecretReflector(options, ReflectionPolicy.DENY_LIST)
        self.tokens = ServiceAccountTokenReflector(options, self.pods, now=lambda: NOW)
        remote = Informer(
            client, "v1", "secrets", namespace=REMOTE, keep=self.secrets.remote_as_read
        )
        self.provider = Provider(remote)
        for informer in (self.pods, self.local_secrets, remote):
            informer.synced.set()
        provider: Any = self.provider
        wire(
            self.secrets, NamespaceReflection(LOCAL, REMOTE, provider, [self.local_secrets, remote])
        )
        wire(self.tokens, NamespaceReflection(LOCAL, REMOTE, provider, [remote]))
        self.pods.add_handler(self.tokens._on_pod)

    async def settle(self, first: NamespacedReflector | None = None) -> None:
        """Every reconcile the events ask for done, and those asked again at once (the cache
        behind a write); `first`'s first, each time."""
        reflectors = [self.tokens, self.secrets]
        if first is not None:
            reflectors.sort(key=lambda reflector: reflector is not first)
        busy = True
        while self.provider.tell() or busy:
            busy = False
            for reflector in reflectors:
                queue, again = reflector.controller.queue, []
                while len(queue):
                    busy = True
                    key = await queue.get()
                    result = await reflector.reconcile(key)
                    queue.done(key)
                    if result.requeue_after is not None and result.requeue_after <= 1:
                        again.append(key)
                for key in again:
                    queue.add(key)

    def add_pod(self, projects_a_token: bool = True) -> JSON:
        """Pod `web`, bound to node far, running."""
        token = {"serviceAccountToken": {"path": "token"}}
        volume = {"name": "kube-api-access-x", "projected": {"sources": [token]}}
        pod = {
            "metadata": {"name": "web", "namespace": LOCAL, "uid": "pod-uid"},
            "spec": {"nodeName": "far", "volumes": [volume] if projects_a_token else []},
            "status": {"phase": "Running"},
        }
        self.pods._take(pod)
        return pod

    def add_secret(self, **labelled: dict[str, str]) -> None:
        """The tenant's Secret `web-token`, with `labelled`'s labels or annotations."""
        metadata = {"name": "web-token", "namespace": LOCAL, "uid": "secret-uid", **labelled}
        self.local_secrets._take({"metadata": metadata, "type": "Opaque", "data": TENANTS})

    def holder(self) -> str | None:
        """Whose the provider's Secret `web-token` is: the pod's tokens, the tenant's Secret's
        copy, or none."""
        secret = self.provider.objects.get(token_secret_name("web"))
        if secret is None:
            return None
        if secret["data"] == TENANTS:
            return "tenant"
        assert SERVICE_ACCOUNT_NAME_LABEL in secret["metadata"]["labels"]
        assert list(secret["data"]) == [token_key("kube-api-access-x", "token")]
        return "tokens"


async def secret_then_pod(**labelled: dict[str, str]) -> tuple[Twin, JSON]:
    """The tenant's Secret (with `labelled`'s labels) reflected, then pod `web` offloaded."""
    twin = Twin()
    twin.add_secret(**labelled)
    await twin.settle()
    pod = twin.add_pod()
    await twin.settle()
    return twin, pod


async def pod_then_secret() -> tuple[Twin, JSON]:
    """Pod `web` offloaded, its tokens written, then the tenant's Secret."""
    twin = Twin()
    pod = twin.add_pod()
    await twin.settle()
    twin.add_secret()
    await twin.settle()
    return twin, pod


TOLD_TO_RENAME = (
    "Pod/web",
    "cannot write the pod's ServiceAccount tokens: Secret web-token of this namespace, "
    "reflected to cluster far first, has the name vk gives them there; rename that Secret "
    "(the pod gets its tokens once the name is free)",
)


async def test_a_tenants_secret_there_first_keeps_the_name_until_renamed_and_the_pod_is_told() -> (
    None
):
    """The pod is not given the tenant's Secret as its tokens (the pod reflector holds it
    until its own are there), and is told why."""
    twin, pod = await secret_then_pod()

    assert twin.holder() == "tenant", "the token reflector wrote over the tenant's copy"
    assert not twin.tokens.holds_tokens_of(pod), "the pod would mount the tenant's Secret"
    assert twin.events.said == [TOLD_TO_RENAME]

    told: list[str] = []
    twin.tokens.on_tokens_written(told.append)
    remove(twin.local_secrets, f"{LOCAL}/web-token")  # renamed
    await twin.settle()
    assert twin.holder() == "tokens"
    assert twin.tokens.holds_tokens_of(pod)
    assert told == [f"{LOCAL}/web"], "the pod reflector is told: it offloads the pod now"
    assert twin.events.said == [TOLD_TO_RENAME], "said once"


async def test_a_pod_gone_leaves_the_tenants_secret_there_first_alone() -> None:
    twin, _ = await secret_then_pod()

    remove(twin.pods, f"{LOCAL}/web")
    await twin.settle()

    assert twin.holder() == "tenant", "the token reflector deleted the tenant's copy"
    assert twin.tokens._reported == {}, "nothing kept of a pod gone"


async def test_a_pods_token_secret_there_first_keeps_the_name_and_the_tenants_secret_says_so() -> (
    None
):
    """The generic judgement of ownership takes the token Secret for the Secret reflector's
    own (it carries the same ownership labels as a copy of a Secret): it is the token label
    that keeps the Secret reflector off it."""
    twin = Twin()
    pod = twin.add_pod()
    await twin.settle()
    twin.add_secret(annotations={SKIP_REFLECTION_ANNOTATION: "true"})
    await twin.settle()
    assert twin.events.said == [], "a Secret not to be reflected anyway"
    twin.add_secret()
    await twin.settle()

    token_secret = twin.provider.objects["web-token"]
    assert is_owned_by_us(token_secret, "home", "far")
    assert twin.holder() == "tokens", "the tenant's Secret wrote over the pod's tokens"
    assert twin.tokens.holds_tokens_of(pod)
    assert twin.events.said == [
        (
            "Secret/web-token",
            "Secret web-token is not reflected to cluster far: vk gives that name there to the "
            "ServiceAccount tokens of pod web, which the pod mounts; rename the Secret (or it "
            "is reflected once the pod is gone)",
        )
    ]

    remove(twin.local_secrets, f"{LOCAL}/web-token")
    await twin.settle()
    assert twin.holder() == "tokens", "the tenant's Secret gone, its reflector deleted the tokens"
    assert twin.secrets._reported == {}, "nothing kept of a Secret gone"


async def test_once_the_pod_there_first_is_gone_the_tenants_secret_is_reflected() -> None:
    twin, _ = await pod_then_secret()
    assert [about for about, _ in twin.events.said] == ["Secret/web-token"]

    remove(twin.pods, f"{LOCAL}/web")
    await twin.settle()

    assert twin.holder() == "tenant"
    assert twin.secrets._reported == {}, "said again should a pod take the name again"


async def test_a_tenants_secret_labelled_as_a_token_secret_is_still_the_tenants() -> None:
    """vk tells a token Secret, and whose node's it is, by labels of its own prefix, which no
    copy of a local Secret carries."""
    twin, pod = await secret_then_pod(
        labels={SERVICE_ACCOUNT_NAME_LABEL: "default", NODENAME_LABEL: "far"}
    )

    assert twin.holder() == "tenant"
    assert (
        SERVICE_ACCOUNT_NAME_LABEL not in twin.provider.objects["web-token"]["metadata"]["labels"]
    )
    assert not twin.tokens.holds_tokens_of(pod)
    assert twin.events.said == [TOLD_TO_RENAME], "the tenant's Secret, not another node's tokens"

    remove(twin.local_secrets, f"{LOCAL}/web-token")
    await twin.settle()
    assert twin.holder() == "tokens", "the copy went as any copy goes"


@pytest.mark.parametrize(
    ("first", "holder", "told"),
    [("tokens", "tokens", "Secret/web-token"), ("secrets", "tenant", "Pod/web")],
)
async def test_a_token_secret_deleted_under_a_running_pod_goes_to_whichever_comes_first(
    first: str, holder: str, told: str
) -> None:
    """Someone deletes the pod's token Secret on the provider while both live: the token
    reflector writes it again, the Secret reflector the copy of the tenant's Secret, whichever
    comes first; the other leaves it be and says so."""
    twin, _ = await pod_then_secret()
    twin.events.said.clear()
    twin.secrets._reported.clear()

    await twin.provider.delete("web-token")
    await twin.settle(first=getattr(twin, first))

    assert twin.holder() == holder
    assert [about for about, _ in twin.events.said] == [told]
    assert "rename" in twin.events.said[0][1]


async def test_a_pod_that_projects_no_token_is_not_warned_of_a_secret_of_its_tokens_name() -> None:
    twin = Twin()
    twin.add_secret()
    await twin.settle()
    twin.add_pod(projects_a_token=False)
    await twin.settle()

    assert twin.holder() == "tenant"
    assert twin.events.said == []
