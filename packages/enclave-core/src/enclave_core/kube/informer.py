"""List-then-watch into memory: what level-based controllers reconcile from.

An informer keeps the current set of objects of one resource and calls ``on_change`` after every change. It
follows the apiserver's resourceVersion contract:

- the initial list is paginated (``limit``/``continue``, every page from the same snapshot); a continue
  token that expired (410) restarts the list, since pages of two snapshots must not be mixed;
- the watch starts at the list's resourceVersion and resumes after a normal end (server timeout) from the
  last resourceVersion seen, bookmarks included, so no event is lost or replayed;
- a watch that expired (410 Gone, as an ERROR event or as the answer to the watch request) relists at once;
  any other failure is logged and relists after a backoff (0.2 s doubling to 5 s, reset only by a watch
  that worked, so a watch failing right after each list cannot turn into a relist storm). A relist diffs against the
  cache, so objects deleted while the watch was down are reported too;
- whatever the watch says, the cache is relisted once per ``spec.cacheInvalidation`` (less a random part of
  it, :mod:`enclave_core.invalidation`): an event the watch never delivered is found by that relist's diff.

``on_change`` runs for every changed key; an exception in it is logged with its traceback and counted
(``enclave_informer_handler_errors_total``), never swallowed silently and never a reason to relist (the
cache is fine; a handler bug must not turn into a relist loop against the apiserver). A controller that
reconciles from the cache on every change is therefore level-based by construction.
"""

from __future__ import annotations

import asyncio
import logging
import sys
import threading
import weakref
from collections.abc import Callable
from typing import Any

import aiohttp
from prometheus_client import Counter

from enclave_core import invalidation
from enclave_core.kube.rest import JSON, Kube, KubeError

log = logging.getLogger(__name__)

PAGE_SIZE = 500
"""Objects per list page: what client-go's reflector asks for."""

RELISTS = Counter("enclave_informer_relists_total", "Lists after start, by why", ["informer", "reason"])
HANDLER_ERRORS = Counter("enclave_informer_handler_errors_total", "Exceptions raised by on_change", ["informer"])


def object_key(obj: JSON) -> str:
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


class _Component(threading.local):
    """The informers of the component running on this thread, and what wakes when they all work again. A
    process of its own has one; ``enclave_core.runtime.host`` runs each hosted component on a thread and loop
    of its own: one component's failing watch says nothing of another's caches, and a callback may only wake
    streams on its own loop."""

    def __init__(self) -> None:
        self.live: weakref.WeakSet[Informer] = weakref.WeakSet()
        self.resumed: list[Callable[[], None]] = []


_here = _Component()


def watching() -> bool:
    """No informer of this component is failing: every cache is (as far as it can tell) current. A snapshot
    publisher vouches for its state only while this holds (``SnapshotHub.confirming``)."""
    return not any(informer.failing for informer in list(_here.live))


