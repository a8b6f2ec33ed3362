"""``disruptionBudgets``: a PodDisruptionBudget's ``maxUnavailable`` against the rule's bound, and with
``required`` a replicated controller that no budget of its namespace covers (the budgets come from the Rules
snapshot: admission reads no API)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from enclave_admission.rules.compiled import CompiledRule
from enclave_admission.rules.engine import Item, Review
from enclave_admission.rules.workloads.judges import verdict
from enclave_admission.rules.workloads.podspec import as_map

REPLICATED: Final = frozenset({"Deployment", "StatefulSet", "ReplicaSet", "ReplicationController"})
"""Controller kinds with ``spec.replicas``: what ``disruptionBudgets.required`` is about (a DaemonSet, a Job or
a single replica has no availability a budget could protect during a drain)."""


def _replicated(obj: Mapping[str, Any] | None) -> tuple[int, dict[str, Any]] | None:
    """(replicas, Pod template labels) of a controller that runs more than one replica, else None."""
    spec = as_map(as_map(obj).get("spec"))
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or isinstance(replicas, bool) or replicas <= 1:
        return None
    return replicas, dict(as_map(as_map(as_map(spec.get("template")).get("metadata")).get("labels")))


def coverage(review: Review, rule: CompiledRule, kind: str) -> None:
    """``disruptionBudgets.required``: a controller of more than one replica must be covered by a
    PodDisruptionBudget of its namespace selecting its Pod template's labels. Judged on CREATE, and on UPDATE
    when it starts to need coverage (replicas raised above one, template labels changed): an existing
    Deployment is never refused for a budget deleted since."""
    request = review.request
    found = _replicated(request.obj)
    if found is None:
        return
    if request.operation == "UPDATE" and _replicated(request.old) == found:
        return
    replicas, labels = found
    covering = [b.name for b in review.rules.budgets if b.selector is not None and b.selector.matches(labels)]
    item = Item()
    shown = ", ".join(f"{key}={value}" for key, value in sorted(labels.items())) or "none"
    known = len(review.rules.budgets)
    why = (
        f"{rule.origin} requires a PodDisruptionBudget covering {kind} {request.name or '(generated name)'} "
        f"({replicas} replicas, spec.template.metadata.labels {shown}): none of the {known} PodDisruptionBudgets "
        f"admission knows in {request.namespace} selects these labels. Create the PodDisruptionBudget first; one "
        "created in the last few seconds may not have reached admission yet, retry in a moment"
    )
    if rule.action == "allow":
        item.allow(rule, bool(covering), why)
    elif not covering:
        item.hit(rule, why if rule.action == "deny" else f"{rule.origin} audits: {why}")
    review.settle(item)


def disruption_budgets(review: Review) -> None:
    request = review.request
    spec = as_map(as_map(request.obj).get("spec"))
    value = spec.get("maxUnavailable")
    if value is None:
        return
    for rule in review.rules.workloads:
        budgets = rule.workloads.disruption_budgets if rule.workloads else None
        if budgets is None or budgets.max_unavailable is None or not review.applies(rule):
            continue
        item = Item()
        bound = budgets.max_unavailable
        inside = _within(value, bound)
        verdict(item, rule, inside, "spec.maxUnavailable", repr(value), f"maxUnavailable at most {bound!r}")
        review.settle(item)


def _within(value: Any, bound: Any) -> bool:
    """Both numbers or both percentages compare; a number against a percentage cannot be judged (admitted)."""
    text, limit = str(value), str(bound)
    if text.endswith("%") != limit.endswith("%"):
        return True
    try:
        return int(text.rstrip("%")) <= int(limit.rstrip("%"))
    except ValueError:
        return False
