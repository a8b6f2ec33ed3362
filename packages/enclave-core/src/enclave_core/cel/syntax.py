"""Static facts about a compiled expression, read from the engine's checked syntax tree.

Two things need the tree: the runaway guard (depth, size, nesting of comprehensions, forbidden
functions) and the input projection (which parts of ``object`` the expression can observe, see
:mod:`enclave_core.cel.projection`). ``cel-expr-python`` exposes the tree only as a serialised
``cel.expr.CheckedExpr``; rather than depend on generated code for the CEL protos, the handful of
messages needed are declared here from the public ``cel/expr/syntax.proto`` field numbers and
decoded with the protobuf runtime. Unknown fields (types, source info) are skipped.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final, TypeAlias

from google.protobuf import any_pb2, descriptor_pb2, descriptor_pool, message, message_factory

if TYPE_CHECKING:
    from enclave_core.cel.cost import CostBound

__all__ = ["ELEM", "WHOLE", "ExprFacts", "PathTrie", "analyse_checked", "analyse_tree", "decode_checked"]

PathTrie: TypeAlias = dict[Any, Any] | None
"""Keys of a variable an expression can observe: ``None`` means the whole value, a dict maps each
selected key (or :data:`ELEM` for the elements of a list) to the trie of what is observed below it."""

WHOLE: Final[PathTrie] = None

_F = descriptor_pb2.FieldDescriptorProto


def _declare() -> type[message.Message]:
    """Declare the subset of ``cel.expr`` syntax messages in a private pool; returns CheckedExpr."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="enclave/cel/_syntax_subset.proto", package="enclave.cel.syntax", syntax="proto2"
    )

    def msg(name: str, fields: list[tuple[str, int, int, str | None, bool]]) -> None:
        m = fdp.message_type.add(name=name)
        for fname, number, ftype, type_name, repeated in fields:
            f = m.field.add(
                name=fname,
                number=number,
                type=ftype,
                label=_F.LABEL_REPEATED if repeated else _F.LABEL_OPTIONAL,
            )
            if type_name:
                f.type_name = f".enclave.cel.syntax.{type_name}"

    s, i64, b, u64, d, by, i32, m = (
        _F.TYPE_STRING,
        _F.TYPE_INT64,
        _F.TYPE_BOOL,
        _F.TYPE_UINT64,
        _F.TYPE_DOUBLE,
        _F.TYPE_BYTES,
        _F.TYPE_INT32,
        _F.TYPE_MESSAGE,
    )
    msg(
        "Constant",
        [
            ("null_value", 1, i32, None, False),
            ("bool_value", 2, b, None, False),
            ("int64_value", 3, i64, None, False),
            ("uint64_value", 4, u64, None, False),
            ("double_value", 5, d, None, False),
            ("string_value", 6, s, None, False),
            ("bytes_value", 7, by, None, False),
        ],
    )
    msg("Ident", [("name", 1, s, None, False)])
    msg("Select", [("operand", 1, m, "Expr", False), ("field", 2, s, None, False), ("test_only", 3, b, None, False)])
    msg("Call", [("target", 1, m, "Expr", False), ("function", 2, s, None, False), ("args", 3, m, "Expr", True)])
    msg("CreateList", [("elements", 1, m, "Expr", True)])
    msg(
        "Entry",
        [("field_key", 2, s, None, False), ("map_key", 3, m, "Expr", False), ("value", 4, m, "Expr", False)],
    )
    msg("CreateStruct", [("message_name", 1, s, None, False), ("entries", 2, m, "Entry", True)])
    msg(
        "Comprehension",
        [
            ("iter_var", 1, s, None, False),
            ("iter_range", 2, m, "Expr", False),
            ("accu_var", 3, s, None, False),
            ("accu_init", 4, m, "Expr", False),
            ("loop_condition", 5, m, "Expr", False),
            ("loop_step", 6, m, "Expr", False),
            ("result", 7, m, "Expr", False),
            ("iter_var2", 8, s, None, False),
        ],
    )
    msg(
        "Expr",
        [
            ("id", 2, i64, None, False),
            ("const_expr", 3, m, "Constant", False),
            ("ident_expr", 4, m, "Ident", False),
            ("select_expr", 5, m, "Select", False),
            ("call_expr", 6, m, "Call", False),
            ("list_expr", 7, m, "CreateList", False),
            ("struct_expr", 8, m, "CreateStruct", False),
            ("comprehension_expr", 9, m, "Comprehension", False),
        ],
    )
    # A oneof is not needed: exactly one of the message fields is set on the wire.
    msg("CheckedExpr", [("expr", 4, m, "Expr", False)])
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("enclave.cel.syntax.CheckedExpr"))


