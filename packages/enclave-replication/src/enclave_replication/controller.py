"""The replication controller: informers -> one plan per replication object -> writes as the acting identity.

A work queue holds replication objects to reconcile, keyed ``GlobalTenantResource/<name>`` or
``TenantResource/<ns>/<name>``. It is fed by watch events (the object itself; tenants and namespaces, which
move targets; the objects it manages, whose drift it undoes; the source and context collections it read) and
by a timer per object (``spec.resyncPeriod``). Only the Lease holder works the queue; every replica publishes
the protection snapshot, compiled from the objects' status, on ``ReplicationService``.

One reconcile reads its sources as the acting identity, builds the plan (``plan.build``), and compares every
desired object with the watch cache of managed objects: an object is applied only when its content is not
already there (or its hash annotation changed), so a steady state makes no API write. When the actor is a
service account, every write is first tried as a server-side dry run: if the account lacks a right anywhere,
nothing is written (condition ``Forbidden`` and an Event), never half the objects.
"""

from __future__ import annotations

import asyncio
import base64
import copy
import logging
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import aiohttp
from prometheus_client import Counter, Gauge, Histogram
from pydantic import ValidationError

from enclave_core import GROUP_VERSION, cel
from enclave_core.api.replication import (
    GlobalTenantResource,
    GlobalTenantResourceSpec,
    ItemPolicy,
    ServiceAccountRef,
    TenantResource,
    TenantResourceSpec,
)
from enclave_core.durations import parse_duration
from enclave_core.kube.connection import Connection
from enclave_core.kube.events import EventRecorder, EventType
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, KubeError, with_kind
from enclave_core.snapshots.configuration import EffectiveConfiguration
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.replication import REPLICATION_KIND, ManagedObject, ReplicationSnapshot
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX, TENANT_LABEL
from enclave_replication import adoption
from enclave_replication import plan as planning
from enclave_replication import status as st
from enclave_replication.access import WatchAccess
from enclave_replication.acting import ActingKube, ClusterReader, endpoint_client
from enclave_replication.discovery import Discovery, Resource
from enclave_replication.names import (
    CREATED_ANNOTATION,
    FINALIZER,
    HASH_ANNOTATION,
    LIFECYCLE_ANNOTATIONS,
    MANAGED_BY_LABEL,
    MANAGED_BY_VALUE,
    OWNER_ANNOTATION,
    Owner,
    split_api_version,
)
from enclave_replication.sandbox import Budget, RenderPool
from enclave_replication.targets import (
    Target,
    global_targets,
    namespaces_by_tenant,
    select_tenants,
    tenant_targets,
    terminating,
)

log = logging.getLogger(__name__)

RECONCILES = Counter("enclave_replication_reconciles_total", "Reconciles of replication objects", ["kind", "result"])
WRITES = Counter("enclave_replication_writes_total", "Writes to the cluster", ["operation"])
RECONCILE_SECONDS = Histogram("enclave_replication_reconcile_seconds", "Duration of one reconcile")
MANAGED = Gauge("enclave_replication_protected_objects", "Objects on the protection snapshot")
QUEUE = Gauge("enclave_replication_queue_depth", "Replication objects waiting to be reconciled")

GLOBAL_PATH = f"/apis/{GROUP_VERSION}/globaltenantresources"
TENANT_PATH = f"/apis/{GROUP_VERSION}/tenantresources"
TENANTS_PATH = f"/apis/{GROUP_VERSION}/tenants"
NAMESPACES_PATH = "/api/v1/namespaces"
MANAGED_SELECTOR = f"{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"
SYNC_TIMEOUT = 30.0
"""Seconds a reconcile waits for a new managed-object informer's first list before reading directly instead."""


@dataclass(frozen=True)
class Settings:
    concurrency: int = 4
    """Replication objects reconciled in parallel."""
    writes: int = 16
    """Writes in flight per replication object."""
    adoptable_managers: tuple[str, ...] = adoption.DEFAULT_ADOPTABLE
    """Field managers whose objects ``creation: Merge`` may adopt (``enclave_replication.adoption``)."""
    render: Budget = field(default_factory=Budget)
    """What one template render may cost, and the render workers (:mod:`enclave_replication.sandbox`)."""


@dataclass
class Identity:
    """Who a replication object acts as: a service account (username set) or the controller (None)."""

    user: str | None
    account: ServiceAccountRef | None
    problem: str = ""
    reason: str = "NoServiceAccount"


@dataclass
class _Work:
    """One object's pending write, decided against the cache."""

    desired: planning.DesiredObject
    resource: Resource
    body: JSON
    result: st.ItemResult
    previous_policy: ItemPolicy | None = None
    """The policy snapshot reported before: a failed update keeps it (protection and cleanup follow it)."""


@dataclass
class _Pass:
    results: list[st.ItemResult] = field(default_factory=list)
    writes: list[_Work] = field(default_factory=list)
    keep: set[tuple[str, str, str, str]] = field(default_factory=set)
    """Managed objects not to prune although not applied this pass (condition false, failed checks)."""
    forbidden: list[str] = field(default_factory=list)
    """Reads or writes the actor may not make: any one stops every write of the pass."""


