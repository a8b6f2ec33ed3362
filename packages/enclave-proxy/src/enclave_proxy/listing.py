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

A watch's ``resourceVersion`` resumes: each kind keeps the last :data:`HISTORY` changes (which object, at which
resourceVersion, as it was before), so a watch from a version the history still covers starts from what the
caller saw then and sends what changed since; an older one is answered ``410 Gone`` (an ERROR event with reason
``Expired``, as kube-apiserver's watch cache answers), and the client lists again. Empty or ``0`` sends the
current objects as ADDED first.
"""

from __future__ import annotations

import asyncio
import base64
import collections
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
from enclave_proxy.query import NAME_FIELDS, NAMESPACE_FIELDS, NODE_FIELDS, FieldGetter, Selection
from enclave_proxy.tables import (
    GATEWAY_CLASS_TABLE,
    INGRESS_CLASS_TABLE,
    NAMESPACE_TABLE,
    NODE_TABLE,
    PRIORITY_CLASS_TABLE,
    RUNTIME_CLASS_TABLE,
    STORAGE_CLASS_TABLE,
    VOLUME_TABLE,
    TableSpec,
    table,
)
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
HISTORY = 4096
"""Changes per kind a watch can resume across; a resourceVersion older than the oldest is answered 410 Gone."""


@dataclass(frozen=True)
class Kind:
    """A cluster-scoped kind the proxy answers tenant users' requests for."""

    name: str
    resource: str
    fields: Mapping[str, FieldGetter]
    table: TableSpec
    api_version: str = "v1"
    """``v1`` for the core group, ``<group>/<version>`` otherwise."""
    setting: str = ""
    """Its name in ``spec.proxy.kinds[].kind``; empty for namespaces, which are always shown (list and watch)."""
    required: bool = False
    """The proxy is not ready until it has listed this kind (namespaces, nodes); the others may be absent from a
    cluster (a CRD not installed, a right not granted) and are passed through until listed."""

    @property
    def base(self) -> str:
        return "/api/v1" if self.api_version == "v1" else f"/apis/{self.api_version}"

    @property
    def paths(self) -> tuple[str, str]:
        """The list path and the deprecated watch path."""
        return f"{self.base}/{self.resource}", f"{self.base}/watch/{self.resource}"

    def typed(self, obj: JSON) -> JSON:
        if obj.get("kind") == self.name and obj.get("apiVersion") == self.api_version:
            return obj
        return {**obj, "kind": self.name, "apiVersion": self.api_version}


NAMESPACES = Kind("Namespace", "namespaces", NAMESPACE_FIELDS, NAMESPACE_TABLE, required=True)
NODES = Kind("Node", "nodes", NODE_FIELDS, NODE_TABLE, setting="Nodes", required=True)
PERSISTENT_VOLUMES = Kind(
    "PersistentVolume", "persistentvolumes", NAME_FIELDS, VOLUME_TABLE, setting="PersistentVolumes"
)
STORAGE_CLASSES = Kind(
    "StorageClass", "storageclasses", NAME_FIELDS, STORAGE_CLASS_TABLE, "storage.k8s.io/v1", "StorageClasses"
)
INGRESS_CLASSES = Kind(
    "IngressClass", "ingressclasses", NAME_FIELDS, INGRESS_CLASS_TABLE, "networking.k8s.io/v1", "IngressClasses"
)
PRIORITY_CLASSES = Kind(
    "PriorityClass", "priorityclasses", NAME_FIELDS, PRIORITY_CLASS_TABLE, "scheduling.k8s.io/v1", "PriorityClasses"
)
RUNTIME_CLASSES = Kind(
    "RuntimeClass", "runtimeclasses", NAME_FIELDS, RUNTIME_CLASS_TABLE, "node.k8s.io/v1", "RuntimeClasses"
)
GATEWAY_CLASSES = Kind(
    "GatewayClass", "gatewayclasses", NAME_FIELDS, GATEWAY_CLASS_TABLE, "gateway.networking.k8s.io/v1", "GatewayClasses"
)
KINDS = (
    NAMESPACES,
    NODES,
    PERSISTENT_VOLUMES,
    STORAGE_CLASSES,
    INGRESS_CLASSES,
    PRIORITY_CLASSES,
    RUNTIME_CLASSES,
    GATEWAY_CLASSES,
)


class TooOldError(ValueError):
    """A watch's resourceVersion older than the history: answered 410 Gone (``Expired``)."""


VERSION_WAIT_SECONDS = 3.0
"""How long a list from a resourceVersion newer than the index's waits for it, as kube-apiserver's watch cache
waits, before answering 504 ``Too large resource version`` (client-go retries that)."""


class ListVersionError(Exception):
    """A list's ``resourceVersion``/``resourceVersionMatch`` the proxy cannot serve, with kube-apiserver's code
    and reason for it."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason


def _invalid(detail: str) -> ListVersionError:
    return ListVersionError(422, "Invalid", f'ListOptions.meta.k8s.io "" is invalid: {detail}')


def list_version(query: Mapping[str, str]) -> tuple[str, int | None]:
    """A list's ``resourceVersionMatch`` and the resourceVersion it names (None: the newest, ``""`` or ``0``),
    checked as kube-apiserver's ``ValidateListOptions`` checks them (422 Invalid)."""
    version = query.get("resourceVersion", "")
    match = query.get("resourceVersionMatch", "")
    if match:
        if not version:
            raise _invalid(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden unless resourceVersion is provided"
            )
        if query.get("continue", ""):
            raise _invalid(
                "resourceVersionMatch: Forbidden: resourceVersionMatch is forbidden when continue is provided"
            )
        if match not in ("Exact", "NotOlderThan"):
            raise _invalid(
                f'resourceVersionMatch: Unsupported value: "{match}": supported values: "Exact", "NotOlderThan", ""'
            )
        if match == "Exact" and version == "0":
            raise _invalid(
                'resourceVersionMatch: Forbidden: resourceVersionMatch "exact" is forbidden for resourceVersion "0"'
            )
    if version in ("", "0"):
        return match, None
    try:
        return match, parse_version(version)
    except ValueError as err:
        raise ListVersionError(400, "BadRequest", str(err)) from err


def parse_version(text: str) -> int:
    """A resourceVersion as the number etcd issued; ValueError for anything else."""
    if not text.isdigit():
        raise ValueError(f"resourceVersion {text!r} is not a resourceVersion this server issued")
    return int(text)


class VersionedInformer(Informer):
    """An informer that tells its ``on_change`` at which resourceVersion the change happened: the watch event's
    object's (a deletion's too), or the list's for what a relist found changed."""

    event_version: int | None = None
    first_version: int | None = None
    """The resourceVersion of the first list: the history covers every change after it."""

    def apply_event(self, kind: str, obj: JSON) -> None:
        version = str((obj.get("metadata") or {}).get("resourceVersion") or "")
        self.event_version = int(version) if version.isdigit() else None
        try:
            super().apply_event(kind, obj)
        finally:
            self.event_version = None

    async def _relist(self) -> None:
        await super()._relist()
        if self.first_version is None and self.resource_version.isdigit():
            self.first_version = int(self.resource_version)

    def change_version(self) -> int:
        if self.event_version is not None:
            return self.event_version
        return int(self.resource_version) if self.resource_version.isdigit() else 0


def _name(obj: JSON) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


class ClusterIndex:
    """Every object of one kind (an informer) and the tenant watches to wake when one changes."""

    def __init__(self, kube: Kube, kind: Kind, history: int = HISTORY) -> None:
        self.kind = kind
        path = kind.paths[0]
        self.informer = VersionedInformer(kube, path, on_change=self._changed, name=f"proxy-{kind.resource}")
        self.watches: set[ClusterWatch] = set()
        self.history: collections.deque[tuple[int, str, JSON | None]] = collections.deque()
        """(resourceVersion, name, the object before the change or None), oldest first."""
        self.history_size = history
        self._dropped = 0
        """The newest resourceVersion dropped from the history: a watch must resume from at least this."""
        self._last: dict[str, JSON] = {}
        """Every object as the index last saw it (references to the informer's, not copies)."""
        self._seen = 0
        """The newest resourceVersion a change came at (the informer's own may be set just after)."""
        self._advanced = asyncio.Event()
        """Set (and replaced) on every change: lists waiting for a resourceVersion look again."""

    @property
    def synced(self) -> asyncio.Event:
        return self.informer.synced

    async def run(self) -> None:
        await self.informer.run()

    def _changed(self, key: str) -> None:
        before = self._last.get(key)
        after = self.informer.items.get(key)
        if after is None:
            self._last.pop(key, None)
        else:
            self._last[key] = after
        version = self.informer.change_version()
        self._seen = max(self._seen, version)
        self._advanced.set()
        self._advanced = asyncio.Event()
        self.history.append((version, key, before))
        if len(self.history) > self.history_size:
            self._dropped = max(self._dropped, self.history.popleft()[0])
        for watch in self.watches:
            watch.touch(key)

    def state_at(self, version: int) -> tuple[dict[str, JSON], set[str]]:
        """The objects as they were at ``version`` and the names changed since; :class:`TooOldError` when the
        history no longer reaches back that far."""
        floor = max(self._dropped, self.informer.first_version or 0)
        if version < floor:
            raise TooOldError(f"too old resource version: {version} ({floor})")
        changed: dict[str, JSON | None] = {}
        for at, key, before in self.history:
            if at > version and key not in changed:
                changed[key] = before
        state = {key: obj for key, obj in self.informer.items.items() if key not in changed}
        state.update({key: obj for key, obj in changed.items() if obj is not None})
        return state, set(changed)

    def current_version(self) -> int:
        rv = self.informer.resource_version
        return max(self._seen, int(rv) if rv.isdigit() else 0)

    async def list_state(self, query: Mapping[str, str]) -> tuple[Mapping[str, JSON], str]:
        """The objects a list's ``resourceVersion``/``resourceVersionMatch`` asks for and the resourceVersion to
        answer with, as kube-apiserver's watch cache serves them: unset or ``0``, the newest; ``NotOlderThan``
        (or a version without a match, the legacy meaning), the newest once the index has reached it; ``Exact``,
        the objects as they were at that version (from the history; 410 Expired when it reaches back no
        further). A version the index has not reached within :data:`VERSION_WAIT_SECONDS`: 504.
        Raises :class:`ListVersionError`."""
        match, version = list_version(query)
        if version is None:
            return self.informer.items, self.informer.resource_version
        try:
            async with asyncio.timeout(VERSION_WAIT_SECONDS):
                while version > self.current_version():
                    await self._advanced.wait()
        except TimeoutError:
            raise ListVersionError(
                504, "Timeout", f"Too large resource version: {version}, current: {self.current_version()}"
            ) from None
        if match != "Exact":
            return self.informer.items, self.informer.resource_version
        try:
            state, _ = self.state_at(version)
        except TooOldError:
            raise ListVersionError(410, "Expired", "The resourceVersion for the provided list is too old.") from None
        return state, str(version)

    def item(self, name: str) -> JSON | None:
        return self.informer.get(name)

    def snapshots_changed(self) -> None:
        """A Tenancy or configuration snapshot arrived: every watch re-evaluates what its caller sees."""
        for watch in self.watches:
            watch.touch_all()

    def visible(self, scope: Scope, selection: Selection, state: Mapping[str, JSON] | None = None) -> list[JSON]:
        """The objects the caller may see that exist and match, sorted by name (of ``state``, an earlier
        version's objects, when given; else of now)."""
        items = self.informer.items if state is None else state
        found = []
        for name in sorted(scope.candidates(items)):
            obj = items.get(name)
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
        since: int | None = None,
    ) -> None:
        """``initial``: the client has nothing (ADDED for everything visible); else it has what was visible at
        ``since`` (a resourceVersion; None: now), and gets what changed after. Raises :class:`TooOldError`."""
        self.index = index
        self.allowed = allowed
        self.selection = selection
        self.shown: dict[str, JSON] = {}
        self._dirty: set[str] = set()
        self._all = initial
        self.wake = asyncio.Event()
        if initial:
            self.wake.set()
            return
        scope = allowed() or Scope()
        if since is None:
            self.shown = {_name(obj): obj for obj in index.visible(scope, selection)}
            return
        state, changed = index.state_at(since)
        for name in scope.candidates(state):
            obj = state.get(name)
            if obj is not None and scope.admits(obj) and selection.matches(obj):
                self.shown[name] = index.kind.typed(obj)
        if changed:
            self._dirty = changed
            self.wake.set()

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


