"""A Python fast path for the simplest boolean expressions, exact wherever it answers at all.

Why: a rule condition such as ``object.metadata.labels['env'] == 'prod'`` is asked on every admission
request, and calling the C++ runtime costs a fixed few microseconds (building its activation, converting
the projected input, wrapping the result) whatever the expression does: for one condition that is four
fifths of a whole ``/resources`` decision, more than a namespace's whole review costs. Most conditions
are a handful of field selections, comparisons and string tests, which plain Python answers in a fraction
of that.

How it stays exact: from the *checked* syntax tree (:mod:`enclave_core.cel.syntax`), an expression made
only of the constructs below becomes straight-line Python, once per expression (like the projectors of
:mod:`enclave_core.cel.projection`); anything else gets no fast path. At run time the generated code
checks the exact type of every value it touches and *gives up* on anything that is not the plain case
(a missing key, a value of another type, an int outside int64, a value the runtime could not convert):
then the expression is evaluated by the engine as before, which produces every error and its message.
So the fast path only ever answers ``True`` or ``False`` where CEL's own answer is that value, and
anything surprising is CEL's to answer. The conformance suite runs through it, and a differential test
compares it with the engine on generated inputs.

Covered: constants (bool, int, string, null), the declared variables, field selection and ``has()`` on
maps, ``[]`` on maps (string keys) and lists (int index), ``&&``, ``||``, ``!`` and ``?:`` (with CEL's
short-circuit results: ``false && x`` is false whatever ``x`` is), ``==``/``!=`` between two values of the
same plain type (string, int, bool, null), ``<``/``<=``/``>``/``>=`` between two strings or two ints,
``+`` of two strings or two ints, ``size()`` of a string, list or map, ``in`` of a string in a map or a
list, and ``startsWith``, ``endsWith``, ``contains`` on strings. Not covered (the engine answers):
comprehensions (``all``, ``exists``, ``map``...), ``matches`` (RE2 is not Python's ``re``), doubles and
uints, timestamps, every other function.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from typing import Any, Final

__all__ = ["UNANSWERED", "Fast", "build"]

Fast = Callable[[Mapping[str, Any]], Any]
"""Variables -> the expression's value (a bool, int, string or null), or :data:`UNANSWERED` (the engine
answers)."""


class _Unanswered:
    __slots__ = ()

    def __repr__(self) -> str:
        return "UNANSWERED"


UNANSWERED: Final = _Unanswered()

_I64_MIN: Final = -(2**63)
_I64_MAX: Final = 2**63 - 1


class _GiveUpError(Exception):
    """Not the plain case: the engine answers."""


class _UnsupportedError(Exception):
    """A construct without a fast path (at build time)."""


_UNSET: Final = object()
"""A field path not read yet (see :class:`_Builder`)."""


def _give_up() -> Any:
    raise _GiveUpError


def _result(value: Any) -> Any:
    """What the engine would return for ``value``: only plain scalars are answered here."""
    kind = type(value)
    if kind is bool or kind is str or value is None:
        return value
    if kind is int and _I64_MIN <= value <= _I64_MAX:
        return value
    return UNANSWERED


def _plain(value: Any) -> None:
    """Raise unless the runtime converts ``value`` as it is (the C++ conversion refuses other values)."""
    kind = type(value)
    if kind is str or kind is bool or value is None or kind is float:
        return
    if kind is int:
        if not _I64_MIN <= value <= _I64_MAX:
            raise _GiveUpError
        return
    if kind is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise _GiveUpError
            _plain(item)
        return
    if kind is list:
        for item in value:
            _plain(item)
        return
    raise _GiveUpError


def _bool(value: Any) -> bool:
    if type(value) is bool:
        return value
    raise _GiveUpError


def _str(value: Any) -> str:
    if type(value) is str:
        return value
    raise _GiveUpError


def _int(value: Any) -> int:
    if type(value) is int and _I64_MIN <= value <= _I64_MAX:
        return value
    raise _GiveUpError


def _select(value: Any, key: str) -> Any:
    if type(value) is dict:
        return value[key]  # KeyError: CEL's "no such key", the engine's to report
    raise _GiveUpError


def _has(value: Any, key: str) -> bool:
    if type(value) is dict:
        if key in value:
            _plain(value[key])
            return True
        return False
    raise _GiveUpError


def _index(value: Any, key: Any) -> Any:
    kind = type(value)
    if kind is dict and type(key) is str:
        return value[key]
    if kind is list and type(key) is int and 0 <= key < len(value):
        return value[key]
    raise _GiveUpError


def _eq(left: Any, right: Any) -> bool:
    kind = type(left)
    if kind is type(right):
        if kind is str or kind is bool or left is None:
            return left == right  # type: ignore[no-any-return]
        if kind is int:
            return _int(left) == _int(right)
    raise _GiveUpError


def _ordered(left: Any, right: Any) -> tuple[Any, Any]:
    kind = type(left)
    if kind is type(right):
        if kind is str:
            return left, right
        if kind is int:
            return _int(left), _int(right)
    raise _GiveUpError


def _add(left: Any, right: Any) -> Any:
    kind = type(left)
    if kind is type(right):
        if kind is str:
            return left + right
        if kind is int:
            return _int(_int(left) + _int(right))  # overflow is CEL's error: give up
    raise _GiveUpError


def _size(value: Any) -> int:
    kind = type(value)
    if kind is str:
        return len(value)
    if kind is list or kind is dict:
        _plain(value)
        return len(value)
    raise _GiveUpError


def _in(item: Any, container: Any) -> bool:
    # A string equals only an equal string under CEL's heterogeneous equality, as under Python's.
    if type(item) is str and type(container) in (dict, list):
        _plain(container)
        return item in container
    raise _GiveUpError


_HELPERS: Final[dict[str, Any]] = {
    "_GiveUpError": _GiveUpError,
    "_give_up": _give_up,
    "_UNSET": _UNSET,
    "_result": _result,
    "UNANSWERED": UNANSWERED,
    "_bool": _bool,
    "_str": _str,
    "_select": _select,
    "_has": _has,
    "_index": _index,
    "_eq": _eq,
    "_ordered": _ordered,
    "_add": _add,
    "_size": _size,
    "_in": _in,
    "_plain": _plain,
}

_COMPARISONS: Final = {"_<_": "<", "_<=_": "<=", "_>_": ">", "_>=_": ">="}
_STRING_TESTS: Final = {"startsWith": "startswith", "endsWith": "endswith"}

# Static types of generated code: what a node is known to yield whenever it yields at all.
_BOOL: Final = "bool"
_STR: Final = "str"
_INT: Final = "int"
"""An int within int64."""
_NULL: Final = "null"
_ANY: Final = "any"
_CHECKS: Final = {_BOOL: "bool", _STR: "str"}

Node = tuple[str, str, bool]
"""(Python expression, static type, a constant: no variable in it)."""


class _Builder:
    """Python source for one expression: one Python expression per node, with the type checks inlined."""

    def __init__(self, variables: frozenset[str], repeated: frozenset[tuple[str, ...]] = frozenset()) -> None:
        self.variables = variables
        self.used: set[str] = set()
        self.temps = itertools.count()
        self.repeated = repeated
        """Field paths (``object.metadata.name``) read more than once: read once, on first use."""
        self.paths: dict[tuple[str, ...], int] = {}
        """How often each field path is read (a first pass fills it; see :func:`build`)."""
        self.memos: dict[tuple[str, ...], str] = {}
        self.bounds: dict[str, int] = {}
        """The largest magnitude an int node's code can yield, where known (constants and sums of them)."""

    def temp(self) -> str:
        return f"t{next(self.temps)}"

    def node(self, expr: Any) -> Node:
        found = self._node(expr)
        code, kind, constant = found
        if constant and not expr.HasField("const_expr"):
            # Work a constant part out once (``1 >= 0``, ``'a' + 'b'``); one that fails stays to give up at run
            # time, so the engine reports its error.
            try:
                value = eval(code, dict(_HELPERS))  # built here from constants, with repr()
            except Exception:
                return found
            kind = _type_of(value)
            if kind == _INT:
                self.bounds[repr(value)] = abs(value)
            if kind != _ANY:
                return repr(value), kind, True
        return found

    def _node(self, expr: Any) -> Node:
        if expr.HasField("const_expr"):
            return self.constant(expr.const_expr)
        if expr.HasField("ident_expr"):
            name = expr.ident_expr.name
            if name not in self.variables:
                raise _UnsupportedError(name)
            self.used.add(name)
            return f"v_{name}", _ANY, False
        if expr.HasField("select_expr"):
            select = expr.select_expr
            operand, _, constant = self.node(select.operand)
            if select.test_only:
                return f"_has({operand}, {select.field!r})", _BOOL, constant
            t = self.temp()
            code = f"({t}[{select.field!r}] if type({t} := {operand}) is dict else _give_up())"
            path = _path(expr)
            if path is not None:
                self.paths[path] = self.paths.get(path, 0) + 1
                if path in self.repeated:
                    # Read on first use, as the expression reads it; later uses take the value (a read that gave
                    # up or raised never reaches a later use: the whole evaluation stops there).
                    memo = self.memos.setdefault(path, f"m{len(self.memos)}")
                    code = f"({memo} if {memo} is not _UNSET else ({memo} := {code}))"
            return code, _ANY, constant
        if expr.HasField("list_expr"):
            elements = [self.node(e) for e in expr.list_expr.elements]
            code = "[" + ", ".join(code for code, _, _ in elements) + "]"
            return code, _ANY, all(constant for _, _, constant in elements)
        if expr.HasField("call_expr"):
            return self.call(expr.call_expr)
        raise _UnsupportedError("construct")

    def constant(self, const: Any) -> Node:
        if const.HasField("bool_value"):
            return repr(bool(const.bool_value)), _BOOL, True
        if const.HasField("int64_value"):
            value = int(const.int64_value)
            self.bounds[repr(value)] = abs(value)
            return repr(value), _INT, True
        if const.HasField("string_value"):
            return repr(str(const.string_value)), _STR, True
        if const.HasField("null_value"):
            return "None", _NULL, True
        raise _UnsupportedError("constant")

    def typed(self, node: Node, kind: str) -> str:
        """``node``'s code, checked to yield ``kind`` (bool or str) unless it statically does."""
        code, known, _ = node
        if known == kind:
            return code
        t = self.temp()
        return f"({t} if type({t} := {code}) is {_CHECKS[kind]} else _give_up())"

    def call(self, call: Any) -> Node:
        function = call.function
        args = [self.node(arg) for arg in call.args]
        constant = all(c for _, _, c in args)
        if call.HasField("target"):
            target = self.node(call.target)
            constant = constant and target[2]
            if function in ("startsWith", "endsWith", "contains") and len(args) == 1:
                subject, argument = self.typed(target, _STR), self.typed(args[0], _STR)
                if function == "contains":
                    return f"({argument} in {subject})", _BOOL, constant
                return f"{subject}.{_STRING_TESTS[function]}({argument})", _BOOL, constant
            if function == "size" and not args:
                return f"_size({target[0]})", _INT, constant
            raise _UnsupportedError(function)
        codes = [code for code, _, _ in args]
        if function in ("_&&_", "_||_"):
            neutral, absorbing = ("True", "False") if function == "_&&_" else ("False", "True")
            sides = [self.typed(arg, _BOOL) for arg in args]
            if absorbing in sides:  # ``x && false`` is false, ``x || true`` true, whatever x is (error included)
                return absorbing, _BOOL, True
            sides = [side for side in sides if side != neutral] or [neutral]  # ``x && true`` is x
            operator = " and " if function == "_&&_" else " or "
            return f"({operator.join(sides)})", _BOOL, constant
        if function == "!_":
            return f"(not {self.typed(args[0], _BOOL)})", _BOOL, constant
        if function == "_?_:_":
            (_, yes_kind, _), (_, no_kind, _) = args[1], args[2]
            kind = yes_kind if yes_kind == no_kind else _ANY
            code = f"({codes[1]} if {self.typed(args[0], _BOOL)} else {codes[2]})"
            if kind == _INT:
                self.bounds[code] = max(self.bounds.get(codes[1], _I64_MAX), self.bounds.get(codes[2], _I64_MAX))
            return code, kind, constant
        if function in ("_==_", "_!=_"):
            operator = "==" if function == "_==_" else "!="
            (left, left_kind, _), (right, right_kind, _) = args
            if left_kind == right_kind and left_kind != _ANY:
                return f"({left} {operator} {right})", _BOOL, constant
            for known, other in ((left_kind, args[1]), (right_kind, args[0])):
                if known in _CHECKS and other[1] == _ANY:  # a string or bool against a value read at run time
                    value = left if known == left_kind else right
                    return f"({self.typed(other, known)} {operator} {value})", _BOOL, constant
            equal = f"_eq({left}, {right})"
            return (equal if operator == "==" else f"(not {equal})"), _BOOL, constant
        if function in _COMPARISONS:
            operator = _COMPARISONS[function]
            (left, left_kind, _), (right, right_kind, _) = args
            if left_kind == right_kind and left_kind in (_STR, _INT):
                return f"({left} {operator} {right})", _BOOL, constant
            t = self.temp()
            return f"(({t} := _ordered({left}, {right}))[0] {operator} {t}[1])", _BOOL, constant
        if function == "_+_":
            if args[0][1] == args[1][1] == _INT:  # overflow past int64 is CEL's error: give up
                bound = self.bounds.get(codes[0], _I64_MAX) + self.bounds.get(codes[1], _I64_MAX)
                if bound <= _I64_MAX:  # small constants (a folded batch's bits) cannot overflow
                    code = f"({codes[0]} + {codes[1]})"
                    self.bounds[code] = bound
                    return code, _INT, constant
                t = self.temp()
                return (
                    f"({t} if {_I64_MIN} <= ({t} := {codes[0]} + {codes[1]}) <= {_I64_MAX} else _give_up())",
                    _INT,
                    constant,
                )
            kind = args[0][1] if args[0][1] == args[1][1] == _STR else _ANY
            return f"_add({codes[0]}, {codes[1]})", kind, constant
        if function == "_[_]":
            return f"_index({codes[0]}, {codes[1]})", _ANY, constant
        if function == "size" and len(args) == 1:
            return f"_size({codes[0]})", _INT, constant
        if function == "@in":
            return f"_in({codes[0]}, {codes[1]})", _BOOL, constant
        raise _UnsupportedError(function)


