"""The ResourceQuota a pool provisions in each namespace: its name and labels, the ``hard`` it should hold
(defaults plus the namespace's claims), whether the live one drifted, which are stale, and who uses what of it
(each bound claim's ``used``). Pure, like the plan that calls it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from dataclasses import replace
from typing import Any, Final

from enclave_core import GROUP_VERSION
from enclave_core.api.names import MANAGED_BY, POOL_LABEL, POOLS_MANAGER
from enclave_core.kube.holds import holds, same
from enclave_core.quantity import Quantity, add_maps, max0, parse_map, sub_maps
from enclave_pools.model import JSON, Amounts, Claim, Plan, PoolPlan, Record, Verdict, fmt


def quota_name(pool: str) -> str:
    """Name of the ResourceQuota a pool provisions in each namespace (hashed when it would be too long)."""
    name = f"enclave-pool-{pool}"
    if len(name) <= 253:
        return name
    return f"enclave-pool-{hashlib.sha256(pool.encode()).hexdigest()[:16]}"


def pool_label(pool: str) -> str:
    """Label value naming the pool (hashed past the 63 characters a label value allows)."""
    return pool if len(pool) <= 63 else hashlib.sha256(pool.encode()).hexdigest()[:40]


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


def attribute_usage(
    pool: PoolPlan, by_uid: Mapping[str, Claim], verdicts: dict[str, Verdict], live: Mapping[str, JSON]
) -> None:
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


def wanted_quotas(pool: PoolPlan, terminating: set[str] | frozenset[str] = frozenset()) -> None:
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
