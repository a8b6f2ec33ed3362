"""Adapter for ``cel-python`` (``celpy``), the pure-Python engine named in the design card.

Kept as the measured alternative (see ``docs/decisions/0001-cel-engine.md``): it is not selectable
through :func:`enclave_core.cel.engine_names` because it does not pass the conformance suite (no
optional fields, string extension, ``cel.bind``, three-argument ``map``), and it is far slower.
The Kubernetes library is wired in from the same engine-neutral functions as the default engine,
so the suite compares the engines rather than two library implementations.
"""

from __future__ import annotations

import datetime
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final

import celpy
from celpy import celtypes
from celpy.adapter import json_to_cel
from celpy.celparser import CELParseError
from celpy.evaluation import CELEvalError, base_functions

from enclave_core.cel import k8s_library as lib
from enclave_core.cel.environment import Environment, VarType
from enclave_core.cel.errors import CelCompileError, CelIssue, ErrorKind, EvalError
from enclave_core.cel.results import EvalResult, Failed, Ok
from enclave_core.quantity import Quantity

__all__ = ["CelPyEngine"]

_OPAQUE: Final = (Quantity, lib.URL, *lib.CIDR_TYPES, *lib.IP_TYPES)


def _to_neutral(value: Any) -> Any:
    if value is None or isinstance(value, _OPAQUE):
        return value
    if isinstance(value, celtypes.BoolType):
        return bool(value)
    if isinstance(value, celtypes.TimestampType):
        return datetime.datetime.fromtimestamp(value.timestamp(), tz=datetime.UTC)
    if isinstance(value, celtypes.DurationType):
        return datetime.timedelta(seconds=value.total_seconds())
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, str):
        return str(value)
    if isinstance(value, bytes):
        return bytes(value)
    if isinstance(value, list):
        return [_to_neutral(v) for v in value]
    if isinstance(value, dict):
        return {_to_neutral(k): _to_neutral(v) for k, v in value.items()}
    return value


def _to_cel(value: Any) -> Any:
    if value is None or isinstance(value, _OPAQUE):
        return value
    if isinstance(value, bool):
        return celtypes.BoolType(value)
    if isinstance(value, list):
        return celtypes.ListType([_to_cel(v) for v in value])
    if isinstance(value, datetime.datetime):
        return celtypes.TimestampType(value)
    if isinstance(value, datetime.timedelta):
        return celtypes.DurationType(value)
    return json_to_cel(value)


def _wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
    def impl(*args: Any) -> Any:
        try:
            return _to_cel(fn(*[_to_neutral(a) for a in args]))
        except lib.LibraryError as exc:
            return CELEvalError(f"[enclave:{exc.kind.value}] {exc}")
        except (TypeError, ValueError) as exc:
            return CELEvalError(f"no such overload: {exc}")

    return impl


def _ip_dispatch(value: Any) -> Any:
    return lib.cidr_ip(value) if isinstance(value, lib.CIDR_TYPES) else lib.ip(value)


def _contains_ip(prefix: Any, value: Any) -> bool:
    return lib.cidr_contains_ip(prefix, value)


def _string(value: Any) -> Any:
    if isinstance(value, lib.CIDR_TYPES):
        return lib.cidr_string(value)
    if isinstance(value, lib.IP_TYPES):
        return str(value)
    raise TypeError("not an ip or cidr")


_BASE_STRING: Final = base_functions["string"]


def _string_any(value: Any) -> Any:
    if isinstance(value, (*lib.CIDR_TYPES, *lib.IP_TYPES)):
        return celtypes.StringType(_string(value))
    return _BASE_STRING(value)


_FUNCTIONS: Final[dict[str, Callable[..., Any]]] = {
    "quantity": _wrap(lib.quantity),
    "isQuantity": _wrap(lib.is_quantity),
    "sign": _wrap(lib.q_sign),
    "isInteger": _wrap(lib.q_is_integer),
    "asInteger": _wrap(lib.q_as_integer),
    "asApproximateFloat": _wrap(lib.q_as_approximate_float),
    "add": _wrap(lib.q_add),
    "sub": _wrap(lib.q_sub),
    "compareTo": _wrap(lib.q_compare_to),
    "isGreaterThan": _wrap(lib.q_is_greater_than),
    "isLessThan": _wrap(lib.q_is_less_than),
    "sum": _wrap(lib.list_sum),
    "min": _wrap(lib.list_min),
    "max": _wrap(lib.list_max),
    "isSorted": _wrap(lib.list_is_sorted),
    "indexOf": _wrap(lib.list_index_of),
    "lastIndexOf": _wrap(lib.list_last_index_of),
    "find": _wrap(lib.regex_find),
    "findAll": _wrap(lib.regex_find_all),
    "url": _wrap(lib.url),
    "isURL": _wrap(lib.is_url),
    "getScheme": _wrap(lib.url_scheme),
    "getHost": _wrap(lib.url_host),
    "getHostname": _wrap(lib.url_hostname),
    "getPort": _wrap(lib.url_port),
    "getEscapedPath": _wrap(lib.url_escaped_path),
    "getQuery": _wrap(lib.url_query),
    "ip": _wrap(_ip_dispatch),
    "isIP": _wrap(lib.is_ip),
    "family": _wrap(lib.ip_family),
    "isUnspecified": _wrap(lib.ip_is_unspecified),
    "isLoopback": _wrap(lib.ip_is_loopback),
    "isLinkLocalMulticast": _wrap(lib.ip_is_link_local_multicast),
    "isLinkLocalUnicast": _wrap(lib.ip_is_link_local_unicast),
    "isGlobalUnicast": _wrap(lib.ip_is_global_unicast),
    "cidr": _wrap(lib.cidr),
    "isCIDR": _wrap(lib.is_cidr),
    "containsIP": _wrap(_contains_ip),
    "containsCIDR": _wrap(lib.cidr_contains_cidr),
    "masked": _wrap(lib.cidr_masked),
    "prefixLength": _wrap(lib.cidr_prefix_length),
    "string": _string_any,
}

