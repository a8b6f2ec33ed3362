"""Adapter for ``cel-expr-python`` (Google's C++ CEL runtime), the default engine.

Kubernetes' opaque types (quantity, IP, CIDR, URL) become tiny protobuf messages declared at
import time in a private descriptor pool: the C++ runtime cannot carry arbitrary Python objects,
but it type-checks, compares and stores messages natively. Each message holds one canonical string,
so message equality is the Kubernetes equality (``quantity('1Ki') == quantity('1024')``).
Consequence: a quantity that comes back as a result has lost its suffix family and prints in
decimal SI (``1Gi`` comes back as ``1073741824``); the value is exact.

Inputs are projected to the paths each expression observes (:mod:`enclave_core.cel.projection`)
before the runtime converts them; that conversion is what dominates a single evaluation.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

from cel_expr_python import cel
from cel_expr_python.ext import ext_bindings, ext_encoders, ext_math, ext_optional, ext_strings
from google.protobuf import descriptor_pb2, descriptor_pool, message, message_factory

from enclave_core.cel import cost, limits
from enclave_core.cel import k8s_library as lib
from enclave_core.cel.environment import Environment, VarType
from enclave_core.cel.errors import CelCompileError, CelIssue, ErrorKind, EvalError
from enclave_core.cel.fastpath import UNANSWERED, Fast, build
from enclave_core.cel.projection import compile_projector, merge_tries, project
from enclave_core.cel.results import EvalResult, Failed, Ok
from enclave_core.cel.syntax import ExprFacts, PathTrie, analyse_tree, decode_checked
from enclave_core.quantity import Quantity

__all__ = ["CelExprEngine"]

# -- opaque Kubernetes types as messages ------------------------------------------------------

_TYPE_NAMES: Final = {
    "Quantity": "kubernetes.Quantity",
    "URL": "kubernetes.URL",
    "IP": "net.IP",
    "CIDR": "net.CIDR",
}


def _build_pool() -> tuple[descriptor_pool.DescriptorPool, dict[str, type[message.Message]]]:
    pool = descriptor_pool.DescriptorPool()
    classes: dict[str, type[message.Message]] = {}
    for package in ("kubernetes", "net"):
        fdp = descriptor_pb2.FileDescriptorProto(
            name=f"enclave/cel/{package}_opaque.proto", package=package, syntax="proto3"
        )
        for short, full in _TYPE_NAMES.items():
            if full.startswith(package + "."):
                m = fdp.message_type.add(name=short)
                m.field.add(
                    name="canonical",
                    number=1,
                    type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                    label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
                )
        pool.Add(fdp)
    for full in _TYPE_NAMES.values():
        classes[full] = message_factory.GetMessageClass(pool.FindMessageTypeByName(full))
    return pool, classes


_POOL, _CLASSES = _build_pool()
_QMSG: Final = _CLASSES["kubernetes.Quantity"]
_URLMSG: Final = _CLASSES["kubernetes.URL"]
_IPMSG: Final = _CLASSES["net.IP"]
_CIDRMSG: Final = _CLASSES["net.CIDR"]

Q: Final = cel.Type("kubernetes.Quantity")
URL_T: Final = cel.Type("kubernetes.URL")
IP_T: Final = cel.Type("net.IP")
CIDR_T: Final = cel.Type("net.CIDR")
_B, _I, _D, _S, _DYN = cel.Type.BOOL, cel.Type.INT, cel.Type.DOUBLE, cel.Type.STRING, cel.Type.DYN
_LIST_DYN: Final = cel.Type.List(cel.Type.DYN)


def _to_neutral(value: Any) -> Any:
    """A value handed over by the runtime (argument or result) as an engine-neutral Python value."""
    if isinstance(value, message.Message):
        name = value.DESCRIPTOR.full_name
        text: str = value.canonical  # type: ignore[attr-defined]
        if name == "kubernetes.Quantity":
            return Quantity(int(text))
        if name == "net.IP":
            return lib.ip(text)
        if name == "net.CIDR":
            return lib.cidr(text)
        if name == "kubernetes.URL":
            return lib.URL(text)
        return value
    if isinstance(value, cel.Value):
        return _to_neutral(value.value())
    if isinstance(value, list):
        return [_to_neutral(v) for v in value]
    if isinstance(value, dict):
        return {_to_neutral(k): _to_neutral(v) for k, v in value.items()}
    return value


def _to_cel(value: Any) -> Any:
    """An engine-neutral value returned by the library, as the runtime accepts it."""
    if isinstance(value, Quantity):
        return _QMSG(canonical=str(value.nanos))
    if isinstance(value, lib.URL):
        return _URLMSG(canonical=value.text)
    if isinstance(value, lib.CIDR_TYPES):
        return _CIDRMSG(canonical=lib.cidr_string(value))
    if isinstance(value, lib.IP_TYPES):
        return _IPMSG(canonical=str(value))
    if isinstance(value, list):
        return [_to_cel(v) for v in value]
    return value


_TAG_RE: Final = re.compile(r"\[enclave:([a-z_]+)\] ")


def _wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Adapt a library function: neutral arguments in, runtime values out, errors tagged by kind."""

    def impl(*args: Any) -> Any:
        try:
            return _to_cel(fn(*[_to_neutral(a) for a in args]))
        except lib.LibraryError as exc:
            raise ValueError(f"[enclave:{exc.kind.value}] {exc}") from None

    return impl


