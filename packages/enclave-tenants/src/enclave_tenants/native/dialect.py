"""Whether a tenant's regular expression means the same to the webhook's RE2 and to kube-apiserver's CEL.

The webhook matches ``exp`` with RE2 (C++, :mod:`enclave_core.patterns`); a policy's ``matches()`` runs Go's
``regexp``, a port of RE2 that is not the same program: Go refuses ``\\C``, names capture groups by other
rules, and each engine carries its own Unicode tables (``\\p{...}``); an unclosed ``\\Q`` would swallow the
``)\\z`` the compiler wraps the pattern in. Rather than list the differences, this module accepts a pattern only
when it is made of constructs whose syntax and meaning are the same in both (literals, escaped punctuation,
the Perl classes ``\\d \\s \\w`` and their negations, ``\\b \\B \\A \\z``, closed ``\\Q...\\E`` quotes,
``.``, ``^``, ``$``, bracket classes of literals, ranges and POSIX names, groups ``(...)``/``(?:...)`` and
flag groups of ``i m s U``, alternation and the quantifiers ``* + ? {n} {n,} {n,m}``, each optionally lazy).
Anything else keeps its rule on the webhook with the construct named. A pattern is at most 1024 characters (the
API's limit), so one pass is cheap.
"""

from __future__ import annotations

import re
from typing import Final

