"""The ``enclave.dev/v1beta2`` API: one pydantic model per kind and the registry of kinds.

Controllers read and write objects through these models (``Tenant.model_validate(obj)``,
``tenant.to_k8s()``); :mod:`enclave_core.api.crdgen` turns the same models and :data:`KINDS` into
the CustomResourceDefinitions shipped in ``charts/enclave/crds``. The reference for users is
``docs/api.md``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Final, Literal, TypeAlias

from enclave_core import API_GROUP, API_VERSION
from enclave_core.api.configuration import ServiceConfiguration, ServiceConfigurationSpec
from enclave_core.api.ledger import QuantityLedger, QuantityLedgerSpec
from enclave_core.api.meta import (
    Condition,
    Entity,
    KubeObject,
    LabelSelector,
    ObjectMeta,
    ObjectRef,
    ScopeSelector,
    ValueMatcher,
)
from enclave_core.api.pools import ResourcePool, ResourcePoolClaim, ResourcePoolClaimSpec, ResourcePoolSpec
from enclave_core.api.quotas import (
    CustomQuota,
    CustomQuotaSpec,
    GlobalCustomQuota,
    GlobalCustomQuotaSpec,
    GlobalResourceQuota,
    GlobalResourceQuotaSpec,
    Source,
)
from enclave_core.api.replication import (
    GlobalTenantResource,
    GlobalTenantResourceSpec,
    TenantResource,
    TenantResourceSpec,
)
from enclave_core.api.rules import RuleBody, RuleStatus
from enclave_core.api.tenancy import Tenant, TenantOwner, TenantOwnerSpec, TenantSpec

__all__ = [
    "CATEGORY",
    "KINDS",
    "KINDS_BY_NAME",
    "Condition",
    "CustomQuota",
    "CustomQuotaSpec",
    "Entity",
    "GlobalCustomQuota",
    "GlobalCustomQuotaSpec",
    "GlobalResourceQuota",
    "GlobalResourceQuotaSpec",
    "GlobalTenantResource",
    "GlobalTenantResourceSpec",
    "KindInfo",
    "KubeObject",
    "LabelSelector",
    "ObjectMeta",
    "ObjectRef",
    "PrinterColumn",
    "QuantityLedger",
    "QuantityLedgerSpec",
    "ResourcePool",
    "ResourcePoolClaim",
    "ResourcePoolClaimSpec",
    "ResourcePoolSpec",
    "RuleBody",
    "RuleStatus",
    "Scope",
    "ScopeSelector",
    "ServiceConfiguration",
    "ServiceConfigurationSpec",
    "Source",
    "Tenant",
    "TenantOwner",
    "TenantOwnerSpec",
    "TenantResource",
    "TenantResourceSpec",
    "TenantSpec",
    "ValueMatcher",
    "kind_info",
]

Scope: TypeAlias = Literal["Cluster", "Namespaced"]
CATEGORY: Final = "enclave"
"""``kubectl get enclave`` lists every Enclave object."""


@dataclass(frozen=True)
class PrinterColumn:
    """An ``additionalPrinterColumns`` entry: what ``kubectl get`` shows."""

    name: str
    type: Literal["string", "integer", "number", "boolean", "date"]
    json_path: str
    description: str
    priority: int = 0


_READY = PrinterColumn(
    "Ready", "string", '.status.conditions[?(@.type=="Ready")].status', "Whether the object is Ready."
)
_AGE = PrinterColumn("Age", "date", ".metadata.creationTimestamp", "Time since creation.")


@dataclass(frozen=True)
class KindInfo:
    """Everything controllers and the CRD generator need to know about one kind."""

    kind: str
    plural: str
    scope: Scope
    model: type[KubeObject]
    short_names: tuple[str, ...] = ()
    columns: tuple[PrinterColumn, ...] = ()

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return f"{self.kind}List"

    @property
    def group(self) -> str:
        return API_GROUP

    @property
    def version(self) -> str:
        return API_VERSION

    @property
    def crd_name(self) -> str:
        return f"{self.plural}.{API_GROUP}"

    @property
    def namespaced(self) -> bool:
        return self.scope == "Namespaced"


KINDS: Final[tuple[KindInfo, ...]] = (
    KindInfo(
        "CustomQuota",
        "customquotas",
        "Namespaced",
        CustomQuota,
        ("cq",),
        (
            PrinterColumn("Used", "string", ".status.usage.used", "Usage summed over claims."),
            PrinterColumn("Limit", "string", ".spec.limit", "Quantity limit."),
            PrinterColumn("Available", "string", ".status.usage.available", "Limit minus used."),
            _READY,
            _AGE,
        ),
    ),
    KindInfo(
        "GlobalCustomQuota",
        "globalcustomquotas",
        "Cluster",
        GlobalCustomQuota,
        ("gcq",),
        (
            PrinterColumn("Used", "string", ".status.usage.used", "Usage summed over claims."),
            PrinterColumn("Limit", "string", ".spec.limit", "Quantity limit."),
            PrinterColumn("Available", "string", ".status.usage.available", "Limit minus used."),
            _READY,
            _AGE,
        ),
    ),
    KindInfo(
        "GlobalResourceQuota",
        "globalresourcequotas",
        "Cluster",
        GlobalResourceQuota,
        ("grq",),
        (
            PrinterColumn("Namespaces", "integer", ".status.namespaceCount", "Number of selected namespaces."),
            _READY,
            PrinterColumn("Used", "string", ".status.total.used", "Usage over all namespaces.", 1),
            PrinterColumn("Hard", "string", ".status.total.hard", "Hard limits.", 1),
            _AGE,
        ),
    ),
    KindInfo(
        "GlobalTenantResource",
        "globaltenantresources",
        "Cluster",
        GlobalTenantResource,
        ("gtr",),
        (
            PrinterColumn("Items", "integer", ".status.size", "Number of managed objects."),
            PrinterColumn("Scope", "string", ".spec.scope", "Replication scope."),
            PrinterColumn("Cordoned", "boolean", ".spec.cordoned", "Applies and deletions paused."),
            _READY,
            _AGE,
        ),
    ),
    KindInfo(
        "QuantityLedger",
        "quantityledgers",
        "Namespaced",
        QuantityLedger,
        ("qledger",),
        (
            PrinterColumn("Target Kind", "string", ".spec.targetRef.kind", "Kind of the quota."),
            PrinterColumn("Target", "string", ".spec.targetRef.name", "Name of the quota."),
            PrinterColumn("Allocated", "string", ".status.allocated", "Total accepted by admission."),
            PrinterColumn("Reserved", "string", ".status.reserved", "Sum of active reservations."),
            _AGE,
        ),
    ),
    KindInfo(
        "ResourcePool",
        "resourcepools",
        "Cluster",
        ResourcePool,
        ("rpool",),
        (
            PrinterColumn("Claims", "integer", ".status.claimCount", "Number of bound claims."),
            PrinterColumn("Namespaces", "integer", ".status.namespaceCount", "Number of selected namespaces."),
            _READY,
            PrinterColumn("Available", "string", ".status.allocation.available", "Unclaimed resources.", 1),
            _AGE,
        ),
    ),
    KindInfo(
        "ResourcePoolClaim",
        "resourcepoolclaims",
        "Namespaced",
        ResourcePoolClaim,
        ("rpclaim",),
        (
            PrinterColumn("Pool", "string", ".spec.pool", "Pool claimed from."),
            PrinterColumn("Bound", "string", ".status.pool.name", "Pool the claim is bound to."),
            _READY,
            PrinterColumn("Claim", "string", ".spec.claim", "Amounts claimed.", 1),
            _AGE,
        ),
    ),
    KindInfo(
        "RuleStatus",
        "rulestatuses",
        "Namespaced",
        RuleStatus,
        ("rulestat",),
        (
            PrinterColumn("Rules", "integer", ".status.size", "Number of rules in effect."),
            _READY,
            _AGE,
        ),
    ),
    KindInfo(
        "ServiceConfiguration",
        "serviceconfigurations",
        "Cluster",
        ServiceConfiguration,
        ("enclavecfg",),
        (
            _READY,
            PrinterColumn("TLS", "boolean", ".spec.enableTLSReconciler", "TLS reconciler enabled."),
            PrinterColumn("Prefix", "boolean", ".spec.forceTenantPrefix", "Tenant prefix forced.", 1),
            _AGE,
        ),
    ),
    KindInfo(
        "Tenant",
        "tenants",
        "Cluster",
        Tenant,
        ("tnt",),
        (
            PrinterColumn("Namespaces", "integer", ".status.size", "Number of namespaces."),
            PrinterColumn("Quota", "integer", ".spec.namespaceOptions.quota", "Maximum number of namespaces."),
            PrinterColumn("Cordoned", "boolean", ".spec.cordoned", "No namespace creation or deletion."),
            _READY,
            PrinterColumn("Node Selector", "string", ".spec.nodeSelector", "Node selector of the tenant.", 1),
            _AGE,
        ),
    ),
    KindInfo(
        "TenantOwner",
        "tenantowners",
        "Cluster",
        TenantOwner,
        ("tntowner",),
        (
            PrinterColumn("Owner Kind", "string", ".spec.kind", "User, Group or ServiceAccount."),
            PrinterColumn("Owner", "string", ".spec.name", "Name of the owner."),
            PrinterColumn("Aggregate", "boolean", ".spec.aggregate", "Also a service user."),
            _READY,
            _AGE,
        ),
    ),
    KindInfo(
        "TenantResource",
        "tenantresources",
        "Namespaced",
        TenantResource,
        ("tntres",),
        (
            PrinterColumn("Items", "integer", ".status.size", "Number of managed objects."),
            PrinterColumn("Cordoned", "boolean", ".spec.cordoned", "Applies and deletions paused."),
            _READY,
            _AGE,
        ),
    ),
)
"""The twelve kinds, sorted by kind name."""

KINDS_BY_NAME: Final[Mapping[str, KindInfo]] = MappingProxyType({info.kind: info for info in KINDS})


def kind_info(kind: str) -> KindInfo:
    """The registry entry of ``kind``; ``KeyError`` names the known kinds when it is not one."""
    try:
        return KINDS_BY_NAME[kind]
    except KeyError:
        raise KeyError(f"unknown kind {kind!r}; known kinds: {', '.join(KINDS_BY_NAME)}") from None
