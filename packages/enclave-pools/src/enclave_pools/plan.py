"""The pools plan: from the watch caches to every binding, status and ResourceQuota the cluster should hold.

Pure: no I/O and no clock (the controller passes ``now``), so every rule below is a unit test away.

**The ledger.** A pool's ``status.claims`` is the record of which claims it has bound and for how much; a
claim's ``status.pool`` only mirrors it. The controller commits new bindings by replacing the pool's status
*with the resourceVersion it read*; kube-apiserver refuses the write with 409 if anything changed the pool in
between (docs/architecture.md argues why that never over-allocates). The plan therefore starts from the
committed records, drops those whose claim is gone, and binds waiting claims into what is left.

**Order.** Waiting claims are served oldest first: ``creationTimestamp``, then namespace, then name (the
timestamp has one-second resolution). A claim binds when every resource it asks for fits in what the pool
has left. With ``config.orderedQueue`` a claim that does not fit holds its resources: a later claim asking for
any of them waits behind it (``QueueExhausted``) even if it would fit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Final

from pydantic import ValidationError

from enclave_core import GROUP_VERSION
from enclave_core.api.names import MANAGED_BY, POOL_LABEL, POOLS_MANAGER, TENANT_LABEL
from enclave_core.api.pools import ResourcePoolSpec
from enclave_core.kube.holds import holds, same
from enclave_core.quantity import Quantity, add_maps, exceeded, max0, parse_map, sub_maps
from enclave_core.resourcenames import resource_list_problems
from enclave_core.resourcequota import resource_quota_problems
from enclave_core.selectors import matches_any
from enclave_core.snapshots.pools import BoundClaim, NamespaceQuota, PoolsSnapshot, PoolView

JSON = dict[str, Any]
Amounts = dict[str, Quantity]


# Claim Bound reasons.
BOUND: Final = "Bound"
POOL_EXHAUSTED: Final = "PoolExhausted"
QUEUE_EXHAUSTED: Final = "QueueExhausted"
POOL_NOT_FOUND: Final = "PoolNotFound"
POOL_DELETED: Final = "PoolDeleted"
POOL_DELETING: Final = "PoolDeleting"
POOL_INVALID: Final = "PoolInvalid"
NAMESPACE_NOT_SELECTED: Final = "NamespaceNotSelected"
RESOURCE_NOT_OFFERED: Final = "ResourceNotOffered"
INVALID_SPEC: Final = "InvalidSpec"
RESIZE_PENDING: Final = "ResizePending"


def fmt(amounts: Mapping[str, Quantity]) -> dict[str, str]:
    """Canonical strings, sorted by resource name (statuses compare equal across passes)."""
    return {key: str(amounts[key]) for key in sorted(amounts)}


def quota_name(pool: str) -> str:
    """Name of the ResourceQuota a pool provisions in each namespace (hashed when it would be too long)."""
    name = f"enclave-pool-{pool}"
    if len(name) <= 253:
        return name
    return f"enclave-pool-{hashlib.sha256(pool.encode()).hexdigest()[:16]}"


def pool_label(pool: str) -> str:
    """Label value naming the pool (hashed past the 63 characters a label value allows)."""
    return pool if len(pool) <= 63 else hashlib.sha256(pool.encode()).hexdigest()[:40]


@dataclass(frozen=True)
class Claim:
    """One ResourcePoolClaim as the plan reads it."""

    raw: JSON
    key: str
    namespace: str
    name: str
    uid: str
    pool: str
    request: Amounts
    problems: tuple[str, ...]
    order: tuple[str, str, str]
    deleting: bool

    @classmethod
    def read(cls, raw: JSON) -> Claim:
        meta = raw.get("metadata") or {}
        spec = raw.get("spec") or {}
        namespace, name = str(meta.get("namespace", "")), str(meta.get("name", ""))
        request, problems = _parse_claim(spec, str(meta.get("uid", "")), meta.get("resourceVersion"))
        return cls(
            raw=raw,
            key=f"{namespace}/{name}",
            namespace=namespace,
            name=name,
            uid=str(meta.get("uid", "")),
            pool=str(spec.get("pool") or ""),
            request=request,
            problems=problems,
            order=(str(meta.get("creationTimestamp", "")), namespace, name),
            deleting=bool(meta.get("deletionTimestamp")),
        )


_PARSED: dict[tuple[str, str], tuple[Amounts, tuple[str, ...]]] = {}
"""Parsed ``spec.claim`` by (uid, resourceVersion): a pass re-reads every claim, but a claim's amounts are
parsed once per version of the object instead of once per pass (quantity parsing dominated a pass)."""
_RECORDS: dict[tuple[str, str], dict[str, Record]] = {}
"""Parsed ``status.claims`` by (pool uid, resourceVersion), for the same reason."""
_CACHE_LIMIT = 50_000


def _remember(cache: dict[tuple[str, str], Any], key: tuple[str, str], value: Any) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.clear()  # old versions are never asked for again; starting over is cheaper than tracking them
    cache[key] = value


def _parse_claim(spec: JSON, uid: str, version: object) -> tuple[Amounts, tuple[str, ...]]:
    key = (uid, str(version)) if version else None
    if key is not None and key in _PARSED:
        return _PARSED[key]
    raw_claim = spec.get("claim")
    wanted: dict[str, Any] = raw_claim if isinstance(raw_claim, dict) else {}
    problems = resource_list_problems(wanted, "spec.claim")
    if not wanted:
        problems.append("spec.claim: must name at least one resource")
    parsed = ({} if problems else parse_map(wanted)), tuple(problems)
    if key is not None:
        _remember(_PARSED, key, parsed)
    return parsed


@dataclass(frozen=True)
class Record:
    """A committed binding: one entry of a pool's ``status.claims``."""

    namespace: str
    name: str
    uid: str
    claims: Amounts

    def to_status(self) -> JSON:
        return {"name": self.name, "namespace": self.namespace, "uid": self.uid, "claims": fmt(self.claims)}


