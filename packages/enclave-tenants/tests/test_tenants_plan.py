"""The whole compilation: namespaces to tenants, frozen namespaces, pruning, owners' tenants, the snapshot."""

from __future__ import annotations

from tenants_helpers import namespace, service_account, tenant, tenant_owner

from enclave_core.api.meta import Entity
from enclave_core.snapshots.tenancy import TenancySnapshot
from enclave_tenants.plan import build_plan, stale_bindings
from enclave_tenants.policy import Policy


def binding(ns: str, name: str) -> dict[str, object]:
    return {"metadata": {"name": name, "namespace": ns, "labels": {"app.kubernetes.io/managed-by": "enclave-tenants"}}}


SOLAR = tenant(
    "solar",
    owners=[{"kind": "User", "name": "alice"}],
    namespaceOptions={"quota": 3, "forbiddenLabels": {"denied": ["x"], "deniedRegex": "^y"}},
    cordoned=True,
    preventDeletion=True,
    forceTenantPrefix=True,
    nodeSelector={"pool": "solar"},
)


def test_namespaces_are_grouped_by_label_and_unknown_tenants_ignored() -> None:
    plan = build_plan(
        [SOLAR],
        [],
        [
            namespace("solar-a", "solar"),
            namespace("solar-b", "solar", terminating=True),
            namespace("x", "nope"),
            namespace("free"),
        ],
        [],
        Policy(),
    )
    assert plan.tenants["solar"].namespaces == ["solar-a", "solar-b"]
    assert plan.namespace_tenant == {"solar-a": "solar", "solar-b": "solar"}
    assert set(plan.namespace_bodies) == {"solar-a"}  # nothing is written into a terminating namespace
    assert "solar-b" in plan.frozen
    assert sorted(plan.bindings["solar-a"]) == [
        "enclave-user-alice-admin",
        "enclave-user-alice-enclave-namespace-deleter",
    ]


def test_snapshot_carries_what_admission_enforces() -> None:
    plan = build_plan([SOLAR], [], [namespace("solar-a", "solar")], [], Policy())
    view = TenancySnapshot.model_validate_json(plan.snapshot.model_dump_json()).by_name["solar"]
    assert view.uid == "uid-solar"
    assert view.owners == [Entity(kind="User", name="alice")]
    assert view.namespaces == ["solar-a"]
    assert (view.namespace_quota, view.cordoned, view.prevent_deletion, view.force_tenant_prefix) == (
        3,
        True,
        True,
        True,
    )
    assert view.node_selector == {"pool": "solar"}
    assert view.forbidden_labels.denied == ["x"]
    assert view.forbidden_labels.denied_regex == "^y"


def test_snapshot_carries_what_the_proxy_shows() -> None:
    """enclave-proxy reads the tenant's spec.proxy and the classes its allow rules name from the Tenancy stream."""

    def placement(action: str, **classes: object) -> dict[str, object]:
        return {"enforce": {"action": action, "workloads": {"placement": classes}}}

    rules = [
        placement("allow", priorityClasses=[{"exact": ["high"]}], runtimeClasses=[{"exp": "^gvisor-.*$"}]),
        placement("deny", priorityClasses=[{"exact": ["system-critical"]}]),
        placement("audit", runtimeClasses=[{"exact": ["kata"]}]),
    ]
    proxy = {"kinds": [{"kind": "StorageClasses", "names": [{"exact": ["gold"]}]}]}
    plan = build_plan(
        [tenant("oil", owners=[{"kind": "User", "name": "bob"}], rules=rules, proxy=proxy)], [], [], [], Policy()
    )
    view = TenancySnapshot.parse_item(plan.snapshot.items()["oil"])
    assert [entry.kind for entry in view.proxy] == ["StorageClasses"]
    assert view.proxy[0].names is not None
    assert view.proxy[0].names[0].exact == ["gold"]
    assert [matcher.exact for matcher in view.priority_classes] == [["high"]], "deny and audit rules grant nothing"
    assert [matcher.exp for matcher in view.runtime_classes] == ["^gvisor-.*$"]


