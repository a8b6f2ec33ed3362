"""Which tenant ledgers the snapshot names: only initialised ledgers of current tenants with a quota."""

from __future__ import annotations

from typing import Any

from tenants_helpers import namespace, tenant

from enclave_core.api.ledger import QuantityLedgerStatus
from enclave_core.ledger import new_ledger
from enclave_tenants import ledgers
from enclave_tenants.plan import build_plan
from enclave_tenants.policy import Policy


def ledger(name: str, uid: str, allocated: str | None) -> dict[str, Any]:
    body = new_ledger(ledgers.target(name, uid), "enclave-system")
    if allocated is not None:
        body.status = QuantityLedgerStatus(allocated=allocated, reserved="0")
    return body.to_k8s()


def test_only_initialised_ledgers_of_current_tenants_are_named() -> None:
    uids = {"a": "uid-a", "b": "uid-b", "c": "uid-c"}
    found = ledgers.initialised(
        [ledger("a", "uid-a", "2"), ledger("b", "uid-b", None), ledger("c", "old-uid", "1")], uids
    )
    assert found == {"a": "tenant.a"}


def test_the_view_names_the_ledger_only_for_a_tenant_with_a_quota() -> None:
    tenants = [tenant("a", namespaceOptions={"quota": 3}), tenant("b")]
    plan = build_plan(tenants, [], [namespace("a-1", "a")], [], Policy(), ledgers={"a": "tenant.a", "b": "tenant.b"})
    assert plan.tenants["a"].view is not None
    assert plan.tenants["a"].view.namespace_ledger == "tenant.a"
    assert plan.tenants["b"].view is not None
    assert plan.tenants["b"].view.namespace_ledger is None