@dataclass(frozen=True)
class Verdict:
    """What a claim's status should say."""

    reason: str
    message: str
    pool: str = ""
    pool_uid: str = ""
    allocation: Amounts | None = None
    """The amounts bound; None when the claim is not bound."""
    used: Amounts | None = None
    """The part of ``allocation`` the namespace uses (see :func:`claim_usage`); None when not bound or not yet
    counted by kube-controller-manager."""

    @property
    def bound(self) -> bool:
        return self.allocation is not None


@dataclass
class PoolPlan:
    raw: JSON
    name: str
    uid: str
    spec: ResourcePoolSpec | None
    problems: list[str]
    namespaces: list[str]
    committed: dict[str, Record]
    """uid -> binding as the pool's status holds it now (only claims that still exist)."""
    records: dict[str, Record]
    """uid -> binding after this pass (committed plus new bindings and resizes)."""
    deleting: bool
    exhaustions: dict[str, tuple[Quantity, Quantity]] = field(default_factory=dict)
    """Resource -> (available, requested by waiting claims), for resources some waiting claim lacks."""
    quotas: dict[str, JSON] = field(default_factory=dict)
    """Namespace -> the ResourceQuota ``spec`` wanted there."""

    @property
    def hard(self) -> Amounts:
        if self.spec is None or not self.spec.quota.hard:
            return {}
        return parse_map(self.spec.quota.hard)

    def claimed(self, records: Iterable[Record] | None = None) -> Amounts:
        return add_maps(*(r.claims for r in (self.records.values() if records is None else records)))

    @property
    def available(self) -> Amounts:
        hard = self.hard
        return max0({key: value for key, value in sub_maps(hard, self.claimed()).items() if key in hard})


@dataclass
class Plan:
    pools: dict[str, PoolPlan]
    verdicts: dict[str, Verdict]
    """Claim key (``namespace/name``) -> status."""
    claims: dict[str, Claim]


