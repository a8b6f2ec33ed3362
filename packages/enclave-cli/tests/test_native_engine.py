"""``enclave test`` under ``spec.rules.engine`` native and both: the local ValidatingAdmissionPolicy evaluation
(:mod:`enclave_cli.native`) and the comparison of the two engines. Pure evaluation: kube-apiserver's own
decision on the same compiled policies is checked in tests/integration/rules/test_rules_native_differential.py."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from enclave_admission.review import Decision
from enclave_cli import testing
from enclave_cli.__main__ import main
from enclave_cli.engine import NATIVE, Outcome, Step
from enclave_cli.native import judge_policy
from enclave_cli.policy_cel import OUT_OF_BUDGET, with_variables
from enclave_cli.world import compile_world

HERE = Path(__file__).parent
POLICIES, TRACE = HERE / "policies", HERE / "trace"


def _policy(validations: list[dict[str, Any]], **spec: Any) -> dict[str, Any]:
    body = {
        "failurePolicy": "Fail",
        "matchConstraints": {
            "resourceRules": [
                {
                    "apiGroups": [""],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": ["configmaps"],
                    "scope": "Namespaced",
                }
            ]
        },
        "validations": validations,
        **spec,
    }
    return {"kind": "ValidatingAdmissionPolicy", "metadata": {"name": "p"}, "spec": body}


def _binding(actions: tuple[str, ...] = ("Deny",), selector: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"policyName": "p", "validationActions": list(actions)}
    if selector is not None:
        spec["matchResources"] = {"namespaceSelector": selector}
    return {"kind": "ValidatingAdmissionPolicyBinding", "metadata": {"name": "p"}, "spec": spec}


def _request(data: dict[str, str] | None = None, sub: str = "", user: str = "alice") -> dict[str, Any]:
    found: dict[str, Any] = {
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "operation": "CREATE",
        "name": "c",
        "namespace": "ns",
        "userInfo": {"username": user, "groups": ["g"]},
        "object": {"metadata": {"name": "c", "labels": {"env": "prod"}}, "data": data or {}},
        "oldObject": None,
    }
    if sub:
        found["subResource"] = sub
    return found


def _refusals(policy: dict[str, Any], request: dict[str, Any], **binding: Any) -> list[str] | None:
    verdict = judge_policy(policy, _binding(**binding), request, {"team": "a"})
    return [refusal.message for refusal in verdict.denials] if verdict.matched else None


# -- variables ------------------------------------------------------------------------------------------------


def test_variables_are_bound_where_read_and_string_literals_are_left_alone() -> None:
    declared = [
        {"name": "a", "expression": "object.data.k"},
        {"name": "b", "expression": "variables.a + 'variables.a'"},
        {"name": "unused", "expression": "object.missing"},
    ]
    text = with_variables('variables.b == "variables.b" && myvariables.b', declared)
    assert text == (
        "cel.bind(v_a, object.data.k, cel.bind(v_b, v_a + 'variables.a', v_b == \"variables.b\" && myvariables.b))"
    )


def test_a_variable_that_errors_counts_only_where_it_is_read() -> None:
    policy = _policy(
        [
            {"expression": "object.metadata.name == 'other' && variables.broken", "message": "short-circuited"},
            {"expression": "variables.broken", "message": "read"},
        ],
        variables=[{"name": "broken", "expression": "object.data.missing == 'x'"}],
    )
    refusals = _refusals(policy, _request())
    assert refusals is not None
    assert len(refusals) == 2
    assert refusals[0] == "short-circuited"  # false && error is false: the validation fails with its message
    assert refusals[1].startswith("expression 'variables.broken' resulted in error: ")


def test_optional_variables_keep_their_type() -> None:
    policy = _policy(
        [{"expression": "!variables.env.hasValue() || variables.env.value() != 'prod'", "message": "no prod"}],
        variables=[{"name": "env", "expression": "object.metadata.?labels[?'env']"}],
    )
    assert _refusals(policy, _request()) == ["no prod"]


# -- messages -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("message_expression", "message", "expected"),
    [
        ("'  from the expression  '", "fixed", "from the expression"),
        ("42", "fixed", "fixed"),
        ("''", "fixed", "fixed"),
        ("'two\\nlines'", "fixed", "fixed"),
        ("'x'.repeat(6000)", "fixed", "fixed"),
        ("object.missing", "fixed", "fixed"),
        ("''", "", "failed expression: false"),
    ],
)
def test_the_message_falls_back_as_kube_apiservers_does(message_expression: str, message: str, expected: str) -> None:
    validation = {"expression": "false", "messageExpression": message_expression}
    if message:
        validation["message"] = message
    assert _refusals(_policy([validation]), _request()) == [expected]


def test_an_error_is_the_failure_policys() -> None:
    validation = {"expression": "object.data.missing == 'x'", "message": "never shown"}
    refused = _refusals(_policy([validation]), _request())
    assert refused is not None
    assert refused[0].startswith("expression 'object.data.missing == 'x'' resulted in error")
    assert _refusals(_policy([validation], failurePolicy="Ignore"), _request()) == []


# -- matching -------------------------------------------------------------------------------------------------


def test_match_constraints_binding_selector_and_match_conditions() -> None:
    policy = _policy([{"expression": "false", "message": "refused"}])
    assert _refusals(policy, _request()) == ["refused"]
    assert _refusals(policy, _request(sub="status")) is None  # "configmaps" is no subresource
    assert _refusals(policy, _request(), selector={"matchLabels": {"team": "b"}}) is None
    assert _refusals(policy, _request(), selector={"matchLabels": {"team": "a"}}) == ["refused"]
    skipped = _policy(
        [{"expression": "false", "message": "refused"}],
        matchConditions=[{"name": "not-bob", "expression": "request.userInfo.username != 'bob'"}],
    )
    assert _refusals(skipped, _request(user="bob")) is None
    assert _refusals(skipped, _request(user="alice")) == ["refused"]
    broken = _policy(
        [{"expression": "true"}], matchConditions=[{"name": "broken", "expression": "object.data.missing == 'x'"}]
    )
    refused = _refusals(broken, _request())
    assert refused is not None
    assert "resulted in error" in refused[0]
    assert (
        _refusals(
            _policy(
                [{"expression": "true"}],
                failurePolicy="Ignore",
                **{"matchConditions": [{"name": "broken", "expression": "object.data.missing == 'x'"}]},
            ),
            _request(),
        )
        is None
    )


def test_warn_bindings_warn_and_never_deny() -> None:
    verdict = judge_policy(
        _policy([{"expression": "false", "message": "m"}]), _binding(("Warn", "Audit")), _request(), {}
    )
    assert not verdict.denies
    assert verdict.warnings == ["m"]


def test_the_worst_case_expression_is_refused_by_the_budget_not_run() -> None:
    """A policy expression whose work grows as the cube of the object (three nested loops over 3,000 keys, some
    27e9 steps) fails closed within the cost budget instead of holding the CLI."""
    nested = "object.data.all(a, object.data.all(b, object.data.all(c, a != '' || b != '' || c != '')))"
    data = {f"k{i}": "v" for i in range(3000)}
    started = time.process_time()  # CPU time: a loaded host does not inflate it
    refused = _refusals(_policy([{"expression": nested, "message": "m"}]), _request(data))
    assert time.process_time() - started < 5
    assert refused is not None
    assert len(refused) == 1
    assert "resulted in error" in refused[0]
    assert "budget" in refused[0]
    verdict = judge_policy(_policy([{"expression": nested, "message": "m"}]), _binding(), _request(data), {})
    assert "budget" in verdict.undecided  # an estimate, not kube-apiserver's count: not known to fail there


def test_a_policys_validations_share_kube_apiservers_budget() -> None:
    """Each validation within the per-call limit (some 97,000 on 90 keys), together past the policy's
    10,000,000: the one that would exhaust it is not run and the policy fails closed in kube-apiserver's words."""
    pairs = {"expression": "object.data.all(a, object.data.all(b, a != '' || b != ''))", "message": "m"}
    data = {f"k{i}": "v" for i in range(90)}
    assert _refusals(_policy([pairs] * 80), _request(data)) == []
    assert _refusals(_policy([pairs] * 120), _request(data)) == [OUT_OF_BUDGET]
    assert _refusals(_policy([pairs] * 120, failurePolicy="Ignore"), _request(data)) == []


