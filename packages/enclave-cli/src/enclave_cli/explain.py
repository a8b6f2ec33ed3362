"""``enclave explain``: why a request is allowed or denied, step by step.

It shows who the requester is to Enclave (and which configuration entry or tenant owner made them so), every
default webhook in kube-apiserver's order (skipped because its rules do not match, or its decision with the
reason and message), the patch each mutation applies, and the facts of the tenant the decision concerns.
"""

from __future__ import annotations

import json

from enclave_admission.state import Role, State, Subject
from enclave_cli.engine import Outcome, Request
from enclave_cli.native import PolicyVerdict
from enclave_cli.output import Style
from enclave_cli.trace import Trace, render
from enclave_core.api.names import NATIVE_RULES_LABEL
from enclave_core.snapshots.tenancy import TenantView, entity_matches


def why_role(subject: Subject, state: State) -> str:
    """The configuration entry or ownership that gives ``subject`` its role."""
    config = state.config
    assert config is not None
    spec = config.spec
    if subject.role is Role.IGNORED:
        groups = sorted(set(spec.ignore_user_with_groups or ()) & set(subject.groups))
        return f"in a group of spec.ignoreUserWithGroups ({', '.join(groups)}): passes untouched"
    if subject.role is Role.ADMINISTRATOR:
        entity = next(e for e in spec.administrators or () if entity_matches(e, subject.username, subject.groups))
        return f"matches spec.administrators entry {entity.kind} {entity.name}: acts on any tenant"
    if subject.role is Role.TENANT_USER:
        parts = []
        for tenant in subject.owned:
            via = [o for o in tenant.owners if entity_matches(o, subject.username, subject.groups)]
            how = ", ".join(f"{o.kind} {o.name}" for o in via)
            parts.append(f"owner of tenant {tenant.name} (as {how})")
        users = [u for u in config.users if entity_matches(u, subject.username, subject.groups)]
        if users:
            parts.append(
                "a tenant user (" + ", ".join(f"{u.kind} {u.name}" for u in users) + " in the effective users)"
            )
        elif subject.owned:
            listed = ", ".join(f"{u.kind} {u.name}" for u in config.users)
            parts.append(
                f"not in the effective users ({listed}): fenced because they own a tenant (the specification "
                'governs listed users only; Enclave also fences owners, docs/api.md "Owners outside users")'
            )
        return "; ".join(parts) or "a tenant user"
    if subject.role is Role.TENANT_SERVICE_ACCOUNT:
        return f"a service account of a namespace of tenant {subject.home_tenant}, owner of no tenant"
    return "neither administrator, tenant user nor tenant owner: Enclave lets its requests pass untouched"


def _tenant_facts(tenant: TenantView, state: State) -> str:
    facts = [f"{len(tenant.namespaces)} namespace(s)"]
    if tenant.namespace_quota is not None:
        facts.append(f"quota {state.namespace_count(tenant)} of {tenant.namespace_quota}")
    if tenant.cordoned:
        facts.append("cordoned")
    if state.force_prefix(tenant):
        facts.append(f"forces the prefix {tenant.name}-")
    if tenant.forbidden_labels.denied or tenant.forbidden_labels.denied_regex:
        facts.append("forbidden labels")
    if tenant.forbidden_annotations.denied or tenant.forbidden_annotations.denied_regex:
        facts.append("forbidden annotations")
    owners = ", ".join(f"{o.kind} {o.name}" for o in tenant.owners) or "none"
    return f"tenant {tenant.name}: " + ", ".join(facts) + f"; owners: {owners}"


def _verdicts(verdicts: list[PolicyVerdict], style: Style) -> list[str]:
    """Each compiled policy's part: not matched and why, or its refusals (a Warn binding's are warnings)."""
    lines = []
    for verdict in verdicts:
        actions = "/".join(verdict.actions)
        if not verdict.matched:
            lines.append(style.dim(f"       {verdict.policy} ({actions}): not applied: {verdict.why}"))
            continue
        if not verdict.denials:
            held = f"{len(verdict.patch)} patch operations" if actions == "Mutate" else "every validation holds"
            lines.append(f"       {verdict.policy} ({actions}): {held}")
        for refusal in verdict.denials:
            what = "error" if refusal.error else "fails"
            lines.append(f"       {verdict.policy} ({actions}): {what}: {refusal.message}")
    return lines


def explain(request: Request, outcome: Outcome, state: State, style: Style, rules: Trace | None = None) -> str:
    """The whole explanation; ``rules`` is the per-rule trace of :mod:`enclave_cli.trace` (namespaced objects)."""
    subject = outcome.subject
    assert subject is not None
    groups = ", ".join(request.groups) or "none"
    lines = [
        style.bold(f"{request.operation} {request.full_resource} {request.name!r}")
        + (f" in {request.namespace}" if request.namespace else ""),
        f"requester: {request.user} (groups: {groups})",
        f"  role: {subject.role.value}: {why_role(subject, state)}",
        f"rules engine: {outcome.engine}",
        "webhooks" + (" and policies" if outcome.engine != "webhook" else "") + ", in kube-apiserver's order:",
    ]
    for number, step in enumerate(outcome.steps, start=1):
        decision = step.decision
        verdict = "denied" if not decision.allowed else ("patched" if decision.patch else "allowed")
        colour = style.red if not decision.allowed else style.green
        lines.append(f"  {number}. {step.hook} ({step.path}): {colour(verdict)} [{decision.reason or 'Allowed'}]")
        if decision.message:
            lines.append(f"       {decision.message}")
        for op in decision.patch:
            lines.append(f"       {op['op']} {op['path']}" + (f" = {json.dumps(op['value'])}" if "value" in op else ""))
        lines += _verdicts(step.verdicts, style)
        if decision.tenant and decision.tenant in state.tenancy.by_name:
            lines.append(f"       {_tenant_facts(state.tenancy.by_name[decision.tenant], state)}")
    if not outcome.steps:
        lines.append("  none: no Enclave webhook's rules match this request")
    if outcome.skipped:
        lines.append(style.dim("  not called (rules do not match): " + ", ".join(outcome.skipped)))
    for note in outcome.notes:
        lines.append(style.yellow(f"  note: {note}"))
    if outcome.passed_over:
        lines.append(
            style.dim(
                f"  not called (the namespace carries {NATIVE_RULES_LABEL}: the policies judge its rules): "
                + ", ".join(outcome.passed_over)
            )
        )
    if rules is not None:
        lines += render(rules, style)
    if outcome.not_reached:
        lines.append(style.dim("  not called (an earlier webhook denied): " + ", ".join(outcome.not_reached)))
    denial = outcome.denial
    if denial is not None:
        lines.append(style.red(f"answer: denied by {denial.hook}: {denial.decision.message}"))
    else:
        lines.append(style.green(f"answer: {outcome.result}"))
    return "\n".join(lines)
