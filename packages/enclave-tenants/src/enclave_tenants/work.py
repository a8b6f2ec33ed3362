"""What the write loop should look at next: dirty keys from the informers, and the order of a bounded batch.

The write loop is level-based: every write is decided by comparing the plan with the informer caches. What
this module tracks are *hints* about where that comparison can find something to do, so one change among
10,000 namespaces costs one namespace's comparison, not a pass over all of them, and a burst is written in
batches of ``batch_size`` namespaces, each followed by the statuses it affects, instead of one pass whose
statuses come only at its end. Losing a hint is never wrong for long: a resync (and every leadership gain or
configuration change) marks everything dirty again.

Order inside a batch: namespaces that miss something a user waits for (their RoleBindings, their RuleStatus,
the tenant label or owner reference) before namespaces whose objects merely drifted or whose status needs a
refresh, and the oldest first within each rank so a steady stream of new namespaces cannot starve an old one.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

JSON = dict[str, Any]

MISSING = 0
"""Rank of a namespace that lacks an object or label it should have."""
DRIFTED = 1
"""Rank of a namespace whose objects exist but differ (an owner change, a status to refresh, a release)."""
CHECK = 2
"""Rank of a namespace whose objects match but whose rules are to be compiled and compared with its RuleStatus."""


def spec_signature(obj: JSON | None) -> tuple[Any, ...]:
    """What of a Tenant or TenantOwner the plan reads outside ``status``: a change of anything else (our own
    status writes coming back as watch events) needs no new plan and dirties none of its namespaces."""
    if obj is None:
        return ()
    meta = obj.get("metadata") or {}
    labels = meta.get("labels") or {}
    return (
        meta.get("uid"),
        meta.get("generation"),
        meta.get("deletionTimestamp"),
        tuple(sorted(labels.items())),
        repr(obj.get("spec")),
    )


@dataclass
class Dirty:
    """Keys changed since the write loop last looked at them (hints, never the truth)."""

    everything: bool = True
    """Look at every namespace, tenant and owner (start, resync, leadership gain, configuration change)."""
    namespaces: set[str] = field(default_factory=set)
    tenants: set[str] = field(default_factory=set)
    """Tenants whose spec changed: every namespace of theirs is looked at, and their status."""
    statuses: set[str] = field(default_factory=set)
    """Tenants whose status alone is to be compared again (a namespace joined or left, a status write)."""
    rules: set[str] = field(default_factory=set)
    """Namespaces whose compiled rules are to be compared with their RuleStatus (not needed when only a
    RoleBinding changed: that costs a compile per namespace)."""
    owners: bool = True
    """TenantOwner statuses are to be compared again."""
    accounts: set[str] = field(default_factory=set)
    """Namespaces whose promoted service accounts changed: their tenant's owners may have."""
    queued: dict[str, tuple[int, str]] = field(default_factory=dict)
    """Namespaces ranked and waiting for a batch: name -> (rank, creationTimestamp). Ranked once when they
    become dirty, not again every round (at 10,000 namespaces re-ranking a backlog per batch was quadratic)."""

    def __bool__(self) -> bool:
        return bool(
            self.everything
            or self.namespaces
            or self.tenants
            or self.statuses
            or self.owners
            or self.accounts
            or self.queued
        )

    def mark_everything(self) -> None:
        self.everything = True
        self.owners = True

    def expand(
        self,
        namespace_tenant: Mapping[str, str],
        members: Mapping[str, Iterable[str]],
        every_namespace: Iterable[str],
        every_tenant: Iterable[str],
    ) -> None:
        """Turn tenant-level and everything hints into namespace keys against the current plan
        (``namespace_tenant``: namespace -> tenant, ``members``: tenant -> namespaces). A namespace that left
        a tenant is not found here: :func:`moved` dirties it when the plan changes."""
        if self.everything:
            self.everything = False
            self.namespaces.update(every_namespace)
            self.rules.update(self.namespaces)
            self.tenants.update(every_tenant)
            self.owners = True
        for namespace in self.accounts:
            tenant = namespace_tenant.get(namespace)
            if tenant is not None:
                self.tenants.add(tenant)
        self.accounts.clear()
        for tenant in self.tenants:
            names = members.get(tenant, ())
            self.namespaces.update(names)
            self.rules.update(names)
        self.statuses |= self.tenants
        self.tenants.clear()

    def moved(self, before: Mapping[str, str], after: Mapping[str, str]) -> None:
        """A new plan: namespaces that joined, left or changed tenant are dirty, and both tenants' statuses."""
        if before is after or before == after:
            return
        for namespace in before.keys() | after.keys():
            old, new = before.get(namespace), after.get(namespace)
            if old == new:
                continue
            self.namespaces.add(namespace)
            self.rules.add(namespace)
            self.statuses.update(t for t in (old, new) if t is not None)

    def next_batch(self, size: int) -> list[str]:
        """Take the ``size`` queued namespaces to write next: lowest rank first, then oldest, then by name
        (stable across replicas and restarts). A change from here on dirties them again."""
        chosen = [name for _, name in heapq.nsmallest(size, ((rank, name) for name, rank in self.queued.items()))]
        for name in chosen:
            del self.queued[name]
        return chosen

    def settle(self) -> None:
        """Forget rule checks of namespaces no longer dirty or queued (they are only ever asked about those)."""
        if self.rules:
            self.rules.intersection_update(self.namespaces | self.queued.keys())
