"""An in-memory stand-in for :class:`enclave_core.kube.rest.Kube`, for unit tests and CPU/memory harnesses of a
controller's write loop at sizes a real control plane on this machine cannot reach in seconds.

It stores what is written by path and answers as kube-apiserver would in the ways a controller's comparisons
read (uid, resourceVersion, metadata merged on apply, status merged on a status patch). It is not an API server:
no validation, no managedFields, no watch (tests put objects into the informers' caches and call their
``on_change`` themselves, see :meth:`MemoryKube.echo`). Every request is recorded in ``calls``.
"""

from __future__ import annotations

import asyncio
import builtins
import contextlib
import copy
import itertools
import json
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, KubeError
from enclave_core.runtime.loops import ControllerLoop, Result

Failure = Callable[[str, str], Exception | None]
"""(method, path) -> an error to raise instead of answering, or None: a :class:`KubeError` as kube-apiserver
answers, or e.g. a ``ConnectionResetError`` as the connection fails."""


def _wire(obj: JSON) -> JSON:
    """A copy as a client gets it: decoded from JSON, every string its own object (a deep copy would share
    them, and make a cache of thousands of objects look smaller than it is)."""
    decoded: JSON = json.loads(json.dumps(obj))
    return decoded


def _merge(into: JSON, patch: JSON) -> None:
    for key, value in patch.items():
        if value is None:
            into.pop(key, None)
        elif isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = copy.deepcopy(value)


class Outage:
    """A :data:`Failure`: the first ``count`` requests that ``picks`` chooses fail as a reset connection would
    (not an answer of kube-apiserver, so no controller mistakes it for one); ``times`` says when each chosen
    request came, failed or not."""

    def __init__(self, picks: Callable[[str, str], bool], count: int = 1) -> None:
        self.picks = picks
        self.count = count
        self.times: builtins.list[float] = []

    def __call__(self, method: str, path: str) -> Exception | None:
        if not self.picks(method, path):
            return None
        self.times.append(time.monotonic())
        return ConnectionResetError(f"{method} {path}: connection reset") if len(self.times) <= self.count else None


