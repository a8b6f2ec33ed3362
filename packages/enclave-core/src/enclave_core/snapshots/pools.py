"""The ResourcePools snapshot: what admission needs to decide claim and pool requests from memory.

Published by enclave-pools (PoolService, kind ``ResourcePools``), consumed by every admission replica. It is
compiled from the pools' committed bindings (``status.claims``, the pool's own ledger), the namespaces each
pool selects and the usage kube-apiserver reports on every ResourceQuota the pools provision. Quantities
travel as canonical strings; :mod:`enclave_core.quantity` parses them where a decision does arithmetic.
"""

from __future__ import annotations

from functools import cached_property
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from enclave_core.snapshots.payload import SnapshotPayload

POOLS_KIND: Final = "ResourcePools"


class NamespaceQuota(BaseModel):
    """The ResourceQuota a pool provisions in one namespace, as kube-apiserver last reported it."""

    model_config = ConfigDict(frozen=True)

    hard: dict[str, str] = Field(default_factory=dict)
    """``status.hard`` (what the quota enforces now), falling back to ``spec.hard`` before it is reported."""
    used: dict[str, str] = Field(default_factory=dict)
    """``status.used``: what the namespace's objects use against the quota."""


class BoundClaim(BaseModel):
    """A claim a pool has bound (from the pool's ``status.claims``)."""

    model_config = ConfigDict(frozen=True)

    namespace: str
    name: str
    uid: str
    pool: str
    claims: dict[str, str] = Field(default_factory=dict)
    """The amounts bound, which may lag ``spec.claim`` while a resize waits for room."""


class PoolView(BaseModel):
    """One pool as admission sees it."""

    model_config = ConfigDict(frozen=True)

    name: str
    uid: str
    namespaces: list[str] = Field(default_factory=list)
    """Sorted names of the namespaces the pool's selectors match."""
    hard: dict[str, str] = Field(default_factory=dict)
    """``spec.quota.hard``: the resources the pool offers."""
    claimed: dict[str, str] = Field(default_factory=dict)
    """Sum of the bound claims per resource."""
    available: dict[str, str] = Field(default_factory=dict)
    """``max(hard - claimed, 0)`` per offered resource."""
    quotas: dict[str, NamespaceQuota] = Field(default_factory=dict)
    """Namespace -> the ResourceQuota this pool provisions there."""
    deleting: bool = False
    """The pool has a deletionTimestamp: it binds nothing new."""

    @cached_property
    def namespace_set(self) -> frozenset[str]:
        return frozenset(self.namespaces)


class PoolsSnapshot(SnapshotPayload):
    """Every pool and every bound claim, indexed for the lookups admission makes per request."""

    model_config = ConfigDict(frozen=True)

    pools: list[PoolView] = Field(default_factory=list)
    bound: list[BoundClaim] = Field(default_factory=list)

    @cached_property
    def by_name(self) -> dict[str, PoolView]:
        return {pool.name: pool for pool in self.pools}

    @cached_property
    def bound_by_key(self) -> dict[str, BoundClaim]:
        """``<namespace>/<name>`` -> the binding of that claim."""
        return {f"{claim.namespace}/{claim.name}": claim for claim in self.bound}

    @cached_property
    def selecting(self) -> dict[str, list[PoolView]]:
        """Namespace -> the pools that select it, sorted by name."""
        index: dict[str, list[PoolView]] = {}
        for pool in sorted(self.pools, key=lambda p: p.name):
            for namespace in pool.namespaces:
                index.setdefault(namespace, []).append(pool)
        return index
