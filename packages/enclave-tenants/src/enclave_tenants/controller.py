"""The tenants controller: informers -> one pure plan -> snapshot on every replica, writes on the leader.

Two loops share the informers. The *publish* loop recompiles the Tenancy snapshot on every change and
publishes it at once; it never waits on the API, so admission sees a new owner or namespace within
milliseconds even while the *write* loop is busy. The write loop, active only on the Lease holder, converges
the cluster on the same plan: namespace metadata (server-side apply, field manager ``enclave-tenants``),
RoleBindings, pruning, Tenant and TenantOwner status, events. Every write is decided by comparing the plan
with the informer caches, so a steady state costs no API calls and any drift someone introduces (a deleted
binding, an edited label) comes back as a watch event and is undone by the next pass.

Both loops are the runtime's (:class:`enclave_core.runtime.loops.ControllerLoop`) with the batched-rounds option:
this controller keeps hints of where work is (:mod:`enclave_tenants.work`), each pass is a bounded round
(:meth:`TenantsController.reconcile`), and the loop asks the hints whether there is work, marks everything at the
resync and after a failed round, and drops them on a replica without the Lease.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass

from enclave_core.api import names
from enclave_core.api.names import PROMOTED_LABEL
from enclave_core.api.tenancy import Tenant
from enclave_core.kube import projections, shared
from enclave_core.kube.events import EventRecorder
from enclave_core.kube.informer import Informer, keep_managed_fields
from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path
from enclave_core.ledger import LedgerClient
from enclave_core.runtime.controller import ControllerBase
from enclave_core.runtime.loops import DONE, ControllerLoop, LoopMetrics, Result
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.rules import RULE_STATUS_NAME, RULES_KIND
from enclave_core.snapshots.tenancy import TENANCY_KIND, TenantView
from enclave_tenants import bindings, ledgers, namespaces, rules, work
from enclave_tenants.caches import (
    BINDINGS_PATH,
    BUDGETS_PATH,
    OWNERS_PATH,
    RULE_STATUSES_PATH,
    TENANTS_PATH,
    VOLUMES_PATH,
    _binding_trim,
    _namespace_trim,
    _rule_status_trim,
    _volume_trim,
)
from enclave_tenants.metrics import NAMESPACES, PUBLISHES, RECONCILE_SECONDS, RECONCILES, TENANTS, WRITES
from enclave_tenants.namespace_quota import NamespaceQuota
from enclave_tenants.native.controller import NativePolicies
from enclave_tenants.plan import Plan, build_plan
from enclave_tenants.policy import Policy
from enclave_tenants.reporting import Reporting, _Outcome

log = logging.getLogger(__name__)

PUBLISH_YIELD_AFTER = 0.05
"""Seconds a snapshot compile (or a plan) may take before the next one waits as long: at most half of the process
goes to compiling, half to planning (see ``ControllerLoop(publish_yield_after=...)`` and :meth:`reconcile`)."""
LOOP = LoopMetrics(passes=RECONCILES, duration=RECONCILE_SECONDS, publishes=PUBLISHES)


@dataclass(frozen=True)
class Settings:
    resync_seconds: float = 60.0
    """Full pass without any change, a safety net for missed events."""
    concurrency: int = 32
    """Namespaces written in parallel (each one's writes in sequence)."""
    namespace: str = "enclave-system"
    """Where the tenants' namespace-quota ledgers live."""
    batch_size: int = 300
    """Namespaces written per round of the write loop, each round followed by the statuses it affects."""
    managed_metadata: bool = True
    """Reconcile rules' managed values onto existing objects (off: admission alone sets them, on writes, and the
    controller needs no list/patch grant on every namespaced resource)."""
    grants: tuple[bindings.Grant, ...] = ()
    """Cluster roles bound in every tenant namespace to Enclave's own service accounts (``--namespace-grant``)."""


class TenantsController(Reporting, NamespaceQuota, ControllerBase[Settings]):
    """The informers, the publish loop and the write loop (see the module docstring)."""

    def __init__(self, kube: Kube, settings: Settings, hub: SnapshotHub, events: EventRecorder) -> None:
        super().__init__(kube, settings, hub, events)
        self.policy = Policy()
        """The documented defaults until enclave-config's configuration says (:meth:`configure`)."""
        self._views: dict[str, TenantView] = {}
        self._encoded: dict[str, tuple[TenantView, bytes]] = {}
        self._rules: dict[str, rules.NamespaceRulePlan] = {}
        """The last compiled rules per tenant namespace (the write loop writes their RuleStatus status)."""
        self._managed: dict[str, str] = {}
        """Namespace -> signature of the managed metadata last reconciled onto its objects."""
        self._dirty = work.Dirty()
        """Where the write loop may find work (hints; see :mod:`enclave_tenants.work`)."""
        self._plan: Plan | None = None
        self._plan_stale = True
        """Something the plan reads changed since ``_plan`` was built (RoleBindings and RuleStatuses do not)."""
        self._signatures: dict[str, tuple[object, ...]] = {}
        """``Tenant/<name>`` and ``TenantOwner/<name>`` -> :func:`work.spec_signature` last seen."""
        self._ledgers_due = True
        self._fold_at = float("inf")
        """Monotonic time an unconfirmed reservation of a namespace-quota ledger expires."""
        self._retry: set[str] = set()
        self._retry_statuses: set[str] = set()
        self._retry_at = float("inf")
        self._parsed: dict[str, tuple[JSON, Tenant]] = {}
        """Tenant name -> (cached object, its model), shared by every plan (see :func:`plan.build_plan`)."""
        self._retry_backoff = 0.5
        self._not_ready: dict[str, bool] = {}
        self._planned_at = 0.0
        self._plan_seconds = 0.0
        """How long the last plan took: a plan covers every tenant, so a stream of new namespaces (each one
        making the plan stale) is planned at most every as long again (see :meth:`reconcile`)."""
        self._binding_names: dict[str, tuple[str, ...]] = {}
        # Only namespaces' own apply entries are read (what this controller applied, to release it); every
        # other cached kind needs no managedFields at all. At 10,000 namespaces they were most of the caches.
        trim = keep_managed_fields()
        # Tenants, namespaces and RuleStatuses as every controller caches them (one copy in a host).
        self.tenants = shared.informer(
            kube, TENANTS_PATH, on_change=self._tenant_changed, name="tenants", transform=projections.tenant
        )
        self.owners = Informer(kube, OWNERS_PATH, on_change=self._owner_changed, name="tenantowners", transform=trim)
        self.namespaces = shared.informer(
            kube, "/api/v1/namespaces", on_change=self._namespace_changed, name="namespaces", transform=_namespace_trim
        )
        self.ledgers = LedgerClient(kube, settings.namespace)
        self.ledger_cache = self.ledgers.informer(names.TENANTS_MANAGER, on_change=self._ledger_changed)
        self.bindings = Informer(
            kube,
            BINDINGS_PATH,
            label_selector=f"{names.MANAGED_BY}={names.TENANTS_MANAGER}",
            on_change=self._binding_changed,
            name="rolebindings",
            transform=_binding_trim,
        )
        self.accounts = Informer(
            kube,
            "/api/v1/serviceaccounts",
            label_selector=f"{PROMOTED_LABEL}=true",
            on_change=self._account_changed,
            name="serviceaccounts",
            transform=trim,
        )
        self.rule_statuses = shared.informer(
            kube,
            RULE_STATUSES_PATH,
            on_change=self._rule_status_changed,
            name="rulestatuses",
            transform=_rule_status_trim,
        )
        self.volumes = Informer(
            kube, VOLUMES_PATH, on_change=self._publish_only, name="persistentvolumes", transform=_volume_trim
        )
        self.budgets = Informer(
            kube, BUDGETS_PATH, on_change=self._publish_only, name="poddisruptionbudgets", transform=trim
        )
        """For ``disruptionBudgets.required``: admission decides coverage from the Rules snapshot alone."""
        self.loop = ControllerLoop(
            "tenants",
            informers=self.informers(),
            reconcile=self.reconcile,
            resync_seconds=settings.resync_seconds,
            metrics=LOOP,
            publish=self.publish,
            gate=self.configuration,
            hints=self,
            release_memory=True,
            publish_yield_after=PUBLISH_YIELD_AFTER,
        )
        """Nothing is published or written before the policy is known (``gate``), so a restart never briefly
        drops promoted owners."""
        self.synced = self.loop.synced
        self.published = self.loop.published
        self.reconciled = self.loop.reconciled
        self.native = NativePolicies(
            kube,
            events,
            rule_statuses=self.rule_statuses,
            namespaces=self.namespaces,
            enclave_namespace=settings.namespace,
            resync_seconds=settings.resync_seconds,
            configured=self.configuration,
        )
        """The admission policies compiled from the RuleStatuses (``spec.rules.engine``), a loop of its own that
        waits for the configuration as the tenants loop does."""
        self.native.configure(self.policy.rules_engine, self.policy.ignored_groups)

    @property
    def leading(self) -> bool:
        """Whether this replica holds the Lease (the loop's; only the Lease holder writes)."""
        return self.loop.leading

    @leading.setter
    def leading(self, leading: bool) -> None:
        self.loop.leading = leading

    def informers(self) -> list[Informer]:
        return [
            self.tenants,
            self.owners,
            self.namespaces,
            self.bindings,
            self.accounts,
            self.ledger_cache,
            self.rule_statuses,
            self.volumes,
            self.budgets,
        ]

    # -- loops ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        await asyncio.gather(self.loop.run(), self.native.run())

    # -- the loop's hints (batched rounds, :class:`enclave_core.runtime.loops.Hints`) ---------------------------

    def has_work(self) -> bool:
        """Dirty keys, ledgers to write, or a retry or a ledger reservation's expiry that came due."""
        now = time.monotonic()
        if now >= self._retry_at:
            self._retry_at = float("inf")
            self._dirty.namespaces |= self._retry
            self._dirty.rules |= self._retry
            self._dirty.statuses |= self._retry_statuses
            self._retry, self._retry_statuses = set(), set()
        if now >= self._fold_at:
            self._fold_at = float("inf")
            self._ledgers_due = True
        return bool(self._dirty) or self._ledgers_due

    def look_at_everything(self) -> None:
        self._dirty.mark_everything()

    def forget_work(self) -> None:
        self._dirty = work.Dirty()  # the new leader starts from everything; keep nothing meanwhile

    # -- plan and snapshot ---------------------------------------------------------------------------------

    def plan(self, writes: bool = True) -> Plan:
        plan = build_plan(
            self.tenants.values(),
            self.owners.values(),
            self.namespaces.values(),
            self.accounts.values(),
            self.policy,
            previous_views=self._views,
            ledgers=ledgers.initialised(
                self.ledger_cache.values(),
                {str(t["metadata"]["name"]): str(t["metadata"].get("uid", "")) for t in self.tenants.values()},
            ),
            writes=writes,
            parsed=self._parsed,
            grants=self.settings.grants,
        )
        self._views = {name: p.view for name, p in plan.tenants.items() if p.view is not None}
        return plan

    def compile_rules(self, plan: Plan) -> dict[str, rules.NamespaceRulePlan]:
        """The rules of every tenant namespace (see :mod:`enclave_tenants.rules`), from the same informers."""
        own = {
            item["metadata"]["namespace"]: item
            for item in self.rule_statuses.values()
            if item["metadata"]["name"] == RULE_STATUS_NAME
        }
        live = {item["metadata"]["name"]: item for item in self.namespaces.values()}
        tenants = {name: tenant_plan.tenant for name, tenant_plan in plan.tenants.items()}
        # The last compile: a terminating namespace whose RuleStatus the namespace controller deleted keeps it.
        return rules.compile_namespaces(tenants, plan.namespace_tenant, live, own, previous=self._rules)

    def publish(self) -> Plan:
        plan = self.plan(writes=False)
        # Itemized (tenant name -> view JSON): subscribers get only what changed. A view the plan reused from
        # the previous round is the same object, so its JSON is reused too instead of re-encoding 10,000.
        items: dict[str, bytes] = {}
        encoded: dict[str, tuple[TenantView, bytes]] = {}
        for view in plan.snapshot.tenants:
            hit = self._encoded.get(view.name)
            data = hit[1] if hit is not None and hit[0] is view else view.model_dump_json().encode()
            items[view.name] = data
            encoded[view.name] = (view, data)
        self._encoded = encoded
        if self.hub.publish_items(TENANCY_KIND, items, envelope="tenants") is not None:
            log.debug("tenancy snapshot published", extra={"tenants": len(plan.snapshot.tenants)})
        self._rules = self.compile_rules(plan)
        tenants = {name: tenant_plan.tenant for name, tenant_plan in plan.tenants.items()}
        rules_snapshot = rules.snapshot(self._rules, self.volumes.values(), self.budgets.values(), tenants)
        if self.hub.publish(RULES_KIND, rules_snapshot.payload()) is not None:
            log.debug("rules snapshot published", extra={"namespaces": len(rules_snapshot.namespaces)})
        TENANTS.set(len(plan.tenants))
        NAMESPACES.set(len(plan.namespace_tenant))
        return plan

    # -- one write pass (leader only) ----------------------------------------------------------------------

    def _current_plan(self) -> Plan:
        """The plan, rebuilt only when something it reads changed (a RoleBinding or RuleStatus does not):
        during a burst of our own writes most rounds reuse it."""
        if self._plan is None or self._plan_stale:
            self._plan_stale = False
            before = self._plan.namespace_tenant if self._plan is not None else {}
            started = time.monotonic()
            self._plan = self.plan()
            self._planned_at = time.monotonic()
            self._plan_seconds = self._planned_at - started
            self._dirty.moved(before, self._plan.namespace_tenant)
            self._ledgers_due = True
            for gone in set(self._not_ready) - set(self._plan.tenants):
                del self._not_ready[gone]
        return self._plan

    async def reconcile(self) -> Result:
        """One bounded round of the write loop (Lease holder only): ``Result(0)`` while dirty work is left, else
        when the next retry or ledger reservation's expiry is due.

        Every dirty namespace is compared with the plan (pure, cheap); those with nothing to write are done.
        Of the rest, ``batch_size`` are written (missing objects before drifted ones, oldest first), then the
        statuses of the tenants this round looked at, the TenantOwner statuses when owners or tenants changed,
        and the namespace-quota ledgers. The rest stays dirty for the next round, which re-reads the caches:
        a namespace created meanwhile competes on its rank, not behind a 10,000-namespace pass.

        A plan covers every tenant: as the publish loop does with compiles, at most half of the process goes to
        planning, so a stream of new namespaces (each one making the plan stale) is planned together at most
        every as long again as the last plan took (at 10,000 namespaces a plan is ~0.2 CPU-s)."""
        if self._plan_stale and self._plan_seconds > PUBLISH_YIELD_AFTER:
            await asyncio.sleep(max(0.0, self._planned_at + min(self._plan_seconds, 2.0) - time.monotonic()))
        plan = self._current_plan()
        dirty = self._dirty
        if dirty.everything:
            every = set(self.namespaces.items)
            every.update(self._binding_names)
            dirty.expand(plan.namespace_tenant, _members(plan), every, plan.tenants)
        else:
            dirty.expand(plan.namespace_tenant, _members(plan), (), ())
        index = self._binding_names
        release = set(plan.release)
        looked = dirty.namespaces
        dirty.namespaces = set()
        for name in looked:
            rank = self._rank(plan, name, index.get(name, ()), name in release)
            if rank is None and name in dirty.rules:
                rank = work.CHECK
            if rank is None:
                dirty.queued.pop(name, None)
                continue
            live = self.namespaces.get(name) or {}
            dirty.queued[name] = (rank, str(live.get("metadata", {}).get("creationTimestamp", "")))
        chosen = dirty.next_batch(self.settings.batch_size)
        checks = {name for name in chosen if name in dirty.rules}
        dirty.rules -= checks
        compiled = self._compile_rules(plan, checks)
        for name in checks - set(compiled):
            self._managed.pop(name, None)  # in no tenant any more: nothing to remember
        outcomes: dict[str, _Outcome] = {name: _Outcome() for name in chosen}
        semaphore = asyncio.Semaphore(self.settings.concurrency)

        async def one(name: str) -> None:
            """A namespace's writes one after the other, its RuleStatus last: a slot per namespace, so a round
            has no barrier between its RoleBindings and its RuleStatuses."""
            async with semaphore:
                await self._write_namespace(plan, name, set(index.get(name, ())), name in release, outcomes[name])
                if name in compiled:
                    await self._rule_status(compiled[name])

        await asyncio.gather(*(one(name) for name in chosen))
        await self._managed_metadata(compiled)
        await self._unassigned_events(plan, outcomes)
        for name, outcome in outcomes.items():
            if outcome.errors:
                self._retry.add(name)
        touched = {plan.namespace_tenant[name] for name in looked | set(chosen) if name in plan.namespace_tenant}
        statuses = (dirty.statuses | touched) & set(plan.tenants)
        dirty.statuses.clear()
        await self._tenant_statuses(plan, statuses, outcomes)
        if dirty.owners:
            dirty.owners = False
            await self._owner_statuses(plan)
        if self._ledgers_due:
            self._ledgers_due = False
            await self._namespace_ledgers(plan)
        if self._retry or self._retry_statuses:
            self._retry_at = min(self._retry_at, time.monotonic() + self._retry_backoff)
            self._retry_backoff = min(30.0, self._retry_backoff * 2)
        else:
            self._retry_backoff = 0.5
        dirty.settle()
        if dirty:
            return Result(requeue_after=0)
        due = min(self._retry_at, self._fold_at)
        return DONE if due == float("inf") else Result(requeue_after=max(0.0, due - time.monotonic()))

    def _compile_rules(self, plan: Plan, names: set[str]) -> dict[str, rules.NamespaceRulePlan]:
        """The rules of ``names`` (those in a tenant and not terminating: nothing is written into a namespace
        being deleted), compiled as the publish loop compiles every namespace."""
        wanted = {name: plan.namespace_tenant[name] for name in names if name in plan.namespace_tenant}
        if not wanted:
            return {}
        own = {
            name: item for name in wanted if (item := self.rule_statuses.get(f"{name}/{RULE_STATUS_NAME}")) is not None
        }
        tenants = {name: plan.tenants[name].tenant for name in set(wanted.values())}
        compiled = rules.compile_namespaces(tenants, wanted, self.namespaces.items, own)
        return {name: item for name, item in compiled.items() if not item.terminating}

    def _rank(
        self,
        plan: Plan,
        name: str,
        binding_names: Iterable[str],
        released: bool,
    ) -> int | None:
        """How urgently namespace ``name`` needs a write (:data:`work.MISSING` or :data:`work.DRIFTED`), or None
        when the caches already match the plan: the comparisons :meth:`_write_namespace` makes, and whether its
        RuleStatus exists (its status is compared only once the namespace is in a batch: that takes a compile)."""
        ranks: list[int] = []
        live = self.namespaces.get(name)
        body = plan.namespace_bodies.get(name)
        wanted = plan.bindings.get(name, {})
        if body is not None and live is not None:
            tenant = plan.namespace_tenant[name]
            if namespaces.needs_apply(live, body, names.TENANTS_MANAGER):
                ranks.append(work.MISSING if namespaces.tenant_of(live) != tenant else work.DRIFTED)
            uid = str(plan.tenants[tenant].raw["metadata"].get("uid", ""))
            if namespaces.foreign_tenant_references(live, uid):
                ranks.append(work.DRIFTED)
            for binding_name, desired in wanted.items():
                current = self.bindings.get(f"{name}/{binding_name}")
                if current is None:
                    ranks.append(work.MISSING)
                    break
                if bindings.drifted(current, desired):
                    ranks.append(work.DRIFTED)
        if released:
            ranks.append(work.DRIFTED)
        if name not in plan.frozen and any(binding not in wanted for binding in binding_names):
            ranks.append(work.DRIFTED)
        if body is not None and live is not None and self.rule_statuses.get(f"{name}/{RULE_STATUS_NAME}") is None:
            ranks.append(work.MISSING)
        return min(ranks) if ranks else None

    async def _write_namespace(
        self, plan: Plan, name: str, binding_names: Iterable[str], released: bool, outcome: _Outcome
    ) -> None:
        """One namespace: its metadata and RoleBindings (when in a writable tenant), managed RoleBindings nobody
        should have any more, and the release of fields we applied when it left its tenant."""
        wanted = plan.bindings.get(name, {})
        if name in plan.namespace_bodies:
            await self._namespace(plan, name, wanted, outcome)
        if released:
            await self._release(name)
        if name in plan.frozen:
            return
        for binding in binding_names:
            if binding in wanted or self.bindings.get(f"{name}/{binding}") is None:
                continue
            path = resource_path("rbac.authorization.k8s.io/v1", "rolebindings", namespace=name, name=binding)
            try:
                await self.kube.delete(path)
            except KubeError as err:
                if not err.gone:
                    outcome.errors.append(f"RoleBinding {name}/{binding}: {err}")
                continue
            self.bindings.items.pop(f"{name}/{binding}", None)
            self._index_binding(name, binding)
            WRITES.labels("RoleBinding", "delete").inc()
            outcome.actions.append(f"deleted RoleBinding {binding}")

    async def _namespace(self, plan: Plan, name: str, wanted: dict[str, JSON], outcome: _Outcome) -> None:
        """Metadata first (the owner reference and tenant label matter most), then RoleBindings."""
        tenant = plan.namespace_tenant[name]
        uid = str(plan.tenants[tenant].raw["metadata"].get("uid", ""))
        body = plan.namespace_bodies[name]
        try:
            live = self.namespaces.get(name) or {}
            if namespaces.needs_apply(live, body, names.TENANTS_MANAGER):
                live = await self.kube.apply(resource_path("v1", "namespaces", name=name), body)
                live = self.namespaces.store(live)
                WRITES.labels("Namespace", "apply").inc()
                outcome.actions.append("applied labels, annotations and owner reference")
            if namespaces.foreign_tenant_references(live, uid):
                patch = namespaces.without_foreign_references_patch(live, uid)
                live = await self.kube.json_patch(resource_path("v1", "namespaces", name=name), patch)
                live = self.namespaces.store(live)
                WRITES.labels("Namespace", "patch").inc()
                outcome.actions.append("removed owner references to other tenants")
        except KubeError as err:
            if not err.gone:
                outcome.errors.append(f"namespace {name}: {err}")
            return
        created: list[str] = []
        updated: list[str] = []
        for binding_name, desired in wanted.items():
            key = f"{name}/{binding_name}"
            live_binding = self.bindings.get(key)
            if not bindings.drifted(live_binding, desired):
                continue
            path = resource_path("rbac.authorization.k8s.io/v1", "rolebindings", namespace=name, name=binding_name)
            try:
                if live_binding is not None and bindings.roleref_changed(live_binding, desired):
                    await self.kube.delete(path)
                    WRITES.labels("RoleBinding", "delete").inc()
                self.bindings.store(await self.kube.apply(path, desired), notify=False)
                self._index_binding(name, binding_name)
                WRITES.labels("RoleBinding", "apply").inc()
            except KubeError as err:
                if err.gone:
                    return
                outcome.errors.append(f"RoleBinding {name}/{binding_name}: {err}")
                continue
            (updated if live_binding is not None else created).append(binding_name)
        if created:
            outcome.actions.append(f"created RoleBindings {', '.join(sorted(created))}")
        if updated:
            outcome.actions.append(f"restored RoleBindings {', '.join(sorted(updated))}")

    async def _release(self, name: str) -> None:
        """The namespace left its tenant: give up every field we applied on it."""
        try:
            self.namespaces.store(
                await self.kube.apply(resource_path("v1", "namespaces", name=name), namespaces.release_body(name))
            )
            WRITES.labels("Namespace", "release").inc()
            log.info("namespace released", extra={"namespace": name})
        except KubeError as err:
            if not err.gone:
                log.warning("could not release namespace", extra={"namespace": name, "error": str(err)})


def _members(plan: Plan) -> dict[str, list[str]]:
    return {name: tenant_plan.namespaces for name, tenant_plan in plan.tenants.items()}