def test_administrators_are_bound_but_not_owners() -> None:
    policy = Policy(administrators=[Entity(kind="Group", name="platform")], administration_cluster_roles=["del"])
    plan = build_plan([SOLAR], [], [namespace("solar-a", "solar")], [], policy)
    assert "enclave-group-platform-del" in plan.bindings["solar-a"]
    assert [o.name for o in plan.tenants["solar"].owners] == ["alice"]
    assert plan.snapshot.tenants[0].owners == [Entity(kind="User", name="alice")]


def test_promoted_accounts_of_the_tenant_namespaces_only() -> None:
    policy = Policy(allow_promotion=True, promotion_cluster_roles=["prov"])
    accounts = [service_account("solar-a", "ci"), service_account("elsewhere", "bot")]
    plan = build_plan([SOLAR], [], [namespace("solar-a", "solar"), namespace("elsewhere")], accounts, policy)
    view = plan.snapshot.by_name["solar"]
    promoted = Entity(kind="ServiceAccount", name="system:serviceaccount:solar-a:ci")
    assert promoted in view.owners
    assert view.promoted == [promoted]
    assert "enclave-serviceaccount-solar-a.ci-prov" in plan.bindings["solar-a"]


def test_owner_plans_list_tenants_and_problems() -> None:
    owners = [
        tenant_owner("bob", "User", "bob", {"enclave.dev/tenant": "solar"}),
        tenant_owner("broken", "ServiceAccount", "no-namespace", {"enclave.dev/tenant": "solar"}),
    ]
    oil = tenant("oil", permissions={"matchOwners": [{"matchLabels": {"enclave.dev/tenant": "solar"}}]})
    plan = build_plan([SOLAR, oil], owners, [], [], Policy())
    assert plan.owners["bob"].tenants == ["oil", "solar"]
    assert plan.owners["broken"].problems[0].reason == "InvalidOwner"
    assert [o.name for o in plan.tenants["solar"].owners] == ["alice", "bob"]


def test_unreadable_tenant_freezes_its_namespaces_and_keeps_its_last_view() -> None:
    good = build_plan([SOLAR], [], [namespace("solar-a", "solar")], [], Policy())
    broken = tenant("solar", owners=[{"kind": "Robot", "name": "r2"}])
    plan = build_plan(
        [broken],
        [],
        [namespace("solar-a", "solar"), namespace("solar-c", "solar")],
        [],
        Policy(),
        previous_views={"solar": good.snapshot.by_name["solar"]},
    )
    tenant_plan = plan.tenants["solar"]
    assert tenant_plan.tenant is None
    assert tenant_plan.problems[0].reason == "InvalidSpec"
    assert "spec.owners.0.kind" in tenant_plan.problems[0].message
    assert {"solar-a", "solar-c"} <= plan.frozen
    assert plan.snapshot.by_name["solar"].owners == [Entity(kind="User", name="alice")]
    assert plan.snapshot.by_name["solar"].namespaces == ["solar-a", "solar-c"]
    live = [binding("solar-a", "enclave-user-alice-admin")]
    assert stale_bindings(plan, live) == []


def test_stale_bindings_are_pruned_except_where_frozen() -> None:
    namespaces = [namespace("solar-a", "solar"), namespace("gone", "solar", terminating=True), namespace("free")]
    plan = build_plan([SOLAR], [], namespaces, [], Policy())
    live = [
        binding("solar-a", "enclave-user-alice-admin"),
        binding("solar-a", "enclave-user-mallory-admin"),
        binding("gone", "enclave-user-alice-admin"),
        binding("free", "enclave-user-alice-admin"),
    ]
    assert [(b["metadata"]["namespace"], b["metadata"]["name"]) for b in stale_bindings(plan, live)] == [
        ("solar-a", "enclave-user-mallory-admin"),
        ("free", "enclave-user-alice-admin"),
    ]


def test_namespace_that_left_its_tenant_is_released() -> None:
    left = namespace("was-solar")
    left["metadata"]["managedFields"] = [
        {"manager": "enclave-tenants", "operation": "Apply", "fieldsV1": {"f:metadata": {"f:labels": {"f:cost": {}}}}}
    ]
    plan = build_plan([SOLAR], [], [left, namespace("never")], [], Policy())
    assert plan.release == ["was-solar"]


