"""The replication controller's watches: what wakes a reconcile, and the informers it reads through.

A reconcile is woken by watch events (the replication object itself; tenants and namespaces, which move
targets; the objects it manages, whose drift it undoes; the source and context collections it read). This module
holds those triggers and the informers behind them, apart from the reconcile, because they are the part with its
own life cycle: managed-object informers start the first time a kind is replicated, cluster-wide or per namespace
(whatever the controller may watch, :mod:`enclave_replication.access`), and source watches stop when nobody reads
the collection any more or the controller loses the right to watch it.

``Watches`` is a base of :class:`enclave_replication.controller.ReplicationController`, whose ``__init__`` sets
the state declared here.
"""

from __future__ import annotations

import asyncio
import logging

from prometheus_client import Gauge

from enclave_core import GROUP_VERSION
from enclave_core.api.names import ENCLAVE_MANAGED_BY, REPLICATION_MANAGER, REPLICATION_OWNER_ANNOTATION, TENANT_LABEL
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube
from enclave_core.runtime.keyed import KeyedQueue
from enclave_core.runtime.loops import ControllerLoop
from enclave_core.snapshots.configuration import EffectiveConfiguration
from enclave_replication import plan as planning
from enclave_replication.access import WatchAccess
from enclave_replication.discovery import Discovery, Resource
from enclave_replication.names import Owner

log = logging.getLogger(__name__)

QUEUE = Gauge("enclave_replication_queue_depth", "Replication objects waiting to be reconciled")

GLOBAL_PATH = f"/apis/{GROUP_VERSION}/globaltenantresources"
TENANT_PATH = f"/apis/{GROUP_VERSION}/tenantresources"
TENANTS_PATH = f"/apis/{GROUP_VERSION}/tenants"
NAMESPACES_PATH = "/api/v1/namespaces"
MANAGED_SELECTOR = f"{ENCLAVE_MANAGED_BY}={REPLICATION_MANAGER}"
SYNC_TIMEOUT = 30.0
"""Seconds a reconcile waits for a new managed-object informer's first list before reading directly instead."""


def _annotations(obj: JSON) -> dict[str, str]:
    return obj.get("metadata", {}).get("annotations") or {}


