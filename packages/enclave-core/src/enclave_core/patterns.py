"""Linear-time regular expressions for every pattern that comes from configuration or from a tenant.

Why not Python's ``re``: it backtracks, so a plausible administrator's pattern such as
``([a-z0-9]+-?)+\\.example\\.com`` takes seconds on a 24-character hostname that does not match, four
times longer per two more characters, and one Ingress would freeze an admission replica (issue 29). RE2
(``google-re2``) matches in time linear in the input whatever the pattern, and refuses what it cannot do
in linear time (backreferences, lookaround, possessive quantifiers) when the pattern is compiled, so such
a pattern is refused at admission with its field named instead of being half applied.

This is the one place such patterns are compiled: rule value matchers (``exp``), forbidden metadata
(``deniedRegex``), the protected-namespace regex, workload registry patterns and CEL ``find``/``findAll``.
Patterns that are the project's own constants may stay on ``re``.

Semantics kept from ``re``: :meth:`Pattern.fullmatch`, :meth:`Pattern.match` (anchored at the start) and
:meth:`Pattern.search` mean what they mean there, leftmost-first alternation included. Differences (see
``docs/decisions/0006-linear-time-patterns.md``): ``$`` does not match before a trailing newline (values
Enclave matches hold no newlines), ``\\d``, ``\\w`` and ``\\s`` are ASCII only, and ``\\Z`` is spelled
``\\z``.
"""

from __future__ import annotations

import functools
from typing import Any, Final

import re2
from re2 import _re2

__all__ = ["MAX_PATTERN_LENGTH", "MAX_PROGRAM_MEMORY", "Pattern", "PatternError", "compile_pattern", "problem"]

MAX_PATTERN_LENGTH: Final = 1024
"""Characters of a pattern (the API fields' maxLength)."""

MAX_PROGRAM_MEMORY: Final = 1 << 20
"""Bytes RE2 may spend on one compiled pattern (its ``max_mem``): a pattern whose automaton would need more
(``(a{1000}){1000}``-like repetition) is refused when compiled; matching never allocates beyond it."""

_HINTS: Final = (
    ("invalid perl operator: (?=", "lookahead is not supported by the linear-time engine (RE2)"),
    ("invalid perl operator: (?!", "negative lookahead is not supported by the linear-time engine (RE2)"),
    ("invalid perl operator: (?<=", "lookbehind is not supported by the linear-time engine (RE2)"),
    ("invalid perl operator: (?<!", "negative lookbehind is not supported by the linear-time engine (RE2)"),
    ("invalid perl operator: (?>", "atomic groups are not supported by the linear-time engine (RE2)"),
    ("invalid escape sequence: \\Z", "write \\z for the end of the text (RE2 has no \\Z)"),
    ("bad repetition operator: ", "possessive or doubled quantifiers are not supported by RE2"),
    ("pattern too large", f"the compiled pattern needs more than {MAX_PROGRAM_MEMORY} bytes"),
    ("invalid repetition size", "repetition counts are at most 1000 in RE2, nested ones multiplied"),
    ("invalid perl operator: (?P", "named backreferences (?P=name) are not supported by the linear-time engine (RE2)"),
)
_BACKREFERENCE: Final = tuple(f"invalid escape sequence: \\{digit}" for digit in "123456789")


class PatternError(ValueError):
    """A pattern the linear-time engine cannot compile; the message says why in the user's terms."""

    def __init__(self, pattern: str, reason: str) -> None:
        self.pattern = pattern
        self.reason = reason
        super().__init__(f"invalid regular expression {pattern!r}: {reason}")


def _options(capture: bool) -> Any:
    options = re2.Options()
    options.max_mem = MAX_PROGRAM_MEMORY
    options.log_errors = False  # the reason travels in PatternError, not on stderr
    options.never_capture = not capture
    return options


