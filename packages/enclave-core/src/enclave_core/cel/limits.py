"""Guards against runaway expressions.

Neither engine can be interrupted mid-evaluation from Python, so the guards work before it runs: an
expression is refused at compile time when it is too long, too deep or nests too many
comprehensions (the cost of nested loops over object lists grows as a power of the nesting), or when its
estimated cost exceeds :data:`COST_BUDGET` (:mod:`enclave_core.cel.cost`); and an evaluation whose input
would take it over that budget is refused instead of run.
Regex patterns and input sizes handled by the Python-side library functions are capped too.
"""

from __future__ import annotations

from typing import Final

MAX_EXPRESSION_LENGTH: Final = 5000
"""Characters; Kubernetes validation rules in practice stay well under 1000."""

MAX_AST_DEPTH: Final = 48
"""Nesting depth of the syntax tree (parentheses, operators, calls)."""

MAX_AST_NODES: Final = 2000
"""Total syntax tree nodes after macro expansion."""

MAX_COMPREHENSION_NESTING: Final = 3
"""Nested ``all``/``exists``/``map``/``filter``: three levels cover containers x env x values."""

MAX_REGEX_LENGTH: Final = 1000
"""Characters in a pattern given to ``find``/``findAll`` (run by RE2, :mod:`enclave_core.patterns`)."""

MAX_STRING_INPUT: Final = 1 << 20
"""Characters of input accepted by the Python-side string functions (regex, url)."""

COST_BUDGET: Final = 1_000_000
"""Estimated cost units one evaluation may spend (kube-apiserver's per-call limit; about a node evaluated per
unit, a tenth per character or element walked): :mod:`enclave_core.cel.cost`."""

INPUT_BOUND: Final = 3 << 20
"""Entries or characters no list, map or string of an input can exceed (kube-apiserver's 3 MiB request
limit): an expression within the budget at this size is never measured at evaluation."""

MIN_INPUT_SIZE: Final = 32
"""Inputs every expression must be able to take within the budget (lists of 32 elements, strings of 32
characters); one that cannot is refused when compiled instead of failing on nearly every object."""

FORBIDDEN_FUNCTIONS: Final = frozenset({"lists.range"})
"""Functions that build data out of thin air (``lists.range(1000000000)``) are refused."""
