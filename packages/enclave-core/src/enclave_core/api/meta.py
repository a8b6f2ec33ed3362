"""The envelope every kind shares and the small types several kinds reuse.

Base classes:

* :class:`ApiModel` for everything users write (``extra="forbid"``: a typo in a controller or a
  test fails loudly instead of being dropped the way kube-apiserver prunes unknown fields);
* :class:`StatusModel` for what controllers write (``extra="ignore"``: a reader one release behind
  must not choke on a status field a newer controller added);
* :class:`KubeObject`, the ``apiVersion``/``kind``/``metadata`` envelope, with :meth:`to_k8s`.

Shared types: Entity, ValueMatcher, ScopeSelector, ObjectRef; LabelSelector and Condition come
from :mod:`enclave_core.selectors` and :mod:`enclave_core.conditions`, and
:data:`EXTERNAL_EXTRAS` adds what kube-apiserver needs to validate them.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, Final, Literal, TypeAlias

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from enclave_core.api.schema import Extra, Rule, TypeExtras
from enclave_core.conditions import Condition
from enclave_core.resourcequota import ScopeName
from enclave_core.selectors import LabelSelector, LabelSelectorRequirement

__all__ = [
    "DNS1123_LABEL",
    "DNS1123_SUBDOMAIN",
    "EXTERNAL_EXTRAS",
    "ApiModel",
    "Condition",
    "Count",
    "Duration",
    "Entity",
    "EntityKind",
    "Generation",
    "Int32",
    "Int64",
    "KubeObject",
    "LabelSelector",
    "LabelSelectorRequirement",
    "Name",
    "ObjectMeta",
    "ObjectRef",
    "Port",
    "ScopeSelector",
    "ScopedResourceSelectorRequirement",
    "SelectorOperator",
    "StatusModel",
    "ValueMatcher",
]

DNS1123_LABEL: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS1123_SUBDOMAIN: Final = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
GO_DURATION: Final = r"^(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)$"

Int32 = Annotated[int, Extra(format="int32")]
Int64 = Annotated[int, Extra(format="int64")]
Count = Annotated[int, Field(ge=0), Extra(format="int32")]
"""A number of things (namespaces, claims, items)."""
Generation = Annotated[int, Field(ge=0), Extra(format="int64")]
"""A ``metadata.generation`` value."""
Port = Annotated[int, Field(ge=1, le=65535), Extra(format="int32")]
Name = Annotated[str, Field(min_length=1, max_length=253)]
"""A Kubernetes object name or similar identifier; bounded so CEL rules that read it stay cheap."""
Duration = Annotated[str, Field(pattern=GO_DURATION, max_length=64)]
"""A Go duration (``90s``, ``1h30m``), the grammar of :func:`enclave_core.durations.parse_duration`."""

SelectorOperator: TypeAlias = Literal["In", "NotIn", "Exists", "DoesNotExist"]
EntityKind: TypeAlias = Literal["User", "Group", "ServiceAccount"]


class ApiModel(BaseModel):
    """Base of every type a user writes: camelCase on the wire, snake_case in Python."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_attribute_docstrings=True,
    )
    crd: ClassVar[TypeExtras] = TypeExtras()

    def to_k8s(self) -> dict[str, Any]:
        """The JSON form kube-apiserver stores: camelCase keys, unset (``None``) fields left out."""
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class StatusModel(ApiModel):
    """Base of status types: unknown fields are ignored rather than refused (see module doc)."""

    model_config = ConfigDict(extra="ignore")


class ObjectMeta(BaseModel):
    """Standard object metadata, typed where Enclave reads it and open for everything else.

    ``extra="allow"`` because kube-apiserver returns fields this model need not know (and may add
    new ones); dropping them would make a read-modify-write lose data.
    """

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow")

    name: str | None = None
    generate_name: str | None = None
    namespace: str | None = None
    labels: dict[str, str] | None = None
    annotations: dict[str, str] | None = None
    uid: str | None = None
    resource_version: str | None = None
    generation: int | None = None
    creation_timestamp: str | None = None
    deletion_timestamp: str | None = None
    deletion_grace_period_seconds: int | None = None
    finalizers: list[str] | None = None
    owner_references: list[dict[str, Any]] | None = None
    managed_fields: list[dict[str, Any]] | None = None


class KubeObject(ApiModel):
    """The envelope: ``apiVersion``, ``kind``, ``metadata``; subclasses add ``spec`` and ``status``."""

    api_version: Literal["enclave.dev/v1beta2"] = "enclave.dev/v1beta2"
    """Always `enclave.dev/v1beta2`."""
    kind: str
    """The kind name."""
    metadata: ObjectMeta = Field(default_factory=ObjectMeta)
    """Standard object metadata."""


