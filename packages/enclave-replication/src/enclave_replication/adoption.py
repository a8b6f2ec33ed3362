"""Whether ``policy.creation: Merge`` may adopt an existing object: never one another manager owns.

Why (issue 29): adopting marks the object as replicated, and admission's protection hook then refuses every
change but the replication object's. A TenantResource with ``creation: Merge`` over the RoleBinding that
enclave-tenants keeps for an owner froze it: removing the owner from the Tenant no longer removed their admin
rights. So an object is adopted only when nothing says another manager keeps it:

* no ``app.kubernetes.io/managed-by`` label (Helm, enclave-tenants, operators set it) other than replication's;
* no ``ownerReferences`` entry with ``controller: true`` (a controller recreates and rewrites what it owns);
* every field manager in ``managedFields`` is replication's own (``enclave-replication/...``) or one of the
  adoptable managers (``--adopt-field-managers``; default ``kubectl`` and ``kubectl-*``: objects made by hand).
  A field manager names a program, not an account, so a controller's (``enclave-tenants``,
  ``kube-controller-manager``, ``helm``) is refused even when the acting account could write the object.

Pure: unit tested in ``tests/test_replication_adoption.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from enclave_core.api.names import MANAGED_BY, REPLICATION_MANAGER
from enclave_core.kube.rest import JSON

DEFAULT_ADOPTABLE: Final = ("kubectl", "kubectl-*")


def adoptable(manager: str, patterns: Sequence[str]) -> bool:
    """Whether ``manager`` matches one of ``patterns`` (exact, or a prefix when the pattern ends with ``*``)."""
    for pattern in patterns:
        if pattern.endswith("*") and manager.startswith(pattern[:-1]):
            return True
        if manager == pattern:
            return True
    return False


def conflict(live: JSON, patterns: Sequence[str] = DEFAULT_ADOPTABLE) -> str:
    """Why ``live`` may not be adopted ('' when it may), naming the other manager."""
    meta = live.get("metadata") or {}
    managed_by = (meta.get("labels") or {}).get(MANAGED_BY)
    if managed_by and managed_by != REPLICATION_MANAGER:
        return f"it is managed by {managed_by} (label {MANAGED_BY})"
    for reference in meta.get("ownerReferences") or ():
        if reference.get("controller"):
            return f"it is controlled by {reference.get('kind', '?')} {reference.get('name', '?')} (ownerReferences)"
    for entry in meta.get("managedFields") or ():
        manager = str(entry.get("manager") or "")
        if manager.startswith(f"{REPLICATION_MANAGER}/") or adoptable(manager, patterns):
            continue
        return f"field manager {manager or '(unnamed)'} keeps fields of it (managedFields)"
    return ""