def read_records(raw: JSON) -> dict[str, Record]:
    """The bindings in a pool's ``status.claims``; an entry we cannot read is dropped (the pool's next status
    write no longer lists it, so a hand-edited entry never crashes a pass)."""
    meta = raw.get("metadata") or {}
    key = (str(meta.get("uid", "")), str(meta["resourceVersion"])) if meta.get("resourceVersion") else None
    if key is not None and key in _RECORDS:
        return dict(_RECORDS[key])
    records = _read_records(raw)
    if key is not None:
        _remember(_RECORDS, key, records)
    return dict(records)


def _read_records(raw: JSON) -> dict[str, Record]:
    records: dict[str, Record] = {}
    claims = (raw.get("status") or {}).get("claims") or {}
    if not isinstance(claims, dict):
        return records
    for namespace, entries in claims.items():
        for entry in entries if isinstance(entries, list) else []:
            try:
                record = Record(
                    namespace=str(entry.get("namespace") or namespace),
                    name=str(entry["name"]),
                    uid=str(entry["uid"]),
                    claims=parse_map(entry.get("claims") or {}),
                )
            except (KeyError, TypeError, ValueError, AttributeError):
                continue
            records[record.uid] = record
    return records


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
        _quotas(pool, terminating)
        _usage(pool, by_uid, verdicts, live)
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


def claim_usage(base: Amounts, used: Mapping[str, Any], claims: Iterable[tuple[str, Amounts]]) -> dict[str, Amounts]:
    """Who uses what in one namespace: ``used`` (the provisioned ResourceQuota's ``status.used``) is charged to
    the pool's per-namespace ``base`` (defaults) first, then to the namespace's bound claims in the order given
    (oldest first), each up to what it holds; so the claims' ``used`` add up to the namespace's usage beyond
    its defaults and none exceeds its allocation. Resources the quota does not report yet are left out (not
    guessed as 0). Returns claim uid -> used."""
    try:
        reported = parse_map(used)
    except ValueError:
        reported = {}
    left = max0(sub_maps(reported, {k: v for k, v in base.items() if k in reported}))
    out: dict[str, Amounts] = {}
    for uid, held in claims:
        mine: Amounts = {}
        for key, amount in held.items():
            if key not in left:
                continue
            take = min(max(amount, Quantity(0)), left[key])
            mine[key] = take
            left[key] = left[key] - take
        out[uid] = mine
    return out


def _usage(pool: PoolPlan, by_uid: Mapping[str, Claim], verdicts: dict[str, Verdict], live: Mapping[str, JSON]) -> None:
    """Give each bound claim of ``pool`` its ``used``, from the pool's ResourceQuota in the claim's namespace
    as the informer holds it (no API call). A quota that another owner holds, or that is not counted yet,
    gives no ``used``."""
    per_namespace: dict[str, list[Record]] = {}
    for record in pool.records.values():
        per_namespace.setdefault(record.namespace, []).append(record)
    for namespace, records in per_namespace.items():
        quota = live.get(f"{namespace}/{quota_name(pool.name)}")
        if quota is None or owning_pool_uid(quota) != pool.uid:
            continue
        reported = (quota.get("status") or {}).get("used") or {}
        if not reported:
            continue
        base = namespace_hard(pool, namespace, []) if pool.spec is not None else {}
        records.sort(key=lambda r: by_uid[r.uid].order)
        for uid, used in claim_usage(base, reported, [(r.uid, r.claims) for r in records]).items():
            key = by_uid[uid].key
            verdict = verdicts.get(key)
            if verdict is not None and verdict.bound and verdict.pool == pool.name:
                verdicts[key] = replace(verdict, used=used)


def namespace_hard(pool: PoolPlan, namespace: str, records: Iterable[Record] | None = None) -> Amounts:
    """``defaults`` (every offered resource at 0 first with ``defaultsZero``) plus the namespace's claims."""
    spec = pool.spec
    assert spec is not None
    base: Amounts = {}
    if spec.config.defaults_zero:
        base = {key: Quantity(0) for key in pool.hard}
    base.update(parse_map(spec.defaults or {}))
    if records is None:
        records = [r for r in pool.records.values() if r.namespace == namespace]
    return add_maps(base, *(r.claims for r in records))


