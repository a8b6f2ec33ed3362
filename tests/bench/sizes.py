"""How big a benchmark runs, and whether its budget is judged.

``tox -e bench`` sets ``ENCLAVE_BENCH_SIZE=full``: every benchmark runs at the size docs/benchmarks.md reports and
asserts its budget as a ratio between two rows of the same run (never a wall-clock target: the host's speed
changes by 2x from one minute to the next, so only rows measured side by side compare). Anything else (the
default ``tox`` run, a plain ``pytest tests/bench``) runs the smoke size: each benchmark once, on a few items, so a
benchmark that no longer runs fails the day it breaks, at a cost of seconds; its numbers mean nothing then and no
budget is judged.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")

FULL = os.environ.get("ENCLAVE_BENCH_SIZE", "smoke") == "full"
"""True under ``tox -e bench``: the documented size, budgets asserted."""


def sized(full: T, smoke: T) -> T:
    """``full`` under ``tox -e bench``, else ``smoke``."""
    return full if FULL else smoke


@dataclass(frozen=True)
class Budget:
    """A same-run ratio that must stay below ``limit``."""

    what: str
    ratio: float
    limit: float

    @property
    def met(self) -> bool:
        return self.ratio < self.limit

    def __str__(self) -> str:
        return f"budget {self.what}: {self.ratio:.2f} (< {self.limit:g}): {'met' if self.met else 'MISSED'}"


def enforce(*budgets: Budget) -> None:
    """Print every verdict; under ``tox -e bench`` fail on a missed one (after the table is out)."""
    for budget in budgets:
        print(budget)
    missed = [str(budget) for budget in budgets if not budget.met]
    if FULL:
        assert not missed, "; ".join(missed)
