"""Lists and watches of cluster-scoped kinds for tenant users, answered from memory.

kube-apiserver cannot narrow a list of a cluster-scoped kind by RBAC, so a tenant owner is forbidden to list
namespaces (or nodes) at all. The proxy answers those requests itself: one informer per kind (the proxy's own
right to list and watch it) and the snapshots say which objects exist and which the caller may see
(:class:`enclave_proxy.visibility.Scope`: its tenants' namespaces; the nodes its tenants' node selectors
match); label and field selectors apply as kube-apiserver applies them. No API request is made per list or
watch.

A watch is level-based: each keeps the objects it has shown its client, and on any change (an object event,
a new snapshot) re-evaluates the names concerned against "exists, is visible to the caller, matches the
selectors": newly visible names are ADDED, changed ones MODIFIED, ones that stopped being visible (deleted,
left the tenant, or no longer match) DELETED, as kube-apiserver reports an object leaving a filtered watch.
Changes that happen while a slow client is being written to coalesce into one event per name (the latest
state), so a watch holds at most one pending entry per object and never an unbounded queue.

A watch's ``resourceVersion`` is honoured only as "from now" (the proxy keeps no history): empty or ``0``
sends the current objects as ADDED first; any other value starts with what the caller listed being current.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson
from aiohttp import web
from prometheus_client import Counter, Gauge

from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import Kube
from enclave_proxy.query import NAMESPACE_FIELDS, NODE_FIELDS, FieldGetter, Selection
from enclave_proxy.tables import NAMESPACE_TABLE, NODE_TABLE, TableSpec, table
from enclave_proxy.visibility import Scope

log = logging.getLogger(__name__)

JSON = dict[str, Any]
WATCHES = Gauge("enclave_proxy_watches", "Tenant users' watches answered by the proxy, open", ["kind"])
EVENTS = Counter("enclave_proxy_watch_events_total", "Events sent on tenant users' watches", ["kind", "type"])

DEFAULT_WATCH_SECONDS = 1800
"""A watch without ``timeoutSeconds`` ends after this long (kube-apiserver: 30 to 60 minutes)."""
BOOKMARK_SECONDS = 60.0
"""How often a watch that allows bookmarks gets one; it also checks that the client is still there."""
INITIAL_EVENTS_END = "k8s.io/initial-events-end"


@dataclass(frozen=True)
class Kind:
    """A cluster-scoped core kind the proxy answers tenant users' lists of."""

    name: str
    resource: str
    fields: Mapping[str, FieldGetter]
    table: TableSpec

    @property
    def paths(self) -> tuple[str, str]:
        return f"/api/v1/{self.resource}", f"/api/v1/watch/{self.resource}"

    def typed(self, obj: JSON) -> JSON:
        if obj.get("kind") == self.name and obj.get("apiVersion") == "v1":
            return obj
        return {"kind": self.name, "apiVersion": "v1", **obj}


NAMESPACES = Kind("Namespace", "namespaces", NAMESPACE_FIELDS, NAMESPACE_TABLE)
NODES = Kind("Node", "nodes", NODE_FIELDS, NODE_TABLE)


