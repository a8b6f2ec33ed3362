"""The GlobalResourceQuotas snapshot: what admission needs to reserve shared quota from memory.

Published by enclave-globalquotas (kind ``GlobalResourceQuotas``), consumed by every admission replica. For each
GlobalResourceQuota it names the namespaces that share it, the shared limits and scopes (so admission computes
what a new object would use), the usage the namespaces' ResourceQuotas report, and the QuantityLedger where
concurrent reservations are serialised. ``by_namespace`` is indexed once per snapshot: a request asks "which
shared quotas cover this namespace" and gets a dictionary lookup.
"""

from __future__ import annotations

from functools import cached_property
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from enclave_core.snapshots.payload import SnapshotPayload

GLOBALQUOTAS_KIND: Final = "GlobalResourceQuotas"


class ScopeRequirement(BaseModel):
    """One scopeSelector requirement, flattened."""

    model_config = ConfigDict(frozen=True)

    scope_name: str
    operator: str
    values: list[str] = Field(default_factory=list)


class GlobalQuotaView(BaseModel):
    """One GlobalResourceQuota as admission sees it."""

    model_config = ConfigDict(frozen=True)

    name: str
    uid: str
    generation: int = 0
    ledger_namespace: str
    ledger_name: str
    hard: dict[str, str] = Field(default_factory=dict)
    """Shared limits, canonical quantity strings."""
    scopes: list[str] = Field(default_factory=list)
    scope_selector: list[ScopeRequirement] = Field(default_factory=list)
    namespaces: list[str] = Field(default_factory=list)
    """Sorted names of the selected namespaces."""
    used: dict[str, str] = Field(default_factory=dict)
    """Usage summed over the namespaces' ResourceQuota status."""
    initialized: bool = False
    """Every selected namespace's ResourceQuota has reported usage."""
    valid: bool = True
    """False when the spec is refused (the controller leaves its ResourceQuotas as they were)."""


class GlobalQuotasSnapshot(SnapshotPayload):
    """Every GlobalResourceQuota, indexed by namespace."""

    model_config = ConfigDict(frozen=True)

    quotas: list[GlobalQuotaView] = Field(default_factory=list)

    @cached_property
    def by_name(self) -> dict[str, GlobalQuotaView]:
        return {quota.name: quota for quota in self.quotas}

    @cached_property
    def by_namespace(self) -> dict[str, list[GlobalQuotaView]]:
        """Namespace -> the quotas that select it, sorted by name."""
        index: dict[str, list[GlobalQuotaView]] = {}
        for quota in sorted(self.quotas, key=lambda q: q.name):
            for namespace in quota.namespaces:
                index.setdefault(namespace, []).append(quota)
        return index
