"""``creation: Merge`` adopts only objects no other manager keeps (issue 29: the enclave-tenants RoleBinding)."""

from __future__ import annotations

from typing import Any

from enclave_replication import adoption


def obj(labels: dict[str, str] | None = None, managers: tuple[str, ...] = (), **meta: Any) -> dict[str, Any]:
    fields = [{"manager": manager, "operation": "Update"} for manager in managers]
    return {"metadata": {"name": "x", "labels": labels or {}, "managedFields": fields, **meta}}


def test_an_object_made_by_hand_is_adoptable() -> None:
    assert adoption.conflict(obj(managers=("kubectl-create", "kubectl-client-side-apply", "kubectl"))) == ""
    assert adoption.conflict(obj()) == ""
    assert adoption.conflict(obj(managers=("enclave-replication/tr/a.b",))) == ""


def test_the_rolebinding_enclave_tenants_keeps_is_not() -> None:
    binding = obj({"app.kubernetes.io/managed-by": "enclave-tenants"}, ("enclave-tenants",))
    assert "managed by enclave-tenants" in adoption.conflict(binding)
    assert "enclave-tenants" in adoption.conflict(obj(managers=("kubectl-create", "enclave-tenants")))


def test_other_controllers_are_refused() -> None:
    assert "Helm" in adoption.conflict(obj({"app.kubernetes.io/managed-by": "Helm"}))
    assert "kube-controller-manager" in adoption.conflict(obj(managers=("kube-controller-manager",)))
    owned = obj(ownerReferences=[{"kind": "ReplicaSet", "name": "web-1", "controller": True}])
    assert "ReplicaSet web-1" in adoption.conflict(owned)
    assert adoption.conflict(obj(ownerReferences=[{"kind": "ConfigMap", "name": "c"}])) == ""


def test_the_adoptable_managers_are_configurable() -> None:
    assert adoption.conflict(obj(managers=("Python",)), ("kubectl*", "Python")) == ""
    assert adoption.conflict(obj(managers=("kubectl-edit",)), ("kubectl",)) != ""
    assert adoption.adoptable("anything", ("*",))
