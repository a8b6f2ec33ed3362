"""The fence where a snapshot lags or a review is forged: decisions taken from the review itself."""

from __future__ import annotations

from typing import Any

import pytest
from admission_helpers import ADMIN, ALICE, make_state, namespace, request, tenant, user

from enclave_admission.namespaces import validation as namespaces
from enclave_admission.nodes import validation as nodes
from enclave_admission.serviceaccounts import validation as serviceaccounts
from enclave_admission.state import State
from enclave_admission.tenants import validation as tenants
from enclave_core.api.names import PROMOTED_LABEL, TENANT_LABEL


def tenant_object(name: str, **spec: Any) -> dict[str, Any]:
    return {"apiVersion": "enclave.dev/v1beta2", "kind": "Tenant", "metadata": {"name": name}, "spec": spec}


def tenant_review(who: tuple[str, tuple[str, ...]], operation: str, obj: Any, old: Any = None) -> Any:
    return request(who, operation, obj, old, resource="tenants", group="enclave.dev", kind="Tenant")


def fenced_state() -> State:
    state = make_state([tenant("solar", "alice", namespaces=["solar-a"])])
    state.namespace = "enclave-system"
    return state


def test_prevent_deletion_is_read_from_the_review_not_the_snapshot() -> None:
    """Created with preventDeletion a moment ago: the snapshot does not know the tenant, the review does."""
    state = make_state([])
    decision = tenants.validate(
        tenant_review(ADMIN, "DELETE", None, tenant_object("fresh", preventDeletion=True)), state
    )
    assert not decision.allowed
    assert decision.reason == "TenantDeletionPrevented"
    # and a flag cleared in the object wins over a snapshot that still shows it set
    state = make_state([tenant("solar", "alice", prevent_deletion=True)])
    assert tenants.validate(tenant_review(ADMIN, "DELETE", None, tenant_object("solar")), state).allowed


@pytest.mark.parametrize(
    ("kind", "name", "why"),
    [
        ("User", "system:kube-scheduler", "system: user"),
        ("User", "system:serviceaccount:kube-system:deployer", "namespace kube-system"),
        ("ServiceAccount", "system:serviceaccount:kube-system:deployer", "namespace kube-system"),
        ("ServiceAccount", "enclave-system:enclave-tenants", "namespace enclave-system"),
        ("Group", "system:masters", "system: group"),
        ("Group", "system:nodes", "system: group"),
        ("Group", "system:serviceaccounts:kube-system", "namespace kube-system"),
    ],
)
def test_owners_the_namespace_hooks_skip_are_refused_naming_the_field(kind: str, name: str, why: str) -> None:
    owners = [{"kind": "User", "name": "alice"}, {"kind": kind, "name": name}]
    for operation, old in (("CREATE", None), ("UPDATE", tenant_object("solar", owners=owners[:1]))):
        decision = tenants.validate(
            tenant_review(ADMIN, operation, tenant_object("solar", owners=owners), old), fenced_state()
        )
        assert not decision.allowed, operation
        assert decision.reason == "OwnerSkipsAdmission"
        assert "spec.owners[1].name" in decision.message
        assert why in decision.message
    owner = {"apiVersion": "enclave.dev/v1beta2", "kind": "TenantOwner", "metadata": {"name": "o"}}
    decision = tenants.validate(
        request(
            ADMIN,
            "CREATE",
            {**owner, "spec": {"kind": kind, "name": name}},
            resource="tenantowners",
            group="enclave.dev",
            kind="TenantOwner",
        ),
        fenced_state(),
    )
    assert decision.reason == "OwnerSkipsAdmission"
    assert "spec.name" in decision.message


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("User", "alice"),
        ("Group", "system:serviceaccounts:ci"),
        ("Group", "system:authenticated"),
        ("ServiceAccount", "system:serviceaccount:ci:robot"),
        ("ServiceAccount", "ci:robot"),
    ],
)
def test_owners_the_hooks_see_pass(kind: str, name: str) -> None:
    obj = tenant_object("solar", owners=[{"kind": kind, "name": name}])
    assert tenants.validate(tenant_review(ADMIN, "CREATE", obj), fenced_state()).allowed


def test_an_update_that_keeps_the_owners_passes() -> None:
    """A Tenant admitted before the rule: the garbage collector's finalizer update must not be refused."""
    obj = tenant_object("solar", owners=[{"kind": "Group", "name": "system:masters"}])
    updated = {**obj, "metadata": {"name": "solar", "finalizers": ["foregroundDeletion"]}}
    assert tenants.validate(
        tenant_review(user("system:serviceaccount:kube-system:gc"), "UPDATE", updated, obj), fenced_state()
    ).allowed


def test_unknown_operations_of_tenant_users_are_denied() -> None:
    state = fenced_state()
    ns = namespace("solar-a", {TENANT_LABEL: "solar"})
    decision = namespaces.validate(request(ALICE, "CONNECT", ns, ns), state)
    assert not decision.allowed
    assert decision.reason == "UnknownOperation"
    assert namespaces.validate(request(ALICE, "", ns, ns), state).reason == "UnknownOperation"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
    assert nodes.validate(request(ALICE, "DELETE", None, node, resource="nodes", kind="Node"), state).reason == (
        "UnknownOperation"
    )
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "a", "namespace": "solar-a"}}
    forged = request(
        ALICE, "DELETE", None, account, resource="serviceaccounts", kind="ServiceAccount", namespace="solar-a"
    )
    assert serviceaccounts.validate(forged, state).reason == "UnknownOperation"
    assert (
        tenants.validate(tenant_review(ALICE, "CONNECT", None, tenant_object("solar")), state).reason
        == "UnknownOperation"
    )
    # the control plane and operators are not tenant users: still untouched
    assert namespaces.validate(request(user("ops"), "CONNECT", ns, ns), state).allowed
    assert namespaces.validate(request(ADMIN, "DELETE", None, ns), state).allowed


def test_a_service_account_of_a_namespace_the_snapshot_does_not_show_yet_cannot_rewrite_its_ownership() -> None:
    """The namespace was created a moment ago: the review's old labels say which tenant it is in."""
    state = fenced_state()
    fresh = namespace("solar-new", {TENANT_LABEL: "solar"})
    dropped = namespace("solar-new", {})
    sa = user("system:serviceaccount:solar-new:deployer", "system:serviceaccounts")
    decision = namespaces.validate(request(sa, "UPDATE", dropped, fresh), state)
    assert not decision.allowed
    assert decision.reason == "TenantLabelImmutable"
    # an account of another namespace the snapshot does not know is still nobody Enclave fences
    other = user("system:serviceaccount:tools:deployer", "system:serviceaccounts")
    assert namespaces.validate(request(other, "UPDATE", dropped, fresh), state).allowed


def test_a_service_account_promoting_in_its_own_new_namespace_is_checked() -> None:
    state = make_state([tenant("solar", "alice", namespaces=["solar-a"])], allow_service_account_promotion=True)
    account = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "b", "namespace": "solar-new"}}
    promoted = {**account, "metadata": {**account["metadata"], "labels": {PROMOTED_LABEL: "true"}}}  # type: ignore[dict-item]
    sa = user("system:serviceaccount:solar-new:deployer", "system:serviceaccounts")
    forged = request(
        sa, "UPDATE", promoted, account, resource="serviceaccounts", kind="ServiceAccount", namespace="solar-new"
    )
    assert not serviceaccounts.validate(forged, state).allowed
