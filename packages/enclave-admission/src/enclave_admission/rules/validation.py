"""``/resources``: a request on a namespaced object in a tenant namespace against the namespace's rules.

From the request to the decision: :func:`~enclave_admission.rules.exempt.exemption` (never judged), the
namespace's compiled rules (none: allowed at once), then each area judges its items
(:mod:`~enclave_admission.rules.engine` combines the verdicts). Any refusal denies the request with every
refusing rule named, its field path and the offending value; audit findings ride on the decision and become
Events (none for dry runs). Also answers PersistentVolumes (cluster-scoped): the tenant ownership label.
"""

from __future__ import annotations

from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.rules import exempt, ingress, metadata, network, services, storage, workloads
from enclave_admission.rules.engine import Review
from enclave_admission.state import State

MAX_REASONS = 5
"""Refusals listed in one denial; the rest are counted."""


def validate(request: AdmissionRequest, state: State) -> Decision:
    judged = review(request, state)
    return judged if isinstance(judged, Decision) else decide(judged)


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