def _bad_request(message: str) -> web.Response:
    body: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    body |= {"reason": "BadRequest", "code": 400}
    return web.Response(status=400, body=orjson.dumps(body), content_type="application/json")


async def _expired(request: web.BaseRequest, kind: Kind, message: str) -> web.StreamResponse:
    """kube-apiserver's answer to a watch from a resourceVersion its cache no longer holds: 200, then one ERROR
    event with a 410 ``Expired`` Status; client-go (kubectl, informers) lists again."""
    response = web.StreamResponse(status=200, headers={"Content-Type": "application/json"})
    await response.prepare(request)
    gone: JSON = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message}
    gone |= {"reason": "Expired", "code": 410}
    await response.write(orjson.dumps({"type": "ERROR", "object": gone}) + b"\n")
    EVENTS.labels(kind.name, "ERROR").inc()
    await response.write_eof()
    return response


async def serve_watch(
    request: web.BaseRequest,
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
    initial = version in ("", "0") or initial_events
    try:
        since = None if initial else parse_version(version)
        watch = ClusterWatch(index, allowed, selection, initial=initial, since=since)
    except TooOldError as err:
        return await _expired(request, kind, str(err))
    except ValueError as err:
        return _bad_request(str(err))
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
                async with asyncio.timeout(min(left, BOOKMARK_SECONDS)):  # not wait_for: a lost cancel on 3.11
                    await watch.wake.wait()
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