def on_watching_resumed(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` each time :func:`watching` turns true again (the last failing informer listed); returns
    what unregisters it. A snapshot hub wakes its streams with it (``SnapshotHub.reconfirm``), so subscribers
    learn at once that the publisher vouches again instead of up to a heartbeat later."""
    resumed = _here.resumed
    resumed.append(callback)

    def remove() -> None:
        if callback in resumed:
            resumed.remove(callback)

    return remove


class Informer:
    """The live set of one resource, kept current by a watch."""

    def __init__(
        self,
        kube: Kube,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_change: Callable[[str], None] | None = None,
        name: str = "",
        page_size: int = PAGE_SIZE,
        transform: Callable[[JSON], JSON] | None = None,
    ) -> None:
        """``transform`` trims each object before it is cached (e.g. :func:`keep_managed_fields`): a controller
        watching thousands of objects keeps only what it reads."""
        self.kube = kube
        self.transform = transform
        self.path = path
        self.label_selector = label_selector
        self.field_selector = field_selector
        self.on_change = on_change or (lambda key: None)
        self.name = name or path
        self.page_size = page_size
        self.items: dict[str, JSON] = {}
        self.synced = asyncio.Event()
        self.resource_version = ""
        """The resourceVersion the cache is current to (the list's, then each watch event's)."""
        self._failing = False
        self._stored: dict[str, int] = {}
        """Key -> resourceVersion of the object :meth:`store` cached, until its watch event arrives."""
        self._deadline = invalidation.Deadline()
        """When the cache is next relisted whatever the watch says (``spec.cacheInvalidation``)."""
        _here.live.add(self)

    @property
    def failing(self) -> bool:
        """The last list or watch failed and no list has worked since: the cache may be falling behind."""
        return self._failing

    @failing.setter
    def failing(self, value: bool) -> None:
        blind = not watching()
        changed, self._failing = value != self._failing, value
        if changed:
            self._failing_changed()
        if blind and watching():
            for callback in list(_here.resumed):
                try:
                    callback()
                except Exception:
                    log.exception("a watching-resumed callback failed", extra={"informer": self.name})

    def _failing_changed(self) -> None:
        """Called on every change of :attr:`failing` (a host's shared informer tells its readers)."""

    def get(self, key: str) -> JSON | None:
        return self.items.get(key)

    def values(self) -> list[JSON]:
        return list(self.items.values())

    def store(self, obj: JSON, *, notify: bool = True) -> JSON:
        """Cache an object the caller just wrote (its API response), trimmed like a watched one, so the cache
        is current before the watch event arrives and never holds more than the watch would put there.

        The watch events of that write and of any earlier one to the same object (a create, then a status patch)
        arrive later and are not applied (:meth:`_echo`): the cache never steps back to the pre-status object,
        which made a controller write the same status twice. ``notify`` calls ``on_change`` now (the write
        changed what it watches); a caller that needs no look at its own write passes False."""
        if self.transform is not None:
            obj = self.transform(obj)
        key = object_key(obj)
        self.items[key] = obj
        version = _version(obj)
        if version is not None:
            self._stored[key] = version
        if notify:
            self._notify(key)
        return obj

    def apply_event(self, kind: str, obj: JSON) -> None:
        """One watch event (ADDED, MODIFIED, DELETED) into the cache, then ``on_change``; the echo of a write the
        caller already cached with :meth:`store` changes nothing and calls nothing."""
        key = object_key(obj)
        if kind == "DELETED":
            self._stored.pop(key, None)
            self.items.pop(key, None)
        elif self._echo(key, obj):
            return  # before the transform: an echo costs no trimming either
        else:
            self.items[key] = self.transform(obj) if self.transform is not None else obj
        self._notify(key)

    def _echo(self, key: str, obj: JSON) -> bool:
        """Whether a watch event is the echo of (or older than) what :meth:`store` cached for ``key``.
        resourceVersions are compared as numbers, as etcd issues them; one that is not a number is never an echo."""
        stored = self._stored.get(key)
        if stored is None:
            return False
        version = _version(obj)
        if version is None or version > stored:
            del self._stored[key]
            return False
        if version == stored:
            del self._stored[key]
        return True

    async def run(self) -> None:
        # The backoff resets only once a watch delivered an event or ended normally, not after a list alone:
        # a watch that fails at once after every successful list must not relist five times a second.
        backoff = 0.2

        def reset() -> None:
            nonlocal backoff
            backoff = 0.2

        try:
            while True:
                due: asyncio.Timeout | None = None
                try:
                    await self._relist()
                    self.failing = False
                    self._deadline.restart()
                    async with invalidation.expiring(self._deadline) as due:
                        while True:
                            await self._watch(reset)
                            reset()  # a watch that ended normally: the path to the apiserver is healthy
                except asyncio.CancelledError:
                    raise
                except _WatchExpiredError:
                    RELISTS.labels(self.name, "expired").inc()
                    log.info("watch expired (410); relisting", extra={"informer": self.name})
                except Exception as err:
                    if due is not None and due.expired():
                        # spec.cacheInvalidation ran out (the TimeoutError of ``expiring``, not of a read): relist
                        # at once; what the watch missed is reported by the relist's diff.
                        RELISTS.labels(self.name, "invalidation").inc()
                        invalidation.invalidated(self.name)
                        log.debug("cache invalidated; relisting", extra={"informer": self.name})
                        continue
                    # Blind only when the apiserver cannot be reached or answers 5xx; a 4xx is an answer (a
                    # resource not served, a right missing), reported in the log, and says nothing about the rest.
                    self.failing = self.failing or _unreachable(err)
                    RELISTS.labels(self.name, "error").inc()
                    log.warning(
                        "watch failed; relisting",
                        # Expected trouble (the API's answers, the network) in one line; anything else with its
                        # traceback.
                        exc_info=not isinstance(err, KubeError | OSError | TimeoutError | aiohttp.ClientError),
                        extra={"informer": self.name, "error": str(err) or type(err).__name__, "retry_in": backoff},
                    )
                    await asyncio.sleep(backoff)
                    backoff = min(5.0, backoff * 2)
        finally:
            self.failing = False  # a stopped informer no longer speaks for the process

    async def _list(self) -> tuple[list[JSON], str]:
        """Every object, page by page from one snapshot; restarts when a continue token expired."""
        while True:
            items: list[JSON] = []
            token: str | None = None
            try:
                while True:
                    page = await self.kube.list(
                        self.path,
                        label_selector=self.label_selector,
                        field_selector=self.field_selector,
                        limit=self.page_size,
                        continue_token=token,
                    )
                    items += _typed(page)
                    meta = page.get("metadata") or {}
                    token = meta.get("continue") or None
                    if token is None:
                        return items, str(meta["resourceVersion"])
            except KubeError as err:
                if err.status != 410 or token is None:
                    raise
                log.info("list continue token expired; listing again", extra={"informer": self.name})

    async def _relist(self) -> None:
        listing, version = await self._list()
        if self.transform is not None:
            listing = [self.transform(obj) for obj in listing]
        fresh = {object_key(obj): obj for obj in listing}
        changed = (set(fresh) ^ set(self.items)) | {
            key for key in fresh.keys() & self.items.keys() if fresh[key] != self.items[key]
        }
        self.items = fresh
        self._stored.clear()
        self.resource_version = version
        self.synced.set()
        for key in sorted(changed):
            self._notify(key)

    async def _watch(self, backoff_reset: Callable[[], None] = lambda: None) -> None:
        """One watch request from ``resource_version``; returns when the server ends it normally."""
        try:
            events = self.kube.watch(
                self.path,
                resource_version=self.resource_version,
                label_selector=self.label_selector,
                field_selector=self.field_selector,
            )
            async for event in events:
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise _WatchExpiredError
                    raise KubeError(int(obj.get("code", 500)), obj.get("reason", ""), obj.get("message", ""), obj)
                version = (obj.get("metadata") or {}).get("resourceVersion")
                if kind == "BOOKMARK":
                    if version:
                        self.resource_version = version
                    continue
                self.apply_event(str(kind), obj)
                if version:
                    self.resource_version = version
                backoff_reset()
        except KubeError as err:
            if err.status == 410:
                raise _WatchExpiredError from err
            raise

    def _notify(self, key: str) -> None:
        try:
            self.on_change(key)
        except Exception:
            HANDLER_ERRORS.labels(self.name).inc()
            log.exception("informer handler failed", extra={"informer": self.name, "key": key})


def keep_managed_fields(*managers: str) -> Callable[[JSON], JSON]:
    """An informer ``transform`` that keeps only the ``metadata.managedFields`` entries of ``managers`` (none:
    drops them all), then applies :func:`compact`. managedFields are often most of a small object's size,
    and a controller reads at most its own entries (:mod:`enclave_core.kube.managedfields`)."""
    wanted = set(managers)

    def trim(obj: JSON) -> JSON:
        meta = obj.get("metadata")
        if isinstance(meta, dict) and "managedFields" in meta:
            kept = [entry for entry in meta["managedFields"] or [] if entry.get("manager") in wanted]
            if kept:
                meta["managedFields"] = kept
            else:
                del meta["managedFields"]
        compacted: JSON = compact(obj)
        return compacted

    return trim


COMPACT_LENGTH = 64
"""Strings up to this length are interned by :func:`compact` (keys, kinds, roles, label values); longer ones
(messages, CEL expressions) are seldom repeated."""


def compact(value: Any) -> Any:
    """The same JSON value with its dictionary keys and short strings interned: one object per distinct string
    across the whole cache. A JSON decoder makes fresh strings for every object it decodes, so 10,000 cached
    RoleBindings held 10,000 copies each of ``metadata``, ``roleRef``, ``ClusterRole``, the group and the role
    names (at 10,000 namespaces: most of enclave-tenants' caches). Equal values compare equal as before."""
    if isinstance(value, dict):
        return {sys.intern(key) if isinstance(key, str) else key: compact(item) for key, item in value.items()}
    if isinstance(value, list):
        return [compact(item) for item in value]
    if isinstance(value, str) and len(value) <= COMPACT_LENGTH:
        return sys.intern(value)
    return value


class SharedDict(dict[str, Any]):
    """A dict :func:`share` may hand to many cached objects at once: a plain dict cannot be weakly referenced,
    and the table of shared values must forget one when its last holder goes. Never mutate one."""

    __slots__ = ("__weakref__",)


class SharedList(list[Any]):
    """A list :func:`share` may hand to many cached objects at once (see :class:`SharedDict`)."""

    __slots__ = ("__weakref__",)


PER_OBJECT_KEYS = frozenset({"resourceVersion", "creationTimestamp", "time"})
"""A mapping holding one of these (an object's ``metadata``, a managedFields entry) belongs to one object only:
:func:`share` keeps it apart instead of keeping a table entry no other object will ever match."""

_UNINTERNED = PER_OBJECT_KEYS | {"uid"}
"""Values of these keys are (nearly) unique per object: 40,000 resourceVersions, uids and times interned made
Python's table of interned strings ~4 MB at 10,000 namespaces. Still shared by value where they repeat (an
owner reference's uid)."""

_SHARED: weakref.WeakValueDictionary[tuple[Any, ...], SharedDict | SharedList] = weakref.WeakValueDictionary()


def share(value: Any) -> Any:
    """:func:`compact`, and one object for every distinct subtree across every cache that uses it: the labels,
    owner references, roleRef, subjects and managedFields paths that a tenant's namespaces, RoleBindings and
    RuleStatuses repeat are held once, not once per object (at 10,000 namespaces, ~20 of enclave-tenants' ~57 MB of cached
    objects; docs/benchmarks.md). Only for caches nobody mutates: a shared subtree changed in place would
    change every object holding it. The top-level object and every mapping holding one of
    :data:`PER_OBJECT_KEYS` stay the object's own."""
    return _share(value, True)[0]


def _share(value: Any, top: bool) -> tuple[Any, Any]:
    """``(canonical value, key)``; the key is None for a value that is its object's own (and so is any subtree
    holding it), else a hashable naming the value: the string itself, ``(type, value)`` for other scalars (so
    ``True`` and ``1`` stay apart), ``("o", id)`` for a shared subtree (alive while its holders are)."""
    if isinstance(value, str):
        if len(value) <= COMPACT_LENGTH:
            value = sys.intern(value)
        return value, value
    if isinstance(value, dict):
        items: list[tuple[str, Any]] = []
        keys: list[tuple[str, Any]] = []
        own = top or not PER_OBJECT_KEYS.isdisjoint(value)
        for name, item in value.items():
            name = sys.intern(name) if isinstance(name, str) else name
            if name in _UNINTERNED and isinstance(item, str):
                canonical, key = item, item  # one object's own value: interning it only grows the intern table
            else:
                canonical, key = _share(item, False)
            items.append((name, canonical))
            if key is None:
                own = True
            elif not own:
                keys.append((name, key))
        if own:
            return dict(items), None
        table_key: tuple[Any, ...] = ("d", *keys)
        shared = _SHARED.get(table_key)
        if shared is None:
            shared = _SHARED[table_key] = SharedDict(items)
        return shared, ("o", id(shared))
    if isinstance(value, list):
        elements: list[Any] = []
        element_keys: list[Any] = []
        own = top
        for item in value:
            canonical, key = _share(item, False)
            elements.append(canonical)
            if key is None:
                own = True
            else:
                element_keys.append(key)
        if own:
            return elements, None
        list_key: tuple[Any, ...] = ("l", *element_keys)
        shared = _SHARED.get(list_key)
        if shared is None:
            shared = _SHARED[list_key] = SharedList(elements)
        return shared, ("o", id(shared))
    return value, (type(value), value)


def _version(obj: JSON) -> int | None:
    value = (obj.get("metadata") or {}).get("resourceVersion")
    try:
        return int(value) if value else None
    except ValueError:
        return None


def _typed(page: JSON) -> list[JSON]:
    """The page's items, each with the ``apiVersion`` and ``kind`` the list response states once for all of
    them (``ConfigMapList`` -> ``ConfigMap``), as client-go's unstructured lists do. Watch events carry both
    on every object; without this an object read from a list (after a restart or a relist) would differ from
    the same object seen in a watch event, and code that keys objects by kind would not recognise it."""
    items: list[JSON] = page.get("items") or []
    version, kind = page.get("apiVersion"), str(page.get("kind") or "")
    if version and kind.endswith("List"):
        for item in items:
            item.setdefault("apiVersion", version)
            item.setdefault("kind", kind[: -len("List")])
    return items


def _unreachable(err: Exception) -> bool:
    if isinstance(err, KubeError):
        return err.status >= 500
    return isinstance(err, OSError | TimeoutError | aiohttp.ClientError)


class _WatchExpiredError(Exception):
    """The watch's resourceVersion is too old: relist."""
