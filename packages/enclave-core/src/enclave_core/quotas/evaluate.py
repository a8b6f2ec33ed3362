"""A quota source compiled once: does an object count, and for how much."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from enclave_core import cel
from enclave_core.api.quotas import CustomQuotaSpec, GlobalCustomQuotaSpec, Source, SourceSelector
from enclave_core.quantity import Quantity
from enclave_core.quotas.jsonpath import JsonPath, JsonPathError, compile_path
from enclave_core.selectors import LabelSelector, matches, matches_any
from enclave_core.snapshots.quotas import TargetSource

ONE = Quantity.from_units(1)


class UsageError(ValueError):
    """An object's usage cannot be read: the path yields nothing, or a value that is not a quantity."""


@dataclass(frozen=True, slots=True)
class _Selector:
    labels: LabelSelector | None
    fields: tuple[JsonPath, ...]
    programs: tuple[cel.Program[bool], ...]

    def holds(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
        if self.labels is not None and not matches(self.labels, labels):
            return False
        if not all(path.holds(obj) for path in self.fields):
            return False
        return all(_true(program.evaluate({"object": obj})) for program in self.programs)


def _true(result: cel.EvalResult[bool]) -> bool:
    return isinstance(result, cel.Ok) and result.value is True


@dataclass(frozen=True, slots=True)
class CompiledSource:
    """One resolved source with its selectors and usage expression compiled."""

    source: TargetSource
    selectors: tuple[_Selector, ...]
    path: JsonPath | None
    program: cel.Program[list[Quantity]] | None

    def selects(self, obj: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
        """Selectors are ORed; none means every object of the kind (after scope and namespace selection)."""
        return not self.selectors or any(selector.holds(obj, labels) for selector in self.selectors)

    def usage(self, obj: Mapping[str, Any]) -> Quantity:
        """What ``obj`` counts for: 1 for count, the sum at path/cel for add, its negative for sub."""
        op = self.source.op
        if op == "count":
            return ONE
        total = Quantity(0)
        if self.path is not None:
            values = [value for value in self.path.values(obj) if value is not None]
            if not values:
                raise UsageError(f"path {self.path.text!r} resolves to nothing on this object")
            for value in values:
                if isinstance(value, bool) or not isinstance(value, int | str):
                    raise UsageError(f"path {self.path.text!r} yields {value!r}, not a quantity")
                try:
                    total = total + Quantity.parse(value)
                except ValueError as err:
                    raise UsageError(f"path {self.path.text!r} yields {value!r}, not a quantity: {err}") from None
        elif self.program is not None:
            result = self.program.evaluate({"object": obj})
            if not isinstance(result, cel.Ok):
                raise UsageError(f"cel {self.program.text!r}: {result.error}")
            for value in result.value:
                total = total + value
        return -total if op == "sub" else total


def _compile_selector(selector: SourceSelector) -> _Selector:
    labels = None
    if selector.match_labels or selector.match_expressions:
        labels = LabelSelector(match_labels=selector.match_labels, match_expressions=selector.match_expressions)
    fields = tuple(compile_path(text) for text in selector.field_selectors or ())
    facade = cel.default()
    programs = tuple(facade.condition(text, cel.QUOTA_SELECTOR_ENV) for text in selector.cel_expressions or ())
    return _Selector(labels, fields, programs)


def compile_source(source: TargetSource) -> CompiledSource:
    """Compile ``source``; raises :class:`JsonPathError` or :class:`enclave_core.cel.CelCompileError`."""
    path = compile_path(source.path) if source.path and source.op != "count" else None
    program = None
    if source.cel and source.op != "count":
        program = cel.default().quantities(source.cel, cel.QUOTA_SOURCE_ENV)
    return CompiledSource(source, tuple(_compile_selector(s) for s in source.selectors or ()), path, program)


def scope_matches(scope_selectors: Sequence[LabelSelector] | None, labels: Mapping[str, str]) -> bool:
    """``scopeSelectors`` are ORed; none governs every object."""
    return not scope_selectors or matches_any(scope_selectors, labels)


def custom_quota_problems(spec: CustomQuotaSpec | GlobalCustomQuotaSpec) -> list[str]:
    """What is wrong with a quota spec beyond its schema, each naming the field: usage expressions and
    selectors that do not compile, path/cel with count, both or neither of path and cel."""
    problems: list[str] = []
    for index, source in enumerate(spec.sources):
        problems += source_problems(source, f"spec.sources[{index}]")
    return problems


def source_problems(source: Source, field: str) -> list[str]:
    problems: list[str] = []
    if source.op == "count":
        if source.path:
            problems.append(f"{field}.path: must be empty when op is count")
        if source.cel:
            problems.append(f"{field}.cel: must be empty when op is count")
    elif source.path and source.cel:
        problems.append(f"{field}: set path or cel, not both")
    elif not source.path and not source.cel:
        problems.append(f"{field}: op {source.op} needs a path or a cel expression")
    if source.path and source.op != "count":
        try:
            compile_path(source.path)
        except JsonPathError as err:
            problems.append(f"{field}.path: {err}")
    if source.cel and source.op != "count":
        problems += [
            f"{field}.cel: {issue}" for issue in cel.check(source.cel, cel.QUOTA_SOURCE_ENV, cel.ResultType.QUANTITIES)
        ]
    for s_index, selector in enumerate(source.selectors or ()):
        for f_index, text in enumerate(selector.field_selectors or ()):
            try:
                compile_path(text)
            except JsonPathError as err:
                problems.append(f"{field}.selectors[{s_index}].fieldSelectors[{f_index}]: {err}")
        for c_index, text in enumerate(selector.cel_expressions or ()):
            problems += [
                f"{field}.selectors[{s_index}].celExpressions[{c_index}]: {issue}"
                for issue in cel.check(text, cel.QUOTA_SELECTOR_ENV)
            ]
    return problems
