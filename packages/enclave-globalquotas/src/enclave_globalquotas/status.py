"""GlobalResourceQuota status and its ledger's ``resourceQuota`` block, computed from the plan (pure).

Conditions keep their ``lastTransitionTime`` while their status holds, so a status is written only when
something a reader cares about changed, never on every pass.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from enclave_core.api.quotas import GlobalResourceQuotaStatus, NamespaceUsage, QuotaTotals
from enclave_core.conditions import Condition, new_condition, read_conditions, set_condition
from enclave_core.quantity import Quantity
from enclave_globalquotas.plan import Problem, QuotaPlan

JSON = dict[str, Any]
CONDITION_MESSAGE_LIMIT = 32000


def _text(values: Mapping[str, Quantity]) -> dict[str, str]:
    return {key: str(value) for key, value in sorted(values.items())}


def ready_condition(plan: QuotaPlan, problems: Sequence[Problem], now: datetime) -> Condition:
    if problems:
        message = "; ".join(p.message for p in problems)[:CONDITION_MESSAGE_LIMIT]
        return new_condition(
            "Ready", "False", problems[0].reason, message, now=now, observed_generation=plan.generation
        )
    waiting = sorted(set(plan.namespaces) - plan.reported)
    if waiting:
        shown = ", ".join(waiting[:10]) + (f" and {len(waiting) - 10} more" if len(waiting) > 10 else "")
        message = f"waiting for the ResourceQuota usage of {len(waiting)} of {len(plan.namespaces)} namespaces: {shown}"
        return new_condition("Ready", "False", "WaitingForUsage", message, now=now, observed_generation=plan.generation)
    message = f"{len(plan.namespaces)} namespaces share the quota"
    return new_condition("Ready", "True", "Active", message, now=now, observed_generation=plan.generation)


def quota_status(plan: QuotaPlan, problems: Sequence[Problem], now: datetime) -> JSON:
    """The GlobalResourceQuota's ``status``. With a refused spec the last totals stay (they still hold)."""
    conditions = set_condition(read_conditions(plan.raw), ready_condition(plan, problems, now))
    if not plan.valid:
        old = dict(plan.raw.get("status") or {})
        old["conditions"] = [c.model_dump(mode="json", by_alias=True, exclude_none=True) for c in conditions]
        old["observedGeneration"] = plan.generation
        return old
    status = GlobalResourceQuotaStatus(
        conditions=conditions,
        total=QuotaTotals(hard=_text(plan.hard), used=_text(plan.used), available=_text(plan.available)),
        namespace_count=len(plan.namespaces),
        namespace_usage={ns: NamespaceUsage(used=_text(plan.usage[ns])) for ns in plan.namespaces},
        namespaces=plan.namespaces,
        observed_generation=plan.generation,
    )
    return status.to_k8s()


def changed(raw: JSON, status: JSON) -> bool:
    """Whether writing ``status`` would change the stored one (only the fields we write are compared)."""
    old = raw.get("status") or {}
    return any(old.get(key) != value for key, value in status.items()) or any(key not in status for key in old)


def replacing_patch(old: Any, new: Any) -> Any:
    """A JSON merge patch turning ``old`` into ``new``: keys ``new`` lacks are sent as ``null`` (a merge patch
    otherwise keeps them, and a namespace that left the selection would stay in ``namespaceUsage``)."""
    if not isinstance(new, dict):
        return new
    patch = {key: replacing_patch(old.get(key) if isinstance(old, dict) else None, value) for key, value in new.items()}
    if isinstance(old, dict):
        patch.update({key: None for key in old if key not in new})
    return patch
