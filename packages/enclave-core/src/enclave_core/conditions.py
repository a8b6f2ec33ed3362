"""Status conditions (``metav1.Condition`` shape) and the pure helpers that maintain them.

Every Enclave kind reports ``status.conditions``. Users and tools (``kubectl wait``, Argo CD,
alerting) read ``lastTransitionTime`` as "how long has it been like this", so a reconciler that
rewrites the timestamp on every pass destroys the one fact the field carries and also causes a
status write per reconcile. :func:`set_condition` therefore keeps the time unless the status
itself changes. The helpers never mutate their input and never read the clock: the caller passes
``now``, which keeps reconcilers testable with a fake clock.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Annotated, Any, Final, Literal, TypeAlias

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_serializer, field_validator
from pydantic.json_schema import WithJsonSchema

__all__ = [
    "Condition",
    "ConditionStatus",
    "ConditionType",
    "Reason",
    "format_time",
    "get_condition",
    "is_true",
    "new_condition",
    "read_conditions",
    "remove_condition",
    "set_condition",
]

ConditionStatus: TypeAlias = Literal["True", "False", "Unknown"]

_CAMEL: Final = r"[A-Z][A-Za-z0-9]*"
_DNS_SUBDOMAIN: Final = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
TYPE_PATTERN: Final = rf"^({_DNS_SUBDOMAIN}/)?{_CAMEL}$"
REASON_PATTERN: Final = rf"^{_CAMEL}$"
TYPE_MAX_LENGTH: Final = 316  # 253 (DNS subdomain) + "/" + 62, as metav1.Condition
REASON_MAX_LENGTH: Final = 1024
MESSAGE_MAX_LENGTH: Final = 32768


def _check_type(value: str) -> str:
    """Condition types are CamelCase, optionally prefixed by a DNS subdomain (``example.com/Ready``)."""
    if len(value) > TYPE_MAX_LENGTH or not re.fullmatch(TYPE_PATTERN, value):
        raise ValueError(
            f"condition type {value!r} must be CamelCase (e.g. 'Ready') or '<dns-subdomain>/CamelCase' "
            f"(e.g. 'enclave.dev/Cordoned'), at most {TYPE_MAX_LENGTH} characters"
        )
    prefix, _, _ = value.rpartition("/")
    if len(prefix) > 253:
        raise ValueError(f"condition type {value!r}: prefix is longer than 253 characters")
    return value


def _check_reason(value: str) -> str:
    """Reasons are non-empty CamelCase identifiers meant for programs, not prose."""
    if len(value) > REASON_MAX_LENGTH or not re.fullmatch(REASON_PATTERN, value):
        raise ValueError(
            f"condition reason {value!r} must be a non-empty CamelCase identifier (e.g. 'QuotaExceeded'), "
            f"at most {REASON_MAX_LENGTH} characters"
        )
    return value


# The JSON schema carries the same rules so the CRD generator puts them in the OpenAPI schema,
# while Python validation raises the friendlier messages above.
ConditionType = Annotated[
    str,
    AfterValidator(_check_type),
    WithJsonSchema({"type": "string", "pattern": TYPE_PATTERN, "maxLength": TYPE_MAX_LENGTH}),
]
Reason = Annotated[
    str,
    AfterValidator(_check_reason),
    WithJsonSchema({"type": "string", "pattern": REASON_PATTERN, "minLength": 1, "maxLength": REASON_MAX_LENGTH}),
]


def format_time(value: datetime) -> str:
    """RFC 3339 in UTC with a ``Z`` and whole seconds, the form ``metav1.Time`` serialises to."""
    return _normalise_time(value).strftime("%Y-%m-%dT%H:%M:%SZ")


def _normalise_time(value: datetime) -> datetime:
    """UTC, second precision; a naive datetime is taken to be UTC already."""
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).replace(microsecond=0)


class Condition(BaseModel):
    """One entry of ``status.conditions``.

    ``lastTransitionTime`` accepts an RFC 3339 string or a ``datetime``; it is held as an aware
    UTC ``datetime`` truncated to seconds (what the API server stores, so a condition read back
    compares equal) and always serialised as ``YYYY-MM-DDTHH:MM:SSZ``.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    type: ConditionType = Field(description="Condition type, CamelCase or `<dns-subdomain>/CamelCase`.")
    status: ConditionStatus = Field(description="True, False or Unknown.")
    reason: Reason = Field(description="CamelCase programmatic identifier of the cause of the last transition.")
    message: str = Field(max_length=MESSAGE_MAX_LENGTH, description="Human-readable details; may be empty.")
    last_transition_time: datetime = Field(
        alias="lastTransitionTime", description="When the condition last changed status (RFC 3339)."
    )
    observed_generation: int | None = Field(
        default=None,
        alias="observedGeneration",
        ge=0,
        description="metadata.generation the condition was computed from; lower means out of date.",
    )

    @field_validator("last_transition_time", mode="after")
    @classmethod
    def _normalise(cls, value: datetime) -> datetime:
        return _normalise_time(value)

    @field_serializer("last_transition_time", when_used="always")
    def _serialise_time(self, value: datetime) -> str:
        return format_time(value)


