"""A tenant namespace the Rules snapshot does not name is refused (failing closed), never judged as one without
rules; the namespace's rules arriving within the wait decide the request instead."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable
from typing import Any

from admission_helpers import ALICE, make_state, request, tenant

from enclave_admission.review import Decision
from enclave_admission.rules import mutation, validation
from enclave_admission.state import State
from enclave_core.api.rules import AppliedRule
from enclave_core.snapshots.rules import NamespaceRules, RulesSnapshot

JSON = dict[str, Any]
NS = "solar-dev"
CM: JSON = {"resource": "configmaps", "kind": "ConfigMap", "namespace": NS}
DENY_ENV = AppliedRule.model_validate(
    {
        "enforce": {"action": "deny", "metadata": [{"kinds": ["*"], "labels": {"env": {}}}]},
        "origin": {"kind": "Tenant", "name": "solar", "index": 0},
    }
)


def configmap(labels: dict[str, str] | None = None, finalizers: list[str] | None = None, **data: str) -> JSON:
    meta: JSON = {"name": "held", "namespace": NS, "labels": labels or {}, "resourceVersion": "1"}
    if finalizers is not None:
        meta["finalizers"] = finalizers
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": data}


def state_with(snapshot: RulesSnapshot) -> State:
    state = make_state([tenant("solar", "alice", namespaces=[NS])])
    state.expect_rules = True
    state.set_rules(snapshot)
    return state


async def decided(answer: Decision | Awaitable[Decision]) -> Decision:
    return await answer if inspect.isawaitable(answer) else answer


async def test_a_tenant_namespace_missing_from_the_snapshot_is_refused_with_the_reason() -> None:
    state = state_with(RulesSnapshot(without_rules=["solar-other"]))
    state.rules_wait = 0.05
    answer = validation.answer(request(ALICE, "CREATE", configmap({"env": "x"}), **CM), state)
    assert inspect.isawaitable(answer)  # it waits for the namespace's rules first
    refused = await decided(answer)
    assert not refused.allowed
    assert refused.reason == "NoRulesForTenantNamespace"
    assert "NoRulesForTenantNamespace" in refused.message
    assert NS in refused.message
    # Without waiting (``enclave explain``, the offline trace): refused at once, for the same reason.
    now = validation.validate(request(ALICE, "CREATE", configmap({"env": "x"}), **CM), state)
    assert now.reason == "NoRulesForTenantNamespace"


async def test_a_namespace_named_without_rules_is_allowed_at_once() -> None:
    state = state_with(RulesSnapshot(without_rules=[NS]))
    answer = validation.answer(request(ALICE, "CREATE", configmap({"env": "x"}), **CM), state)
    assert answer == Decision.allow("NoRules", tenant="")


def test_an_older_publisher_that_names_only_namespaces_with_rules_is_read_as_before() -> None:
    state = state_with(RulesSnapshot())
    assert validation.validate(request(ALICE, "CREATE", configmap({"env": "x"}), **CM), state).allowed


async def test_rules_published_during_the_wait_decide_the_request() -> None:
    state = state_with(RulesSnapshot(without_rules=[]))
    answer = validation.answer(request(ALICE, "CREATE", configmap({"env": "prod"}), **CM), state)
    mutated = mutation.answer(request(ALICE, "CREATE", configmap({"env": "prod"}), **CM), state)
    assert inspect.isawaitable(answer)
    assert inspect.isawaitable(mutated)
    waiting = asyncio.gather(answer, mutated)
    await asyncio.sleep(0.01)
    state.set_rules(RulesSnapshot(namespaces=[NamespaceRules(namespace=NS, tenant="solar", rules=[DENY_ENV])]))
    refused, unchanged = await asyncio.wait_for(waiting, 1)
    assert refused.reason == "RuleViolation"  # judged by the rules, not refused for their absence
    assert unchanged.allowed
    assert unchanged.reason == "NoMutations"


async def test_only_removing_finalizers_passes_so_a_namespace_without_rules_can_finish_deleting() -> None:
    state = state_with(RulesSnapshot(without_rules=[]))
    old = configmap(finalizers=["example.com/keep", "other"], k="v")
    dropped = configmap(finalizers=["other"], k="v")
    dropped["metadata"]["resourceVersion"] = "2"
    assert validation.answer(request(ALICE, "UPDATE", dropped, old, **CM), state) == Decision.allow("FinalizersOnly")
    assert mutation.answer(request(ALICE, "UPDATE", dropped, old, **CM), state) == Decision.allow("NoMutations")
    for changed in (
        configmap(finalizers=["other"], k="changed"),  # data too
        configmap({"env": "x"}, finalizers=["other"], k="v"),  # a label too
        configmap(finalizers=["example.com/keep", "other", "new"], k="v"),  # a finalizer added
    ):
        assert validation.validate(request(ALICE, "UPDATE", changed, old, **CM), state).reason == (
            "NoRulesForTenantNamespace"
        )