def _ov(oid: str, ret: Any, params: list[Any], fn: Callable[..., Any], member: bool = False) -> Any:
    return cel.Overload(oid, ret, params, is_member=member, impl=_wrap(fn))


def _string_of(value: Any) -> str:
    """``string(ip)``. ``string(cidr)`` is missing on this engine: the runtime's function registry
    tells overloads apart by argument kind (both are messages), not by message type, so a second
    ``string`` overload on a message is refused at run time (ALREADY_EXISTS).
    """
    if isinstance(value, lib.CIDR_TYPES):
        return lib.cidr_string(value)
    return str(value)


def _k8s_extension() -> Any:
    decl = cel.FunctionDecl
    return cel.CelExtension(
        "enclave_kubernetes",
        [
            decl("quantity", [_ov("quantity_string", Q, [_S], lib.quantity)]),
            decl("isQuantity", [_ov("isQuantity_string", _B, [_S], lib.is_quantity)]),
            decl("sign", [_ov("quantity_sign", _I, [Q], lib.q_sign, True)]),
            decl("isInteger", [_ov("quantity_isInteger", _B, [Q], lib.q_is_integer, True)]),
            decl("asInteger", [_ov("quantity_asInteger", _I, [Q], lib.q_as_integer, True)]),
            decl("asApproximateFloat", [_ov("quantity_asApproximateFloat", _D, [Q], lib.q_as_approximate_float, True)]),
            decl(
                "add",
                [_ov("quantity_add", Q, [Q, Q], lib.q_add, True), _ov("quantity_add_int", Q, [Q, _I], lib.q_add, True)],
            ),
            decl(
                "sub",
                [_ov("quantity_sub", Q, [Q, Q], lib.q_sub, True), _ov("quantity_sub_int", Q, [Q, _I], lib.q_sub, True)],
            ),
            decl("compareTo", [_ov("quantity_compareTo", _I, [Q, Q], lib.q_compare_to, True)]),
            decl("isGreaterThan", [_ov("quantity_isGreaterThan", _B, [Q, Q], lib.q_is_greater_than, True)]),
            decl("isLessThan", [_ov("quantity_isLessThan", _B, [Q, Q], lib.q_is_less_than, True)]),
            decl("sum", [_ov("list_sum", _DYN, [_LIST_DYN], lib.list_sum, True)]),
            decl("min", [_ov("list_min", _DYN, [_LIST_DYN], lib.list_min, True)]),
            decl("max", [_ov("list_max", _DYN, [_LIST_DYN], lib.list_max, True)]),
            decl("isSorted", [_ov("list_isSorted", _B, [_LIST_DYN], lib.list_is_sorted, True)]),
            decl("indexOf", [_ov("list_indexOf", _I, [_LIST_DYN, _DYN], lib.list_index_of, True)]),
            decl("lastIndexOf", [_ov("list_lastIndexOf", _I, [_LIST_DYN, _DYN], lib.list_last_index_of, True)]),
            decl("find", [_ov("string_find", _S, [_S, _S], lib.regex_find, True)]),
            decl(
                "findAll",
                [
                    _ov("string_findAll", cel.Type.List(_S), [_S, _S], lib.regex_find_all, True),
                    _ov("string_findAll_n", cel.Type.List(_S), [_S, _S, _I], lib.regex_find_all, True),
                ],
            ),
            decl("url", [_ov("url_string", URL_T, [_S], lib.url)]),
            decl("isURL", [_ov("isURL_string", _B, [_S], lib.is_url)]),
            decl("getScheme", [_ov("url_getScheme", _S, [URL_T], lib.url_scheme, True)]),
            decl("getHost", [_ov("url_getHost", _S, [URL_T], lib.url_host, True)]),
            decl("getHostname", [_ov("url_getHostname", _S, [URL_T], lib.url_hostname, True)]),
            decl("getPort", [_ov("url_getPort", _S, [URL_T], lib.url_port, True)]),
            decl("getEscapedPath", [_ov("url_getEscapedPath", _S, [URL_T], lib.url_escaped_path, True)]),
            decl(
                "getQuery",
                [_ov("url_getQuery", cel.Type.Map(_S, cel.Type.List(_S)), [URL_T], lib.url_query, True)],
            ),
            decl("ip", [_ov("ip_string", IP_T, [_S], lib.ip), _ov("cidr_ip", IP_T, [CIDR_T], lib.cidr_ip, True)]),
            decl("isIP", [_ov("isIP_string", _B, [_S], lib.is_ip)]),
            decl("ip.isCanonical", [_ov("ip_isCanonical", _B, [_S], lib.ip_is_canonical)]),
            decl("family", [_ov("ip_family", _I, [IP_T], lib.ip_family, True)]),
            decl("isUnspecified", [_ov("ip_isUnspecified", _B, [IP_T], lib.ip_is_unspecified, True)]),
            decl("isLoopback", [_ov("ip_isLoopback", _B, [IP_T], lib.ip_is_loopback, True)]),
            decl(
                "isLinkLocalMulticast",
                [_ov("ip_isLinkLocalMulticast", _B, [IP_T], lib.ip_is_link_local_multicast, True)],
            ),
            decl("isLinkLocalUnicast", [_ov("ip_isLinkLocalUnicast", _B, [IP_T], lib.ip_is_link_local_unicast, True)]),
            decl("isGlobalUnicast", [_ov("ip_isGlobalUnicast", _B, [IP_T], lib.ip_is_global_unicast, True)]),
            decl("cidr", [_ov("cidr_string", CIDR_T, [_S], lib.cidr)]),
            decl("isCIDR", [_ov("isCIDR_string", _B, [_S], lib.is_cidr)]),
            decl(
                "containsIP",
                [
                    _ov("cidr_containsIP_ip", _B, [CIDR_T, IP_T], lib.cidr_contains_ip, True),
                    _ov("cidr_containsIP_string", _B, [CIDR_T, _S], lib.cidr_contains_ip, True),
                ],
            ),
            decl(
                "containsCIDR",
                [
                    _ov("cidr_containsCIDR_cidr", _B, [CIDR_T, CIDR_T], lib.cidr_contains_cidr, True),
                    _ov("cidr_containsCIDR_string", _B, [CIDR_T, _S], lib.cidr_contains_cidr, True),
                ],
            ),
            decl("masked", [_ov("cidr_masked", CIDR_T, [CIDR_T], lib.cidr_masked, True)]),
            decl("prefixLength", [_ov("cidr_prefixLength", _I, [CIDR_T], lib.cidr_prefix_length, True)]),
            # string(cidr) cannot be added: see _string_of.
            decl("string", [_ov("string_ip", _S, [IP_T], _string_of)]),
        ],
    )


