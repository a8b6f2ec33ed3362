"""Errors of the CEL facade: compile-time issues (raised) and run-time errors (returned as values).

A compile error is the user's mistake in a manifest, so it must point at the spot in the expression
(line, column) and say why; the validating webhook copies it into its denial message. A run-time
error is data-dependent (a missing field, a bad quantity string) and must never escape as an
exception into a controller or webhook: it travels as an :class:`EvalError` inside a result.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["CelCompileError", "CelIssue", "ErrorKind", "EvalError"]


@dataclass(frozen=True, slots=True)
class CelIssue:
    """One problem found while compiling or checking an expression.

    ``line`` and ``column`` are 1-based (column counts characters, as editors do) and ``None``
    when the problem concerns the whole expression (for example its length).
    """

    expression: str
    reason: str
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        where = f"{self.line}:{self.column}: " if self.line is not None else ""
        return f"{where}{self.reason}"


class CelCompileError(ValueError):
    """An expression did not compile; ``issues`` holds every problem with its position."""

    def __init__(self, expression: str, issues: list[CelIssue]) -> None:
        self.expression = expression
        self.issues = issues
        super().__init__(f"invalid CEL expression {expression!r}: " + "; ".join(str(i) for i in issues))


class ErrorKind(enum.Enum):
    """Coarse, engine-independent categories of run-time errors.

    Both engines word their messages differently; callers and the conformance suite only rely on
    these categories, never on the message text.
    """

    NO_SUCH_KEY = "no_such_key"
    NO_MATCHING_OVERLOAD = "no_matching_overload"
    DIVISION_BY_ZERO = "division_by_zero"
    OVERFLOW = "overflow"
    INVALID_ARGUMENT = "invalid_argument"
    RESULT_TYPE = "result_type"
    LIMIT = "limit"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class EvalError:
    """Why an evaluation produced no value; safe to log and to put into an event or status."""

    kind: ErrorKind
    message: str
    expression: str

    def __str__(self) -> str:
        return f"evaluating {self.expression!r}: {self.message}"
