"""The pools plan: from the watch caches to every binding, status and ResourceQuota the cluster should hold.

Pure: no I/O and no clock (the controller passes ``now``), so every rule below is a unit test away. What it
reads and says is :mod:`enclave_pools.model`; the ResourceQuotas it wants are :mod:`enclave_pools.resourcequotas`.

**The ledger.** A pool's ``status.claims`` is the record of which claims it has bound and for how much; a
claim's ``status.pool`` only mirrors it. The controller commits new bindings by replacing the pool's status
*with the resourceVersion it read*; kube-apiserver refuses the write with 409 if anything changed the pool in
between (packages/enclave-pools/README.md argues why that never over-allocates). The plan therefore starts from the
committed records, drops those whose claim is gone, and binds waiting claims into what is left.

**Order.** Waiting claims are served oldest first: ``creationTimestamp``, then namespace, then name (the
timestamp has one-second resolution). A claim binds when every resource it asks for fits in what the pool
has left. With ``config.orderedQueue`` a claim that does not fit holds its resources: a later claim asking for
any of them waits behind it (``QueueExhausted``) even if it would fit.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from pydantic import ValidationError

from enclave_core.api.names import TENANT_LABEL
from enclave_core.api.pools import ResourcePoolSpec
from enclave_core.quantity import Quantity, exceeded, max0, sub_maps
from enclave_core.resourcenames import resource_list_problems
from enclave_core.resourcequota import resource_quota_problems
from enclave_core.selectors import matches_any
from enclave_core.snapshots.pools import BoundClaim, NamespaceQuota, PoolsSnapshot, PoolView
from enclave_pools.model import (
    BOUND,
    INVALID_SPEC,
    JSON,
    NAMESPACE_NOT_SELECTED,
    POOL_DELETED,
    POOL_DELETING,
    POOL_EXHAUSTED,
    POOL_INVALID,
    POOL_NOT_FOUND,
    QUEUE_EXHAUSTED,
    RESIZE_PENDING,
    RESOURCE_NOT_OFFERED,
    Amounts,
    Claim,
    Plan,
    PoolPlan,
    Record,
    Verdict,
    fmt,
    read_records,
)
from enclave_pools.resourcequotas import attribute_usage, owning_pool_uid, quota_name, wanted_quotas


def _read_spec(raw: JSON) -> tuple[ResourcePoolSpec | None, list[str]]:
    try:
        spec = ResourcePoolSpec.model_validate(raw.get("spec") or {})
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(part) for part in first["loc"])
        return None, [f"spec.{where}: {first['msg']}"]
    selector = spec.quota.scope_selector
    requirements = (
        [(r.scope_name, r.operator, r.values or []) for r in (selector.match_expressions or [])] if selector else None
    )
    problems = resource_quota_problems(spec.quota.hard, spec.quota.scopes, requirements)
    problems += resource_list_problems(spec.defaults or {}, "spec.defaults")
    return spec, problems


def _selected(spec: ResourcePoolSpec | None, namespaces: Iterable[JSON]) -> list[str]:
    if spec is None or not spec.selectors:
        return []
    return sorted(
        str(ns["metadata"]["name"])
        for ns in namespaces
        if matches_any(spec.selectors, (ns.get("metadata") or {}).get("labels") or {})
    )


def _missing(request: Amounts, available: Amounts) -> str:
    over = exceeded(request, available)
    return ", ".join(f"{key} requested {request[key]}, available {available.get(key, Quantity(0))}" for key in over)


def _previous_reason(claim: Claim) -> str:
    for condition in (claim.raw.get("status") or {}).get("conditions") or []:
        if isinstance(condition, dict) and condition.get("type") == "Bound":
            return str(condition.get("reason", ""))
    return ""


def build_plan(
    pools: Iterable[JSON],
    claims: Iterable[JSON],
    namespaces: Iterable[JSON],
    *,
    bind: bool = True,
    quotas: Iterable[JSON] = (),
) -> Plan:
    """Bindings, verdicts and wanted quotas for every pool and claim; with ``bind=False`` only what the
    snapshot needs (committed bindings and selected namespaces), for the publish loop. ``quotas`` (the
    provisioned ResourceQuotas, from the informer) give bound claims their ``used``."""
    namespace_list = list(namespaces)
    by_key = {c.key: c for c in map(Claim.read, claims)}
    by_uid = {c.uid: c for c in by_key.values()}
    verdicts: dict[str, Verdict] = {}
    plans: dict[str, PoolPlan] = {}
    bound_uids: set[str] = set()
    for raw in sorted(pools, key=lambda p: str(p["metadata"]["name"])):
        meta = raw["metadata"]
        spec, problems = _read_spec(raw)
        committed = {
            uid: record
            for uid, record in read_records(raw).items()
            if uid in by_uid and not by_uid[uid].deleting and by_uid[uid].key == f"{record.namespace}/{record.name}"
        }
        bound_uids |= committed.keys()
        plans[str(meta["name"])] = PoolPlan(
            raw=raw,
            name=str(meta["name"]),
            uid=str(meta.get("uid", "")),
            spec=spec,
            problems=problems,
            namespaces=_selected(spec, namespace_list),
            committed=committed,
            records=dict(committed),
            deleting=bool(meta.get("deletionTimestamp")),
        )
    waiting: dict[str, list[Claim]] = {}
    for claim in sorted(by_key.values(), key=lambda c: c.order):
        if claim.uid in bound_uids or claim.deleting:
            continue
        pool = plans.get(claim.pool)
        if claim.problems:
            verdicts[claim.key] = Verdict(INVALID_SPEC, "; ".join(claim.problems))
        elif pool is None:
            previous = _previous_reason(claim)
            if previous == POOL_DELETED:
                verdicts[claim.key] = Verdict(POOL_DELETED, f"pool {claim.pool} was deleted; the claim was released")
            else:
                verdicts[claim.key] = Verdict(POOL_NOT_FOUND, f"pool {claim.pool} does not exist")
        elif pool.deleting:
            verdicts[claim.key] = Verdict(POOL_DELETING, f"pool {pool.name} is being deleted")
        elif pool.spec is None or pool.problems:
            verdicts[claim.key] = Verdict(POOL_INVALID, f"pool {pool.name} is invalid: {'; '.join(pool.problems)}")
        elif claim.namespace not in pool.namespaces:
            verdicts[claim.key] = Verdict(
                NAMESPACE_NOT_SELECTED, f"pool {pool.name} does not select namespace {claim.namespace}"
            )
        elif missing := sorted(set(claim.request) - set(pool.hard)):
            verdicts[claim.key] = Verdict(
                RESOURCE_NOT_OFFERED, f"pool {pool.name} does not offer {', '.join(missing)} (spec.quota.hard)"
            )
        else:
            waiting.setdefault(pool.name, []).append(claim)
    if not bind:
        return Plan(pools=plans, verdicts=verdicts, claims=by_key)
    terminating = {
        str(ns["metadata"]["name"]) for ns in namespace_list if (ns.get("metadata") or {}).get("deletionTimestamp")
    }
    tenant_of = {
        str(ns["metadata"]["name"]): str(((ns.get("metadata") or {}).get("labels") or {}).get(TENANT_LABEL, ""))
        for ns in namespace_list
    }
    live = {f"{(q.get('metadata') or {}).get('namespace')}/{(q.get('metadata') or {}).get('name')}": q for q in quotas}
    for pool in plans.values():
        _bind(pool, by_uid, waiting.get(pool.name, []), verdicts, tenant_of)
        wanted_quotas(pool, terminating)
        attribute_usage(pool, by_uid, verdicts, live)
    return Plan(pools=plans, verdicts=verdicts, claims=by_key)


def _bind(
    pool: PoolPlan,
    by_uid: Mapping[str, Claim],
    waiting: list[Claim],
    verdicts: dict[str, Verdict],
    tenant_of: Mapping[str, str],
) -> None:
    """Resize bound claims, then bind waiting ones in order while they fit (and the queue allows).
    ``tenant_of`` (namespace -> tenant label) keeps a claim's status to its own tenant's names."""
    hard = pool.hard
    if pool.spec is None or pool.problems or pool.deleting:
        _bound_verdicts(pool, by_uid, verdicts)
        return
    for uid, record in sorted(pool.committed.items(), key=lambda item: by_uid[item[0]].order):
        claim = by_uid[uid]
        if claim.problems or claim.request == record.claims:
            continue
        others = [r for u, r in pool.records.items() if u != uid]
        room = max0({k: v for k, v in sub_maps(hard, pool.claimed(others)).items() if k in hard})
        if not set(claim.request) - set(hard) and not exceeded(claim.request, room):
            pool.records[uid] = Record(record.namespace, record.name, uid, dict(claim.request))
    blocked: dict[str, str] = {}
    short: dict[str, Quantity] = {}
    available = pool.available
    for claim in waiting:
        holders = sorted({blocked[key] for key in claim.request if key in blocked})
        if holders:
            lacking = sorted(key for key in claim.request if key in blocked)
            verdicts[claim.key] = Verdict(
                QUEUE_EXHAUSTED,
                f"queued behind {_holders(claim, holders, tenant_of)} for {', '.join(lacking)} "
                f"(pool {pool.name} serves claims in order, config.orderedQueue)",
                pool=pool.name,
            )
        elif not (lacking := exceeded(claim.request, available)):
            pool.records[claim.uid] = Record(claim.namespace, claim.name, claim.uid, dict(claim.request))
            available = {key: value - claim.request.get(key, Quantity(0)) for key, value in available.items()}
            continue
        else:
            verdicts[claim.key] = Verdict(
                POOL_EXHAUSTED,
                f"pool {pool.name} cannot fit the claim: {_missing(claim.request, available)}",
                pool=pool.name,
            )
            if pool.spec is not None and pool.spec.config.ordered_queue:
                for key in claim.request:
                    blocked.setdefault(key, claim.key)
        for key in lacking:
            short[key] = short.get(key, Quantity(0)) + claim.request[key]
    pool.exhaustions = {key: (available.get(key, Quantity(0)), wanted) for key, wanted in sorted(short.items())}
    _bound_verdicts(pool, by_uid, verdicts)


def _holders(claim: Claim, holders: list[str], tenant_of: Mapping[str, str]) -> str:
    """The claims ``claim`` waits behind, as its status may say them: a claim's status is readable by everyone
    with access to its namespace, so it names only claims of the same namespace or of the same tenant, and
    counts the others (a pool shared between tenants must not tell one tenant the namespaces and claim names
    of another)."""
    tenant = tenant_of.get(claim.namespace, "")
    named: list[str] = []
    others = 0
    for key in holders:
        namespace = key.partition("/")[0]
        if namespace == claim.namespace or (tenant and tenant_of.get(namespace, "") == tenant):
            named.append(key)
        else:
            others += 1
    if others:
        where = "your tenant" if tenant else "this namespace"
        named.append(f"1 claim outside {where}" if others == 1 else f"{others} claims outside {where}")
    return ", ".join(named)


def _bound_verdicts(pool: PoolPlan, by_uid: Mapping[str, Claim], verdicts: dict[str, Verdict]) -> None:
    hard = pool.hard
    for uid, record in pool.records.items():
        claim = by_uid[uid]
        if record.claims == claim.request or claim.problems:
            verdicts[claim.key] = Verdict(
                BOUND,
                f"bound to pool {pool.name}: {', '.join(f'{k}={v}' for k, v in fmt(record.claims).items())}",
                pool=pool.name,
                pool_uid=pool.uid,
                allocation=record.claims,
            )
        else:
            others = [r for u, r in pool.records.items() if u != uid]
            room = max0({k: v for k, v in sub_maps(hard, pool.claimed(others)).items() if k in hard})
            verdicts[claim.key] = Verdict(
                RESIZE_PENDING,
                f"bound to pool {pool.name} for {fmt(record.claims)}; the new amounts wait for room: "
                f"{_missing(claim.request, room) or 'resource not offered by the pool'}",
                pool=pool.name,
                pool_uid=pool.uid,
                allocation=record.claims,
            )


def snapshot(plan: Plan, quotas: Iterable[JSON]) -> PoolsSnapshot:
    """What admission decides from: committed bindings only (never the ones this pass has yet to write)."""
    by_pool: dict[str, dict[str, NamespaceQuota]] = {}
    names = {pool.uid: pool.name for pool in plan.pools.values()}
    for quota in quotas:
        meta = quota.get("metadata") or {}
        pool_name = names.get(owning_pool_uid(quota))
        if pool_name is None or meta.get("name") != quota_name(pool_name):
            continue
        status = quota.get("status") or {}
        hard = status.get("hard") or (quota.get("spec") or {}).get("hard") or {}
        by_pool.setdefault(pool_name, {})[str(meta.get("namespace"))] = NamespaceQuota(
            hard={str(k): str(v) for k, v in hard.items()},
            used={str(k): str(v) for k, v in (status.get("used") or {}).items()},
        )
    views: list[PoolView] = []
    bound: list[BoundClaim] = []
    for pool in plan.pools.values():
        hard = pool.hard
        claimed = pool.claimed(pool.committed.values())
        views.append(
            PoolView(
                name=pool.name,
                uid=pool.uid,
                namespaces=pool.namespaces,
                hard=fmt(hard),
                claimed=fmt(claimed),
                available=fmt(max0({k: v for k, v in sub_maps(hard, claimed).items() if k in hard})),
                quotas=by_pool.get(pool.name, {}),
                deleting=pool.deleting,
            )
        )
        bound += [
            BoundClaim(namespace=r.namespace, name=r.name, uid=r.uid, pool=pool.name, claims=fmt(r.claims))
            for r in pool.committed.values()
        ]
    bound.sort(key=lambda b: (b.namespace, b.name))
    return PoolsSnapshot(pools=views, bound=bound)
