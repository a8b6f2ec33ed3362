"""Label and field selectors of a list or watch query, parsed and matched as kube-apiserver does.

The proxy answers tenant users' namespace lists from memory, so ``kubectl get ns -l team=a`` and
``--field-selector metadata.name=x`` must keep their meaning: the string forms of ``labels.Parse`` and
``fields.ParseSelector`` are parsed here without regular expressions (a selector is caller input: parsing is
one pass over at most :data:`MAX_SELECTOR` characters).

Label selector terms, comma-separated and ANDed: ``k=v``, ``k==v``, ``k!=v``, ``k in (a,b)``, ``k notin (a)``,
``k`` (exists), ``!k`` (does not exist), ``k>n``, ``k<n`` (integers). Field selector terms: ``f=v``, ``f==v``,
``f!=v`` on the fields the kind supports (namespaces: ``metadata.name``, ``status.phase``; nodes:
``metadata.name``, ``spec.unschedulable``; the other kinds: ``metadata.name``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

MAX_SELECTOR = 4096
"""Characters a selector may have; longer ones are refused (kube-apiserver has no such limit, but a query
string of that length is not a real kubectl's)."""


class SelectorError(ValueError):
    """A selector that does not parse: answered 400 BadRequest with this message."""


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str
    """``=``, ``!=``, ``in``, ``notin``, ``exists``, ``!``, ``>``, ``<``."""
    values: tuple[str, ...] = ()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        value = labels.get(self.key, "")
        if self.operator in ("=", "in"):
            return present and value in self.values
        if self.operator in ("!=", "notin"):
            return not present or value not in self.values
        if self.operator == "exists":
            return present
        if self.operator == "!":
            return not present
        if not present:
            return False
        try:
            have, bound = int(value), int(self.values[0])
        except ValueError:
            return False
        return have > bound if self.operator == ">" else have < bound


def _split_terms(text: str) -> list[str]:
    """Split at commas outside parentheses (``a in (x,y),b`` is two terms)."""
    terms: list[str] = []
    depth, start = 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
            if depth > 1:
                raise SelectorError(f"nested parentheses in {text!r}")
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced parentheses in {text!r}")
        elif char == "," and depth == 0:
            terms.append(text[start:index])
            start = index + 1
    if depth:
        raise SelectorError(f"unbalanced parentheses in {text!r}")
    terms.append(text[start:])
    return terms


def _key(raw: str, term: str) -> str:
    key = raw.strip()
    if not key or any(char.isspace() or char in "!=<>()," for char in key):
        raise SelectorError(f"invalid key {key!r} in {term!r}")
    return key


def _value(raw: str, term: str) -> str:
    value = raw.strip()
    if any(char.isspace() or char in "!=<>()," for char in value):
        raise SelectorError(f"invalid value {value!r} in {term!r}")
    return value


def _term(term: str) -> Requirement:
    text = term.strip()
    if not text:
        raise SelectorError("empty requirement")
    if "(" in text:
        head, _, rest = text.partition("(")
        if not rest.endswith(")"):
            raise SelectorError(f"a set requirement ends with ')': {term!r}")
        words = head.split()
        if len(words) != 2 or words[1] not in ("in", "notin"):
            raise SelectorError(f"expected '<key> in (...)' or '<key> notin (...)': {term!r}")
        values = tuple(_value(v, term) for v in rest[:-1].split(","))
        return Requirement(_key(words[0], term), words[1], values)
    if text.startswith("!"):
        return Requirement(_key(text[1:], term), "!")
    for operator, canonical in (("!=", "!="), ("==", "="), ("=", "="), (">", ">"), ("<", "<")):
        if operator in text:
            key, _, value = text.partition(operator)
            parsed = _value(value, term)
            if canonical in (">", "<") and not parsed.lstrip("-").isdigit():
                raise SelectorError(f"{canonical} needs an integer: {term!r}")
            return Requirement(_key(key, term), canonical, (parsed,))
    return Requirement(_key(text, term), "exists")


def parse_labels(text: str) -> tuple[Requirement, ...]:
    """``labelSelector`` of a query; empty matches everything."""
    if len(text) > MAX_SELECTOR:
        raise SelectorError(f"labelSelector longer than {MAX_SELECTOR} characters")
    if not text.strip():
        return ()
    return tuple(_term(term) for term in _split_terms(text))


FieldGetter = Callable[[dict[str, Any]], str]

NAMESPACE_FIELDS: dict[str, FieldGetter] = {
    "metadata.name": lambda obj: str((obj.get("metadata") or {}).get("name") or ""),
    "status.phase": lambda obj: str((obj.get("status") or {}).get("phase") or ""),
}
"""The field selectors kube-apiserver supports on namespaces (``metadata.namespace`` is always empty there)."""

NODE_FIELDS: dict[str, FieldGetter] = {
    "metadata.name": lambda obj: str((obj.get("metadata") or {}).get("name") or ""),
    "spec.unschedulable": lambda obj: "true" if (obj.get("spec") or {}).get("unschedulable") else "false",
}
"""The field selectors kube-apiserver supports on nodes."""


NAME_FIELDS: dict[str, FieldGetter] = {"metadata.name": NAMESPACE_FIELDS["metadata.name"]}
"""The field selector kube-apiserver supports on every other kind the proxy answers (classes, PersistentVolumes,
a CRD's objects)."""


@dataclass(frozen=True)
class FieldRequirement:
    field: str
    equal: bool
    value: str


def parse_fields(text: str, supported: Mapping[str, FieldGetter]) -> tuple[FieldRequirement, ...]:
    """``fieldSelector`` of a query, refused with kube-apiserver's wording for a field the kind lacks."""
    if len(text) > MAX_SELECTOR:
        raise SelectorError(f"fieldSelector longer than {MAX_SELECTOR} characters")
    if not text.strip():
        return ()
    parsed: list[FieldRequirement] = []
    for term in text.split(","):
        for operator, equal in (("!=", False), ("==", True), ("=", True)):
            if operator in term:
                field, _, value = term.partition(operator)
                field = field.strip()
                if field not in supported and field != "metadata.namespace":
                    raise SelectorError(f"field label not supported: {field}")
                parsed.append(FieldRequirement(field, equal, value.strip()))
                break
        else:
            raise SelectorError(f"invalid field selector term {term!r}: want field=value or field!=value")
    return tuple(parsed)


@dataclass(frozen=True)
class Selection:
    """A query's label and field selectors together."""

    labels: tuple[Requirement, ...] = ()
    fields: tuple[FieldRequirement, ...] = ()
    supported: Mapping[str, FieldGetter] | None = None

    def matches(self, obj: dict[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        if not all(requirement.matches(labels) for requirement in self.labels):
            return False
        for requirement in self.fields:
            getter = (self.supported or {}).get(requirement.field)
            have = getter(obj) if getter is not None else ""
            if (have == requirement.value) != requirement.equal:
                return False
        return True


def selection(query: Mapping[str, str], supported: Mapping[str, FieldGetter]) -> Selection:
    """The :class:`Selection` of a request's query parameters."""
    return Selection(
        parse_labels(query.get("labelSelector", "")),
        parse_fields(query.get("fieldSelector", ""), supported),
        supported,
    )