def _values_rules(what: str) -> tuple[Rule, ...]:
    """The operator/values consistency rules shared by label and scope selector requirements."""
    return (
        Rule(
            rule="!(self.operator in ['In', 'NotIn']) || (has(self.values) && size(self.values) > 0)",
            message=f"{what}: values must be non-empty when operator is In or NotIn",
            field_path=".values",
            reason="FieldValueRequired",
        ),
        Rule(
            rule="!(self.operator in ['Exists', 'DoesNotExist']) || !has(self.values) || size(self.values) == 0",
            message=f"{what}: values must be empty when operator is Exists or DoesNotExist",
            field_path=".values",
            reason="FieldValueForbidden",
        ),
    )


class Entity(ApiModel):
    """A request subject: a user, a group or a service account (``system:serviceaccount:<ns>:<name>``)."""

    kind: EntityKind
    """User, Group or ServiceAccount."""
    name: Annotated[str, Field(min_length=1, max_length=512)]
    """User name, group name, or service account name in the form `system:serviceaccount:<namespace>:<name>`."""


class ValueMatcher(ApiModel):
    """Matches a string value: against a list of exact values, a regular expression, or both."""

    crd: ClassVar[TypeExtras] = TypeExtras(
        rules=(
            Rule(
                rule="(has(self.exact) && size(self.exact) > 0) || (has(self.exp) && size(self.exp) > 0)",
                message="at least one of exact or exp must be set",
                reason="FieldValueRequired",
            ),
        )
    )

    exact: Annotated[list[Annotated[str, Field(max_length=512)]] | None, Field(max_length=256)] = None
    """Matches when the value equals one of these exactly."""
    exp: Annotated[str | None, Field(max_length=1024)] = None
    """Regular expression (RE2 syntax) the whole value must match."""
    negate: bool = False
    """Negates the regular expression: the value matches when `exp` does not."""


class ScopedResourceSelectorRequirement(ApiModel):
    """One requirement of a native quota scope selector."""

    crd: ClassVar[TypeExtras] = TypeExtras(rules=_values_rules("scopeSelector"))

    operator: SelectorOperator
    """In, NotIn, Exists or DoesNotExist."""
    scope_name: ScopeName
    """The quota scope: Terminating, NotTerminating, BestEffort, NotBestEffort, PriorityClass,
    CrossNamespacePodAffinity or VolumeAttributesClass."""
    values: Annotated[list[str] | None, Field(max_length=64)] = None
    """Non-empty for In and NotIn, empty for Exists and DoesNotExist."""


class ScopeSelector(ApiModel):
    """Native quota scope selector; requirements are ANDed."""

    match_expressions: Annotated[list[ScopedResourceSelectorRequirement] | None, Field(max_length=16)] = None
    """Scope requirements, all of which must hold."""


class ObjectRef(ApiModel):
    """A reference to one tracked object."""

    api_version: Annotated[str, Field(min_length=1, max_length=316)]
    """API version of the object, e.g. `v1` or `apps/v1`."""
    kind: Annotated[str, Field(min_length=1, max_length=63)]
    """Kind of the object."""
    api_group: Annotated[str | None, Field(max_length=253)] = None
    """API group of the object; empty for the core group."""
    name: Annotated[str | None, Field(max_length=253)] = None
    """Name of the object; may be empty while a CREATE with generateName is admitted."""
    namespace: Annotated[str | None, Field(max_length=63)] = None
    """Namespace of the object; empty for cluster-scoped objects."""
    uid: Annotated[str | None, Field(max_length=64)] = None
    """UID of the object; may be empty on CREATE."""


_LABEL_KEY: Final = {"maxLength": 317}

EXTERNAL_EXTRAS: Final[dict[type[BaseModel], TypeExtras]] = {
    LabelSelector: TypeExtras(
        schema={"description": "Label selector: matchLabels and matchExpressions ANDed; empty matches everything."},
        fields={
            "matchLabels": {"maxProperties": 64, "additionalProperties": {"type": "string", "maxLength": 63}},
            "matchExpressions": {"maxItems": 64},
        },
    ),
    LabelSelectorRequirement: TypeExtras(
        rules=_values_rules("matchExpressions"),
        schema={"description": "A label requirement: key, operator (In, NotIn, Exists, DoesNotExist), values."},
        fields={"key": {"minLength": 1, **_LABEL_KEY}, "values": {"maxItems": 256}},
    ),
    Condition: TypeExtras(
        schema={"description": "A status condition (type, status, reason, message, lastTransitionTime)."},
        fields={"observedGeneration": {"format": "int64"}, "lastTransitionTime": {"format": "date-time"}},
    ),
}
"""CRD-only facts for shared models owned by other modules, keyed by class."""
