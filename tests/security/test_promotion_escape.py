"""Service-account promotion: the label ``enclave.dev/promoted=true`` makes an account a tenant owner, with
cluster-wide namespace creation. Only the tenant's owners (and cluster administrators) may write it, and only
an account of a tenant namespace gets the promotion roles.

Attacks: someone an owner gave ``edit`` in a tenant namespace (not an owner, not even a tenant user) promotes
a service account, or demotes the owner's; someone with ``edit`` in a namespace outside every tenant labels an
account there; an account labelled outside every tenant (by a cluster administrator, so past admission)
expects the promotion roles.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.names import PROMOTED_LABEL
from enclave_testing.controlplane import ControlPlane
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, start_tenancy
from enclave_testing.waiting import poll

from .conftest import USERS, as_user, owned_namespace

PROMOTE = {"metadata": {"labels": {PROMOTED_LABEL: "true"}}}
DEMOTE = {"metadata": {"labels": {PROMOTED_LABEL: None}}}


@pytest.fixture(scope="module")
def promotion(control_plane: ControlPlane, enclave_crds: list[str]) -> Iterator[TenancyStack]:
    """The tenancy core with ``allowServiceAccountPromotion`` on (the shared ``fence`` leaves it off)."""
    stack = start_tenancy(
        control_plane, [{"kind": "Group", "name": USERS}], extra_spec={"allowServiceAccountPromotion": True}
    )
    try:
        yield stack
    finally:
        stack.close()


def _account(kube: Any, namespace: str, name: str, labels: dict[str, str] | None = None) -> None:
    body = {"metadata": {"name": name, "labels": labels or {}}}
    client.CoreV1Api(kube).create_namespaced_service_account(namespace, body)


def _editor(kube: Any, impersonate: Callable[..., Any], namespace: str, account: str) -> tuple[str, Any]:
    """A fresh user who is no tenant user and holds only ``edit`` in ``namespace`` (what an owner gives a
    colleague or a CI system), and a CoreV1Api acting as it once that RoleBinding is in force."""
    user = unique("editor")
    binding = {
        "metadata": {"name": f"edit-{user}"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "edit"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}],
    }
    client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(namespace, binding)
    api = client.CoreV1Api(impersonate(user, []))
    poll(lambda: api.read_namespaced_service_account(account, namespace), what="the editor's RoleBinding in force")
    return user, api


def _refusal(call: Callable[[], Any]) -> str:
    """The body of the 403 ``call`` gets from the promotion hook (whose answer is the point of the test)."""
    with pytest.raises(ApiException) as caught:
        call()
    assert caught.value.status == 403, caught.value.body
    body = str(caught.value.body)
    assert "serviceaccounts.enclave.dev" in body, body
    return body


def _can_create_namespaces(kube: Any, namespace: str, name: str) -> bool:
    """What kube-apiserver's authorizer answers for the account: a SubjectAccessReview."""
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{namespace}:{name}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{namespace}", "system:authenticated"],
            resource_attributes=client.V1ResourceAttributes(verb="create", resource="namespaces"),
        )
    )
    answer = client.AuthorizationV1Api(kube).create_subject_access_review(review)
    return bool(answer.status.allowed)


def _labels(kube: Any, namespace: str, name: str) -> dict[str, str]:
    return dict(client.CoreV1Api(kube).read_namespaced_service_account(name, namespace).metadata.labels or {})


def test_an_editor_promoting_a_service_account_is_refused(
    promotion: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    _, namespace = owned_namespace(promotion, impersonate, unique("owner"))
    _account(promotion.kube, namespace, "ci")
    editor, api = _editor(promotion.kube, impersonate, namespace, "ci")
    body = _refusal(lambda: api.patch_namespaced_service_account("ci", namespace, PROMOTE))
    assert "only owners of the namespace's tenant" in body, body
    # a tenant user (of no tenant) with the same edit is refused the same way
    tenant_user = client.CoreV1Api(as_user(impersonate, editor))
    body = _refusal(lambda: tenant_user.patch_namespaced_service_account("ci", namespace, PROMOTE))
    assert "only owners of the namespace's tenant" in body, body
    assert PROMOTED_LABEL not in _labels(promotion.kube, namespace, "ci")


def test_an_editor_demoting_the_owners_promoted_service_account_is_refused(
    promotion: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    owner = unique("owner")
    _, namespace = owned_namespace(promotion, impersonate, owner)
    _account(promotion.kube, namespace, "deployer")
    as_owner = client.CoreV1Api(as_user(impersonate, owner))
    as_owner.patch_namespaced_service_account("deployer", namespace, PROMOTE)  # the owner may
    _, api = _editor(promotion.kube, impersonate, namespace, "deployer")
    body = _refusal(lambda: api.patch_namespaced_service_account("deployer", namespace, DEMOTE))
    assert "only owners of the namespace's tenant" in body, body
    assert _labels(promotion.kube, namespace, "deployer")[PROMOTED_LABEL] == "true"
    as_owner.patch_namespaced_service_account("deployer", namespace, DEMOTE)  # and so may the owner demote
    assert PROMOTED_LABEL not in _labels(promotion.kube, namespace, "deployer")


def test_an_editor_labelling_a_service_account_outside_every_tenant_is_refused(
    promotion: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    namespace = unique("plain")
    client.CoreV1Api(promotion.kube).create_namespace({"metadata": {"name": namespace}})
    _account(promotion.kube, namespace, "ci")
    _, api = _editor(promotion.kube, impersonate, namespace, "ci")
    body = _refusal(lambda: api.patch_namespaced_service_account("ci", namespace, PROMOTE))
    assert "not in a tenant namespace" in body, body


def test_a_service_account_labelled_outside_every_tenant_gets_no_namespace_creation(
    promotion: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    """The label outside a tenant got past admission (a cluster administrator wrote it): the config component
    still binds nothing to it, while an owner's promoted account of a tenant namespace gets its roles."""
    kube = promotion.kube
    plain = unique("plain")
    client.CoreV1Api(kube).create_namespace({"metadata": {"name": plain}})
    _account(kube, plain, "stray", {PROMOTED_LABEL: "true"})
    owner = unique("owner")
    _, namespace = owned_namespace(promotion, impersonate, owner)
    _account(kube, namespace, "robot")
    client.CoreV1Api(as_user(impersonate, owner)).patch_namespaced_service_account("robot", namespace, PROMOTE)
    # the legitimate one is bound (the config component reconciled after both labels were there) ...
    poll(lambda: _can_create_namespaces(kube, namespace, "robot"), what="the promoted account may create namespaces")
    # ... and the stray one is not
    assert not _can_create_namespaces(kube, plain, "stray")
    for binding in client.RbacAuthorizationV1Api(kube).list_cluster_role_binding().items:
        for subject in binding.subjects or []:
            assert (subject.kind, subject.namespace, subject.name) != ("ServiceAccount", plain, "stray"), binding
