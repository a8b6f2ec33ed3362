"""Snapshots of the controllers beyond config and tenants, compiled offline with those controllers' own code.

* **ResourcePools** (enclave-pools): the directory's ResourcePools, ResourcePoolClaims and Namespaces go
  through :func:`enclave_pools.plan.build_plan` as the controller's reconcile runs it, which binds the claims
  that fit (oldest first, as in the cluster); the bindings are written into each pool's status with
  :func:`enclave_pools.status.pool_status`, exactly what the controller stores, and the publish pass
  (``build_plan(bind=False)`` then :func:`enclave_pools.plan.snapshot`) compiles the snapshot from that, so
  only committed bindings count, as admission sees them. The ResourceQuotas the pools provision are built
  with :func:`enclave_pools.plan.quota_body`; their ``status.used`` (what the namespace's objects use, which
  kube-apiserver reports in a cluster) is the usage the test manifest gives (:class:`Usage`), zero otherwise.

The usage model: what objects in a cluster consume is not computed from objects offline; a test manifest
states it (``usage:`` at the top of an ``EnclaveTest`` or in one case, the case's entries winning).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from enclave_cli.documents import Document
from enclave_core.snapshots.pools import PoolsSnapshot

JSON = dict[str, Any]
POOL_KINDS = ("ResourcePool", "ResourcePoolClaim")
USAGE_KEYS = ("pools",)


@dataclass(frozen=True)
class Usage:
    """What a test manifest says objects use in the cluster (the part offline runs cannot count)."""

    pools: Mapping[str, Mapping[str, Mapping[str, str]]] = field(default_factory=dict)
    """Pool -> namespace -> resource -> quantity: ``status.used`` of the ResourceQuota the pool provisions
    in that namespace."""

    def merged(self, other: Usage) -> Usage:
        pools = {name: dict(per) for name, per in self.pools.items()}
        for name, per in other.pools.items():
            pools.setdefault(name, {}).update(per)
        return Usage(pools=pools)

    @property
    def key(self) -> str:
        """A stable text of the whole usage (what compiled snapshots are cached by)."""
        return json.dumps({"pools": self.pools}, sort_keys=True)


NO_USAGE = Usage()


def parse_usage(document: Document, raw: Any, loc: tuple[str | int, ...]) -> Usage:
    if raw is None:
        return NO_USAGE
    if not isinstance(raw, dict):
        raise document.error("usage must be a mapping", loc)
    unknown = sorted(set(raw) - set(USAGE_KEYS))
    if unknown:
        raise document.error(
            f"unknown field {unknown[0]!r} in usage (known: {', '.join(USAGE_KEYS)})", (*loc, unknown[0])
        )
    pools = raw.get("pools") or {}
    ok = isinstance(pools, dict) and all(
        isinstance(per, dict)
        and all(isinstance(amounts, dict) and all(isinstance(k, str) for k in amounts) for amounts in per.values())
        for per in pools.values()
    )
    if not ok:
        raise document.error("usage.pools maps pool -> namespace -> {resource: quantity}", (*loc, "pools"))
    return Usage(
        pools={
            str(pool): {str(ns): {str(k): str(v) for k, v in amounts.items()} for ns, amounts in per.items()}
            for pool, per in pools.items()
        }
    )


def _with_uid(raw: JSON, uid: str) -> JSON:
    meta = dict(raw.get("metadata") or {})
    meta.setdefault("uid", uid)
    return {**raw, "metadata": meta}


@dataclass
class PoolObjects:
    """The directory's pools and claims, with the stand-in uids objects in files lack."""

    pools: list[JSON]
    claims: list[JSON]
    namespaces: list[JSON]

    @classmethod
    def of(cls, pools: list[Document], claims: list[Document], namespaces: list[Document]) -> PoolObjects:
        return cls(
            [_with_uid(d.data, f"offline-pool-{d.name}") for d in pools],
            [
                _with_uid(d.data, f"offline-claim-{(d.data.get('metadata') or {}).get('namespace', '')}-{d.name}")
                for d in claims
            ],
            [d.data for d in namespaces],
        )


def pools_snapshot(objects: PoolObjects, usage: Usage) -> PoolsSnapshot:
    """The ResourcePools snapshot enclave-pools would publish once it has bound what fits (see the module)."""
    from enclave_pools import plan as pools
    from enclave_pools.status import pool_status

    now = datetime.now(UTC)
    bound = pools.build_plan(objects.pools, objects.claims, objects.namespaces, bind=True)
    written = [
        {**raw, "status": pool_status(bound.pools[str(raw["metadata"]["name"])], problems=[], now=now)}
        for raw in objects.pools
    ]
    published = pools.build_plan(written, objects.claims, objects.namespaces, bind=False)
    quotas = []
    for pool in bound.pools.values():
        for namespace in pool.quotas:
            body = pools.quota_body(pool, namespace)
            used = usage.pools.get(pool.name, {}).get(namespace, {})
            body["status"] = {"hard": body["spec"]["hard"], "used": dict(used)}
            quotas.append(body)
    return pools.snapshot(published, quotas)
