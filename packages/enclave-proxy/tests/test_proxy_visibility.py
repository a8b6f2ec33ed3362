"""Who gets a filtered namespace list, and which namespaces: admission's classification, from the snapshots."""

from __future__ import annotations

from enclave_core.api.configuration import ServiceConfigurationSpec
from enclave_core.api.meta import Entity
from enclave_core.snapshots.configuration import effective
from enclave_core.snapshots.tenancy import TenancySnapshot, TenantView
from enclave_proxy.visibility import Visibility


def tenancy() -> TenancySnapshot:
    return TenancySnapshot(
        tenants=[
            TenantView(name="oil", uid="1", owners=[Entity(kind="User", name="alice")], namespaces=["oil-a", "oil-b"]),
            TenantView(name="gas", uid="2", owners=[Entity(kind="Group", name="gas-team")], namespaces=["gas-a"]),
        ]
    )


def test_owner_sees_the_namespaces_of_every_tenant_it_owns() -> None:
    seen = Visibility(tenancy=tenancy())
    assert seen.namespaces("alice", ("enclave.dev",)) == frozenset({"oil-a", "oil-b"})
    assert seen.namespaces("bob", ("gas-team",)) == frozenset({"gas-a"})
    assert seen.namespaces("carol", ("gas-team", "x")) == frozenset({"gas-a"})


def test_tenant_user_owning_nothing_sees_no_namespace() -> None:
    assert Visibility(tenancy=tenancy()).namespaces("dave", ("enclave.dev",)) == frozenset()


def test_others_are_passed_through() -> None:
    assert Visibility(tenancy=tenancy()).namespaces("admin", ("system:masters",)) is None


def test_administrators_and_ignored_groups_are_passed_through() -> None:
    spec = ServiceConfigurationSpec.model_validate(
        {"administrators": [{"kind": "User", "name": "alice"}], "ignoreUserWithGroups": ["robots"]}
    )
    seen = Visibility(tenancy=tenancy())
    seen.set_config(effective("default", 1, spec))
    assert seen.namespaces("alice", ("enclave.dev",)) is None
    assert seen.namespaces("bob", ("gas-team", "robots")) is None
    assert seen.namespaces("bob", ("gas-team",)) == frozenset({"gas-a"})


def test_configured_users_replace_the_default_group() -> None:
    spec = ServiceConfigurationSpec.model_validate({"users": [{"kind": "Group", "name": "customers"}]})
    seen = Visibility(tenancy=tenancy())
    seen.set_config(effective("default", 1, spec))
    assert seen.namespaces("dave", ("enclave.dev",)) is None
    assert seen.namespaces("dave", ("customers",)) == frozenset()


def test_a_new_snapshot_is_decided_anew() -> None:
    seen = Visibility(tenancy=tenancy())
    assert seen.namespaces("alice", ()) == frozenset({"oil-a", "oil-b"})
    seen.set_tenancy(TenancySnapshot())
    assert seen.namespaces("alice", ()) is None
