"""Builders for raw objects as the informers hold them (plain dicts, as kube-apiserver returns them)."""

from __future__ import annotations

from typing import Any

from enclave_core.api.names import TENANT_LABEL

JSON = dict[str, Any]


def tenant(name: str, generation: int = 1, **spec: Any) -> JSON:
    return {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "Tenant",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": generation},
        "spec": spec,
    }


def tenant_owner(name: str, kind: str, owner: str, labels: dict[str, str] | None = None, **spec: Any) -> JSON:
    return {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "TenantOwner",
        "metadata": {"name": name, "uid": f"uid-{name}", "generation": 1, "labels": labels or {}},
        "spec": {"kind": kind, "name": owner, **spec},
    }


def namespace(name: str, tenant_name: str | None = None, *, terminating: bool = False, **meta: Any) -> JSON:
    labels = {"kubernetes.io/metadata.name": name}
    if tenant_name:
        labels[TENANT_LABEL] = tenant_name
    obj: JSON = {"metadata": {"name": name, "labels": labels, **meta}, "status": {"phase": "Active"}}
    if terminating:
        obj["metadata"]["deletionTimestamp"] = "2025-01-01T00:00:00Z"
        obj["status"]["phase"] = "Terminating"
    return obj


def service_account(namespace_name: str, name: str) -> JSON:
    return {"metadata": {"name": name, "namespace": namespace_name, "labels": {"enclave.dev/promoted": "true"}}}
