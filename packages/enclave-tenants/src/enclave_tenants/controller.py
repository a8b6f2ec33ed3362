"""The tenants controller: informers -> one pure plan -> snapshot on every replica, writes on the leader.

Two loops share the informers. The *publish* loop recompiles the Tenancy snapshot on every change and
publishes it at once; it never waits on the API, so admission sees a new owner or namespace within
milliseconds even while the *write* loop is busy. The write loop, active only on the Lease holder, converges
the cluster on the same plan: namespace metadata (server-side apply, field manager ``enclave-tenants``),
RoleBindings, pruning, Tenant and TenantOwner status, events. Every write is decided by comparing the plan
with the informer caches, so a steady state costs no API calls and any drift someone introduces (a deleted
binding, an edited label) comes back as a watch event and is undone by the next pass.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from prometheus_client import Counter, Gauge, Histogram

from enclave_core import GROUP_VERSION
from enclave_core.api.ledger import QuantityLedgerStatus
from enclave_core.kube.events import EventRecorder, EventType
from enclave_core.kube.informer import Informer, keep_managed_fields
from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path
from enclave_core.ledger import LedgerBusyError, LedgerClient, LedgerMissingError, fold, new_ledger
from enclave_core.quantity import Quantity
from enclave_core.snapshots.configuration import EffectiveConfiguration
from enclave_core.snapshots.hub import SnapshotHub
from enclave_core.snapshots.rules import RULE_STATUS_NAME, RULES_KIND
from enclave_core.snapshots.tenancy import PROMOTED_LABEL, TENANCY_KIND, TenantView
from enclave_tenants import bindings as rb
from enclave_tenants import ledgers
from enclave_tenants import managed as mg
from enclave_tenants import namespaces as ns
from enclave_tenants import rules as rl
from enclave_tenants import status as st
from enclave_tenants.plan import Plan, build_plan, stale_bindings
from enclave_tenants.policy import Policy

log = logging.getLogger(__name__)

RECONCILES = Counter("enclave_tenants_reconciles_total", "Passes of the tenants write loop", ["result"])
PUBLISHES = Counter("enclave_tenants_snapshots_total", "Tenancy snapshots compiled", ["result"])
WRITES = Counter("enclave_tenants_writes_total", "Writes to the cluster", ["kind", "operation"])
TENANTS = Gauge("enclave_tenants_tenants", "Tenants observed")
NAMESPACES = Gauge("enclave_tenants_namespaces", "Namespaces that belong to a tenant")
NOT_READY = Gauge("enclave_tenants_not_ready", "Tenants whose Ready condition is False")
RECONCILE_SECONDS = Histogram("enclave_tenants_reconcile_seconds", "Duration of one write-loop pass")

PUBLISH_YIELD_AFTER = 0.05
"""Seconds a snapshot compile may take before the next one waits as long (see ``_publish_loop``)."""

TENANTS_PATH = f"/apis/{GROUP_VERSION}/tenants"
OWNERS_PATH = f"/apis/{GROUP_VERSION}/tenantowners"
BINDINGS_PATH = "/apis/rbac.authorization.k8s.io/v1/rolebindings"
RULE_STATUSES_PATH = f"/apis/{GROUP_VERSION}/rulestatuses"
VOLUMES_PATH = "/api/v1/persistentvolumes"
BUDGETS_PATH = "/apis/policy/v1/poddisruptionbudgets"


@dataclass(frozen=True)
class Settings:
    resync_seconds: float = 60.0
    """Full pass without any change, a safety net for missed events."""
    concurrency: int = 8
    """Namespaces written in parallel."""
    namespace: str = "enclave-system"
    """Where the tenants' namespace-quota ledgers live."""
    managed_metadata: bool = True
    """Reconcile rules' managed values onto existing objects (off: admission alone sets them, on writes, and the
    controller needs no list/patch grant on every namespaced resource)."""


