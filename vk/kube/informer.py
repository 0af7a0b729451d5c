"""The one informer implementation: list, then watch, keeping an indexed cache of dicts.

The list is streamed where the API server can (a watch that sends the objects there are, then
a bookmark: `KubeClient.current_objects`), and paged where it cannot. A watch resumes from the
last resourceVersion it saw (bookmarks keep that fresh on quiet collections), so an idle
informer costs one long request per five minutes; only a 410 Gone makes it list again, and the
relist is turned into the ADDED/MODIFIED/DELETED events the gap hid, so handlers never miss a
deletion. Handlers run synchronously on the event loop and should only enqueue keys:
reconcilers read the cache, never the event. Objects are kept compacted
(vk/kube/compaction.py): without their managedFields, their strings and their equal parts
shared with every other cache of the process, so they are read only.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import sys
import time
import weakref
from collections.abc import AsyncGenerator, Callable, Iterator
from typing import Any
from urllib.parse import urlencode

import structlog
from prometheus_client import Counter, Gauge

from vk.kube.client import JSON, ApiError, Gone, KubeClient, resource_of, resource_path
from vk.kube.compaction import compact
from vk.kube.supervision import TASK_RESTARTS

ADDED, MODIFIED, DELETED, BOOKMARK = "ADDED", "MODIFIED", "DELETED", "BOOKMARK"

EventHandler = Callable[[str, JSON, JSON | None], None]
"""(event type, the object — for DELETED its last known state —, the previous object)."""

Indexer = Callable[[JSON], list[str]]
Admission = Callable[[JSON, "Store"], bool]
"""(an object as kept, the cache as it is) -> whether the cache takes that object in."""

log = structlog.get_logger("vk.kube.informer")

MIN_BACKOFF, MAX_BACKOFF = 0.5, 30.0
# A watch that ends sooner than this after it opened was refused, not idle: re-opened after a
# back-off, not at once.
QUICK_CLOSE_SECONDS = 1.0
# An informer on a provider holds at most this many objects: a provider is not trusted, and one
# streaming a list that never ends, or watch events of new names without end, would otherwise
# grow the process until it is killed. A virtual kubelet is built for 10,000 offloaded pods;
# the collections that follow them (pods, ShadowPods, their Secrets, ConfigMaps, Services,
# EndpointSlices in one namespace or tenant) hold about as many each: five times that is room,
# and at a few KiB per compacted object still a bound of a few hundred MiB.
PROVIDER_MAX_OBJECTS = 50_000
# Informers running in this process, for /readyz to name those that have been failing.
RUNNING: weakref.WeakSet[Informer] = weakref.WeakSet()
INFORMERS = Gauge(
    "vk_informers",
    "Informers following an API server in this process, each with its one list and watch",
)
INFORMERS.set_function(lambda: len(RUNNING))
WATCH_EVENTS = Counter(
    "vk_watch_events_total",
    "Watch events informers took in, by client (home or provider), resource and event type: "
    "each is decoded, compacted and handed to every handler",
    ["client", "resource", "type"],
)
REFUSED = Counter(
    "vk_informer_refused_total",
    "Objects an informer's cache did not take in, by client (home or provider) and resource: "
    "its admission bounds what a server that is not trusted can make the process hold",
    ["client", "resource"],
)
# Failing for this long, an informer makes its process not ready: a blip is not an outage.
FAILING_FOR_SECONDS = 30.0


def retry_informers_now(client: KubeClient | None) -> None:
    """Every informer of `client` in a back-off pause lists or watches again at once: its
    server answers again, and what waited for the cache (offloading pods made meanwhile) must
    not wait for a back-off of up to MAX_BACKOFF too."""
    for informer in list(RUNNING):
        if client is not None and informer.client is client:
            informer.retry_now()


def informer_problems(now: float | None = None) -> list[str]:
    """What each informer of this process failing for FAILING_FOR_SECONDS or more is failing
    on (sorted), for /readyz."""
    now = time.monotonic() if now is None else now
    return sorted(
        f"{informer.describe()}: {informer.problem} (for {now - informer.failing_since:.0f} s)"
        for informer in list(RUNNING)
        if informer.failing_since is not None
        and now - informer.failing_since >= FAILING_FOR_SECONDS
    )


def object_key(obj: JSON) -> str:
    """`namespace/name`, or `name` for cluster-scoped objects (client-go's key)."""
    metadata = obj.get("metadata", {})
    namespace = metadata.get("namespace")
    return f"{namespace}/{metadata['name']}" if namespace else str(metadata["name"])


def split_key(key: str) -> tuple[str | None, str]:
    namespace, _, name = key.rpartition("/")
    return (namespace or None), name


def namespace_of_key(key: str) -> str:
    """The namespace of an object key ("" for a cluster-scoped object's): the work-queue group
    of controllers that serve each namespace (each consumer's tenant namespace) in turn."""
    return key.rpartition("/")[0]


def namespace_index(obj: JSON) -> list[str]:
    return [obj.get("metadata", {}).get("namespace", "")]


class Store:
    """Objects by key, plus secondary indexes (e.g. pods by node, objects by namespace)."""

    def __init__(self, indexers: dict[str, Indexer] | None = None) -> None:
        self._objects: dict[str, JSON] = {}
        self._indexers = dict(indexers or {})
        self._indexes: dict[str, dict[str, set[str]]] = {name: {} for name in self._indexers}

    def __len__(self) -> int:
        return len(self._objects)

    def add_indexers(self, indexers: dict[str, Indexer]) -> None:
        """More indexes, built over what the store holds already. An index name means one
        thing: the same name with another function is a programming error, raised."""
        for name, indexer in indexers.items():
            if name in self._indexers:
                if self._indexers[name] is not indexer:
                    raise ValueError(f"the index {name!r} is defined already, otherwise")
                continue
            self._indexers[name] = indexer
            self._indexes[name] = {}
            for key, obj in self._objects.items():
                for value in indexer(obj):
                    self._indexes[name].setdefault(value, set()).add(key)

    def empty_like(self) -> Store:
        """An empty store with the same indexes."""
        return Store(self._indexers)

    def get(self, key: str) -> JSON | None:
        return self._objects.get(key)

    def keys(self) -> list[str]:
        return list(self._objects)

    def objects(self) -> list[JSON]:
        return list(self._objects.values())

    def by_index(self, index: str, value: str) -> list[JSON]:
        keys = self._indexes[index].get(value, set())
        return [self._objects[key] for key in keys]

    def count_by_index(self, index: str, value: str) -> int:
        """How many objects `by_index` would give, without making their list: asked at each of
        thousands of deletions, the list of those left made the whole O(n²)."""
        return len(self._indexes[index].get(value, ()))

    def index_values(self, index: str) -> list[str]:
        """The values of `index` some object holds now."""
        return list(self._indexes[index])

    def upsert(self, obj: JSON) -> JSON | None:
        key = object_key(obj)
        old = self._objects.get(key)
        if old is not None:
            self._unindex(key, old)
        self._objects[key] = obj
        for name, indexer in self._indexers.items():
            for value in indexer(obj):
                self._indexes[name].setdefault(value, set()).add(key)
        return old

    def delete(self, key: str) -> JSON | None:
        old = self._objects.pop(key, None)
        if old is not None:
            self._unindex(key, old)
        return old

    def _unindex(self, key: str, obj: JSON) -> None:
        for name, indexer in self._indexers.items():
            for value in indexer(obj):
                keys = self._indexes[name].get(value)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._indexes[name][value]


InformerScope = tuple[int, str, str | None, str | None]
"""(the client's id, path, label selector, field selector): what one informer follows."""

# The informers shared in the current scope (informer_scope()), by what they follow.
_SHARED: contextvars.ContextVar[dict[InformerScope, Informer] | None] = contextvars.ContextVar(
    "shared_informers", default=None
)


@contextlib.contextmanager
def informer_scope() -> Iterator[None]:
    """Within it, shared_informer() gives one informer per (client, resource, scope): what a
    process's controllers set up inside it shares one list, one watch and one cache of each.
    A process opens one per lifetime of its controllers (the controller manager one per term
    as leader: a new term's controllers start from informers of their own)."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def shared_informer(
    client: KubeClient,
    api_version: str,
    plural: str,
    *,
    namespace: str | None = None,
    label_selector: str | None = None,
    field_selector: str | None = None,
    indexers: dict[str, Indexer] | None = None,
    keep: Callable[[JSON], JSON] | None = None,
    max_objects: int | None = None,
) -> Informer:
    """The informer of `plural` in that scope through `client` shared in this informer_scope():
    made on first use, the same one after (with `indexers` added). Each user runs it (`run()`
    is shared) and adds its own handlers, removing them if it stops before the scope ends.
    Every user of one asks for the same `keep` (equal), or gets a ValueError: a cache keeps one
    thing of each object. Of the `max_objects` its users ask for, the smallest holds. Outside
    any scope, a new informer of its own each time."""
    shared = _SHARED.get()
    path = resource_path(api_version, plural, namespace=namespace)
    scope = (id(client), path, label_selector, field_selector)
    informer = None if shared is None else shared.get(scope)
    if informer is None:
        informer = Informer(
            client,
            api_version,
            plural,
            namespace=namespace,
            label_selector=label_selector,
            field_selector=field_selector,
            keep=keep,
            max_objects=max_objects,
        )
        if shared is not None:
            shared[scope] = informer
    elif informer._keep != keep:
        raise ValueError(f"the informer of {informer.describe()} keeps something else already")
    elif max_objects is not None:
        informer.max_objects = min(informer.max_objects, max_objects)
    informer.store.add_indexers(indexers or {})
    return informer


class TooManyObjects(Exception):
    """A list or watch would make an informer hold more objects than its `max_objects`."""


def resource_version(obj: JSON) -> str:
    return str(obj.get("metadata", {}).get("resourceVersion", ""))


class Informer:
    """Watches one resource type in one scope. `run()` until cancelled; `synced` is set once
    the cache holds the first complete list."""

    def __init__(
        self,
        client: KubeClient,
        api_version: str,
        plural: str,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        field_selector: str | None = None,
        indexers: dict[str, Indexer] | None = None,
        watch_timeout: int = 300,
        keep: Callable[[JSON], JSON] | None = None,
        admit: Admission | None = None,
        max_objects: int | None = None,
    ) -> None:
        """`keep`: what of each object (just decoded) the cache keeps, when its users read only
        part of it (client-go's transform). `admit`: whether the cache takes an object in (as
        kept), asked before each one it would hold; one refused is not held, and its handlers
        hear of it as deleted if the cache held an earlier version of it. A bound on what a
        server that is not trusted can make a process hold. `max_objects` (None: no bound): the
        most objects the cache holds, the bound for a whole collection (PROVIDER_MAX_OBJECTS on
        a provider); a list or a watch that would go past it is a problem, listed again after a
        back-off, and meanwhile the cache keeps what it holds."""
        self.client = client
        self._keep = keep
        self._admit = admit
        self.max_objects = sys.maxsize if max_objects is None else max_objects
        self.path = resource_path(api_version, plural, namespace=namespace)
        self.params: dict[str, str] = {}
        if label_selector:
            self.params["labelSelector"] = label_selector
        if field_selector:
            self.params["fieldSelector"] = field_selector
        self.resource = plural
        self.store = Store(indexers)
        self.synced = asyncio.Event()
        self.watch_timeout = watch_timeout
        self._handlers: list[EventHandler] = []
        self._log = log.bind(resource=plural, namespace=namespace)
        self.lists = 0  # how many times it listed: a relist is worth knowing about
        self.problem: str | None = None  # why the cache does not follow the server now
        self.failing_since: float | None = None
        self._wake = asyncio.Event()  # ends a back-off pause early
        # The resourceVersion of the last event taken in: a watch that fails resumes there,
        # not where it opened (its events are in the cache already).
        self._watched_to: str | None = None
        # The one list-and-watch every caller of run() shares, and how many they are.
        self._following: asyncio.Task[None] | None = None
        self._runners = 0

    def add_handler(self, handler: EventHandler) -> None:
        """Handlers see every change from now on; the cache's current objects come as ADDED."""
        self._handlers.append(handler)
        for obj in self.store.objects():
            handler(ADDED, obj, None)

    def remove_handler(self, handler: EventHandler) -> None:
        """`handler` sees no more changes (a user of a shared informer that stops early)."""
        with contextlib.suppress(ValueError):
            self._handlers.remove(handler)

    def _notify(self, event_type: str, obj: JSON, old: JSON | None) -> None:
        for handler in tuple(self._handlers):  # a handler may remove itself
            try:
                handler(event_type, obj, old)
            except Exception:  # one broken handler must not stop the informer
                self._log.exception("event handler failed", event=event_type, key=object_key(obj))

    async def run(self) -> None:
        """Keeps the cache following the server until cancelled. Shared: the first caller
        starts the list and watch, later callers join the one running (their `synced` is its
        own), and it stops when the last of them is cancelled."""
        if self._following is None:
            self._following = asyncio.create_task(self._follow(), name=self.describe())
        following = self._following
        self._runners += 1
        try:
            await asyncio.shield(following)
        finally:
            self._runners -= 1
            if self._runners == 0 and self._following is following:
                self._following = None
                following.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await following

    async def _follow(self) -> None:
        """Lists, then watches from there, for ever. Nothing stops it but cancellation: a
        failure is retried with back-off (an unexpected one logged with its traceback and
        counted in vk_task_restarts_total, then listed afresh), a watch the server closes at
        once again and again is re-opened with back-off too, and 410 Gone lists again: at once
        if the watch lasted (it expired), after a back-off if it came as soon as listed."""
        backoff = MIN_BACKOFF
        resume_from: str | None = None
        # Listing again for a problem that a list does not end (410 Gone as soon as listed, too
        # many objects): only a watch that lasts does, or the problem would never last long
        # enough for /readyz to name it.
        listing_for_a_problem = False
        relisted_too_soon = False  # the problem: a watch that lasts, even unending, ends it
        RUNNING.add(self)
        try:
            while True:
                opened: float | None = None
                relisted = False
                try:
                    if resume_from is None:
                        relisted = True
                        resume_from = await self._relist()
                        if not listing_for_a_problem:
                            self._failing(None)
                    opened = time.monotonic()
                    self._watched_to = resume_from
                    resume_from = await self._watch(resume_from, settles=relisted_too_soon)
                    if time.monotonic() - opened >= QUICK_CLOSE_SECONDS:
                        self._failing(None)
                        listing_for_a_problem = relisted_too_soon = False
                        backoff = MIN_BACKOFF
                        continue
                    # Closed as soon as opened: a server or proxy refusing watches, not idle.
                    self._failing("the watch is closed as soon as it opens")
                    backoff = await self._pause(backoff)
                except Gone:
                    resume_from = None
                    watched = None if opened is None else time.monotonic() - opened
                    if not relisted or (watched is not None and watched >= QUICK_CLOSE_SECONDS):
                        self._log.info("watch expired, listing again")
                        listing_for_a_problem = relisted_too_soon = False
                        if watched is not None:
                            backoff = MIN_BACKOFF  # it watched a while: the server answers
                        continue
                    # Gone as soon as listed: a server that would have it list in a hot loop,
                    # every handler told of every object each time (client-go's reflector
                    # backs off before every relist; this, only before those that come fast).
                    listing_for_a_problem = relisted_too_soon = True
                    self._failing("410 Gone as soon as listed: listing again and again")
                    self._log.warning("watch gone as soon as listed", retry_in=backoff)
                    backoff = await self._pause(backoff)
                except TooManyObjects as error:
                    resume_from = None
                    # As after a Gone as soon as listed: a watch that then lasts, within the
                    # bound, ends the problem at its first event or bookmark.
                    listing_for_a_problem = relisted_too_soon = True
                    self._failing(str(error))
                    self._log.warning("too many objects, listing again", retry_in=backoff)
                    backoff = await self._pause(backoff)
                except (TimeoutError, ApiError, OSError, ValueError) as error:
                    if opened is not None and time.monotonic() - opened >= QUICK_CLOSE_SECONDS:
                        backoff = MIN_BACKOFF  # it watched a while: a new failure, not the last
                    if resume_from is not None:
                        resume_from = self._watched_to or resume_from
                    self._failing(str(error) or type(error).__name__)
                    self._log.warning(
                        "list/watch failed, retrying", error=str(error), retry_in=backoff
                    )
                    backoff = await self._pause(backoff)
                except asyncio.CancelledError:
                    raise
                except Exception as error:
                    self._failing(f"unexpected {type(error).__name__}: {error}")
                    TASK_RESTARTS.labels(f"informer:{self.resource}").inc()
                    self._log.exception(
                        "informer failed unexpectedly, listing again", retry_in=backoff
                    )
                    resume_from = None
                    backoff = await self._pause(backoff)
        finally:
            RUNNING.discard(self)

    async def _pause(self, backoff: float) -> float:
        """Waits `backoff` seconds, or less if `retry_now` is called; returns the next
        back-off: doubled, or from the start again when woken (the server is back, and may
        still need a moment: its storage initializing answers 429)."""
        self._wake.clear()
        try:
            await asyncio.wait_for(self._wake.wait(), backoff)
        except TimeoutError:
            return min(backoff * 2, MAX_BACKOFF)
        return MIN_BACKOFF

    def retry_now(self) -> None:
        """Ends the back-off pause it is in, if any: the server answers again."""
        self._wake.set()

    def _failing(self, problem: str | None) -> None:
        """Notes what keeps the cache from following the server (None: nothing), and since
        when."""
        if problem is None:
            self.failing_since, self.problem = None, None
        else:
            self.problem = problem
            if self.failing_since is None:
                self.failing_since = time.monotonic()

    def describe(self) -> str:
        return self.path + (f"?{urlencode(self.params)}" if self.params else "")

    def _kept(self, obj: JSON) -> JSON:
        """What the cache keeps of `obj`, just decoded: compacted, with the parts of the
        version it holds now that are unchanged (`keep` first: compacting what it drops would
        be work for nothing)."""
        like = self.store.get(object_key(obj))
        return compact(obj if self._keep is None else self._keep(obj), like)

    async def _relist(self) -> str:
        # Kept as they come (one by one, streamed; or page by page): a relist of ten thousand
        # pods never holds them all as decoded (with their managedFields, three times the
        # bytes kept) before the cache takes them.
        kept: list[JSON] = []
        # With an admission, each object is judged as it comes, against what this list took
        # before it: all of a list was held before the first was judged, and a provider's
        # million Events in a twin namespace, bounded to twenty thousand, were held whole.
        listed = self.store.empty_like() if self._admit is not None else None
        version = ""
        listing = self.client.current_objects(
            self.path, self.params, timeout_seconds=self.watch_timeout
        )
        try:
            async for page, page_version in listing:
                for obj in map(self._kept, page):
                    if listed is not None:
                        if not self._judge(obj, listed):
                            continue
                        listed.upsert(obj)
                    if len(kept) >= self.max_objects:
                        REFUSED.labels(self.client.name, resource_of(self.path)).inc()
                        raise TooManyObjects(f"the list has more than {self.max_objects} objects")
                    kept.append(obj)
                version = page_version
        finally:
            # Closed now when left early (too many objects), not when collected: a stream that
            # never ends is not left open through the back-off.
            if isinstance(listing, AsyncGenerator):
                await listing.aclose()
        self.lists += 1
        # What is gone, or refused now, goes first, before what is new is taken.
        for key in set(self.store.keys()) - {object_key(obj) for obj in kept}:
            gone = self.store.delete(key)
            if gone is not None:
                self._notify(DELETED, gone, gone)
        for obj in kept:
            self._take(obj, relisted=True)
        self.synced.set()
        return version

    def _judge(self, obj: JSON, cached: Store) -> bool:
        """Whether the admission, if any, takes `obj` into `cached`; a refusal is counted."""
        if self._admit is None or self._admit(obj, cached):
            return True
        REFUSED.labels(self.client.name, resource_of(self.path)).inc()
        return False

    def _take(self, obj: JSON, *, relisted: bool = False) -> None:
        """`obj` into the cache if admitted (of a relisted object, it was, as listed), and its
        handlers told (of a relisted object, only if it changed). One refused is not held: if
        the cache held an earlier version of it, that is gone, as for a DELETED event."""
        if not relisted and not self._judge(obj, self.store):
            gone = self.store.delete(object_key(obj))
            if gone is not None:
                self._notify(DELETED, gone, gone)
            return
        if len(self.store) >= self.max_objects and self.store.get(object_key(obj)) is None:
            # A new object past the bound: not held (those held still follow their changes
            # until then), and the cache listed again after a back-off.
            REFUSED.labels(self.client.name, resource_of(self.path)).inc()
            raise TooManyObjects(f"more than {self.max_objects} objects are watched")
        old = self.store.upsert(obj)
        if old is None:
            self._notify(ADDED, obj, None)
        elif not relisted or resource_version(old) != resource_version(obj):
            self._notify(MODIFIED, obj, old)

    async def _watch(self, version: str, *, settles: bool = False) -> str:
        """Watches from `version` until the server closes the stream; returns the last
        resourceVersion seen, to resume from. `settles`: an event once it has lasted
        QUICK_CLOSE_SECONDS ends the informer's problem (a watch may last minutes)."""
        settled_at = time.monotonic() + QUICK_CLOSE_SECONDS if settles else None
        params: dict[str, Any] = {**self.params, "resourceVersion": version}
        # Bound once a watch: labels() looks its child up again on every call.
        counted = {
            event_type: WATCH_EVENTS.labels(self.client.name, resource_of(self.path), event_type)
            for event_type in (ADDED, MODIFIED, DELETED, BOOKMARK)
        }
        async for event in self.client.watch(self.path, params, timeout_seconds=self.watch_timeout):
            event_type, obj = event["type"], event["object"]
            version = resource_version(obj) or version
            if event_type in counted:
                counted[event_type].inc()
            if event_type == DELETED:
                obj = self._kept(obj)
                old = self.store.delete(object_key(obj))
                self._notify(DELETED, obj, old)
            elif event_type != BOOKMARK:
                self._take(self._kept(obj))
            self._watched_to = version
            if settled_at is not None and time.monotonic() >= settled_at:
                self._failing(None)
                settled_at = None
        return version
