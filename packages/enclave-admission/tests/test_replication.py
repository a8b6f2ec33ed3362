"""Replication protection and the deprecated-settings conversion, decided from hand-built snapshots."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from admission_helpers import ALICE, make_state, request, tenant, user

from enclave_admission.replication import mutation, validation
from enclave_admission.replication import spec as replication_spec
from enclave_admission.review import Decision
from enclave_admission.state import State
from enclave_core.api.configuration import ServiceConfigurationSpec
from enclave_core.snapshots.configuration import effective
from enclave_core.snapshots.replication import ManagedObject, ReplicationSnapshot

ROBOT = "system:serviceaccount:solar-a:replicator"
CONTROLLER = "system:serviceaccount:enclave-system:enclave-replication"


def policy(name: str = "deny", namespace: str = "solar-a") -> dict[str, Any]:
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": namespace},
    }


def state_with_managed() -> Any:
    state = make_state([tenant("solar", "alice", namespaces=["solar-a"])], ignoreUserWithGroups=["break-glass"])
    managed = ManagedObject(
        group="networking.k8s.io",
        kind="NetworkPolicy",
        namespace="solar-a",
        name="deny",
        owner="GlobalTenantResource/baseline",
        managers=[CONTROLLER, ROBOT],
    )
    state.set_replication(ReplicationSnapshot(objects=[managed], controller=CONTROLLER))
    return state


def change(who: tuple[str, tuple[str, ...]], operation: str = "UPDATE", name: str = "deny") -> Any:
    obj = None if operation == "DELETE" else policy(name)
    return request(
        who,
        operation,
        obj,
        policy(name),
        resource="networkpolicies",
        group="networking.k8s.io",
        kind="NetworkPolicy",
        namespace="solar-a",
    )


def test_a_tenant_owner_may_neither_change_nor_delete_a_managed_object() -> None:
    state = state_with_managed()
    for operation in ("UPDATE", "DELETE"):
        decision = validation.validate(change(ALICE, operation), state)
        assert not decision.allowed
        assert decision.reason == "ReplicatedObjectProtected"
        assert "GlobalTenantResource/baseline" in decision.message
        assert "alice" in decision.message


def test_the_managing_identities_and_ignored_users_may() -> None:
    state = state_with_managed()
    for who in (user(ROBOT, "system:serviceaccounts"), user(CONTROLLER), user("ops", "break-glass")):
        assert validation.validate(change(who), state).allowed, who


def test_unmanaged_objects_and_other_operations_pass() -> None:
    state = state_with_managed()
    assert validation.validate(change(ALICE, name="other"), state).allowed
    assert validation.validate(change(ALICE, "CREATE"), state).allowed


def test_deprecated_settings_become_policies_for_blocks_without_one() -> None:
    spec = {
        "settings": {"adopt": True, "force": True},
        "pruningOnDelete": False,
        "resources": [{"rawItems": []}, {"policy": {"creation": "Owner"}}],
    }
    obj = {"apiVersion": "enclave.dev/v1beta2", "kind": "GlobalTenantResource", "metadata": {"name": "g"}, "spec": spec}
    decision = mutation.mutate(
        request(ALICE, "CREATE", obj, resource="globaltenantresources", kind="GlobalTenantResource"), make_state([])
    )
    assert decision.patch == (
        {
            "op": "add",
            "path": "/spec/resources/0/policy",
            "value": {"creation": "Merge", "deletion": "Orphan", "force": True, "protect": True},
        },
    )
    spec["resources"] = [{"policy": {}}]
    assert not mutation.mutate(
        request(ALICE, "UPDATE", obj, obj, resource="globaltenantresources"), make_state([])
    ).patch


def test_readiness_waits_for_the_replication_snapshot_only_when_configured() -> None:
    config = effective("default", 1, ServiceConfigurationSpec.model_validate({}))
    without = State(expect_tenancy=False)
    without.set_config(config)
    assert without.ready
    waiting = State(expect_tenancy=False, expect_replication=True)
    waiting.set_config(config)
    assert not waiting.ready
    waiting.set_replication(ReplicationSnapshot())
    assert waiting.ready


def test_every_enclave_component_account_may() -> None:
    """enclave-tenants (or any component in Enclave's namespace) must be able to delete a RoleBinding it manages
    even when replication manages it too (issue 29): the accounts of Enclave's own namespace pass."""
    state = state_with_managed()
    state.namespace = "enclave-system"
    for operation in ("UPDATE", "DELETE"):
        decision = validation.validate(
            change(user("system:serviceaccount:enclave-system:enclave-tenants"), operation), state
        )
        assert decision.allowed
        assert decision.reason == "EnclaveComponent"
    other = validation.validate(change(user("system:serviceaccount:enclave-systemx:robot")), state)
    assert not other.allowed


def _spec_decision(spec: dict[str, Any], resource: str = "tenantresources", old: Any = None) -> Decision:
    kind = "GlobalTenantResource" if resource == "globaltenantresources" else "TenantResource"
    obj = {"apiVersion": "enclave.dev/v1beta2", "kind": kind, "metadata": {"name": "r"}, "spec": spec}
    operation = "UPDATE" if old is not None else "CREATE"
    namespace = "" if resource == "globaltenantresources" else "solar-a"
    decided = replication_spec.validate(
        request(ALICE, operation, obj, old, resource=resource, kind=kind, namespace=namespace), make_state([])
    )
    if isinstance(decided, Decision):
        return decided

    async def wait() -> Decision:
        return await decided

    return asyncio.run(wait())


def test_replication_fields_that_cannot_work_are_refused_naming_the_field() -> None:
    raw = [{"rawItems": [policy()]}]
    cases: list[tuple[dict[str, Any], str]] = [
        ({"resources": raw, "resyncPeriod": "500ms"}, "spec.resyncPeriod"),
        ({"resources": raw, "resyncPeriod": "25h"}, "spec.resyncPeriod"),
        ({"resources": [{"policy": {"condition": "object.x +"}}]}, "spec.resources[0].policy.condition"),
        ({"resources": [{"policy": {"condition": "nope == 1"}}]}, "spec.resources[0].policy.condition"),
        ({"resources": [{}, {"generators": [{"template": "{{ a "}]}]}, "spec.resources[1].generators[0].template"),
        (
            {"resources": [{"generators": [{"template": "{% for x in y %}"}]}]},
            "spec.resources[0].generators[0].template",
        ),
    ]
    for resource in ("tenantresources", "globaltenantresources"):
        for spec, field in cases:
            decision = _spec_decision(spec, resource)
            assert not decision.allowed, spec
            assert field in decision.message, decision.message
    good = {
        "resources": [
            {
                "generators": [{"template": "{{ tenant.metadata.name | quote }}"}],
                "policy": {"condition": "object == null"},
            }
        ]
    }
    assert _spec_decision(good).allowed


def test_an_unchanged_spec_is_never_refused() -> None:
    """A stored object (written while the hook was away) never blocks metadata edits or its finalizer removal."""
    bad = {"resources": [{"policy": {"condition": "object.x +"}}]}
    old = {"apiVersion": "enclave.dev/v1beta2", "kind": "TenantResource", "metadata": {"name": "r"}, "spec": bad}
    assert _spec_decision(bad, old=old).allowed


def test_a_hostile_template_is_parsed_within_a_budget_off_the_event_loop() -> None:
    """Deep nesting is refused, not a crash; past PARSE_BUDGET characters parsing is left to the controller; and
    while a 64 KiB template parses the event loop keeps running."""
    deep = "{{ " + "(" * 5000 + "1" + ")" * 5000 + " }}"
    assert "nested too deeply" in replication_spec.template_problems([("t", deep)])[0].message
    huge = "{{ a " * (replication_spec.PARSE_BUDGET // 5 + 1)
    assert replication_spec.template_problems([("t", huge)]) == []
    big = "{{ a.b | default('x') }}\n" * (65536 // 25)
    assert len(big) <= replication_spec.PARSE_BUDGET

    async def race() -> tuple[Decision, int]:
        ticks = 0

        async def ticker() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)

        task = asyncio.create_task(ticker())
        decided = replication_spec.validate(
            request(
                ALICE,
                "CREATE",
                {"metadata": {"name": "r"}, "spec": {"resources": [{"generators": [{"template": big}]}]}},
                resource="tenantresources",
                kind="TenantResource",
                namespace="solar-a",
            ),
            make_state([]),
        )
        assert not isinstance(decided, Decision)
        started = time.perf_counter()
        decision = await decided
        elapsed = time.perf_counter() - started
        task.cancel()
        return decision, ticks if elapsed > 0.05 else 2

    decision, ticks = asyncio.run(race())
    assert decision.allowed
    assert ticks > 1  # the loop ran while the template parsed