@dataclass
class _Outcome:
    """What one namespace's writes did, for the tenant's events and Ready condition."""

    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _ignorable(err: KubeError) -> bool:
    """The namespace went away or started terminating while we wrote: nothing to fix, the next pass knows."""
    return err.not_found or (err.status == 403 and "being terminated" in err.message)


class TenantsController:
    def __init__(
        self,
        kube: Kube,
        settings: Settings,
        hub: SnapshotHub,
        events: EventRecorder,
        *,
        wait_for_configuration: bool = False,
    ) -> None:
        self.kube = kube
        self.settings = settings
        self.hub = hub
        self.events = events
        self.leading = False
        self.policy = Policy()
        self.configuration = asyncio.Event()
        """Set once the policy is known: at once without a configuration endpoint, else on the first snapshot.
        Nothing is published or written before, so a restart never briefly drops promoted owners."""
        if not wait_for_configuration:
            self.configuration.set()
        self.synced = asyncio.Event()
        self.published = asyncio.Event()
        self.reconciled = asyncio.Event()
        self._publish_trigger = asyncio.Event()
        self._write_trigger = asyncio.Event()
        self._views: dict[str, TenantView] = {}
        self._encoded: dict[str, tuple[TenantView, bytes]] = {}
        self._rules: dict[str, rl.NamespaceRulePlan] = {}
        """The last compiled rules per tenant namespace (the write loop writes their RuleStatus status)."""
        self._managed: dict[str, str] = {}
        """Namespace -> signature of the managed metadata last reconciled onto its objects."""
        self._warned: dict[str, tuple[str, str]] = {}
        change = self._changed
        # Only namespaces' own apply entries are read (what this controller applied, to release it); every
        # other cached kind needs no managedFields at all. At 10,000 namespaces they were most of the caches.
        trim, own = keep_managed_fields(), keep_managed_fields(rb.MANAGER)
        self.tenants = Informer(kube, TENANTS_PATH, on_change=change, name="tenants", transform=trim)
        self.owners = Informer(kube, OWNERS_PATH, on_change=change, name="tenantowners", transform=trim)
        self.namespaces = Informer(kube, "/api/v1/namespaces", on_change=change, name="namespaces", transform=own)
        self.ledgers = LedgerClient(kube, settings.namespace)
        self.ledger_cache = Informer(
            kube,
            self.ledgers.path(""),
            label_selector=f"{ledgers.MANAGED_BY}={ledgers.MANAGER}",
            on_change=self._ledger_changed,
            name="quantityledgers",
        )
        self._fold_due = float("inf")
        self.bindings = Informer(
            kube,
            BINDINGS_PATH,
            label_selector=f"{rb.MANAGED_BY}={rb.MANAGER}",
            on_change=change,
            name="rolebindings",
            transform=trim,
        )
        self.accounts = Informer(
            kube,
            "/api/v1/serviceaccounts",
            label_selector=f"{PROMOTED_LABEL}=true",
            on_change=change,
            name="serviceaccounts",
        )
        self.rule_statuses = Informer(kube, RULE_STATUSES_PATH, on_change=change, name="rulestatuses", transform=trim)
        self.volumes = Informer(kube, VOLUMES_PATH, on_change=change, name="persistentvolumes")
        self.budgets = Informer(kube, BUDGETS_PATH, on_change=self._budget_changed, name="poddisruptionbudgets")
        """For ``disruptionBudgets.required``: admission decides coverage from the Rules snapshot alone."""

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

    def _ledger_changed(self, key: str) -> None:
        obj = self.ledger_cache.get(key)
        if obj is None:
            self.ledgers.forget(key.rpartition("/")[2])
        else:
            self.ledgers.observe(obj)
        self._changed()

    def _budget_changed(self, _key: str) -> None:
        """A PodDisruptionBudget only changes the Rules snapshot: the write loop has nothing to do for it."""
        self._publish_trigger.set()

    def _changed(self, _key: str = "") -> None:
        self._publish_trigger.set()
        self._write_trigger.set()

    def set_leading(self, leading: bool) -> None:
        self.leading = leading
        self._changed()

    def set_configuration(self, config: EffectiveConfiguration) -> None:
        policy = Policy.from_configuration(config)
        if policy != self.policy or not self.configuration.is_set():
            log.info("configuration received", extra={"configuration": config.name, "generation": config.generation})
        self.policy = policy
        self.configuration.set()
        self._changed()

    # -- loops ---------------------------------------------------------------------------------------------

    async def run(self) -> None:
        tasks = [asyncio.create_task(informer.run(), name=informer.name) for informer in self.informers()]
        try:
            await asyncio.gather(*(informer.synced.wait() for informer in self.informers()))
            self.synced.set()
            await self.configuration.wait()
            await asyncio.gather(self._publish_loop(), self._write_loop())
        finally:
            for task in tasks:
                task.cancel()

    async def _publish_loop(self) -> None:
        while True:
            self._publish_trigger.clear()
            started = time.monotonic()
            try:
                self.publish()
            except Exception:  # never let a bad object stop the stream; the last good snapshot stays
                log.exception("compiling the tenancy snapshot failed")
                PUBLISHES.labels("error").inc()
            took = time.monotonic() - started
            await self._publish_trigger.wait()
            if took > PUBLISH_YIELD_AFTER:
                # A compile covers every tenant; at thousands of namespaces it takes long enough that compiling
                # on every watch event of a burst would starve the write loop on this same event loop. Changes
                # that arrive meanwhile are coalesced into the next compile, which comes after as long again
                # as this one took: at most half of the process goes to compiling. Small tenancies (a compile
                # well under PUBLISH_YIELD_AFTER) publish at once as before.
                await asyncio.sleep(min(took, 2.0))

    async def _write_loop(self) -> None:
        backoff = 0.5
        while True:
            self._write_trigger.clear()
            wait = self.settings.resync_seconds
            if self.leading:
                started = time.monotonic()
                try:
                    await self.reconcile()
                    wait = min(wait, self._fold_due)  # an unconfirmed reservation's expiry
                    RECONCILES.labels("ok").inc()
                    backoff = 0.5
                except Exception:
                    log.exception("reconcile failed")
                    RECONCILES.labels("error").inc()
                    wait, backoff = backoff, min(30.0, backoff * 2)
                RECONCILE_SECONDS.observe(time.monotonic() - started)
            self.reconciled.set()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._write_trigger.wait(), timeout=wait)

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
        )
        self._views = {name: p.view for name, p in plan.tenants.items() if p.view is not None}
        return plan

    def compile_rules(self, plan: Plan) -> dict[str, rl.NamespaceRulePlan]:
        """The rules of every tenant namespace (see :mod:`enclave_tenants.rules`), from the same informers."""
        own = {
            item["metadata"]["namespace"]: item
            for item in self.rule_statuses.values()
            if item["metadata"]["name"] == RULE_STATUS_NAME
        }
        live = {item["metadata"]["name"]: item for item in self.namespaces.values()}
        tenants = {name: tenant_plan.tenant for name, tenant_plan in plan.tenants.items()}
        return rl.compile_namespaces(tenants, plan.namespace_tenant, live, own)

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
        rules = rl.snapshot(self._rules, self.volumes.values(), self.budgets.values())
        if self.hub.publish(RULES_KIND, rules.payload()) is not None:
            log.debug("rules snapshot published", extra={"namespaces": len(rules.namespaces)})
        PUBLISHES.labels("ok").inc()
        TENANTS.set(len(plan.tenants))
        NAMESPACES.set(len(plan.namespace_tenant))
        self.published.set()
        return plan

    # -- one write pass (leader only) ----------------------------------------------------------------------

    async def reconcile(self) -> None:
        plan = self.plan()
        outcomes: dict[str, _Outcome] = {name: _Outcome() for name in plan.namespace_bodies}
        semaphore = asyncio.Semaphore(self.settings.concurrency)

        async def bounded(work: Awaitable[None]) -> None:
            async with semaphore:  # the coroutine starts only once a slot is free
                await work

        await asyncio.gather(*(bounded(self._namespace(plan, name, outcomes[name])) for name in plan.namespace_bodies))
        stale_outcomes = await self._prune(plan)
        await asyncio.gather(*(bounded(self._release(name)) for name in plan.release))
        await self._tenant_statuses(plan, outcomes, stale_outcomes)
        await self._owner_statuses(plan)
        await self._namespace_ledgers(plan)
        compiled = self.compile_rules(plan)
        await asyncio.gather(*(bounded(self._rule_status(rules)) for rules in compiled.values()))
        await self._managed_metadata(compiled)

    async def _namespace_ledgers(self, plan: Plan) -> None:
        """Each tenant with a namespace quota has its ledger, folded; ledgers of others are removed."""
        wanted: set[str] = set()
        due = float("inf")
        now = datetime.now(UTC)
        for name, tenant_plan in plan.tenants.items():
            tenant = tenant_plan.tenant
            options = tenant.spec.namespace_options if tenant is not None else None
            if tenant is None or options is None or options.quota is None:
                continue
            uid = str(tenant_plan.raw["metadata"].get("uid", ""))
            ledger = ledgers.name_of(name, uid)
            wanted.add(ledger)
            live = self.ledger_cache.get(f"{self.settings.namespace}/{ledger}")
            try:
                if live is not None and (live.get("spec") or {}).get("targetRef", {}).get("uid") != uid:
                    await self.ledgers.delete(ledger)  # left over from a deleted tenant of the same name
                    live = None
                if live is None:
                    body = new_ledger(
                        ledgers.target(name, uid), self.settings.namespace, {ledgers.MANAGED_BY: ledgers.MANAGER}
                    )
                    await self.ledgers.ensure(body)
                    WRITES.labels("QuantityLedger", "create").inc()
                present = set(tenant_plan.namespaces)
                used = Quantity.from_units(len(present))

                def step(
                    status: QuantityLedgerStatus | None, present: set[str] = present, used: Quantity = used
                ) -> QuantityLedgerStatus:
                    return fold(
                        status,
                        used,
                        settled=lambda r: (r.object_ref.name or "") in present,
                        gone=lambda hint: (hint.object_ref.name or "") not in present,
                        now=now,
                    )

                _, stored = await self.ledgers.update(ledger, step)
                if stored is not None:
                    WRITES.labels("QuantityLedger", "fold").inc()
            except (KubeError, LedgerMissingError, LedgerBusyError) as err:
                log.warning("namespace quota ledger not folded", extra={"tenant": name, "error": str(err)})
                due = min(due, 1.0)
                continue
            cached = self.ledgers.cached(ledger)
            for reservation in (cached.status.reservations or []) if cached and cached.status else []:
                if reservation.expires_at is not None:
                    due = min(due, max((reservation.expires_at - now).total_seconds(), 0.0) + 0.1)
        for key, raw in list(self.ledger_cache.items.items()):
            name = raw["metadata"]["name"]
            if name not in wanted:
                await self.ledgers.delete(name)
                self.ledger_cache.items.pop(key, None)
                WRITES.labels("QuantityLedger", "delete").inc()
        self._fold_due = due

    async def _namespace(self, plan: Plan, name: str, outcome: _Outcome) -> None:
        """Metadata first (the owner reference and tenant label matter most), then RoleBindings."""
        tenant = plan.namespace_tenant[name]
        uid = str(plan.tenants[tenant].raw["metadata"].get("uid", ""))
        body = plan.namespace_bodies[name]
        try:
            live = self.namespaces.get(name) or {}
            if ns.needs_apply(live, body, rb.MANAGER):
                live = await self.kube.apply(resource_path("v1", "namespaces", name=name), body)
                self.namespaces.items[name] = live
                WRITES.labels("Namespace", "apply").inc()
                outcome.actions.append("applied labels, annotations and owner reference")
            if ns.foreign_tenant_references(live, uid):
                patch = ns.without_foreign_references_patch(live, uid)
                live = await self.kube.json_patch(resource_path("v1", "namespaces", name=name), patch)
                self.namespaces.items[name] = live
                WRITES.labels("Namespace", "patch").inc()
                outcome.actions.append("removed owner references to other tenants")
        except KubeError as err:
            if not _ignorable(err):
                outcome.errors.append(f"namespace {name}: {err}")
            return
        created: list[str] = []
        updated: list[str] = []
        for binding_name, desired in plan.bindings.get(name, {}).items():
            key = f"{name}/{binding_name}"
            live_binding = self.bindings.get(key)
            if not rb.drifted(live_binding, desired):
                continue
            path = resource_path("rbac.authorization.k8s.io/v1", "rolebindings", namespace=name, name=binding_name)
            try:
                if live_binding is not None and rb.roleref_changed(live_binding, desired):
                    await self.kube.delete(path)
                    WRITES.labels("RoleBinding", "delete").inc()
                self.bindings.items[key] = await self.kube.apply(path, desired)
                WRITES.labels("RoleBinding", "apply").inc()
            except KubeError as err:
                if _ignorable(err):
                    return
                outcome.errors.append(f"RoleBinding {name}/{binding_name}: {err}")
                continue
            (updated if live_binding is not None else created).append(binding_name)
        if created:
            outcome.actions.append(f"created RoleBindings {', '.join(sorted(created))}")
        if updated:
            outcome.actions.append(f"restored RoleBindings {', '.join(sorted(updated))}")

    async def _prune(self, plan: Plan) -> dict[str, _Outcome]:
        """Delete managed RoleBindings nobody should have any more; report them per namespace."""
        outcomes: dict[str, _Outcome] = {}
        for item in stale_bindings(plan, self.bindings.values()):
            meta = item["metadata"]
            namespace, name = meta["namespace"], meta["name"]
            outcome = outcomes.setdefault(namespace, _Outcome())
            path = resource_path("rbac.authorization.k8s.io/v1", "rolebindings", namespace=namespace, name=name)
            try:
                await self.kube.delete(path)
            except KubeError as err:
                if not _ignorable(err):
                    outcome.errors.append(f"RoleBinding {namespace}/{name}: {err}")
                continue
            self.bindings.items.pop(f"{namespace}/{name}", None)
            WRITES.labels("RoleBinding", "delete").inc()
            outcome.actions.append(f"deleted RoleBinding {name}")
        for namespace, outcome in outcomes.items():
            if namespace not in plan.namespace_tenant and outcome.actions:
                # Not (or no longer) in a tenant: say so on the namespace itself.
                live = self.namespaces.get(namespace) or {
                    "apiVersion": "v1",
                    "kind": "Namespace",
                    "metadata": {"name": namespace},
                }
                await self.events.emit(
                    _with_kind(live, "v1", "Namespace"),
                    "Normal",
                    "RoleBindingsRemoved",
                    f"namespace {namespace} is in no tenant: {'; '.join(outcome.actions)}",
                    namespace=self.policy.events_namespace,
                )
        return outcomes

    async def _release(self, name: str) -> None:
        """The namespace left its tenant: give up every field we applied on it."""
        try:
            self.namespaces.items[name] = await self.kube.apply(
                resource_path("v1", "namespaces", name=name), ns.release_body(name)
            )
            WRITES.labels("Namespace", "release").inc()
            log.info("namespace released", extra={"namespace": name})
        except KubeError as err:
            if not _ignorable(err):
                log.warning("could not release namespace", extra={"namespace": name, "error": str(err)})

    # -- status and events ---------------------------------------------------------------------------------

    async def _tenant_statuses(self, plan: Plan, outcomes: dict[str, _Outcome], pruned: dict[str, _Outcome]) -> None:
        """Events of this pass's namespace writes, then each tenant's Warning and status: ``concurrency`` at a
        time (one after the other, 10,000 namespaces' events took minutes of round trips)."""
        now = datetime.now(UTC)
        semaphore = asyncio.Semaphore(self.settings.concurrency)
        problems_of: dict[str, list[st.Problem]] = {}
        synced: list[Awaitable[None]] = []
        for name, tenant_plan in plan.tenants.items():
            problems = problems_of[name] = list(tenant_plan.problems)
            done: list[str] = []
            for namespace in tenant_plan.namespaces:
                for outcome in (outcomes.get(namespace), pruned.get(namespace)):
                    if outcome is None:
                        continue
                    problems += [st.Problem(reason="ApplyFailed", message=e) for e in outcome.errors]
                    if outcome.actions:
                        done.append(f"namespace {namespace}: " + "; ".join(outcome.actions))
            if done:
                message = synced_message(done)
                synced.append(self._emit(tenant_plan.raw, "Tenant", "Normal", "NamespaceSynced", message))

        async def bounded(work: Awaitable[None]) -> None:
            async with semaphore:
                await work

        async def tenant(name: str) -> None:
            tenant_plan, problems = plan.tenants[name], problems_of[name]
            raw = tenant_plan.raw
            await self._warn("Tenant", raw, problems)
            cordoned = bool(tenant_plan.tenant and tenant_plan.tenant.spec.cordoned)
            status = st.tenant_status(
                raw,
                namespaces=tenant_plan.namespaces,
                owners=tenant_plan.owners,
                cordoned=cordoned,
                problems=problems,
                now=now,
            )
            await self._write_status(self.tenants, TENANTS_PATH, name, raw, status)

        await asyncio.gather(*(bounded(work) for work in synced))
        await asyncio.gather(*(bounded(tenant(name)) for name in plan.tenants))
        NOT_READY.set(sum(bool(problems) for problems in problems_of.values()))

    async def _owner_statuses(self, plan: Plan) -> None:
        now = datetime.now(UTC)
        for name, owner_plan in plan.owners.items():
            await self._warn("TenantOwner", owner_plan.raw, owner_plan.problems)
            status = st.owner_status(owner_plan.raw, tenants=owner_plan.tenants, problems=owner_plan.problems, now=now)
            await self._write_status(self.owners, OWNERS_PATH, name, owner_plan.raw, status)

    async def _managed_metadata(self, compiled: dict[str, rl.NamespaceRulePlan]) -> None:
        """Reconcile managed label/annotation values onto existing objects of namespaces whose managed set
        changed (see :mod:`enclave_tenants.managed`); nothing in a steady state."""
        if not self.settings.managed_metadata:
            return
        changed = {}
        for namespace, plan in compiled.items():
            found = mg.entries(plan.rules)
            signature = mg.signature(found)
            if self._managed.get(namespace) != signature:
                changed[namespace] = (found, signature)
        for namespace in set(self._managed) - set(compiled):
            del self._managed[namespace]
        if not changed:
            return
        resources: list[mg.Resource] | None = None
        for namespace, (found, signature) in changed.items():
            if found:
                if resources is None:
                    resources = await mg.discover(self.kube)
                patched, errors = await mg.reconcile(self.kube, namespace, found, resources)
                if patched:
                    WRITES.labels("managed-metadata", "patch").inc(patched)
                    log.info("managed metadata reconciled", extra={"namespace": namespace, "objects": patched})
                if errors:
                    log.warning("managed metadata incomplete", extra={"namespace": namespace, "errors": errors[:5]})
                    continue  # not recorded: the next pass tries again
            self._managed[namespace] = signature

    async def _rule_status(self, plan: rl.NamespaceRulePlan) -> None:
        """Create the namespace's ``RuleStatus/default`` when missing, then keep its status on the compiled rules."""
        key = f"{plan.namespace}/{RULE_STATUS_NAME}"
        path = resource_path(GROUP_VERSION, "rulestatuses", namespace=plan.namespace)
        try:
            if plan.live is None:
                plan.live = await self.kube.create(path, rl.new_rule_status(plan.namespace))
                self.rule_statuses.items[key] = plan.live
                WRITES.labels("RuleStatus", "create").inc()
            status = rl.desired_status(plan, datetime.now(UTC))
            if not rl.status_changed(plan.live, status):
                return
            stored = await self.kube.merge_patch(f"{path}/{RULE_STATUS_NAME}/status", {"status": status})
        except KubeError as err:
            if err.conflict:  # created meanwhile (another pass, a user): the watch brings it, the next pass writes
                return
            if not _ignorable(err):
                log.warning("RuleStatus write failed", extra={"namespace": plan.namespace, "error": str(err)})
            return
        self.rule_statuses.items[key] = stored
        WRITES.labels("RuleStatus", "status").inc()

    async def _write_status(self, informer: Informer, base: str, name: str, raw: JSON, status: JSON) -> None:
        if not st.changed(raw, status):
            return
        try:
            stored = await self.kube.merge_patch(f"{base}/{name}/status", {"status": status})
        except KubeError as err:
            if not err.not_found:
                log.warning("status write failed", extra={"object": f"{base}/{name}", "error": str(err)})
            return
        informer.items[name] = stored
        WRITES.labels(informer.name, "status").inc()

    async def _warn(self, kind: str, raw: JSON, problems: list[st.Problem]) -> None:
        """One Warning per distinct problem set (not one per pass); cleared when the object is fine again."""
        key = f"{kind}/{raw['metadata']['name']}"
        if not problems:
            self._warned.pop(key, None)
            return
        signature = (problems[0].reason, "; ".join(p.message for p in problems)[: st.MESSAGE_LIMIT])
        if self._warned.get(key) == signature:
            return
        self._warned[key] = signature
        log.warning("object not ready", extra={"object": key, "reason": signature[0], "detail": signature[1]})
        await self._emit(raw, kind, "Warning", signature[0], signature[1])

    async def _emit(self, raw: JSON, kind: str, event_type: EventType, reason: str, message: str) -> None:
        """Events about our cluster-scoped kinds go to the configuration's events namespace."""
        obj = _with_kind(raw, GROUP_VERSION, kind)
        await self.events.emit(obj, event_type, reason, message, namespace=self.policy.events_namespace)


EVENT_MESSAGE_LIMIT = 1024
"""kube-apiserver refuses a longer Event note (events.k8s.io); core/v1 Events are kept to the same."""


def synced_message(done: list[str]) -> str:
    """One Event per tenant and pass for what was written in its namespaces (one per namespace was a write per
    namespace: 10,000 Events for 10,000 new namespaces); namespaces past the size limit are counted."""
    if len(done) == 1:
        return done[0][:EVENT_MESSAGE_LIMIT]
    head = f"{len(done)} namespaces: "
    shown: list[str] = []
    for index, item in enumerate(done):
        rest = f"; and {len(done) - index} more"
        if len(head) + len("; ".join([*shown, item])) + len(rest) > EVENT_MESSAGE_LIMIT:
            return head + "; ".join(shown) + rest
        shown.append(item)
    return head + "; ".join(shown)


def _with_kind(obj: JSON, api_version: str, kind: str) -> JSON:
    """Objects from a list carry no apiVersion/kind; an event's involvedObject needs them."""
    return {**obj, "apiVersion": obj.get("apiVersion") or api_version, "kind": obj.get("kind") or kind}