_CONFIG_YAML: Final = "extensions:\n  - name: lists\n  - name: sets\n  - name: two-var-comprehensions\n"

_VAR_TYPES: Final = {
    VarType.DYN: cel.Type.DYN,
    VarType.BOOL: cel.Type.BOOL,
    VarType.INT: cel.Type.INT,
    VarType.UINT: cel.Type.UINT,
    VarType.DOUBLE: cel.Type.DOUBLE,
    VarType.STRING: cel.Type.STRING,
    VarType.BYTES: cel.Type.BYTES,
    VarType.TIMESTAMP: cel.Type.TIMESTAMP,
    VarType.DURATION: cel.Type.DURATION,
}

# -- compile errors -------------------------------------------------------------------------

_ISSUE_RE: Final = re.compile(r"ERROR: <input>:(\d+):(\d+): (.*)")


def _issues(expression: str, message_text: str) -> list[CelIssue]:
    """Turn the runtime's multi-line status text into positioned issues."""
    found = [
        CelIssue(expression, m.group(3).strip(), int(m.group(1)), int(m.group(2)))
        for m in _ISSUE_RE.finditer(message_text)
    ]
    if found:
        return found
    reason = re.sub(r"^[A-Z_]+: |\s*\[[A-Z_]+\]$", "", message_text.strip())
    return [CelIssue(expression, reason)]


