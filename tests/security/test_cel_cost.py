"""CEL cost (issue 29): a rule condition's work is bounded per evaluation, like kube-apiserver's cost budget.

An expression over the budget whatever its input is refused when the Tenant is written, naming the field and
the budget; one that only a large input takes over the budget fails closed on that input (the request is
refused with a reason naming the budget) without being run, and admission keeps answering everyone else.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.cel.limits import COST_BUDGET
from enclave_testing.names import unique
from enclave_testing.stack import TenancyStack, create_namespace
from enclave_testing.waiting import poll

from .conftest import as_user, owned_namespace
from .test_patterns_backtracking import rules_compiled

DOUBLING = (
    "cel.bind(s0, object.metadata.name, "
    + "".join(f"cel.bind(s{i + 1}, s{i} + s{i}, " for i in range(24))
    + "s24.size() > 0"
    + ")" * 25
)
"""A 63-character name doubled 24 times: a 1 GiB string built by one evaluation, no loop anywhere."""
CROSS_PRODUCT = "object.data.all(a, object.data.all(b, object.data.all(c, size(a) + size(b) + size(c) > 0)))"
"""Within the budget for small ConfigMaps; cubic in the number of keys."""


def _deny_prod(condition: str) -> dict[str, Any]:
    return {
        "enforce": {
            "action": "deny",
            "conditions": [{"name": "costly", "expression": condition}],
            "metadata": [{"kinds": ["ConfigMap"], "labels": {"env": {"values": [{"exact": ["prod"]}]}}}],
        }
    }


def test_condition_over_the_cost_budget_is_refused_at_write_time(fence: TenancyStack) -> None:
    name = unique("celbomb")
    with pytest.raises(ApiException) as refused:
        fence.tenant(name, [{"kind": "User", "name": name}], rules=[_deny_prod(DOUBLING)])
    body = str(refused.value.body)
    assert refused.value.status in (400, 403, 422), body
    assert "spec.rules[0].enforce.conditions[0].expression" in body, body
    assert f"CEL cost budget of {COST_BUDGET}" in body, body


def test_condition_over_the_cost_budget_on_a_large_object_fails_closed_fast(
    fence: TenancyStack, impersonate: Callable[..., Any]
) -> None:
    owner = unique("celbig")
    _, namespace = owned_namespace(fence, impersonate, owner, rules=[_deny_prod(CROSS_PRODUCT)])
    rules_compiled(fence, namespace, 1)
    core = client.CoreV1Api(as_user(impersonate, owner))
    small = {"metadata": {"name": "small", "labels": {"env": "prod"}}, "data": {"a": "1", "b": "2"}}

    def small_refused() -> bool:
        try:
            core.create_namespaced_config_map(namespace, small)
        except ApiException as err:
            return err.status == 403 and "spec.rules[0]" in str(err.body)
        core.delete_namespaced_config_map("small", namespace)
        return False

    poll(small_refused, timeout=30, what="the rule in force: a small prod ConfigMap denied by it")

    bystander = unique("celby")
    fence.tenant(bystander, [{"kind": "User", "name": bystander}])
    large = {
        "metadata": {"name": "large", "labels": {"env": "prod"}},
        "data": {f"key-{n}": "v" for n in range(400)},
    }
    outcome: dict[str, tuple[float, Exception | None]] = {}

    def attack() -> None:
        started = time.perf_counter()
        try:
            core.create_namespaced_config_map(namespace, large)
        except Exception as err:  # inspected below
            outcome["large"] = (time.perf_counter() - started, err)
        else:
            outcome["large"] = (time.perf_counter() - started, None)

    thread = threading.Thread(target=attack)
    thread.start()

    create_namespace(as_user(impersonate, bystander), f"{bystander}-a")  # while the large ConfigMap is judged
    thread.join(timeout=30)
    assert not thread.is_alive(), "the ConfigMap create never returned"
    elapsed, error = outcome["large"]
    assert isinstance(error, ApiException), "the large ConfigMap was admitted"
    body = str(error.body)
    assert error.status == 403, body
    assert "could not be evaluated" in body, body
    assert f"CEL cost budget of {COST_BUDGET}" in body, body
    assert elapsed < 2.0, f"the large ConfigMap took {elapsed:.2f} s to decide"
