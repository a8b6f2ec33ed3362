"""The Tenancy snapshot: what admission needs to decide namespace requests from memory.

Published by enclave-tenants (TenantService, kind ``Tenancy``), consumed by every admission replica. It is a
compiled view, not a copy of the Tenant objects: owners are already resolved (spec owners, TenantOwners,
promoted service accounts), and lookups admission does on every request (which tenants does this user own,
which tenant owns this namespace) are indexed once when the snapshot arrives.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from typing import Final

from pydantic import BaseModel, ConfigDict, Field

from enclave_core.api.meta import Entity, ValueMatcher
from enclave_core.api.proxy import ProxyKind
from enclave_core.snapshots.payload import SnapshotPayload

TENANCY_KIND: Final = "Tenancy"
SERVICE_ACCOUNT_PREFIX: Final = "system:serviceaccount:"


class Forbidden(BaseModel):
    """Denied keys, exact or by regular expression."""

    model_config = ConfigDict(frozen=True)

    denied: list[str] = Field(default_factory=list)
    denied_regex: str | None = None


class TenantView(BaseModel):
    """One tenant as admission sees it."""

    model_config = ConfigDict(frozen=True)

    name: str
    uid: str
    owners: list[Entity] = Field(default_factory=list)
    """Effective owners: spec owners, matched TenantOwners and promoted service accounts."""
    promoted: list[Entity] = Field(default_factory=list)
    """The owners that are owners only as promoted service accounts (they may not promote others)."""
    namespaces: list[str] = Field(default_factory=list)
    """Sorted names of the tenant's namespaces (terminating ones included)."""
    namespace_quota: int | None = None
    """spec.namespaceOptions.quota: the most namespaces the tenant may have."""
    namespace_ledger: str | None = None
    """The QuantityLedger (in Enclave's namespace) enclave-tenants keeps for the quota, once it is initialised:
    admission then reserves each new namespace on it, so replicas never admit more than the quota together."""
    force_tenant_prefix: bool | None = None
    """spec.forceTenantPrefix; None means the global setting applies."""
    cordoned: bool = False
    prevent_deletion: bool = False
    node_selector: dict[str, str] = Field(default_factory=dict)
    forbidden_labels: Forbidden = Field(default_factory=Forbidden)
    forbidden_annotations: Forbidden = Field(default_factory=Forbidden)
    proxy: list[ProxyKind] = Field(default_factory=list)
    """spec.proxy.kinds: enclave-proxy's settings for this tenant's users, replacing the configuration's entry for
    each kind they name."""
    priority_classes: list[ValueMatcher] = Field(default_factory=list)
    """PriorityClass names the tenant's ``allow`` rules admit (``enforce.workloads.placement.priorityClasses``):
    the classes enclave-proxy shows its users."""
    runtime_classes: list[ValueMatcher] = Field(default_factory=list)
    """RuntimeClass names its ``allow`` rules admit (``placement.runtimeClasses``), likewise."""


def entity_matches(entity: Entity, username: str, groups: list[str] | tuple[str, ...]) -> bool:
    """Whether a request subject is ``entity``; service accounts match by their full username."""
    if entity.kind == "Group":
        return entity.name in groups
    if entity.kind == "ServiceAccount" and not entity.name.startswith(SERVICE_ACCOUNT_PREFIX):
        return username == SERVICE_ACCOUNT_PREFIX + entity.name
    return entity.name == username


class TenancySnapshot(SnapshotPayload):
    """Every tenant, indexed for the lookups admission makes per request."""

    model_config = ConfigDict(frozen=True)

    tenants: list[TenantView] = Field(default_factory=list)

    @classmethod
    def from_views(cls, views: Iterable[TenantView]) -> TenancySnapshot:
        """The snapshot of already validated views (the itemized stream's items), sorted by name; no
        re-validation, so assembling 10,000 tenants costs a sort, not a parse."""
        return cls.model_construct(tenants=sorted(views, key=lambda view: view.name))

    @staticmethod
    def parse_item(value: bytes) -> TenantView:
        """One item of the itemized Tenancy stream; unknown fields ignored (a newer publisher)."""
        return TenantView.model_validate_json(value, extra="ignore")

    def items(self) -> dict[str, bytes]:
        """The itemized form: tenant name -> TenantView JSON."""
        return {view.name: view.model_dump_json().encode() for view in self.tenants}

    @cached_property
    def by_name(self) -> dict[str, TenantView]:
        return {tenant.name: tenant for tenant in self.tenants}

    @cached_property
    def namespace_owner(self) -> dict[str, str]:
        """Namespace name -> tenant name."""
        return {ns: tenant.name for tenant in self.tenants for ns in tenant.namespaces}

    def owned_by(self, username: str, groups: list[str] | tuple[str, ...]) -> list[TenantView]:
        """Tenants the subject owns, sorted by name."""
        return [t for t in self.tenants if any(entity_matches(o, username, groups) for o in t.owners)]