class MemoryKube(Kube):
    """Objects by path; ``calls`` lists (method, path) of every request, writes and reads alike."""

    def __init__(self, fail: Failure | None = None) -> None:  # no ApiClient: nothing leaves the process
        self.objects: dict[str, JSON] = {}
        self.calls: list[tuple[str, str]] = []
        self.fail = fail
        self.after_write: Callable[[], object] | None = None
        """Called after every write that stored something (:meth:`Echo.live` plays it back as a watch would)."""
        self._versions = itertools.count(1)
        self._names = itertools.count(1)

    def _check(self, method: str, path: str) -> None:
        self.calls.append((method, path))
        error = self.fail(method, path) if self.fail is not None else None
        if error is not None:
            raise error

    def _stamp(self, obj: JSON) -> JSON:
        meta = obj.setdefault("metadata", {})
        meta.setdefault("uid", f"uid-{next(self._names)}")
        meta["resourceVersion"] = str(next(self._versions))
        wired = _wire(obj)
        if self.after_write is not None:
            self.after_write()
        return wired

    def writes(self) -> list[tuple[str, str]]:
        return [call for call in self.calls if call[0] != "GET"]

    async def get(self, path: str) -> JSON:
        self._check("GET", path)
        if path not in self.objects:
            raise KubeError(404, "NotFound", f"{path} not found")
        return _wire(self.objects[path])

    async def get_or_none(self, path: str) -> JSON | None:
        try:
            return await self.get(path)
        except KubeError as err:
            if err.not_found:
                return None
            raise

    async def list(
        self,
        path: str,
        *,
        label_selector: str | None = None,
        field_selector: str | None = None,
        limit: int | None = None,
        continue_token: str | None = None,
    ) -> JSON:
        self._check("GET", path)
        items = [_wire(obj) for key, obj in self.objects.items() if _in_collection(key, path)]
        return {"items": items, "metadata": {"resourceVersion": str(next(self._versions))}}

    async def create(self, path: str, body: JSON) -> JSON:
        """Recorded as ("POST", the new object's path), not the collection's."""
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            meta["name"] = f"{meta.get('generateName', 'object-')}{next(self._names)}"
        key = f"{path}/{meta['name']}"
        self._check("POST", key)
        if key in self.objects:
            raise KubeError(409, "AlreadyExists", f"{key} already exists")
        self.objects[key] = obj
        return self._stamp(obj)

    async def apply(self, path: str, body: JSON, *, force: bool = True) -> JSON:
        self._check("PATCH", path)
        obj = self.objects.setdefault(path, {})
        _merge(obj, copy.deepcopy(body))
        return self._stamp(obj)

    async def merge_patch(self, path: str, patch: JSON) -> JSON:
        self._check("PATCH", path)
        target = path.removesuffix("/status")
        if target not in self.objects:
            raise KubeError(404, "NotFound", f"{target} not found")
        obj = self.objects[target]
        _merge(obj, patch)
        return self._stamp(obj)

    async def replace(self, path: str, body: JSON) -> JSON:
        """A PUT: refused with 409 when ``metadata.resourceVersion`` is not the stored one (as kube-apiserver's
        optimistic concurrency); on ``/status`` only the status is replaced."""
        self._check("PUT", path)
        target = path.removesuffix("/status")
        if target not in self.objects:
            raise KubeError(404, "NotFound", f"{target} not found")
        live = self.objects[target]
        version = (body.get("metadata") or {}).get("resourceVersion")
        if version and version != live.get("metadata", {}).get("resourceVersion"):
            raise KubeError(409, "Conflict", f"{target}: the object has been modified")
        if path.endswith("/status"):
            live["status"] = copy.deepcopy(body.get("status"))
        else:
            status = live.get("status")
            live.clear()
            live.update(copy.deepcopy(body))
            if status is not None:
                live["status"] = status
        return self._stamp(live)

    async def request(self, method: str, path: str, *, body: Any = None, **_: Any) -> JSON:
        """GET (an object, or a collection as :meth:`list`) and DELETE (a uid precondition in ``body`` is
        checked); other raw requests are the typed methods' business."""
        if method == "DELETE":
            uid = ((body or {}).get("preconditions") or {}).get("uid")
            live = self.objects.get(path)
            if uid and live is not None and live.get("metadata", {}).get("uid") != uid:
                self._check(method, path)
                raise KubeError(409, "Conflict", f"{path}: uid precondition failed")
            await self.delete(path, missing_ok=False)
            return {}
        if method == "GET":
            if object_of(path)[1]:
                return await self.get(path)
            return await self.list(path)
        raise KubeError(501, "NotImplemented", f"MemoryKube answers raw {method} only through its typed methods")

    async def json_patch(self, path: str, operations: builtins.list[JSON]) -> JSON:
        self._check("PATCH", path)
        if path not in self.objects:
            raise KubeError(404, "NotFound", f"{path} not found")
        obj = self.objects[path]
        for op in operations:
            parts = [part for part in str(op["path"]).split("/") if part]
            parent: Any = obj
            for part in parts[:-1]:
                parent = parent.setdefault(part, {})
            if op["op"] == "test" and parent.get(parts[-1]) != op["value"]:
                raise KubeError(422, "Invalid", f"test of {op['path']} failed")
            if op["op"] in ("replace", "add"):
                parent[parts[-1]] = copy.deepcopy(op["value"])
            if op["op"] == "remove":
                parent.pop(parts[-1], None)
        return self._stamp(obj)

    async def delete(self, path: str, *, missing_ok: bool = True) -> None:
        self._check("DELETE", path)
        if self.objects.pop(path, None) is None:
            if not missing_ok:
                raise KubeError(404, "NotFound", f"{path} not found")
        elif self.after_write is not None:
            self.after_write()

    async def watch(
        self,
        path: str,
        *,
        resource_version: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_seconds: int = 300,
    ) -> AsyncIterator[JSON]:
        raise KubeError(501, "NotImplemented", "MemoryKube has no watch: put objects into the caches")
        yield {}  # pragma: no cover  (makes this an async generator like Kube.watch)


