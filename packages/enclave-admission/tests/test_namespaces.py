"""Namespace assignment and the tenant fence, decided from hand-built snapshots."""

from __future__ import annotations

import pytest
from admission_helpers import ADMIN, ALICE, apply_patch, make_state, namespace, request, tenant, user

from enclave_admission.namespaces import mutation, validation
from enclave_admission.review import AdmissionRequest, Decision
from enclave_admission.state import State
from enclave_core.api.meta import Entity
from enclave_core.api.names import NATIVE_RULES_LABEL, NODE_SELECTOR_ANNOTATION, TENANT_LABEL
from enclave_core.snapshots.tenancy import TenancySnapshot, TenantView

SOLAR = tenant("solar", "alice", namespaces=["solar-a"], namespace_quota=3)


def owner_ref(view: TenantView) -> dict[str, object]:
    return {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "Tenant",
        "name": view.name,
        "uid": view.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def tenant_namespace(name: str, view: TenantView, **labels: str) -> dict[str, object]:
    return namespace(name, {TENANT_LABEL: view.name, **labels}, ownerReferences=[owner_ref(view)], uid=f"ns-{name}")


def create(state: State, who: tuple[str, tuple[str, ...]], obj: dict[str, object]) -> tuple[Decision, Decision]:
    """Run the mutating then the validating hook, as kube-apiserver does."""
    mutated = mutation.mutate(request(who, "CREATE", obj), state)
    if not mutated.allowed:
        return mutated, mutated
    final = apply_patch(obj, mutated)
    return mutated, validation.validate(request(who, "CREATE", final), state)


def final_object(state: State, who: tuple[str, tuple[str, ...]], obj: dict[str, object]) -> dict[str, object]:
    return apply_patch(obj, mutation.mutate(request(who, "CREATE", obj), state))


# -- assignment --------------------------------------------------------------------------------------------


def test_owner_of_one_tenant_gets_label_and_owner_reference() -> None:
    state = make_state([SOLAR])
    obj = final_object(state, ALICE, namespace("dev"))
    assert obj["metadata"]["labels"] == {TENANT_LABEL: "solar"}  # type: ignore[index]
    assert obj["metadata"]["ownerReferences"] == [owner_ref(SOLAR)]  # type: ignore[index]
    decision = validation.validate(request(ALICE, "CREATE", obj), state)
    assert decision.allowed
    assert decision.reserve == ("solar", "dev")


def test_existing_labels_and_foreign_owner_references_are_kept_but_tenant_references_replaced() -> None:
    state = make_state([SOLAR, tenant("oil", "bob")])
    forged = {"apiVersion": "enclave.dev/v1beta2", "kind": "Tenant", "name": "oil", "uid": "uid-oil"}
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "1"}
    obj = final_object(state, ALICE, namespace("dev", {"team": "a"}, ownerReferences=[forged, other]))
    assert obj["metadata"]["labels"] == {"team": "a", TENANT_LABEL: "solar"}  # type: ignore[index]
    assert obj["metadata"]["ownerReferences"] == [other, owner_ref(SOLAR)]  # type: ignore[index]


def test_label_chooses_among_owned_tenants() -> None:
    state = make_state([SOLAR, tenant("wind", "alice")])
    _, decision = create(state, ALICE, namespace("anything", {TENANT_LABEL: "wind"}))
    assert decision.allowed
    assert decision.tenant == "wind"


def test_label_of_a_tenant_not_owned_is_refused_with_the_owned_list() -> None:
    state = make_state([SOLAR, tenant("oil", "bob")])
    mutated, _ = create(state, ALICE, namespace("x", {TENANT_LABEL: "oil"}))
    assert not mutated.allowed
    assert mutated.reason == "TenantNotOwned"
    assert "oil" in mutated.message
    assert "solar" in mutated.message


def test_ambiguous_name_is_refused_listing_tenants() -> None:
    state = make_state([SOLAR, tenant("wind", "alice")])
    mutated, _ = create(state, ALICE, namespace("dev"))
    assert not mutated.allowed
    assert mutated.reason == "AmbiguousTenant"
    assert "solar, wind" in mutated.message


