"""Pool and claim status, computed from the plan (pure: the caller passes the clock).

Conditions keep their ``lastTransitionTime`` while their status holds, and a status is written only when a
field we own changed, so a steady state costs no writes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from enclave_core.api.pools import ClaimRef, Exhaustion, PoolRef, ResourcePoolClaimStatus, ResourcePoolStatus
from enclave_core.api.quotas import QuotaTotals
from enclave_core.conditions import Condition, new_condition, read_conditions, set_condition
from enclave_core.quantity import max0, sub_maps
from enclave_pools.model import BOUND, PoolPlan, Verdict, fmt

JSON = dict[str, Any]
CONDITION_MESSAGE_LIMIT = 32000


def _previous(raw: JSON) -> list[Condition]:
    return read_conditions(raw)


def _generation(raw: JSON) -> int:
    return int((raw.get("metadata") or {}).get("generation") or 0)


def pool_status(pool: PoolPlan, *, problems: list[str], now: datetime) -> JSON:
    """The pool's ``status``; ``claims`` is the ledger of bindings (see :mod:`enclave_pools.plan`)."""
    generation = _generation(pool.raw)
    hard = pool.hard
    claimed = pool.claimed()
    claims: dict[str, list[ClaimRef]] = {}
    for record in sorted(pool.records.values(), key=lambda r: (r.namespace, r.name)):
        claims.setdefault(record.namespace, []).append(
            ClaimRef(name=record.name, namespace=record.namespace, uid=record.uid, claims=fmt(record.claims))
        )
    if problems:
        ready = new_condition(
            "Ready",
            "False",
            "InvalidSpec" if pool.problems else "ApplyFailed",
            "; ".join(problems)[:CONDITION_MESSAGE_LIMIT],
            now=now,
            observed_generation=generation,
        )
    else:
        over = sorted(k for k, v in sub_maps(hard, claimed).items() if k in hard and v.sign() < 0)
        if over:
            ready = new_condition(
                "Ready",
                "False",
                "OverAllocated",
                f"bound claims exceed spec.quota.hard for {', '.join(over)}; nothing new binds until claims are released",
                now=now,
                observed_generation=generation,
            )
        else:
            ready = new_condition(
                "Ready",
                "True",
                "Active",
                f"{len(pool.records)} claims bound across {len(pool.namespaces)} namespaces",
                now=now,
                observed_generation=generation,
            )
    status = ResourcePoolStatus(
        conditions=set_condition(_previous(pool.raw), ready),
        allocation=QuotaTotals(
            hard=fmt(hard),
            used=fmt({k: claimed[k] for k in claimed}),
            available=fmt(max0({k: v for k, v in sub_maps(hard, claimed).items() if k in hard})),
        ),
        claim_count=len(pool.records),
        claims=claims or None,
        exhaustions={key: Exhaustion(available=str(a), requesting=str(r)) for key, (a, r) in pool.exhaustions.items()}
        or None,
        namespace_count=len(pool.namespaces),
        namespaces=pool.namespaces,
        observed_generation=generation,
    )
    return status.to_k8s()


def claim_status(raw: JSON, verdict: Verdict, *, now: datetime) -> JSON:
    """The claim's ``status``: Bound and Ready, the deprecated ``condition`` mirroring Bound, the pool it is
    bound to and its ``allocation``."""
    generation = _generation(raw)
    bound = new_condition(
        "Bound",
        "True" if verdict.bound else "False",
        verdict.reason,
        verdict.message[:CONDITION_MESSAGE_LIMIT],
        now=now,
        observed_generation=generation,
    )
    fully = verdict.bound and verdict.reason == BOUND
    ready = new_condition(
        "Ready",
        "True" if fully else "False",
        verdict.reason,
        verdict.message[:CONDITION_MESSAGE_LIMIT],
        now=now,
        observed_generation=generation,
    )
    conditions = set_condition(set_condition(_previous(raw), bound), ready)
    mirrored = next(c for c in conditions if c.type == "Bound")
    status = ResourcePoolClaimStatus(
        conditions=conditions,
        condition=mirrored,
        observed_generation=generation,
        pool=PoolRef(name=verdict.pool, uid=verdict.pool_uid) if verdict.bound else None,
        allocation=claim_allocation(verdict),
    )
    out = status.to_k8s()
    # Explicit nulls: the status is written by merge patch, and an unbound claim must lose its old binding.
    out.setdefault("pool", None)
    out.setdefault("allocation", None)
    return out


def claim_allocation(verdict: Verdict) -> QuotaTotals | None:
    """``hard`` (the amounts bound), ``used`` (the part of them the namespace uses, see
    :func:`enclave_pools.resourcequotas.claim_usage`) and ``available`` (``hard - used``, never negative, for the
    resources ``used`` reports); None while not bound."""
    if verdict.allocation is None:
        return None
    if verdict.used is None:
        return QuotaTotals(hard=fmt(verdict.allocation))
    hard = {k: v for k, v in verdict.allocation.items() if k in verdict.used}
    return QuotaTotals(
        hard=fmt(verdict.allocation),
        used=fmt(verdict.used),
        available=fmt(max0(sub_maps(hard, verdict.used))),
    )


def claim_current(raw: JSON, verdict: Verdict) -> bool:
    """Whether the claim's stored status already says what ``verdict`` says: a cheap test that spares building
    the status (pydantic models, conditions) for every claim on every pass."""
    status = raw.get("status") or {}
    condition = status.get("condition") or {}
    allocation = claim_allocation(verdict)
    return (
        status.get("observedGeneration") == _generation(raw)
        and condition.get("reason") == verdict.reason
        and condition.get("message") == verdict.message[:CONDITION_MESSAGE_LIMIT]
        and condition.get("status") == ("True" if verdict.bound else "False")
        and ((status.get("pool") or {}).get("name") or "") == (verdict.pool if verdict.bound else "")
        and (status.get("allocation") or None) == (allocation.to_k8s() if allocation is not None else None)
        and len(status.get("conditions") or []) == 2
    )


def claim_patch(raw: JSON, status: JSON) -> JSON:
    """The merge patch that makes the stored claim status ``status``: a merge patch merges nested objects, so
    every resource the stored ``allocation`` lists and ``status`` no longer does (a claim that dropped a
    resource, a ``used`` the quota stopped reporting) is sent as an explicit null."""
    old = (raw.get("status") or {}).get("allocation")
    new = status.get("allocation")
    if not isinstance(old, dict) or not isinstance(new, dict):
        return status
    allocation: JSON = {}
    for part in sorted(old.keys() | new.keys()):
        before, after = old.get(part), new.get(part)
        if isinstance(before, dict) and isinstance(after, dict):
            allocation[part] = {**{key: None for key in before if key not in after}, **after}
        else:
            allocation[part] = after
    return {**status, "allocation": allocation}


def changed(raw: JSON, status: JSON, *, whole: bool = False) -> bool:
    """Whether writing ``status`` would change the stored one: the whole status for a pool (replaced with
    PUT), only the fields we write for a claim (merge patch, with explicit nulls)."""
    old = raw.get("status") or {}
    if whole:
        return bool(old != status)
    return any(old.get(key) != value for key, value in status.items())
