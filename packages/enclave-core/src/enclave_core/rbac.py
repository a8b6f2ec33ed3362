"""RBAC subjects for Enclave entities.

Several components bind Enclave entities (owners, administrators, service users, promoted service accounts)
to roles, and all of them must agree on how an entity becomes an RBAC subject: a service account is named
``system:serviceaccount:<namespace>:<name>`` in Enclave (or ``<namespace>:<name>``), but RBAC wants
``{kind: ServiceAccount, namespace, name}``. Getting that wrong silently binds nobody, so it lives here once.
"""

from __future__ import annotations

from typing import Any, Final

from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX

RBAC_GROUP: Final = "rbac.authorization.k8s.io"

__all__ = ["RBAC_GROUP", "service_account_parts", "subject"]


def service_account_parts(name: str) -> tuple[str, str] | None:
    """``(namespace, name)`` of ``system:serviceaccount:<ns>:<name>`` or ``<ns>:<name>``; None if malformed."""
    namespace, sep, account = name.removeprefix(SERVICE_ACCOUNT_PREFIX).partition(":")
    if not sep or not namespace or not account or ":" in account:
        return None
    return namespace, account


def subject(kind: str, name: str) -> dict[str, Any]:
    """The RBAC subject for an entity; raises ``ValueError`` for a service account name without a namespace.

    A ``User`` named ``system:serviceaccount:...`` stays a User subject: RBAC matches User subjects against the
    username, which is exactly that string, so the binding works either way.
    """
    if kind == "ServiceAccount":
        parts = service_account_parts(name)
        if parts is None:
            raise ValueError(f"service account {name!r} must be written system:serviceaccount:<namespace>:<name>")
        namespace, account = parts
        return {"kind": "ServiceAccount", "name": account, "namespace": namespace}
    return {"kind": kind, "apiGroup": RBAC_GROUP, "name": name}