def test_longest_tenant_prefix_wins() -> None:
    state = make_state([tenant("a", "alice"), tenant("a-b", "alice"), tenant("c", "alice")])
    _, decision = create(state, ALICE, namespace("a-b-dev"))
    assert decision.allowed
    assert decision.tenant == "a-b"
    _, decision = create(state, ALICE, namespace("a-dev"))
    assert decision.tenant == "a"


def test_validation_refuses_an_unassigned_namespace_when_mutation_did_not_run() -> None:
    state = make_state([SOLAR])
    decision = validation.validate(request(ALICE, "CREATE", namespace("dev")), state)
    assert not decision.allowed
    assert decision.reason == "NotAssigned"


def test_tenant_user_without_tenants_cannot_create() -> None:
    state = make_state([SOLAR])
    mutated, _ = create(state, user("carol", "enclave.dev"), namespace("carol-ns"))
    assert not mutated.allowed
    assert mutated.reason == "NoTenant"


def test_group_owner_and_user_set_from_config() -> None:
    team = tenant("oil", extra_owners=[Entity(kind="Group", name="oil-team")])
    state = make_state([team], users=[{"kind": "Group", "name": "oil-team"}])
    _, decision = create(state, user("dave", "oil-team"), namespace("oil-dev"))
    assert decision.allowed
    assert decision.tenant == "oil"


def test_promoted_service_account_owner_creates_in_its_tenant() -> None:
    robot = "system:serviceaccount:solar-a:robot"
    view = tenant("solar", "alice", namespaces=["solar-a"], extra_owners=[Entity(kind="ServiceAccount", name=robot)])
    state = make_state([view])
    _, decision = create(state, (robot, ("system:serviceaccounts",)), namespace("solar-robot"))
    assert decision.allowed
    assert decision.tenant == "solar"


def test_everyone_else_passes_untouched() -> None:
    state = make_state([SOLAR])
    for who in (user("eve"), user("ignored", "enclave.dev", "robots")):
        state = make_state([SOLAR], ignore_user_with_groups=["robots"])
        obj = namespace("anything")
        assert mutation.mutate(request(who, "CREATE", obj), state) == Decision.allow("NotAssigned")
        assert validation.validate(request(who, "CREATE", obj), state).allowed
        update = validation.validate(
            request(who, "UPDATE", namespace("solar-a"), tenant_namespace("solar-a", SOLAR)), state
        )
        assert update.allowed


# -- rules -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("global_prefix", "tenant_prefix", "name", "allowed"),
    [
        (True, None, "dev", False),
        (True, None, "solar-dev", True),
        (False, True, "dev", False),
        (True, False, "dev", True),
        (False, None, "dev", True),
    ],
)
def test_force_tenant_prefix(global_prefix: bool, tenant_prefix: bool | None, name: str, allowed: bool) -> None:
    view = tenant("solar", "alice", force_tenant_prefix=tenant_prefix)
    state = make_state([view], force_tenant_prefix=global_prefix)
    _, decision = create(state, ALICE, namespace(name))
    assert decision.allowed is allowed
    if not allowed:
        assert decision.reason == "TenantPrefixRequired"
        assert "'solar-'" in decision.message


def test_protected_namespace_regex() -> None:
    state = make_state([SOLAR], protected_namespace_regex="^.*-system$")
    _, decision = create(state, ALICE, namespace("solar-system"))
    assert not decision.allowed
    assert decision.reason == "ProtectedNamespace"
    assert "^.*-system$" in decision.message
    _, decision = create(state, ALICE, namespace("solar-systems"))
    assert decision.allowed


def test_quota_counts_snapshot_and_this_replicas_admissions() -> None:
    view = tenant("solar", "alice", namespaces=["solar-a", "solar-b"], namespace_quota=3)
    state = make_state([view])
    _, third = create(state, ALICE, namespace("solar-c"))
    assert third.allowed
    assert third.reserve is not None
    state.reservations.add(*third.reserve)
    _, fourth = create(state, ALICE, namespace("solar-d"))
    assert not fourth.allowed
    assert fourth.reason == "NamespaceQuotaExceeded"
    assert "3 of 3" in fourth.message
    # the snapshot catches up: the reservation is dropped, the count stays 3
    # a new snapshot object, as the subscription builds one (model_copy would carry the old cached indexes)
    state.set_tenancy(
        TenancySnapshot(tenants=[view.model_copy(update={"namespaces": ["solar-a", "solar-b", "solar-c"]})])
    )
    assert state.namespace_count(state.tenancy.by_name["solar"]) == 3


