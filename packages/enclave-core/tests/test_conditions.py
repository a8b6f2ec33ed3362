"""Condition model validation and the set/get helpers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from enclave_core.conditions import (
    Condition,
    ConditionStatus,
    format_time,
    get_condition,
    is_true,
    new_condition,
    remove_condition,
    set_condition,
)

T0 = datetime(2024, 5, 1, 12, 0, 0, tzinfo=UTC)
T1 = T0 + timedelta(minutes=5)


def cond(type_: str = "Ready", status: ConditionStatus = "True", reason: str = "Reconciled", *,
         message: str = "", at: datetime = T0, generation: int | None = None) -> Condition:  # fmt: skip
    return new_condition(type_, status, reason, message, now=at, observed_generation=generation)


def raw(**override: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "type": "Ready",
        "status": "True",
        "reason": "Reconciled",
        "message": "",
        "lastTransitionTime": "2024-05-01T12:00:00Z",
    }
    data.update(override)
    return data


def test_roundtrip_and_time_format() -> None:
    c = Condition.model_validate(raw(lastTransitionTime="2024-05-01T14:00:00.75+02:00", observedGeneration=3))
    assert c.last_transition_time == T0
    dumped = c.model_dump(by_alias=True, exclude_none=True)
    assert dumped == raw(observedGeneration=3)
    assert Condition.model_validate_json(c.model_dump_json(by_alias=True)) == c
    assert format_time(datetime(2024, 5, 1, 12, 0, 0, 999)) == "2024-05-01T12:00:00Z"  # naive = UTC
    assert format_time(datetime(2024, 5, 1, 9, 0, tzinfo=timezone(timedelta(hours=-3)))) == "2024-05-01T12:00:00Z"


@pytest.mark.parametrize("type_", ["Ready", "Cordoned", "enclave.dev/Ready", "a.b-c.d/QuotaExceeded", "X1"])
def test_valid_types(type_: str) -> None:
    assert Condition.model_validate(raw(type=type_)).type == type_


INVALID: list[tuple[dict[str, Any], str, str]] = [
    ({"type": "ready"}, "type", "must be CamelCase"),
    ({"type": ""}, "type", "must be CamelCase"),
    ({"type": "Enclave.dev/Ready"}, "type", "dns-subdomain"),
    ({"type": "enclave.dev/"}, "type", "CamelCase"),
    ({"type": "Not Ready"}, "type", "CamelCase"),
    ({"type": "a" * 254 + "/Ready"}, "type", "prefix is longer than 253"),
    ({"status": "true"}, "status", "'True', 'False' or 'Unknown'"),
    ({"reason": ""}, "reason", "non-empty CamelCase"),
    ({"reason": "quota exceeded"}, "reason", "non-empty CamelCase"),
    ({"reason": "Quota_Exceeded"}, "reason", "CamelCase"),
    ({"message": None}, "message", "string"),
    ({"message": "x" * 32769}, "message", "32768"),
    ({"lastTransitionTime": "yesterday"}, "lastTransitionTime", "datetime"),
    ({"observedGeneration": -1}, "observedGeneration", "greater than or equal to 0"),
    ({"extra": 1}, "extra", "Extra inputs are not permitted"),
]


@pytest.mark.parametrize(("override", "field", "message"), INVALID)
def test_invalid_conditions_name_the_field(override: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(ValidationError) as info:
        Condition.model_validate(raw(**override))
    error = info.value.errors()[0]
    assert error["loc"][0] == field
    assert message in error["msg"]


def test_required_fields() -> None:
    for name in ("type", "status", "reason", "message", "lastTransitionTime"):
        data = raw()
        del data[name]
        with pytest.raises(ValidationError, match=name):
            Condition.model_validate(data)


def test_json_schema_carries_the_rules() -> None:
    props = Condition.model_json_schema(by_alias=True)["properties"]
    assert props["type"]["pattern"].startswith("^(")
    assert props["reason"]["minLength"] == 1
    assert props["lastTransitionTime"]["format"] == "date-time"
    assert props["observedGeneration"]["anyOf"][0]["minimum"] == 0


def test_set_condition_appends_and_replaces_in_place() -> None:
    ready, cordoned = cond("Ready"), cond("Cordoned", "False", "NotCordoned")
    conditions = set_condition([], ready)
    conditions = set_condition(conditions, cordoned)
    assert [c.type for c in conditions] == ["Ready", "Cordoned"]
    updated = set_condition(conditions, cond("Ready", "False", "QuotaExceeded", at=T1))
    assert [c.type for c in updated] == ["Ready", "Cordoned"]  # order stable
    assert updated[0].status == "False"
    assert updated[0].last_transition_time == T1
    assert conditions[0].status == "True"  # input untouched


def test_set_condition_keeps_time_when_status_unchanged() -> None:
    first = set_condition(None, cond(message="one", generation=1))
    second = set_condition(first, cond(reason="StillFine", message="two", at=T1, generation=2), now=T1)
    assert second[0].last_transition_time == T0
    assert (second[0].reason, second[0].message, second[0].observed_generation) == ("StillFine", "two", 2)


def test_set_condition_now_overrides_on_transition() -> None:
    first = set_condition([], cond(), now=T1)
    assert first[0].last_transition_time == T1
    flipped = set_condition(first, cond(status="Unknown", reason="Pending"), now=T1 + timedelta(seconds=1))
    assert flipped[0].last_transition_time == T1 + timedelta(seconds=1)


def test_no_change_compares_equal() -> None:
    current = [cond(), cond("Cordoned", "False", "NotCordoned")]
    assert set_condition(current, cond(at=T1), now=T1) == current


def test_get_is_true_remove() -> None:
    conditions = [cond(), cond("Cordoned", "Unknown", "Pending")]
    assert get_condition(conditions, "Ready") == conditions[0]
    assert get_condition(conditions, "Missing") is None
    assert get_condition(None, "Ready") is None
    assert is_true(conditions, "Ready")
    assert not is_true(conditions, "Cordoned")
    assert not is_true(conditions, "Missing")
    assert [c.type for c in remove_condition(conditions, "Ready")] == ["Cordoned"]
    assert remove_condition(conditions, "Missing") == conditions


# -- property: set_condition against a simple model --------------------------------------------

step = st.tuples(
    st.sampled_from(["Ready", "Cordoned", "enclave.dev/Synced"]),
    st.sampled_from(["True", "False", "Unknown"]),
    st.integers(min_value=0, max_value=10_000),
)


@given(st.lists(step, max_size=25))
def test_set_condition_model(steps: list[tuple[str, ConditionStatus, int]]) -> None:
    conditions: list[Condition] = []
    expected: dict[str, tuple[ConditionStatus, datetime]] = {}
    order: list[str] = []
    for type_, status, seconds in steps:
        now = T0 + timedelta(seconds=seconds)
        conditions = set_condition(conditions, cond(type_, status, "Step", at=now), now=now)
        if type_ not in expected:
            order.append(type_)
        if type_ not in expected or expected[type_][0] != status:
            expected[type_] = (status, now)
    assert [c.type for c in conditions] == order
    for c in conditions:
        assert (c.status, c.last_transition_time) == expected[c.type]
