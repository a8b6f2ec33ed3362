"""Evaluation results as values, and the spec's rule for combining several conditions.

Results are plain tagged values (:class:`Ok` or :class:`Failed`) instead of exceptions so that a
controller loop or an admission handler can never be brought down by one user's expression, and so
that the "false beats error" rule of the specification can be applied after all conditions ran.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Generic, TypeAlias, TypeVar

from enclave_core.cel.errors import EvalError

__all__ = ["ConditionOutcome", "EvalResult", "Failed", "Ok", "combine_conditions"]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Ok(Generic[T]):
    """The expression produced ``value`` of the requested result type."""

    value: T


@dataclass(frozen=True, slots=True)
class Failed:
    """The expression failed at run time, or produced a value of the wrong type."""

    error: EvalError


EvalResult: TypeAlias = Ok[T] | Failed


class ConditionOutcome(enum.Enum):
    """What a list of boolean conditions decides, per the specification's error rule."""

    MATCH = "match"
    """Every condition is true (or there are none): apply the rule / call the webhook."""
    SKIP = "skip"
    """At least one condition is false: skip, even if another one failed."""
    ERROR = "error"
    """No condition is false and at least one failed: reject (or follow the failure policy)."""


def combine_conditions(results: Iterable[EvalResult[bool]]) -> tuple[ConditionOutcome, list[EvalError]]:
    """Apply "an evaluation error rejects the request unless another condition is false".

    Returns the outcome and the errors seen, so the caller can put them in its denial message.
    """
    errors: list[EvalError] = []
    false_seen = False
    for result in results:
        if isinstance(result, Failed):
            errors.append(result.error)
        elif not result.value:
            false_seen = True
    if false_seen:
        return ConditionOutcome.SKIP, errors
    if errors:
        return ConditionOutcome.ERROR, errors
    return ConditionOutcome.MATCH, errors
