"""The ledger side of the global quotas write pass: settle, recount, and keep each quota's QuantityLedger.

Admission reserves creates on a quota's ledger; each pass of the Lease holder first finds the pending
reservations whose object now exists (:meth:`Settling._settle`: read afresh, their namespaces marked to be
counted), then counts the namespaces whose ResourceQuota may report less than what exists
(:meth:`Settling._recount`, enclave_globalquotas.recount), and, after the ResourceQuotas are written, folds each
quota's ledger (:meth:`Settling._ledgers`): a reservation leaves it only into a count taken after its object
existed (enclave_globalquotas.ledger, *Settled*). Ledgers of quotas that are gone are removed.

``Settling`` is a base of :class:`enclave_globalquotas.controller.GlobalQuotasController`.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from enclave_core.api.ledger import QuantityLedger, QuantityLedgerStatus, ResourceReservation
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path
from enclave_core.ledger import LedgerBusyError, LedgerClient, LedgerMissingError
from enclave_core.ledger.resources import fold_resources
from enclave_core.quantity import Quantity
from enclave_core.snapshots.globalquotas import GlobalQuotaView
from enclave_globalquotas import naming
from enclave_globalquotas.ledger import ledger_body, newer, object_path, quota_ledger_name
from enclave_globalquotas.metrics import COUNTS, WRITES
from enclave_globalquotas.plan import Plan, Problem, QuotaPlan
from enclave_globalquotas.recount import Pair, Recounts, count, kinds_for

if TYPE_CHECKING:
    from enclave_globalquotas.controller import Settings

log = logging.getLogger(__name__)

METADATA_ONLY = "application/json;as=PartialObjectMetadataList;g=meta.k8s.io;v=v1,application/json"
"""Lists of kinds counted by their number alone come back as metadata: a count of ConfigMaps holds no data."""
COUNTED_BY_NUMBER = frozenset({"configmaps", "replicationcontrollers"})


def remember(informer: Informer, key: str, stored: JSON) -> None:
    """Put what a write returned into the cache, unless the watch already brought something newer (e.g. the
    resourcequota controller's status for a ResourceQuota we just created): an older copy there would hide
    that change until the next event, which in a steady state never comes."""
    chosen = newer(stored, informer.items.get(key))
    if chosen is not None:
        informer.items[key] = chosen


def seed(seeds: JSON, namespace: str, reported: dict[str, Quantity]) -> dict[str, Quantity] | None:
    """The usage accepted for ``namespace`` before this process started (``status.namespaceUsage``), or None
    when the namespace is new to the quota."""
    entry = seeds.get(namespace)
    if not isinstance(entry, dict):
        return None
    found: dict[str, Quantity] = {}
    for name, value in (entry.get("used") or {}).items():
        if name in reported:
            try:
                found[name] = Quantity.parse(value)
            except ValueError:
                continue
    return found


class Settling:
    """Settle reservations into counts, recount what may be under-reported, keep each quota's ledger."""

    kube: Kube
    settings: Settings
    ledger_namespace: str
    _ledgers_path: str
    ledger_client: LedgerClient
    ledgers: Informer
    resource_quotas: Informer
    recounts: Recounts
    settled: set[str]
    counted: set[tuple[str, str]]
    _settling: dict[Pair, set[str]]
    _listed: dict[Pair, set[tuple[str, str]]]
    fresh: dict[str, JSON]
    _settles: dict[str, int]

    def quota_view(self) -> dict[str, JSON]:
        """The managed ResourceQuotas: the watch's copies, or a fresher one read while settling."""
        view = dict(self.resource_quotas.items)
        for key, obj in list(self.fresh.items()):
            live = view.get(key)
            chosen = newer(obj, live) if live is not None else None
            if chosen is None or chosen is live:
                self.fresh.pop(key, None)  # the watch caught up (or the quota went)
            else:
                view[key] = chosen
        return view

    async def _settle(self) -> list[QuantityLedger]:
        """Find the pending reservations whose object now exists, mark their namespaces to be counted this pass
        (:meth:`Recounts.settling`) and read their ResourceQuotas afresh (see enclave_globalquotas.ledger): API
        reads only while reservations are pending. Returns the ledgers it read."""
        pending: dict[str, list[tuple[str, str, str]]] = {}  # namespace -> (quota, reservation id, object path)
        held: set[str] = set()
        keys: set[tuple[str, str]] = set()
        ledgers: list[QuantityLedger] = []
        for obj in self.ledgers.values():
            try:
                ledger = QuantityLedger.model_validate(obj)
            except ValueError:
                continue
            ledgers.append(ledger)
            quota = ledger.spec.target_ref.name if ledger.spec is not None else ""
            block = ledger.status.resource_quota if ledger.status is not None else None
            for reservation in (block.reservations or []) if block is not None else []:
                held.add(reservation.id)
                keys.add((quota, reservation.id))
                path = object_path(reservation)
                namespace = reservation.object_ref.namespace
                if (quota, reservation.id) in self.counted or path is None or not namespace or not quota:
                    continue
                pending.setdefault(namespace, []).append((quota, reservation.id, path))
        self.settled &= held
        self.counted &= keys
        self._settling, self._listed = {}, {}
        clock = asyncio.get_running_loop().time()
        exists: dict[str, bool] = {}
        for namespace, items in pending.items():
            found = False
            for quota, reservation_id, path in items:
                try:
                    if path not in exists:  # asked again each pass until counted: the object may have gone
                        exists[path] = await self._exists(path)
                except KubeError as err:
                    log.warning("could not read a reserved object", extra={"object": path, "error": str(err)})
                    continue
                if not exists[path]:
                    self.settled.discard(reservation_id)
                    continue
                if reservation_id not in self.settled:
                    self.settled.add(reservation_id)
                    self._settles[namespace] = self._settles.get(namespace, 0) + 1
                self._settling.setdefault((quota, namespace), set()).add(reservation_id)
                self.recounts.settling((quota, namespace), clock)
                found = True
            if not found:
                continue
            for key, obj in list(self.resource_quotas.items.items()):
                if not key.startswith(f"{namespace}/"):
                    continue
                name = obj["metadata"]["name"]
                try:
                    current = await self.kube.get_or_none(
                        resource_path("v1", "resourcequotas", namespace=namespace, name=name)
                    )
                except KubeError:
                    continue
                if current is not None:
                    self.fresh[key] = current
        return ledgers

    async def _recount(self, ledgers: list[QuantityLedger], plan: Plan) -> None:
        """Count the objects of every namespace whose ResourceQuota may report less than what exists (its
        report went down, or it is new to the quota), so the plan that follows uses the larger of report and
        count (enclave_globalquotas.recount). ``plan`` is the pass's plan after :meth:`_settle`. No API read
        unless some report went down."""
        views = {view.name: view for view in plan.snapshot.quotas}
        now = datetime.now(UTC)
        pending: set[Pair] = set()
        for ledger in ledgers:
            block = ledger.status.resource_quota if ledger.status is not None else None
            quota = ledger.spec.target_ref.name if ledger.spec is not None else ""
            for reservation in (block.reservations or []) if block is not None else []:
                expired = reservation.expires_at is not None and reservation.expires_at <= now
                if reservation.id not in self.settled and not expired and reservation.object_ref.namespace:
                    pending.add((quota, reservation.object_ref.namespace))
        clock = asyncio.get_running_loop().time()
        live = self.quota_view()
        seen: list[tuple[Pair, dict[str, Quantity]]] = []
        work: list[tuple[Pair, tuple[str, int]]] = []
        for name, quota_plan in plan.quotas.items():
            view = views.get(name)
            if not quota_plan.valid or view is None or not kinds_for(quota_plan.hard):
                continue
            seeds = (quota_plan.raw.get("status") or {}).get("namespaceUsage") or {}
            rq_name = naming.resource_quota_name(name)
            for namespace in sorted(quota_plan.reported):
                current = live.get(f"{namespace}/{rq_name}")
                if current is None:
                    continue
                pair = (name, namespace)
                reported = quota_plan.reported_usage[namespace]
                seen.append((pair, reported))
                key = (str(current["metadata"].get("resourceVersion", "")), self._settles.get(namespace, 0))
                if self.recounts.wants_count(pair, reported, key, clock, seed=seed(seeds, namespace, reported)):
                    work.append((pair, key))
        semaphore = asyncio.Semaphore(self.settings.concurrency)

        async def one(pair: Pair, key: tuple[str, int]) -> None:
            async with semaphore:
                try:
                    amounts, listed = await self._count(views[pair[0]], pair[1])
                except KubeError as err:
                    COUNTS.labels("error").inc()
                    log.warning("could not count a namespace", extra={"object": pair[1], "error": str(err)})
                    self.recounts.failed(pair, key)
                    return
            COUNTS.labels("ok").inc()
            self.recounts.counted(pair, amounts, key, clock)
            # The count came after these objects were seen to exist: the usage now holds them.
            self.counted.update((pair[0], reservation) for reservation in self._settling.get(pair, ()))
            self._listed[pair] = listed

        await asyncio.gather(*(one(pair, key) for pair, key in work))
        for pair, reported in seen:
            effective = self.recounts.effective(pair, reported, pending=pair in pending, now=clock)
            if effective != reported:
                log.info(
                    "ResourceQuota reports less than the namespace's objects; using the count",
                    extra={"object": f"{pair[1]}/{pair[0]}", "reported": str(reported), "counted": str(effective)},
                )
        self.recounts.forget(pair for pair, _ in seen)

    async def _count(self, quota: GlobalQuotaView, namespace: str) -> tuple[dict[str, Quantity], set[tuple[str, str]]]:
        """What ``namespace``'s objects count for toward ``quota`` (one list per evaluated kind, paged), and the
        (plural, name) of every object listed."""
        total: dict[str, Quantity] = {}
        listed: set[tuple[str, str]] = set()
        for kind in kinds_for(quota.hard):
            path = resource_path("v1", kind, namespace=namespace)
            accept = METADATA_ONLY if kind in COUNTED_BY_NUMBER else "application/json"
            items: list[JSON] = []
            token: str | None = None
            while True:
                query: dict[str, str | int | bool] = {"limit": 500}
                if token:
                    query["continue"] = token
                page = await self.kube.request("GET", path, query=query, accept=accept)
                items.extend(page.get("items") or [])
                token = (page.get("metadata") or {}).get("continue")
                if not token:
                    break
            total.update(count(quota, kind, items))
            listed.update((kind, str((item.get("metadata") or {}).get("name"))) for item in items)
        return total, listed

    async def _exists(self, path: str) -> bool:
        """Whether the object at ``path`` exists, read as metadata only (its data is not needed)."""
        try:
            await self.kube.request("GET", path, accept=METADATA_ONLY.replace("MetadataList", "Metadata"))
        except KubeError as err:
            if err.not_found:
                return False
            raise
        return True

    async def _ledgers(self, plan: Plan, errors: dict[str, list[Problem]]) -> None:
        for obj in self.ledgers.values():
            self.ledger_client.observe(obj)
        wanted = set()
        for name, quota_plan in plan.quotas.items():
            ledger = quota_ledger_name(name)
            wanted.add(ledger)  # kept (with its reservations) even while the spec is refused
            if not quota_plan.valid:
                continue
            try:
                await self._ledger(quota_plan, ledger)
            except (KubeError, LedgerBusyError, LedgerMissingError) as err:
                errors[name].append(Problem("ApplyFailed", f"QuantityLedger {ledger}: {err}"))
        for key, obj in list(self.ledgers.items.items()):
            name = obj["metadata"]["name"]
            if name in wanted:
                continue
            with contextlib.suppress(KubeError):
                await self.ledger_client.delete(name)
                WRITES.labels("QuantityLedger", "delete").inc()
                self.ledgers.items.pop(key, None)

    async def _ledger(self, plan: QuotaPlan, name: str) -> None:
        key = f"{self.ledger_namespace}/{name}"
        live = self.ledgers.get(key)
        target = (live or {}).get("spec", {}).get("targetRef", {})
        if live is not None and target.get("uid") and target.get("uid") != plan.uid:
            # Left over from a deleted quota of the same name: its reservations mean nothing now.
            await self.ledger_client.delete(name)
            WRITES.labels("QuantityLedger", "delete").inc()
            self.ledgers.items.pop(key, None)
            live = None
        if live is None:
            try:
                live = await self.kube.create(
                    self._ledgers_path, ledger_body(plan.name, plan.uid, self.ledger_namespace)
                )
                WRITES.labels("QuantityLedger", "create").inc()
            except KubeError as err:
                if err.status != 409:
                    raise
                live = await self.kube.get(f"{self._ledgers_path}/{name}")
            remember(self.ledgers, key, live)
            self.ledger_client.observe(live)
        counted, existing, listed = self.counted, self.settled, self._listed

        def in_count(reservation: ResourceReservation) -> bool:
            if (plan.name, reservation.id) in counted:
                return True
            path = object_path(reservation) if reservation.delta is None else None
            item = (path.split("/")[-2], str(reservation.object_ref.name)) if path is not None else None
            return item is not None and item in listed.get((plan.name, str(reservation.object_ref.namespace)), ())

        now = datetime.now(UTC)

        def step(status: QuantityLedgerStatus | None) -> QuantityLedgerStatus:
            return fold_resources(
                status,
                used=plan.used,
                namespaces=plan.namespaces,
                initialized=plan.initialized,
                generation=plan.generation,
                settled=in_count,
                stored=lambda reservation: reservation.id in existing,
                now=now,
            )

        _, stored = await self.ledger_client.update(name, step)
        if stored is not None:
            remember(self.ledgers, key, stored)
            WRITES.labels("QuantityLedger", "status").inc()
