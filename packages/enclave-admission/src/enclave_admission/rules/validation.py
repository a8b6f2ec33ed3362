"""``/resources``: a request on a namespaced object in a tenant namespace against the namespace's rules.

From the request to the decision: :func:`~enclave_admission.rules.exempt.exemption` (never judged), the
namespace's compiled rules (none: allowed at once; a tenant namespace the Rules snapshot does not name at all
is refused, see :func:`unnamed`), then each area judges its items
(:mod:`~enclave_admission.rules.engine` combines the verdicts). Any refusal denies the request with every
refusing rule named, its field path and the offending value; audit findings ride on the decision and become
Events (none for dry runs). Also answers PersistentVolumes (cluster-scoped): the tenant ownership label.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Final

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.rules import exempt, ingress, metadata, network, services, storage, workloads
from enclave_admission.rules.engine import Review
from enclave_admission.state import State
from enclave_core.api.names import TENANT_LABEL

MAX_REASONS = 5
"""Refusals listed in one denial; the rest are counted."""

NO_RULES_FOR_NAMESPACE: Final = "NoRulesForTenantNamespace"


def answer(request: AdmissionRequest, state: State) -> Decision | Awaitable[Decision]:
    """The ``/resources`` route: :func:`validate`, except that a request in a tenant namespace the Rules snapshot
    does not name yet is decided once it does, and refused only after :attr:`State.rules_wait`."""
    return once_named(validate, request, state)


def once_named(
    hook: Callable[[AdmissionRequest, State], Decision], request: AdmissionRequest, state: State
) -> Decision | Awaitable[Decision]:
    """``hook``'s decision, or, when it answered :data:`NO_RULES_FOR_NAMESPACE`, its decision once the Rules
    snapshot names the namespace or :attr:`State.rules_wait` has passed."""
    decided = hook(request, state)
    if decided.reason == NO_RULES_FOR_NAMESPACE:
        return _after_wait(hook, request, state)
    return decided


async def _after_wait(
    hook: Callable[[AdmissionRequest, State], Decision], request: AdmissionRequest, state: State
) -> Decision:
    await state.wait_for_rules(request.namespace)
    return hook(request, state)


def validate(request: AdmissionRequest, state: State) -> Decision:
    """The decision from the snapshots as they are now (a namespace they do not name is refused at once)."""
    judged = review(request, state)
    return judged if isinstance(judged, Decision) else decide(judged)


def unnamed(request: AdmissionRequest) -> Decision:
    """The answer in a tenant namespace (the hooks see only namespaces carrying the tenant label) that the Rules
    snapshot does not name: its rules are not published yet, or they are gone (its tenant was deleted, or a
    terminating namespace's rules were never compiled by this publisher). Judging it as a namespace without
    rules would let anything through, so the request is refused, failing closed. One change is let through:
    an update that only removes finalizers, so the garbage collector and the tenant's controllers can still
    finish deleting a namespace whose rules are gone (it can loosen no rule: every other field is unchanged)."""
    if finalizers_only(request):
        return Decision.allow("FinalizersOnly")
    return Decision.deny(
        NO_RULES_FOR_NAMESPACE,
        f"{NO_RULES_FOR_NAMESPACE}: namespace {request.namespace!r} carries the label {TENANT_LABEL} but Enclave "
        "has no rules for it (not published yet, or its tenant is gone), so nothing is admitted there rather "
        "than admitted unjudged; retry in a moment, and ask an Enclave administrator if it persists",
    )


_VOLATILE_METADATA: Final = frozenset({"finalizers", "managedFields", "resourceVersion"})
"""Metadata an update that only removes finalizers changes (kube-apiserver records the field manager)."""


def finalizers_only(request: AdmissionRequest) -> bool:
    """Whether ``request`` is an update whose only change is finalizers removed (or nothing at all)."""
    old, new = request.old, request.obj
    if request.operation != "UPDATE" or not isinstance(old, dict) or not isinstance(new, dict):
        return False
    old_meta, new_meta = old.get("metadata"), new.get("metadata")
    if not isinstance(old_meta, dict) or not isinstance(new_meta, dict):
        return False
    before, after = old_meta.get("finalizers") or [], new_meta.get("finalizers") or []
    if not isinstance(before, list) or not isinstance(after, list) or any(item not in before for item in after):
        return False
    if any(value != new.get(key) for key, value in old.items() if key != "metadata") or any(
        key not in old for key in new if key != "metadata"
    ):
        return False
    kept_old = {key: value for key, value in old_meta.items() if key not in _VOLATILE_METADATA}
    kept_new = {key: value for key, value in new_meta.items() if key not in _VOLATILE_METADATA}
    return kept_old == kept_new


def review(request: AdmissionRequest, state: State) -> Decision | Review:
    """The judged request (its findings, and which rules were asked: :meth:`Review.asked`), or the decision
    when it is settled before any rule is asked. Apart from :func:`validate`, ``enclave explain`` calls it to
    trace rule by rule with exactly the walk admission makes."""
    if not request.namespace:
        return storage.volume_label(request, state) or Decision.allow("NotGoverned")
    if request.operation not in ("CREATE", "UPDATE"):
        return Decision.allow("NotGoverned")
    why = exempt.exemption(request, state)
    if why:
        return Decision.allow(why)
    if not state.knows_rules(request.namespace):
        return unnamed(request)
    rules = state.rule_set(request.namespace)
    is_claim = request.resource == "persistentvolumeclaims" and not request.group
    if not rules.rules and not is_claim:
        return Decision.allow("NoRules", tenant=rules.tenant)
    judged = Review(request, rules)
    judged.check_broken()
    metadata.judge(judged)
    services.judge(judged)
    ingress.judge(judged)
    network.judge(judged)
    storage.judge(judged, state)
    workloads.judge(judged)
    return judged


def decide(review: Review) -> Decision:
    tenant = review.rules.tenant
    if review.malformed:
        # Never an allow by mistake, never a crash: an object we cannot read is a bad request (kube-apiserver
        # refuses most such objects before calling us; a raw review or a future field may not be).
        return Decision(False, "MalformedObject", review.malformed, tenant=tenant, code=400)
    audits = tuple(finding.message for finding in review.findings if not finding.deny)
    denials = [finding.message for finding in review.findings if finding.deny]
    if not denials:
        return Decision(True, "Allowed" if not audits else "Audited", tenant=tenant, audits=audits)
    message = "; ".join(denials[:MAX_REASONS])
    if len(denials) > MAX_REASONS:
        message += f"; and {len(denials) - MAX_REASONS} more"
    return Decision(False, "RuleViolation", message, tenant=tenant, audits=audits)