# -- run-time errors ------------------------------------------------------------------------

_ERROR_PATTERNS: Final = (
    (re.compile(r"no matching overload|no such overload", re.I), ErrorKind.NO_MATCHING_OVERLOAD),
    (re.compile(r"key not found|no such key|no such field|no_such_field", re.I), ErrorKind.NO_SUCH_KEY),
    (re.compile(r"divide by zero|modulus by zero|division by zero", re.I), ErrorKind.DIVISION_BY_ZERO),
    (re.compile(r"overflow|out of range|OUT_OF_RANGE"), ErrorKind.OVERFLOW),
    (re.compile(r"^INVALID_ARGUMENT|index error|index out of range", re.I), ErrorKind.INVALID_ARGUMENT),
)


def _runtime_error(expression: str, text: str) -> EvalError:
    tag = _TAG_RE.search(text)
    if tag:
        return EvalError(ErrorKind(tag.group(1)), text[tag.end() :], expression)
    for pattern, kind in _ERROR_PATTERNS:
        if pattern.search(text):
            return EvalError(kind, text, expression)
    return EvalError(ErrorKind.OTHER, text, expression)


_OK_TRUE: Final[Ok[Any]] = Ok(True)
_OK_FALSE: Final[Ok[Any]] = Ok(False)
_ERROR_TYPE: Final = cel.Type.ERROR


def _ok(value: Any) -> Ok[Any]:
    return _OK_TRUE if value is True else _OK_FALSE if value is False else Ok(value)


_BOOL_TYPE: Final = cel.Type.BOOL


class _Compiled:
    """One checked expression plus what is needed to project its input."""

    __slots__ = ("_bound", "_engine_env", "_expr", "_facts", "_fast", "_projectors", "_static_type", "_text")

    def __init__(self, text: str, expr: Any, facts: ExprFacts, engine_env: Any, fast: Fast | None = None) -> None:
        self._text = text
        self._fast = fast
        """The Python fast path (:mod:`enclave_core.cel.fastpath`), tried before the runtime."""
        self._expr = expr
        self._facts = facts
        self._static_type: str = expr.return_type().name().lower()
        self._projectors: tuple[tuple[str, Callable[[Any], Any]], ...] = tuple(
            (name, compile_projector(trie)) for name, trie in facts.paths.items()
        )
        self._engine_env = engine_env
        bound = facts.cost
        self._bound = None if bound is None or bound.unbounded else bound
        """The cost bound when some input could take the expression over the budget (then every evaluation
        measures its projected input first, :func:`enclave_core.cel.cost.over_budget`), else None."""

    @property
    def guarded(self) -> bool:
        """Whether evaluations measure their input against the cost budget (never in a shared activation)."""
        return self._bound is not None

    @property
    def text(self) -> str:
        return self._text

    @property
    def static_type(self) -> str:
        return self._static_type

    @property
    def facts(self) -> ExprFacts:
        return self._facts

    def answer(self, variables: Mapping[str, Any]) -> EvalResult[Any] | None:
        """The fast path's result, or None when it has none (the runtime answers)."""
        fast = self._fast
        value = fast(variables) if fast is not None else UNANSWERED
        return None if value is UNANSWERED else _ok(value)

    def evaluate(self, variables: Mapping[str, Any], measured: bool = True) -> EvalResult[Any]:
        fast = self._fast
        if fast is not None:
            value = fast(variables)
            if value is not UNANSWERED:
                return _ok(value)
        data = {name: proj(variables[name]) for name, proj in self._projectors if name in variables}
        bound = self._bound
        if bound is not None and measured:
            why = cost.over_budget(bound, data)
            if why:
                return Failed(EvalError(ErrorKind.LIMIT, why, self._text))
        try:
            return self._result(self._expr.eval(data=data))
        except Exception as exc:  # conversion of unsupported input values
            return Failed(EvalError(ErrorKind.INVALID_ARGUMENT, str(exc), self._text))

    def evaluate_in(self, activation: Any) -> EvalResult[Any]:
        try:
            return self._result(self._expr.eval(activation))
        except Exception as exc:
            return Failed(EvalError(ErrorKind.INVALID_ARGUMENT, str(exc), self._text))

    def _result(self, value: Any) -> EvalResult[Any]:
        kind = value.type()
        if kind == _BOOL_TYPE:
            return Ok(value.value())
        if kind == _ERROR_TYPE:
            return Failed(_runtime_error(self._text, str(value.value())))
        try:
            return Ok(_to_neutral(value.value()))
        except (TypeError, lib.LibraryError) as exc:
            return Failed(
                EvalError(ErrorKind.RESULT_TYPE, f"result of type {kind.name()} is not supported: {exc}", self._text)
            )


