"""The QuotaTargets snapshot: every custom quota compiled for admission (enclave-quotas' ``QuotaService``).

Admission needs, per quota: which objects count (resolved group/version/kind/resource, scope selectors,
source selectors, namespaces), how much each counts (op, path or cel), the limit and the ledger to reserve
on. Source resolution (discovery, ``*`` forms) and namespace selection are done by the controller, so
admission never talks to discovery and matches a request with a dictionary lookup by (group, resource).
"""

from __future__ import annotations

from functools import cached_property
from typing import Final, Literal

from pydantic import BaseModel, ConfigDict, Field

from enclave_core.api.quotas import SourceSelector
from enclave_core.selectors import LabelSelector
from enclave_core.snapshots.payload import SnapshotPayload

QUOTAS_KIND: Final = "QuotaTargets"


class TargetSource(BaseModel):
    """One resolved source of one quota."""

    model_config = ConfigDict(frozen=True)

    group: str
    version: str
    kind: str
    resource: str
    """Plural, as admission requests name it."""
    namespaced: bool = True
    op: Literal["add", "sub", "count"] = "add"
    path: str | None = None
    cel: str | None = None
    selectors: list[SourceSelector] | None = None


class QuotaEntry(BaseModel):
    """One CustomQuota or GlobalCustomQuota."""

    model_config = ConfigDict(frozen=True)

    kind: Literal["CustomQuota", "GlobalCustomQuota"]
    name: str
    namespace: str | None = None
    uid: str = ""
    ledger: str
    """Name of its QuantityLedger in Enclave's namespace."""
    limit: str
    namespaces: list[str] | None = None
    """Namespaces whose objects count: the quota's own for a CustomQuota, the selected ones for a global
    quota (sorted)."""
    scope_selectors: list[LabelSelector] | None = None
    sources: list[TargetSource] = Field(default_factory=list)

    @property
    def display(self) -> str:
        return f"{self.kind} {self.namespace}/{self.name}" if self.namespace else f"{self.kind} {self.name}"


class QuotaTargets(SnapshotPayload):
    """Every custom quota admission enforces."""

    model_config = ConfigDict(frozen=True)

    quotas: list[QuotaEntry] = Field(default_factory=list)

    @cached_property
    def resources(self) -> list[tuple[str, str, bool]]:
        """(group, resource, namespaced) of every source, sorted: what the quota webhook must see."""
        return sorted({(s.group, s.resource, s.namespaced) for q in self.quotas for s in q.sources})
