"""ServiceAccount tokens of offloaded pods (Liqo's TokenAPI mode, `serviceaccount.go`).

An offloaded pod talks to its home API server as itself: for each projected token its pod
asks for, the virtual kubelet requests one from the home TokenRequest API (the pod's
ServiceAccount, bound to the local pod, with the source's audience and lifetime), and writes
them into the remote Secret `<pod>-token`, which the remote pod mounts in place of the
projected token. Tokens are replaced at 80 % of their life, as the kubelet does; a restarted
virtual kubelet takes them back from the Secret instead of asking again. Each virtual kubelet
serves its own node's pods. A Secret of that name there first that it did not write (most
often the copy of a local Secret named so) is left alone, and said on the pod.
"""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Callable

from vk.api.constants import NODENAME_LABEL, POD_TERMINAL_PHASES, SERVICE_ACCOUNT_NAME_LABEL
from vk.kube.client import (
    JSON,
    AlreadyExists,
    ApiError,
    KubeClient,
    NotFound,
    delete_options,
    resource_path,
)
from vk.kube.controller import Result
from vk.kube.informer import DELETED, PROVIDER_MAX_OBJECTS, Informer, shared_informer, split_key
from vk.reflection.forge.configuration import is_token_secret
from vk.reflection.forge.meta import is_owned_by_us
from vk.reflection.forge.pods import API_SERVER_SUPPORT_ANNOTATION, uses_home_tokens
from vk.reflection.forge.tokens import (
    POD_UID_ANNOTATION,
    Token,
    TokenSource,
    forge_token_request,
    forge_token_secret,
    needs_refresh,
    refresh_at,
    secret_needs_update,
    token_from_request_status,
    token_key,
    token_secret_name,
    token_secret_pod,
    token_sources,
    tokens_from_secret,
)
from vk.reflection.generic import (
    NOT_SYNCED_RETRY,
    REFLECTION_ITEMS,
    REFUSALS,
    REFUSED_RETRY,
    NamespacedReflector,
    NamespaceReflection,
    RecentWrites,
    ReflectorOptions,
    replacement,
)

REASON_FAILED = "FailedSATokensReflection"  # Liqo's reason

Lifetime = tuple[datetime.datetime, datetime.datetime]  # (issued, expires)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def token_inputs(local_pod: JSON) -> tuple[object, ...]:
    """All that a pod's tokens depend on (the reconcile reads nothing else of it): a pod event
    that changes none of it brings no reconcile."""
    metadata = local_pod["metadata"]
    spec = local_pod.get("spec") or {}
    return (
        metadata.get("uid"),
        bool(metadata.get("deletionTimestamp")),
        (local_pod.get("status") or {}).get("phase") in POD_TERMINAL_PHASES,
        (metadata.get("annotations") or {}).get(API_SERVER_SUPPORT_ANNOTATION),
        spec.get("serviceAccountName"),
        spec.get("serviceAccount"),
        spec.get("volumes"),
    )


