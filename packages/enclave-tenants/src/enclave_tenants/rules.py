"""RuleStatus compilation: which rules apply in each tenant namespace (pure, run by every replica).

For every tenant namespace the rules in effect are the tenant's ``spec.rules[]`` whose
``namespaceSelector`` selects the namespace (absent selects every namespace of the tenant), in declaration
order, then the namespace's own ``RuleStatus/default`` ``spec[]``; each carries its origin so a denial can
name the rule. The result is both the RuleStatus' ``status`` (written by the Lease holder) and the Rules
snapshot admission decides from (published by every replica), so the two can never disagree.

A rule that cannot work (CEL that does not compile, a bad regular expression or CIDR) is refused at the API;
one that got in anyway (the webhook was down) stays in the compiled set, because admission treats a condition
that does not compile as one that errors (the request is refused: failing closed), and the RuleStatus reports
``Ready=False`` naming the field.

A terminating namespace keeps its rules until it is gone: objects held by finalizers (a Service, an Ingress,
the owner's own RoleBinding) can still be updated there, and dropping the rules would let the owner patch a
NodePort into a Service in the namespace they just deleted. Its rules are compiled as usual while its
RuleStatus exists; once the namespace controller has deleted that (its own ``spec[]`` rules with it), the rules
last compiled stay. A replica that never compiled them (it started after) leaves the namespace out, and
admission refuses writes in a tenant namespace the snapshot does not name.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError

from enclave_core import GROUP_VERSION
from enclave_core.api.names import MANAGED_BY, TENANTS_MANAGER
from enclave_core.api.rules import AppliedRule, RuleBody, RuleOrigin, RuleStatusStatus
from enclave_core.api.tenancy import Tenant
from enclave_core.api.validation import rules_problems
from enclave_core.conditions import Condition, new_condition, set_condition
from enclave_core.selectors import matches
from enclave_core.snapshots.rules import (
    NAMESPACE_KIND,
    RULE_STATUS_NAME,
    BudgetView,
    NamespaceRules,
    RulesSnapshot,
    TenantNamespaceRule,
    TenantNamespaceRules,
    VolumeView,
)
from enclave_tenants.namespaces import is_terminating
from enclave_tenants.status import CONDITION_MESSAGE_LIMIT, Problem

JSON = dict[str, Any]


@dataclass(slots=True)
class NamespaceRulePlan:
    """One tenant namespace: the compiled rules and what is wrong with their sources (slotted: one per tenant
    namespace is kept between rounds, and an instance dictionary each was ~1 MB at 10,000)."""

    namespace: str
    tenant: str
    rules: list[AppliedRule] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    live: JSON | None = None
    """The namespace's ``RuleStatus/default`` as last seen, None when it does not exist yet."""
    terminating: bool = False
    """Being deleted: its rules are published, but nothing is written into it (no RuleStatus, no managed
    metadata)."""


def _origin(kind: str, name: str, index: int, namespace: str | None = None) -> RuleOrigin:
    return RuleOrigin(
        kind="RuleStatus" if kind == "RuleStatus" else "Tenant", name=name, namespace=namespace, index=index
    )


def _applied(rule: RuleBody, origin: RuleOrigin) -> AppliedRule:
    body = rule.model_dump(by_alias=True, exclude_none=True)
    body.pop("namespaceSelector", None)
    return AppliedRule.model_validate({**body, "origin": origin.model_dump(by_alias=True, exclude_none=True)})


def _own_rules(live: JSON | None, namespace: str) -> tuple[list[AppliedRule], list[Problem]]:
    """``spec[]`` of the namespace's own RuleStatus; a list that does not parse contributes nothing and is reported."""
    if live is None:
        return [], []
    raw = live.get("spec") or []
    try:
        bodies = [RuleBody.model_validate(item) for item in raw]
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(p) for p in first["loc"])
        return [], [Problem(reason="InvalidSpec", message=f"spec[{where}]: {first['msg']}")]
    problems = [Problem(reason="InvalidRule", message=str(p)) for p in rules_problems(bodies, "spec")]
    return [
        _applied(body, _origin("RuleStatus", RULE_STATUS_NAME, i, namespace)) for i, body in enumerate(bodies)
    ], problems