def test_invalid_regex_is_a_problem_but_still_published() -> None:
    bad = tenant("t", namespaceOptions={"forbiddenAnnotations": {"deniedRegex": "(["}})
    plan = build_plan([bad], [], [], [], Policy())
    assert plan.tenants["t"].problems[0].reason == "InvalidSpec"
    assert "forbiddenAnnotations.deniedRegex" in plan.tenants["t"].problems[0].message
    assert plan.snapshot.by_name["t"].forbidden_annotations.denied_regex == "(["


def test_the_snapshot_compile_leaves_out_only_what_the_write_loop_needs() -> None:
    """``writes=False`` (the snapshot loop's compile) gives the same snapshot and membership, without bodies."""
    namespaces = [namespace("solar-a", "solar"), namespace("solar-b", "solar")]
    full = build_plan([SOLAR], [], namespaces, [], Policy())
    light = build_plan([SOLAR], [], namespaces, [], Policy(), writes=False)
    assert light.snapshot == full.snapshot
    assert light.namespace_tenant == full.namespace_tenant
    assert set(full.bindings) == {"solar-a", "solar-b"}
    assert not light.bindings
    assert not light.namespace_bodies
    # Every namespace of a tenant gets the same RoleBindings but its own namespace and object copies.
    first, second = full.bindings["solar-a"], full.bindings["solar-b"]
    assert first.keys() == second.keys()
    for name in first:
        assert first[name]["metadata"]["namespace"] == "solar-a"
        assert second[name]["metadata"]["namespace"] == "solar-b"
        assert first[name]["subjects"] == second[name]["subjects"]
        assert first[name]["subjects"] is not second[name]["subjects"]


def test_plans_share_the_model_of_an_unchanged_tenant_and_an_unchanged_view() -> None:
    from enclave_core.api.tenancy import Tenant

    parsed: dict[str, tuple[dict[str, object], Tenant]] = {}
    other = tenant("other", owners=[{"kind": "User", "name": "bob"}])
    spaces = [namespace("solar-a", "solar"), namespace("other-a", "other")]
    first = build_plan([SOLAR, other], [], spaces, [], Policy(), parsed=parsed)
    views = {name: p.view for name, p in first.tenants.items() if p.view is not None}
    second = build_plan([SOLAR, other], [], spaces, [], Policy(), previous_views=views, parsed=parsed, writes=False)
    assert second.tenants["solar"].tenant is first.tenants["solar"].tenant
    assert second.tenants["solar"].view is first.tenants["solar"].view
    # A new cached object (an edit) is parsed again; a view that changed is a new one; a gone tenant is forgotten.
    edited = tenant("solar", owners=[{"kind": "User", "name": "carol"}])
    third = build_plan([edited], [], spaces[:1], [], Policy(), previous_views=views, parsed=parsed)
    assert third.tenants["solar"].tenant is not first.tenants["solar"].tenant
    assert third.tenants["solar"].view is not views["solar"]
    assert [owner.name for owner in third.snapshot.tenants[0].owners] == ["carol"]
    assert set(parsed) == {"solar"}


def test_owners_outside_the_effective_users_are_named_and_aggregated_tenant_owners_count_as_listed() -> None:
    solar = tenant("solar", owners=[{"kind": "User", "name": "alice"}, {"kind": "Group", "name": "ops"}])
    owners = [
        tenant_owner("bob", "User", "bob", {"enclave.dev/tenant": "solar"}),
        tenant_owner("carol", "User", "carol", {"enclave.dev/tenant": "solar"}, aggregate=True),
    ]
    policy = Policy(users=[Entity(kind="Group", name="ops"), Entity(kind="User", name="alice")])
    plan = build_plan([solar], owners, [], [], policy)
    assert plan.tenants["solar"].unlisted == [Entity(kind="User", name="bob")]
    default = build_plan([solar], owners, [], [], Policy())  # no configuration: the enclave.dev group
    assert default.tenants["solar"].unlisted == [
        Entity(kind="User", name="alice"),
        Entity(kind="Group", name="ops"),
        Entity(kind="User", name="bob"),
    ]
