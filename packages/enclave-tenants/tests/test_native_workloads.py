"""Workload rules compiled to policy CEL: which rules go native and why the others stay on the webhook, the
policy's resources, and tenant-written patterns kept inside their CEL literals.

What the compiled CEL *decides* is proven on kube-apiserver against the webhook, case by case
(tests/integration/rules/test_rules_native_differential.py, the workloads catalogue's rows and more).
"""

from __future__ import annotations

import json
import re
from typing import Any

from enclave_admission.rules.workloads import workload_kind
from enclave_core.api.rules import AppliedRule
from enclave_tenants.native import workload_limits, workloads
from enclave_tenants.native.celtext import go_regex_problem, lit
from enclave_tenants.native.compiler import Program, compile_namespace, webhook_needed
from enclave_tenants.native.objects import policies


def _rules(*bodies: dict[str, Any]) -> list[AppliedRule]:
    return [
        AppliedRule.model_validate({**body, "origin": {"kind": "Tenant", "name": "t", "index": index}})
        for index, body in enumerate(bodies)
    ]


def _workloads(action: str = "allow", **policy: Any) -> dict[str, Any]:
    return {"enforce": {"action": action, "workloads": policy}}


def _paths(program: Program) -> dict[str, tuple[str, str]]:
    return {p.origin: (p.path, p.why) for p in program.placements if p.area == "workloads"}


def test_the_kinds_are_the_ones_admission_judges_with_the_same_pod_spec_paths() -> None:
    for group, resource, kind, path in workloads.KINDS:
        assert workload_kind(group, resource) == (kind, path)


def test_registries_qos_placement_and_resources_compile_and_need_no_webhook() -> None:
    rules = _rules(
        _workloads(targets=["Pod", "Deployment"], registries=[{"url": "^registry\\.example/"}]),
        _workloads(qosClasses=["Guaranteed"]),
        _workloads(
            "deny", placement={"nodeSelectorKeys": ["gpu"], "tolerations": [{"key": "a", "operator": "Exists"}]}
        ),
        _workloads(resources={"limits": {"required": ["memory"], "max": {"memory": "1Gi"}}}),
        _workloads("deny", targets=["CronJob"]),
    )
    program = compile_namespace(rules, local_check=False)
    assert {path for path, _ in _paths(program).values()} == {"native"}
    assert len(program.validations) == 5  # one per rule and part: images, QoS, placement, resources, the kind
    assert webhook_needed(rules, program) == ""
    names = [variable["name"] for variable in program.variables]
    assert names.index("w_spec") < names.index("w0i")  # a variable reads only those before it
    assert {"w_qos", "w_ctr", "w_res"} <= set(names)


def test_rules_go_native_by_default_and_the_strict_local_check_still_says_why() -> None:
    """A rule Enclave's CEL engine cannot bound by its static estimate for Pods of every size is native by default
    (enclave test judges a Pod within the envelope without that estimate); ``local_check=True`` keeps it off."""
    rules = _rules(
        _workloads(registries=[{"url": "^registry\\.example/"}]),
        _workloads("deny", targets=["CronJob"]),
    )
    assert {path for path, _ in _paths(compile_namespace(rules)).values()} == {"native"}
    program = compile_namespace(rules, local_check=True)
    path, why = _paths(program)["Tenant t spec.rules[0]"]
    assert path == "webhook"
    assert "limits of Enclave's CEL engine" in why
    assert _paths(program)["Tenant t spec.rules[1]"][0] == "native"  # the kind itself: a bounded expression


def test_the_envelope_proof_covers_the_workload_validations_alone() -> None:
    program = compile_namespace(_rules(_workloads(registries=[{"url": "^r/"}]), _workloads(qosClasses=["Guaranteed"])))
    texts = [text for v in program.validations for text in (v["expression"], v["messageExpression"])]
    assert len(texts) == 4
    assert all(workload_limits.proven_at_envelope(text) for text in texts)
    for other in ("variables.w0i.all(l, true)", "variables.x0i.all(l, l.all(m, size(m) == 0))", "object.spec != null"):
        assert not workload_limits.proven_at_envelope(other)
    items, text = workload_limits.ENVELOPE_ITEMS, workload_limits.ENVELOPE_TEXT
    assert workload_limits.within_envelope([{"a": ["x" * text] * items}])
    assert not workload_limits.within_envelope([{"a": ["x" * (text + 1)]}])
    assert not workload_limits.within_envelope([{"a": [[[1] * (items + 1)]]}])
    assert not workload_limits.within_envelope([{str(n): 1 for n in range(items + 1)}])
    deep: Any = "x"
    for _ in range(100_000):  # nesting past Python's stack: one pass without recursion
        deep = [deep]
    assert workload_limits.within_envelope([deep])


