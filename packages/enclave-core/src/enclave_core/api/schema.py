"""Markers that carry CRD-only schema facts on the pydantic models.

The models are the one source of truth for the API: pydantic enforces field types, enums and
ranges in Python, and :mod:`enclave_core.api.crdgen` turns the same models into OpenAPI schemas
for kube-apiserver. Some facts only matter to kube-apiserver (CEL rules, ``format: int32``,
list types, a field that is ``required`` although it has a default). They ride along as plain
objects in ``Annotated[...]`` metadata or in a model's ``crd`` class variable, which pydantic
keeps but ignores, so the Python side and the CRD side cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

__all__ = ["REQUIRED", "Extra", "Reason", "Required", "Rule", "TypeExtras"]

Reason: TypeAlias = Literal["FieldValueInvalid", "FieldValueForbidden", "FieldValueRequired", "FieldValueDuplicate"]
"""The reasons kube-apiserver accepts on a validation rule; they become the HTTP 422 cause type."""


@dataclass(frozen=True)
class Rule:
    """One ``x-kubernetes-validations`` entry: a CEL expression kube-apiserver evaluates.

    ``message`` is mandatory here (optional in Kubernetes) because the default message quotes the
    CEL source, which tells a user nothing about what to fix.
    """

    rule: str
    message: str
    field_path: str | None = None
    reason: Reason | None = None
    optional_old_self: bool | None = None

    def to_openapi(self) -> dict[str, Any]:
        """The rule as kube-apiserver reads it (camelCase keys, unset keys left out)."""
        out: dict[str, Any] = {"rule": self.rule, "message": self.message}
        if self.field_path is not None:
            out["fieldPath"] = self.field_path
        if self.reason is not None:
            out["reason"] = self.reason
        if self.optional_old_self is not None:
            out["optionalOldSelf"] = self.optional_old_self
        return out


class Extra:
    """Extra OpenAPI keywords for one schema node, e.g. ``Extra(format="int32")``.

    Keys use their OpenAPI spelling and win over what the generator derives from the type.
    """

    __slots__ = ("keywords",)

    def __init__(self, **keywords: Any) -> None:
        self.keywords: Mapping[str, Any] = keywords

    def __repr__(self) -> str:
        return f"Extra({', '.join(f'{k}={v!r}' for k, v in sorted(self.keywords.items()))})"


class Required:
    """Marks a field that kube-apiserver lists as ``required`` although it has a default.

    The specification calls some defaulted fields required (``cacheInvalidation``, ``rbac``...).
    kube-apiserver applies defaults before it validates, so the object a user writes may still
    omit them; the marker only makes ``kubectl explain`` and the schema say what the stored object
    always carries.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return "REQUIRED"


REQUIRED = Required()


@dataclass(frozen=True)
class TypeExtras:
    """CRD-only facts about a whole object type: rules on the object and keywords per field.

    ``fields`` maps a field's JSON name to extra keywords; it exists for types owned by other
    modules (label selectors, conditions) whose source carries no CRD markers.
    """

    rules: tuple[Rule, ...] = ()
    schema: Mapping[str, Any] = field(default_factory=dict)
    fields: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    field_rules: Mapping[str, tuple[Rule, ...]] = field(default_factory=dict)
