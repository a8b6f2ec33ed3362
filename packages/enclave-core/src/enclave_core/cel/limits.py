"""Guards against runaway expressions.

Neither engine can be interrupted mid-evaluation from Python, so the guard is static: an
expression is refused at compile time when it is too long, too deep or nests too many
comprehensions (the cost of nested loops over object lists grows as a power of the nesting).
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

FORBIDDEN_FUNCTIONS: Final = frozenset({"lists.range"})
"""Functions that build data out of thin air (``lists.range(1000000000)``) are refused."""
