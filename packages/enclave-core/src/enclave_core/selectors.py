"""Kubernetes label selectors: the model, validation, matching and the list/watch query string.

Tenants, quotas, pools and rules all pick namespaces and objects with ``metav1.LabelSelector``.
Getting the edge cases wrong silently widens or narrows a policy, so the semantics here are the
API server's, spelled out once:

* ``matchLabels`` pairs and ``matchExpressions`` requirements are ANDed; each pair is an ``In``
  with one value;
* ``NotIn`` and ``DoesNotExist`` match objects that do not have the key at all;
* an empty selector (``{}``) matches everything, a null selector (``None``) matches nothing;
* a list of selectors is ORed (:func:`matches_any`), so an empty list matches nothing.

Every function accepts either the :class:`LabelSelector` model or the plain dict found in a raw
Kubernetes object (``{"matchLabels": ..., "matchExpressions": [...]}``); dicts are validated with
the model first, so bad input fails the same way on both paths.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

__all__ = [
    "LabelSelector",
    "LabelSelectorRequirement",
    "Operator",
    "SelectorLike",
    "as_selector",
    "is_empty",
    "matches",
    "matches_any",
    "to_label_query",
    "validate_label_key",
    "validate_label_value",
]

Operator: TypeAlias = Literal["In", "NotIn", "Exists", "DoesNotExist"]
"""The label-selector operators (``Gt``/``Lt`` exist only for node selectors, not here)."""

_NAME_RE: Final = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_SUBDOMAIN_RE: Final = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def validate_label_key(key: str) -> str:
    """Check a label key is a Kubernetes qualified name (``[prefix/]name``); return it unchanged.

    Raises ``ValueError`` saying which part is wrong, because the API server's own message for a
    selector with a bad key is easy to miss inside a long object.
    """
    prefix, slash, name = key.rpartition("/")
    if slash:
        if not prefix:
            raise ValueError(f"label key {key!r}: prefix before '/' must not be empty")
        if len(prefix) > 253 or not _DNS_SUBDOMAIN_RE.fullmatch(prefix):
            raise ValueError(
                f"label key {key!r}: prefix {prefix!r} must be a DNS subdomain "
                "(lowercase letters, digits, '-' and '.', at most 253 characters)"
            )
    if not name:
        raise ValueError(f"label key {key!r}: name part must not be empty")
    if len(name) > 63 or not _NAME_RE.fullmatch(name):
        raise ValueError(
            f"label key {key!r}: name {name!r} must be at most 63 characters of letters, digits, "
            "'-', '_' or '.', beginning and ending with a letter or digit"
        )
    return key


def validate_label_value(value: str) -> str:
    """Check a label value (empty, or at most 63 name characters); return it unchanged."""
    if value and (len(value) > 63 or not _NAME_RE.fullmatch(value)):
        raise ValueError(
            f"label value {value!r} must be empty or at most 63 characters of letters, digits, "
            "'-', '_' or '.', beginning and ending with a letter or digit"
        )
    return value


class LabelSelectorRequirement(BaseModel):
    """One ``matchExpressions`` entry: ``key`` ``operator`` ``values``.

    ``values`` must be non-empty for ``In``/``NotIn`` and empty (or absent) for
    ``Exists``/``DoesNotExist``, the same rule the API server applies.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    key: str = Field(description="The label key the requirement applies to.")
    operator: Operator = Field(
        description="How the key's value relates to `values`: In, NotIn, Exists or DoesNotExist."
    )
    values: list[str] | None = Field(
        default=None,
        description="Label values; non-empty for In and NotIn, empty for Exists and DoesNotExist.",
    )

    @field_validator("key")
    @classmethod
    def _check_key(cls, key: str) -> str:
        return validate_label_key(key)

    @field_validator("values")
    @classmethod
    def _check_values(cls, values: list[str] | None) -> list[str] | None:
        for value in values or ():
            validate_label_value(value)
        return values

    @model_validator(mode="after")
    def _check_operator_values(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"values must be non-empty when operator is {self.operator} (key {self.key!r})")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"values must be empty when operator is {self.operator} (key {self.key!r})")
        return self

    def matches(self, labels: Mapping[str, str]) -> bool:
        """Whether ``labels`` satisfy this one requirement."""
        present = self.key in labels
        if self.operator == "Exists":
            return present
        if self.operator == "DoesNotExist":
            return not present
        inside = present and labels[self.key] in (self.values or ())
        return inside if self.operator == "In" else not inside