def test_a_policy_the_local_engine_cannot_evaluate_lets_the_webhook_stand_in() -> None:
    """No guessed answer: the policy's verdict is undecided, the ``resources`` hook is called although the
    namespace would carry the native-rules label, and the outcome says so."""
    world = testing.load_world([POLICIES])
    compiled = compile_world(world)
    case = next(c for c in testing.collect_cases(world) if c.name == "a tenant rule denies a label value on any kind")
    native = compiled.native("native")
    heavy = "object.metadata.labels.all(a, object.metadata.labels.all(b, object.metadata.labels.all(c, true)))"
    for obj in native.namespaces[case.request.namespace].objects:
        if obj["kind"] == "ValidatingAdmissionPolicy":
            obj["spec"]["validations"] = [{"expression": heavy, "message": "never"}, *obj["spec"]["validations"]]
    assert case.request.obj is not None
    case.request.obj["metadata"]["labels"].update({f"k{i}": "v" for i in range(2000)})
    outcome = testing.decide(case.request, case.usage, compiled, "native")
    assert outcome.result == "denied"
    assert outcome.denial is not None
    assert outcome.denial.path == "/resources"
    assert "the webhook's answer stands in" in outcome.notes[0]


# -- the two engines ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("directory", [POLICIES, TRACE], ids=["policies", "trace"])
def test_every_case_answers_alike_under_both_engines(directory: Path) -> None:
    world = testing.load_world([directory])
    compiled = compile_world(world)
    for case in testing.collect_cases(world):
        webhook = testing.decide(case.request, case.usage, compiled, "webhook")
        native = testing.decide(case.request, case.usage, compiled, "native")
        assert not testing.differences(webhook, native), (case.name, testing.differences(webhook, native))


