"""One informer per kind for all the components of a host, each reading it as its own cache.

``enclave-host`` (:mod:`enclave_core.runtime.host`) runs several controllers in one interpreter, each on a
thread and event loop of its own. Five of them watch every namespace, three every Tenant, two every
RuleStatus: at 1,000 tenants x 10 namespaces one copy per component of the same objects was most of the host's
memory (issue 33; docs/benchmarks.md, "Memory per shape"). :func:`informer` gives a controller an ordinary
:class:`~enclave_core.kube.informer.Informer` in a process of its own, and inside a host (once
:func:`install` was called) a :class:`SharedView` of the host's one upstream informer for the same path,
selectors and ``transform`` (so components share a cache only where they cache the same projection of it:
:mod:`enclave_core.kube.projections`).

How the components stay apart:

- **The upstream runs on the hub's own thread and loop**, with its own connection. No component's loop lists
  or watches for another: a component whose loop is blocked delays nobody's cache but its own.
- **Events are handed over, never pushed into a consumer's cache.** The upstream's ``on_change`` adds the key
  to each view's pending set and, if that view has no hand-over queued yet, queues one on the view's loop
  (``call_soon_threadsafe``, which never blocks). A stalled consumer only grows its pending set, bounded by
  the number of objects (a key changed many times is one entry); when its loop runs again it reads each key's
  *current* object from the upstream and calls its ``on_change``: level-based, as every controller is.
- **A view's cache is its own dict, changed only on its own loop**, as an informer's is: a controller
  iterating its cache never sees it change under it. The dict holds the upstream's objects, not copies: they
  are built by :func:`~enclave_core.kube.informer.share` and nobody mutates them. Reading the upstream's dict
  from a consumer's thread (one ``get``, or one ``dict()`` copy at first sync) is a single C-level operation
  under the interpreter lock: it never sees a half-changed dict.
- **Each view keeps the informer contract**: ``synced`` once the upstream has listed (then ``on_change`` for
  every key, as a first list does), ``failing`` following the upstream's (a component's
  :func:`~enclave_core.kube.informer.watching` still speaks for its own caches), :meth:`Informer.store` of a
  component's own write with the watch echo skipped (the echo's shared object then replaces the stored copy),
  and ``spec.cacheInvalidation`` at the component's own period: when a view's deadline runs out it asks the
  upstream to relist, whose diff reaches every view.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Callable, Hashable
from typing import Any

from enclave_core import invalidation
from enclave_core.kube.connection import Connection
from enclave_core.kube.informer import Informer, _version
from enclave_core.kube.rest import JSON, Kube

log = logging.getLogger(__name__)

FIELD_MANAGER = "enclave-host"
"""The hub's connection only reads; a field manager is what :class:`Kube` asks of every connection."""

_Key = tuple[str, str | None, str | None, int, Hashable]
"""Path, label selector, field selector, page size, transform: what makes two informers the same cache."""


class _Entry:
    """One shared cache: its upstream informer on the hub's loop and the views reading it."""

    def __init__(self, key: _Key) -> None:
        self.key = key
        self.views: set[SharedView] = set()
        self.upstream: _Upstream | None = None
        self.task: asyncio.Task[None] | None = None
        self.generation = 0
        """Lists the upstream completed: a view that saw fewer has a fresh read to take (first sync, its
        invalidation deadline)."""
        self.relist_wanted = False

    def offer(self, key: str | None, views: list[SharedView]) -> None:
        for view in views:
            view.offer(key)


class _Upstream(Informer):
    """The hub's informer of one shared cache: every change, list and failure is offered to the views."""

    def __init__(self, hub: SharedInformers, entry: _Entry, kube: Kube, **kwargs: Any) -> None:
        super().__init__(kube, **kwargs)
        self._hub = hub
        self._entry = entry

    def _failing_changed(self) -> None:
        self._entry.offer(None, self._hub.views(self._entry))

    async def _relist(self) -> None:
        await super()._relist()
        self._entry.generation += 1
        self._entry.offer(None, self._hub.views(self._entry))

    def relist_now(self) -> None:
        """A view's ``spec.cacheInvalidation`` ran out: the watch ends and the cache is listed again."""
        invalidation.expire(self._deadline)


