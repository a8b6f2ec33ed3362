"""Keeps the admission policies compiled from tenant rules in step with the RuleStatuses (leader only).

Input is what ``kubectl get rulestatus default -o yaml`` shows (``status.rules``, written by the tenants
controller) and the namespaces' tenant label, both from the tenants controller's own informer caches; output is
one deciding ValidatingAdmissionPolicy + binding (an auditing pair when audit rules compile, a
MutatingAdmissionPolicy pair when label and annotation mutations do) per tenant and distinct program, bound to the
tenant's namespaces that share it. Whether kube-apiserver serves MutatingAdmissionPolicies (Kubernetes 1.36 and
later) is asked once, at start (API discovery); where it does not, mutations stay on the mutating webhook and the
``NativePolicies`` condition says so. Level-based: each pass computes every wanted object and
creates, replaces or deletes what differs from the cache of the objects labelled as ours, so a deleted or
edited policy comes back. With ``spec.rules.engine: webhook`` (the default) the wanted set is empty and every
policy this controller made is removed.

Each namespace's RuleStatus gets a ``NativePolicies`` condition (True: every rule area is in a policy; False,
reason ``OnWebhook``: which areas stay on the webhook and why) and, once per distinct report, a Warning Event
``RuleNotNative`` naming them.

With ``native``, a namespace whose rules the policies decide entirely (:func:`~.compiler.webhook_needed`) gets
:data:`~enclave_core.api.names.NATIVE_RULES_LABEL` once its policies and binding have covered it for
:data:`SETTLE_SECONDS`, and the ``resources`` hooks skip it: no webhook round trip. The label goes first
whenever that stops holding (a rule that must go to the webhook, another engine, a policy or binding missing or
changed, a program whose new policy is not settled yet), before any policy it relied on is deleted, so the
webhook judges through every change.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final, Literal

from prometheus_client import Counter, Histogram

from enclave_core import GROUP_VERSION
from enclave_core.api.names import MANAGED_BY, NAMESPACE_NAME_LABEL, NATIVE_RULES_LABEL, TENANT_LABEL, TENANTS_MANAGER
from enclave_core.api.rules import AppliedRule
from enclave_core.conditions import new_condition, read_conditions, set_condition
from enclave_core.kube.events import EventRecorder
from enclave_core.kube.holds import holds
from enclave_core.kube.informer import Informer
from enclave_core.kube.rest import JSON, Kube, KubeError, resource_path
from enclave_core.runtime.loops import ControllerLoop, LoopMetrics, Result
from enclave_core.snapshots.rules import RULE_STATUS_NAME
from enclave_tenants.native import minors
from enclave_tenants.native.compiler import GROUP_VERSION as POLICY_GROUP_VERSION
from enclave_tenants.native.compiler import Program, compile_namespace, webhook_needed
from enclave_tenants.native.objects import policies

log = logging.getLogger(__name__)

CONDITION: Final = "NativePolicies"
POLICIES_PATH: Final = f"/apis/{POLICY_GROUP_VERSION}/validatingadmissionpolicies"
BINDINGS_PATH: Final = f"/apis/{POLICY_GROUP_VERSION}/validatingadmissionpolicybindings"
OURS: Final = f"{MANAGED_BY}={TENANTS_MANAGER}"
SETTLE_SECONDS: Final = 5.0
"""How long a namespace's policies and binding must have covered it before it carries NATIVE_RULES_LABEL.
kube-apiserver loads policy and binding changes on a refresh of about a second (per replica), so an object
written a moment ago may not be enforced yet; the webhook keeps judging until then."""
MUTATING_PATH: Final = f"/apis/{POLICY_GROUP_VERSION}/mutatingadmissionpolicies"
MUTATING_BINDINGS_PATH: Final = f"/apis/{POLICY_GROUP_VERSION}/mutatingadmissionpolicybindings"
VERSION_SECONDS: Final = 300.0
"""How long the served Kubernetes minor (``/version``) is trusted before it is read again: an upgraded
kube-apiserver offers more CEL, and a policy may then take what stayed on the webhook."""
_POLICY: Final = "ValidatingAdmissionPolicy"
_BINDING: Final = "ValidatingAdmissionPolicyBinding"
_MUTATING: Final = "MutatingAdmissionPolicy"
_MUTATING_BINDING: Final = "MutatingAdmissionPolicyBinding"
_POLICIES: Final = (_POLICY, _MUTATING)

METRICS = LoopMetrics(
    passes=Counter("enclave_tenants_native_reconciles_total", "Passes of the native policies write loop", ["result"]),
    duration=Histogram("enclave_tenants_native_reconcile_seconds", "Duration of one native policies pass"),
)
WRITES = Counter("enclave_tenants_native_writes_total", "Native policy writes", ["kind", "operation"])


class NativePolicies:
    """The policies' write loop; ``rule_statuses`` and ``namespaces`` are the tenants controller's informers,
    whose handlers call :meth:`changed`."""

    def __init__(
        self,
        kube: Kube,
        events: EventRecorder,
        *,
        rule_statuses: Informer,
        namespaces: Informer,
        enclave_namespace: str,
        resync_seconds: float,
        configured: asyncio.Event,
    ) -> None:
        self.kube = kube
        self.events = events
        self.rule_statuses = rule_statuses
        self.namespaces = namespaces
        self.enclave_namespace = enclave_namespace
        self.engine = "webhook"
        self.ignored_groups: tuple[str, ...] = ()
        self.configured = configured
        """Open once the engine is known (the tenants controller's configuration gate): no pass before."""
        self.policies = Informer(kube, POLICIES_PATH, label_selector=OURS, on_change=self.changed, name="vaps")
        self.bindings = Informer(kube, BINDINGS_PATH, label_selector=OURS, on_change=self.changed, name="vapbindings")
        self.mutating = Informer(kube, MUTATING_PATH, label_selector=OURS, on_change=self.changed, name="maps")
        self.mutating_bindings = Informer(
            kube, MUTATING_BINDINGS_PATH, label_selector=OURS, on_change=self.changed, name="mapbindings"
        )
        self.mutations_served = False
        """kube-apiserver serves MutatingAdmissionPolicies (:meth:`run` asks, before the loops start)."""
        self.served: minors.Minor | None = None
        """The minor kube-apiserver serves (:func:`.minors.served`), read before the first pass that compiles."""
        self._served_at = -math.inf
        self._programs: dict[str, tuple[Program, str]] = {}
        """``status.rules`` as JSON -> its program and :func:`webhook_needed` (a tenant's namespaces mostly share
        their rules)."""
        self._skippable: dict[str, tuple[str, list[tuple[str, str]]]] = {}
        """Namespace -> (its tenant, the (kind, name) of the objects enforcing its rules) for the namespaces the
        policies decide entirely, as the last :meth:`wanted` found."""
        self._webhook_needed: dict[str, str] = {}
        """Namespace -> why the ``resources`` hooks must still be called there (:func:`webhook_needed`)."""
        self._covered_since: dict[str, tuple[tuple[tuple[str, str], ...], float]] = {}
        """Namespace -> (the objects covering it, monotonic time they were first seen covering it)."""
        self.loops = ControllerLoop(
            "native-policies",
            informers=[self.policies, self.bindings],
            reconcile=self.reconcile,
            resync_seconds=resync_seconds,
            metrics=METRICS,
            gate=self.configured,
            synced_after=[rule_statuses.synced, namespaces.synced],
        )

    def changed(self, _key: str = "") -> None:
        self.loops.changed()

    def set_leading(self, leading: bool) -> None:
        self.loops.set_leading(leading)

    def configure(self, engine: str, ignored_groups: Sequence[str]) -> None:
        self.engine = engine
        self.ignored_groups = tuple(sorted(ignored_groups))
        self.changed()

    def _kinds(self) -> list[tuple[str, Informer, str]]:
        """(kind, informer, path) of the objects this loop writes, policies before their bindings."""
        found = [(_POLICY, self.policies, POLICIES_PATH), (_BINDING, self.bindings, BINDINGS_PATH)]
        if self.mutations_served:
            found[1:1] = [(_MUTATING, self.mutating, MUTATING_PATH)]
            found.append((_MUTATING_BINDING, self.mutating_bindings, MUTATING_BINDINGS_PATH))
        return found

    async def discover(self) -> None:
        """Whether kube-apiserver serves MutatingAdmissionPolicies; if so their informers join the loops."""
        try:
            listed = await self.kube.get(f"/apis/{POLICY_GROUP_VERSION}")
        except KubeError as err:
            log.warning("admission policy API not discovered", extra={"error": str(err)})
            return
        served = {str(r.get("name")) for r in listed.get("resources") or () if isinstance(r, dict)}
        self.mutations_served = {"mutatingadmissionpolicies", "mutatingadmissionpolicybindings"} <= served
        if self.mutations_served:
            self.loops.informers += [self.mutating, self.mutating_bindings]
        log.info("mutating admission policies", extra={"served": self.mutations_served})

    async def run(self) -> None:
        """The loops; a failure here (say, kube-apiserver does not serve the policy API) is logged, never the
        end of the tenants controller."""
        try:
            await self.discover()
            await self.loops.run()
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("native policies stopped")

    # -- one pass ---------------------------------------------------------------------------------------------

    async def _discover_served(self) -> None:
        """The Kubernetes minor kube-apiserver serves, from ``/version``, never assumed: what its CEL environment
        offers the policies (:mod:`.minors`). Read again every :data:`VERSION_SECONDS`; a failure fails the pass
        (the loop retries), so nothing is compiled for a minor not known."""
        if self.engine == "webhook" or time.monotonic() - self._served_at < VERSION_SECONDS:
            return
        served = minors.served(await self.kube.get("/version"))
        if served != self.served:
            log.info("kube-apiserver serves Kubernetes %d.%d", *served)
            self.served, self._programs = served, {}
        self._served_at = time.monotonic()

    def _program(self, rules: list[JSON]) -> tuple[Program, str]:
        key = json.dumps(rules, sort_keys=True)
        found = self._programs.get(key)
        if found is None:
            applied = [AppliedRule.model_validate(rule) for rule in rules]
            program = compile_namespace(applied, mutations=self.mutations_served, served=self.served or minors.NEWEST)
            found = (program, webhook_needed(applied, program))
            if len(self._programs) > 1000:
                self._programs = {}
            self._programs[key] = found
        return found

    def wanted(self) -> tuple[dict[tuple[str, str], JSON], dict[str, Program]]:
        """Every policy and binding wanted, by (kind, name), and each tenant namespace's program."""
        self._skippable = {}
        self._webhook_needed = {}
        if self.engine == "webhook":
            return {}, {}
        shared: dict[tuple[str, str], tuple[Program, list[str]]] = {}
        programs: dict[str, Program] = {}
        for status in self.rule_statuses.values():
            meta = status.get("metadata") or {}
            namespace = meta.get("namespace") or ""
            if meta.get("name") != RULE_STATUS_NAME:
                continue
            tenant = ((self.namespaces.get(namespace) or {}).get("metadata", {}).get("labels") or {}).get(TENANT_LABEL)
            rules = (status.get("status") or {}).get("rules") or []
            if not tenant or not rules:
                continue
            try:
                program, needed = self._program(rules)
            except ValueError as err:  # status written by an older or newer controller: leave it to the webhook
                log.warning("rules not compiled natively", extra={"namespace": namespace, "error": str(err)})
                continue
            programs[namespace] = program
            if not program.empty:
                shared.setdefault((tenant, program.signature()), (program, []))[1].append(namespace)
            if self.engine == "native" and not needed:
                self._skippable[namespace] = (tenant, [])
            elif needed:
                self._webhook_needed[namespace] = needed
        found: dict[tuple[str, str], JSON] = {}
        for (tenant, _), (program, namespaces) in shared.items():
            objects = policies(
                tenant,
                program,
                namespaces,
                enclave_namespace=self.enclave_namespace,
                ignored_groups=self.ignored_groups,
            )
            for obj in objects:
                found[(obj["kind"], obj["metadata"]["name"])] = obj
            for namespace in namespaces:
                if namespace in self._skippable:
                    self._skippable[namespace][1].extend((obj["kind"], obj["metadata"]["name"]) for obj in objects)
        return found, programs

    async def reconcile(self) -> Result:
        await self._discover_served()
        wanted, programs = self.wanted()
        # The label goes before anything it relied on changes; it comes only once what it relies on is settled.
        for namespace in self._labelled():
            if not self._covered(namespace, wanted):
                await self._label(namespace, False)
        # Policies before their bindings; bindings gone before their policies.
        kinds = self._kinds()
        for kind, informer, path in kinds:
            for (wanted_kind, _), obj in wanted.items():
                if wanted_kind == kind:
                    await self._converge(informer, path, obj)
        for kind, informer, path in reversed(kinds):
            for live in informer.values():
                name = live["metadata"]["name"]
                if (kind, name) not in wanted:
                    await self.kube.delete(f"{path}/{name}")
                    WRITES.labels(kind, "delete").inc()
        for namespace, program in programs.items():
            await self._report(namespace, program, wanted)
        return Result(requeue_after=await self._label_settled(wanted))

    # -- the native-rules label -----------------------------------------------------------------------------

    def _labelled(self) -> list[str]:
        return [
            name
            for name, namespace in self.namespaces.items.items()
            if NATIVE_RULES_LABEL in ((namespace.get("metadata") or {}).get("labels") or {})
        ]

    def _covered(self, namespace: str, wanted: dict[tuple[str, str], JSON]) -> bool:
        """Whether the policies decide everything the ``resources`` hooks would in ``namespace``, and the live
        policies and bindings of its rules are as wanted and select it."""
        found = self._skippable.get(namespace)
        if found is None:
            return False
        tenant, objects = found
        labels = ((self.namespaces.get(namespace) or {}).get("metadata") or {}).get("labels") or {}
        if labels.get(TENANT_LABEL) != tenant:
            return False
        informers = {kind: informer for kind, informer, _ in self._kinds()}
        for kind, name in objects:
            informer = informers.get(kind)
            live = informer.get(name) if informer is not None else None
            want = wanted.get((kind, name))
            if live is None or want is None:
                return False
            if kind not in _POLICIES and not binding_covers(live, want, namespace):
                return False
            if kind in _POLICIES and not holds(live, want):
                return False
        return True

    async def _label_settled(self, wanted: dict[tuple[str, str], JSON]) -> float | None:
        """Label the namespaces covered for :data:`SETTLE_SECONDS`; the seconds until the next one is due."""
        now = time.monotonic()
        due = math.inf
        labelled = set(self._labelled())
        for namespace in list(self._covered_since):
            if namespace not in self._skippable:
                del self._covered_since[namespace]
        for namespace, (_, objects) in self._skippable.items():
            if not self._covered(namespace, wanted):
                self._covered_since.pop(namespace, None)
                continue
            key = tuple(sorted(objects))
            since = self._covered_since.get(namespace)
            if since is None or since[0] != key:
                # Labelled and covered when first seen: a previous pass (perhaps another replica's) labelled it
                # once settled, and took the label away before any change to what covers it.
                since = (key, -math.inf if namespace in labelled else now)
                self._covered_since[namespace] = since
            if namespace in labelled:
                continue
            left = since[1] + SETTLE_SECONDS - now
            if left <= 0:
                await self._label(namespace, True)
            else:
                due = min(due, left)
        return None if due == math.inf else due

    async def _label(self, namespace: str, native: bool) -> None:
        path = resource_path("v1", "namespaces", name=namespace)
        body = {"metadata": {"labels": {NATIVE_RULES_LABEL: "true" if native else None}}}
        try:
            self.namespaces.store(await self.kube.merge_patch(path, body), notify=False)
        except KubeError as err:
            if not err.gone:
                raise
            return
        if not native:
            self._covered_since.pop(namespace, None)
        WRITES.labels("Namespace", "label" if native else "unlabel").inc()

    async def _converge(self, informer: Informer, path: str, obj: JSON) -> None:
        name = obj["metadata"]["name"]
        live = informer.get(name)
        if live is None:
            informer.store(await self.kube.create(path, obj), notify=False)
            WRITES.labels(obj["kind"], "create").inc()
            return
        if holds(live, obj):
            return
        body = {**obj, "metadata": {**obj["metadata"], "resourceVersion": live["metadata"]["resourceVersion"]}}
        informer.store(await self.kube.replace(f"{path}/{name}", body), notify=False)
        WRITES.labels(obj["kind"], "update").inc()

    async def _report(self, namespace: str, program: Program, wanted: dict[tuple[str, str], JSON]) -> None:
        """The namespace's ``NativePolicies`` condition, and a Warning Event when some rule stays on the webhook."""
        status = self.rule_statuses.get(f"{namespace}/{RULE_STATUS_NAME}")
        if status is None:
            return
        on_webhook = [p for p in program.placements if p.path == "webhook"]
        native = [p for p in program.placements if p.path == "native"]
        names = sorted(f"{kind} {name}" for kind, name in wanted if kind in _POLICIES and program.signature() in name)
        condition: tuple[Literal["True", "False"], str, str]
        if on_webhook:
            detail = "; ".join(f"{p.origin} {p.area}: {p.why}" for p in on_webhook)
            condition = (
                "False",
                "OnWebhook",
                f"{len(native)} rule areas in {names or 'no policy'}; on the webhook: {detail}",
            )
        else:
            if namespace in self._skippable:
                where = f"; the resources hooks skip the namespace once they have settled ({NATIVE_RULES_LABEL})"
            elif self.engine == "both":
                where = "; the webhook judges too (engine both)"
            else:
                where = f"; the webhook is still called: {self._webhook_needed.get(namespace, '')}"
            condition = ("True", "Compiled", f"{len(native)} rule areas in {names}{where}")
        generation = int((status.get("metadata") or {}).get("generation") or 0)
        now = datetime.now(UTC)
        previous = read_conditions(status)
        updated = set_condition(
            previous,
            new_condition(
                CONDITION, condition[0], condition[1], condition[2][:1024], now=now, observed_generation=generation
            ),
        )
        if updated != previous:
            path = resource_path(GROUP_VERSION, "rulestatuses", namespace=namespace, name=RULE_STATUS_NAME)
            body = {
                "status": {"conditions": [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in updated]}
            }
            try:
                self.rule_statuses.store(await self.kube.merge_patch(f"{path}/status", body), notify=False)
                WRITES.labels("RuleStatus", "status").inc()
            except KubeError as err:
                if not err.gone:
                    log.warning(
                        "NativePolicies condition not written", extra={"namespace": namespace, "error": str(err)}
                    )
        key = f"native/{namespace}"
        if on_webhook:
            involved = {**status, "apiVersion": GROUP_VERSION, "kind": "RuleStatus"}  # cached list items carry neither
            await self.events.warn_once(key, involved, "RuleNotNative", condition[2])
        else:
            self.events.fine(key)


def binding_covers(live: JSON, wanted: JSON, namespace: str) -> bool:
    """Whether the live binding is the wanted one (policy, actions, tenant) and selects ``namespace``; the other
    namespaces it names do not matter (kube-apiserver swaps a binding whole: while a replace adding one is
    loaded, the old one still covers the rest)."""
    names = _selected_names(live)
    if namespace not in names:
        return False
    spec = json.loads(json.dumps(wanted.get("spec") or {}))
    for expression in (spec.get("matchResources") or {}).get("namespaceSelector", {}).get("matchExpressions") or []:
        if expression.get("key") == NAMESPACE_NAME_LABEL:
            expression["values"] = names
    return holds(live, {**wanted, "spec": spec})


def _selected_names(binding: JSON) -> list[str]:
    selector = ((binding.get("spec") or {}).get("matchResources") or {}).get("namespaceSelector") or {}
    for expression in selector.get("matchExpressions") or []:
        if expression.get("key") == NAMESPACE_NAME_LABEL and expression.get("operator") == "In":
            return list(expression.get("values") or [])
    return []