def test_reservations_expire() -> None:
    view = tenant("solar", "alice", namespace_quota=1)
    state = make_state([view])
    state.reservations.add("solar", "solar-x", now=0.0)
    assert state.reservations.pending(view, now=1.0) == {"solar-x"}
    assert state.reservations.pending(view, now=31.0) == set()


def test_cordoned_tenant_refuses_creation_and_deletion() -> None:
    view = tenant("solar", "alice", namespaces=["solar-a"], cordoned=True)
    state = make_state([view])
    _, decision = create(state, ALICE, namespace("solar-new"))
    assert decision.reason == "TenantCordoned"
    gone = validation.validate(request(ALICE, "DELETE", None, tenant_namespace("solar-a", view)), state)
    assert not gone.allowed
    assert gone.reason == "TenantCordoned"


def test_forbidden_labels_and_annotations() -> None:
    view = tenant(
        "solar",
        "alice",
        namespaces=["solar-a"],
        forbidden_labels={"denied": ["tier"], "denied_regex": "^secret\\."},
        forbidden_annotations={"denied_regex": "billing"},
    )
    state = make_state([view])
    for labels, extra in (({"tier": "gold"}, {}), ({"secret.io/x": "1"}, {}), ({}, {"x/billing-code": "1"})):
        obj = namespace("solar-x", labels)
        if extra:
            obj["metadata"]["annotations"] = extra
        _, decision = create(state, ALICE, obj)
        assert not decision.allowed
        assert decision.reason == "ForbiddenMetadata"
    old = tenant_namespace("solar-a", view)
    new = tenant_namespace("solar-a", view, tier="gold")
    assert validation.validate(request(ALICE, "UPDATE", new, old), state).reason == "ForbiddenMetadata"
    ok = tenant_namespace("solar-a", view, team="x")
    assert validation.validate(request(ALICE, "UPDATE", ok, old), state).allowed


# -- no hijacking ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("sub_resource", ["", "status", "finalize"])
def test_tenant_user_cannot_adopt_an_unowned_namespace(sub_resource: str) -> None:
    state = make_state([SOLAR])
    old = namespace("shared", {}, uid="u")
    new = apply_patch(old, [{"op": "add", "path": "/metadata/labels/enclave.dev~1tenant", "value": "solar"}])
    decision = validation.validate(request(ALICE, "UPDATE", new, old, sub_resource=sub_resource), state)
    assert not decision.allowed
    assert decision.reason == "NamespaceNotOwned"


@pytest.mark.parametrize("target", ["kube-system", "default"])
def test_tenant_user_cannot_touch_system_namespaces(target: str) -> None:
    state = make_state([SOLAR])
    old = namespace(target, {"kubernetes.io/metadata.name": target})
    new = namespace(target, {"kubernetes.io/metadata.name": target, "x": "y"})
    assert validation.validate(request(ALICE, "UPDATE", new, old), state).reason == "NamespaceNotOwned"
    assert validation.validate(request(ALICE, "DELETE", None, old), state).reason == "NamespaceNotOwned"


@pytest.mark.parametrize("sub_resource", ["", "status", "finalize"])
def test_tenant_user_cannot_move_or_drop_ownership(sub_resource: str) -> None:
    wind = tenant("wind", "alice")
    state = make_state([SOLAR, wind])
    old = tenant_namespace("solar-a", SOLAR)
    moved = tenant_namespace("solar-a", wind)
    dropped = namespace("solar-a", {}, uid="ns-solar-a")
    refs_only = namespace("solar-a", {TENANT_LABEL: "solar"}, uid="ns-solar-a")
    for new, reason in (
        (moved, "TenantLabelImmutable"),
        (dropped, "TenantLabelImmutable"),
        (refs_only, "OwnerReferencesImmutable"),
    ):
        decision = validation.validate(request(ALICE, "UPDATE", new, old, sub_resource=sub_resource), state)
        assert not decision.allowed
        assert decision.reason == reason