_CHECKED_EXPR: Final = _declare()
_KINDS: Final = (
    "select_expr",
    "call_expr",
    "ident_expr",
    "const_expr",
    "comprehension_expr",
    "list_expr",
    "struct_expr",
)
_INDEX_FUNCTIONS: Final = frozenset({"_[_]", "_[?_]", "_?._"})


@dataclass(frozen=True, slots=True)
class ExprFacts:
    """What the guard and the projection need to know about one expression."""

    depth: int
    nodes: int
    comprehension_nesting: int
    functions: frozenset[str]
    paths: dict[str, PathTrie]
    """Observed part of each variable that the expression references; absent means unused."""
    messages: frozenset[str]
    """Message types built with a literal (``T{...}``); the facade refuses its own opaque types."""
    cost: CostBound | None = None
    """The cost budget's bound (:func:`enclave_core.cel.cost.estimate`), added by the engine adapter."""


def _kind(expr: Any) -> str | None:
    """Which expression kind is set (the private descriptor has no oneof, so probe the fields)."""
    for kind in _KINDS:
        if expr.HasField(kind):
            return kind
    return None


class _Elem:
    """Trie key meaning "every element of this list" (never a JSON key: it is not a string)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "ELEM"


ELEM: Final = _Elem()

_Alias: TypeAlias = tuple[str, tuple[Any, ...]] | None
"""What a local name stands for: (variable, path) for a comprehension variable bound to elements
of a variable's list, ``None`` for a local that shadows everything."""