def _split(path: str) -> tuple[str, list[str]]:
    """(``api/v1`` or ``apis/<group>/<version>``, the rest of the path's parts)."""
    parts = path.strip("/").split("/")
    cut = 2 if parts[:1] == ["api"] else 3
    return "/".join(parts[:cut]), parts[cut:]


def _in_collection(key: str, collection: str) -> bool:
    """Whether the object stored at ``key`` is listed by ``collection``: its namespace's or, for a namespaced
    kind listed without one (``/api/v1/pods``), every namespace's."""
    api, rest = _split(collection)
    object_api, object_rest = _split(key)
    if api != object_api:
        return False
    if len(rest) == 3 and rest[0] == "namespaces":
        return object_rest[:3] == rest and len(object_rest) == 4
    if len(rest) == 1:
        return object_rest[:-1] == rest or (
            len(object_rest) == 4 and object_rest[0] == "namespaces" and object_rest[2] == rest[0]
        )
    return False


def object_of(path: str) -> tuple[str, str]:
    """(resource plural, informer key) of an object path: ``/api/v1/namespaces/a`` -> (namespaces, a),
    ``/apis/g/v1/namespaces/a/things/b/status`` -> (things, a/b); ("", "") for a collection."""
    parts = path.removesuffix("/status").strip("/").split("/")
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if len(rest) == 4 and rest[0] == "namespaces":
        return rest[2], f"{rest[1]}/{rest[3]}"
    if len(rest) == 2:
        return rest[0], rest[1]
    return "", ""


class Echo:
    """Plays a MemoryKube's writes back into informers (by resource plural) as their watch events
    (:meth:`Informer.apply_event`). Each write is played as the object's state now: a create followed by a status
    patch is two events of the final object, the second an echo of the first."""

    def __init__(self, kube: MemoryKube, informers: Mapping[str, Informer]) -> None:
        self.kube = kube
        self.informers = informers
        self.seen = 0

    def put(self, informer: Informer, obj: JSON) -> None:
        """An object arriving by watch."""
        informer.apply_event("MODIFIED", _wire(obj))

    def live(self) -> None:
        """Play every write back as it is made, as a watch would (for a controller's own loop to run on)."""
        self.kube.after_write = self

    def __call__(self) -> builtins.list[tuple[str, str]]:
        """The writes since the last call, each echoed; returns them."""
        calls = self.kube.calls[self.seen :]
        self.seen = len(self.kube.calls)
        for method, path in calls:
            plural, key = object_of(path)
            informer = self.informers.get(plural)
            if informer is None or method == "GET":
                continue
            stored = self.kube.objects.get(path.removesuffix("/status"))
            if stored is None:
                namespace, _, name = key.rpartition("/")
                gone = {"metadata": {"name": name, **({"namespace": namespace} if namespace else {})}}
                informer.apply_event("DELETED", gone)
            else:
                self.put(informer, stored)
        return [call for call in calls if call[0] != "GET"]


async def settle(reconcile: Callable[[], Awaitable[Result]], echo: Echo, limit: int = 50) -> int:
    """Passes of a controller's reconcile, each followed by its writes echoed, until one writes nothing and asks
    for nothing at once; the number of passes."""
    for passes in range(1, limit + 1):
        result = await reconcile()
        if not echo() and not (result.requeue_after is not None and result.requeue_after <= 0):
            return passes
    raise AssertionError(f"the controller did not settle in {limit} passes")


@contextlib.asynccontextmanager
async def running(loop: ControllerLoop) -> AsyncIterator[ControllerLoop]:
    """A controller's own loop over caches the test filled: its informers count as listed (MemoryKube has no
    watch; see :meth:`Echo.live`), the loop runs until the block ends."""
    for informer in loop.informers:
        informer.synced.set()
    task = asyncio.create_task(loop.run_loops(), name=f"loop:{loop.name}")
    try:
        yield loop
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
