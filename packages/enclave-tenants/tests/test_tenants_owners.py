"""Owner resolution: spec owners, TenantOwners by label and by matchOwners, promoted service accounts."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from tenants_helpers import tenant, tenant_owner

from enclave_core.api.meta import Entity
from enclave_core.api.tenancy import Tenant, TenantOwner
from enclave_tenants.owners import identity, listed, resolve_owners, selects, unlisted_owners
from enclave_tenants.policy import Policy

PROMOTING = Policy(allow_promotion=True, promotion_cluster_roles=["prov", "del"])


def resolve(
    spec: dict[str, Any],
    owners: Sequence[dict[str, Any]] = (),
    promoted: Sequence[tuple[str, str]] = (),
    policy: Policy | None = None,
) -> tuple[list[tuple[str, str, tuple[str, ...]]], list[str]]:
    found, problems = resolve_owners(
        Tenant.model_validate(tenant("solar", **spec)),
        [TenantOwner.model_validate(o) for o in owners],
        list(promoted),
        policy or Policy(),
    )
    return [(o.kind, o.name, o.cluster_roles) for o in found], problems


def test_spec_owners_get_default_roles() -> None:
    owners, problems = resolve({"owners": [{"kind": "User", "name": "alice"}]})
    assert owners == [("User", "alice", ("admin", "enclave-namespace-deleter"))]
    assert problems == []


def test_tenant_owner_joins_by_tenant_label_only_its_tenant() -> None:
    joined = tenant_owner("bob", "User", "bob", {"enclave.dev/tenant": "solar"}, clusterRoles=["edit"])
    elsewhere = tenant_owner("carol", "User", "carol", {"enclave.dev/tenant": "oil"})
    owners, _ = resolve({}, [joined, elsewhere])
    assert owners == [("User", "bob", ("edit",))]


def test_tenant_owner_joins_by_match_owners_selectors_ored() -> None:
    spec = {
        "permissions": {
            "matchOwners": [
                {"matchLabels": {"team": "blue"}},
                {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]},
            ]
        }
    }
    blue = tenant_owner("a", "Group", "blue-team", {"team": "blue"})
    gold = tenant_owner("b", "User", "dave", {"tier": "gold"})
    red = tenant_owner("c", "User", "eve", {"team": "red"})
    owners, _ = resolve(spec, [red, gold, blue])
    assert [(kind, name) for kind, name, _ in owners] == [("Group", "blue-team"), ("User", "dave")]


def test_same_owner_from_two_sources_merges_roles_in_order() -> None:
    spec = {"owners": [{"kind": "User", "name": "alice", "clusterRoles": ["admin"]}]}
    again = tenant_owner("alice", "User", "alice", {"enclave.dev/tenant": "solar"}, clusterRoles=["view", "admin"])
    owners, _ = resolve(spec, [again])
    assert owners == [("User", "alice", ("admin", "view"))]


def test_promoted_accounts_count_only_when_promotion_is_allowed() -> None:
    promoted = [("solar-dev", "ci")]
    assert resolve({}, promoted=promoted)[0] == []
    owners, _ = resolve({}, promoted=promoted, policy=PROMOTING)
    assert owners == [("ServiceAccount", "system:serviceaccount:solar-dev:ci", ("prov", "del"))]


def test_promoted_account_that_is_also_a_spec_owner_is_not_promoted_only() -> None:
    owners = [{"kind": "ServiceAccount", "name": "solar-dev:ci", "clusterRoles": ["admin"]}]
    found, _ = resolve_owners(
        Tenant.model_validate(tenant("solar", owners=owners)), [], [("solar-dev", "ci")], PROMOTING
    )
    assert len(found) == 1
    assert found[0].cluster_roles == ("admin", "prov", "del")
    assert not found[0].promoted_only


def test_malformed_service_account_owner_is_reported_and_skipped() -> None:
    spec = {"owners": [{"kind": "ServiceAccount", "name": "ci"}, {"kind": "User", "name": "alice"}]}
    owners, problems = resolve(spec)
    assert [name for _, name, _ in owners] == ["alice"]
    assert problems == ["spec.owners[0]: service account 'ci' must be written system:serviceaccount:<namespace>:<name>"]


@pytest.mark.parametrize(
    ("labels", "selected"),
    [({"enclave.dev/tenant": "solar"}, True), ({"enclave.dev/tenant": "oil"}, False), ({}, False), (None, False)],
)
def test_selects_by_label_without_permissions(labels: dict[str, str] | None, selected: bool) -> None:
    assert selects("solar", None, labels) is selected


def test_identity_merges_both_service_account_spellings() -> None:
    assert identity("ServiceAccount", "ns:sa") == identity("ServiceAccount", "system:serviceaccount:ns:sa")
    assert identity("User", "ns:sa") != identity("ServiceAccount", "ns:sa")


def _entity(kind: str, name: str) -> Entity:
    return Entity.model_validate({"kind": kind, "name": name})


@pytest.mark.parametrize(
    ("owner", "users", "is_listed"),
    [
        (("Group", "team"), [("Group", "team")], True),
        (("Group", "team"), [("User", "team")], False),  # a user named like the group is not the group
        (("User", "alice"), [("User", "alice")], True),
        (("User", "alice"), [("Group", "enclave.dev")], False),  # her groups are known only per request
        (("User", "alice"), [("Group", "alice")], False),
        (("ServiceAccount", "system:serviceaccount:ci:bot"), [("ServiceAccount", "ci:bot")], True),
        (("ServiceAccount", "system:serviceaccount:ci:bot"), [("Group", "system:serviceaccounts:ci")], True),
        (("ServiceAccount", "system:serviceaccount:ci:bot"), [("Group", "system:serviceaccounts")], True),
        (("ServiceAccount", "system:serviceaccount:ci:bot"), [("Group", "enclave.dev")], False),
        (("ServiceAccount", "system:serviceaccount:ci:bot"), [("ServiceAccount", "ci:other")], False),
    ],
)
def test_an_owner_is_listed_only_when_users_name_it(
    owner: tuple[str, str], users: list[tuple[str, str]], is_listed: bool
) -> None:
    assert listed(_entity(*owner), [_entity(*u) for u in users]) is is_listed


def test_unlisted_owners_keep_owner_order() -> None:
    owners, _ = resolve_owners(
        Tenant.model_validate(
            tenant(
                "solar",
                owners=[
                    {"kind": "User", "name": "zed"},
                    {"kind": "Group", "name": "enclave.dev"},
                    {"kind": "User", "name": "alice"},
                ],
            )
        ),
        [],
        [],
        Policy(),
    )
    users = [_entity("Group", "enclave.dev"), _entity("User", "alice")]
    assert unlisted_owners(owners, users) == [_entity("User", "zed")]
