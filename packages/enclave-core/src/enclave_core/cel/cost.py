"""The cost budget of one CEL evaluation: a static estimate like kube-apiserver's, checked on every evaluation.

Why: the size and depth guards (:mod:`enclave_core.cel.limits`) bound the text of an expression, not its
work. Three nested comprehensions over a 1,000-element list, or a chain of ``replace`` calls that multiplies
a string's length at each step, pass them and then hold an admission replica for minutes; ``cel-expr-python``
(Google's C++ runtime) has no cost limit to set and cannot be interrupted from Python.

How: from the checked syntax tree, the estimator bounds every node's size (a list's or map's entries, a
string's characters) and cost (about one unit per node evaluated; a tenth of a unit per character or element
a function walks, as kube-apiserver counts), with comprehensions costing their body once per element of
their range and accumulators growing as their step makes them grow. Sizes that come from the input are
bounded by one number ``n``, the largest list, map or string the expression is given. The estimate is a
non-decreasing function of ``n``, so each expression gets one number when it is compiled:
:attr:`CostBound.max_input`, the largest ``n`` whose estimate stays within :data:`COST_BUDGET`.

* At compile time, an expression whose cost is over the budget whatever its input (a literal list mapped
  three times over itself, a string doubled forty times), or over it for inputs of :data:`MIN_INPUT_SIZE`,
  is refused with a reason naming the budget.
* At evaluation, the projected input (what the expression reads, nothing else) is measured before the
  runtime sees it; an input with a list, map or string larger than :attr:`CostBound.max_input` fails the
  evaluation closed (:class:`~enclave_core.cel.errors.ErrorKind.LIMIT`) instead of running it. Expressions
  linear in their input have a ``max_input`` above anything a request can carry and are not measured.

The estimate is an upper bound: short-circuits and absent fields only make the real cost lower.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, NamedTuple

from enclave_core.cel.limits import COST_BUDGET, INPUT_BOUND, MIN_INPUT_SIZE
from enclave_core.cel.syntax import ELEM

__all__ = ["CostBound", "compile_problem", "estimate", "largest", "on_input", "over_budget"]

_TRAVERSAL: Final = 0.1
"""Cost per element or character a function walks (kube-apiserver's traversal factor)."""

_INDEX: Final = frozenset({"_[_]", "_[?_]", "_?._"})
_LOGIC: Final = frozenset({"_&&_", "_||_", "!_", "@not_strictly_false", "_?_:_"})
_COMPARE: Final = frozenset({"_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_"})
_SAME_SIZE: Final = frozenset(
    {"lowerAscii", "upperAscii", "trim", "reverse", "substring", "charAt", "dyn", "string", "bytes", "sort", "slice"}
)
"""Functions whose result is at most as large as their target or first argument."""
_SCALAR: Final = frozenset(
    {
        "size",
        "contains",
        "startsWith",
        "endsWith",
        "matches",
        "indexOf",
        "lastIndexOf",
        "int",
        "uint",
        "double",
        "bool",
        "type",
        "duration",
        "timestamp",
        "isSorted",
        "sum",
        "min",
        "max",
        "@in",
        "has",
    }
)
"""Functions whose result is a scalar (or one element) however large their arguments."""


Path = tuple[Any, ...]
"""A variable and the keys selected from it (:data:`~enclave_core.cel.syntax.ELEM`: any element or key)."""


class _Est(NamedTuple):
    cost: float
    size: float
    """Entries of a list or map, characters of a string (1 for a scalar)."""
    elem: float
    """Bound of :attr:`size` for any element, field or value inside (recursively)."""
    path: Path | None = None
    """Where in the input the value comes from, when it is a part of it."""


class _Local(NamedTuple):
    size: float
    elem: float
    accumulator: bool
    path: Path | None = None


_SCALAR_EST: Final = _Est(0.0, 1.0, 1.0)


class _Sizes:
    """The size of the input at a path: ``n`` everywhere (compile time), or measured (:class:`_Measured`)."""

    def __init__(self, n: float) -> None:
        self.n = n

    def at(self, path: Path) -> tuple[float, float]:
        """The largest value found at ``path`` and the largest anything inside it."""
        return self.n, self.n


class _Measured(_Sizes):
    """Sizes read from the projected input of one evaluation: the values at each path the estimator asks for,
    and the largest thing inside each list or map, found in one pass over the input."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        super().__init__(0.0)
        self.data = data
        self.known: dict[Path, tuple[float, float]] = {}
        self.inside = _largest_inside(list(data.values()))

    def at(self, path: Path) -> tuple[float, float]:
        found = self.known.get(path)
        if found is None:
            values = [self.data[path[0]]] if path[0] in self.data else []
            for key in path[1:]:
                values = _select(values, key)
            size = inside = 0
            for value in values:
                kind = type(value)
                length = len(value) if kind is str or kind is list or kind is dict else 1
                size = max(size, length)
                inside = max(inside, self.inside.get(id(value), length))
            found = self.known[path] = (float(size), float(inside))
        return found


def _largest_inside(root: Any) -> dict[int, int]:
    """For every list and map under ``root`` (by identity): the largest list, map or string it holds, itself
    included; one post-order pass without recursion (inputs may nest deeper than Python's stack)."""
    found: dict[int, int] = {}
    stack: list[tuple[Any, bool]] = [(root, False)]
    push = stack.append
    while stack:
        item, done = stack.pop()
        if done:
            best = len(item)
            for child in (*item, *item.values()) if type(item) is dict else item:
                size = found.get(id(child))
                if size is None:
                    size = len(child) if type(child) is str else 1
                if size > best:
                    best = size
            found[id(item)] = best
        elif id(item) not in found:
            push((item, True))
            for child in item.values() if type(item) is dict else item:
                kind = type(child)
                if kind is dict or kind is list:
                    push((child, False))
    return found


def _select(values: list[Any], key: Any) -> list[Any]:
    found: list[Any] = []
    for value in values:
        if key is ELEM:
            if isinstance(value, dict):
                found.extend(value.keys())
                found.extend(value.values())
            elif isinstance(value, list):
                found.extend(value)
        elif isinstance(value, dict) and key in value:
            found.append(value[key])
    return found


class _Estimator:
    """One walk of the tree for one way of sizing the input."""

    def __init__(self, variables: frozenset[str], sizes: _Sizes) -> None:
        self.variables = variables
        self.sizes = sizes

    def _input(self, cost: float, path: Path) -> _Est:
        size, elem = self.sizes.at(path)
        return _Est(cost, size, elem, path)

    def visit(self, expr: Any, scope: Mapping[str, _Local]) -> _Est:
        if expr.HasField("const_expr"):
            const = expr.const_expr
            if const.HasField("string_value"):
                return _Est(0.0, float(len(const.string_value)), 1.0)
            if const.HasField("bytes_value"):
                return _Est(0.0, float(len(const.bytes_value)), 1.0)
            return _SCALAR_EST
        if expr.HasField("ident_expr"):
            name = expr.ident_expr.name
            local = scope.get(name)
            if local is not None:
                if local.path is not None:
                    return self._input(1.0, local.path)
                return _Est(1.0, local.size, local.elem)
            if name in self.variables:
                return self._input(1.0, (name,))
            return _Est(1.0, 1.0, 1.0)
        if expr.HasField("select_expr"):
            operand = self.visit(expr.select_expr.operand, scope)
            if expr.select_expr.test_only:
                return _Est(operand.cost + 1.0, 1.0, 1.0)
            if operand.path is not None:
                return self._input(operand.cost + 1.0, (*operand.path, expr.select_expr.field))
            return _Est(operand.cost + 1.0, operand.elem, operand.elem)
        if expr.HasField("call_expr"):
            return self._call(expr.call_expr, scope)
        if expr.HasField("list_expr"):
            elements = [self.visit(e, scope) for e in expr.list_expr.elements]
            return _Est(
                1.0 + sum(e.cost for e in elements) + len(elements),
                float(len(elements)),
                max((max(e.size, e.elem) for e in elements), default=1.0),
            )
        if expr.HasField("struct_expr"):
            cost, elem = 1.0, 1.0
            for entry in expr.struct_expr.entries:
                value = self.visit(entry.value, scope)
                cost += value.cost + 1.0
                elem = max(elem, value.size, value.elem)
                if entry.HasField("map_key"):
                    key = self.visit(entry.map_key, scope)
                    cost += key.cost
                    elem = max(elem, key.size)
            return _Est(cost, float(len(expr.struct_expr.entries)), elem)
        if expr.HasField("comprehension_expr"):
            return self._comprehension(expr.comprehension_expr, scope)
        return _Est(1.0, 1.0, 1.0)

    def _call(self, call: Any, scope: Mapping[str, _Local]) -> _Est:
        function = call.function
        args = [self.visit(a, scope) for a in call.args]
        if call.HasField("target"):
            args.insert(0, self.visit(call.target, scope))
        cost = 1.0 + sum(a.cost for a in args)
        sizes = [a.size for a in args]
        if function in _INDEX:
            first = args[0]
            if first.path is not None:
                key: Any = ELEM
                if len(call.args) > 1 and call.args[1].HasField("const_expr"):
                    const = call.args[1].const_expr
                    key = const.string_value if const.HasField("string_value") else ELEM
                return self._input(cost, (*first.path, key))
            return _Est(cost, first.elem, first.elem)
        if function in _LOGIC:
            if function == "_?_:_":
                then, other = args[1], args[2]
                return _Est(
                    args[0].cost + max(then.cost, other.cost) + 1.0,
                    max(then.size, other.size),
                    max(then.elem, other.elem),
                )
            return _Est(cost, 1.0, 1.0)
        if function in _COMPARE:
            return _Est(cost + _TRAVERSAL * sum(sizes), 1.0, 1.0)
        if function == "_+_" and len(args) == 2:
            return self._concat(call, args, scope)
        if function in ("matches", "find", "findAll"):
            # RE2 is linear in the text for a given pattern, times the pattern's size in the worst case.
            text = args[0].size
            pattern = args[1].size if len(args) > 1 else 1.0
            walked = _TRAVERSAL * text * max(pattern, 1.0)
            if function == "matches":
                return _Est(cost + walked, 1.0, 1.0)
            return _Est(cost + walked, text, text)
        if function in _SCALAR:
            return _Est(cost + _TRAVERSAL * sum(sizes), 1.0, max((a.elem for a in args), default=1.0))
        if function == "replace":
            # Every match (at most one per character, and one more for an empty pattern) becomes the replacement.
            target = args[0].size
            replacement = args[2].size if len(args) > 2 else 1.0
            size = target + (target + 1.0) * replacement
            return _Est(cost + _TRAVERSAL * (target + size), size, 1.0)
        if function == "split":
            target = args[0].size
            return _Est(cost + _TRAVERSAL * target * 2.0, target + 1.0, target)
        if function == "join":
            items = args[0]
            separator = args[1].size if len(args) > 1 else 0.0
            size = items.size * (items.elem + separator)
            return _Est(cost + _TRAVERSAL * size, size, 1.0)
        if function in ("format", "strings.quote", "quote"):
            size = 2.0 * sum(a.size * max(a.elem, 1.0) for a in args) + 2.0
            return _Est(cost + _TRAVERSAL * size, size, 1.0)
        if function in ("flatten",):
            size = args[0].size * max(args[0].elem, 1.0)
            return _Est(cost + _TRAVERSAL * size, size, args[0].elem)
        if function in ("distinct", "sets.contains", "sets.equivalent", "sets.intersects"):
            pairs = args[0].size * (args[1].size if len(args) > 1 else args[0].size)
            return _Est(cost + _TRAVERSAL * pairs, args[0].size if function == "distinct" else 1.0, args[0].elem)
        if function in _SAME_SIZE:
            first = args[0] if args else _SCALAR_EST
            walked = first.size * (math.log2(first.size + 1.0) if function == "sort" else 1.0)
            return _Est(cost + _TRAVERSAL * walked, max(first.size, 1.0) + 32.0, first.elem)
        if function in ("base64.encode", "base64.decode"):
            size = 2.0 * (args[0].size if args else 1.0) + 4.0
            return _Est(cost + _TRAVERSAL * size, size, 1.0)
        # Anything else (quantity(), url(), ip(), math.*, optional.*...) walks its arguments once and returns
        # something no larger than they are.
        largest_size = max(sizes, default=1.0)
        return _Est(cost + _TRAVERSAL * sum(sizes), largest_size, max((a.elem for a in args), default=1.0))

    def _concat(self, call: Any, args: list[_Est], scope: Mapping[str, _Local]) -> _Est:
        left, right = args
        size = left.size + right.size
        elem = max(left.elem, right.elem)
        # An accumulator grows in place (the runtime's comprehension lists): appending costs what is appended.
        walked = min(left.size, right.size) if any(_is_accumulator(a, scope) for a in call.args) else size
        return _Est(left.cost + right.cost + 1.0 + _TRAVERSAL * walked, size, elem)

    def _comprehension(self, comp: Any, scope: Mapping[str, _Local]) -> _Est:
        iterated = self.visit(comp.iter_range, scope)
        count = iterated.size
        init = self.visit(comp.accu_init, scope)
        inner = dict(scope)
        path = None if iterated.path is None else (*iterated.path, ELEM)
        element = _Local(iterated.elem, iterated.elem, False, path)
        if comp.iter_var:
            inner[comp.iter_var] = element
        if comp.iter_var2:
            inner[comp.iter_var2] = element

        def step_at(size: float, elem: float) -> _Est:
            inner[comp.accu_var] = _Local(size, elem, True)
            return self.visit(comp.loop_step, inner)

        first = step_at(init.size, init.elem)
        slope = max(step_at(init.size + 1.0, init.elem).size - first.size, 0.0)
        added = max(first.size - slope * init.size, 0.0)
        if count <= 0.0:
            final = init.size
        elif slope <= 0.0:
            final = max(init.size, first.size)
        elif slope <= 1.0:
            final = init.size + count * added
        else:  # the accumulator multiplies at every step: exponential in the range's size
            try:
                final = (init.size + added / (slope - 1.0)) * slope**count
            except OverflowError:
                final = math.inf
        elem = max(init.elem, first.elem)
        inner[comp.accu_var] = _Local(final, elem, True)
        # all/exists keep a bool: the step at the final size is the first one (a walk saved per nesting level).
        step = first if final == init.size and elem == init.elem else self.visit(comp.loop_step, inner)
        condition = self.visit(comp.loop_condition, inner)
        result = self.visit(comp.result, inner)
        per_element = step.cost + condition.cost + 1.0
        cost = iterated.cost + init.cost + count * per_element + result.cost + 1.0
        return _Est(cost, result.size, max(result.elem, elem))


def _is_accumulator(expr: Any, scope: Mapping[str, _Local]) -> bool:
    if not expr.HasField("ident_expr"):
        return False
    local = scope.get(expr.ident_expr.name)
    return local is not None and local.accumulator


@dataclass(frozen=True, slots=True)
class CostBound:
    """What the budget allows one expression."""

    fixed: float
    """The estimate with no input at all (literals only): over :data:`COST_BUDGET` means never runnable."""
    max_input: int
    """The largest list, map or string (entries, characters) the expression may be given without a closer look;
    :data:`INPUT_BOUND` when no input a request can carry is too large (then the input is not measured)."""
    tree: Any = field(default=None, compare=False, repr=False)
    variables: frozenset[str] = field(default=frozenset(), compare=False, repr=False)

    @property
    def unbounded(self) -> bool:
        return self.max_input >= INPUT_BOUND


def _cost(tree: Any, variables: frozenset[str], sizes: _Sizes) -> float:
    try:
        return _Estimator(variables, sizes).visit(tree, {}).cost
    except OverflowError:
        return math.inf


def estimate(tree: Any, variables: frozenset[str]) -> CostBound:
    """The cost bound of a checked expression tree (:func:`enclave_core.cel.syntax.decode_checked`)."""
    fixed = _cost(tree, variables, _Sizes(0.0))
    if not fixed <= COST_BUDGET:
        return CostBound(fixed, -1, tree, variables)
    if _cost(tree, variables, _Sizes(float(INPUT_BOUND))) <= COST_BUDGET:
        return CostBound(fixed, INPUT_BOUND, tree, variables)
    # The largest power of two within the budget (a few walks, not twenty): a larger input is then measured
    # path by path before it is refused, so rounding down costs a closer look, never a wrong refusal.
    low, high = -1, INPUT_BOUND.bit_length() - 1  # invariant: cost(2**low) <= budget < cost(2**high)
    while high - low > 1:
        middle = (low + high) // 2
        if _cost(tree, variables, _Sizes(float(1 << middle))) <= COST_BUDGET:
            low = middle
        else:
            high = middle
    return CostBound(fixed, 0 if low < 0 else 1 << low, tree, variables)


def compile_problem(bound: CostBound) -> str:
    """Why an expression with ``bound`` is refused when compiled, or the empty string."""
    if bound.max_input < 0:
        return f"estimated cost {_number(bound.fixed)} exceeds the CEL cost budget of {COST_BUDGET} per evaluation"
    if bound.max_input < MIN_INPUT_SIZE:
        return (
            f"estimated cost exceeds the CEL cost budget of {COST_BUDGET} per evaluation for inputs of "
            f"{MIN_INPUT_SIZE} elements or characters (it fits only up to {bound.max_input})"
        )
    return ""


def largest(value: Any, limit: int) -> int:
    """The largest list, map or string in ``value`` (entries, characters), walking no further than the first
    one over ``limit``."""
    found = 0
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str | bytes):
            size = len(item)
        elif isinstance(item, list | tuple):
            size = len(item)
            stack.extend(item)
        elif isinstance(item, dict):
            size = len(item)
            stack.extend(item.keys())
            stack.extend(item.values())
        else:
            continue
        if size > found:
            found = size
            if found > limit:
                return found
    return found


def over_budget(bound: CostBound, data: Mapping[str, Any]) -> str:
    """Why evaluating on the projected input ``data`` would exceed the budget, or the empty string."""
    if bound.unbounded or largest(list(data.values()), bound.max_input) <= bound.max_input:
        return ""
    # Something is larger than the uniform bound allows: estimate with what each path really holds.
    cost = _cost(bound.tree, bound.variables, _Measured(data))
    if cost <= COST_BUDGET:
        return ""
    return (
        f"estimated cost {_number(cost)} on this input exceeds the CEL cost budget of {COST_BUDGET} per "
        "evaluation, so the expression was not evaluated"
    )


def on_input(bound: CostBound, data: Mapping[str, Any]) -> float:
    """The estimate of one evaluation on ``data`` (sized by what each path the expression reads holds): what a
    caller budgeting several evaluations together charges for it (a ValidatingAdmissionPolicy's expressions share
    one budget in kube-apiserver, ``enclave_cli.policy_cel``)."""
    if bound.tree is None:
        return bound.fixed
    return _cost(bound.tree, bound.variables, _Measured(data))


def _number(value: float) -> str:
    return "unbounded" if math.isinf(value) else f"{value:.3g}"