_TEST_OPTIONS: Final = _options(capture=False)
"""Yes/no questions need no submatches: RE2 then answers from its DFA (about 2 µs for a hostname)."""
_FIND_OPTIONS: Final = _options(capture=True)
_ANCHOR: Final = _re2.RE2.Anchor
_BOTH: Final = _ANCHOR.ANCHOR_BOTH
_START: Final = _ANCHOR.ANCHOR_START
_NONE: Final = _ANCHOR.UNANCHORED


def _reason(error: str) -> str:
    for prefix in _BACKREFERENCE:
        if prefix in error:
            return f"{error}: backreferences are not supported by the linear-time engine (RE2)"
    for needle, hint in _HINTS:
        if needle in error:
            return f"{error}: {hint}"
    return error


def _encodable(text: str) -> str:
    """``text`` with lone surrogates (valid in JSON, not in UTF-8, which RE2 reads) as U+FFFD: matched like any
    other character instead of raising."""
    return text.encode("utf-8", "surrogatepass").decode("utf-8", "replace")


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        return _encodable(text).encode("utf-8")


class Pattern:
    """A compiled linear-time pattern; immutable and safe to share between threads.

    The yes/no methods call RE2's ``Match`` directly on UTF-8 bytes (the ``re2`` module's ``re``-like layer
    costs ten times as much per call, too much for admission's hot path); :meth:`find` and :meth:`find_all`
    go through that layer, which maps byte offsets back to characters.
    """

    __slots__ = ("_found", "_test", "pattern")

    def __init__(self, pattern: str, test: Any) -> None:
        self.pattern = pattern
        """The text the pattern was compiled from (for messages)."""
        self._test = test
        self._found: Any = None

    def _matches(self, anchor: Any, text: str) -> bool:
        data = _utf8(text)
        return bool(self._test.Match(anchor, data, 0, len(data))[0] != (-1, -1))

    def fullmatch(self, text: str) -> bool:
        """The whole of ``text`` matches (ValueMatcher ``exp``)."""
        return self._matches(_BOTH, text)

    def match(self, text: str) -> bool:
        """A prefix of ``text`` matches (``re.match``: registry patterns)."""
        return self._matches(_START, text)

    def search(self, text: str) -> bool:
        """Some part of ``text`` matches (``re.search``: deniedRegex, the protected-namespace regex)."""
        return self._matches(_NONE, text)

    def _finder(self) -> Any:
        finder = self._found
        if finder is None:
            finder = self._found = re2.compile(self.pattern, _FIND_OPTIONS)
        return finder

    def find(self, text: str) -> str | None:
        """The leftmost match, or None (CEL ``find``)."""
        try:
            found = self._finder().search(text)
        except UnicodeEncodeError:
            found = self._finder().search(_encodable(text))
        return None if found is None else str(found.group(0))

    def find_all(self, text: str) -> list[str]:
        """Every non-overlapping match, left to right (CEL ``findAll``)."""
        try:
            return [str(found.group(0)) for found in self._finder().finditer(text)]
        except UnicodeEncodeError:
            return [str(found.group(0)) for found in self._finder().finditer(_encodable(text))]

    def __repr__(self) -> str:
        return f"Pattern({self.pattern!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pattern) and other.pattern == self.pattern

    def __hash__(self) -> int:
        return hash(self.pattern)


@functools.lru_cache(maxsize=2048)
def compile_pattern(pattern: str) -> Pattern:
    """Compile ``pattern`` (cached by text); raise :class:`PatternError` naming what RE2 refused."""
    if len(pattern) > MAX_PATTERN_LENGTH:
        raise PatternError(pattern[:64] + "...", f"longer than {MAX_PATTERN_LENGTH} characters")
    try:
        test = _re2.RE2(pattern.encode("utf-8"), _TEST_OPTIONS)
    except UnicodeEncodeError as err:  # a lone surrogate
        raise PatternError(pattern, str(err)) from None
    if not test.ok():
        raise PatternError(pattern, _reason(test.error().decode("utf-8", "replace")))
    return Pattern(pattern, test)


def problem(pattern: str) -> str:
    """Why ``pattern`` cannot be compiled, or the empty string when it can (for validation messages)."""
    try:
        compile_pattern(pattern)
    except PatternError as err:
        return str(err)
    return ""
