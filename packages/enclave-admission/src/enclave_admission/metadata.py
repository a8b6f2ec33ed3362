"""Small helpers over object metadata shared by the areas: key diffs and Tenant owner references."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from enclave_admission.review import JSON
from enclave_core import API_GROUP, GROUP_VERSION
from enclave_core.snapshots.tenancy import TenantView


def changed_keys(old: Mapping[str, str], new: Mapping[str, str]) -> list[str]:
    """Keys added, removed or given another value, sorted (for stable messages)."""
    return sorted(key for key in old.keys() | new.keys() if old.get(key) != new.get(key))


def owner_references(obj: JSON | None) -> list[dict[str, Any]]:
    if not obj:
        return []
    refs = (obj.get("metadata") or {}).get("ownerReferences") or []
    return [ref for ref in refs if isinstance(ref, dict)]


def is_tenant_reference(ref: dict[str, Any]) -> bool:
    """An owner reference to a Tenant of our group (any version: a future v1 must not slip through)."""
    return ref.get("kind") == "Tenant" and str(ref.get("apiVersion", "")).partition("/")[0] == API_GROUP


def tenant_references(obj: JSON | None) -> list[dict[str, Any]]:
    return [ref for ref in owner_references(obj) if is_tenant_reference(ref)]


def tenant_reference(tenant: TenantView) -> dict[str, Any]:
    """The owner reference a tenant namespace carries: the Tenant controls it, and deleting the Tenant
    (foreground) waits for it."""
    return {
        "apiVersion": GROUP_VERSION,
        "kind": "Tenant",
        "name": tenant.name,
        "uid": tenant.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def references_tenant(obj: JSON | None, tenant: TenantView) -> bool:
    """Exactly one Tenant owner reference, and it is ``tenant`` (by name and uid)."""
    refs = tenant_references(obj)
    return len(refs) == 1 and refs[0].get("name") == tenant.name and refs[0].get("uid") == tenant.uid
