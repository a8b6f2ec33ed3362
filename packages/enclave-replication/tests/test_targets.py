"""Null versus empty selectors in replication (the spec: "An empty label selector matches everything; a null one
matches nothing"), one row per field, with the spec's one explicit exception (ResourceBlock.namespaceSelector)."""

from __future__ import annotations

from typing import Any

import pytest

from enclave_core.api.replication import GlobalTenantResourceSpec
from enclave_replication.targets import global_targets, select_tenants

TENANTS: list[dict[str, Any]] = [{"metadata": {"name": "a", "labels": {"env": "dev"}}}, {"metadata": {"name": "b"}}]
NAMESPACES: dict[str, list[dict[str, Any]]] = {
    "a": [{"metadata": {"name": "a-1", "labels": {"tier": "web"}}}, {"metadata": {"name": "a-2"}}],
    "b": [{"metadata": {"name": "b-1"}}],
}


def _spec(extra: dict[str, Any], block: dict[str, Any] | None = None) -> GlobalTenantResourceSpec:
    return GlobalTenantResourceSpec.model_validate({"resources": [block or {}], **extra})


@pytest.mark.parametrize(
    ("field", "spec", "expected"),
    [
        ("tenantSelector null matches no tenant", {}, []),
        ("tenantSelector {} matches every tenant", {"tenantSelector": {}}, ["a", "b"]),
        ("tenantSelector with labels", {"tenantSelector": {"matchLabels": {"env": "dev"}}}, ["a"]),
    ],
)
def test_tenant_selector_null_and_empty(field: str, spec: dict[str, Any], expected: list[str]) -> None:
    assert [t["metadata"]["name"] for t in select_tenants(_spec(spec), TENANTS)] == expected, field


@pytest.mark.parametrize(
    ("field", "block", "expected"),
    [
        ("namespaceSelector null targets every tenant namespace (the spec's exception)", {}, ["a-1", "a-2", "b-1"]),
        ("namespaceSelector {} targets every tenant namespace", {"namespaceSelector": {}}, ["a-1", "a-2", "b-1"]),
        ("namespaceSelector with labels", {"namespaceSelector": {"matchLabels": {"tier": "web"}}}, ["a-1"]),
    ],
)
def test_namespace_selector_null_and_empty(field: str, block: dict[str, Any], expected: list[str]) -> None:
    spec = _spec({"tenantSelector": {}}, block)
    targets = global_targets(spec, spec.resources[0], select_tenants(spec, TENANTS), NAMESPACES)
    assert [t.namespace_name for t in targets] == expected, field


def test_scope_none_targets_once_whatever_the_tenant_selector() -> None:
    extras: list[dict[str, Any]] = [{}, {"tenantSelector": {}}]
    for extra in extras:
        spec = _spec({"scope": "None", **extra})
        assert len(global_targets(spec, spec.resources[0], select_tenants(spec, TENANTS), NAMESPACES)) == 1
