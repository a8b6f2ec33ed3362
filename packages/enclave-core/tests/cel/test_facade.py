"""The facade's contract: caching, positioned compile errors, guards, typed results, no exceptions."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from enclave_core import cel
from enclave_core.cel.projection import compile_projector, merge_tries, project
from enclave_core.cel.syntax import ELEM
from enclave_core.quantity import Quantity

from .conftest import NOW, variables


@pytest.fixture(scope="module")
def facade() -> cel.CelFacade:
    return cel.CelFacade(cel.new_engine())


def test_compile_is_cached_by_text_and_environment(facade: cel.CelFacade) -> None:
    first = facade.condition("object.metadata.name == 'web'", cel.RULE_CONDITION_ENV)
    assert facade.condition("object.metadata.name == 'web'", cel.RULE_CONDITION_ENV) is first
    assert facade.condition("object.metadata.name == 'web'", cel.QUOTA_SELECTOR_ENV) is not first


def test_compile_error_carries_expression_and_position(facade: cel.CelFacade) -> None:
    with pytest.raises(cel.CelCompileError) as info:
        facade.condition("object.metadata.name ==", cel.RULE_CONDITION_ENV)
    issue = info.value.issues[0]
    assert issue.expression == "object.metadata.name =="
    assert (issue.line, issue.column) == (1, 24)
    assert "Syntax error" in issue.reason


def test_check_reports_undeclared_variable_with_position() -> None:
    issues = cel.check("now > timestamp('2024-01-01T00:00:00Z')", cel.QUOTA_SELECTOR_ENV)
    assert len(issues) == 1
    assert issues[0].column == 1
    assert "now" in issues[0].reason
    assert cel.check("now > timestamp('2024-01-01T00:00:00Z')", cel.POLICY_CONDITION_ENV) == []


def test_check_rejects_wrong_result_type() -> None:
    issues = cel.check("object.metadata.name", cel.RULE_CONDITION_ENV)
    assert issues == []  # dyn: may be a bool at run time
    issues = cel.check("'text'", cel.RULE_CONDITION_ENV)
    assert "must yield a bool" in issues[0].reason
    assert cel.check("quantity('1')", cel.QUOTA_SOURCE_ENV, cel.ResultType.QUANTITIES) == []
    assert cel.check("1 + 1", cel.QUOTA_SOURCE_ENV, cel.ResultType.QUANTITIES)


def test_match_conditions_compile_with_authorizer_declared() -> None:
    assert cel.check("request.userInfo.username != 'system:admin'", cel.MATCH_CONDITION_ENV) == []


@pytest.mark.parametrize(
    ("expression", "reason"),
    [
        ("1 == 1 && " * 600 + "true", "longer than"),
        ("[1].all(a, [1].all(b, [1].all(c, [1].all(d, true))))", "nested comprehensions"),
        ("lists.range(10).size() > 0", "not allowed"),
        ("   ", "empty"),
    ],
)
def test_guard_rejects_runaway_expressions(facade: cel.CelFacade, expression: str, reason: str) -> None:
    with pytest.raises(cel.CelCompileError) as info:
        facade.condition(expression, cel.RULE_CONDITION_ENV)
    assert reason in str(info.value)


def test_deep_nesting_is_a_compile_error_not_a_crash(facade: cel.CelFacade) -> None:
    with pytest.raises(cel.CelCompileError):
        facade.condition("(" * 200 + "true" + ")" * 200, cel.RULE_CONDITION_ENV)


def test_runtime_error_is_a_value(facade: cel.CelFacade) -> None:
    result = facade.condition("object.spec.nodeName == 'x'", cel.RULE_CONDITION_ENV).evaluate(variables())
    assert isinstance(result, cel.Failed)
    assert result.error.kind is cel.ErrorKind.NO_SUCH_KEY
    assert "nodeName" in result.error.message


def test_non_bool_result_of_a_condition_is_a_result_type_error(facade: cel.CelFacade) -> None:
    result = facade.condition("object.metadata.name", cel.RULE_CONDITION_ENV).evaluate(variables())
    assert isinstance(result, cel.Failed)
    assert result.error.kind is cel.ErrorKind.RESULT_TYPE


def test_unsupported_input_value_is_a_result_not_an_exception(facade: cel.CelFacade) -> None:
    program = facade.condition("object.x == 1", cel.RULE_CONDITION_ENV)
    result = program.evaluate({"object": {"x": object()}})
    assert isinstance(result, cel.Failed)


def test_quota_source_yields_quantities(facade: cel.CelFacade, pod: dict[str, Any]) -> None:
    single = facade.quantities("quantity(object.spec.containers[0].resources.requests.cpu)", cel.QUOTA_SOURCE_ENV)
    assert single.evaluate({"object": pod}) == cel.Ok([Quantity.parse("250m")])
    many = facade.quantities(
        "object.spec.containers.map(c, quantity(c.resources.requests.memory))", cel.QUOTA_SOURCE_ENV
    )
    assert many.evaluate({"object": pod}) == cel.Ok([Quantity.parse("256Mi"), Quantity.parse("64Mi")])
    wrong = facade.quantities("object.spec.containers.map(c, c.name)", cel.QUOTA_SOURCE_ENV)
    result = wrong.evaluate({"object": pod})
    assert isinstance(result, cel.Failed)
    assert result.error.kind is cel.ErrorKind.RESULT_TYPE


def test_policy_condition_with_null_object(facade: cel.CelFacade) -> None:
    program = facade.condition("object == null || !has(object.metadata.labels)", cel.POLICY_CONDITION_ENV)
    assert program.evaluate({"object": None, "now": NOW}) == cel.Ok(True)


def test_evaluate_all_converts_once_and_keeps_order(facade: cel.CelFacade) -> None:
    programs = [
        facade.condition("object.metadata.labels['app'] == 'web'", cel.RULE_CONDITION_ENV),
        facade.condition("object.spec.containers.size() == 2", cel.RULE_CONDITION_ENV),
        facade.condition("request.userInfo.username == 'bob'", cel.RULE_CONDITION_ENV),
        facade.condition("object.spec.nodeName == 'n1'", cel.RULE_CONDITION_ENV),
    ]
    results = facade.evaluate_all(programs, variables())
    assert results[:3] == [cel.Ok(True), cel.Ok(True), cel.Ok(False)]
    assert isinstance(results[3], cel.Failed)


def _same(folded: list[cel.EvalResult[bool]], alone: list[cel.EvalResult[bool]]) -> None:
    assert len(folded) == len(alone)
    for one, other in zip(folded, alone, strict=True):
        if isinstance(other, cel.Failed):
            assert isinstance(one, cel.Failed), (one, other)
            assert one.error.kind is other.error.kind
        else:
            assert one == other


def test_condition_batch_answers_exactly_as_each_condition_alone(facade: cel.CelFacade) -> None:
    """Folded into one program when all hold or are false; when one errors or is not a bool the chunk is
    evaluated one by one, so each keeps its own result and error."""
    texts = [
        "object.metadata.labels['app'] == 'web'",
        "request.userInfo.username == 'bob'",
        "object.metadata.name.startsWith('w') // a trailing comment",
        "object.metadata.labels['missing'] == 'x' || true",  # CEL's || absorbs the error inside a condition
    ]
    programs = [facade.condition(text, cel.RULE_CONDITION_ENV) for text in texts]
    batch = facade.condition_batch(programs)
    _same(batch.evaluate(variables()), facade.evaluate_all(programs, variables()))
    assert batch.evaluate(variables()) == [cel.Ok(True), cel.Ok(False), cel.Ok(True), cel.Ok(True)]
    erring = [*programs, facade.condition("object.spec.nodeName == 'n1'", cel.RULE_CONDITION_ENV)]
    _same(facade.condition_batch(erring).evaluate(variables()), facade.evaluate_all(erring, variables()))
    assert isinstance(facade.condition_batch(erring).evaluate(variables())[-1], cel.Failed)


def test_condition_batch_chunks_past_62_conditions(facade: cel.CelFacade) -> None:
    programs = [
        facade.condition(f"object.spec.containers.size() > {i % 3}", cel.RULE_CONDITION_ENV) for i in range(130)
    ]
    results = facade.condition_batch(programs).evaluate(variables())
    _same(results, facade.evaluate_all(programs, variables()))
    assert results.count(cel.Ok(True)) > 0
    assert results.count(cel.Ok(False)) > 0


def test_combine_conditions_follows_the_spec() -> None:
    error = cel.Failed(cel.EvalError(cel.ErrorKind.OTHER, "boom", "x"))
    assert cel.combine_conditions([])[0] is cel.ConditionOutcome.MATCH
    assert cel.combine_conditions([cel.Ok(True), cel.Ok(True)])[0] is cel.ConditionOutcome.MATCH
    assert cel.combine_conditions([error, cel.Ok(False)])[0] is cel.ConditionOutcome.SKIP
    outcome, errors = cel.combine_conditions([error, cel.Ok(True)])
    assert outcome is cel.ConditionOutcome.ERROR
    assert errors == [error.error]


def test_projection_keeps_only_observed_paths() -> None:
    pod = variables()["object"]
    trie = {"metadata": {"labels": {"app": None}}, "spec": {"nodeName": None}}
    assert project(pod, trie) == {"metadata": {"labels": {"app": "web"}}, "spec": {}}
    assert project(pod, None) is pod
    containers = {"spec": {"containers": {ELEM: {"name": None}}}}
    assert project(pod, containers) == {"spec": {"containers": [{"name": "web"}, {"name": "sidecar"}]}}
    assert project(pod, {"metadata": {"labels": {ELEM: None}}})["metadata"]["labels"] is pod["metadata"]["labels"]
    assert merge_tries([{"a": {"b": None}}, {"a": None}]) == {"a": None}
    assert merge_tries([{"a": {"b": None}}, {"a": {"c": None}}]) == {"a": {"b": None, "c": None}}


_json = st.recursive(
    st.none() | st.booleans() | st.integers(-1000, 1000) | st.text("abc", max_size=3),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner, max_size=3),
    max_leaves=12,
)

_PROBES = [
    "object.a.b == 1",
    "has(object.a.b)",
    "object.?a.?c.orValue(0) == 0",
    "object.a.size() > 1",
    "object.b.exists(k, k == 'a')",
    "object.a['c'] == object.b",
    "object.c == null",
    "object.a.all(x, x.b == 1)",
    "object.a.exists(x, has(x.c) || x == 1)",
    "object.b.map(x, x.a).size() > 0",
    "object.a[0].b == object.c[1]",
    "object.b.exists(i, x, x.c.exists(y, y.a == 1))",
    "object.c.filter(x, x.a == 1).size() == 1",
]


@settings(max_examples=300, deadline=None)
@given(obj=st.dictionaries(st.sampled_from("abc"), _json, max_size=3))
def test_projection_is_invisible_to_the_expression(obj: dict[str, Any]) -> None:
    """Evaluating on the projected input gives the same result as evaluating on the full input."""
    facade = cel.default()
    for text in _PROBES:
        program = facade.compile(text, cel.QUOTA_SELECTOR_ENV)
        projected = program.evaluate({"object": obj})
        full = facade.evaluate_all(
            [program, facade.compile("object == object", cel.QUOTA_SELECTOR_ENV)], {"object": obj}
        )[0]
        assert type(projected) is type(full), (text, obj, projected, full)
        if isinstance(projected, cel.Ok):
            assert projected == full
        else:
            assert isinstance(full, cel.Failed)
            assert projected.error.kind is full.error.kind


@settings(max_examples=300, deadline=None)
@given(obj=st.dictionaries(st.sampled_from("abc"), _json, max_size=3))
def test_compiled_projector_matches_project(obj: dict[str, Any]) -> None:
    tries: list[Any] = [
        None,
        {"a": None},
        {"a": {"b": None, "c": {ELEM: {"a": None}}}, "b": {ELEM: None}},
        {"c": {ELEM: {"b": {ELEM: {}}}}, "a": {"b": {"c": None}}},
        {"b": {ELEM: {}}},
    ]
    for trie in tries:
        assert compile_projector(trie)(obj) == project(obj, trie)
