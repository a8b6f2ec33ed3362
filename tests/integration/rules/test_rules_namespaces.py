"""Issue 30: tenant rules whose metadata ``kinds`` name ``Namespace`` judge the tenant's namespaces themselves,
on create and update by tenant users (the ``/resources`` hooks see namespaced objects only, so such a rule was
accepted and silently inert). Enforced by the namespace hook, through kube-apiserver, with the owner
impersonated."""

from __future__ import annotations

import contextlib
from typing import Any

from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.names import unique

from .conftest import Stack, eventually_refused, refusal

REQUIRED_COST_CENTER: dict[str, Any] = {
    "enforce": {
        "action": "allow",
        "metadata": [{"kinds": ["Namespace"], "labels": {"cost-center": {"required": True}}}],
    }
}
NO_GOLD_IN_PROD: dict[str, Any] = {
    "namespaceSelector": {"matchLabels": {"stage": "prod"}},
    "enforce": {
        "action": "deny",
        "metadata": [{"kinds": ["Namespace"], "annotations": {"tier": {"values": [{"exact": ["gold"]}]}}}],
    },
}
EVERY_KIND: dict[str, Any] = {
    "enforce": {"action": "deny", "metadata": [{"kinds": ["*"], "labels": {"legacy": {}}}]},
}


def _namespace(name: str, labels: dict[str, str], **annotations: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": labels, "annotations": annotations}}


def test_tenant_rules_naming_namespace_judge_its_namespaces(stack: Stack) -> None:
    owner = unique("nia")
    tenant = stack.tenant(owner, [REQUIRED_COST_CENTER, NO_GOLD_IN_PROD, EVERY_KIND])
    first = stack.namespace_of(tenant, owner, "ok", **{"cost-center": "cc1"})
    core = stack.core(owner)

    # create: the required label, refused naming the rule
    missing = eventually_refused(
        lambda: core.create_namespace(_namespace(f"{tenant}-bare", {})),
        f"Tenant {tenant} spec.rules[0]",
        "cost-center",
    )
    assert "denied the request" in missing
    # create: a forbidden annotation value, only where the rule's namespaceSelector selects
    refusal(
        lambda: core.create_namespace(
            _namespace(f"{tenant}-gold", {"cost-center": "cc1", "stage": "prod"}, tier="gold"), dry_run="All"
        )
    )
    core.create_namespace(_namespace(f"{tenant}-dev", {"cost-center": "cc1", "stage": "dev"}, tier="gold"))
    # a rule for every kind (``*``) keeps meaning namespaced objects: it does not fence namespaces
    core.create_namespace(_namespace(f"{tenant}-old", {"cost-center": "cc1", "legacy": "yes"}), dry_run="All")

    # update: an owner allowed by RBAC to patch namespaces may not drop the required label
    role, binding = unique("ns-patch"), unique("ns-patch")
    rbac = client.RbacAuthorizationV1Api(stack.kube)
    rbac.create_cluster_role(
        {"metadata": {"name": role}, "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["patch"]}]}
    )
    rbac.create_cluster_role_binding(
        {
            "metadata": {"name": binding},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": owner}],
        }
    )
    try:
        dropped = eventually_refused(
            lambda: core.patch_namespace(first, {"metadata": {"labels": {"cost-center": None}}}),
            f"Tenant {tenant} spec.rules[0]",
        )
        assert "cost-center" in dropped
        core.patch_namespace(first, {"metadata": {"labels": {"cost-center": "cc2"}}})
    finally:
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role_binding(binding)
        with contextlib.suppress(ApiException):
            rbac.delete_cluster_role(role)