class ServiceAccountTokenReflector(NamespacedReflector):
    name = "serviceaccounts"
    liqo_resource = "serviceaccount"
    leader_only = False  # each virtual kubelet serves its own node's pods

    def __init__(
        self,
        options: ReflectorOptions,
        pods: Informer,
        *,
        now: Callable[[], datetime.datetime] = _now,
    ) -> None:
        super().__init__(options)
        self.pods = pods  # the pods bound to this node (the pod reflector's informer)
        self.now = now
        self.recent = RecentWrites()
        # pod key -> (pod uid, slot -> (issued, expires) as the TokenRequest answered): the
        # lifetime a token was given, which its JWT may not say (an API server extending
        # kube-api-access tokens writes a year in `exp`); read back from the JWT, it changed
        # the Secret's expiration annotation, and the Secret was written again for nothing.
        self.lifetimes: dict[str, tuple[str, dict[str, Lifetime]]] = {}
        self._written_listeners: list[Callable[[str], None]] = []

    def holds_tokens_of(self, pod: JSON) -> bool:
        """Whether the provider has `pod`'s token Secret, as far as this reflector knows (its
        cache, or its own write before the cache shows it): ours, for this very pod (a pod of
        the same name before it had its own)."""
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        state = self.active(namespace)
        if state is None:
            return False
        key = f"{state.remote_namespace}/{token_secret_name(name)}"
        secret = self.recent.current(key, state.informers[0].store.get(key))
        return (
            secret is not None
            and self._is_ours(secret)
            and (secret["metadata"].get("annotations") or {}).get(POD_UID_ANNOTATION)
            == pod["metadata"]["uid"]
        )

    def on_tokens_written(self, listener: Callable[[str], None]) -> None:
        """`listener(pod key)` is told whenever a pod's token Secret may have come to be
        (`holds_tokens_of`): this reflector wrote it, or its cache took one in."""
        self._written_listeners.append(listener)

    def _tell_written(self, key: str) -> None:
        for listener in self._written_listeners:
            listener(key)

    def informers(
        self, local_namespace: str, remote_namespace: str, client: KubeClient
    ) -> list[Informer]:
        # The remote namespace's Secrets as the Secret reflector keeps them too (one cache
        # and one watch for both): ours are told apart by their labels.
        return [
            shared_informer(
                client,
                "v1",
                "secrets",
                namespace=remote_namespace,
                keep=self.remote_as_read,
                max_objects=PROVIDER_MAX_OBJECTS,
            )
        ]

    def on_event(self, state: NamespaceReflection, side: int, event: str, obj: JSON) -> None:
        if self.recent.observe(f"{state.remote_namespace}/{obj['metadata']['name']}", event, obj):
            return  # our own write coming back
        super().on_event(state, side, event, obj)
        if event != DELETED:
            for key in self.keys_of(state, side, obj):
                self._tell_written(key)

    def keys_of(self, state: NamespaceReflection, side: int, obj: JSON) -> list[str]:
        # By its name, whoever's it is: another node's token Secret of the same pod name, or
        # one the provider made, going lets this one's pod have its own; the reconcile tells
        # ours from the others.
        pod = token_secret_pod(obj["metadata"]["name"])
        return [f"{state.local_namespace}/{pod}"] if pod else []

    def _is_ours(self, secret: JSON) -> bool:
        """A token Secret this virtual kubelet wrote: its consumer's, its provider's, for a pod
        of its node (another node's virtual kubelet writes into the same namespace)."""
        labels = secret["metadata"].get("labels") or {}
        return (
            is_owned_by_us(secret, self.home_cluster_id, self.remote_cluster_id)
            and labels.get(NODENAME_LABEL) == self.node_name
            and SERVICE_ACCOUNT_NAME_LABEL in labels
        )

    def _taken_message(self, secret_name: str, secret: JSON) -> str:
        """Why a pod gets no tokens: the provider's Secret of their name is another's."""
        reflected = is_owned_by_us(secret, self.home_cluster_id, self.remote_cluster_id)
        if reflected and not is_token_secret(secret):
            # The Secret reflector's copy of a local Secret named so, there first.
            return (
                f"cannot write the pod's ServiceAccount tokens: Secret {secret_name} of this "
                f"namespace, reflected to cluster {self.remote_cluster_id} first, has the name "
                "vk gives them there; rename that Secret (the pod gets its tokens once the name "
                "is free)"
            )
        return (
            f"cannot write the pod's ServiceAccount tokens: the provider has a Secret "
            f"{secret_name} that this virtual kubelet did not write"
        )

    def informers_to_sync(self, state: NamespaceReflection) -> list[Informer]:
        return [*state.informers, self.pods]

    def namespace_synced(self, state: NamespaceReflection) -> None:
        super().namespace_synced(state)
        local = state.local_namespace
        for pod in self.pods.store.objects():
            if pod["metadata"]["namespace"] == local:
                self.controller.enqueue(f"{local}/{pod['metadata']['name']}")

    async def run(self) -> None:
        self.pods.add_handler(self._on_pod)
        await super().run()

    def _on_pod(self, event: str, pod: JSON, old: JSON | None) -> None:
        # Most of a pod's changes are its status written (by this very virtual kubelet), which
        # its tokens do not depend on: only what they do brings a reconcile.
        if event == DELETED or old is None or token_inputs(pod) != token_inputs(old):
            namespace = pod["metadata"]["namespace"]
            state = self.namespaces.get(namespace)
            if state is not None and self.left_for_namespace_synced(state, event):
                return  # enqueued by `namespace_synced`, with every pod of the namespace
            self.controller.enqueue(f"{namespace}/{pod['metadata']['name']}")

    async def reconcile(self, key: str) -> Result:
        namespace, name = split_key(key)
        assert namespace is not None
        state = self.active(namespace)
        if state is None:
            self.lifetimes.pop(key, None)
            return Result()
        if not self.is_synced(state):
            return Result()  # enqueued again once it is
        pod = self.pods.store.get(key)
        secret_name = token_secret_name(name)
        secret_key = f"{state.remote_namespace}/{secret_name}"
        secret = self.recent.current(secret_key, state.informers[0].store.get(secret_key))
        sources = token_sources(pod) if pod is not None and uses_home_tokens(pod, True) else []
        finished = pod is None or (
            pod["metadata"].get("deletionTimestamp")
            or (pod.get("status") or {}).get("phase") in POD_TERMINAL_PHASES
        )
        # Another's Secret of the name (the copy of a local Secret named so, another node's
        # tokens, the provider's own) is never written over nor deleted.
        theirs = secret if secret is not None and not self._is_ours(secret) else None
        if finished or not sources:
            self.lifetimes.pop(key, None)
            self._reported.pop(key, None)
            if secret is not None and theirs is None:
                with contextlib.suppress(NotFound):
                    await state.client.delete(
                        resource_path(
                            "v1", "secrets", namespace=state.remote_namespace, name=secret_name
                        ),
                        body=delete_options(uid=secret["metadata"]["uid"]),
                    )
                self.recent.deleted(secret_key, secret)
                REFLECTION_ITEMS.labels(self.name, "deleted").inc()
            return Result()
        assert pod is not None
        if theirs is not None:  # said on the pod, which has no tokens while it is there
            await self.report(
                pod,
                ("v1", "Pod"),
                "conflict",
                self._taken_message(secret_name, theirs),
                reason=REASON_FAILED,
            )
            return Result()
        # The tokens live in the Secret only (the cache's copy, or our last write until the
        # cache shows it): ten thousand pods' tokens kept twice were a kilobyte and a half each.
        # Their lifetimes are the TokenRequest's, when this process asked for them.
        now = self.now()
        tokens = tokens_from_secret(secret, pod, now) if secret is not None else {}
        uid = pod["metadata"]["uid"]
        known = self.lifetimes.get(key)
        if known is not None and known[0] == uid:
            for slot, (issued_at, expires_at) in known[1].items():
                if slot in tokens:
                    tokens[slot] = Token(tokens[slot].value, issued_at, expires_at)
        try:
            for source in sources:
                slot = token_key(source.volume, source.path)
                if slot not in tokens or needs_refresh(tokens[slot], now):
                    tokens[slot] = await self._request(pod, source, now)
        except ApiError as error:
            await self.report(
                pod,
                ("v1", "Pod"),
                "failed",
                f"cannot get a ServiceAccount token: {error.message}",
                reason=REASON_FAILED,
            )
            raise
        tokens = {slot: tokens[slot] for slot in (token_key(s.volume, s.path) for s in sources)}
        self.lifetimes[key] = (
            uid,
            {slot: (token.issued_at, token.expires_at) for slot, token in tokens.items()},
        )
        desired = forge_token_secret(
            pod,
            tokens,
            remote_namespace=state.remote_namespace,
            local_cluster_id=self.home_cluster_id,
            remote_cluster_id=self.remote_cluster_id,
            node_name=self.node_name,
        )
        collection = resource_path("v1", "secrets", namespace=state.remote_namespace)
        try:
            if secret is None:
                self.recent.wrote(secret_key, await state.client.create(collection, desired))
                REFLECTION_ITEMS.labels(self.name, "created").inc()
                self._tell_written(key)
            elif secret_needs_update(desired, secret):
                written = await state.client.replace(
                    f"{collection}/{secret_name}", replacement(desired, secret)
                )
                self.recent.wrote(secret_key, written)
                REFLECTION_ITEMS.labels(self.name, "updated").inc()
                self._tell_written(key)
        except AlreadyExists:
            return Result(requeue_after=NOT_SYNCED_RETRY)
        except ApiError as error:
            if error.status not in REFUSALS:
                raise
            # Most often the twin namespace's `secrets` quota, full: the pod runs on without
            # the tokens until the provider's admin raises it.
            await self.report(
                pod,
                ("v1", "Pod"),
                "failed",
                f"cluster {self.remote_cluster_id} refused the pod's ServiceAccount token "
                f"Secret: {error.message}",
                reason=REASON_FAILED,
            )
            return Result(requeue_after=REFUSED_RETRY, failed=True)
        self._reported.pop(key, None)
        earliest = min(refresh_at(token) for token in tokens.values())
        return Result(requeue_after=max(1.0, (earliest - self.now()).total_seconds()))

    async def _request(self, pod: JSON, source: TokenSource, now: datetime.datetime) -> Token:
        account = pod["spec"].get("serviceAccountName") or "default"
        answer = await self.home.create(
            resource_path(
                "v1",
                "serviceaccounts",
                namespace=pod["metadata"]["namespace"],
                name=account,
                subresource="token",
            ),
            forge_token_request(source, pod),
        )
        status = answer.get("status") or {}
        return token_from_request_status(status["token"], status["expirationTimestamp"], now)