class Watches:
    """Triggers of the work queue and the informers of managed objects and sources."""

    kube: Kube
    discovery: Discovery
    access: WatchAccess
    leading: bool
    config: EffectiveConfiguration | None
    configuration: asyncio.Event
    events_namespace: str
    globals: Informer
    locals: Informer
    tenants: Informer
    namespaces: Informer
    managed: dict[str, Informer]
    sources: dict[str, Informer]
    _cluster_wide: dict[str, bool]
    _interest: dict[str, set[str]]
    _tasks: list[asyncio.Task[None]]
    _source_tasks: dict[str, asyncio.Task[None]]
    _managed_tasks: dict[str, asyncio.Task[None]]
    _watched_kinds: dict[str, Resource]
    _rechecks: set[asyncio.Task[None]]
    queue: KeyedQueue
    loop: ControllerLoop

    # -- triggers ------------------------------------------------------------------------------------------

    def enqueue(self, key: str) -> None:
        self.queue.add(key)

    def _global_changed(self, key: str) -> None:
        self.enqueue(Owner("GlobalTenantResource", key).key)
        self.loop.republish()

    def _local_changed(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        self.enqueue(Owner("TenantResource", name, namespace).key)
        self.loop.republish()

    def _everything_changed(self, _key: str = "") -> None:
        for name in self.globals.items:
            self.enqueue(Owner("GlobalTenantResource", name).key)
        for key in self.locals.items:
            namespace, _, name = key.partition("/")
            self.enqueue(Owner("TenantResource", name, namespace).key)

    def _namespace_changed(self, key: str) -> None:
        namespace = self.namespaces.get(key)
        if namespace is None or not (namespace["metadata"].get("labels") or {}).get(TENANT_LABEL):
            # Gone, or out of the tenants (enclave-tenants removes its grants there): a watch there may have lost
            # its right and would retry forever. Outside the tenants it may still hold (sourceNamespaces): ask.
            task = asyncio.create_task(self._recheck(key))
            self._rechecks.add(task)
            task.add_done_callback(self._rechecks.discard)
        self._everything_changed(key)

    async def _recheck(self, namespace: str) -> None:
        """Stop the per-namespace watches in ``namespace`` the controller may no longer keep (module access): the
        answer is asked afresh and remembered, so a reconcile does not start them again meanwhile."""
        marker = f"/namespaces/{namespace}/"
        for path in [p for p in [*self._managed_tasks, *self._source_tasks] if marker in p]:
            resource = self._watched_kinds.get(path)
            if resource is not None and await self.access.allowed(resource, namespace, fresh=True):
                continue
            for tasks, informers in ((self._managed_tasks, self.managed), (self._source_tasks, self.sources)):
                task = tasks.pop(path, None)
                if task is not None:
                    task.cancel()
                    informers.pop(path, None)
                    if task in self._tasks:
                        self._tasks.remove(task)

    def _managed_changed(self, informer_path: str, key: str) -> None:
        informer = self.managed.get(informer_path)
        obj = informer.get(key) if informer else None
        if obj is not None:
            owner = _annotations(obj).get(REPLICATION_OWNER_ANNOTATION)
            if owner:
                self.enqueue(owner)
                return
        # Deleted (or the mark removed): whoever managed it finds out on its next pass.
        self._everything_changed()

    def _source_changed(self, path: str) -> None:
        for owner in self._interest.get(path, ()):
            self.enqueue(owner)

    def set_leading(self, leading: bool) -> None:
        self.leading = leading
        self.loop.set_leading(leading)
        if leading:
            self._everything_changed()

    def configure(self, config: EffectiveConfiguration) -> None:
        """The impersonation defaults (and the rest) enclave-config says; every object is looked at again."""
        self.config = config
        self._everything_changed()

    # -- informers of managed objects and sources --------------------------------------------------------

    async def _start_known_kinds(self) -> None:
        """Watch the kinds (and namespaces) the status of every replication object lists, so a restart can prune
        them."""
        kinds: set[tuple[str, str, str]] = set()
        for raw in [*self.globals.values(), *self.locals.values()]:
            for item in (raw.get("status") or {}).get("processedItems") or ():
                if item.get("kind") and item.get("version"):
                    group = item.get("group") or ""
                    api_version = f"{group}/{item['version']}" if group else str(item["version"])
                    kinds.add((api_version, str(item["kind"]), str(item.get("namespace") or "")))
        for api_version, kind, namespace in sorted(kinds):
            try:
                await self._managed_informer(await self.discovery.resource(api_version, kind), namespace)
            except planning.ReadError as err:
                log.info("kind no longer served", extra={"kind": kind, "apiVersion": api_version, "error": err.message})

    async def _watch_path(self, resource: Resource, namespace: str) -> str | None:
        """The collection to watch ``resource``'s managed objects in ``namespace`` through: the whole kind when the
        controller may list and watch it cluster-wide (``replication.rbac.readResources``), else the namespace
        when it may there (``enclave-replication-read``), else None (module :mod:`enclave_replication.access`)."""
        kind_path = resource.collection()
        if kind_path not in self._cluster_wide:
            self._cluster_wide[kind_path] = await self.access.allowed(resource)
        if self._cluster_wide[kind_path] or not resource.namespaced or not namespace:
            return kind_path if self._cluster_wide[kind_path] else None
        return resource.collection(namespace) if await self.access.allowed(resource, namespace) else None

    async def _managed_informer(self, resource: Resource, namespace: str = "") -> Informer | None:
        path = await self._watch_path(resource, namespace)
        if path is None:
            return None
        informer = self.managed.get(path)
        if informer is None:
            informer = Informer(
                self.kube,
                path,
                label_selector=MANAGED_SELECTOR,
                on_change=lambda key, path=path: self._managed_changed(path, key),  # type: ignore[misc]
                name=f"managed:{resource.plural}.{resource.api_version}",
            )
            self.managed[path] = informer
            task = asyncio.create_task(informer.run(), name=informer.name)
            self._tasks.append(task)
            if path != resource.collection():
                self._managed_tasks[path] = task
                self._watched_kinds[path] = resource
        try:
            # A right lost between the question and the list leaves the informer unsynced, retrying: read directly.
            async with asyncio.timeout(SYNC_TIMEOUT):  # not wait_for: on 3.11 it can drop a cancellation
                await informer.synced.wait()
        except TimeoutError:
            log.warning("managed objects not synced; reading directly", extra={"collection": path})
            return None
        return informer

    async def _watch_sources(self, owner: str, paths: set[str], scopes: dict[str, tuple[Resource, str]]) -> None:
        for path in paths:
            self._interest.setdefault(path, set()).add(owner)
            if path not in self.sources and path in scopes and await self.access.allowed(*scopes[path]):
                self._watched_kinds[path] = scopes[path][0]
                informer = Informer(
                    self.kube,
                    path,
                    on_change=lambda _key, path=path: self._source_changed(path),  # type: ignore[misc]
                    name=f"source:{path}",
                )
                self.sources[path] = informer
                self._source_tasks[path] = asyncio.create_task(informer.run(), name=informer.name)
        for path, owners in list(self._interest.items()):
            if path not in paths:
                owners.discard(owner)
            if not owners:
                # Nobody reads this collection any more: stop watching it.
                del self._interest[path]
                self.sources.pop(path, None)
                task = self._source_tasks.pop(path, None)
                if task is not None:
                    task.cancel()
