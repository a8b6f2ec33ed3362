"""Kubernetes-style CEL for Enclave: one facade over the engine chosen by measurement.

Typical use::

    from enclave_core import cel

    program = cel.default().condition("object.metadata.labels['app'] == 'web'", cel.RULE_CONDITION_ENV)
    result = program.evaluate({"object": pod, "now": now})   # cel.Ok(True) or cel.Failed(error)

Compile errors raise :class:`CelCompileError` (with positions); evaluation never raises.
:func:`check` is the validating webhook's entry point.
"""

from __future__ import annotations

import functools

from enclave_core.cel.engine import Engine
from enclave_core.cel.environment import (
    MATCH_CONDITION_ENV,
    POLICY_CONDITION_ENV,
    QUOTA_SELECTOR_ENV,
    QUOTA_SOURCE_ENV,
    RULE_AUDIENCE_ENV,
    RULE_CONDITION_ENV,
    Environment,
    ResultType,
    VarType,
)
from enclave_core.cel.errors import CelCompileError, CelIssue, ErrorKind, EvalError
from enclave_core.cel.facade import CelFacade, ConditionBatch, Program
from enclave_core.cel.results import ConditionOutcome, EvalResult, Failed, Ok, combine_conditions

__all__ = [
    "DEFAULT_ENGINE",
    "MATCH_CONDITION_ENV",
    "POLICY_CONDITION_ENV",
    "QUOTA_SELECTOR_ENV",
    "QUOTA_SOURCE_ENV",
    "RULE_AUDIENCE_ENV",
    "RULE_CONDITION_ENV",
    "CelCompileError",
    "CelFacade",
    "CelIssue",
    "ConditionBatch",
    "ConditionOutcome",
    "Environment",
    "ErrorKind",
    "EvalError",
    "EvalResult",
    "Failed",
    "Ok",
    "Program",
    "ResultType",
    "VarType",
    "check",
    "combine_conditions",
    "default",
    "engine_names",
    "new_engine",
]

DEFAULT_ENGINE = "cel-expr-python"
"""Chosen in ``docs/decisions/0001-cel-engine.md``."""


def engine_names() -> list[str]:
    """Engines that may be selected behind the facade (each passes the conformance suite)."""
    return [DEFAULT_ENGINE]


def new_engine(name: str = DEFAULT_ENGINE) -> Engine:
    """A fresh engine adapter by name; engines are imported lazily so an unused one costs nothing."""
    if name == "cel-expr-python":
        from enclave_core.cel.engine_celexpr import CelExprEngine

        return CelExprEngine()
    if name == "cel-python":
        try:
            from enclave_core.cel.engine_celpy import CelPyEngine
        except ModuleNotFoundError as err:  # an extra: components do not ship it (decision 0001)
            raise ValueError("the cel-python engine needs the celpy extra: pip install 'enclave-core[celpy]'") from err
        return CelPyEngine()
    raise ValueError(f"unknown CEL engine {name!r}; known: cel-expr-python, cel-python")


@functools.cache
def default() -> CelFacade:
    """The process-wide facade on the default engine (one compile cache per process)."""
    return CelFacade(new_engine(DEFAULT_ENGINE))


def check(expression: str, env: Environment, result: ResultType = ResultType.BOOL) -> list[CelIssue]:
    """Problems that stop ``expression`` from compiling in ``env``; empty when it is valid."""
    return default().check(expression, env, result)
