"""The CEL cost budget: expensive expressions are refused when compiled, an input that would take an expression
over the budget fails the evaluation closed (and fast), and ordinary expressions and inputs are untouched."""

from __future__ import annotations

import time
from typing import Any

import pytest

from enclave_core import cel
from enclave_core.cel import cost, limits

ENV = cel.RULE_CONDITION_ENV
LITERAL = "[" + ",".join(str(i) for i in range(100)) + "]"


def _facade() -> cel.CelFacade:
    return cel.CelFacade(cel.new_engine())


def _refusal(expression: str) -> str:
    with pytest.raises(cel.CelCompileError) as caught:
        _facade().condition(expression, ENV)
    return str(caught.value)


@pytest.mark.parametrize(
    "expression",
    [
        f"{LITERAL}.all(a, {LITERAL}.all(b, {LITERAL}.all(c, a + b + c >= 0)))",
        "'x'" + ".replace('x', 'xxxxxxxxxx')" * 10 + " != ''",
        "cel.bind(s0, 'xxxxxxxxxxxxxxxx', "
        + "".join(f"cel.bind(s{i + 1}, s{i} + s{i}, " for i in range(20))
        + "s20.size() > 0"
        + ")" * 21,
    ],
    ids=["nested-comprehensions-over-literals", "string-repetition-by-replace", "string-doubling-by-bind"],
)
def test_expression_over_the_budget_whatever_its_input_is_refused_when_compiled(expression: str) -> None:
    started = time.perf_counter()
    message = _refusal(expression)
    assert f"CEL cost budget of {limits.COST_BUDGET}" in message
    assert time.perf_counter() - started < 5


def test_cross_product_over_the_input_refused_when_it_cannot_take_small_inputs() -> None:
    expression = (
        "object.spec.items.all(a, object.spec.items.all(b, object.spec.items.all(c, "
        "object.spec.items.all(d, a + b + c + d != 'x'))))"
    )
    assert f"inputs of {limits.MIN_INPUT_SIZE} elements" in _refusal(expression)


def _items(count: int) -> dict[str, Any]:
    return {"spec": {"items": [f"i{n}" for n in range(count)]}}


def test_input_that_would_take_an_expression_over_the_budget_fails_closed_fast() -> None:
    program = _facade().condition(
        "object.spec.items.all(a, object.spec.items.all(b, object.spec.items.all(c, a != b || b != c)))", ENV
    )
    small = program.evaluate({"object": _items(10)})
    assert small == cel.Ok(False)  # evaluated: a == b == c for the first element
    started = time.perf_counter()
    big = program.evaluate({"object": _items(2000)})
    assert time.perf_counter() - started < 2
    assert isinstance(big, cel.Failed)
    assert big.error.kind is cel.ErrorKind.LIMIT
    assert f"CEL cost budget of {limits.COST_BUDGET}" in big.error.message
    assert "not evaluated" in big.error.message


def test_input_larger_than_the_uniform_bound_but_cheap_on_its_paths_is_evaluated() -> None:
    """Two nested loops fit the budget for lists of about 128 (max_input); 500 containers of three variables
    each is measured path by path and found cheap, so it is evaluated."""
    program = _facade().condition("object.spec.containers.all(c, c.env.all(e, e.name != 'X'))", ENV)
    bound = program.compiled.facts.cost if program.compiled.facts else None
    assert bound is not None
    assert bound.max_input < 500
    pod = {
        "spec": {"containers": [{"name": f"c{i}", "env": [{"name": f"e{j}"} for j in range(3)]} for i in range(500)]}
    }
    assert program.evaluate({"object": pod}) == cel.Ok(True)


def test_a_long_string_elsewhere_in_the_object_does_not_count() -> None:
    """Only what the expression reads is measured: a 100 kB annotation does not fail a loop over containers."""
    program = _facade().condition("object.spec.containers.all(c, c.image.startsWith('registry/'))", ENV)
    pod = {
        "metadata": {"annotations": {"big": "x" * 100_000}},
        "spec": {"containers": [{"image": "registry/app"}] * 3},
    }
    assert program.evaluate({"object": pod}) == cel.Ok(True)


@pytest.mark.parametrize(
    "expression",
    [
        "object.metadata.name.startsWith('team-')",
        "object.metadata.labels['app'] == 'web'",
        "object.spec.replicas <= 10",
        "size(object.metadata.name) < 64",
    ],
)
def test_linear_expressions_are_never_measured(expression: str) -> None:
    program = _facade().condition(expression, ENV)
    bound = program.compiled.facts.cost if program.compiled.facts else None
    assert bound is not None
    assert bound.unbounded


def test_condition_batch_still_answers_each_condition_when_one_is_over_budget() -> None:
    facade = _facade()
    cheap = facade.condition("object.spec.items.size() > 1", ENV)
    costly = facade.condition(
        "object.spec.items.all(a, object.spec.items.all(b, object.spec.items.all(c, a != b || b != c)))", ENV
    )
    results = facade.condition_batch([cheap, costly]).evaluate({"object": _items(2000)})
    assert results[0] == cel.Ok(True)
    assert isinstance(results[1], cel.Failed)
    assert results[1].error.kind is cel.ErrorKind.LIMIT
    many = facade.evaluate_all([cheap, costly, cheap], {"object": _items(2000)})
    assert many[0] == many[2] == cel.Ok(True)
    assert isinstance(many[1], cel.Failed)


def test_largest_stops_at_the_first_value_over_the_limit() -> None:
    assert cost.largest({"a": ["x" * 10, [1, 2, 3]]}, 100) == 10
    assert cost.largest(["y" * 50, "z" * 500], 40) > 40


def test_on_input_charges_what_the_input_holds() -> None:
    """A caller budgeting several evaluations together (a ValidatingAdmissionPolicy's in ``enclave test``) is
    charged by the input each one reads: quadratic in the list walked twice, nothing for what it does not read."""
    program = cel.default().condition("object.data.all(a, object.data.all(b, a != b))", ENV)
    bound = program.compiled.facts
    assert bound is not None
    assert bound.cost is not None
    small = cost.on_input(bound.cost, {"object": {"data": {f"k{i}": "v" for i in range(10)}}})
    large = cost.on_input(bound.cost, {"object": {"data": {f"k{i}": "v" for i in range(100)}}})
    elsewhere = cost.on_input(bound.cost, {"object": {"data": {}, "spec": {f"k{i}": "v" for i in range(100)}}})
    assert 50 * small < large
    assert elsewhere < small
