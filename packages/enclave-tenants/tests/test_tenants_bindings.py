"""RoleBinding names and bodies: deterministic, readable, never shared by two owners."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from enclave_core.api.tenancy import AdditionalRoleBinding
from enclave_tenants.bindings import (
    Grant,
    additional_binding_name,
    binding_templates,
    desired_bindings,
    drifted,
    owner_binding_name,
)
from enclave_tenants.owners import Owner


def owner(kind: str, name: str, *roles: str) -> Owner:
    return Owner(kind=kind, name=name, cluster_roles=roles, sources=("Tenant",))


def test_readable_names() -> None:
    assert owner_binding_name("User", "alice", "admin") == "enclave-user-alice-admin"
    assert owner_binding_name("Group", "devs", "edit") == "enclave-group-devs-edit"
    sa = owner_binding_name("ServiceAccount", "system:serviceaccount:ci:deployer", "admin")
    assert sa == "enclave-serviceaccount-ci.deployer-admin"
    assert owner_binding_name("ServiceAccount", "ci:deployer", "admin") == sa
    assert additional_binding_name("view") == "enclave-additional-view"


def test_lossy_names_get_a_hash_that_tells_owners_apart() -> None:
    at = owner_binding_name("User", "alice@example.com", "admin")
    dash = owner_binding_name("User", "alice-example.com", "admin")
    assert at.startswith("enclave-user-alice-example.com-admin-")
    assert dash == "enclave-user-alice-example.com-admin"
    assert at != dash
    assert owner_binding_name("User", "Alice", "admin") != owner_binding_name("User", "alice", "admin")
    role = owner_binding_name("Group", "g", "system:aggregate-to-edit")
    assert role.startswith("enclave-group-g-system-aggregate-to-edit-")


@given(st.text(min_size=1, max_size=600), st.text(min_size=1, max_size=300))
def test_names_are_bounded_and_deterministic(name: str, role: str) -> None:
    first = owner_binding_name("User", name, role)
    assert len(first) <= 253
    assert first == owner_binding_name("User", name, role)
    assert "/" not in first
    assert "%" not in first


def test_one_binding_per_owner_and_role_plus_administrators() -> None:
    found = desired_bindings(
        "solar-dev",
        "solar",
        [owner("User", "alice", "admin", "enclave-namespace-deleter"), owner("Group", "devs", "edit")],
        administrators=[],
    )
    assert sorted(found) == [
        "enclave-group-devs-edit",
        "enclave-user-alice-admin",
        "enclave-user-alice-enclave-namespace-deleter",
    ]
    body = found["enclave-user-alice-admin"]
    assert body["metadata"]["namespace"] == "solar-dev"
    assert body["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "enclave-tenants",
        "enclave.dev/tenant": "solar",
    }
    assert body["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"}
    assert body["subjects"] == [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}]
    sa = desired_bindings("ns", "t", [owner("ServiceAccount", "system:serviceaccount:ci:bot", "admin")])
    assert sa["enclave-serviceaccount-ci.bot-admin"]["subjects"] == [
        {"kind": "ServiceAccount", "name": "bot", "namespace": "ci"}
    ]


def test_additional_bindings_group_subjects_by_role() -> None:
    additional = [
        AdditionalRoleBinding.model_validate(
            {
                "clusterRoleName": "view",
                "subjects": [{"kind": "Group", "name": "auditors", "apiGroup": "rbac.authorization.k8s.io"}],
            }
        ),
        AdditionalRoleBinding.model_validate(
            {
                "clusterRoleName": "view",
                "subjects": [{"kind": "User", "name": "carol"}, {"kind": "Group", "name": "auditors"}],
            }
        ),
    ]
    found = desired_bindings("ns", "t", [], additional)
    assert list(found) == ["enclave-additional-view"]
    assert [s["name"] for s in found["enclave-additional-view"]["subjects"]] == ["auditors", "carol"]


def test_colliding_readable_names_both_get_hashed() -> None:
    found = desired_bindings("ns", "t", [owner("User", "a-b", "c"), owner("User", "a", "b-c")])
    assert len(found) == 2
    assert "enclave-user-a-b-c" not in found
    assert {b["roleRef"]["name"] for b in found.values()} == {"c", "b-c"}


def test_drift_compares_what_the_apiserver_stores() -> None:
    desired = desired_bindings("ns", "t", [owner("ServiceAccount", "ci:bot", "admin")])[
        "enclave-serviceaccount-ci.bot-admin"
    ]
    stored = {
        **desired,
        "metadata": {**desired["metadata"], "labels": {**desired["metadata"]["labels"], "extra": "x"}},
        "subjects": [{"kind": "ServiceAccount", "name": "bot", "namespace": "ci", "apiGroup": ""}],
    }
    assert not drifted(stored, desired)
    assert drifted(None, desired)
    assert drifted({**stored, "subjects": []}, desired)
    assert drifted({**stored, "roleRef": {**stored["roleRef"], "name": "view"}}, desired)
    assert drifted({**stored, "metadata": {**stored["metadata"], "labels": {}}}, desired)


def test_grants_bind_enclave_accounts_in_every_tenant_namespace() -> None:
    """A component's namespace grant is one RoleBinding per granted role, to its account of the release namespace,
    next to the owners' bindings and named apart from them."""
    grants = [
        Grant.parse("enclave-tenants-managed-metadata=enclave-tenants", "enclave-system"),
        Grant.parse("enclave-replication-impersonate=enclave-replication", "enclave-system"),
    ]
    templates = binding_templates([owner("User", "alice", "admin")], grants=grants)
    assert templates["enclave-component-enclave-replication-impersonate"] == (
        "enclave-replication-impersonate",
        [{"kind": "ServiceAccount", "name": "enclave-replication", "namespace": "enclave-system"}],
    )
    assert templates["enclave-component-enclave-tenants-managed-metadata"][0] == "enclave-tenants-managed-metadata"
    assert "enclave-user-alice-admin" in templates
    assert len(templates) == 3


@pytest.mark.parametrize("text", ["", "role", "=account", "role=", "role=other/account", "role=system:x"])
def test_a_grant_names_a_role_and_an_account_of_the_release_namespace(text: str) -> None:
    with pytest.raises(ValueError, match="expected <clusterrole>=<service account"):
        Grant.parse(text, "enclave-system")