def _quotas(pool: PoolPlan, terminating: set[str] | frozenset[str] = frozenset()) -> None:
    """The ResourceQuota spec for every selected namespace and every namespace still holding a bound claim,
    except terminating namespaces (kube-apiserver refuses new objects there; the namespace takes its quota
    with it)."""
    if pool.spec is None or pool.problems or pool.deleting:
        return
    per_namespace: dict[str, list[Record]] = {namespace: [] for namespace in pool.namespaces}
    for record in pool.records.values():
        per_namespace.setdefault(record.namespace, []).append(record)
    quota = pool.spec.quota
    for namespace in sorted(per_namespace.keys() - terminating):
        spec: JSON = {"hard": fmt(namespace_hard(pool, namespace, per_namespace[namespace]))}
        if quota.scopes:
            spec["scopes"] = list(quota.scopes)
        if quota.scope_selector is not None and quota.scope_selector.match_expressions:
            spec["scopeSelector"] = quota.scope_selector.to_k8s()
        pool.quotas[namespace] = spec


def quota_body(pool: PoolPlan, namespace: str) -> JSON:
    """The whole ResourceQuota object applied (server-side apply) into ``namespace``."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {
            "name": quota_name(pool.name),
            "namespace": namespace,
            "labels": {MANAGED_BY: POOLS_MANAGER, POOL_LABEL: pool_label(pool.name)},
            "ownerReferences": [
                {
                    "apiVersion": GROUP_VERSION,
                    "kind": "ResourcePool",
                    "name": pool.name,
                    "uid": pool.uid,
                    "controller": True,
                    "blockOwnerDeletion": False,
                }
            ],
        },
        "spec": pool.quotas[namespace],
    }


_QUOTA_FIELDS: Final = ("hard", "scopes", "scopeSelector")
"""What a provisioned ResourceQuota's spec holds, all of it the pool's: a key added by hand is drift."""


def quota_drifted(live: JSON | None, pool: PoolPlan, namespace: str) -> bool:
    """Whether the live ResourceQuota differs from the wanted one in anything we own."""
    if live is None:
        return True
    wanted = pool.quotas[namespace]
    spec = live.get("spec") or {}
    if not all(same(spec.get(key), wanted.get(key), quantities=key == "hard") for key in _QUOTA_FIELDS):
        return True
    meta = live.get("metadata") or {}
    labels = {MANAGED_BY: POOLS_MANAGER, POOL_LABEL: pool_label(pool.name)}
    owners = meta.get("ownerReferences") or []
    return not holds(meta.get("labels"), labels) or not any(ref.get("uid") == pool.uid for ref in owners)


def owning_pool_uid(quota: JSON) -> str:
    for ref in (quota.get("metadata") or {}).get("ownerReferences") or []:
        if ref.get("kind") == "ResourcePool":
            return str(ref.get("uid", ""))
    return ""


def stale_quotas(plan: Plan, quotas: Iterable[JSON]) -> list[JSON]:
    """Managed ResourceQuotas no live pool wants: their pool is gone, or no longer selects the namespace."""
    wanted: dict[str, set[tuple[str, str]]] = {}
    for pool in plan.pools.values():
        if pool.spec is None or pool.problems:
            # An invalid pool keeps what it provisioned: a typo must not drop every namespace's quota.
            wanted[pool.uid] = {("*", "*")}
            continue
        wanted[pool.uid] = {(ns, quota_name(pool.name)) for ns in pool.quotas}
    stale = []
    for quota in quotas:
        meta = quota.get("metadata") or {}
        keep = wanted.get(owning_pool_uid(quota))
        if keep is None:
            # Its pool is gone (or being finalised, which deletes its quotas itself).
            if not any(p.uid == owning_pool_uid(quota) for p in plan.pools.values()):
                stale.append(quota)
            continue
        if ("*", "*") in keep:
            continue
        if (meta.get("namespace"), meta.get("name")) not in keep:
            stale.append(quota)
    return stale


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
