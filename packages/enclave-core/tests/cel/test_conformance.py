"""The conformance suite: every case of ``conformance.yaml`` on every engine behind the facade.

Selectable engines (``cel.engine_names()``) must pass every case. The other adapter (cel-python)
is run too, and its row is asserted: its pass count and exactly the known gaps of ``celpy_known_gaps.yaml``,
because the engine choice is recorded with both counts.
"""

from __future__ import annotations

import pathlib
from dataclasses import dataclass
from typing import Any

import pytest
import yaml

from enclave_core import cel
from enclave_core.quantity import Quantity

from .conftest import variables

_CASES_FILE = pathlib.Path(__file__).with_name("conformance.yaml")
_KNOWN_GAPS_FILE = pathlib.Path(__file__).with_name("celpy_known_gaps.yaml")
CELPY_PASSED = 163
"""cel-python's pass count, as docs/decisions/0001-cel-engine.md records it."""
ALL_ENGINES = ["cel-expr-python", "cel-python"]


@dataclass(frozen=True)
class Case:
    expr: str
    spec: dict[str, Any]

    @property
    def id(self) -> str:
        return self.expr[:60]


def load_cases() -> list[Case]:
    raw = yaml.safe_load(_CASES_FILE.read_text())
    return [Case(item["expr"], item) for item in raw]


CASES = load_cases()


def _same(actual: Any, expected: Any) -> bool:
    """Equality that also checks types, so ``1`` is not ``1.0`` and ``True`` is not ``1``."""
    if isinstance(expected, list):
        return isinstance(actual, list) and len(actual) == len(expected) and all(map(_same, actual, expected))
    if isinstance(expected, dict):
        return (
            isinstance(actual, dict)
            and actual.keys() == expected.keys()
            and all(_same(actual[k], v) for k, v in expected.items())
        )
    return type(actual) is type(expected) and actual == expected


def run_case(facade: cel.CelFacade, case: Case) -> str | None:
    """``None`` when the case passes, else a short explanation."""
    spec = case.spec
    try:
        program = facade.compile(case.expr, cel.RULE_CONDITION_ENV)
    except cel.CelCompileError as exc:
        return None if spec.get("compile_error") else f"unexpected compile error: {exc}"
    if spec.get("compile_error"):
        return "compiled, but a compile error was expected"
    result = program.evaluate(variables())
    if "error" in spec:
        if isinstance(result, cel.Failed):
            if result.error.kind.value == spec["error"]:
                return None
            return f"error kind {result.error.kind.value}, expected {spec['error']}: {result.error.message}"
        return f"value {result.value!r}, expected error {spec['error']}"
    if isinstance(result, cel.Failed):
        return f"unexpected error {result.error.kind.value}: {result.error.message}"
    if "quantity" in spec:
        expected = spec["quantity"]
        if isinstance(expected, list):
            ok = isinstance(result.value, list) and [Quantity.parse(q) for q in expected] == result.value
        else:
            ok = isinstance(result.value, Quantity) and result.value == Quantity.parse(expected)
        return None if ok else f"value {result.value!r}, expected quantity {expected!r}"
    return None if _same(result.value, spec["value"]) else f"value {result.value!r}, expected {spec['value']!r}"


@pytest.fixture(scope="module", params=ALL_ENGINES)
def facade(request: pytest.FixtureRequest) -> cel.CelFacade:
    return cel.CelFacade(cel.new_engine(request.param))


def test_suite_is_large_enough() -> None:
    assert len(CASES) >= 100


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_default_engine(case: Case) -> None:
    """Each case on the default engine, one test per case for readable failures."""
    failure = run_case(cel.default(), case)
    assert failure is None, failure


def test_pass_counts_per_engine(facade: cel.CelFacade, capsys: pytest.CaptureFixture[str]) -> None:
    """Run the whole table on one engine and report the count; selectable engines must pass all."""
    failures = {case.expr: f for case in CASES if (f := run_case(facade, case)) is not None}
    passed = len(CASES) - len(failures)
    with capsys.disabled():
        print(f"\nCEL conformance [{facade.engine.name}]: {passed}/{len(CASES)} passed")
    if facade.engine.name in cel.engine_names():
        assert not failures, failures
    elif facade.engine.name == "cel-python":
        # The comparison engine's row is asserted too: exactly its recorded gaps fail, everything else passes.
        known = set(yaml.safe_load(_KNOWN_GAPS_FILE.read_text()))
        assert set(failures) == known, {
            "newly failing": {expr: failures[expr] for expr in set(failures) - known},
            "now passing (remove from celpy_known_gaps.yaml)": sorted(known - set(failures)),
        }
        assert passed == CELPY_PASSED