_ANNOTATIONS: Final[dict[VarType, Any]] = {
    VarType.DYN: celtypes.Value,
    VarType.BOOL: celtypes.BoolType,
    VarType.INT: celtypes.IntType,
    VarType.UINT: celtypes.UintType,
    VarType.DOUBLE: celtypes.DoubleType,
    VarType.STRING: celtypes.StringType,
    VarType.BYTES: celtypes.BytesType,
    VarType.TIMESTAMP: celtypes.TimestampType,
    VarType.DURATION: celtypes.DurationType,
}

_TAG_RE: Final = re.compile(r"\[enclave:([a-z_]+)\] ")
_ERROR_PATTERNS: Final = (
    (
        re.compile(r"no such overload|unsupported operand|not supported between|TypeError", re.I),
        ErrorKind.NO_MATCHING_OVERLOAD,
    ),
    (re.compile(r"no such (key|member|field)|KeyError", re.I), ErrorKind.NO_SUCH_KEY),
    (re.compile(r"divide by zero|division by zero|modulo by zero|ZeroDivision", re.I), ErrorKind.DIVISION_BY_ZERO),
    (re.compile(r"overflow|out of range", re.I), ErrorKind.OVERFLOW),
)


def _runtime_error(expression: str, text: str) -> EvalError:
    tag = _TAG_RE.search(text)
    if tag:
        return EvalError(ErrorKind(tag.group(1)), text[tag.end() :], expression)
    for pattern, kind in _ERROR_PATTERNS:
        if pattern.search(text):
            return EvalError(kind, text, expression)
    return EvalError(ErrorKind.OTHER, text, expression)


class _Compiled:
    __slots__ = ("_env", "_names", "_runner", "_text")

    def __init__(self, text: str, runner: Any, env: Environment) -> None:
        self._text = text
        self._runner = runner
        self._env = env
        self._names = dict(env.variables)

    @property
    def text(self) -> str:
        return self._text

    @property
    def static_type(self) -> str:
        return "dyn"

    @property
    def facts(self) -> None:
        return None

    def activation(self, variables: Mapping[str, Any]) -> dict[str, Any]:
        return {name: _to_cel(value) for name, value in variables.items() if name in self._names}

    def evaluate(self, variables: Mapping[str, Any], measured: bool = True) -> EvalResult[Any]:
        try:
            activation = self.activation(variables)
        except (TypeError, ValueError) as exc:
            return Failed(EvalError(ErrorKind.INVALID_ARGUMENT, str(exc), self._text))
        return self.evaluate_in(activation)

    def evaluate_in(self, activation: dict[str, Any]) -> EvalResult[Any]:
        try:
            value = self._runner.evaluate(activation)
        except CELEvalError as exc:
            return Failed(_runtime_error(self._text, " ".join(str(a) for a in exc.args)))
        except RecursionError:
            return Failed(EvalError(ErrorKind.LIMIT, "expression too deep", self._text))
        except Exception as exc:  # celpy leaks Python exceptions for some type errors
            return Failed(_runtime_error(self._text, f"{type(exc).__name__}: {exc}"))
        if isinstance(value, CELEvalError):
            return Failed(_runtime_error(self._text, " ".join(str(a) for a in value.args)))
        return Ok(_to_neutral(value))


class CelPyEngine:
    """Parses with celpy's Lark grammar and interprets the tree in Python."""

    name = "cel-python"

    def __init__(self) -> None:
        self._envs: dict[Environment, Any] = {}

    def compile(self, expression: str, env: Environment) -> _Compiled:
        engine_env = self._envs.get(env)
        if engine_env is None:
            engine_env = celpy.Environment(annotations={n: _ANNOTATIONS[t] for n, t in env.variables})
            self._envs[env] = engine_env
        try:
            ast = engine_env.compile(expression)
            runner = engine_env.program(ast, functions=_FUNCTIONS)
        except CELParseError as exc:
            line = getattr(exc, "line", None)
            column = getattr(exc, "column", None)
            reason = str(exc.args[0]).splitlines()[0] if exc.args else "syntax error"
            raise CelCompileError(expression, [CelIssue(expression, reason, line, column)]) from None
        except Exception as exc:
            raise CelCompileError(expression, [CelIssue(expression, str(exc))]) from None
        return _Compiled(expression, runner, env)

    def evaluate_many(self, expressions: Sequence[Any], variables: Mapping[str, Any]) -> list[EvalResult[Any]]:
        if not expressions:
            return []
        try:
            activation = expressions[0].activation(variables)
        except (TypeError, ValueError) as exc:
            return [Failed(EvalError(ErrorKind.INVALID_ARGUMENT, str(exc), c.text)) for c in expressions]
        return [c.evaluate_in(activation) for c in expressions]