def _type_of(value: Any) -> str:
    kind = type(value)
    if kind is bool:
        return _BOOL
    if kind is str:
        return _STR
    if value is None:
        return _NULL
    if kind is int and _I64_MIN <= value <= _I64_MAX:
        return _INT
    return _ANY


def _path(expr: Any) -> tuple[str, ...] | None:
    """``('object', 'metadata', 'name')`` for a chain of field selections from a variable, else None."""
    fields: list[str] = []
    while expr.HasField("select_expr") and not expr.select_expr.test_only:
        fields.append(expr.select_expr.field)
        expr = expr.select_expr.operand
    if not expr.HasField("ident_expr"):
        return None
    return (expr.ident_expr.name, *reversed(fields))


def build(expr: Any, variables: frozenset[str], text: str) -> Fast | None:
    """The fast path of a checked expression tree (``CheckedExpr.expr``), or None when it uses anything
    not covered. ``text`` only names the generated function in tracebacks."""
    try:
        counted = _Builder(variables)
        counted.node(expr)
        repeated = frozenset(path for path, count in counted.paths.items() if count > 1)
        builder = _Builder(variables, repeated)
        body, kind, _ = builder.node(expr)
    except _UnsupportedError:
        return None
    lines = ["def fast(v):", "    try:"]
    lines += [f"        v_{name} = v[{name!r}]" for name in sorted(builder.used)]
    if builder.memos:
        lines.append(f"        {' = '.join(builder.memos.values())} = _UNSET")
    lines += [f"        return {body if kind != _ANY else f'_result({body})'}", "    except Exception:"]
    lines += ["        return UNANSWERED"]
    namespace = dict(_HELPERS)
    try:
        code = compile("\n".join(lines), f"<cel fast path: {text[:60]!r}>", "exec")
    except (SyntaxError, RecursionError, MemoryError):  # nested past Python's parser: the engine answers
        return None
    exec(code, namespace)  # source built from the checked tree, constants embedded with repr()
    fast: Fast = namespace["fast"]
    return fast
