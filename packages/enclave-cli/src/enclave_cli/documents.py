"""YAML files as documents that remember where every field came from.

Every error the command line prints names a file and a line; a traceback is never an answer. The loader
composes each document once, keeps the line of every mapping key and sequence item by its path, and builds
plain Python data from the same nodes.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

JSON = dict[str, Any]
Loc = tuple[str | int, ...]


class InputError(Exception):
    """Bad input, reported as one line ``file:line: message`` with exit code 2."""

    def __init__(self, message: str, path: Path | str | None = None, line: int = 0) -> None:
        super().__init__(message)
        self.message = message
        self.path = str(path) if path is not None else ""
        self.line = line

    def __str__(self) -> str:
        if not self.path:
            return self.message
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"


@dataclass
class Document:
    """One YAML document of a file: its data, its first line and the line of every field."""

    path: Path
    line: int
    data: Any
    lines: dict[Loc, int] = field(default_factory=dict)

    def line_of(self, loc: Sequence[str | int]) -> int:
        """The line of the deepest known prefix of ``loc`` (pydantic error locations go deeper than YAML)."""
        key = tuple(loc)
        while key:
            found = self.lines.get(key)
            if found is not None:
                return found
            key = key[:-1]
        return self.line

    def error(self, message: str, loc: Sequence[str | int] = ()) -> InputError:
        return InputError(message, self.path, self.line_of(loc))

    @property
    def kind(self) -> str:
        return str(self.data.get("kind") or "") if isinstance(self.data, dict) else ""

    @property
    def name(self) -> str:
        meta = self.data.get("metadata") if isinstance(self.data, dict) else None
        return str((meta or {}).get("name") or "") if isinstance(meta, dict) else ""


def _index(node: yaml.Node, loc: Loc, lines: dict[Loc, int]) -> None:
    lines[loc] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            here = (*loc, str(key.value))
            _index(value, here, lines)
            lines[here] = key.start_mark.line + 1
    elif isinstance(node, yaml.SequenceNode):
        for position, item in enumerate(node.value):
            _index(item, (*loc, position), lines)


def load(path: Path) -> list[Document]:
    """Every non-empty document of ``path``; a ``List`` is split into its items."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise InputError(err.strerror or str(err), path) from None
    except UnicodeDecodeError as err:
        raise InputError(f"not UTF-8 text: {err.reason}", path) from None
    loader = yaml.SafeLoader(text)
    documents: list[Document] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            lines: dict[Loc, int] = {}
            _index(node, (), lines)
            data = loader.construct_document(node)
            if data is None:
                continue
            documents.append(Document(path, node.start_mark.line + 1, data, lines))
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        line = mark.line + 1 if mark is not None else 0
        raise InputError(f"malformed YAML: {err.problem or err.context}", path, line) from None
    except yaml.YAMLError as err:
        raise InputError(f"malformed YAML: {err}", path) from None
    finally:
        loader.dispose()
    return list(_split_lists(documents))


def _split_lists(documents: Iterable[Document]) -> Iterator[Document]:
    for document in documents:
        if not isinstance(document.data, dict):
            raise document.error("expected a mapping (an object with apiVersion and kind)")
        if document.kind.endswith("List") and isinstance(document.data.get("items"), list):
            for position, item in enumerate(document.data["items"]):
                prefix = ("items", position)
                lines = {loc[2:]: line for loc, line in document.lines.items() if loc[:2] == prefix}
                yield Document(document.path, document.line_of(prefix), item, lines)
            continue
        yield document


def files(paths: Iterable[Path]) -> list[Path]:
    """The YAML files of ``paths``: files as given, directories walked (sorted, so runs are repeatable)."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found += sorted(p for p in path.rglob("*") if p.suffix in (".yaml", ".yml") and p.is_file())
        elif path.exists():
            found.append(path)
        else:
            raise InputError("no such file or directory", path)
    return found
