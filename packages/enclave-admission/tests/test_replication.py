"""Replication protection and the deprecated-settings conversion, decided from hand-built snapshots."""

from __future__ import annotations

from typing import Any

from admission_helpers import ALICE, make_state, request, tenant, user

from enclave_admission.replication import mutation, validation
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
