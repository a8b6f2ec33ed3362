"""The global quotas controller: informers -> one pure plan -> snapshot on every replica, writes on the leader.

Two loops share the informers, as in enclave-tenants. The *publish* loop recompiles the GlobalResourceQuotas
snapshot on every change and publishes it at once, so admission knows a new selection or limit within
milliseconds. The *write* loop, active only on the Lease holder, converges the cluster on the same plan: the
GlobalResourceQuotas generated from tenant rules, one ResourceQuota per selected namespace (created, put back
when edited by hand, recreated when the scopes change, deleted when the namespace leaves the selection or the
quota goes), each quota's QuantityLedger, status and events. Every write is decided by comparing the plan with
the informer caches, so a steady state costs no API call; a usage change costs one ``hard`` patch per other
namespace of the quota, one status write and one ledger write.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass
from datetime import UTC, datetime

from enclave_core import GROUP_VERSION
from enclave_core.api import names
from enclave_core.api.names import TENANT_LABEL
from enclave_core.kube import projections, shared
from enclave_core.kube.events import EventRecorder, EventType
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path, with_kind
from enclave_core.ledger import LedgerClient
from enclave_core.runtime.controller import ControllerBase
from enclave_core.runtime.loops import ControllerLoop, Result
from enclave_core.snapshots.globalquotas import GLOBALQUOTAS_KIND
from enclave_core.snapshots.hub import SnapshotHub
from enclave_globalquotas import status as st
from enclave_globalquotas.ledger import Deferrals, in_flight
from enclave_globalquotas.metrics import LOOP, NOT_READY, QUOTAS, WRITES
from enclave_globalquotas.plan import Plan, Problem, QuotaPlan, build_plan, drift_patch, scopes_changed
from enclave_globalquotas.recount import Pair, Recounts
from enclave_globalquotas.rules import build_rule_plan
from enclave_globalquotas.rules import drifted as rule_drifted
from enclave_globalquotas.settling import Settling, remember

log = logging.getLogger(__name__)

RECHECK_SECONDS = 1.0
"""How soon a pass that deferred a ResourceQuota because of a create in flight runs again."""


QUOTAS_PATH = f"/apis/{GROUP_VERSION}/globalresourcequotas"
TENANTS_PATH = f"/apis/{GROUP_VERSION}/tenants"
RULE_STATUSES_PATH = f"/apis/{GROUP_VERSION}/rulestatuses"
MANAGED = f"{names.MANAGED_BY}={names.GLOBALQUOTAS_MANAGER}"


@dataclass(frozen=True)
class Settings:
    resync_seconds: float = 60.0
    """Full pass without any change, a safety net for missed events."""
    concurrency: int = 16
    """ResourceQuotas written in parallel."""
    namespace: str = "enclave-system"
    """Where the quotas' QuantityLedgers live (``--namespace``)."""