def covers(live: Any, desired: Any) -> bool:
    """Whether ``live`` already holds everything ``desired`` states (defaults the server added are fine)."""
    if isinstance(desired, dict):
        if not isinstance(live, dict):
            return False
        for key, value in desired.items():
            if value is None:
                if live.get(key) is not None:
                    return False
            elif key not in live or not covers(live[key], value):
                return False
        return True
    if isinstance(desired, list):
        return isinstance(live, list) and len(live) == len(desired) and all(map(covers, live, desired))
    if isinstance(desired, bool) or isinstance(live, bool):
        return desired is live
    return bool(desired == live)


def _annotations(obj: JSON) -> dict[str, str]:
    return obj.get("metadata", {}).get("annotations") or {}


class ReplicationController:
    def __init__(
        self,
        kube: Kube,
        hub: SnapshotHub,
        events: EventRecorder,
        settings: Settings | None = None,
        *,
        wait_for_configuration: bool = False,
    ) -> None:
        self.kube = kube
        self.hub = hub
        self.events = events
        self.settings = settings or Settings()
        self.discovery = Discovery(kube)
        self.access = WatchAccess(kube)
        self._cluster_wide: dict[str, bool] = {}
        """Kind collection -> whether its managed objects are watched cluster-wide (decided once per kind)."""
        self.renderer = RenderPool(self.settings.render)
        self.leading = False
        self.config: EffectiveConfiguration | None = None
        self.configuration = asyncio.Event()
        if not wait_for_configuration:
            self.configuration.set()
        self.synced = asyncio.Event()
        self.controller_user = ""
        self.globals = Informer(kube, GLOBAL_PATH, on_change=self._global_changed, name="globaltenantresources")
        self.locals = Informer(kube, TENANT_PATH, on_change=self._local_changed, name="tenantresources")
        self.tenants = Informer(kube, TENANTS_PATH, on_change=self._everything_changed, name="tenants")
        self.namespaces = Informer(kube, NAMESPACES_PATH, on_change=self._namespace_changed, name="namespaces")
        self.managed: dict[str, Informer] = {}
        """Managed objects per collection path (label-selected), started when a kind is first replicated."""
        self.sources: dict[str, Informer] = {}
        """Source and context collections read by some replication object (change triggers only)."""
        self._interest: dict[str, set[str]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._source_tasks: dict[str, asyncio.Task[None]] = {}
        self._managed_tasks: dict[str, asyncio.Task[None]] = {}
        """Per-namespace managed informers' tasks, so a namespace's watches can be stopped (``_recheck``)."""
        self._watched_kinds: dict[str, Resource] = {}
        """Collection path -> its resource, for the watches ``_recheck`` may stop."""
        self._rechecks: set[asyncio.Task[None]] = set()
        self._endpoint_client: tuple[tuple[str, str, str, str, bool], Connection] | None = None
        self._queue: set[str] = set()
        self._busy: set[str] = set()
        self._again: set[str] = set()
        self._wakeup = asyncio.Event()
        self._timers: dict[str, asyncio.TimerHandle] = {}
        self._applied: dict[tuple[str, tuple[str, str, str, str]], tuple[str, str]] = {}
        """(owner, object) -> (resourceVersion our last apply produced, the hash applied): while both still hold,
        the object is as we left it even where the server normalised a value (``1000m`` stored as ``1``)."""
        self._warned: dict[str, str] = {}
        self._publish = asyncio.Event()
        self.reconciles = 0
        self.writes = 0
        """Every API write (apply, delete, patch, status), for the benchmark's writes-per-reconcile."""

    # -- triggers ------------------------------------------------------------------------------------------

    def enqueue(self, key: str) -> None:
        if key in self._busy:
            self._again.add(key)
        else:
            self._queue.add(key)
        QUEUE.set(len(self._queue))
        self._wakeup.set()

    def _global_changed(self, key: str) -> None:
        self.enqueue(Owner("GlobalTenantResource", key).key)
        self._publish.set()

    def _local_changed(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        self.enqueue(Owner("TenantResource", name, namespace).key)
        self._publish.set()

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
            owner = _annotations(obj).get(OWNER_ANNOTATION)
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
        if leading:
            self._everything_changed()

    def set_configuration(self, config: EffectiveConfiguration) -> None:
        self.config = config
        self.configuration.set()
        self._everything_changed()

    @property
    def events_namespace(self) -> str:
        return self.config.spec.events.namespace if self.config else "default"

    # -- loops ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        base = [self.globals, self.locals, self.tenants, self.namespaces]
        self._tasks = [asyncio.create_task(i.run(), name=i.name) for i in base]
        try:
            self.controller_user = await self._whoami()
            await asyncio.gather(*(informer.synced.wait() for informer in base))
            await self._start_known_kinds()
            self.synced.set()
            self._publish.set()
            await self.configuration.wait()
            workers = [self._worker() for _ in range(self.settings.concurrency)]
            await asyncio.gather(self._publish_loop(), *workers)
        finally:
            for task in [*self._tasks, *self._source_tasks.values(), *self._rechecks]:
                task.cancel()
            if self._endpoint_client is not None:
                await self._endpoint_client[1].close()
            await self.renderer.close()
            for handle in self._timers.values():
                handle.cancel()

    async def _whoami(self) -> str:
        """The controller's own username (admission always lets it through), from a SelfSubjectReview."""
        body = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        try:
            review = await self.kube.create("/apis/authentication.k8s.io/v1/selfsubjectreviews", body)
        except KubeError as err:
            log.warning("could not learn the controller's username", extra={"error": str(err)})
            return ""
        return str(review.get("status", {}).get("userInfo", {}).get("username", ""))

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
            await asyncio.wait_for(asyncio.shield(informer.synced.wait()), SYNC_TIMEOUT)
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

    async def _worker(self) -> None:
        while True:
            while not self._queue or not self.leading:
                self._wakeup.clear()
                await self._wakeup.wait()
            key = min(self._queue)
            self._queue.discard(key)
            QUEUE.set(len(self._queue))
            self._busy.add(key)
            started = time.monotonic()
            try:
                await self.reconcile(key)
            except Exception:
                log.exception("reconcile failed", extra={"object": key})
                self._schedule(key, 5.0)
            finally:
                RECONCILE_SECONDS.observe(time.monotonic() - started)
                self._busy.discard(key)
                if key in self._again:
                    self._again.discard(key)
                    self.enqueue(key)

    def _schedule(self, key: str, seconds: float) -> None:
        previous = self._timers.pop(key, None)
        if previous is not None:
            previous.cancel()
        self._timers[key] = asyncio.get_running_loop().call_later(seconds, self.enqueue, key)

    # -- protection snapshot (every replica) ---------------------------------------------------------------

    async def _publish_loop(self) -> None:
        while True:
            self._publish.clear()
            try:
                snapshot = self.snapshot()
                self.hub.publish(REPLICATION_KIND, snapshot.model_dump_json().encode())
                MANAGED.set(len(snapshot.objects))
            except Exception:
                log.exception("compiling the replication snapshot failed")
            await self._publish.wait()

    def snapshot(self) -> ReplicationSnapshot:
        objects: list[ManagedObject] = []
        for kind, informer in (("GlobalTenantResource", self.globals), ("TenantResource", self.locals)):
            for key, raw in informer.items.items():
                namespace, _, name = key.rpartition("/")
                owner = Owner(kind, name, namespace)  # type: ignore[arg-type]
                status = raw.get("status") or {}
                account = status.get("serviceAccount") or {}
                managers = [self.controller_user] if self.controller_user else []
                if account.get("name") and account.get("namespace"):
                    managers.append(f"{SERVICE_ACCOUNT_PREFIX}{account['namespace']}:{account['name']}")
                for item in status.get("processedItems") or ():
                    item_status = item.get("status") or {}
                    policy = item_status.get("policy") or {}
                    if not item.get("kind") or not item.get("name") or policy.get("protect") is False:
                        continue
                    if item_status.get("status") == "False" and item_status.get("created") is None:
                        continue  # never applied by us
                    objects.append(
                        ManagedObject(
                            group=item.get("group") or "",
                            kind=item["kind"],
                            namespace=item.get("namespace") or "",
                            name=item["name"],
                            owner=owner.key,
                            managers=managers,
                        )
                    )
        objects.sort(key=lambda o: (o.group, o.kind, o.namespace, o.name))
        return ReplicationSnapshot(objects=objects, controller=self.controller_user)

    # -- one reconcile (leader only) -----------------------------------------------------------------------

    def _raw(self, owner: Owner) -> JSON | None:
        if owner.kind == "GlobalTenantResource":
            return self.globals.get(owner.name)
        return self.locals.get(f"{owner.namespace}/{owner.name}")

    def _path(self, owner: Owner) -> str:
        if owner.kind == "GlobalTenantResource":
            return f"{GLOBAL_PATH}/{owner.name}"
        return f"/apis/{GROUP_VERSION}/namespaces/{owner.namespace}/tenantresources/{owner.name}"

    async def reconcile(self, key: str) -> None:
        owner = Owner.parse(key)
        raw = self._raw(owner) if owner else None
        if owner is None or raw is None:
            handle = self._timers.pop(key, None)
            if handle is not None:
                handle.cancel()
            await self._watch_sources(key, set(), {})
            return
        self.reconciles += 1
        try:
            if owner.kind == "GlobalTenantResource":
                spec: TenantResourceSpec = GlobalTenantResource.model_validate(raw).spec
            else:
                spec = TenantResource.model_validate(raw).spec
        except ValidationError as err:
            if raw["metadata"].get("deletionTimestamp"):
                # Deleted while invalid: clean up with what can still be read, never hold the finalizer on a typo.
                await self._finalize(owner, raw, _fallback_spec(raw))
                return
            first = err.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            # The objects stay as they are, and so does what status says about them (protection follows it).
            items, tenants = self._keep_all(owner, raw)
            await self._finish(owner, raw, items, tenants, None, (False, "InvalidSpec", f"{where}: {first['msg']}"))
            RECONCILES.labels(owner.kind, "invalid").inc()
            return
        self._schedule(key, max(1.0, parse_duration(spec.resync_period).total_seconds()))
        deleting = bool(raw["metadata"].get("deletionTimestamp"))
        if deleting:
            await self._finalize(owner, raw, spec)
            return
        if FINALIZER not in (raw["metadata"].get("finalizers") or []):
            finalizers = [*(raw["metadata"].get("finalizers") or []), FINALIZER]
            stored = await self._write_meta(owner, {"metadata": {"finalizers": finalizers}})
            if stored is None:
                return
            raw = stored
        identity = self._identity(owner, spec)
        if identity.problem:
            await self._finish(
                owner, raw, *self._keep_all(owner, raw), None, (False, identity.reason, identity.problem)
            )
            return
        if spec.cordoned:
            items, tenants = self._keep_all(owner, raw)
            await self._finish(
                owner, raw, items, tenants, identity.account, (False, "Cordoned", "applies and deletions paused")
            )
            return
        waiting = self._waiting_for(owner, spec)
        if waiting:
            items, tenants = self._keep_all(owner, raw)
            await self._finish(owner, raw, items, tenants, identity.account, (False, "WaitingForDependencies", waiting))
            return
        tenants, targets, fence, problem = self._targets(owner, spec)
        if problem:
            items, _ = self._keep_all(owner, raw)
            await self._finish(owner, raw, items, tenants, identity.account, (False, "NotInTenant", problem))
            return
        acting = ActingKube(self.kube, owner.field_manager, identity.user, await self._endpoint(identity))
        reader = ClusterReader(self.discovery, acting)
        try:
            built = await planning.build(owner, spec, targets, reader, fence, self.renderer)
            await self._watch_sources(key, reader.interest, reader.scopes)
            work = await self._decide(owner, raw, built, acting)
            dry_run = identity.user is not None and not work.forbidden
            forbidden = work.forbidden + (await self._dry_run(work, acting) if dry_run else [])
            if forbidden:
                items, _ = self._keep_all(owner, raw)
                message = f"{acting.who} lacks rights, nothing was written: " + "; ".join(forbidden[:5])
                await self._finish(owner, raw, items, tenants, identity.account, (False, "Forbidden", message))
                RECONCILES.labels(owner.kind, "forbidden").inc()
                return
            await self._apply(owner, work, acting)
            await self._prune(owner, raw, work, acting)
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            # The API (or impersonation.endpoint) cannot be reached: say so, keep what is managed, try again soon.
            items, _ = self._keep_all(owner, raw)
            where = acting.api.host
            message = f"{where} cannot be reached: {type(err).__name__}: {err}"
            await self._finish(owner, raw, items, tenants, identity.account, (False, "ApiUnreachable", message))
            RECONCILES.labels(owner.kind, "unreachable").inc()
            self._schedule(key, 5.0)
            return
        problems = [r for r in work.results if r.status == "False"]
        if problems:
            reasons = {r.reason for r in problems}
            reason = reasons.pop() if len(reasons) == 1 else "ItemsFailed"
            detail = "; ".join(_describe(r) for r in problems[:5])
            more = f" (and {len(problems) - 5} more)" if len(problems) > 5 else ""
            ready = (False, reason, f"{len(problems)} item(s) failed: {detail}{more}")
        else:
            managed = sum(1 for r in work.results if r.managed)
            ready = (True, "Applied", f"{managed} object(s) in {len(tenants)} tenant(s)")
        await self._finish(owner, raw, work.results, tenants, identity.account, ready)
        RECONCILES.labels(owner.kind, "ok" if not problems else "failed").inc()

    async def _endpoint(self, identity: Identity) -> Connection | None:
        """The client for ``impersonation.endpoint`` when one is configured and a service account acts; built
        once per configuration (the CA Secret is read then), closed when the configuration changes."""
        impersonation = self.config.spec.impersonation if self.config else None
        if identity.user is None or impersonation is None or not impersonation.endpoint:
            return None
        key = (
            impersonation.endpoint,
            impersonation.ca_secret_namespace or "",
            impersonation.ca_secret_name or "",
            impersonation.ca_secret_key,
            impersonation.skip_tls_verify,
        )
        if self._endpoint_client is not None and self._endpoint_client[0] == key:
            return self._endpoint_client[1]
        ca_pem: str | None = None
        if impersonation.ca_secret_name:
            namespace = impersonation.ca_secret_namespace or self.events_namespace
            path = f"/api/v1/namespaces/{namespace}/secrets/{impersonation.ca_secret_name}"
            secret = await self.kube.get_or_none(path)
            data = (secret or {}).get("data") or {}
            if impersonation.ca_secret_key in data:
                ca_pem = base64.b64decode(data[impersonation.ca_secret_key]).decode()
            else:
                log.warning(
                    "impersonation CA not found", extra={"secret": f"{namespace}/{impersonation.ca_secret_name}"}
                )
        if self._endpoint_client is not None:
            await self._endpoint_client[1].close()
        api = endpoint_client(self.kube.api, impersonation.endpoint, ca_pem, impersonation.skip_tls_verify)
        self._endpoint_client = (key, api)
        return api

    def _identity(self, owner: Owner, spec: TenantResourceSpec) -> Identity:
        account = spec.service_account
        impersonation = self.config.spec.impersonation if self.config else None
        if account is None and impersonation is not None:
            if owner.kind == "GlobalTenantResource" and impersonation.global_default_service_account:
                account = ServiceAccountRef(
                    name=impersonation.global_default_service_account,
                    namespace=impersonation.global_default_service_account_namespace or "default",
                )
            elif owner.kind == "TenantResource" and impersonation.tenant_default_service_account:
                account = ServiceAccountRef(
                    name=impersonation.tenant_default_service_account, namespace=owner.namespace
                )
        if account is None:
            if owner.kind == "TenantResource":
                return Identity(
                    None,
                    None,
                    "a TenantResource acts as a service account: set spec.serviceAccount, or "
                    "impersonation.tenantDefaultServiceAccount in the ServiceConfiguration",
                )
            return Identity(None, None)
        if owner.kind == "TenantResource" and account.namespace != owner.namespace:
            tenant = self._tenant_of(owner.namespace)
            if not tenant or self._tenant_of(account.namespace) != tenant:
                return Identity(
                    None,
                    account,
                    f"spec.serviceAccount {account.namespace}/{account.name} is outside this TenantResource's tenant",
                    "OutsideTenant",
                )
        return Identity(f"{SERVICE_ACCOUNT_PREFIX}{account.namespace}:{account.name}", account)

    def _tenant_of(self, namespace: str) -> str:
        obj = self.namespaces.get(namespace) or {}
        return str((obj.get("metadata", {}).get("labels") or {}).get(TENANT_LABEL, ""))

    def _waiting_for(self, owner: Owner, spec: TenantResourceSpec) -> str:
        waiting: list[str] = []
        for dependency in spec.depends_on or ():
            dep = Owner(owner.kind, dependency.name, owner.namespace)
            raw = self._raw(dep)
            if raw is None:
                waiting.append(f"{dependency.name} (not found)")
                continue
            generation = raw["metadata"].get("generation")
            conditions = (raw.get("status") or {}).get("conditions") or []
            ready = next((c for c in conditions if c.get("type") == "Ready"), None)
            if not ready or ready.get("status") != "True" or ready.get("observedGeneration") != generation:
                waiting.append(f"{dependency.name} (not Ready)")
        return f"waiting for {owner.kind} " + ", ".join(waiting) if waiting else ""

    def _targets(
        self, owner: Owner, spec: TenantResourceSpec
    ) -> tuple[list[str], list[list[Target]], planning.Fence, str]:
        by_tenant = namespaces_by_tenant(self.namespaces.values())
        if isinstance(spec, GlobalTenantResourceSpec):
            tenants = select_tenants(spec, self.tenants.values())
            targets = [global_targets(spec, block, tenants, by_tenant) for block in spec.resources]
            return [str(t["metadata"]["name"]) for t in tenants], targets, planning.Fence(), ""
        tenant_name = self._tenant_of(owner.namespace)
        tenant = self.tenants.get(tenant_name) if tenant_name else None
        if tenant is None:
            return (
                [],
                [[] for _ in spec.resources],
                planning.Fence(frozenset(), owner.namespace),
                (f"namespace {owner.namespace} belongs to no tenant; a TenantResource replicates within its tenant"),
            )
        own = frozenset(str(ns["metadata"]["name"]) for ns in by_tenant.get(tenant_name, []))
        targets = [tenant_targets(spec, block, tenant, by_tenant) for block in spec.resources]
        return [tenant_name], targets, planning.Fence(own, owner.namespace), ""

    def _keep_all(self, owner: Owner, raw: JSON) -> tuple[list[st.ItemResult], list[str]]:
        """The last reported items, unchanged (a pass that writes nothing must not forget what it manages)."""
        items: list[st.ItemResult] = []
        for (group, kind, namespace, name), item in st.previous_items(raw).items():
            status = item.status
            items.append(
                st.ItemResult(
                    origin=item.origin or "",
                    status=status.status if status else "Unknown",
                    reason=(status.reason if status else None) or "Unchanged",
                    message=(status.message if status else None) or "",
                    tenant=item.tenant or "",
                    group=group,
                    version=item.version or "",
                    kind=kind,
                    name=name,
                    namespace=namespace,
                    cluster_scoped=status.cluster_scoped if status else None,
                    created=status.created if status else None,
                    last_apply=status.last_apply if status else None,
                    policy=status.policy if status else None,
                    managed=bool(status and status.created is not None),
                )
            )
        return items, list((raw.get("status") or {}).get("selectedTenants") or [])

    async def _decide(self, owner: Owner, raw: JSON, built: planning.Plan, acting: ActingKube) -> _Pass:
        now = datetime.now(UTC).replace(microsecond=0)
        previous = st.previous_items(raw)
        work = _Pass()
        work.forbidden += [f"{p.origin}: {p.message}" for p in built.problems if p.reason == "Forbidden"]
        for problem in built.problems:
            work.results.append(
                st.ItemResult(
                    origin=problem.origin,
                    status="False",
                    reason=problem.reason,
                    message=problem.message,
                    tenant=problem.tenant,
                    group=split_api_version(problem.api_version)[0] if problem.api_version else "",
                    version=split_api_version(problem.api_version)[1] if problem.api_version else "",
                    kind=problem.kind,
                    name=problem.name,
                    namespace=problem.namespace,
                )
            )
        for key, desired in built.objects.items():
            result = st.ItemResult(
                origin=desired.origin,
                status="True",
                reason="Applied",
                tenant=desired.tenant,
                group=desired.group,
                version=desired.version,
                kind=desired.kind,
                name=desired.name,
                namespace=desired.namespace,
                cluster_scoped=desired.cluster_scoped,
                policy=desired.policy,
            )
            before = previous.get(key)
            if before is not None and before.status is not None:
                result.last_apply = before.status.last_apply
                result.created = before.status.created
            work.results.append(result)
            try:
                previous_policy = before.status.policy if before is not None and before.status else None
                await self._decide_one(owner, desired, result, work, acting, now, previous_policy)
            except planning.ReadError as err:
                result.status, result.reason, result.message = "False", err.reason, err.message
            except KubeError as err:
                result.status, result.reason, result.message = "False", _reason(err), f"reading the object: {err}"
                if err.status == 403:
                    work.forbidden.append(f"{desired.origin}: {planning.describe(key)}: {err.message}")
            if result.status == "False" and before is not None and before.status is not None:
                result.policy = before.status.policy  # a failed update keeps the previous policy snapshot
            if result.status == "False" and _ours(owner, before):
                work.keep.add(key)
                result.managed = True
        return work

    async def _decide_one(
        self,
        owner: Owner,
        desired: planning.DesiredObject,
        result: st.ItemResult,
        work: _Pass,
        acting: ActingKube,
        now: datetime,
        previous_policy: ItemPolicy | None = None,
    ) -> None:
        resource = await self.discovery.resource(desired.api_version, desired.kind)
        informer = await self._managed_informer(resource, desired.namespace)
        cached_key = f"{desired.namespace}/{desired.name}" if desired.namespace else desired.name
        live = informer.get(cached_key) if informer is not None else None
        if live is None:
            # Not carrying our label: it may still exist (someone else's, or one we are to adopt).
            live = await acting.get_or_none(resource.path(desired.namespace, desired.name))
        marked_by = _annotations(live).get(OWNER_ANNOTATION) if live else None
        if live is not None and marked_by != owner.key:
            if marked_by:
                result.status, result.reason = "False", "ManagedElsewhere"
                result.message = f"{planning.describe(desired.key)} is managed by {marked_by}"
                return
            if desired.policy.creation == "Owner":
                result.status, result.reason = "False", "AlreadyExists"
                result.message = (
                    f"{planning.describe(desired.key)} exists and was not created by {owner.key} "
                    "(policy.creation Owner; use Merge to adopt it)"
                )
                return
            created = False
        elif live is not None:
            created = _annotations(live).get(CREATED_ANNOTATION) != "false"
        else:
            created = True
        if desired.policy.condition:
            verdict = _condition(desired.policy.condition, live, now)
            if verdict is None or isinstance(verdict, str):
                result.status, result.reason = "False", "ConditionFailed"
                result.message = f"policy.condition: {verdict or 'did not evaluate to a bool'}"
                result.created = created if marked_by == owner.key else None
                result.managed = marked_by == owner.key
                if result.managed:
                    work.keep.add(desired.key)
                return
            if not verdict:
                result.status, result.reason = "Unknown", "Skipped"
                result.message = "policy.condition is false"
                result.managed = marked_by == owner.key
                result.created = created if result.managed else None
                if result.managed:
                    work.keep.add(desired.key)
                return
        if live is not None and marked_by != owner.key:
            why = adoption.conflict(live, self.settings.adoptable_managers)
            if why:
                result.status, result.reason = "False", "AdoptionConflict"
                result.message = (
                    f"{planning.describe(desired.key)} exists and is not adopted (policy.creation Merge): {why}"
                )
                return
        body = copy.deepcopy(desired.body)
        body["metadata"]["annotations"][CREATED_ANNOTATION] = "true" if created else "false"
        result.created = created
        result.managed = True
        if live is not None and marked_by == owner.key:
            memo = self._applied.get((owner.key, desired.key))
            version = str(live.get("metadata", {}).get("resourceVersion"))
            if covers(live, body) or memo == (version, body["metadata"]["annotations"][HASH_ANNOTATION]):
                return
        result.last_apply = now
        keep = previous_policy if marked_by == owner.key else None
        work.writes.append(_Work(desired, resource, body, result, keep or desired.policy))

    async def _dry_run(self, work: _Pass, acting: ActingKube) -> list[str]:
        """Try every write as a dry run; the writes the actor may not make (empty: go ahead)."""
        forbidden: list[str] = []
        for item in work.writes:
            try:
                await acting.apply_object(
                    item.resource.path(item.desired.namespace, item.desired.name),
                    item.body,
                    force=item.desired.policy.force,
                    dry_run=True,
                )
            except KubeError as err:
                if err.status == 403:
                    forbidden.append(f"{item.desired.origin}: {planning.describe(item.desired.key)}: {err.message}")
        return forbidden

    async def _apply(self, owner: Owner, work: _Pass, acting: ActingKube) -> None:
        semaphore = asyncio.Semaphore(self.settings.writes)

        async def one(item: _Work) -> None:
            async with semaphore:
                path = item.resource.path(item.desired.namespace, item.desired.name)
                try:
                    stored = await acting.apply_object(path, item.body, force=item.desired.policy.force)
                except KubeError as err:
                    item.result.status, item.result.reason = "False", _reason(err)
                    item.result.message = f"apply failed: {err.message}"
                    item.result.policy = item.previous_policy
                    if err.conflict:
                        item.result.message += " (another field manager owns these fields; policy.force takes them)"
                    return
                self.writes += 1
                WRITES.labels("apply").inc()
                version = stored.get("metadata", {}).get("resourceVersion")
                if version:
                    digest = item.body["metadata"]["annotations"][HASH_ANNOTATION]
                    self._applied[(owner.key, item.desired.key)] = (str(version), digest)

        await asyncio.gather(*(one(item) for item in work.writes))

    def _managed_by(self, owner: Owner) -> list[tuple[Informer, JSON]]:
        found: list[tuple[Informer, JSON]] = []
        for informer in self.managed.values():
            for obj in informer.values():
                if _annotations(obj).get(OWNER_ANNOTATION) == owner.key:
                    found.append((informer, obj))
        return found

    async def _prune(self, owner: Owner, raw: JSON, work: _Pass, acting: ActingKube) -> None:
        """Remove or orphan what this resource manages but no longer wants (per the item's policy snapshot)."""
        wanted = {(r.group, r.kind, r.namespace, r.name) for r in work.results if r.managed} | work.keep
        previous = st.previous_items(raw)
        for _informer, obj in self._managed_by(owner):
            key = _object_key(obj)
            if key in wanted:
                continue
            item = previous.get(key)
            policy = item.status.policy if item and item.status and item.status.policy else ItemPolicy()
            error = await self._release(owner, obj, policy, acting)
            if error:
                group, kind, namespace, name = key
                work.results.append(
                    st.ItemResult(
                        origin=(item.origin if item else None) or "pruned",
                        status="False",
                        reason="PruneFailed",
                        message=error,
                        group=group,
                        kind=kind,
                        namespace=namespace,
                        name=name,
                        version=split_api_version(str(obj.get("apiVersion", "")))[1],
                        policy=policy,
                        created=_annotations(obj).get(CREATED_ANNOTATION) != "false",
                        managed=True,
                    )
                )

    async def _release(self, owner: Owner, obj: JSON, policy: ItemPolicy, acting: ActingKube) -> str:
        """Delete (Remove, and we created it) or strip our marks and field ownership; an error message or ''."""
        meta = obj["metadata"]
        resource = await self.discovery.resource(str(obj["apiVersion"]), str(obj["kind"]))
        path = resource.path(meta.get("namespace") or "", meta["name"])
        created = _annotations(obj).get(CREATED_ANNOTATION) != "false"
        what = planning.describe(_object_key(obj))
        try:
            if policy.deletion == "Remove" and created:
                await acting.delete_object(path)
                WRITES.labels("delete").inc()
            else:
                await acting.json_patch(path, _orphan_patch(obj, owner))
                WRITES.labels("orphan").inc()
            self.writes += 1
        except KubeError as err:
            if err.not_found:
                return ""
            return f"releasing {what}: {err.message}"
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            return f"releasing {what}: {acting.api.host} cannot be reached: {err}"
        self._applied.pop((owner.key, _object_key(obj)), None)
        return ""

    async def _finalize(self, owner: Owner, raw: JSON, spec: TenantResourceSpec) -> None:
        if FINALIZER not in (raw["metadata"].get("finalizers") or []):
            return
        if spec.cordoned:
            items, tenants = self._keep_all(owner, raw)
            await self._finish(owner, raw, items, tenants, None, (False, "Cordoned", "deletion paused: cordoned"))
            return
        identity = self._identity(owner, spec)
        acting = ActingKube(self.kube, owner.field_manager, identity.user, await self._endpoint(identity))
        errors: list[str] = []
        if identity.problem:
            # No identity to act as (a TenantResource never borrows the controller's rights): leave the objects.
            errors.append(f"objects left in place: {identity.problem}")
        previous = st.previous_items(raw)
        home_going = bool(owner.namespace) and _terminating(self.namespaces.get(owner.namespace))
        for _informer, obj in self._managed_by(owner) if not identity.problem else ():
            if _terminating(self.namespaces.get(str(obj["metadata"].get("namespace") or ""))):
                continue  # it goes with its namespace
            item = previous.get(_object_key(obj))
            policy = item.status.policy if item and item.status and item.status.policy else ItemPolicy()
            error = await self._release(owner, obj, policy, acting)
            if error:
                errors.append(error)
        if errors:
            message = "cleanup on deletion failed: " + "; ".join(errors[:5])
            await self._emit(owner, raw, "Warning", "CleanupFailed", message)
            if not home_going and not identity.problem:
                self._schedule(owner.key, 5.0)
                return
            # The TenantResource's namespace is being deleted (and with it, often, the account's RoleBindings), or
            # there is no identity to clean up as: holding the finalizer would keep the object (and its namespace)
            # forever. Best effort, reported, then let go.
        finalizers = [f for f in raw["metadata"].get("finalizers") or [] if f != FINALIZER]
        await self._write_meta(
            owner, {"metadata": {"finalizers": finalizers, "resourceVersion": raw["metadata"]["resourceVersion"]}}
        )
        await self._watch_sources(owner.key, set(), {})
        for key in [k for k in self._applied if k[0] == owner.key]:
            del self._applied[key]

    async def _write_meta(self, owner: Owner, patch: JSON) -> JSON | None:
        try:
            stored = await self.kube.merge_patch(self._path(owner), patch)
        except KubeError as err:
            if not err.not_found and not err.conflict:
                log.warning("metadata write failed", extra={"object": owner.key, "error": str(err)})
            return None
        self.writes += 1
        WRITES.labels("finalizer").inc()
        self._store(owner, stored)
        return stored

    def _store(self, owner: Owner, stored: JSON) -> None:
        if owner.kind == "GlobalTenantResource":
            self.globals.items[owner.name] = stored
        else:
            self.locals.items[f"{owner.namespace}/{owner.name}"] = stored

    async def _finish(
        self,
        owner: Owner,
        raw: JSON,
        items: list[st.ItemResult],
        tenants: list[str],
        account: ServiceAccountRef | None,
        ready: tuple[bool, str, str],
    ) -> None:
        now = datetime.now(UTC)
        status = st.build(raw, items=items, selected_tenants=tenants, service_account=account, ready=ready, now=now)
        ok, reason, message = ready
        if not ok and reason not in ("Cordoned", "WaitingForDependencies"):
            await self._warn(owner, raw, reason, message)
        else:
            self._warned.pop(owner.key, None)
        if not st.changed(raw, status):
            return
        try:
            stored = await self.kube.merge_patch(f"{self._path(owner)}/status", {"status": status})
        except KubeError as err:
            if not err.not_found:
                log.warning("status write failed", extra={"object": owner.key, "error": str(err)})
            return
        self.writes += 1
        WRITES.labels("status").inc()
        self._store(owner, stored)
        self._publish.set()

    async def _warn(self, owner: Owner, raw: JSON, reason: str, message: str) -> None:
        """One Warning per distinct problem (not one per pass)."""
        signature = f"{reason}: {message}"
        if self._warned.get(owner.key) == signature:
            return
        self._warned[owner.key] = signature
        log.warning("replication object not ready", extra={"object": owner.key, "reason": reason, "detail": message})
        await self._emit(owner, raw, "Warning", reason, message)

    async def _emit(self, owner: Owner, raw: JSON, event_type: EventType, reason: str, message: str) -> None:
        obj = with_kind(raw, GROUP_VERSION, owner.kind)
        await self.events.emit(obj, event_type, reason, message[:1024], namespace=self.events_namespace)


def _fallback_spec(raw: JSON) -> TenantResourceSpec:
    """What an invalid spec still says about cleanup: its service account and whether it is cordoned."""
    found = raw.get("spec")
    spec: JSON = found if isinstance(found, dict) else {}
    try:
        return TenantResourceSpec.model_validate(
            {"resources": [], "serviceAccount": spec.get("serviceAccount"), "cordoned": spec.get("cordoned", False)}
        )
    except ValidationError:
        return TenantResourceSpec(resources=[])


def _terminating(namespace: JSON | None) -> bool:
    return namespace is not None and terminating(namespace)


def _object_key(obj: JSON) -> tuple[str, str, str, str]:
    group = split_api_version(str(obj.get("apiVersion", "")))[0]
    meta = obj.get("metadata", {})
    return (group, str(obj.get("kind", "")), str(meta.get("namespace") or ""), str(meta.get("name", "")))


def _ours(owner: Owner, item: Any) -> bool:
    return bool(item is not None and item.status is not None and item.status.created is not None)


def _reason(err: KubeError) -> str:
    if err.status == 403:
        return "Forbidden"
    if err.conflict:
        return "Conflict"
    if err.status == 422:
        return "Invalid"
    return "ApplyFailed"


def _describe(result: st.ItemResult) -> str:
    where = f" in {result.namespace}" if result.namespace else (f" of tenant {result.tenant}" if result.tenant else "")
    return f"{result.origin}{where}: {result.message}"


def _condition(expression: str, live: JSON | None, now: datetime) -> bool | str | None:
    """True/False, or a message when the expression does not compile or fails."""
    try:
        program = cel.default().condition(expression, cel.POLICY_CONDITION_ENV)
    except cel.CelCompileError as err:
        return str(err)
    outcome = program.evaluate({"object": live, "now": now})
    if isinstance(outcome, cel.Ok):
        return bool(outcome.value)
    return str(outcome.error)


def _orphan_patch(obj: JSON, owner: Owner) -> list[JSON]:
    """Strip our label, annotations and managedFields entries; keep every value (guarded by resourceVersion)."""
    meta = obj["metadata"]
    operations: list[JSON] = [{"op": "test", "path": "/metadata/resourceVersion", "value": meta["resourceVersion"]}]
    if MANAGED_BY_LABEL in (meta.get("labels") or {}):
        operations.append({"op": "remove", "path": f"/metadata/labels/{_escape(MANAGED_BY_LABEL)}"})
    for key in LIFECYCLE_ANNOTATIONS:
        if key in (meta.get("annotations") or {}):
            operations.append({"op": "remove", "path": f"/metadata/annotations/{_escape(key)}"})
    fields = meta.get("managedFields") or []
    kept = [entry for entry in fields if entry.get("manager") != owner.field_manager]
    if kept and len(kept) != len(fields):
        operations.append({"op": "replace", "path": "/metadata/managedFields", "value": kept})
    return operations


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