def test_the_policy_cases_pass_under_every_engine() -> None:
    for engine in ("webhook", "native", "both"):
        results = testing.run([POLICIES], engine=engine)
        assert all(result.passed for result in results), [(r.case.name, r.problems) for r in results if not r.passed]
        assert {result.engine for result in results} == {engine}


def test_a_condition_that_errors_is_refused_naming_the_rule_under_both_engines() -> None:
    """The trace example's last case (a rule whose condition reads a missing annotation): the policies refuse with
    an error that names the rule in the webhook's words, as kube-apiserver reports it (``no such key: ...``,
    cel-go's text), so the case's ``expect.message``, written for the webhook, holds under every engine."""
    for engine in ("webhook", "native", "both"):
        results = testing.run([TRACE], engine=engine)
        assert all(result.passed for result in results), [(r.case.name, r.problems) for r in results if not r.passed]
    world = testing.load_world([TRACE])
    case = next(c for c in testing.collect_cases(world) if c.name == "a condition that errors refuses")
    native = testing.decide(case.request, case.usage, compile_world(world), "native")
    words = "Tenant tr spec.rules[4] could not be evaluated: a condition that errors rejects the request unless"
    assert native.message.startswith("expression '!(variables.k")
    assert " || {'': false}[" in native.message
    assert f"' resulted in error: no such key: {words} another condition is false" in native.message


def test_the_native_outcome_comes_from_the_policies() -> None:
    world = testing.load_world([POLICIES])
    compiled = compile_world(world)
    case = next(c for c in testing.collect_cases(world) if c.name == "a tenant rule denies a label value on any kind")
    native = testing.decide(case.request, case.usage, compiled, "native")
    assert native.denial is not None
    assert native.denial.path == NATIVE
    assert "resources.enclave.dev" in native.passed_over
    webhook = testing.decide(case.request, case.usage, compiled, "webhook")
    assert webhook.denial is not None
    assert webhook.denial.path == "/resources"
    assert native.message == webhook.message


def _outcome(path: str, decision: Decision) -> Outcome:
    return Outcome(steps=[Step("h", path, decision)])


def test_a_difference_fails_the_case() -> None:
    allowed = _outcome("/resources", Decision.allow())
    denied = _outcome(NATIVE, Decision.deny("Forbidden", "Tenant t spec.rules[0] denies x"))
    assert testing.differences(allowed, denied) == [
        "the engines differ: webhook allowed, native denied (Tenant t spec.rules[0] denies x)"
    ]
    audited = _outcome("/resources", Decision(True, "Audited", audits=("a",)))
    assert testing.differences(audited, allowed) == [
        "the engines differ in the audit findings: webhook ['a'], native []"
    ]
    other = _outcome("/namespaces", Decision.deny("X", "one"))
    assert testing.differences(other, _outcome("/namespaces", Decision.deny("X", "two")))


def test_engine_flag_table_json_and_explain(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["test", str(POLICIES), "--engine", "both", "-k", "tenant rule"]) == 0
    assert "(rules engine: both)" in capsys.readouterr().out
    assert main(["test", str(POLICIES), "--engine", "native", "-o", "json", "-k", "tenant rule denies"]) == 0
    body = json.loads(capsys.readouterr().out)
    assert body["results"][0]["engine"] == "native"
    assert body["results"][0]["decidedBy"] == NATIVE
    assert main(["explain", str(POLICIES), "a tenant rule denies a label value on any kind", "--engine", "both"]) == 0
    out = capsys.readouterr().out
    assert "rules engine: webhook" in out
    assert "rules engine: native" in out
    assert "not called (the namespace carries enclave.dev/native-rules" in out
    assert "the engines answer the same" in out
    assert "(here: native)" in out
    with pytest.raises(SystemExit) as exited:
        main(["test", str(POLICIES), "--engine", "nope"])
    assert exited.value.code == 2
