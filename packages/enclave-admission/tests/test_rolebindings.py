"""The managed RoleBinding guard: tenants may not create, change or delete the bindings enclave-tenants keeps."""

from __future__ import annotations

from typing import Any

import pytest
from admission_helpers import ADMIN, ALICE, make_state, request, tenant, user

from enclave_admission.defaults import url_client, webhooks
from enclave_admission.rolebindings import validation as rolebindings
from enclave_admission.state import State

MANAGED = {"app.kubernetes.io/managed-by": "enclave-tenants"}
COMPONENT = "system:serviceaccount:enclave-system:enclave-tenants"


def binding(name: str, labels: dict[str, str] | None = None, subject: str = "alice") -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": "solar-a", "labels": labels or {}},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": subject}],
    }


def state() -> State:
    found = make_state([tenant("solar", "alice", namespaces=["solar-a"]), tenant("oil", "bob", namespaces=["oil-a"])])
    found.namespace = "enclave-system"
    return found


def judge(who: tuple[str, tuple[str, ...]], operation: str, obj: Any, old: Any = None) -> Any:
    req = request(
        who,
        operation,
        obj,
        old,
        resource="rolebindings",
        group="rbac.authorization.k8s.io",
        kind="RoleBinding",
        namespace="solar-a",
    )
    return rolebindings.validate(req, state())


MANAGED_BINDING = binding("enclave-component-enclave-replication-impersonate", MANAGED)


@pytest.mark.parametrize(
    ("operation", "obj", "old"),
    [
        ("DELETE", None, MANAGED_BINDING),
        (
            "UPDATE",
            binding("enclave-user-alice-admin", MANAGED, "mallory"),
            binding("enclave-user-alice-admin", MANAGED),
        ),
        ("UPDATE", binding("enclave-user-alice-admin"), binding("enclave-user-alice-admin", MANAGED)),
        ("CREATE", binding("fake", MANAGED), None),
    ],
    ids=["delete", "rewrite-subjects", "strip-label", "create-with-label"],
)
def test_tenant_users_and_tenant_accounts_are_refused(operation: str, obj: Any, old: Any) -> None:
    tenant_account = user("system:serviceaccount:solar-a:ci", "system:serviceaccounts")
    for who in (ALICE, user("bob", "enclave.dev"), tenant_account):
        decision = judge(who, operation, obj, old)
        assert not decision.allowed, who
        assert decision.reason == "ManagedRoleBinding"
        assert "solar" not in decision.message.replace("solar-a", ""), "the refusal names no tenant"


def test_components_administrators_and_operators_pass() -> None:
    for who in (
        user(COMPONENT, "system:serviceaccounts"),
        ADMIN,
        user("ops"),
        user("system:serviceaccount:tools:deployer", "system:serviceaccounts"),
    ):
        assert judge(who, "DELETE", None, MANAGED_BINDING).allowed, who


def test_unmanaged_bindings_pass() -> None:
    assert judge(ALICE, "DELETE", None, binding("mine")).reason == "NotManaged"
    assert judge(ALICE, "UPDATE", binding("mine", subject="carol"), binding("mine")).allowed


def test_the_default_hook_sees_only_managed_role_bindings_and_skips_the_control_plane() -> None:
    admission = webhooks(url_client("https://enclave.invalid"))
    assert admission.validating is not None
    hook = next(h for h in admission.validating.webhooks or [] if h.name == "rolebindings.enclave.dev")
    assert hook.failure_policy == "Fail"
    assert hook.object_selector is not None
    assert hook.object_selector.match_expressions
    assert hook.object_selector.match_expressions[0].values == ["enclave-tenants"]
    assert any(c.name == "enclave.dev/skip-control-plane" for c in hook.match_conditions or [])