def test_tenant_user_cannot_touch_another_tenants_namespace() -> None:
    oil = tenant("oil", "bob", namespaces=["oil-a"])
    state = make_state([SOLAR, oil])
    old = tenant_namespace("oil-a", oil)
    new = tenant_namespace("oil-a", oil, x="y")
    decision = validation.validate(request(ALICE, "UPDATE", new, old), state)
    assert decision.reason == "NamespaceNotOwned"
    assert "oil" in decision.message


def test_tenant_service_account_cannot_change_its_namespace_ownership_or_node_selector() -> None:
    sa = ("system:serviceaccount:solar-a:deployer", ("system:serviceaccounts", "system:serviceaccounts:solar-a"))
    view = tenant("solar", "alice", namespaces=["solar-a"])
    state = make_state([view])
    old = tenant_namespace("solar-a", view)
    old["metadata"]["annotations"] = {NODE_SELECTOR_ANNOTATION: "pool=solar"}  # type: ignore[index]
    unlabelled = apply_patch(old, [{"op": "remove", "path": "/metadata/labels/enclave.dev~1tenant"}])
    no_refs = apply_patch(old, [{"op": "remove", "path": "/metadata/ownerReferences"}])
    selector = apply_patch(
        old, [{"op": "add", "path": "/metadata/annotations", "value": {NODE_SELECTOR_ANNOTATION: ""}}]
    )
    benign = apply_patch(old, [{"op": "add", "path": "/metadata/labels/team", "value": "x"}])
    assert validation.validate(request(sa, "UPDATE", unlabelled, old), state).reason == "TenantLabelImmutable"
    assert validation.validate(request(sa, "UPDATE", no_refs, old), state).reason == "OwnerReferencesImmutable"
    assert validation.validate(request(sa, "UPDATE", selector, old), state).reason == "NodeSelectorImmutable"
    assert validation.validate(request(sa, "UPDATE", benign, old), state).allowed
    created = validation.validate(request(sa, "CREATE", namespace("x", {TENANT_LABEL: "solar"})), state)
    assert created.reason == "TenantNotOwned"


def test_owner_may_update_and_delete_own_namespace() -> None:
    state = make_state([SOLAR])
    old = tenant_namespace("solar-a", SOLAR)
    new = tenant_namespace("solar-a", SOLAR, team="x")
    assert validation.validate(request(ALICE, "UPDATE", new, old), state).allowed
    assert validation.validate(request(ALICE, "DELETE", None, old), state).allowed


# -- administrators ----------------------------------------------------------------------------------------


def test_administrator_without_label_leaves_namespace_unassigned() -> None:
    state = make_state([SOLAR])
    mutated, decision = create(state, ADMIN, namespace("ops"))
    assert mutated.patch == ()
    assert decision.allowed


def test_administrator_assigns_migrates_and_unassigns_through_the_label() -> None:
    oil = tenant("oil", "bob")
    state = make_state([SOLAR, oil])
    _, created = create(state, ADMIN, namespace("ops", {TENANT_LABEL: "oil"}))
    assert created.allowed
    assert created.tenant == "oil"
    old = tenant_namespace("ops", oil)
    moved = tenant_namespace("ops", oil)
    moved["metadata"]["labels"][TENANT_LABEL] = "solar"  # type: ignore[index]
    mutated = mutation.mutate(request(ADMIN, "UPDATE", moved, old), state)
    final = apply_patch(moved, mutated)
    assert final["metadata"]["ownerReferences"] == [owner_ref(SOLAR)]
    assert validation.validate(request(ADMIN, "UPDATE", final, old), state).allowed
    unlabelled = apply_patch(old, [{"op": "remove", "path": "/metadata/labels/enclave.dev~1tenant"}])
    final = apply_patch(unlabelled, mutation.mutate(request(ADMIN, "UPDATE", unlabelled, old), state))
    assert "ownerReferences" not in final["metadata"]
    assert validation.validate(request(ADMIN, "UPDATE", final, old), state).allowed


def test_administrator_label_naming_no_tenant_is_refused() -> None:
    state = make_state([SOLAR])
    _, decision = create(state, ADMIN, namespace("ops", {TENANT_LABEL: "nope"}))
    assert not decision.allowed
    assert decision.reason == "UnknownTenant"