def _name(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class ClusterIndex:
    """Every object of one kind (an informer) and the tenant watches to wake when one changes."""

    def __init__(self, kube: Kube, kind: Kind) -> None:
        self.kind = kind
        path = kind.paths[0]
        self.informer = Informer(kube, path, on_change=self._changed, name=f"proxy-{kind.resource}")
        self.watches: set[ClusterWatch] = set()

    @property
    def synced(self) -> asyncio.Event:
        return self.informer.synced

    async def run(self) -> None:
        await self.informer.run()

    def _changed(self, key: str) -> None:
        for watch in self.watches:
            watch.touch(key)

    def snapshots_changed(self) -> None:
        """A Tenancy or configuration snapshot arrived: every watch re-evaluates what its caller sees."""
        for watch in self.watches:
            watch.touch_all()

    def visible(self, scope: Scope, selection: Selection) -> list[JSON]:
        """The objects the caller may see that exist and match, sorted by name."""
        found = []
        for name in sorted(scope.candidates(self.informer.items)):
            obj = self.informer.get(name)
            if obj is not None and scope.admits(obj) and selection.matches(obj):
                found.append(self.kind.typed(obj))
        return found


def _continue_token(after: str) -> str:
    return base64.urlsafe_b64encode(orjson.dumps({"after": after})).decode()


def _after(token: str) -> str:
    try:
        decoded = orjson.loads(base64.urlsafe_b64decode(token.encode()))
    except (ValueError, orjson.JSONDecodeError) as err:
        raise ValueError("continue token is not valid") from err
    if not isinstance(decoded, dict) or not isinstance(decoded.get("after"), str):
        raise ValueError("continue token is not valid")
    return str(decoded["after"])


def list_body(
    kind: Kind,
    objects: list[JSON],
    query: Mapping[str, str],
    *,
    as_table: str | None,
    resource_version: str,
    now: datetime.datetime,
) -> JSON:
    """A ``<Kind>List`` (or its Table) of ``objects`` (sorted by name), one page of ``limit`` from ``continue``.

    Raises ValueError for a bad ``limit`` or ``continue``."""
    token = query.get("continue", "")
    if token:
        after = _after(token)
        objects = [obj for obj in objects if _name(obj) > after]
    next_token = ""
    raw_limit = query.get("limit", "")
    if raw_limit:
        if not raw_limit.isdigit():
            raise ValueError(f"limit {raw_limit!r} is not a whole number")
        limit = int(raw_limit)
        if 0 < limit < len(objects):
            objects = objects[:limit]
            next_token = _continue_token(_name(objects[-1]))
    if as_table is not None:
        return table(
            kind.table,
            objects,
            version=as_table,
            include=query.get("includeObject", "Metadata"),
            now=now,
            resource_version=resource_version,
            continue_token=next_token,
        )
    metadata: JSON = {"resourceVersion": resource_version}
    if next_token:
        metadata["continue"] = next_token
    return {"kind": f"{kind.name}List", "apiVersion": "v1", "metadata": metadata, "items": objects}


class ClusterWatch:
    """One tenant user's watch of one kind: what it has shown, and what changed since."""

    def __init__(
        self,
        index: ClusterIndex,
        allowed: Callable[[], Scope | None],
        selection: Selection,
        *,
        initial: bool,
    ) -> None:
        self.index = index
        self.allowed = allowed
        self.selection = selection
        self.shown: dict[str, JSON] = {}
        self._dirty: set[str] = set()
        self._all = initial
        self.wake = asyncio.Event()
        if initial:
            self.wake.set()
        else:
            scope = allowed() or Scope()
            self.shown = {_name(obj): obj for obj in index.visible(scope, selection)}

    def touch(self, name: str) -> None:
        self._dirty.add(name)
        self.wake.set()

    def touch_all(self) -> None:
        self._all = True
        self.wake.set()

    def events(self) -> list[tuple[str, JSON]] | None:
        """The events that bring the client level with now, in name order; None when the caller is no longer
        a tenant user (the watch ends)."""
        scope = self.allowed()
        if scope is None:
            return None
        items = self.index.informer.items
        names = set(self.shown) | set(scope.candidates(items)) if self._all else set(self._dirty)
        self._all, self._dirty = False, set()
        self.wake.clear()
        out: list[tuple[str, JSON]] = []
        for name in sorted(names):
            obj = items.get(name)
            show = obj is not None and scope.admits(obj) and self.selection.matches(obj)
            before = self.shown.get(name)
            if show and obj is not None:
                typed = self.index.kind.typed(obj)
                if before is None:
                    out.append(("ADDED", typed))
                elif before.get("metadata", {}).get("resourceVersion") != obj.get("metadata", {}).get(
                    "resourceVersion"
                ):
                    out.append(("MODIFIED", typed))
                else:
                    continue
                self.shown[name] = typed
            elif before is not None:
                out.append(("DELETED", self.index.kind.typed(obj) if obj is not None else before))
                del self.shown[name]
        return out


def _watch_line(spec: TableSpec, kind: str, obj: JSON, version: str | None, include: str, first: bool) -> bytes:
    if version is not None and kind != "BOOKMARK":
        now = datetime.datetime.now(datetime.UTC)
        rv = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        obj = table(spec, [obj], version=version, include=include, now=now, resource_version=rv, columns=first)
    return orjson.dumps({"type": kind, "object": obj}) + b"\n"


async def serve_watch(
    request: web.Request,
    index: ClusterIndex,
    allowed: Callable[[], Scope | None],
    selection: Selection,
    as_table: str | None,
) -> web.StreamResponse:
    """Stream the caller's events of ``index``'s kind until ``timeoutSeconds``, the client leaves, or the caller stops
    being a tenant user."""
    query = request.query
    version = query.get("resourceVersion", "")
    initial_events = query.get("sendInitialEvents") == "true"
    kind = index.kind
    watch = ClusterWatch(index, allowed, selection, initial=version in ("", "0") or initial_events)
    include = query.get("includeObject", "Metadata")
    bookmarks = query.get("allowWatchBookmarks") == "true"
    raw_timeout = query.get("timeoutSeconds", "")
    timeout = int(raw_timeout) if raw_timeout.isdigit() and int(raw_timeout) > 0 else DEFAULT_WATCH_SECONDS
    deadline = time.monotonic() + timeout
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    response.enable_chunked_encoding()
    await response.prepare(request)
    index.watches.add(watch)
    WATCHES.labels(kind.name).inc()
    first = True
    try:
        if initial_events:
            for event, obj in watch.events() or []:
                await response.write(_watch_line(kind.table, event, obj, as_table, include, first))
                first = False
                EVENTS.labels(kind.name, event).inc()
            end = {
                "kind": kind.name,
                "apiVersion": "v1",
                "metadata": {
                    "resourceVersion": index.informer.resource_version,
                    "annotations": {INITIAL_EVENTS_END: "true"},
                },
            }
            await response.write(_watch_line(kind.table, "BOOKMARK", end, as_table, include, first))
        while (left := deadline - time.monotonic()) > 0:
            transport = request.transport
            if transport is None or transport.is_closing():
                break
            try:
                await asyncio.wait_for(watch.wake.wait(), min(left, BOOKMARK_SECONDS))
            except TimeoutError:
                if bookmarks:
                    mark = {
                        "kind": kind.name,
                        "apiVersion": "v1",
                        "metadata": {"resourceVersion": index.informer.resource_version},
                    }
                    await response.write(_watch_line(kind.table, "BOOKMARK", mark, as_table, include, first))
                continue
            events = watch.events()
            if events is None:
                break
            for event, obj in events:
                await response.write(_watch_line(kind.table, event, obj, as_table, include, first))
                first = False
                EVENTS.labels(kind.name, event).inc()
    except (ConnectionResetError, ConnectionError):
        pass  # the client went away
    finally:
        index.watches.discard(watch)
        WATCHES.labels(kind.name).dec()
    return response
