"""The RoleBindings Enclave keeps in tenant namespaces, attacked by the tenant owner who holds ``admin`` there.

enclave-tenants writes the owners' bindings and the ``enclave-component-*`` grants (``--namespace-grant``: what
Enclave's own components may do only inside tenant namespaces) into every tenant namespace, labelled
``app.kubernetes.io/managed-by: enclave-tenants``. ``admin`` may delete and edit RoleBindings, so without the
``rolebindings.enclave.dev`` hook an owner deletes a component's grant (replication or managed metadata stop
working in the namespace until the controller's next pass), rewrites a binding's subjects, or strips the label so
the controller no longer removes it. Each attack below is refused by the hook; the owner's own bindings and
enclave-tenants' own rewrites go through.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, start_tenancy
from enclave_testing.waiting import poll

from .conftest import USERS, as_user, owned_namespace
from .tenant_attacks import denied, granted

GRANTED_ROLE = "view"
"""The cluster role enclave-tenants grants (``--namespace-grant``) in every tenant namespace in this module."""
GRANT_BINDING = f"enclave-component-{GRANTED_ROLE}"
HOOK = "rolebindings.enclave.dev"
MANAGED = {"app.kubernetes.io/managed-by": "enclave-tenants"}


@pytest.fixture(scope="module")
def guarded(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    """The tenancy core, enclave-tenants keeping a component grant in every tenant namespace as the chart's does."""
    stack = start_tenancy(
        control_plane,
        [{"kind": "Group", "name": USERS}],
        tenants_args=[f"--namespace-grant={GRANTED_ROLE}=enclave-replication"],
    )
    try:
        yield stack
    finally:
        stack.close()


def _rbac(api: Any) -> client.RbacAuthorizationV1Api:
    return client.RbacAuthorizationV1Api(api)


def _owned(stack: TenancyStack, impersonate: Callable[..., Any]) -> tuple[str, str, str, client.RbacAuthorizationV1Api]:
    """(owner, tenant, namespace, the owner's RBAC client) once the component grant is in the namespace."""
    owner = unique("owner")
    tenant, namespace = owned_namespace(stack, impersonate, owner)
    poll(lambda: _read(stack.kube, namespace, GRANT_BINDING), what="the component grant")
    return owner, tenant, namespace, _rbac(as_user(impersonate, owner))


def _read(kube: Any, namespace: str, name: str) -> Any:
    try:
        return _rbac(kube).read_namespaced_role_binding(name, namespace)
    except ApiException as err:
        if err.status == 404:
            return None
        raise


def _owner_binding(kube: Any, namespace: str, owner: str) -> str:
    found = [
        b.metadata.name
        for b in _rbac(kube).list_namespaced_role_binding(namespace).items
        if b.role_ref.name == "admin" and any(s.name == owner for s in b.subjects or [])
    ]
    assert len(found) == 1, found
    return str(found[0])


def test_owner_deleting_a_component_grant_is_refused(guarded: TenancyStack, impersonate: Any) -> None:
    _, _, namespace, owner = _owned(guarded, impersonate)
    denied(lambda: owner.delete_namespaced_role_binding(GRANT_BINDING, namespace), HOOK, GRANT_BINDING)
    assert _read(guarded.kube, namespace, GRANT_BINDING) is not None


def test_owner_rewriting_a_managed_bindings_subjects_is_refused(guarded: TenancyStack, impersonate: Any) -> None:
    """Adding someone to the owner's own ``admin`` binding (or a component's grant) hands out the role until the
    controller's next pass, without the Tenant saying so."""
    name, _, namespace, owner = _owned(guarded, impersonate)
    mallory = [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}]
    binding = _owner_binding(guarded.kube, namespace, name)
    for target in (binding, GRANT_BINDING):
        denied(partial(owner.patch_namespaced_role_binding, target, namespace, {"subjects": mallory}), HOOK)


def test_owner_stripping_the_managed_label_is_refused(guarded: TenancyStack, impersonate: Any) -> None:
    """Without the label enclave-tenants no longer finds, and so never removes, the binding."""
    name, _, namespace, owner = _owned(guarded, impersonate)
    binding = _owner_binding(guarded.kube, namespace, name)
    strip = {"metadata": {"labels": {"app.kubernetes.io/managed-by": None}}}
    denied(lambda: owner.patch_namespaced_role_binding(binding, namespace, strip), HOOK)


