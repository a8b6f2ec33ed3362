"""The per-rule trace of ``enclave explain``: every tenant rule considered for a request, matched or skipped, and why.

It walks the request exactly as admission does, by calling :func:`enclave_admission.rules.validation.review`
(the same function ``/resources`` decides with) on the same state, then reads the walk back:
:meth:`~enclave_admission.rules.engine.Review.asked` says which rules an area asked about (the ones that govern
something in this request) and whether each applied; the findings say which rules refused or reported. For a
rule that was asked and applied, ``deny``/``allow`` rules are also judged alone (the same code on a Rules
snapshot holding only that rule) to tell "its constraint is hit, but a later rule decided the item" from "not
hit". Tenant rules whose ``namespaceSelector`` leaves the namespace out are not in the Rules snapshot at all;
they are listed from the Tenant, in declaration order, as enclave-tenants compiled them away.
"""

from __future__ import annotations

from dataclasses import dataclass

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.rules import validation
from enclave_admission.rules.compiled import CompiledRule
from enclave_admission.rules.engine import Finding, Review
from enclave_admission.state import State
from enclave_cli.engine import JSON, Request
from enclave_cli.output import Style
from enclave_core import cel
from enclave_core.api.rules import AppliedRule, RuleBody
from enclave_core.api.tenancy import Tenant
from enclave_core.selectors import matches
from enclave_core.snapshots.rules import NamespaceRules, RulesSnapshot
from enclave_tenants.native.compiler import Placement, compile_namespace

SKIPPED, APPLIES, MATCHED, DECIDED, REJECTS = "skipped", "applies", "matched", "decides", "rejects"


@dataclass(frozen=True)
class RuleTrace:
    """One rule's part in the decision."""

    origin: str
    action: str
    verdict: str
    """``skipped`` (does not take part), ``applies`` (asked, applies, constraint not hit / satisfied),
    ``matched`` (hit or unsatisfied, but not deciding, or an audit finding), ``decides`` (its refusal is the
    answer), ``rejects`` (a condition errored or the rule is broken: the request is refused because of it)."""
    why: str


@dataclass
class Trace:
    namespace: str
    settled: str = ""
    """Set when ``/resources`` decided before asking any rule (exempt, not governed, no rules)."""
    rules: list[RuleTrace] | None = None
    decided_by: tuple[str, ...] = ()
    paths: list[Placement] | None = None
    """Where each rule area is judged with ``spec.rules.engine`` native or both (:mod:`enclave_tenants.native`)."""
    engine: str = "webhook"


def _governs(rule: AppliedRule | RuleBody) -> str:
    """What a rule speaks about, as a reader of the Tenant would say it."""
    parts = []
    enforce = rule.enforce
    if enforce is not None:
        for entry in enforce.metadata or ():
            groups = ",".join(g or "core" for g in entry.api_groups) if entry.api_groups is not None else "core"
            parts.append(f"metadata of kinds {entry.kinds} in apiGroups [{groups}]")
        if enforce.services is not None:
            parts.append("Services")
        if enforce.ingress is not None:
            parts.append("Ingresses" + (f" of types {enforce.ingress.types}" if enforce.ingress.types else ""))
        if enforce.network is not None:
            parts.append("NetworkPolicies")
        if enforce.storage is not None:
            parts.append("PersistentVolumeClaims")
        if enforce.workloads is not None:
            parts.append("workloads" + (f" {enforce.workloads.targets}" if enforce.workloads.targets else ""))
    for mutation in rule.mutate or ():
        if mutation.metadata is not None:
            parts.append(f"mutations of kinds {mutation.metadata.kinds}")
        if mutation.workloads is not None:
            parts.append("workload mutations")
    return "; ".join(parts) or "nothing"


def _audience(rule: CompiledRule) -> str:
    source = rule.source
    entries = [f"{a.kind} {a.name}" for a in (source.audience or [])] if source is not None else []
    return ", ".join(entries) or "everyone"


def _conditions_why(rule: CompiledRule, review: Review) -> tuple[str, str]:
    """Why an asked rule whose audience includes the requester does not apply: (verdict, why)."""
    results = cel.default().evaluate_all(list(rule.conditions), review.variables())
    false = [n for n, r in zip(rule.condition_names, results, strict=True) if isinstance(r, cel.Ok) and not r.value]
    if false:
        return SKIPPED, "condition " + ", ".join(repr(n) for n in false) + " is false"
    failed = [
        f"condition {n!r} errored: {r.error.message}"
        for n, r in zip(rule.condition_names, results, strict=True)
        if isinstance(r, cel.Failed)
    ]
    if failed:
        return REJECTS, "; ".join(failed) + " (a condition that errors refuses the request)"
    return SKIPPED, "its conditions do not hold"


def _alone(rule: CompiledRule, request: AdmissionRequest, state: State, namespace: str, tenant: str) -> list[Finding]:
    """The findings of ``rule`` judged as if it were the namespace's only rule (same code, same request)."""
    if rule.source is None:
        return []
    single = State(expect_tenancy=True, namespace=state.namespace)
    assert state.config is not None
    single.set_config(state.config)
    single.set_tenancy(state.tenancy)
    single.set_rules(
        RulesSnapshot(
            namespaces=[NamespaceRules(namespace=namespace, tenant=tenant, rules=[rule.source])],
            volumes=state.rules.volumes,
        )
    )
    judged = validation.review(request, single)
    return list(judged.findings) if isinstance(judged, Review) else []


