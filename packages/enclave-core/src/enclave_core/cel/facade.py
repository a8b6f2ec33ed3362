"""The one way Enclave components compile, check and evaluate CEL.

Why a facade: the engine is an implementation detail chosen by measurement
(``docs/decisions/0001-cel-engine.md``); call sites only see programs that are compiled once,
cached by text and declaration, guarded against runaway expressions, and that return typed
results which never raise.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, Generic, TypeVar

from enclave_core.cel import cost, limits
from enclave_core.cel.engine import CompiledExpression, Engine
from enclave_core.cel.environment import Environment, ResultType
from enclave_core.cel.errors import CelCompileError, CelIssue, ErrorKind, EvalError
from enclave_core.cel.results import EvalResult, Failed, Ok
from enclave_core.quantity import Quantity

__all__ = ["CelFacade", "ConditionBatch", "Program"]

T = TypeVar("T")

_OPAQUE_MESSAGES = frozenset({"kubernetes.Quantity", "kubernetes.URL", "net.IP", "net.CIDR"})

_ACCEPTED_STATIC: dict[ResultType, tuple[str, ...]] = {
    ResultType.ANY: (),
    ResultType.BOOL: ("bool", "dyn"),
    ResultType.QUANTITY: ("kubernetes.quantity", "dyn"),
    ResultType.QUANTITIES: ("kubernetes.quantity", "dyn", "list"),
}
"""Statically known result types that may still produce what the caller needs at run time."""


def _as_bool(text: str, value: Any) -> EvalResult[bool]:
    if isinstance(value, bool):
        return Ok(value)
    return Failed(EvalError(ErrorKind.RESULT_TYPE, f"expected a bool, got {type(value).__name__}", text))


def _as_quantity(text: str, value: Any) -> EvalResult[Quantity]:
    if isinstance(value, Quantity):
        return Ok(value)
    return Failed(EvalError(ErrorKind.RESULT_TYPE, f"expected a quantity, got {type(value).__name__}", text))


def _as_quantities(text: str, value: Any) -> EvalResult[list[Quantity]]:
    if isinstance(value, Quantity):
        return Ok([value])
    if isinstance(value, list) and all(isinstance(v, Quantity) for v in value):
        return Ok(list(value))
    return Failed(
        EvalError(ErrorKind.RESULT_TYPE, "expected a quantity or a list of quantities", text),
    )


def _as_any(text: str, value: Any) -> EvalResult[Any]:
    return Ok(value)


class Program(Generic[T]):
    """A compiled, checked expression bound to its declaration and expected result type."""

    __slots__ = ("_compiled", "_convert", "_engine", "env", "reads", "result_type")

    def __init__(
        self,
        compiled: CompiledExpression,
        engine: Engine,
        env: Environment,
        result_type: ResultType,
        convert: Callable[[str, Any], EvalResult[T]],
    ) -> None:
        self._compiled = compiled
        self._engine = engine
        self._convert = convert
        self.env = env
        self.result_type = result_type
        facts = compiled.facts
        self.reads: frozenset[str] = env.names if facts is None else frozenset(facts.paths)
        """The variables the expression references (all declared ones when the engine cannot tell): a caller
        may leave the others out of the variables it passes."""

    @property
    def text(self) -> str:
        return self._compiled.text

    @property
    def compiled(self) -> CompiledExpression:
        return self._compiled

    def evaluate(self, variables: Mapping[str, Any]) -> EvalResult[T]:
        """Evaluate with named variables (Kubernetes objects as plain dicts); never raises."""
        result = self._compiled.evaluate(variables)
        if isinstance(result, Failed):
            return result
        if self._convert is _as_bool and type(result.value) is bool:
            return result
        return self._convert(self._compiled.text, result.value)

    def __repr__(self) -> str:
        return f"Program({self.text!r}, env={self.env.name}, result={self.result_type.value})"


class CelFacade:
    """Compile cache, guards and typed evaluation on top of one engine."""

    def __init__(self, engine: Engine, cache_size: int = 4096) -> None:
        self.engine = engine
        self._cache_size = cache_size
        self._cache: dict[tuple[str, Environment, ResultType], Program[Any] | CelCompileError] = {}
        self._lock = threading.Lock()

    # -- compiling ------------------------------------------------------------------------------

    def condition(self, expression: str, env: Environment) -> Program[bool]:
        """A boolean condition (rule conditions, selectors, policy conditions, match conditions)."""
        return self._compile(expression, env, ResultType.BOOL, _as_bool)

    def quantity(self, expression: str, env: Environment) -> Program[Quantity]:
        """An expression that must yield one quantity."""
        return self._compile(expression, env, ResultType.QUANTITY, _as_quantity)

    def quantities(self, expression: str, env: Environment) -> Program[list[Quantity]]:
        """CustomQuota ``sources[].cel``: a quantity or a list of quantities, always returned as a list."""
        return self._compile(expression, env, ResultType.QUANTITIES, _as_quantities)

    def compile(self, expression: str, env: Environment) -> Program[Any]:
        """An expression of any result type (tests, tooling)."""
        return self._compile(expression, env, ResultType.ANY, _as_any)

    def check(self, expression: str, env: Environment, result: ResultType = ResultType.BOOL) -> list[CelIssue]:
        """Every problem that would stop ``expression`` from compiling; empty when it is valid.

        The validating webhook calls this and puts the issues, with their positions, in its denial.
        """
        converters: dict[ResultType, Callable[[str, Any], EvalResult[Any]]] = {
            ResultType.ANY: _as_any,
            ResultType.BOOL: _as_bool,
            ResultType.QUANTITY: _as_quantity,
            ResultType.QUANTITIES: _as_quantities,
        }
        try:
            self._compile(expression, env, result, converters[result])
        except CelCompileError as exc:
            return list(exc.issues)
        return []

    def _compile(
        self,
        expression: str,
        env: Environment,
        result: ResultType,
        convert: Callable[[str, Any], EvalResult[T]],
    ) -> Program[T]:
        key = (expression, env, result)
        cached = self._cache.get(key)
        if cached is None:
            try:
                cached = self._build(expression, env, result, convert)
            except CelCompileError as exc:
                cached = exc
            with self._lock:
                if len(self._cache) >= self._cache_size:
                    self._cache.clear()
                self._cache[key] = cached
        if isinstance(cached, CelCompileError):
            raise cached
        return cached

    def _build(
        self,
        expression: str,
        env: Environment,
        result: ResultType,
        convert: Callable[[str, Any], EvalResult[T]],
    ) -> Program[T]:
        if len(expression) > limits.MAX_EXPRESSION_LENGTH:
            raise CelCompileError(
                expression,
                [CelIssue(expression, f"expression longer than {limits.MAX_EXPRESSION_LENGTH} characters")],
            )
        if not expression.strip():
            raise CelCompileError(expression, [CelIssue(expression, "expression is empty")])
        compiled = self.engine.compile(expression, env)
        issues = _guard(compiled)
        accepted = _ACCEPTED_STATIC[result]
        static = compiled.static_type
        if accepted and not any(static == a or static.startswith(a + "<") for a in accepted):
            issues.append(CelIssue(expression, f"expression must yield {_describe(result)}, not {static}"))
        if issues:
            raise CelCompileError(expression, issues)
        return Program(compiled, self.engine, env, result, convert)

    # -- evaluating several programs on one input -------------------------------------------------

    def evaluate_all(self, programs: Sequence[Program[T]], variables: Mapping[str, Any]) -> list[EvalResult[T]]:
        """Evaluate programs on the same input, converting it once (a rule's condition list)."""
        if not programs:
            return []
        raw = self.engine.evaluate_many([p.compiled for p in programs], variables)
        out: list[EvalResult[T]] = []
        for program, result in zip(programs, raw, strict=True):
            if isinstance(result, Failed):
                out.append(result)
            else:
                out.append(program._convert(program.text, result.value))
        return out

    def condition_batch(self, programs: Sequence[Program[bool]]) -> ConditionBatch:
        """Boolean conditions that are evaluated together on every input (a namespace's rule conditions),
        folded into as few programs as the guards allow (see :class:`ConditionBatch`). Compiled once."""
        return ConditionBatch(self, programs)


_BATCH_BITS: Final = 62
"""Conditions per folded program: bit 62 would still fit CEL's signed 64-bit int, 62 keeps it clear."""
_TRUE: Final[Ok[bool]] = Ok(True)
_FALSE: Final[Ok[bool]] = Ok(False)


def _balanced_sum(terms: list[str]) -> str:
    """``a + b + ...`` as a balanced tree: a left-leaning chain would nest one level per term and trip the
    depth guard long before the node or length guard."""
    if len(terms) == 1:
        return terms[0]
    middle = len(terms) // 2
    return f"({_balanced_sum(terms[:middle])} + {_balanced_sum(terms[middle:])})"


class ConditionBatch:
    """Many boolean conditions on the same input, answered by one evaluation instead of one each.

    Why: every evaluation pays a fixed price (the call into the runtime, the result conversion), and a
    namespace's rule conditions are all asked on every request. The conditions are folded into one program
    ``((c0) ? 1 : 0) + ((c1) ? 2 : 0) + ...`` whose integer result carries every condition's value as a bit.
    Semantics are exactly those of evaluating each condition alone: each ``ci`` is its own subexpression, so
    CEL's error absorption inside it is untouched, and when any condition errors or yields a non-bool the
    folded program errors too and that chunk's conditions are evaluated one by one, giving each its own
    result and error. Chunks hold at most 62 conditions and stay within the facade's length, node and depth
    guards; a chunk that still does not compile is evaluated one by one as well.
    """

    __slots__ = ("_chunks", "_facade", "_programs")

    def __init__(self, facade: CelFacade, programs: Sequence[Program[bool]]) -> None:
        self._facade = facade
        self._programs = list(programs)
        self._chunks: list[tuple[int, int, Program[Any] | None]] = []
        start = 0
        while start < len(self._programs):
            end, length, nodes = start, 0, 0
            while end < len(self._programs) and end - start < _BATCH_BITS:
                program = self._programs[end]
                facts = program.compiled.facts
                more_nodes = (facts.nodes if facts is not None else 0) + 4
                more_length = len(program.text) + 24
                if end > start and (
                    length + more_length > limits.MAX_EXPRESSION_LENGTH or nodes + more_nodes > limits.MAX_AST_NODES
                ):
                    break
                length, nodes, end = length + more_length, nodes + more_nodes, end + 1
            self._chunks.append((start, end, self._fold(self._programs[start:end])))
            start = end

    def _fold(self, programs: list[Program[bool]]) -> Program[Any] | None:
        if len(programs) < 2 or len({p.env for p in programs}) != 1:
            return None
        # The newline ends a trailing `//` comment of a condition before the closing parenthesis.
        terms = [f"(({p.text}\n) ? {1 << bit} : 0)" for bit, p in enumerate(programs)]
        try:
            return self._facade.compile(_balanced_sum(terms), programs[0].env)
        except CelCompileError:
            return None

    def bits(self, variables: Mapping[str, Any]) -> int | None:
        """Every condition's value as one int (bit ``i`` set: condition ``i`` is true) when all of them
        evaluated to bools without an error, else None (then :meth:`evaluate` gives each result and error).
        The common case costs one evaluation and no result objects per condition."""
        if len(self._chunks) == 1:  # the usual case: one folded program (or one condition), one evaluation
            start, end, program = self._chunks[0]
            if program is not None:
                result = program.compiled.evaluate(variables)
                return result.value if isinstance(result, Ok) and type(result.value) is int else None
        folded = [program for _, _, program in self._chunks if program is not None]
        raw = iter(self._facade.engine.evaluate_many([p.compiled for p in folded], variables) if folded else ())
        total = 0
        for start, end, program in self._chunks:
            if program is not None:
                result = next(raw)
                if not isinstance(result, Ok) or type(result.value) is not int:
                    return None
                total |= result.value << start
                continue
            if end - start != 1:
                return None
            single = self._programs[start].evaluate(variables)
            if not isinstance(single, Ok):
                return None
            if single.value:
                total |= 1 << start
        return total

    def evaluate(self, variables: Mapping[str, Any]) -> list[EvalResult[bool]]:
        """One result per condition, in order; never raises."""
        folded = [program for _, _, program in self._chunks if program is not None]
        raw = iter(self._facade.engine.evaluate_many([p.compiled for p in folded], variables) if folded else ())
        out: list[EvalResult[bool]] = []
        for start, end, program in self._chunks:
            if program is not None:
                result = next(raw)
                if isinstance(result, Ok) and type(result.value) is int:
                    bits = result.value
                    out.extend(_TRUE if bits >> bit & 1 else _FALSE for bit in range(end - start))
                    continue
            out.extend(self._facade.evaluate_all(self._programs[start:end], variables))
        return out


def _describe(result: ResultType) -> str:
    return {
        ResultType.ANY: "a value",
        ResultType.BOOL: "a bool",
        ResultType.QUANTITY: "a quantity",
        ResultType.QUANTITIES: "a quantity or a list of quantities",
    }[result]


def _guard(compiled: CompiledExpression) -> list[CelIssue]:
    """The static runaway guard; engines without a syntax tree only get the length limit."""
    facts = compiled.facts
    text = compiled.text
    if facts is None:
        return []
    issues: list[CelIssue] = []
    if facts.depth > limits.MAX_AST_DEPTH:
        issues.append(CelIssue(text, f"expression nested deeper than {limits.MAX_AST_DEPTH} levels"))
    if facts.nodes > limits.MAX_AST_NODES:
        issues.append(CelIssue(text, f"expression has more than {limits.MAX_AST_NODES} syntax nodes"))
    if facts.comprehension_nesting > limits.MAX_COMPREHENSION_NESTING:
        issues.append(
            CelIssue(text, f"more than {limits.MAX_COMPREHENSION_NESTING} nested comprehensions (all/exists/map...)")
        )
    for name in sorted(facts.functions & limits.FORBIDDEN_FUNCTIONS):
        issues.append(CelIssue(text, f"function {name} is not allowed"))
    if facts.cost is not None:
        why = cost.compile_problem(facts.cost)
        if why:
            issues.append(CelIssue(text, why))
    for name in sorted(facts.messages & _OPAQUE_MESSAGES):
        issues.append(CelIssue(text, f"{name} values can only be built with their conversion function"))
    return issues