def compile_namespaces(
    tenants: Mapping[str, Tenant | None],
    namespace_tenant: Mapping[str, str],
    namespaces: Mapping[str, JSON],
    rule_statuses: Mapping[str, JSON],
    previous: Mapping[str, NamespaceRulePlan] | None = None,
) -> dict[str, NamespaceRulePlan]:
    """Rules per tenant namespace, terminating ones included. ``tenants`` maps names to parsed Tenants (None:
    does not parse, so its namespaces keep their last written RuleStatus and drop out of the snapshot only if
    they never had one); ``rule_statuses`` maps namespace names to their ``RuleStatus/default``; ``previous``
    is the last compile, whose rules a terminating namespace keeps once its RuleStatus is deleted."""
    plans: dict[str, NamespaceRulePlan] = {}
    tenant_problems: dict[str, list[Problem]] = {}
    for namespace, tenant_name in sorted(namespace_tenant.items()):
        item = namespaces.get(namespace)
        if item is None:
            continue
        terminating = is_terminating(item)
        live = rule_statuses.get(namespace)
        if terminating and live is None:
            last = (previous or {}).get(namespace)
            if last is not None:
                plans[namespace] = NamespaceRulePlan(
                    namespace=namespace,
                    tenant=last.tenant,
                    rules=last.rules,
                    problems=last.problems,
                    terminating=True,
                )
            continue
        tenant = tenants.get(tenant_name)
        plan = NamespaceRulePlan(namespace=namespace, tenant=tenant_name, live=live, terminating=terminating)
        plans[namespace] = plan
        if tenant is None:
            plan.rules = _last_rules(live)
            plan.problems.append(
                Problem(reason="TenantInvalid", message=f"Tenant {tenant_name} does not parse; keeping the last rules")
            )
            continue
        if tenant_name not in tenant_problems:
            tenant_problems[tenant_name] = [
                Problem(reason="InvalidRule", message=f"Tenant {tenant_name} {p}")
                for p in rules_problems(tenant.spec.rules, "spec.rules")
            ]
        plan.problems += tenant_problems[tenant_name]
        labels = (item.get("metadata") or {}).get("labels") or {}
        for index, rule in enumerate(tenant.spec.rules or []):
            selector = rule.namespace_selector
            if selector is not None and not matches(selector, labels):
                continue
            plan.rules.append(_applied(rule, _origin("Tenant", tenant_name, index)))
        own, problems = _own_rules(live, namespace)
        plan.rules += own
        plan.problems += problems
    return plans


def _last_rules(live: JSON | None) -> list[AppliedRule]:
    try:
        status = RuleStatusStatus.model_validate((live or {}).get("status") or {})
    except ValidationError:
        return []
    return list(status.rules or [])


def namespace_rules(tenants: Mapping[str, Tenant | None]) -> list[TenantNamespaceRules]:
    """Per tenant, its ``spec.rules`` that judge Namespace objects: each cut down to the metadata entries whose
    ``kinds`` name ``Namespace`` (with its audience, action and conditions; no other area speaks of namespaces),
    with its ``namespaceSelector``. Admission applies them when tenant users create or update the tenant's
    namespaces."""
    found = []
    for name, tenant in sorted(tenants.items()):
        if tenant is None:
            continue
        selected = []
        for index, rule in enumerate(tenant.spec.rules or []):
            enforce = rule.enforce
            entries = [entry for entry in (enforce.metadata or []) if NAMESPACE_KIND in entry.kinds] if enforce else []
            if not entries or enforce is None:
                continue
            cut = rule.model_copy(
                update={
                    "enforce": enforce.model_copy(update={"metadata": entries, **dict.fromkeys(_OTHER_AREAS)}),
                    "mutate": None,
                    "quota": None,
                }
            )
            selected.append(
                TenantNamespaceRule(
                    rule=_applied(cut, _origin("Tenant", name, index)), namespace_selector=rule.namespace_selector
                )
            )
        if selected:
            found.append(TenantNamespaceRules(tenant=name, rules=selected))
    return found


