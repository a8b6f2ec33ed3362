"""Status and Events of the tenants controller: what the write loop reports after each round.

Tenant and TenantOwner status (written only when it changed, compared with the cached object), one Warning per
distinct problem set, one ``NamespaceSynced`` Event per tenant and round for what was written in its namespaces
(built to fit the Event message limit), the ``RuleStatus/default`` of each tenant namespace, and the managed
metadata rules put on existing objects. Kept apart from the write loop (:mod:`enclave_tenants.controller`),
which decides what to write, because this is what a user reads back.

``Reporting`` is a base of :class:`enclave_tenants.controller.TenantsController`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from enclave_core import GROUP_VERSION
from enclave_core.kube.events import MESSAGE_LIMIT, EventRecorder, EventType
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path, with_kind
from enclave_core.snapshots.rules import RULE_STATUS_NAME
from enclave_tenants import managed, rules, status
from enclave_tenants.caches import OWNERS_PATH, TENANTS_PATH, Caches
from enclave_tenants.metrics import NOT_READY, WRITES
from enclave_tenants.plan import Plan

if TYPE_CHECKING:
    from enclave_tenants.controller import Settings

log = logging.getLogger(__name__)


@dataclass
class _Outcome:
    """What one namespace's writes did, for the tenant's events and Ready condition."""

    actions: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


class Reporting(Caches):
    """Events, Tenant/TenantOwner/RuleStatus status and managed metadata, after each write round."""

    kube: Kube
    settings: Settings
    events: EventRecorder
    rule_statuses: Informer
    _retry_statuses: set[str]
    _not_ready: dict[str, bool]
    _managed: dict[str, str]

    async def _unassigned_events(self, plan: Plan, outcomes: dict[str, _Outcome]) -> None:
        """A namespace in no tenant whose RoleBindings we removed: say so on the namespace itself."""
        for namespace, outcome in outcomes.items():
            if namespace in plan.namespace_tenant or not outcome.actions:
                continue
            live = self.namespaces.get(namespace) or {
                "apiVersion": "v1",
                "kind": "Namespace",
                "metadata": {"name": namespace},
            }
            await self.events.emit(
                with_kind(live, "v1", "Namespace"),
                "Normal",
                "RoleBindingsRemoved",
                f"namespace {namespace} is in no tenant: {'; '.join(outcome.actions)}",
                namespace=self.policy.events_namespace,
            )

    async def _tenant_statuses(self, plan: Plan, names: set[str], outcomes: dict[str, _Outcome]) -> None:
        """Events of this round's namespace writes, then the Warning and status of each tenant in ``names``:
        ``concurrency`` at a time (one after the other, 10,000 namespaces' events took minutes of round trips).
        A status is compared with the cached Tenant (not the plan's copy, which may predate our last write)."""
        now = datetime.now(UTC)
        semaphore = asyncio.Semaphore(self.settings.concurrency)
        problems_of: dict[str, list[status.Problem]] = {}
        synced: list[Awaitable[None]] = []
        for name in sorted(names):
            tenant_plan = plan.tenants[name]
            problems = problems_of[name] = list(tenant_plan.problems)
            done: list[str] = []
            for namespace in tenant_plan.namespaces:
                outcome = outcomes.get(namespace)
                if outcome is None:
                    continue
                problems += [status.Problem(reason="ApplyFailed", message=e) for e in outcome.errors]
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
            raw = self.tenants.get(name)
            if raw is None:
                return  # deleted meanwhile
            await self._warn("Tenant", raw, problems)
            cordoned = bool(tenant_plan.tenant and tenant_plan.tenant.spec.cordoned)
            desired = status.tenant_status(
                raw,
                namespaces=tenant_plan.namespaces,
                owners=tenant_plan.owners,
                cordoned=cordoned,
                problems=problems,
                now=now,
                unlisted=tenant_plan.unlisted,
            )
            if not await self._write_status(self.tenants, TENANTS_PATH, name, raw, desired):
                self._retry_statuses.add(name)

        await asyncio.gather(*(bounded(work) for work in synced))
        await asyncio.gather(*(bounded(tenant(name)) for name in sorted(names)))
        for name, problems in problems_of.items():
            self._not_ready[name] = bool(problems)
        NOT_READY.set(sum(self._not_ready.values()))

    async def _owner_statuses(self, plan: Plan) -> None:
        now = datetime.now(UTC)
        for name, owner_plan in plan.owners.items():
            raw = self.owners.get(name)
            if raw is None:
                continue
            await self._warn("TenantOwner", raw, owner_plan.problems)
            desired = status.owner_status(raw, tenants=owner_plan.tenants, problems=owner_plan.problems, now=now)
            await self._write_status(self.owners, OWNERS_PATH, name, raw, desired)

    async def _managed_metadata(self, compiled: dict[str, rules.NamespaceRulePlan]) -> None:
        """Reconcile managed label/annotation values onto existing objects of ``compiled`` namespaces whose
        managed set changed (see :mod:`enclave_tenants.managed`); nothing in a steady state."""
        if not self.settings.managed_metadata:
            return
        changed = {}
        for namespace, plan in compiled.items():
            found = managed.entries(plan.rules)
            signature = managed.signature(found)
            if self._managed.get(namespace) != signature:
                changed[namespace] = (found, signature)
        if not changed:
            return
        resources: list[managed.Resource] | None = None
        for namespace, (found, signature) in changed.items():
            if found:
                if resources is None:
                    resources = await managed.discover(self.kube)
                patched, errors = await managed.reconcile(self.kube, namespace, found, resources)
                if patched:
                    WRITES.labels("managed-metadata", "patch").inc(patched)
                    log.info("managed metadata reconciled", extra={"namespace": namespace, "objects": patched})
                if errors:
                    log.warning("managed metadata incomplete", extra={"namespace": namespace, "errors": errors[:5]})
                    continue  # not recorded: the next pass tries again
            self._managed[namespace] = signature

    async def _rule_status(self, plan: rules.NamespaceRulePlan) -> None:
        """Create the namespace's ``RuleStatus/default`` when missing, then keep its status on the compiled rules."""
        path = resource_path(GROUP_VERSION, "rulestatuses", namespace=plan.namespace)
        compiled_from = (plan.live or {}).get("spec")
        try:
            if plan.live is None:
                plan.live = self.rule_statuses.store(
                    await self.kube.create(path, rules.new_rule_status(plan.namespace)), notify=False
                )
                WRITES.labels("RuleStatus", "create").inc()
            desired = rules.desired_status(plan, datetime.now(UTC))
            if not rules.status_changed(plan.live, desired):
                return
            stored = await self.kube.merge_patch(f"{path}/{RULE_STATUS_NAME}/status", {"status": desired})
        except KubeError as err:
            if err.conflict:  # created meanwhile (another pass, a user): the watch brings it, the next pass writes
                return
            if not err.gone:
                log.warning("RuleStatus write failed", extra={"namespace": plan.namespace, "error": str(err)})
            return
        # Not looked at again when it holds what was just compiled (the watch's echoes of these writes are not
        # either); when its spec changed meanwhile (a user's edit, whose own event is older than this response),
        # it is looked at as that event would have had it.
        stored = self.rule_statuses.store(stored, notify=False)
        if (stored.get("spec") or None) != (compiled_from or None):
            self._rule_status_changed(f"{plan.namespace}/{RULE_STATUS_NAME}")
        WRITES.labels("RuleStatus", "status").inc()

    async def _write_status(self, informer: Informer, base: str, name: str, raw: JSON, desired: JSON) -> bool:
        """Write ``desired`` status when it differs from the stored one; False when that failed (to be retried)."""
        if not status.changed(raw, desired):
            return True
        try:
            stored = await self.kube.merge_patch(f"{base}/{name}/status", {"status": desired})
        except KubeError as err:
            if err.not_found:
                return True
            log.warning("status write failed", extra={"object": f"{base}/{name}", "error": str(err)})
            return False
        informer.store(stored)  # its handler tells a status-only change (ours) from a spec edit meanwhile
        WRITES.labels(informer.name, "status").inc()
        return True

    async def _warn(self, kind: str, raw: JSON, problems: list[status.Problem]) -> None:
        """One Warning per distinct problem set (:meth:`EventRecorder.warn_once`), forgotten when the object is
        fine again. Events about our cluster-scoped kinds go to the configuration's events namespace."""
        key = f"{kind}/{raw['metadata']['name']}"
        if not problems:
            self.events.fine(key)
            return
        message = "; ".join(p.message for p in problems)
        obj = with_kind(raw, GROUP_VERSION, kind)
        await self.events.warn_once(key, obj, problems[0].reason, message, namespace=self.policy.events_namespace)

    async def _emit(self, raw: JSON, kind: str, event_type: EventType, reason: str, message: str) -> None:
        """Events about our cluster-scoped kinds go to the configuration's events namespace."""
        obj = with_kind(raw, GROUP_VERSION, kind)
        await self.events.emit(obj, event_type, reason, message, namespace=self.policy.events_namespace)


def synced_message(done: list[str]) -> str:
    """One Event per tenant and pass for what was written in its namespaces (one per namespace was a write per
    namespace: 10,000 Events for 10,000 new namespaces), built to fit the recorder's :data:`MESSAGE_LIMIT` rather than
    be cut by it: namespaces past it are counted."""
    if len(done) == 1:
        return done[0][:MESSAGE_LIMIT]
    head = f"{len(done)} namespaces: "
    shown: list[str] = []
    for index, item in enumerate(done):
        rest = f"; and {len(done) - index} more"
        if len(head) + len("; ".join([*shown, item])) + len(rest) > MESSAGE_LIMIT:
            return head + "; ".join(shown) + rest
        shown.append(item)
    return head + "; ".join(shown)