_SPECIAL: Final = frozenset("\\.+*?()|[]{}^$")
_ESCAPED_PUNCTUATION: Final = frozenset("\\.+*?()|[]{}^$-/#&~!%,:;<=>@")
_CLASS_ESCAPES: Final = frozenset("dDsSwW")
_CONTROL_ESCAPES: Final = frozenset("tnrfva")
_ASSERTIONS: Final = frozenset("bBAz")
_POSIX: Final = frozenset(
    {"alnum", "alpha", "ascii", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space", "upper"}
    | {"word", "xdigit"}
)
_FLAG_SET: Final = re.compile(r"[imsU]+(?:-[imsU]+)?|-[imsU]+")
"""Flags of ``(?flags)`` and ``(?flags:...)`` (a constant of this module: ``re`` is safe on it)."""


class _RefusedError(Exception):
    pass


def problem(pattern: str) -> str:
    """What in ``pattern`` is outside the dialect both engines read alike, or '' when nothing is."""
    try:
        _Scan(pattern).run()
    except _RefusedError as err:
        return (
            f"regular expression {pattern!r} {err.args[0]}, which Go's regexp (the policy's matches()) may read "
            "differently from the webhook's RE2"
        )
    return ""


class _Scan:
    def __init__(self, pattern: str) -> None:
        self.text = pattern
        self.at = 0
        self.depth = 0

    def _peek(self, offset: int = 0) -> str:
        at = self.at + offset
        return self.text[at] if at < len(self.text) else ""

    def run(self) -> None:
        quantifiable = False
        while self.at < len(self.text):
            char = self.text[self.at]
            if char == "\\":
                quantifiable = self._escape()
            elif char == "[":
                self._class()
                quantifiable = True
            elif char == "(":
                self._open()
                quantifiable = False
            elif char == ")":
                if self.depth == 0:
                    raise _RefusedError("has an unbalanced ')'")
                self.depth -= 1
                self.at += 1
                quantifiable = True
            elif char in "*+?":
                if not quantifiable:
                    raise _RefusedError(f"repeats nothing or a repetition with {char!r}")
                self.at += 1
                self._lazy()
                quantifiable = False
            elif char == "{":
                if not quantifiable:
                    raise _RefusedError("repeats nothing or a repetition with '{'")
                self._counted()
                quantifiable = False
            elif char in "}]":
                raise _RefusedError(f"uses a bare {char!r}")
            elif char in "|^$":
                self.at += 1
                quantifiable = False
            else:
                self.at += 1  # a literal, '.' included
                quantifiable = True
        if self.depth:
            raise _RefusedError("has an unclosed '('")

    def _lazy(self) -> None:
        if self._peek() == "?":
            self.at += 1

    def _counted(self) -> None:
        end = self.text.find("}", self.at)
        body = self.text[self.at + 1 : end] if end > 0 else ""
        low, comma, high = body.partition(",")
        if end < 0 or not low.isascii() or not low.isdigit() or (high and not (high.isascii() and high.isdigit())):
            raise _RefusedError("uses '{' other than as a count {n}, {n,} or {n,m}")
        if int(low) > 1000 or (high and int(high) > 1000):
            raise _RefusedError("repeats more than 1000 times")
        del comma
        self.at = end + 1
        self._lazy()

    def _escape(self) -> bool:
        """One escape outside a class; whether it can be repeated."""
        char = self._peek(1)
        if char in _ASSERTIONS:
            self.at += 2
            return False
        if char == "Q":
            end = self.text.find("\\E", self.at + 2)
            if end < 0:
                raise _RefusedError("has an unterminated '\\Q' (it would quote the anchors the policy adds)")
            quoted = end > self.at + 2
            self.at = end + 2
            return quoted
        self._escape_atom(char)
        return True

    def _escape_atom(self, char: str) -> None:
        if char in _ESCAPED_PUNCTUATION or char in _CLASS_ESCAPES or char in _CONTROL_ESCAPES:
            self.at += 2
            return
        if char == "x":
            self._hex()
            return
        raise _RefusedError(f"uses the escape '\\{char}'" if char else "ends in a lone backslash")

    def _hex(self) -> None:
        rest = self.text[self.at + 2 :]
        if rest[:1] == "{":
            end = rest.find("}")
            digits = rest[1:end] if end > 0 else ""
            if not digits or len(digits) > 6 or any(c not in "0123456789abcdefABCDEF" for c in digits):
                raise _RefusedError("uses a malformed '\\x{...}'")
            if int(digits, 16) > 0x10FFFF or 0xD800 <= int(digits, 16) <= 0xDFFF:
                raise _RefusedError("names a code point that is not a character in '\\x{...}'")
            self.at += 2 + end + 1
            return
        digits = rest[:2]
        if len(digits) != 2 or any(c not in "0123456789abcdefABCDEF" for c in digits):
            raise _RefusedError("uses a malformed '\\x'")
        self.at += 4

    def _open(self) -> None:
        self.depth += 1
        if self._peek(1) != "?":
            self.at += 1
            return
        end = self.at + 2
        while end < len(self.text) and self.text[end] not in ":)":
            end += 1
        flags = self.text[self.at + 2 : end]
        if end >= len(self.text) or not ((flags == "" and self.text[end] == ":") or _FLAG_SET.fullmatch(flags)):
            raise _RefusedError(f"uses the group syntax {self.text[self.at : end + 1]!r}")
        if self.text[end] == ")":
            self.depth -= 1  # (?i) sets flags; it opens nothing
        self.at = end + 1

    def _class(self) -> None:
        self.at += 1
        if self._peek() == "^":
            self.at += 1
        if self._peek() in ("]", "-"):
            raise _RefusedError("starts a bracket class with ']' or '-'")
        members = 0
        while True:
            char = self._peek()
            if char == "":
                raise _RefusedError("has an unclosed '['")
            if char == "]":
                if members == 0:
                    raise _RefusedError("has an empty bracket class")
                self.at += 1
                return
            if char == "[" and self._peek(1) == ":":
                end = self.text.find(":]", self.at + 2)
                name = self.text[self.at + 2 : end].removeprefix("^") if end > 0 else ""
                if name not in _POSIX:
                    raise _RefusedError("uses an unknown '[:class:]'")
                self.at = end + 2
                members += 1
                continue
            if char == "[":
                raise _RefusedError("uses '[' inside a bracket class")
            if char == "\\" and self._peek(1) in _CLASS_ESCAPES:
                self.at += 2
                members += 1
                continue
            self._class_char()
            if self._peek() == "-" and self._peek(1) != "]":
                self.at += 1
                if self._peek() in ("[", "\\") and self._peek(1) in _CLASS_ESCAPES | {":"}:
                    raise _RefusedError("ends a range with a class")
                self._class_char()
            members += 1

    def _class_char(self) -> None:
        char = self._peek()
        if char == "\\":
            following = self._peek(1)
            if following in _CLASS_ESCAPES:
                raise _RefusedError("uses a class as the end of a range")
            self._escape_atom(following)
            return
        if char in "[]" or char == "":
            raise _RefusedError("has a malformed bracket class")
        if char == "-" and self._peek(1) != "]":
            raise _RefusedError("uses '-' in a bracket class other than in a range or last")
        self.at += 1
