"""The Python fast path answers exactly as the C++ runtime does, or leaves the answer to it.

Differential: every probe expression is evaluated on generated inputs by the default engine (fast path on)
and by the same engine with the fast path off; results (values with their types, error kinds and messages)
must be identical, and wherever the fast path answers at all its value must be the runtime's.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from enclave_core import cel
from enclave_core.cel import fastpath
from enclave_core.cel.engine_celexpr import CelExprEngine

from .conftest import variables

_scalar = (
    st.none()
    | st.booleans()
    | st.integers(-3, 3)
    | st.sampled_from([2**63 - 1, -(2**63), 2**63, 2**64 - 1])
    | st.floats(allow_nan=False, min_value=-2, max_value=2)
    | st.text("abé", max_size=3)
)


def _containers(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.lists(inner, max_size=3) | st.dictionaries(st.sampled_from("abc"), inner, max_size=3)


_json = st.recursive(_scalar, _containers, max_leaves=10)

PROBES = [
    "object.a == 'a'",
    "object.a != 'a'",
    "'a' == object.a",
    "object.a == object.b",
    "object.a == 1",
    "object.a == true",
    "object.a == null",
    "object.a.b == 'ab'",
    "object.a['b'] == 'ab'",
    "object.a[0] == 'a'",
    "object.a[1] == object.b",
    "has(object.a)",
    "has(object.a.b)",
    "!has(object.a.b) || object.a.b == 'a'",
    "has(object.a) && object.a.startsWith('a')",
    "object.a.startsWith('a') && object.b.endsWith('b')",
    "object.a.contains('é')",
    "object.a < object.b",
    "object.a >= 1",
    "object.a <= 'b'",
    "object.a > -2",
    "object.a + object.b == 'ab'",
    "object.a + 1 > 2",
    "object.a + 9223372036854775807 > 0",
    "size(object.a) == 2",
    "object.a.size() > 1",
    "'a' in object.a",
    "object.a in object.b",
    "object.a in ['a', 'b']",
    "object.a in ['a', 1]",
    "object.a ? object.b == 'a' : false",
    "object.a ? 1 : 0",
    "object.a",
    "object.a.b",
    "!object.a",
    "object.a || object.b",
    "object.a && object.b",
    "object.a == 'a' || object.b.c == 'b'",
    "object.b.c == 'b' && false",
    "(object.a ? 1 : 0) + (object.b ? 2 : 0)",
    "object.a == 'a' && 3 >= 0",
    "object.a == object.a",
    "oldObject == null",
    "request.userInfo.username.startsWith('al')",
    "'system:authenticated' in request.userInfo.groups",
    "request.operation == 'CREATE' && object.a != 'x'",
    "object.a.b == 'a' && false",
    "object.a.b == 'a' || true",
    "true && object.a.b == 'a'",
    "false || object.a.b.startsWith('a')",
    "object.a.b == 'a' || object.a.c == 'b' || object.a.b.c == 'c'",
    "has(object.a.b) && object.a.b == object.a.c",
    "(object.a == 'a' ? 1 : 0) + (object.b == 'b' ? 2 : 0) + (object.a == 'a' ? 4 : 0) == 5",
    "(object.a == 'a' ? 4611686018427387904 : 0) + (object.b == 'b' ? 4611686018427387904 : 0) > 0",
]


@pytest.fixture(scope="module")
def engines() -> tuple[cel.CelFacade, cel.CelFacade]:
    return cel.CelFacade(CelExprEngine()), cel.CelFacade(CelExprEngine(fast_path=False))


def _same(left: cel.EvalResult[Any], right: cel.EvalResult[Any]) -> bool:
    if isinstance(left, cel.Ok) and isinstance(right, cel.Ok):
        return type(left.value) is type(right.value) and left.value == right.value
    if isinstance(left, cel.Failed) and isinstance(right, cel.Failed):
        return left.error == right.error
    return False


def test_common_conditions_have_a_fast_path(engines: tuple[cel.CelFacade, cel.CelFacade]) -> None:
    fast, _ = engines
    for text in PROBES:
        assert fast.compile(text, cel.RULE_CONDITION_ENV).compiled._fast is not None, text  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "text",
    [
        "object.a.matches('a+')",  # RE2, not Python's re
        "object.a.all(x, x == 1)",
        "now > timestamp('2024-01-01T00:00:00Z')",
        "object.a == 1.5",
        "object.a / 2 == 1",
        "cel.bind(x, object.a, x == 1)",
        "object.?a.orValue('') == ''",
    ],
)
def test_other_constructs_are_left_to_the_runtime(engines: tuple[cel.CelFacade, cel.CelFacade], text: str) -> None:
    fast, _ = engines
    assert fast.compile(text, cel.RULE_CONDITION_ENV).compiled._fast is None  # type: ignore[attr-defined]


@functools.cache
def _programs(text: str) -> tuple[Any, Any]:
    """``text`` compiled with and without the fast path, once for all examples: compiling is the costly part (it
    took a minute of the unit run, every probe twice per example), and what the property compares is evaluation."""
    fast, slow = cel.CelFacade(CelExprEngine()), cel.CelFacade(CelExprEngine(fast_path=False))
    return fast.compile(text, cel.RULE_CONDITION_ENV), slow.compile(text, cel.RULE_CONDITION_ENV)


@settings(max_examples=150, deadline=None)
@given(obj=st.dictionaries(st.sampled_from("abc"), _json, max_size=3))
def test_fast_path_answers_as_the_runtime(obj: dict[str, Any]) -> None:
    data = {**variables(), "object": obj}
    for text in PROBES:
        program, slow_program = _programs(text)
        reference = slow_program.evaluate(data)
        answered = program.compiled._fast(data)
        if answered is not fastpath.UNANSWERED:
            assert isinstance(reference, cel.Ok), (text, obj, answered, reference)
            assert type(answered) is type(reference.value), (text, obj)
            assert answered == reference.value, (text, obj)
        assert _same(program.evaluate(data), reference), (text, obj)


def test_batches_answer_as_the_runtime(engines: tuple[cel.CelFacade, cel.CelFacade]) -> None:
    fast, slow = engines
    texts = [t for t in [*PROBES, "object.a.matches('a')"] if not fast.check(t, cel.RULE_CONDITION_ENV)]
    inputs = [{}, {"a": "a", "b": "b"}, {"a": 1, "b": True}, {"a": {"b": "ab"}}, {"a": ["a", "b"], "b": "a"}]
    for obj in inputs:
        data = {**variables(), "object": obj}
        for chosen in (texts, texts[:1], texts[:2], [t for t in texts if "matches" not in t]):
            batch = fast.condition_batch([fast.condition(t, cel.RULE_CONDITION_ENV) for t in chosen])
            expected = [slow.condition(t, cel.RULE_CONDITION_ENV).evaluate(data) for t in chosen]
            got = batch.evaluate(data)
            assert all(_same(g, e) for g, e in zip(got, expected, strict=True)), (obj, chosen)
            values = [e.value for e in expected if isinstance(e, cel.Ok)]
            if len(values) == len(expected):
                assert batch.bits(data) == sum(1 << i for i, value in enumerate(values) if value is True), obj
            else:
                assert batch.bits(data) is None, (obj, chosen)
            many = fast.evaluate_all([fast.condition(t, cel.RULE_CONDITION_ENV) for t in chosen], data)
            assert all(_same(g, e) for g, e in zip(many, expected, strict=True)), (obj, chosen)


def test_constant_parts_are_worked_out_once() -> None:
    facade = cel.CelFacade(CelExprEngine())
    program = facade.condition("object.a == 'a' && 3 >= 0 && 'x' + 'y' == 'xy'", cel.RULE_CONDITION_ENV)
    assert program.evaluate({"object": {"a": "a"}}) == cel.Ok(True)
    assert program.evaluate({"object": {"a": "b"}}) == cel.Ok(False)
    # a constant part that errors is left to the runtime, which reports it
    failing = facade.condition("object.a == 'a' && 9223372036854775807 + 1 > 0", cel.RULE_CONDITION_ENV)
    result = failing.evaluate({"object": {"a": "a"}})
    assert isinstance(result, cel.Failed)
    assert result.error.kind is cel.ErrorKind.OVERFLOW


def test_program_reads_only_referenced_variables() -> None:
    facade = cel.CelFacade(CelExprEngine())
    assert facade.condition("object.a == 'a'", cel.RULE_CONDITION_ENV).reads == frozenset({"object"})
    program = facade.condition("request.operation == 'CREATE' && now > now", cel.RULE_CONDITION_ENV)
    assert program.reads == frozenset({"request", "now"})