class CelExprEngine:
    """Compiles with the C++ checker and evaluates with the C++ runtime."""

    name = "cel-expr-python"

    def __init__(self, fast_path: bool = True) -> None:
        self.fast_path = fast_path
        """Build :mod:`enclave_core.cel.fastpath` functions (off only to compare against the runtime alone)."""
        self._envs: dict[Environment, Any] = {}
        self._extensions = [
            ext_strings.ExtStrings(),
            ext_optional.ExtOptional(),
            ext_bindings.ExtBindings(),
            ext_math.ExtMath(),
            ext_encoders.ExtEncoders(),
            _k8s_extension(),
        ]

    def _env(self, env: Environment) -> Any:
        found = self._envs.get(env)
        if found is None:
            found = cel.NewEnv(
                _POOL,
                config=cel.NewEnvConfigFromYaml(_CONFIG_YAML),
                variables={name: _VAR_TYPES[vt] for name, vt in env.variables},
                extensions=self._extensions,
            )
            self._envs[env] = found
        return found

    def compile(self, expression: str, env: Environment) -> _Compiled:
        engine_env = self._env(env)
        try:
            expr = engine_env.compile(expression)
        except RuntimeError as exc:
            raise CelCompileError(expression, _issues(expression, str(exc))) from None
        try:
            tree = decode_checked(expr.serialize())
            facts = analyse_tree(tree, env.names)
        except ValueError:
            raise CelCompileError(
                expression, [CelIssue(expression, f"expression nested deeper than {limits.MAX_AST_DEPTH} levels")]
            ) from None
        facts = dataclasses.replace(facts, cost=cost.estimate(tree, env.names))
        fast = build(tree, env.names, expression) if self.fast_path else None
        return _Compiled(expression, expr, facts, engine_env, fast)

    def shared_activation(self, expressions: Sequence[Any], variables: Mapping[str, Any]) -> Any:
        """One runtime activation holding the union of what ``expressions`` observe."""
        tries: dict[str, list[PathTrie]] = {}
        for compiled in expressions:
            for name, trie in compiled.facts.paths.items():
                tries.setdefault(name, []).append(trie)
        data = {name: project(variables[name], merge_tries(ts)) for name, ts in tries.items() if name in variables}
        return expressions[0]._engine_env.Activation(data)

    def evaluate_many(self, expressions: Sequence[Any], variables: Mapping[str, Any]) -> list[EvalResult[Any]]:
        if len(expressions) <= 1:
            return [c.evaluate(variables) for c in expressions]
        answered = [c.answer(variables) for c in expressions]
        rest = [c for c, result in zip(expressions, answered, strict=True) if result is None]
        if not rest:
            return answered  # every one answered by its fast path
        # An expression whose input is measured against the cost budget is evaluated on its own projection.
        shared = [c for c in rest if not c.guarded]
        by_id: dict[int, EvalResult[Any]] = {}
        if len(shared) > 1:
            try:
                activation = self.shared_activation(shared, variables)
            except Exception as exc:  # conversion of unsupported input values
                by_id = {id(c): Failed(EvalError(ErrorKind.INVALID_ARGUMENT, str(exc), c.text)) for c in shared}
            else:
                by_id = {id(c): c.evaluate_in(activation) for c in shared}
        computed = iter([by_id[id(c)] if id(c) in by_id else c.evaluate(variables) for c in rest])
        return [result if result is not None else next(computed) for result in answered]