class SharedView(Informer):
    """A component's cache of a kind the host watches once: the :class:`Informer` API, fed by the hub.

    ``run`` subscribes and waits (it lists and watches nothing itself); everything else is the informer's own,
    on the component's loop. Construct through :func:`informer`."""

    def __init__(self, hub: SharedInformers, kube: Kube, path: str, **kwargs: Any) -> None:
        super().__init__(kube, path, **kwargs)
        self._hub = hub
        self._entry: _Entry | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._pending: set[str] = set()
        self._queued = False
        self._generation = 0
        self._fresh = asyncio.Event()

    @property
    def key(self) -> _Key:
        return (self.path, self.label_selector, self.field_selector, self.page_size, self.transform)

    async def run(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._entry = self._hub.subscribe(self)
        self.offer(None)  # the upstream may have listed already (another component subscribed first)
        try:
            while True:
                self._fresh.clear()
                try:
                    async with invalidation.expiring(self._deadline):
                        await self._fresh.wait()  # the upstream listed: the deadline starts again
                except TimeoutError:
                    # This component's period ran out with no list since: the upstream lists for everyone.
                    self._hub.relist(self._entry)
                    self._deadline.restart()  # one request per period; the list's arrival restarts it too
        finally:
            self._hub.unsubscribe(self)
            self.failing = False  # a stopped informer no longer speaks for the component

    def offer(self, key: str | None) -> None:
        """From the hub's thread: ``key`` changed (None: the upstream listed, or its ``failing`` changed). Never
        blocks: the key joins the pending set, and one hand-over at a time is queued on the view's loop."""
        with self._lock:
            if key is not None:
                self._pending.add(key)
            if self._queued or self._loop is None:
                return
            self._queued = True
        with contextlib.suppress(RuntimeError):  # the component's loop closed: it is stopping and unsubscribes
            self._loop.call_soon_threadsafe(self._take)

    def pending(self) -> int:
        """Keys handed over and not yet taken by the component's loop (a stalled component's backlog)."""
        with self._lock:
            return len(self._pending)

    def _take(self) -> None:
        """On the component's loop: what the upstream changed since the last hand-over, into this cache."""
        with self._lock:
            keys, self._pending = self._pending, set()
            self._queued = False
        entry = self._entry
        upstream = entry.upstream if entry is not None else None
        if entry is None or upstream is None:
            return
        self.failing = upstream.failing
        if entry.generation != self._generation:
            self._generation = entry.generation
            self._deadline.restart()
            self._fresh.set()
            if not self.synced.is_set():
                self._first(upstream)
                return
        items = upstream.items
        for key in sorted(keys):
            self._apply(key, items.get(key), upstream)

    def _first(self, upstream: _Upstream) -> None:
        """The upstream's whole cache, as an informer's first list: every key reported."""
        fresh = dict(upstream.items)
        changed = set(fresh) | set(self.items)
        self.items = fresh
        self._stored.clear()
        self.resource_version = upstream.resource_version
        self.synced.set()
        for key in sorted(changed):
            self._notify(key)

    def _apply(self, key: str, obj: JSON | None, upstream: _Upstream) -> None:
        held = self.items.get(key)
        stored = self._stored.get(key)
        if obj is None:
            if stored is not None and not _newer(upstream.resource_version, stored):
                return  # our own write is newer than what the upstream has seen yet
            self._stored.pop(key, None)
            if held is None:
                return
            del self.items[key]
        elif held is obj:
            return
        else:
            version = _version(obj)
            if stored is not None:
                if version is not None and version <= stored:
                    if version == stored:  # the echo of our write: hold the shared object, nothing changed
                        del self._stored[key]
                        self.items[key] = obj
                    return
                del self._stored[key]
            self.items[key] = obj
        self.resource_version = upstream.resource_version
        self._notify(key)


def _newer(resource_version: str, stored: int) -> bool:
    try:
        return int(resource_version) >= stored
    except ValueError:
        return True


class SharedInformers:
    """The host's shared caches: a thread and loop of their own, one connection, one upstream per key, made by
    the first view that subscribes and stopped when the last one leaves."""

    def __init__(
        self,
        connect: Callable[[], Connection],
        loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
    ) -> None:
        self._connect = connect
        self._loop_factory = loop_factory
        self._lock = threading.Lock()
        self._entries: dict[_Key, _Entry] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._kube: Kube | None = None
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None

    def start(self) -> SharedInformers:
        self._thread = threading.Thread(target=self._run, name="enclave-informers", daemon=True)
        self._thread.start()
        self._started.wait()
        if self.error is not None:
            raise RuntimeError("the shared informers could not start") from self.error
        return self

    def _run(self) -> None:
        try:
            with asyncio.Runner(loop_factory=self._loop_factory) as runner:
                runner.run(self._serve())
        except BaseException as err:
            self.error = err
            log.error("shared informers stopped", exc_info=err)
        finally:
            self._started.set()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        connection = self._connect()
        self._kube = Kube(connection, field_manager=FIELD_MANAGER)
        self._loop = asyncio.get_running_loop()
        self._started.set()
        try:
            await self._stop.wait()
        finally:
            with self._lock:
                entries = list(self._entries.values())
            tasks = [entry.task for entry in entries if entry.task is not None]
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await connection.close()

    def stop(self) -> None:
        """Stop every upstream and the hub's loop (from any thread); the views' ``run`` keeps waiting."""
        loop, stop = self._loop, self._stop
        if loop is not None and stop is not None:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(stop.set)
        if self._thread is not None:
            self._thread.join()

    def views(self, entry: _Entry) -> list[SharedView]:
        with self._lock:
            return list(entry.views)

    def subscribe(self, view: SharedView) -> _Entry:
        """From a component's thread: the shared cache of ``view.key``, its upstream started if it is the first."""
        key = view.key
        with self._lock:
            entry = self._entries.get(key)
            first = entry is None
            if entry is None:
                entry = self._entries[key] = _Entry(key)
            entry.views.add(view)
        if first:
            self._call(self._start_upstream, entry, view)
        return entry

    def unsubscribe(self, view: SharedView) -> None:
        entry = view._entry
        if entry is None:
            return
        with self._lock:
            entry.views.discard(view)
            last = not entry.views and self._entries.get(entry.key) is entry
            if last:
                del self._entries[entry.key]
        if last:
            self._call(self._stop_upstream, entry)

    def relist(self, entry: _Entry) -> None:
        """From a component's thread: list ``entry`` again (a view's invalidation period ran out)."""
        self._call(self._relist_upstream, entry)

    def _call(self, callback: Callable[..., None], *args: Any) -> None:
        loop = self._loop
        if loop is None:
            raise RuntimeError("the shared informers are not running")
        with contextlib.suppress(RuntimeError):  # the hub stopped: the host is going away
            loop.call_soon_threadsafe(callback, *args)

    def _start_upstream(self, entry: _Entry, view: SharedView) -> None:
        assert self._kube is not None
        if entry.task is not None:
            return
        with self._lock:
            if self._entries.get(entry.key) is not entry:
                return  # every view left before the hub's loop got to it
        path, label_selector, field_selector, page_size, _ = entry.key
        entry.upstream = _Upstream(
            self,
            entry,
            self._kube,
            path=path,
            label_selector=label_selector,
            field_selector=field_selector,
            page_size=page_size,
            transform=view.transform,
            name=view.name,
            on_change=lambda key: entry.offer(key, self.views(entry)),
        )
        entry.task = asyncio.get_running_loop().create_task(entry.upstream.run(), name=f"shared-{view.name}")

    def _stop_upstream(self, entry: _Entry) -> None:
        if entry.task is not None:
            entry.task.cancel()

    def _relist_upstream(self, entry: _Entry) -> None:
        if entry.upstream is not None:
            entry.upstream.relist_now()


_hub: SharedInformers | None = None


def install(hub: SharedInformers | None) -> None:
    """Make :func:`informer` share through ``hub`` (None: stop sharing). The host calls it before it starts any
    component, and only when every hosted component connects to kube-apiserver as the same identity."""
    global _hub
    _hub = hub


def informer(kube: Kube, path: str, **options: Any) -> Informer:
    """An informer of ``path`` (``options``: :class:`Informer`'s keyword arguments): shared with the other
    components of a host that watch the same path, selectors and ``transform`` (pass one of
    :mod:`enclave_core.kube.projections` for that), or a plain one. The caller treats it as its own informer and
    never mutates what it caches."""
    if _hub is None:
        return Informer(kube, path, **options)
    return SharedView(_hub, kube, path, **options)