def test_owner_forging_a_managed_binding_is_refused(guarded: TenancyStack, impersonate: Any) -> None:
    name, _, namespace, owner = _owned(guarded, impersonate)
    body = {
        "metadata": {"name": "looks-like-enclave", "labels": MANAGED},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": name}],
    }
    denied(lambda: owner.create_namespaced_role_binding(namespace, body), HOOK)


def test_tenant_service_account_deleting_a_managed_binding_is_refused(guarded: TenancyStack, impersonate: Any) -> None:
    """A service account the owner gave ``admin`` (a CI system) is refused like the owner."""
    _, _, namespace, owner = _owned(guarded, impersonate)
    client.CoreV1Api(guarded.kube).create_namespaced_service_account(namespace, {"metadata": {"name": "ci"}})
    owner.create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "ci-admin"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"kind": "ServiceAccount", "name": "ci", "namespace": namespace}],
        },
    )
    account = f"system:serviceaccount:{namespace}:ci"
    ci = _rbac(impersonate(account, ["system:serviceaccounts", f"system:serviceaccounts:{namespace}"]))
    poll(lambda: ci.list_namespaced_role_binding(namespace), what="the account's admin in force")
    denied(lambda: ci.delete_namespaced_role_binding(GRANT_BINDING, namespace), HOOK)


def test_owner_deleting_their_own_binding_is_allowed(guarded: TenancyStack, impersonate: Any) -> None:
    _, _, namespace, owner = _owned(guarded, impersonate)
    body = {
        "metadata": {"name": "colleague-view"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "colleague"}],
    }
    owner.create_namespaced_role_binding(namespace, body)
    owner.patch_namespaced_role_binding("colleague-view", namespace, {"metadata": {"labels": {"team": "a"}}})
    owner.delete_namespaced_role_binding("colleague-view", namespace)
    assert _read(guarded.kube, namespace, "colleague-view") is None


def test_enclave_tenants_removes_a_removed_owners_binding(guarded: TenancyStack, impersonate: Any) -> None:
    """The controller's own rewrite goes through: a second owner is added, then removed, and their binding goes."""
    first, tenant, namespace, _ = _owned(guarded, impersonate)
    second = unique("owner")
    owners = [{"kind": "User", "name": first}]
    tenants = client.CustomObjectsApi(guarded.kube)

    def set_owners(value: list[dict[str, str]]) -> None:
        tenants.patch_cluster_custom_object("enclave.dev", "v1beta2", "tenants", tenant, {"spec": {"owners": value}})

    set_owners([*owners, {"kind": "User", "name": second}])
    poll(lambda: second in _admins(guarded.kube, namespace), what="the second owner bound")
    set_owners(owners)
    poll(lambda: second not in _admins(guarded.kube, namespace), what="the removed owner's binding deleted")


def _admins(kube: Any, namespace: str) -> list[str]:
    return [
        s.name
        for b in _rbac(kube).list_namespaced_role_binding(namespace).items
        if b.role_ref.name == "admin" and (b.metadata.labels or {}).get("app.kubernetes.io/managed-by")
        for s in b.subjects or []
    ]


def test_enclave_component_account_changes_managed_bindings(guarded: TenancyStack, impersonate: Any) -> None:
    """enclave-tenants' service account (the chart's identity, not the stack's admin) updates and deletes a managed
    binding: Enclave's own accounts pass the hook."""
    _, _, namespace, _ = _owned(guarded, impersonate)
    account = f"system:serviceaccount:{guarded.namespace}:enclave-tenants"
    rules = [
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["rolebindings"], "verbs": ["*"]},
        {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["clusterroles"], "verbs": ["bind"]},
    ]
    subjects = [{"kind": "ServiceAccount", "name": "enclave-tenants", "namespace": guarded.namespace}]
    with granted(guarded.kube, rules, subjects):
        api = _rbac(impersonate(account, ["system:serviceaccounts", f"system:serviceaccounts:{guarded.namespace}"]))
        poll(lambda: api.list_namespaced_role_binding(namespace), what="the grant in force")
        api.patch_namespaced_role_binding(GRANT_BINDING, namespace, {"metadata": {"annotations": {"probe": "1"}}})
        api.delete_namespaced_role_binding(GRANT_BINDING, namespace)
