"""Where a replication object writes: its selected tenants and, per resource block, its target namespaces.

Pure functions over the informers' raw objects. A GlobalTenantResource picks tenants with ``tenantSelector``
(the spec's rule: ``{}`` selects every tenant, absent or null selects none; scope ``None`` needs no tenant) and writes per tenant namespace (scope ``Namespace``), once per tenant (``Tenant``) or
once (``None``). A TenantResource writes into the namespaces of the tenant owning its own namespace. Each
block narrows the namespaces with its ``namespaceSelector`` (absent: all of them); terminating namespaces are
never targets (nothing can be created in them, and what is there goes with them).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from enclave_core import selectors
from enclave_core.api.names import TENANT_LABEL
from enclave_core.api.replication import GlobalTenantResourceSpec, ResourceBlock, TenantResourceSpec
from enclave_core.kube.rest import JSON


@dataclass(frozen=True)
class Target:
    """One place a block's content goes: a tenant namespace, a tenant, or nowhere in particular."""

    tenant: JSON | None = None
    namespace: JSON | None = None

    @property
    def tenant_name(self) -> str:
        return str(self.tenant["metadata"]["name"]) if self.tenant else ""

    @property
    def namespace_name(self) -> str:
        return str(self.namespace["metadata"]["name"]) if self.namespace else ""


def _labels(obj: JSON) -> Mapping[str, str]:
    return obj.get("metadata", {}).get("labels") or {}


def terminating(namespace: JSON) -> bool:
    return bool(namespace.get("metadata", {}).get("deletionTimestamp")) or (
        namespace.get("status", {}).get("phase") == "Terminating"
    )


def namespaces_by_tenant(namespaces: Iterable[JSON]) -> dict[str, list[JSON]]:
    """Tenant name -> its namespaces (by the tenant label), each list sorted by name."""
    result: dict[str, list[JSON]] = {}
    for namespace in namespaces:
        tenant = _labels(namespace).get(TENANT_LABEL)
        if tenant:
            result.setdefault(tenant, []).append(namespace)
    for items in result.values():
        items.sort(key=lambda item: str(item["metadata"]["name"]))
    return result


def select_tenants(spec: GlobalTenantResourceSpec, tenants: Iterable[JSON]) -> list[JSON]:
    """Tenants a GlobalTenantResource targets, sorted by name; Tenants being deleted are left out."""
    selected = [
        tenant
        for tenant in tenants
        if not tenant.get("metadata", {}).get("deletionTimestamp")
        and spec.tenant_selector is not None
        and selectors.matches(spec.tenant_selector, _labels(tenant))
    ]
    return sorted(selected, key=lambda tenant: str(tenant["metadata"]["name"]))


def _namespace_targets(block: ResourceBlock, tenant: JSON, namespaces: list[JSON]) -> list[Target]:
    return [
        Target(tenant, namespace)
        for namespace in namespaces
        if not terminating(namespace)
        and (block.namespace_selector is None or selectors.matches(block.namespace_selector, _labels(namespace)))
    ]


def global_targets(
    spec: GlobalTenantResourceSpec, block: ResourceBlock, tenants: list[JSON], by_tenant: Mapping[str, list[JSON]]
) -> list[Target]:
    if spec.scope == "None":
        return [Target()]
    if spec.scope == "Tenant":
        return [Target(tenant) for tenant in tenants]
    targets: list[Target] = []
    for tenant in tenants:
        targets += _namespace_targets(block, tenant, by_tenant.get(str(tenant["metadata"]["name"]), []))
    return targets


def tenant_targets(
    spec: TenantResourceSpec, block: ResourceBlock, tenant: JSON, by_tenant: Mapping[str, list[JSON]]
) -> list[Target]:
    del spec  # same rules for every block of a TenantResource; the tenant is the fence
    return _namespace_targets(block, tenant, by_tenant.get(str(tenant["metadata"]["name"]), []))