class LabelSelector(BaseModel):
    """``metav1.LabelSelector``. Empty matches everything; use ``None`` for "matches nothing"."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    match_labels: dict[str, str] | None = Field(
        default=None,
        alias="matchLabels",
        description="Label pairs that must all be present; each is an In requirement with one value.",
    )
    match_expressions: list[LabelSelectorRequirement] | None = Field(
        default=None,
        alias="matchExpressions",
        description="Requirements that must all hold.",
    )

    @field_validator("match_labels")
    @classmethod
    def _check_labels(cls, labels: dict[str, str] | None) -> dict[str, str] | None:
        for key, value in (labels or {}).items():
            validate_label_key(key)
            validate_label_value(value)
        return labels

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        """Whether an object with ``labels`` is selected (all requirements ANDed)."""
        labels = labels or {}
        for key, value in (self.match_labels or {}).items():
            if labels.get(key) != value:
                return False
        return all(requirement.matches(labels) for requirement in self.match_expressions or ())

    @property
    def is_empty(self) -> bool:
        """True when the selector has no requirement at all and therefore selects everything."""
        return not self.match_labels and not self.match_expressions


SelectorLike: TypeAlias = LabelSelector | Mapping[str, Any]
"""A selector as the model or as the plain dict of a raw Kubernetes object."""


def as_selector(selector: SelectorLike) -> LabelSelector:
    """Return the model for a model or a raw dict (validating the dict: raises ``ValueError``)."""
    if isinstance(selector, LabelSelector):
        return selector
    return LabelSelector.model_validate(selector)


def is_empty(selector: SelectorLike | None) -> bool:
    """True for a non-null selector without requirements (it selects everything)."""
    return selector is not None and as_selector(selector).is_empty


def matches(selector: SelectorLike | None, labels: Mapping[str, str] | None) -> bool:
    """Whether ``selector`` selects an object with ``labels``; a null selector selects nothing."""
    if selector is None:
        return False
    return as_selector(selector).matches(labels)


def matches_any(selectors: Iterable[SelectorLike | None] | None, labels: Mapping[str, str] | None) -> bool:
    """ORed selectors, as in ``namespaceSelectors[]``: true if any one matches (false if none given)."""
    return any(matches(selector, labels) for selector in selectors or ())


def to_label_query(selector: SelectorLike | None) -> str:
    """Render a selector as the ``labelSelector`` query parameter of a list or watch call.

    Requirements are sorted by key so equal selectors give equal strings (useful as cache keys).
    An empty selector gives ``""``, which lists everything, exactly its meaning. A null selector
    matches nothing, which no query string can say, so it raises ``ValueError``: skip the call.
    Several ORed selectors cannot be one query either; issue one call per selector.
    """
    if selector is None:
        raise ValueError("a null label selector matches nothing and has no query string; skip the list call")
    model = as_selector(selector)
    parts: list[tuple[str, str]] = [(key, f"{key}={value}") for key, value in (model.match_labels or {}).items()]
    for requirement in model.match_expressions or ():
        key, values = requirement.key, ",".join(sorted(set(requirement.values or ())))
        if requirement.operator == "In":
            parts.append((key, f"{key} in ({values})"))
        elif requirement.operator == "NotIn":
            parts.append((key, f"{key} notin ({values})"))
        elif requirement.operator == "Exists":
            parts.append((key, key))
        else:
            parts.append((key, f"!{key}"))
    parts.sort(key=lambda part: part[0])
    return ",".join(text for _, text in parts)
