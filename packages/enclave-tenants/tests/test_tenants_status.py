"""Tenant and TenantOwner status: counts, owners, conditions that keep their transition time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from tenants_helpers import tenant, tenant_owner

from enclave_core.api.meta import Entity
from enclave_tenants.owners import Owner
from enclave_tenants.status import Problem, changed, owner_status, tenant_status

NOW = datetime(2025, 5, 1, 12, 0, tzinfo=UTC)
ALICE = Owner(kind="User", name="alice", cluster_roles=("admin",), sources=("Tenant",))


def conditions(status: dict[str, object]) -> dict[str, dict[str, object]]:
    return {c["type"]: c for c in status["conditions"]}  # type: ignore[attr-defined]


def test_tenant_status_counts_sorts_and_lists_owners() -> None:
    raw = tenant("solar", generation=3)
    status = tenant_status(raw, namespaces=["solar-b", "solar-a"], owners=[ALICE], cordoned=False, problems=[], now=NOW)
    assert status["size"] == 2
    assert status["namespaces"] == ["solar-a", "solar-b"]
    assert status["owners"] == [{"kind": "User", "name": "alice", "clusterRoles": ["admin"]}]
    assert status["observedGeneration"] == 3
    ready, cordoned = conditions(status)["Ready"], conditions(status)["Cordoned"]
    assert (ready["status"], ready["reason"], ready["observedGeneration"]) == ("True", "Active", 3)
    assert (cordoned["status"], cordoned["reason"]) == ("False", "NotCordoned")
    assert ready["lastTransitionTime"] == "2025-05-01T12:00:00Z"


def test_empty_tenant_has_size_zero_and_empty_list() -> None:
    status = tenant_status(tenant("t"), namespaces=[], owners=[], cordoned=True, problems=[], now=NOW)
    assert (status["size"], status["namespaces"], status["owners"]) == (0, [], [])
    assert conditions(status)["Cordoned"]["status"] == "True"


def test_problems_make_ready_false_with_the_first_reason() -> None:
    problems = [
        Problem(reason="InvalidOwner", message="spec.owners[0]: bad"),
        Problem(reason="ApplyFailed", message="x"),
    ]
    status = tenant_status(tenant("t"), namespaces=[], owners=[], cordoned=False, problems=problems, now=NOW)
    ready = conditions(status)["Ready"]
    assert (ready["status"], ready["reason"], ready["message"]) == ("False", "InvalidOwner", "spec.owners[0]: bad; x")


def test_unchanged_status_is_not_rewritten_and_keeps_transition_time() -> None:
    raw = tenant("t")
    first = tenant_status(raw, namespaces=["a"], owners=[], cordoned=False, problems=[], now=NOW)
    raw["status"] = first
    later = NOW + timedelta(hours=1)
    second = tenant_status(raw, namespaces=["a"], owners=[], cordoned=False, problems=[], now=later)
    assert not changed(raw, second)
    third = tenant_status(raw, namespaces=["a"], owners=[], cordoned=True, problems=[], now=later)
    assert changed(raw, third)
    assert conditions(third)["Ready"]["lastTransitionTime"] == "2025-05-01T12:00:00Z"
    assert conditions(third)["Cordoned"]["lastTransitionTime"] == "2025-05-01T13:00:00Z"


def test_owner_status_lists_sorted_tenants() -> None:
    raw = tenant_owner("bob", "User", "bob")
    status = owner_status(raw, tenants=["solar", "oil"], problems=[], now=NOW)
    assert status["tenants"] == ["oil", "solar"]
    assert conditions(status)["Ready"]["status"] == "True"
    assert status["observedGeneration"] == 1


def test_owners_outside_users_are_written_and_an_empty_list_clears_them() -> None:
    raw = tenant("t")
    bob = Entity(kind="User", name="bob")
    status = tenant_status(raw, namespaces=[], owners=[ALICE], cordoned=False, problems=[], now=NOW, unlisted=[bob])
    assert status["unlistedOwners"] == [{"kind": "User", "name": "bob"}]
    raw["status"] = status
    cleared = tenant_status(raw, namespaces=[], owners=[ALICE], cordoned=False, problems=[], now=NOW)
    assert cleared["unlistedOwners"] == []  # named, so the merge patch replaces the stored list
    assert changed(raw, cleared)