_OTHER_AREAS = ("ingress", "network", "services", "storage", "workloads")


def snapshot(
    plans: Mapping[str, NamespaceRulePlan],
    volumes: Iterable[JSON],
    budgets: Iterable[JSON] = (),
    tenants: Mapping[str, Tenant | None] | None = None,
) -> RulesSnapshot:
    """What admission gets: every namespace's rules (namespaces without rules by name only, so admission tells
    them from namespaces it knows nothing of), PV labels, and the PodDisruptionBudgets of the namespaces where
    some rule requires coverage (no other PDB is of use to admission, so a PDB changing elsewhere does not
    change the snapshot)."""
    covered = {plan.namespace for plan in plans.values() if any(_requires_budgets(rule) for rule in plan.rules)}
    return RulesSnapshot(
        namespaces=[
            NamespaceRules(namespace=plan.namespace, tenant=plan.tenant, rules=plan.rules)
            for plan in plans.values()
            if plan.rules
        ],
        without_rules=sorted(plan.namespace for plan in plans.values() if not plan.rules),
        namespace_rules=namespace_rules(tenants or {}),
        volumes=[
            VolumeView(name=item["metadata"]["name"], labels=dict(item["metadata"].get("labels") or {}))
            for item in volumes
        ],
        budgets=sorted(
            (view for item in budgets if (view := budget_view(item, covered)) is not None),
            key=lambda view: (view.namespace, view.name),
        ),
    )


def _requires_budgets(rule: AppliedRule) -> bool:
    workloads = rule.enforce.workloads if rule.enforce is not None else None
    return bool(workloads and workloads.disruption_budgets and workloads.disruption_budgets.required)


def budget_view(item: JSON, namespaces: set[str]) -> BudgetView | None:
    """A PodDisruptionBudget of one of ``namespaces`` as admission needs it; None for others, for one being
    deleted, and for one whose selector does not parse (kube-apiserver validates it, so that is a PDB of an
    older API version: it covers nothing, as the disruption controller would not use it either)."""
    meta = item.get("metadata") or {}
    if meta.get("namespace") not in namespaces or meta.get("deletionTimestamp"):
        return None
    spec = item.get("spec") or {}
    try:
        return BudgetView.model_validate(
            {
                "namespace": meta["namespace"],
                "name": meta["name"],
                "selector": spec.get("selector"),
                "minAvailable": spec.get("minAvailable"),
                "maxUnavailable": spec.get("maxUnavailable"),
            }
        )
    except ValidationError:
        return None


def new_rule_status(namespace: str) -> JSON:
    """The ``RuleStatus/default`` created with a tenant namespace (an empty spec: the tenant's rules only)."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "RuleStatus",
        "metadata": {"name": RULE_STATUS_NAME, "namespace": namespace, "labels": {MANAGED_BY: TENANTS_MANAGER}},
    }


def _previous_conditions(live: JSON | None) -> list[Condition]:
    found = []
    for item in ((live or {}).get("status") or {}).get("conditions") or []:
        try:
            found.append(Condition.model_validate(item))
        except ValueError:
            continue
    return found


def desired_status(plan: NamespaceRulePlan, now: datetime) -> JSON:
    """``status`` of the namespace's RuleStatus: the rules, their number, Ready and observedGeneration."""
    generation = int(((plan.live or {}).get("metadata") or {}).get("generation") or 0)
    if plan.problems:
        message = "; ".join(p.message for p in plan.problems)[:CONDITION_MESSAGE_LIMIT]
        ready = new_condition(
            "Ready", "False", plan.problems[0].reason, message, now=now, observed_generation=generation
        )
    else:
        ready = new_condition(
            "Ready", "True", "Compiled", f"{len(plan.rules)} rules in effect", now=now, observed_generation=generation
        )
    status = RuleStatusStatus(
        rules=plan.rules,
        size=len(plan.rules),
        conditions=set_condition(_previous_conditions(plan.live), ready),
        observed_generation=generation,
    )
    return status.to_k8s()


def status_changed(live: JSON | None, status: JSON) -> bool:
    old = (live or {}).get("status") or {}
    return any(old.get(key) != value for key, value in status.items())