def test_security_budgets_and_patterns_go_cannot_take_stay_on_the_webhook_and_say_why() -> None:
    rules = _rules(
        _workloads("deny", security={"privileged": True}),
        _workloads(targets=["Deployment"], disruptionBudgets={"required": True}),
        _workloads(registries=[{"url": "\\Qregistry.example/"}]),
        _workloads(placement={"priorityClasses": [{"exp": "a\\Cb"}]}),
    )
    program = compile_namespace(rules, local_check=False)
    paths = _paths(program)
    assert paths["Tenant t spec.rules[0]"] == ("webhook", paths["Tenant t spec.rules[0]"][1])
    assert "security features" in paths["Tenant t spec.rules[0]"][1]
    assert "PodDisruptionBudget" in paths["Tenant t spec.rules[1]"][1]
    assert "unterminated \\Q" in paths["Tenant t spec.rules[2]"][1]
    assert "\\C" in paths["Tenant t spec.rules[3]"][1]
    assert program.empty
    assert "workloads stays on the webhook" in webhook_needed(rules, program)


def test_a_rule_past_the_cost_limit_over_the_envelope_stays_on_the_webhook() -> None:
    long = [{"url": "^" + "r" * 1000 + f"{n}/"} for n in range(64)]
    program = compile_namespace(_rules(_workloads(registries=long)), local_check=False)
    path, why = _paths(program)["Tenant t spec.rules[0]"]
    assert path == "webhook"
    assert "per-expression limit" in why
    assert f"{workload_limits.ENVELOPE_ITEMS} containers" in why


def test_rules_past_the_policy_budget_together_leave_the_later_ones_on_the_webhook() -> None:
    one = _workloads(registries=[{"url": "^" + "r" * 40 + f"{n}/"} for n in range(2)])
    (rule,) = _rules(one)
    assert rule.enforce is not None
    assert rule.enforce.workloads is not None
    cost = workload_limits.estimated_cost(rule.enforce.workloads)
    assert cost <= workload_limits.PER_CALL_LIMIT
    fit = workload_limits.POLICY_BUDGET // cost
    program = compile_namespace(_rules(*[one] * (fit + 2)), local_check=False)
    paths = [path for path, _ in _paths(program).values()]
    assert paths == ["native"] * fit + ["webhook"] * 2
    assert "policy's cost budget" in _paths(program)[f"Tenant t spec.rules[{fit}]"][1]


def test_a_tenant_pattern_stays_inside_its_cel_literal() -> None:
    url = '^x"\\) || true || \\("'
    program = compile_namespace(_rules(_workloads(registries=[{"url": url}])), local_check=False)
    (variable,) = [v for v in program.variables if v["name"] == "w0i"]
    literal = lit(workloads.anchored(url))
    assert literal in variable["expression"]
    assert json.loads(literal) == "\\A(?:" + url + ")"
    # the raw quote never appears unescaped: every `"` of the pattern is preceded by a backslash in the CEL text
    assert '") || true' not in variable["expression"]


def test_a_pattern_that_would_not_stay_in_its_group_is_refused() -> None:
    assert "unterminated" in go_regex_problem("abc\\Q)|(.*")
    assert go_regex_problem("abc\\Q)|\\E(.*)") == ""


def test_the_policy_matches_the_pod_bearing_kinds_and_kubectl_debug() -> None:
    program = compile_namespace(_rules(_workloads(registries=[{"url": "^r/"}])), local_check=False)
    policy = policies("t", program, ["t-a"], enclave_namespace="enclave-system", ignored_groups=[])[0]
    rules = {tuple(r["apiGroups"]): r["resources"] for r in policy["spec"]["matchConstraints"]["resourceRules"]}
    assert rules == {
        ("",): ["pods", "pods/ephemeralcontainers", "replicationcontrollers"],
        ("apps",): ["daemonsets", "deployments", "replicasets", "statefulsets"],
        ("batch",): ["cronjobs", "jobs"],
    }
    metadata = {"enforce": {"action": "deny", "metadata": [{"kinds": ["*"], "labels": {"x": {}}}]}}
    program = compile_namespace(_rules(metadata, _workloads(registries=[{"url": "^r/"}])), local_check=False)
    policy = policies("t", program, ["t-a"], enclave_namespace="enclave-system", ignored_groups=[])[0]
    rules = {tuple(r["apiGroups"]): r["resources"] for r in policy["spec"]["matchConstraints"]["resourceRules"]}
    assert rules == {("*",): ["*"], ("",): ["pods/ephemeralcontainers"]}


def test_conditional_workload_rules_refuse_when_their_conditions_error_where_the_webhook_asks() -> None:
    rule = _workloads(qosClasses=["Guaranteed"])
    rule["enforce"]["conditions"] = [{"name": "c", "expression": "object.metadata.labels.x == 'y'"}]
    program = compile_namespace(_rules(rule), local_check=False)
    (check,) = [v for v in program.validations if "could not be evaluated" in v.get("message", "")]
    assert 'variables.w_kind in ["Pod"]' in check["expression"]


def test_messages_are_the_webhooks_words() -> None:
    program = compile_namespace(
        _rules(_workloads("deny", qosClasses=["BestEffort"], targets=["Job"])), local_check=False
    )
    (variable,) = [v for v in program.variables if v["name"] == "w0q"]
    assert re.search(
        r"\[\"Tenant t spec.rules\[0\] denies \", string\(\(variables\.w_kind == 'Pod'", variable["expression"]
    )
    assert (
        "' (QoS class)', '=', string(variables.w_qos[0]), \" (QoS classes ['BestEffort'])\"" in variable["expression"]
    )
