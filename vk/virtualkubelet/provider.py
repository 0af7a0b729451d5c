"""The provider's API server as the identity of the VirtualNode's kubeconfig Secret.

The Secret is watched: a fixed or rotated kubeconfig takes effect without a restart, and a
missing, empty or malformed one is a `problem` (reported as an Event by the caller, the node
NotReady), never a crash loop; the identity in use until then is dropped with it.
Everything that talks to the provider takes the current client from here.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import structlog

from vk.kube.client import DEFAULT_REQUEST_TIMEOUT, PROVIDER_MAX_BODY_BYTES, ApiError, KubeClient
from vk.kube.informer import Informer
from vk.kube.kubeconfig import ClusterConnection, InvalidKubeconfig, connection_from_secret
from vk.kube.supervision import BackgroundTasks
from vk.kube.workqueue import TokenBucket

RETIRED_CLIENT_GRACE = 60.0  # seconds an old client stays open after the Secret changed

log = structlog.get_logger("vk.virtualkubelet.provider")


class ProviderConnection:
    """`rate`: the client-side rate limit of every client made here, one for them all: a
    kubeconfig rotated gives a new client, not a new budget; `timeout`: the most one request
    of each takes."""

    def __init__(
        self,
        home: KubeClient,
        *,
        namespace: str,
        secret_name: str,
        rate: TokenBucket | None = None,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
    ) -> None:
        self.where = f"{namespace}/{secret_name}"
        self.rate = rate
        self.timeout = timeout
        self.secrets = Informer(
            home,
            "v1",
            "secrets",
            namespace=namespace,
            field_selector=f"metadata.name={secret_name}",
        )
        self.secret_key = self.where
        self.client: KubeClient | None = None
        self.problem: str | None = "the kubeconfig Secret has not been read yet"
        self._listeners: list[Callable[[], None]] = []
        self._connection: ClusterConnection | None = None
        self._retired: list[KubeClient] = []
        self._closers = BackgroundTasks("retired-provider-clients")
        self.loaded = asyncio.Event()  # the Secret has been read once (successfully or not)

    @property
    def connection(self) -> ClusterConnection | None:
        """The provider API server and identity now in use (None: unusable)."""
        return self._connection if self.problem is None else None

    def on_change(self, listener: Callable[[], None]) -> None:
        """`listener` runs whenever the client or the problem changes."""
        self._listeners.append(listener)

    async def run(self) -> None:
        self.secrets.add_handler(lambda *_: self._reload())
        try:
            await self._run_informer()
        finally:
            for client in [*self._retired, *([self.client] if self.client else [])]:
                await client.close()

    async def _run_informer(self) -> None:
        informer = asyncio.create_task(self.secrets.run())
        await self.secrets.synced.wait()
        self._reload()  # an absent Secret sends no event
        self.loaded.set()
        await informer

    def _reload(self) -> None:
        if not self.secrets.synced.is_set():
            return
        try:
            connection = connection_from_secret(self.secrets.store.get(self.secret_key), self.where)
        except InvalidKubeconfig as error:
            if self.problem != str(error):
                # The identity it held is dropped, not kept: a Secret emptied or deleted (a
                # peering ended, a credential revoked) is no longer anyone's to use.
                log.warning("provider kubeconfig unusable", error=str(error))
                if self.client is not None:
                    self._retire(self.client)
                self.client = None
                self._connection = None
                self.problem = str(error)
                self._notify()
            return
        if connection == self._connection and self.problem is None:
            return
        if self.client is not None:
            self._retire(self.client)
        self._connection = connection
        self.client = KubeClient(
            connection,
            name="provider",
            max_body=PROVIDER_MAX_BODY_BYTES,
            rate=self.rate,
            timeout=self.timeout,
        )
        self.problem = None
        log.info("provider kubeconfig loaded", server=connection.server)
        self._notify()

    def _retire(self, client: KubeClient) -> None:
        """Requests in flight finish on the old client; it is closed a minute later."""
        self._retired.append(client)

        async def close_later() -> None:
            await asyncio.sleep(RETIRED_CLIENT_GRACE)
            if client in self._retired:
                self._retired.remove(client)
                await client.close()

        self._closers.start(close_later())

    def _notify(self) -> None:
        for listener in self._listeners:
            listener()

    async def ping(self, within: float) -> str | None:
        """None when the provider's API server answers `/livez`, else why not."""
        await self.loaded.wait()
        if self.client is None or self.problem is not None:
            return self.problem
        try:
            await asyncio.wait_for(self.client.get_text("/livez"), within)
        except (OSError, TimeoutError) as error:
            return f"provider API server {self.client.connection.server} unreachable: {error!r}"
        except ApiError as error:  # it answered, but not healthy (or not to this identity)
            return f"provider API server {self.client.connection.server}: {error}"
        return None
