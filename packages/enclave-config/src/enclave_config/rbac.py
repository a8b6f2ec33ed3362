"""The namespace provisioner and deleter ClusterRoles, and who may provision (pure rendering).

Tenant users create namespaces through the provisioner binding; admission then decides which tenant the
namespace lands in. The deleter role is not bound cluster-wide: the tenants component binds it inside each
tenant namespace, so an owner can delete only namespaces of their own tenants.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from enclave_core.api.meta import Entity
from enclave_core.api.names import CONFIG_MANAGER, MANAGED_BY
from enclave_core.rbac import RBAC_GROUP
from enclave_core.rbac import subject as shared_subject
from enclave_core.snapshots.configuration import EffectiveConfiguration

JSON = dict[str, Any]


def subject(entity: Entity) -> JSON | None:
    """The RBAC subject, or None for a service account name without a namespace (it could bind nobody)."""
    try:
        return shared_subject(entity.kind, entity.name)
    except ValueError:
        return None


def _labels() -> dict[str, str]:
    return {MANAGED_BY: CONFIG_MANAGER}


def promoted_in_tenants(accounts: Iterable[JSON], tenants: Iterable[JSON]) -> list[tuple[str, str]]:
    """``(namespace, name)`` of the promoted service accounts that count, sorted: labelled (``accounts``, the
    ServiceAccounts listed by the promotion label) *and* in a namespace some Tenant's ``status.namespaces``
    lists. enclave-tenants writes that list from the namespaces' tenant label, and only it may write Tenant
    status. An account labelled in a namespace of no tenant gets nothing (admission lets only cluster
    administrators write the label there, but a label from before Enclave, or one in a namespace the hook
    excludes, must not grant cluster-wide namespace creation either), and an account whose namespace leaves
    its tenant loses its binding when the tenant's status drops the namespace."""
    wanted: dict[str, list[str]] = {}
    for account in accounts:
        meta = account.get("metadata") or {}
        if meta.get("namespace") and meta.get("name"):
            wanted.setdefault(meta["namespace"], []).append(meta["name"])
    if not wanted:
        return []
    found: list[tuple[str, str]] = []
    for tenant in tenants:
        for namespace in (tenant.get("status") or {}).get("namespaces") or ():
            found.extend((namespace, name) for name in wanted.pop(namespace, ()))
    return sorted(found)


def render(config: EffectiveConfiguration, promoted_service_accounts: list[tuple[str, str]]) -> list[JSON]:
    """ClusterRoles and the provisioner ClusterRoleBinding, in apply order. ``promoted_service_accounts`` are
    those that count (:func:`promoted_in_tenants`)."""
    rbac = config.spec.rbac
    roles: list[JSON] = [
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": rbac.provisioner, "labels": _labels()},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["create"]}],
        },
        {
            "apiVersion": f"{RBAC_GROUP}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": rbac.deleter, "labels": _labels()},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["delete"]}],
        },
    ]
    subjects: list[JSON] = []
    for entity in [*config.users, *(config.spec.administrators or [])]:
        entry = subject(entity)
        if entry is not None and entry not in subjects:
            subjects.append(entry)
    if config.spec.allow_service_account_promotion:
        for namespace, name in sorted(promoted_service_accounts):
            entry = {"kind": "ServiceAccount", "name": name, "namespace": namespace}
            if entry not in subjects:
                subjects.append(entry)
    binding: JSON = {
        "apiVersion": f"{RBAC_GROUP}/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": rbac.provisioner, "labels": _labels()},
        "roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": rbac.provisioner},
        "subjects": subjects,
    }
    return [*roles, binding]