def new_condition(
    type: str,
    status: ConditionStatus,
    reason: str,
    message: str = "",
    *,
    now: datetime,
    observed_generation: int | None = None,
) -> Condition:
    """Build a condition with snake_case keywords (a convenience for reconcilers)."""
    return Condition(
        type=type,
        status=status,
        reason=reason,
        message=message,
        last_transition_time=now,
        observed_generation=observed_generation,
    )


def set_condition(
    conditions: Sequence[Condition] | None, new: Condition, now: datetime | None = None
) -> list[Condition]:
    """Return ``conditions`` with ``new`` applied, leaving the input untouched.

    * A condition of the same type is replaced in place (order stays stable); otherwise ``new``
      is appended.
    * If the status is unchanged, the existing ``lastTransitionTime`` is kept while reason,
      message and observedGeneration are updated.
    * If the status changed (or the type is new), the transition time is ``now`` when given,
      else ``new.lastTransitionTime``.

    When nothing changes, the result compares equal to the input, so a reconciler can skip the
    status write with ``if updated != current``.
    """
    result = list(conditions or ())
    for index, existing in enumerate(result):
        if existing.type != new.type:
            continue
        if existing.status == new.status:
            transition = existing.last_transition_time
        else:
            transition = now if now is not None else new.last_transition_time
        result[index] = _with_time(new, transition)
        return result
    result.append(_with_time(new, now if now is not None else new.last_transition_time))
    return result


def _with_time(condition: Condition, when: datetime) -> Condition:
    normalised = _normalise_time(when)
    if condition.last_transition_time == normalised:
        return condition
    return condition.model_copy(update={"last_transition_time": normalised})


def remove_condition(conditions: Sequence[Condition] | None, type: str) -> list[Condition]:
    """Return ``conditions`` without the condition of ``type`` (unchanged if absent)."""
    return [condition for condition in conditions or () if condition.type != type]


def get_condition(conditions: Sequence[Condition] | None, type: str) -> Condition | None:
    """The condition of ``type``, or ``None``."""
    return next((condition for condition in conditions or () if condition.type == type), None)


def is_true(conditions: Sequence[Condition] | None, type: str) -> bool:
    """True only when the condition exists with status ``True`` (absent or Unknown is not true)."""
    condition = get_condition(conditions, type)
    return condition is not None and condition.status == "True"


def read_conditions(obj: Mapping[str, Any]) -> list[Condition]:
    """The ``status.conditions`` of a raw object; an entry that does not parse (hand-edited) is skipped, so a
    reconciler replaces it instead of failing on it."""
    conditions = []
    for item in (obj.get("status") or {}).get("conditions") or []:
        try:
            conditions.append(Condition.model_validate(item))
        except ValueError:
            continue
    return conditions
