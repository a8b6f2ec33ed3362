"""Tables and colours: colour only when writing to a terminal (and never with ``NO_COLOR``)."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import TextIO

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class Style:
    colour: bool

    @classmethod
    def for_stream(cls, stream: TextIO = sys.stdout) -> Style:
        return cls(stream.isatty() and not os.environ.get("NO_COLOR"))

    def _wrap(self, code: str, text: str) -> str:
        return f"\x1b[{code}m{text}\x1b[0m" if self.colour and text else text

    def red(self, text: str) -> str:
        return self._wrap("31", text)

    def green(self, text: str) -> str:
        return self._wrap("32", text)

    def yellow(self, text: str) -> str:
        return self._wrap("33", text)

    def bold(self, text: str) -> str:
        return self._wrap("1", text)

    def dim(self, text: str) -> str:
        return self._wrap("2", text)


def _width(text: str) -> int:
    return len(_ANSI.sub("", text))


def table(headers: list[str], rows: list[list[str]]) -> str:
    """Left-aligned columns separated by two spaces (``kubectl get`` style); the last column is not padded."""
    widths = [len(h) for h in headers]
    for row in rows:
        for position, cell in enumerate(row[:-1]):
            widths[position] = max(widths[position], _width(cell))
    lines = []
    for row in [headers, *rows]:
        cells = [cell + " " * (widths[i] - _width(cell)) for i, cell in enumerate(row[:-1])]
        lines.append("  ".join([*cells, row[-1]]).rstrip())
    return "\n".join(lines)