class GlobalQuotasController(Settling, ControllerBase[Settings]):
    def __init__(self, kube: Kube, settings: Settings, hub: SnapshotHub, events: EventRecorder) -> None:
        super().__init__(kube, settings, hub, events)
        self.ledger_namespace = ledger_namespace = settings.namespace
        self._ledgers_path = resource_path(GROUP_VERSION, "quantityledgers", namespace=ledger_namespace)
        self.ledger_client = LedgerClient(kube, ledger_namespace)
        self.settled: set[str] = set()
        """Reservations whose object exists (their create is no longer in flight)."""
        self.counted: set[tuple[str, str]] = set()
        """(quota, reservation id) whose object existed before a count of its namespace that the quota's usage
        holds: only these are folded away (enclave_globalquotas.ledger, *Settled*)."""
        self._settling: dict[Pair, set[str]] = {}
        """This pass: (quota, namespace) -> reservations whose object exists and that no count holds yet."""
        self._listed: dict[Pair, set[tuple[str, str]]] = {}
        """This pass: (quota, namespace) -> (plural, name) of the objects its count listed. A pending create whose
        object is listed is in that count, so it is folded away with it (held on top of it, it would refuse a
        create the quota has room for), even when this pass's ledger copy did not show it yet."""
        self.fresh: dict[str, JSON] = {}
        """ResourceQuotas read afresh while settling, newer than the watch until the watch catches up."""
        self._deferrals = Deferrals()
        self.recounts = Recounts()
        """Namespaces whose ResourceQuota may report less than what exists, and their counts (recount.py)."""
        self._settles: dict[str, int] = {}
        """Namespace -> reservations settled there so far: a settle is a reason to count a suspect again."""
        change = self._changed
        # Namespaces, Tenants and RuleStatuses as every controller caches them (one copy in a host):
        # enclave_core.kube.projections.
        self.quotas = Informer(kube, QUOTAS_PATH, on_change=change, name="globalresourcequotas")
        self.namespaces = shared.informer(
            kube, "/api/v1/namespaces", on_change=change, name="namespaces", transform=projections.namespace
        )
        self.resource_quotas = Informer(
            kube, "/api/v1/resourcequotas", label_selector=MANAGED, on_change=change, name="resourcequotas"
        )
        self.ledgers = Informer(
            kube, self._ledgers_path, label_selector=MANAGED, on_change=change, name="quantityledgers"
        )
        self.tenants = shared.informer(
            kube, TENANTS_PATH, on_change=change, name="tenants", transform=projections.tenant
        )
        self.rule_statuses = shared.informer(
            kube, RULE_STATUSES_PATH, on_change=change, name="rulestatuses", transform=projections.rule_status
        )
        """Namespaces' own rules: their ``spec[].quota`` entries are quotas as a tenant rule's are."""
        self.loops = ControllerLoop(
            "globalquotas",
            informers=self.informers(),
            publish=self.publish,
            reconcile=self.reconcile,
            resync_seconds=settings.resync_seconds,
            metrics=LOOP,
            gate=self.configuration,  # nothing is written before the events namespace is known
        )
        self.synced, self.reconciled = self.loops.synced, self.loops.reconciled

    def informers(self) -> list[Informer]:
        return [self.quotas, self.namespaces, self.resource_quotas, self.ledgers, self.tenants, self.rule_statuses]

    def _changed(self, _key: str = "") -> None:
        self.loops.changed()

    def set_leading(self, leading: bool) -> None:
        self.loops.set_leading(leading)

    async def run(self) -> None:
        await self.loops.run()

    # -- plan and snapshot ---------------------------------------------------------------------------------

    def plan(self) -> Plan:
        return build_plan(
            self.quotas.values(),
            self.namespaces.items,
            self.quota_view(),
            ledger_namespace=self.ledger_namespace,
            counted=self.recounts.overrides(),
        )

    def publish(self) -> Plan:
        plan = self.plan()
        if self.hub.publish(GLOBALQUOTAS_KIND, plan.snapshot.model_dump_json().encode()) is not None:
            log.debug("global quotas snapshot published", extra={"quotas": len(plan.snapshot.quotas)})
        QUOTAS.set(len(plan.quotas))
        return plan

    # -- one write pass (leader only) ----------------------------------------------------------------------

    async def reconcile(self) -> Result:
        await self._rule_quotas()
        ledgers = await self._settle()
        await self._recount(ledgers, self.plan())
        plan = self.plan()
        # Leave the ResourceQuota of a namespace with a create in flight as it is: a hard change now would make
        # kube-controller-manager recount it while an object is charged but not stored (ledger.in_flight).
        clock = asyncio.get_running_loop().time()
        deferred = self._deferrals.hold(in_flight(ledgers, self.settled, now=datetime.now(UTC)), clock)
        # Come back when the creates have landed (or their window ended), or when a suspect namespace is to be
        # counted again, even if no event says so.
        due = [clock + RECHECK_SECONDS] if deferred else []
        due += [at for at in [self.recounts.recheck_at()] if at is not None]
        errors: dict[str, list[Problem]] = {name: [] for name in plan.quotas}
        semaphore = asyncio.Semaphore(self.settings.concurrency)

        async def bounded(work: Awaitable[None]) -> None:
            async with semaphore:
                await work

        writes = [
            bounded(self._resource_quota(quota_plan, namespace, body, errors[name]))
            for name, quota_plan in plan.quotas.items()
            if quota_plan.valid
            for namespace, body in quota_plan.desired.items()
            if (name, namespace) not in deferred
            or f"{namespace}/{body['metadata']['name']}" not in self.resource_quotas.items
        ]
        await asyncio.gather(*writes, *(bounded(self._delete_stale(key)) for key in plan.stale))
        await self._ledgers(plan, errors)
        now = datetime.now(UTC)
        not_ready = 0
        for name, quota_plan in plan.quotas.items():
            problems = quota_plan.problems + errors[name]
            not_ready += bool(problems) or not quota_plan.initialized
            await self._warn(quota_plan.raw, problems)
            await self._write_status(quota_plan, st.quota_status(quota_plan, problems, now))
        NOT_READY.set(not_ready)
        if not due:
            return Result()
        return Result(requeue_after=max(min(due) - asyncio.get_running_loop().time(), 0.1))

    async def _resource_quota(self, quota: QuotaPlan, namespace: str, desired: JSON, problems: list[Problem]) -> None:
        name = desired["metadata"]["name"]
        key = f"{namespace}/{name}"
        path = resource_path("v1", "resourcequotas", namespace=namespace, name=name)
        live = self.resource_quotas.get(key)
        try:
            if live is not None and scopes_changed(live, desired):
                await self.kube.delete(path)
                WRITES.labels("ResourceQuota", "delete").inc()
                self.resource_quotas.items.pop(key, None)
                live = None
            if live is None:
                try:
                    stored = await self.kube.create(resource_path("v1", "resourcequotas", namespace=namespace), desired)
                    WRITES.labels("ResourceQuota", "create").inc()
                except KubeError as err:
                    if err.status != 409:
                        raise
                    adopted = await self._adopt(path, quota, desired, problems)
                    if adopted is None:
                        return
                    stored = adopted
            else:
                patch = drift_patch(live, desired)
                if patch is None:
                    return
                stored = await self.kube.merge_patch(path, patch)
                WRITES.labels("ResourceQuota", "patch").inc()
            remember(self.resource_quotas, key, stored)
        except KubeError as err:
            if not err.gone:
                problems.append(Problem("ApplyFailed", f"ResourceQuota {namespace}/{name}: {err}"))

    async def _adopt(self, path: str, quota: QuotaPlan, desired: JSON, problems: list[Problem]) -> JSON | None:
        """A ResourceQuota of our name exists but is not in the (label-filtered) cache: ours with the label
        removed by hand is put back; anyone else's is reported, never overwritten."""
        found = await self.kube.get_or_none(path)
        if found is None:
            return None  # deleted meanwhile; the next pass creates it
        owners = found.get("metadata", {}).get("ownerReferences") or []
        if not any(o.get("uid") == quota.uid for o in owners):
            meta = desired["metadata"]
            problems.append(
                Problem(
                    "ConflictingResourceQuota",
                    f"ResourceQuota {meta['namespace']}/{meta['name']} exists and is not managed by Enclave; "
                    "rename or delete it",
                )
            )
            return None
        patch = drift_patch(found, desired) or {}
        stored = await self.kube.merge_patch(path, patch) if patch else found
        WRITES.labels("ResourceQuota", "patch").inc()
        return stored

    async def _delete_stale(self, key: str) -> None:
        namespace, _, name = key.partition("/")
        try:
            await self.kube.delete(resource_path("v1", "resourcequotas", namespace=namespace, name=name))
        except KubeError as err:
            if not err.gone:
                log.warning("could not delete ResourceQuota", extra={"object": key, "error": str(err)})
            return
        self.resource_quotas.items.pop(key, None)
        WRITES.labels("ResourceQuota", "delete").inc()
        log.info("ResourceQuota removed", extra={"object": key})

    # -- tenant rules --------------------------------------------------------------------------------------

    async def _rule_quotas(self) -> None:
        generated = {
            name: obj
            for name, obj in self.quotas.items.items()
            if (obj.get("metadata", {}).get("labels") or {}).get(names.RULE_QUOTA_LABEL)
            and (obj.get("metadata", {}).get("labels") or {}).get(names.MANAGED_BY) == names.GLOBALQUOTAS_MANAGER
        }
        namespace_tenant = {
            str(item["metadata"]["name"]): tenant
            for item in self.namespaces.values()
            if (tenant := (item["metadata"].get("labels") or {}).get(TENANT_LABEL))
        }
        rule_plan = build_rule_plan(self.tenants.values(), generated, self.rule_statuses.values(), namespace_tenant)
        for name, body in rule_plan.desired.items():
            if not rule_drifted(self.quotas.get(name), body):
                continue
            try:
                remember(self.quotas, name, await self.kube.apply(f"{QUOTAS_PATH}/{name}", body))
                WRITES.labels("GlobalResourceQuota", "apply").inc()
            except KubeError as err:
                owner = body["metadata"]["ownerReferences"][0]["name"]
                tenant = self.tenants.get(owner) or {"metadata": {"name": owner}}
                await self._emit(
                    tenant, "Tenant", "Warning", "RuleQuotaFailed", f"GlobalResourceQuota {name}: {err.message}"
                )
        for name in rule_plan.stale:
            try:
                await self.kube.delete(f"{QUOTAS_PATH}/{name}")
            except KubeError as err:
                log.warning("could not delete a rule quota", extra={"object": name, "error": str(err)})
                continue
            self.quotas.items.pop(name, None)
            WRITES.labels("GlobalResourceQuota", "delete").inc()

    # -- status and events ---------------------------------------------------------------------------------

    async def _write_status(self, plan: QuotaPlan, status: JSON) -> None:
        if not st.changed(plan.raw, status):
            return
        patch = {"status": st.replacing_patch(plan.raw.get("status") or {}, status)}
        try:
            stored = await self.kube.merge_patch(f"{QUOTAS_PATH}/{plan.name}/status", patch)
        except KubeError as err:
            if not err.not_found:
                log.warning("status write failed", extra={"object": plan.name, "error": str(err)})
            return
        remember(self.quotas, plan.name, stored)
        WRITES.labels("GlobalResourceQuota", "status").inc()

    async def _warn(self, raw: JSON, problems: list[Problem]) -> None:
        """One Warning per distinct problem set (:meth:`EventRecorder.warn_once`), forgotten when the quota is
        fine again."""
        key = raw["metadata"]["name"]
        if not problems:
            self.events.fine(key)
            return
        message = "; ".join(p.message for p in problems)
        obj = with_kind(raw, GROUP_VERSION, "GlobalResourceQuota")
        await self.events.warn_once(key, obj, problems[0].reason, message, namespace=self.events_namespace)

    async def _emit(self, raw: JSON, kind: str, event_type: EventType, reason: str, message: str) -> None:
        obj = {**raw, "apiVersion": raw.get("apiVersion") or GROUP_VERSION, "kind": raw.get("kind") or kind}
        await self.events.emit(obj, event_type, reason, message, namespace=self.events_namespace)
