"""The replication controller: informers -> one plan per replication object -> writes as the acting identity.

A work queue holds replication objects to reconcile, keyed ``GlobalTenantResource/<name>`` or
``TenantResource/<ns>/<name>``. It is fed by watch events (:mod:`enclave_replication.watches`) and by a timer
per object (``spec.resyncPeriod``). Only the Lease holder works the queue; every replica publishes the protection
snapshot, compiled from the objects' status, on ``ReplicationService``.

One reconcile (this module) decides who acts (:mod:`enclave_replication.identity`), reads its sources as that
identity, builds the plan (``plan.build``), hands it to :mod:`enclave_replication.apply` (compare with the watch
cache, apply, prune) and reports the outcome in status and Events. When the actor is a service account, every
write is first tried as a server-side dry run: if the account lacks a right anywhere, nothing is written
(condition ``Forbidden`` and an Event), never half the objects. Deletion (the finalizer) is here too.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from datetime import UTC, datetime

import aiohttp
from prometheus_client import Counter, Gauge, Histogram
from pydantic import ValidationError

from enclave_core import GROUP_VERSION
from enclave_core.api.names import REPLICATION_FINALIZER
from enclave_core.api.replication import (
    GlobalTenantResource,
    GlobalTenantResourceSpec,
    ItemPolicy,
    ServiceAccountRef,
    TenantResource,
    TenantResourceSpec,
)
from enclave_core.durations import parse_duration
from enclave_core.kube import projections, shared
from enclave_core.kube.connection import Connection
from enclave_core.kube.events import EventRecorder, EventType
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, KubeError, with_kind
from enclave_core.runtime.controller import ControllerBase
from enclave_core.runtime.keyed import KeyedQueue
from enclave_core.runtime.loops import DONE, ControllerLoop, LoopMetrics, Result
from enclave_core.snapshots.configuration import EffectiveConfiguration
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.replication import REPLICATION_KIND, ManagedObject, ReplicationSnapshot
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX
from enclave_replication import adoption
from enclave_replication import plan as planning
from enclave_replication import status as st
from enclave_replication.access import WatchAccess
from enclave_replication.acting import ActingKube, ClusterReader
from enclave_replication.apply import WRITES, Applier, _object_key
from enclave_replication.discovery import Discovery, Resource
from enclave_replication.identity import Identities
from enclave_replication.names import Owner
from enclave_replication.sandbox import Budget, RenderPool
from enclave_replication.targets import (
    Target,
    global_targets,
    namespaces_by_tenant,
    select_tenants,
    tenant_targets,
    terminating,
)
from enclave_replication.watches import GLOBAL_PATH, NAMESPACES_PATH, QUEUE, TENANT_PATH, TENANTS_PATH

log = logging.getLogger(__name__)

RECONCILES = Counter("enclave_replication_reconciles_total", "Reconciles of replication objects", ["kind", "result"])
LOOP = LoopMetrics(
    passes=None,  # counted by kind and outcome in RECONCILES
    duration=Histogram("enclave_replication_reconcile_seconds", "Duration of one reconcile"),
)
RETRY_SECONDS = 5.0
"""When an object comes back after the API could not be reached or a cleanup failed, and after its reconcile
first raised (then doubling, per object, up to 30 s)."""
RETRY = Result(requeue_after=RETRY_SECONDS)
MANAGED = Gauge("enclave_replication_protected_objects", "Objects on the protection snapshot")


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


class ReplicationController(Identities, Applier, ControllerBase[Settings]):
    """Informers, the work queue, the protection snapshot and one reconcile per replication object."""

    def __init__(self, kube: Kube, settings: Settings, hub: SnapshotHub, events: EventRecorder) -> None:
        super().__init__(kube, settings, hub, events)
        self.discovery = Discovery(kube)
        self.access = WatchAccess(kube)
        self._cluster_wide: dict[str, bool] = {}
        """Kind collection -> whether its managed objects are watched cluster-wide (decided once per kind)."""
        self.renderer = RenderPool(self.settings.render)
        self.leading = False
        self.config: EffectiveConfiguration | None = None
        """The impersonation defaults and the rest, once enclave-config's stream says (:meth:`configure`)."""
        self.controller_user = ""
        self.globals = Informer(kube, GLOBAL_PATH, on_change=self._global_changed, name="globaltenantresources")
        self.locals = Informer(kube, TENANT_PATH, on_change=self._local_changed, name="tenantresources")
        # Tenants and namespaces as every controller caches them (one copy in a host; the managed objects keep
        # their managedFields: adoption reads them): enclave_core.kube.projections.
        self.tenants = shared.informer(
            kube, TENANTS_PATH, on_change=self._everything_changed, name="tenants", transform=projections.tenant
        )
        self.namespaces = shared.informer(
            kube, NAMESPACES_PATH, on_change=self._namespace_changed, name="namespaces", transform=projections.namespace
        )
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
        self.queue = KeyedQueue(
            "replication", self.reconcile, workers=self.settings.concurrency, depth=QUEUE, backoff_first=RETRY_SECONDS
        )
        """Replication object keys to reconcile (:mod:`enclave_core.runtime.keyed`), fed by :mod:`.watches`."""
        self._prepared = asyncio.Event()
        self.loop = ControllerLoop(
            "replication",
            informers=[self.globals, self.locals, self.tenants, self.namespaces],
            queue=self.queue,
            metrics=LOOP,
            publish=self.publish,
            gate=self.configuration,
            synced_after=[self._prepared],
        )
        self.synced = self.loop.synced
        self._applied: dict[tuple[str, tuple[str, str, str, str]], tuple[str, str]] = {}
        """(owner, object) -> (resourceVersion our last apply produced, the hash applied): while both still hold,
        the object is as we left it even where the server normalised a value (``1000m`` stored as ``1``)."""
        self.reconciles = 0
        self.writes = 0
        """Every API write (apply, delete, patch, status), for the benchmark's writes-per-reconcile."""

    # -- loops ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        """The loop (:class:`enclave_core.runtime.loops.ControllerLoop` with the per-key queue) and, beside it,
        what ``synced`` waits for after the informers: who this controller is, and the watches of the kinds the
        replication objects' status lists."""
        try:
            await asyncio.gather(self.loop.run(), self._prepare())
        finally:
            for task in [*self._tasks, *self._source_tasks.values(), *self._rechecks]:
                task.cancel()
            if self._endpoint_client is not None:
                await self._endpoint_client[1].close()
            await self.renderer.close()

    async def _prepare(self) -> None:
        self.controller_user = await self._whoami()
        await asyncio.gather(*(informer.synced.wait() for informer in self.loop.informers))
        await self._start_known_kinds()
        self._prepared.set()

    # -- protection snapshot (every replica) ---------------------------------------------------------------

    def publish(self) -> None:
        snapshot = self.snapshot()
        self.hub.publish(REPLICATION_KIND, snapshot.model_dump_json().encode())
        MANAGED.set(len(snapshot.objects))

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

    async def reconcile(self, key: str) -> Result:
        """One replication object, level-based from the caches; comes back after its ``spec.resyncPeriod``
        (sooner when the API could not be reached or a cleanup failed), or not at all once it is gone or invalid
        (a change to it brings it back)."""
        owner = Owner.parse(key)
        raw = self._raw(owner) if owner else None
        if owner is None or raw is None:
            await self._watch_sources(key, set(), {})
            return DONE
        self.reconciles += 1
        try:
            if owner.kind == "GlobalTenantResource":
                spec: TenantResourceSpec = GlobalTenantResource.model_validate(raw).spec
            else:
                spec = TenantResource.model_validate(raw).spec
        except ValidationError as err:
            if raw["metadata"].get("deletionTimestamp"):
                # Deleted while invalid: clean up with what can still be read, never hold the finalizer on a typo.
                return RETRY if await self._finalize(owner, raw, _fallback_spec(raw)) else DONE
            first = err.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            # The objects stay as they are, and so does what status says about them (protection follows it).
            items, tenants = self._keep_all(owner, raw)
            await self._finish(owner, raw, items, tenants, None, (False, "InvalidSpec", f"{where}: {first['msg']}"))
            RECONCILES.labels(owner.kind, "invalid").inc()
            return DONE
        resync = Result(requeue_after=max(1.0, parse_duration(spec.resync_period).total_seconds()))
        deleting = bool(raw["metadata"].get("deletionTimestamp"))
        if deleting:
            return RETRY if await self._finalize(owner, raw, spec) else resync
        if REPLICATION_FINALIZER not in (raw["metadata"].get("finalizers") or []):
            finalizers = [*(raw["metadata"].get("finalizers") or []), REPLICATION_FINALIZER]
            stored = await self._write_meta(owner, {"metadata": {"finalizers": finalizers}})
            if stored is None:
                return resync
            raw = stored
        identity = self._identity(owner, spec)
        if identity.problem:
            await self._finish(
                owner, raw, *self._keep_all(owner, raw), None, (False, identity.reason, identity.problem)
            )
            return resync
        if spec.cordoned:
            items, tenants = self._keep_all(owner, raw)
            await self._finish(
                owner, raw, items, tenants, identity.account, (False, "Cordoned", "applies and deletions paused")
            )
            return resync
        waiting = self._waiting_for(owner, spec)
        if waiting:
            items, tenants = self._keep_all(owner, raw)
            await self._finish(owner, raw, items, tenants, identity.account, (False, "WaitingForDependencies", waiting))
            return resync
        tenants, targets, fence, problem = self._targets(owner, spec)
        if problem:
            items, _ = self._keep_all(owner, raw)
            await self._finish(owner, raw, items, tenants, identity.account, (False, "NotInTenant", problem))
            return resync
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
                return resync
            await self._apply(owner, work, acting)
            await self._prune(owner, raw, work, acting)
        except (aiohttp.ClientError, OSError, TimeoutError) as err:
            # The API (or impersonation.endpoint) cannot be reached: say so, keep what is managed, try again soon.
            items, _ = self._keep_all(owner, raw)
            where = acting.api.host
            message = f"{where} cannot be reached: {type(err).__name__}: {err}"
            await self._finish(owner, raw, items, tenants, identity.account, (False, "ApiUnreachable", message))
            RECONCILES.labels(owner.kind, "unreachable").inc()
            return RETRY
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
        return resync

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

    async def _finalize(self, owner: Owner, raw: JSON, spec: TenantResourceSpec) -> bool:
        """Release what ``owner`` manages and drop its finalizer; True when a cleanup failed and is to be tried
        again soon (the finalizer kept)."""
        if REPLICATION_FINALIZER not in (raw["metadata"].get("finalizers") or []):
            return False
        if spec.cordoned:
            items, tenants = self._keep_all(owner, raw)
            await self._finish(owner, raw, items, tenants, None, (False, "Cordoned", "deletion paused: cordoned"))
            return False
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
                return True
            # The TenantResource's namespace is being deleted (and with it, often, the account's RoleBindings), or
            # there is no identity to clean up as: holding the finalizer would keep the object (and its namespace)
            # forever. Best effort, reported, then let go.
        finalizers = [f for f in raw["metadata"].get("finalizers") or [] if f != REPLICATION_FINALIZER]
        await self._write_meta(
            owner, {"metadata": {"finalizers": finalizers, "resourceVersion": raw["metadata"]["resourceVersion"]}}
        )
        await self._watch_sources(owner.key, set(), {})
        for key in [k for k in self._applied if k[0] == owner.key]:
            del self._applied[key]
        return False

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
            self.events.fine(owner.key)
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
        self.loop.republish()

    async def _warn(self, owner: Owner, raw: JSON, reason: str, message: str) -> None:
        """One Warning per distinct problem (:meth:`EventRecorder.warn_once`), not one per pass."""
        obj = with_kind(raw, GROUP_VERSION, owner.kind)
        await self.events.warn_once(owner.key, obj, reason, message, namespace=self.events_namespace)

    async def _emit(self, owner: Owner, raw: JSON, event_type: EventType, reason: str, message: str) -> None:
        obj = with_kind(raw, GROUP_VERSION, owner.kind)
        await self.events.emit(obj, event_type, reason, message, namespace=self.events_namespace)


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


def _describe(result: st.ItemResult) -> str:
    where = f" in {result.namespace}" if result.namespace else (f" of tenant {result.tenant}" if result.tenant else "")
    return f"{result.origin}{where}: {result.message}"