def _one(rule: CompiledRule, review: Review, request: AdmissionRequest, state: State) -> RuleTrace:
    mine = [finding for finding in review.findings if finding.origin == rule.origin]
    denials = [finding.message for finding in mine if finding.deny]
    audits = [finding.message for finding in mine if not finding.deny]
    asked = review.asked()
    if rule.broken:
        if denials:
            return RuleTrace(rule.origin, rule.action, REJECTS, f"cannot be evaluated: {rule.broken}")
        return RuleTrace(rule.origin, rule.action, SKIPPED, f"broken ({rule.broken}), audience excludes the requester")
    if rule.index not in asked:
        if audits or denials:  # a broken condition reported by check_broken cannot get here; kept for safety
            return RuleTrace(rule.origin, rule.action, MATCHED, "; ".join(audits + denials))
        governs = _governs(rule.source) if rule.source is not None else "nothing"
        return RuleTrace(
            rule.origin,
            rule.action,
            SKIPPED,
            f"does not govern {request.kind} ({request.api_version}) here: it governs {governs}",
        )
    if not asked[rule.index]:
        if not review.in_audience(rule):
            who = f"{request.username} (groups: {', '.join(request.groups) or 'none'})"
            return RuleTrace(rule.origin, rule.action, SKIPPED, f"audience [{_audience(rule)}] excludes {who}")
        verdict, why = _conditions_why(rule, review)
        return RuleTrace(rule.origin, rule.action, verdict, why)
    if denials:
        return RuleTrace(rule.origin, rule.action, DECIDED, "; ".join(denials))
    if audits:
        return RuleTrace(rule.origin, rule.action, MATCHED, "reported (audit): " + "; ".join(audits))
    alone = [f.message for f in _alone(rule, request, state, review.rules.namespace, review.rules.tenant) if f.deny]
    if alone:
        return RuleTrace(
            rule.origin, rule.action, MATCHED, f"{'; '.join(alone)}, but a later rule decides the same item"
        )
    what = "satisfied" if rule.action == "allow" else "its constraint is not hit"
    return RuleTrace(rule.origin, rule.action, APPLIES, what)


def _excluded(tenant: Tenant | None, namespace: str, labels: JSON) -> dict[int, RuleTrace]:
    """Tenant rules whose namespaceSelector does not select the namespace (enclave-tenants leaves them out)."""
    found: dict[int, RuleTrace] = {}
    if tenant is None:
        return found
    for index, rule in enumerate(tenant.spec.rules or []):
        selector = rule.namespace_selector
        if selector is not None and not matches(selector, labels):
            shown = selector.model_dump(by_alias=True, exclude_none=True)
            origin = f"Tenant {tenant.metadata.name} spec.rules[{index}]"
            action = rule.enforce.action if rule.enforce is not None else "deny"
            found[index] = RuleTrace(
                origin, action, SKIPPED, f"namespaceSelector {shown} does not select namespace {namespace} {labels}"
            )
    return found


def trace(
    request: Request, obj: JSON | None, state: State, tenant: Tenant | None, namespace_labels: JSON
) -> Trace | None:
    """The trace of ``request`` (with ``obj``, the object after the mutating hooks) through the tenant rules;
    None for a request no rule can concern (cluster-scoped and not a PersistentVolume)."""
    if not request.namespace:
        return None
    admission = AdmissionRequest.from_review(request.review(obj, dry_run=True))
    found = Trace(request.namespace)
    judged = validation.review(admission, state)
    if isinstance(judged, Decision):
        found.settled = judged.reason
        excluded = _excluded(tenant, request.namespace, namespace_labels)
        if excluded:
            found.rules = list(excluded.values())
        return found
    traces = {rule.origin: _one(rule, judged, admission, state) for rule in judged.rules.rules}
    excluded = _excluded(tenant, request.namespace, namespace_labels)
    ordered: list[RuleTrace] = []
    if tenant is not None:
        for index in range(len(tenant.spec.rules or [])):
            origin = f"Tenant {tenant.metadata.name} spec.rules[{index}]"
            if index in excluded:
                ordered.append(excluded[index])
            elif origin in traces:
                ordered.append(traces.pop(origin))
    ordered += traces.values()  # the namespace's own RuleStatus rules, in their order
    found.rules = ordered
    found.decided_by = tuple(dict.fromkeys(f.origin for f in judged.findings if f.deny))
    sources = [rule.source for rule in judged.rules.rules if rule.source is not None]
    found.paths = compile_namespace(sources).placements if sources else None
    settings = state.config.spec.rules if state.config is not None else None
    found.engine = settings.engine if settings is not None else "webhook"
    return found


_COLOURS = {DECIDED: "red", REJECTS: "red", MATCHED: "yellow", APPLIES: "green", SKIPPED: "dim"}


def render(found: Trace, style: Style) -> list[str]:
    lines = [f"tenant rules for namespace {found.namespace} (evaluation order, by /resources):"]
    if found.settled:
        lines.append(f"  not consulted: /resources answered {found.settled} before asking any rule")
    for number, rule in enumerate(found.rules or [], start=1):
        paint = getattr(style, _COLOURS[rule.verdict])
        lines.append(f"  {number}. {rule.origin} ({rule.action}): {paint(rule.verdict)}: {rule.why}")
    if found.rules is not None and not found.settled:
        if found.decided_by:
            lines.append(style.red("  decided by: " + ", ".join(found.decided_by)))
        else:
            lines.append(style.green("  decided by: no rule refuses the request"))
    if found.paths:
        lines.append(f"where each rule is judged with spec.rules.engine native or both (here: {found.engine}):")
        for place in found.paths:
            where = "kube-apiserver policy" if place.path == "native" else "webhook"
            lines.append(f"  {place.origin} {place.area}: {where}: {place.why}")
    return lines
