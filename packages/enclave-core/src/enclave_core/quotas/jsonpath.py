"""JSONPath for quota sources: usage paths (``.spec.containers[*].resources.requests.memory``) and field
selectors (boolean JSONPath), on jsonpath-ng.

Why jsonpath-ng rather than Kubernetes' own JSONPath: Kubernetes' dialect is kubectl's output template
language (``{range}``, ``{end}``, text between braces) with no maintained Python implementation, and a quota
needs only its path part, which jsonpath-ng (maintained, standard-leaning, with filter expressions) reads
the same way. Kubernetes habits are accepted as written: a ``{...}`` wrapper is dropped and a path starting
with ``.`` is read from the root (``$``).

A field selector is true when the path yields at least one value that is not ``false``, ``null``, an empty
string, list or map. Filters compare at any level (``.spec.containers[?(@.image =~ "nginx.*")]``); a filter
at the root tests the object itself (``$[?(@.spec.type == "LoadBalancer")]``).
"""

from __future__ import annotations

import functools
from typing import Any

from jsonpath_ng import JSONPath
from jsonpath_ng.exceptions import JSONPathError
from jsonpath_ng.ext.parser import parse


class JsonPathError(ValueError):
    """A path that does not compile."""


class JsonPath:
    """One compiled path."""

    __slots__ = ("_compiled", "_root_filter", "text")

    def __init__(self, text: str, compiled: JSONPath, root_filter: bool) -> None:
        self.text = text
        self._compiled = compiled
        self._root_filter = root_filter

    def values(self, obj: Any) -> list[Any]:
        """Every value the path yields on ``obj`` (in document order)."""
        return [match.value for match in self._compiled.find([obj] if self._root_filter else obj)]

    def holds(self, obj: Any) -> bool:
        """The boolean reading of a field selector (see the module doc)."""
        return any(value not in (False, None, "") and value != [] and value != {} for value in self.values(obj))


def _normalise(text: str) -> str:
    path = text.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1].strip()
    if path.startswith("."):
        path = "$" + path
    elif not path.startswith("$"):
        path = "$." + path
    return path


@functools.lru_cache(maxsize=4096)
def compile_path(text: str) -> JsonPath:
    """Compile ``text`` once per process; raise :class:`JsonPathError` with the parser's reason."""
    if not text.strip():
        raise JsonPathError("empty JSONPath")
    path = _normalise(text)
    try:
        compiled = parse(path)
    except (JSONPathError, Exception) as err:  # jsonpath-ng's lexer raises plain Exceptions too
        raise JsonPathError(f"JSONPath {text!r} does not compile: {err}") from None
    return JsonPath(text, compiled, path.startswith("$[?"))