def test_administrator_moving_into_a_full_tenant_is_refused() -> None:
    full = tenant("solar", "alice", namespaces=["solar-a"], namespace_quota=1)
    oil = tenant("oil", "bob", namespaces=["ops"])
    state = make_state([full, oil])
    old = tenant_namespace("ops", oil)
    moved = apply_patch(old, [{"op": "add", "path": "/metadata/labels/enclave.dev~1tenant", "value": "solar"}])
    final = apply_patch(moved, mutation.mutate(request(ADMIN, "UPDATE", moved, old), state))
    decision = validation.validate(request(ADMIN, "UPDATE", final, old), state)
    assert decision.reason == "NamespaceQuotaExceeded"


def test_request_parsing_keeps_subresource_and_dry_run() -> None:
    parsed = request(ALICE, "UPDATE", namespace("a"), namespace("a"), sub_resource="finalize", dry_run=True)
    assert isinstance(parsed, AdmissionRequest)
    assert parsed.sub_resource == "finalize"
    assert parsed.dry_run


# -- force-finalizing ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("finalizers", [[], ["kubernetes", "example.com/hold"]])
def test_tenant_user_cannot_change_spec_finalizers(finalizers: list[str]) -> None:
    state = make_state([SOLAR])
    old = {**tenant_namespace("solar-a", SOLAR), "spec": {"finalizers": ["kubernetes"]}}
    new = {**old, "spec": {"finalizers": finalizers}}
    decision = validation.validate(request(ALICE, "UPDATE", new, old, sub_resource="finalize"), state)
    assert not decision.allowed
    assert decision.reason == "NamespaceFinalizersImmutable"
    unchanged = validation.validate(request(ALICE, "UPDATE", old, old, sub_resource="finalize"), state)
    assert unchanged.allowed
    assert validation.validate(request(ADMIN, "UPDATE", new, old, sub_resource="finalize"), state).allowed


# -- the native-rules label --------------------------------------------------------------------------------


@pytest.mark.parametrize("sub_resource", ["", "status"])
def test_tenant_users_cannot_set_change_or_remove_the_native_rules_label(sub_resource: str) -> None:
    """With it the rules hooks skip the namespace: set by a tenant, its rules would be off."""
    sa = ("system:serviceaccount:solar-a:deployer", ("system:serviceaccounts", "system:serviceaccounts:solar-a"))
    state = make_state([SOLAR])
    old = tenant_namespace("solar-a", SOLAR)
    native = tenant_namespace("solar-a", SOLAR, **{NATIVE_RULES_LABEL: "true"})
    other = tenant_namespace("solar-a", SOLAR, **{NATIVE_RULES_LABEL: "false"})
    for who in (ALICE, sa):
        for before, after in ((old, native), (native, other), (native, old)):
            decision = validation.validate(request(who, "UPDATE", after, before, sub_resource=sub_resource), state)
            assert (decision.allowed, decision.reason) == (False, "NativeRulesLabel")
    unchanged = tenant_namespace("solar-a", SOLAR, **{NATIVE_RULES_LABEL: "true", "team": "x"})
    assert validation.validate(request(ALICE, "UPDATE", unchanged, native), state).allowed


def test_tenant_user_cannot_create_a_namespace_with_the_native_rules_label() -> None:
    _, decision = create(make_state([SOLAR]), ALICE, namespace("dev", {NATIVE_RULES_LABEL: "true"}))
    assert (decision.allowed, decision.reason) == (False, "NativeRulesLabel")


def test_a_namespace_arriving_in_a_tenant_may_not_bring_the_native_rules_label() -> None:
    """Not even an administrator's: the new tenant's policies do not cover it yet."""
    wind = tenant("wind", "bob")
    state = make_state([SOLAR, wind])
    old = tenant_namespace("solar-a", SOLAR, **{NATIVE_RULES_LABEL: "true"})
    moved = tenant_namespace("solar-a", wind, **{NATIVE_RULES_LABEL: "true"})
    assert validation.validate(request(ADMIN, "UPDATE", moved, old), state).reason == "NativeRulesLabel"
    assert validation.validate(request(ADMIN, "UPDATE", tenant_namespace("solar-a", wind), old), state).allowed
