"""The pools controller: informers -> one pure plan -> snapshot on every replica, writes on the Lease holder.

The *publish* loop recompiles the ResourcePools snapshot on every change, from committed bindings only. The
*write* loop (Lease holder) converges the cluster on the plan, pool by pool, in an order that makes every
intermediate state safe:

1. the pool's status (the ledger of bindings) is **replaced with the resourceVersion the plan read**: a 409
   means someone changed the pool since, and the pool is planned again from the fresh object;
2. only after that commit, namespace by namespace, the ResourceQuota grows (or shrinks) to defaults + bound
   claims, and then that namespace's claims say Bound, so a claim that reads Bound always has its quota in
   place.

Every write is decided by comparing the plan with the caches, so a steady state costs no API call.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime

from prometheus_client import Counter, Gauge

from enclave_core import GROUP_VERSION
from enclave_core.api import names
from enclave_core.kube import projections, shared
from enclave_core.kube.events import EventRecorder, EventType
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path, with_kind
from enclave_core.runtime.controller import ControllerBase
from enclave_core.runtime.loops import DONE, ControllerLoop, LoopMetrics, Result
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.pools import POOLS_KIND
from enclave_pools import model, resourcequotas
from enclave_pools import status as st
from enclave_pools.plan import build_plan
from enclave_pools.plan import snapshot as compile_snapshot

log = logging.getLogger(__name__)

LOOP = LoopMetrics.standard("pools", publishes=True, what="ResourcePools snapshots")
WRITES = Counter("enclave_pools_writes_total", "Writes to the cluster", ["kind", "operation"])
CONFLICTS = Counter("enclave_pools_ledger_conflicts_total", "Pool status writes refused with 409 (replanned)")
POOLS = Gauge("enclave_pools_pools", "Pools observed")
BOUND_CLAIMS = Gauge("enclave_pools_bound_claims", "Claims bound to a pool")
WAITING_CLAIMS = Gauge("enclave_pools_waiting_claims", "Claims not bound (exhausted, queued or refused)")
EVENTS_DROPPED = Counter("enclave_pools_events_dropped_total", "Claim Events dropped because the queue was full")

RETRY_SECONDS = 0.2
"""How soon a pass that met a ledger conflict or a failed write runs again."""

POOLS_PATH = f"/apis/{GROUP_VERSION}/resourcepools"
CLAIMS_PATH = f"/apis/{GROUP_VERSION}/resourcepoolclaims"
QUOTAS_PATH = "/api/v1/resourcequotas"


@dataclass(frozen=True)
class Settings:
    resync_seconds: float = 60.0
    """Full pass without any change, a safety net for missed events."""
    concurrency: int = 16
    """Quota and claim writes in flight at once."""


class PoolsController(ControllerBase[Settings]):
    def __init__(self, kube: Kube, settings: Settings, hub: SnapshotHub, events: EventRecorder) -> None:
        super().__init__(kube, settings, hub, events)
        self._events: asyncio.Queue[tuple[JSON, EventType, str, str]] = asyncio.Queue(maxsize=1000)
        self.pools = Informer(kube, POOLS_PATH, on_change=self._changed, name="resourcepools")
        self.claims = Informer(kube, CLAIMS_PATH, on_change=self._changed, name="resourcepoolclaims")
        # As every controller caches them (one copy in a host): enclave_core.kube.projections.
        self.namespaces = shared.informer(
            kube, "/api/v1/namespaces", on_change=self._changed, name="namespaces", transform=projections.namespace
        )
        self.quotas = Informer(
            kube,
            QUOTAS_PATH,
            label_selector=f"{names.MANAGED_BY}={names.POOLS_MANAGER}",
            on_change=self._changed,
            name="resourcequotas",
        )
        self.loops = ControllerLoop(
            "pools",
            informers=[self.pools, self.claims, self.namespaces, self.quotas],
            publish=self.publish,
            reconcile=self.reconcile,
            resync_seconds=settings.resync_seconds,
            metrics=LOOP,
        )
        self.synced = self.loops.synced
        self.reconciled = self.loops.reconciled
        self.published = self.loops.published

    def _changed(self, key: str = "") -> None:
        self.loops.changed(key)

    def set_leading(self, leading: bool) -> None:
        self.loops.set_leading(leading)

    async def run(self) -> None:
        await asyncio.gather(self.loops.run(), self._post_events())

    # -- plan and snapshot ---------------------------------------------------------------------------------

    def plan(self, *, bind: bool = True) -> model.Plan:
        quotas = self.quotas.values() if bind else ()
        return build_plan(self.pools.values(), self.claims.values(), self.namespaces.values(), bind=bind, quotas=quotas)

    def publish(self) -> model.Plan:
        plan = self.plan(bind=False)
        snapshot = compile_snapshot(plan, self.quotas.values())
        if self.hub.publish(POOLS_KIND, snapshot.model_dump_json().encode()) is not None:
            log.debug("pools snapshot published", extra={"pools": len(snapshot.pools)})
        POOLS.set(len(plan.pools))
        BOUND_CLAIMS.set(len(snapshot.bound))
        WAITING_CLAIMS.set(len(plan.claims) - len(snapshot.bound))
        return plan

    # -- one write pass (leader only) ----------------------------------------------------------------------

    async def reconcile(self) -> Result:
        """One pass. A pool's ledger write that met a conflict, or a write that failed, brings the pass back
        soon (once the watch has brought the fresh pool), not at the next resync."""
        plan = self.plan()
        now = datetime.now(UTC)
        semaphore = asyncio.Semaphore(self.settings.concurrency)

        async def bounded(work: Awaitable[None]) -> None:
            async with semaphore:
                await work

        claim_slots = asyncio.Semaphore(self.settings.concurrency)

        async def claim_slot(work: Awaitable[None]) -> None:
            """Claim writes have slots of their own: a namespace holding a slot above waits on them."""
            async with claim_slots:
                await work

        conflicted: set[str] = set()
        for pool in plan.pools.values():
            if pool.deleting:
                await self._finalize(pool)
                continue
            if not await self._ensure_finalizer(pool):
                conflicted.add(pool.name)
                continue
            if not await self._commit(pool, now):
                conflicted.add(pool.name)
        # Namespace by namespace: its quotas first, then its claims' statuses, so a claim that says Bound has
        # its quota in place; namespaces run side by side (at most ``concurrency``), so the claims of the first
        # namespaces read Bound while later namespaces are still being written, instead of every claim waiting
        # for every quota of the pass.
        quota_errors: dict[str, list[str]] = {}
        failed: list[str] = []
        quotas: dict[str, list[model.PoolPlan]] = {}
        for pool in plan.pools.values():
            if pool.name not in conflicted and not pool.deleting:
                for namespace in pool.quotas:
                    quotas.setdefault(namespace, []).append(pool)
        claims: dict[str, list[tuple[model.Claim, model.Verdict]]] = {}
        for key, verdict in plan.verdicts.items():
            if verdict.pool in conflicted:
                continue  # its binding is being replanned; say nothing until it is committed
            pool_plan = plan.pools.get(verdict.pool)
            if pool_plan is not None and pool_plan.deleting and verdict.bound:
                continue  # _finalize releases or deletes it
            claim = plan.claims[key]
            if not st.claim_current(claim.raw, verdict):
                claims.setdefault(claim.namespace, []).append((claim, verdict))

        async def one_namespace(name: str) -> None:
            broken: set[str] = set()
            for pool in quotas.get(name, []):
                if not await self._quota(pool, name, quota_errors):
                    broken.add(pool.name)
            writes = []
            for claim, verdict in claims.get(name, []):
                if verdict.bound and verdict.pool in broken:
                    failed.append(claim.key)  # its quota could not grow: not Bound yet, retried
                    continue
                writes.append(claim_slot(self._claim(claim, verdict, now, failed)))
            await asyncio.gather(*writes)

        await asyncio.gather(*(bounded(one_namespace(name)) for name in sorted(quotas.keys() | claims.keys())))
        for quota in resourcequotas.stale_quotas(plan, self.quotas.values()):
            await self._delete_quota(quota)
        for pool in plan.pools.values():
            if pool.name not in conflicted and not pool.deleting and quota_errors.get(pool.name):
                await self._commit(pool, now, quota_errors[pool.name])
        return Result(requeue_after=RETRY_SECONDS) if conflicted or failed else DONE

    async def _ensure_finalizer(self, pool: model.PoolPlan) -> bool:
        meta = pool.raw["metadata"]
        finalizers = list(meta.get("finalizers") or [])
        if names.POOL_FINALIZER in finalizers:
            return True
        patch = {
            "metadata": {"finalizers": [*finalizers, names.POOL_FINALIZER], "resourceVersion": meta["resourceVersion"]}
        }
        try:
            stored = await self.kube.merge_patch(f"{POOLS_PATH}/{pool.name}", patch)
        except KubeError as err:
            if err.conflict:
                CONFLICTS.inc()
                return False
            if not err.not_found:
                log.warning("adding the pool finalizer failed", extra={"pool": pool.name, "error": str(err)})
            return False
        WRITES.labels("ResourcePool", "finalizer").inc()
        self.pools.items[pool.name] = pool.raw = stored
        return True

    async def _commit(self, pool: model.PoolPlan, now: datetime, errors: list[str] | None = None) -> bool:
        """Replace the pool's status (the ledger) with the resourceVersion the plan read; False on conflict."""
        problems = list(pool.problems) + list(errors or [])
        await self._warn("ResourcePool", pool.raw, problems, "InvalidSpec" if pool.problems else "ApplyFailed")
        status = st.pool_status(pool, problems=problems, now=now)
        if not st.changed(pool.raw, status, whole=True):
            return True
        body = {**pool.raw, "status": status}
        try:
            stored = await self.kube.replace(f"{POOLS_PATH}/{pool.name}/status", body)
        except KubeError as err:
            if err.conflict:
                CONFLICTS.inc()
                log.info("pool changed while binding; replanning", extra={"pool": pool.name})
                return False
            if not err.not_found:
                log.warning("pool status write failed", extra={"pool": pool.name, "error": str(err)})
            return False
        WRITES.labels("ResourcePool", "status").inc()
        self.pools.items[pool.name] = pool.raw = stored
        new = sorted(set(pool.records) - set(pool.committed))
        if new:
            log.info("claims bound", extra={"pool": pool.name, "claims": [pool.records[u].name for u in new]})
        return True

    async def _quota(self, pool: model.PoolPlan, namespace: str, errors: dict[str, list[str]]) -> bool:
        """Apply the pool's quota in ``namespace`` when it drifted; False when it could not be written."""
        key = f"{namespace}/{resourcequotas.quota_name(pool.name)}"
        if not resourcequotas.quota_drifted(self.quotas.get(key), pool, namespace):
            return True
        path = resource_path("v1", "resourcequotas", namespace=namespace, name=resourcequotas.quota_name(pool.name))
        try:
            self.quotas.items[key] = await self.kube.apply(path, resourcequotas.quota_body(pool, namespace))
        except KubeError as err:
            if not err.gone:
                errors.setdefault(pool.name, []).append(f"ResourceQuota {key}: {err}")
                return False
            return True
        WRITES.labels("ResourceQuota", "apply").inc()
        return True

    async def _delete_quota(self, quota: JSON) -> None:
        meta = quota["metadata"]
        path = resource_path("v1", "resourcequotas", namespace=meta["namespace"], name=meta["name"])
        try:
            await self.kube.delete(path)
        except KubeError as err:
            if not err.gone:
                log.warning("deleting a pool quota failed", extra={"quota": path, "error": str(err)})
            return
        self.quotas.items.pop(f"{meta['namespace']}/{meta['name']}", None)
        WRITES.labels("ResourceQuota", "delete").inc()

    async def _claim(self, claim: model.Claim, verdict: model.Verdict, now: datetime, failed: list[str]) -> None:
        status = st.claim_status(claim.raw, verdict, now=now)
        if not st.changed(claim.raw, status):
            return
        path = resource_path(GROUP_VERSION, "resourcepoolclaims", namespace=claim.namespace, name=claim.name)
        try:
            body = {"metadata": {"uid": claim.uid}, "status": st.claim_patch(claim.raw, status)}
            stored = await self.kube.merge_patch(f"{path}/status", body)
        except KubeError as err:
            # 409: the uid precondition failed (the claim was deleted and created again); the watch says so.
            if not err.gone and not err.conflict:
                log.warning("claim status write failed", extra={"claim": claim.key, "error": str(err)})
                failed.append(claim.key)
            return
        WRITES.labels("ResourcePoolClaim", "status").inc()
        self.claims.items[claim.key] = stored
        previous = (claim.raw.get("status") or {}).get("condition") or {}
        if not verdict.bound and previous.get("reason") != verdict.reason:
            # Binding is said by the status alone (as a PVC's is); a claim that waits or is refused, or loses its
            # binding, also gets an Event, once per reason.
            waiting = verdict.reason in (model.POOL_EXHAUSTED, model.QUEUE_EXHAUSTED, model.POOL_DELETED)
            self._event(
                with_kind(stored, GROUP_VERSION, "ResourcePoolClaim"), "Normal" if waiting else "Warning", verdict
            )

    def _event(self, obj: JSON, kind: EventType, verdict: model.Verdict) -> None:
        """Queue a claim's Event: posted off the pass, so a burst of bindings is not slowed by as many Event
        writes; when the queue is full the Event is dropped (the status already says it) and counted."""
        try:
            self._events.put_nowait((obj, kind, verdict.reason, verdict.message))
        except asyncio.QueueFull:
            EVENTS_DROPPED.inc()

    async def _post_events(self) -> None:
        while True:
            obj, kind, reason, message = await self._events.get()
            await self.events.emit(obj, kind, reason, message)
            WRITES.labels("Event", "create").inc()

    async def _finalize(self, pool: model.PoolPlan) -> None:
        """Pool deletion: release (or delete, with ``deleteBoundResources``) its bound claims, remove its
        quotas, then drop the finalizer. Each step is idempotent; a failure is retried by the next pass."""
        meta = pool.raw["metadata"]
        if names.POOL_FINALIZER not in (meta.get("finalizers") or []):
            return
        delete = pool.spec is not None and pool.spec.config.delete_bound_resources
        failed = False
        for record in pool.committed.values():
            path = resource_path(GROUP_VERSION, "resourcepoolclaims", namespace=record.namespace, name=record.name)
            try:
                if delete:
                    await self.kube.request("DELETE", path, body={"preconditions": {"uid": record.uid}})
                    WRITES.labels("ResourcePoolClaim", "delete").inc()
                else:
                    verdict = model.Verdict(model.POOL_DELETED, f"pool {pool.name} was deleted; the claim was released")
                    raw = self.claims.get(f"{record.namespace}/{record.name}") or {"metadata": {}}
                    status = st.claim_status(raw, verdict, now=datetime.now(UTC))
                    await self.kube.merge_patch(f"{path}/status", {"metadata": {"uid": record.uid}, "status": status})
                    WRITES.labels("ResourcePoolClaim", "status").inc()
            except KubeError as err:
                if not (err.not_found or err.conflict):
                    failed = True
                    log.warning("releasing a claim failed", extra={"claim": path, "error": str(err)})
        for quota in list(self.quotas.values()):
            if resourcequotas.owning_pool_uid(quota) == pool.uid:
                await self._delete_quota(quota)
        if failed:
            return
        remaining = [f for f in meta.get("finalizers") or [] if f != names.POOL_FINALIZER]
        patch = {"metadata": {"finalizers": remaining, "resourceVersion": meta["resourceVersion"]}}
        try:
            await self.kube.merge_patch(f"{POOLS_PATH}/{pool.name}", patch)
        except KubeError as err:
            if not (err.not_found or err.conflict):
                log.warning("removing the pool finalizer failed", extra={"pool": pool.name, "error": str(err)})
            return
        WRITES.labels("ResourcePool", "finalizer").inc()
        action = "deleted" if delete else "released"
        log.info("pool finalised", extra={"pool": pool.name, "claims": len(pool.committed), "action": action})

    async def _warn(self, kind: str, raw: JSON, problems: list[str], reason: str) -> None:
        """One Warning per distinct problem set (:meth:`EventRecorder.warn_once`), forgotten when the object is
        fine again."""
        key = f"{kind}/{raw['metadata']['name']}"
        if not problems:
            self.events.fine(key)
            return
        obj = with_kind(raw, GROUP_VERSION, kind)
        await self.events.warn_once(key, obj, reason, "; ".join(problems), namespace=self.events_namespace)
