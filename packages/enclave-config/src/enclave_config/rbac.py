"""The namespace provisioner and deleter ClusterRoles, and who may provision (pure rendering).

Tenant users create namespaces through the provisioner binding; admission then decides which tenant the
namespace lands in. The deleter role is not bound cluster-wide: the tenants component binds it inside each
tenant namespace, so an owner can delete only namespaces of their own tenants.
"""

from __future__ import annotations

from typing import Any

from enclave_config.webhooks import MANAGED_BY, MANAGER
from enclave_core.api.meta import Entity
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
    return {MANAGED_BY: MANAGER}


def render(config: EffectiveConfiguration, promoted_service_accounts: list[tuple[str, str]]) -> list[JSON]:
    """ClusterRoles and the provisioner ClusterRoleBinding, in apply order."""
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