class _Walker:
    """One pass over the tree collecting size, depth, functions and variable paths."""

    def __init__(self, variables: frozenset[str]) -> None:
        self.variables = variables
        self.nodes = 0
        self.depth = 0
        self.nesting = 0
        self.functions: set[str] = set()
        self.paths: dict[str, PathTrie] = {}
        self.messages: set[str] = set()

    def resolve(self, name: str, scope: Mapping[str, _Alias]) -> _Alias:
        if name in scope:
            return scope[name]
        if name in self.variables:
            return (name, ())
        return None

    def record(self, var: str, fields: Sequence[Any], whole: bool = True) -> None:
        """Merge one observed path into the variable's trie; a shorter whole path subsumes longer ones.

        ``whole=False`` only makes sure the path exists (a list that is iterated over but whose
        elements are observed through the loop variable).
        """
        if var in self.paths and self.paths[var] is None:
            return
        if not fields:
            if whole:
                self.paths[var] = None
            else:
                self.paths.setdefault(var, {})
            return
        node = self.paths.setdefault(var, {})
        assert node is not None
        for name in fields[:-1]:
            child = node.get(name, {})
            if child is None:
                return
            node[name] = child
            node = child
        last = fields[-1]
        if whole:
            node[last] = None
        elif node.get(last, {}) is not None:
            node.setdefault(last, {})

    def walk(self, expr: Any, scope: Mapping[str, _Alias], depth: int, nesting: int) -> None:
        self.nodes += 1
        self.depth = max(self.depth, depth)
        self.nesting = max(self.nesting, nesting)
        kind = _kind(expr)
        if kind in ("select_expr", "call_expr"):
            root, fields = self._chain(expr)
            if fields:
                self.nodes += len(fields)
                if root.HasField("ident_expr"):
                    target = self.resolve(root.ident_expr.name, scope)
                    if target is not None:
                        self.record(target[0], target[1] + tuple(fields))
                    return
                self.walk(root, scope, depth + len(fields), nesting)
                return
        if kind == "ident_expr":
            target = self.resolve(expr.ident_expr.name, scope)
            if target is not None:
                self.record(target[0], target[1])
        elif kind == "call_expr":
            call = expr.call_expr
            self.functions.add(call.function)
            if call.HasField("target"):
                target_expr = call.target
                if target_expr.HasField("ident_expr") and self.resolve(target_expr.ident_expr.name, scope) is None:
                    self.functions.add(f"{target_expr.ident_expr.name}.{call.function}")
                self.walk(target_expr, scope, depth + 1, nesting)
            for arg in call.args:
                self.walk(arg, scope, depth + 1, nesting)
        elif kind == "list_expr":
            for element in expr.list_expr.elements:
                self.walk(element, scope, depth + 1, nesting)
        elif kind == "struct_expr":
            if expr.struct_expr.message_name:
                self.messages.add(expr.struct_expr.message_name)
            for entry in expr.struct_expr.entries:
                if entry.HasField("map_key"):
                    self.walk(entry.map_key, scope, depth + 1, nesting)
                self.walk(entry.value, scope, depth + 1, nesting)
        elif kind == "comprehension_expr":
            self._comprehension(expr.comprehension_expr, scope, depth, nesting)

    def _comprehension(self, comp: Any, scope: Mapping[str, _Alias], depth: int, nesting: int) -> None:
        element: _Alias = None
        root, fields = self._chain(comp.iter_range)
        base = self.resolve(root.ident_expr.name, scope) if root.HasField("ident_expr") else None
        if base is not None:
            # Iterating over a variable's list: its elements are observed only through the loop
            # variable, so their paths are recorded below ELEM instead of keeping the list whole.
            self.nodes += 1 + len(fields)
            path = base[1] + tuple(fields) + (ELEM,)
            self.record(base[0], path, whole=False)
            element = (base[0], path)
        else:
            self.walk(comp.iter_range, scope, depth + 1, nesting)
        self.walk(comp.accu_init, scope, depth + 1, nesting)
        inner = dict(scope)
        inner[comp.accu_var] = None
        if comp.iter_var2:
            inner[comp.iter_var] = None  # index (list) or key (map)
            inner[comp.iter_var2] = element
        elif comp.iter_var:
            inner[comp.iter_var] = element
        # cel.bind expands to a comprehension over an empty list: it is not a loop.
        is_loop = not (comp.iter_range.HasField("list_expr") and not comp.iter_range.list_expr.elements)
        inner_nesting = nesting + 1 if is_loop else nesting
        for part in (comp.loop_condition, comp.loop_step, comp.result):
            self.walk(part, inner, depth + 1, inner_nesting)

    @staticmethod
    def _chain(expr: Any) -> tuple[Any, list[Any]]:
        """Unwind ``a.b['c'].?d[0]`` into its root and the constant keys selected from it.

        A constant list index becomes ELEM: projecting every element the same way is harmless.
        """
        fields: list[Any] = []
        while True:
            if expr.HasField("select_expr"):
                fields.append(expr.select_expr.field)
                expr = expr.select_expr.operand
                continue
            if expr.HasField("call_expr"):
                call = expr.call_expr
                if (
                    call.function in _INDEX_FUNCTIONS
                    and not call.HasField("target")
                    and len(call.args) == 2
                    and call.args[1].HasField("const_expr")
                ):
                    const = call.args[1].const_expr
                    if const.HasField("string_value"):
                        fields.append(const.string_value)
                        expr = call.args[0]
                        continue
                    if const.HasField("int64_value") or const.HasField("uint64_value"):
                        fields.append(ELEM)
                        expr = call.args[0]
                        continue
            break
        fields.reverse()
        return expr, fields


def decode_checked(serialized: bytes) -> Any:
    """The expression tree (``CheckedExpr.expr``) of a serialised ``CheckedExpr`` wrapped in ``Any``.

    Raises ``ValueError`` when the tree cannot be decoded (for example nested beyond the protobuf
    decoder's recursion limit), which the caller reports as "too deeply nested".
    """
    try:
        wrapper = any_pb2.Any.FromString(serialized)
        checked: Any = _CHECKED_EXPR.FromString(wrapper.value)
    except message.DecodeError as exc:
        raise ValueError(f"cannot decode syntax tree: {exc}") from exc
    return checked.expr


def analyse_checked(serialized: bytes, variables: frozenset[str]) -> ExprFacts:
    """Decode a serialised ``CheckedExpr`` (wrapped in ``Any``) and collect its facts (``ValueError``: see
    :func:`decode_checked`)."""
    return analyse_tree(decode_checked(serialized), variables)


def analyse_tree(tree: Any, variables: frozenset[str]) -> ExprFacts:
    """The facts of a decoded expression tree (:func:`decode_checked`)."""
    walker = _Walker(variables)
    walker.walk(tree, {}, 1, 0)
    return ExprFacts(
        depth=walker.depth,
        nodes=walker.nodes,
        comprehension_nesting=walker.nesting,
        functions=frozenset(walker.functions),
        paths=walker.paths,
        messages=frozenset(walker.messages),
    )
