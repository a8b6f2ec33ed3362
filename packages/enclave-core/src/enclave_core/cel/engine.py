"""The contract between the facade and an engine adapter.

The facade owns caching, result typing and the public API; an adapter only compiles text against a
declaration and evaluates with plain Python values in and out. Values crossing this boundary are
engine-neutral: JSON-like values, ``datetime``/``timedelta``, :class:`~enclave_core.quantity.Quantity`
and the ``ip``/``cidr``/``url`` values of :mod:`enclave_core.cel.k8s_library`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from enclave_core.cel.environment import Environment
from enclave_core.cel.results import EvalResult
from enclave_core.cel.syntax import ExprFacts

__all__ = ["CompiledExpression", "Engine"]


class CompiledExpression(Protocol):
    """An expression compiled by one engine; immutable and safe to share between threads."""

    @property
    def text(self) -> str: ...

    @property
    def static_type(self) -> str:
        """The checked result type (``bool``, ``dyn``, ``kubernetes.Quantity``...), ``dyn`` if unknown."""
        ...

    @property
    def facts(self) -> ExprFacts | None:
        """Static facts if the engine exposes a syntax tree, else ``None``."""
        ...

    def evaluate(self, variables: Mapping[str, Any], measured: bool = True) -> EvalResult[Any]:
        """Evaluate once; never raises for data-dependent failures. ``measured=False`` skips the cost guard on
        the input (:mod:`enclave_core.cel.cost`): only for a caller that has bounded the work otherwise."""
        ...


class Engine(Protocol):
    """A CEL implementation wrapped for the facade."""

    name: str

    def compile(self, expression: str, env: Environment) -> CompiledExpression:
        """Compile and check, raising :class:`~enclave_core.cel.errors.CelCompileError` with positions."""
        ...

    def evaluate_many(
        self, expressions: Sequence[CompiledExpression], variables: Mapping[str, Any]
    ) -> list[EvalResult[Any]]:
        """Evaluate several expressions of this engine on the same input, converting it once."""
        ...
