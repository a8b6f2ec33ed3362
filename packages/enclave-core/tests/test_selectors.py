"""Label-selector semantics, validation and query rendering."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from enclave_core.selectors import (
    LabelSelector,
    LabelSelectorRequirement,
    as_selector,
    is_empty,
    matches,
    matches_any,
    to_label_query,
    validate_label_key,
)

PROD = {"env": "prod", "team": "a"}

# (selector, labels, expected) - the documented Kubernetes behaviour
TABLE: list[tuple[dict[str, Any] | None, dict[str, str] | None, bool]] = [
    ({}, PROD, True),  # empty matches everything
    ({}, {}, True),
    ({}, None, True),
    ({"matchLabels": {}, "matchExpressions": []}, PROD, True),
    (None, PROD, False),  # null matches nothing
    (None, {}, False),
    ({"matchLabels": {"env": "prod"}}, PROD, True),
    ({"matchLabels": {"env": "dev"}}, PROD, False),
    ({"matchLabels": {"env": "prod", "team": "b"}}, PROD, False),  # ANDed
    ({"matchLabels": {"missing": ""}}, PROD, False),  # empty value still needs the key
    ({"matchLabels": {"missing": ""}}, {"missing": ""}, True),
    ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["prod", "dev"]}]}, PROD, True),
    ({"matchExpressions": [{"key": "env", "operator": "In", "values": ["dev"]}]}, PROD, False),
    ({"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}, PROD, False),
    ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}, PROD, False),
    ({"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["dev"]}]}, PROD, True),
    ({"matchExpressions": [{"key": "zone", "operator": "NotIn", "values": ["a"]}]}, PROD, True),  # absent
    ({"matchExpressions": [{"key": "env", "operator": "Exists"}]}, PROD, True),
    ({"matchExpressions": [{"key": "zone", "operator": "Exists", "values": []}]}, PROD, False),
    ({"matchExpressions": [{"key": "zone", "operator": "DoesNotExist"}]}, PROD, True),  # absent
    ({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}, PROD, False),
    (
        {
            "matchLabels": {"team": "a"},
            "matchExpressions": [
                {"key": "env", "operator": "In", "values": ["prod"]},
                {"key": "tier", "operator": "DoesNotExist"},
            ],
        },
        PROD,
        True,
    ),
    (
        {
            "matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}],
        },
        PROD,
        False,
    ),
]


@pytest.mark.parametrize(("selector", "labels", "expected"), TABLE)
def test_table(selector: dict[str, Any] | None, labels: dict[str, str] | None, expected: bool) -> None:
    assert matches(selector, labels) is expected
    model = None if selector is None else LabelSelector.model_validate(selector)
    assert matches(model, labels) is expected


def test_lists_are_ored() -> None:
    dev = {"matchLabels": {"env": "dev"}}
    prod = {"matchLabels": {"env": "prod"}}
    assert matches_any([dev, prod], PROD)
    assert not matches_any([dev], PROD)
    assert not matches_any([], PROD)  # no selector, nothing selected
    assert not matches_any(None, PROD)
    assert not matches_any([None, dev], PROD)
    assert matches_any([None, {}], PROD)


INVALID: list[tuple[dict[str, Any], str]] = [
    ({"matchExpressions": [{"key": "a", "operator": "In"}]}, "values must be non-empty when operator is In"),
    (
        {"matchExpressions": [{"key": "a", "operator": "NotIn", "values": []}]},
        "non-empty when operator is NotIn",
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": "Exists", "values": ["x"]}]},
        "empty when operator is Exists",
    ),
    (
        {"matchExpressions": [{"key": "a", "operator": "DoesNotExist", "values": ["x"]}]},
        "operator is DoesNotExist",
    ),
    ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}, "operator"),
    ({"matchExpressions": [{"operator": "Exists"}]}, "key"),
    ({"matchExpressions": [{"key": "a", "operator": "Exists", "extra": 1}]}, "extra"),
    ({"matchLabel": {"a": "b"}}, "matchLabel"),
    ({"matchLabels": {"-bad": "x"}}, "label key '-bad'"),
    ({"matchLabels": {"Example.com/x": "x"}}, "must be a DNS subdomain"),
    ({"matchLabels": {"/x": "x"}}, "prefix before '/' must not be empty"),
    ({"matchLabels": {"a/": "x"}}, "name part must not be empty"),
    ({"matchLabels": {"a": "bad value"}}, "label value 'bad value'"),
    ({"matchLabels": {"a": "x" * 64}}, "at most 63"),
    ({"matchExpressions": [{"key": "a", "operator": "In", "values": ["a,b"]}]}, "label value 'a,b'"),
]


@pytest.mark.parametrize(("selector", "message"), INVALID)
def test_invalid_selectors_explain_themselves(selector: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        LabelSelector.model_validate(selector)
    with pytest.raises(ValueError, match=message):
        matches(selector, {})


def test_valid_keys() -> None:
    for key in ["a", "app.kubernetes.io/name", "enclave.dev/tenant", "A_b-c.D", "x" * 63, "a" * 253 + "/b"]:
        assert validate_label_key(key) == key


def test_model_aliases_and_serialisation() -> None:
    by_name = LabelSelector(
        match_labels={"a": "b"},
        match_expressions=[LabelSelectorRequirement(key="k", operator="Exists")],
    )
    by_alias = LabelSelector.model_validate(
        {"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "k", "operator": "Exists"}]}
    )
    assert by_name == by_alias
    assert by_alias.model_dump(by_alias=True, exclude_none=True) == {
        "matchLabels": {"a": "b"},
        "matchExpressions": [{"key": "k", "operator": "Exists"}],
    }
    assert as_selector(by_alias) is by_alias
    assert [is_empty({}), is_empty(LabelSelector()), is_empty(None), is_empty(by_alias)] == [
        True,
        True,
        False,
        False,
    ]


def test_json_schema_uses_camel_case_and_enum() -> None:
    schema = LabelSelector.model_json_schema(by_alias=True)
    assert set(schema["properties"]) == {"matchLabels", "matchExpressions"}
    requirement = schema["$defs"]["LabelSelectorRequirement"]
    assert requirement["properties"]["operator"]["enum"] == ["In", "NotIn", "Exists", "DoesNotExist"]
    assert requirement["additionalProperties"] is False


def test_query_string() -> None:
    selector = {
        "matchLabels": {"team": "a", "app": "web"},
        "matchExpressions": [
            {"key": "env", "operator": "In", "values": ["prod", "dev"]},
            {"key": "tier", "operator": "NotIn", "values": ["db"]},
            {"key": "owner", "operator": "Exists"},
            {"key": "legacy", "operator": "DoesNotExist"},
        ],
    }
    assert to_label_query(selector) == "app=web,env in (dev,prod),!legacy,owner,team=a,tier notin (db)"
    assert to_label_query({}) == ""
    with pytest.raises(ValueError, match="null label selector matches nothing"):
        to_label_query(None)


# -- property: the implementation agrees with a brute-force reference ---------------------------

KEYS = ["a", "b", "c"]
VALS = ["1", "2", ""]

labels_st = st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALS))
requirement_st = st.one_of(
    st.fixed_dictionaries(
        {
            "key": st.sampled_from(KEYS),
            "operator": st.sampled_from(["In", "NotIn"]),
            "values": st.lists(st.sampled_from(VALS), min_size=1, max_size=3),
        }
    ),
    st.fixed_dictionaries({"key": st.sampled_from(KEYS), "operator": st.sampled_from(["Exists", "DoesNotExist"])}),
)
selector_st = st.one_of(
    st.none(),
    st.fixed_dictionaries(
        {},
        optional={
            "matchLabels": st.dictionaries(st.sampled_from(KEYS), st.sampled_from(VALS)),
            "matchExpressions": st.lists(requirement_st, max_size=4),
        },
    ),
)


def reference(selector: dict[str, Any] | None, labels: dict[str, str]) -> bool:
    """Set semantics straight from the spec: every requirement is a set of acceptable label maps."""
    if selector is None:
        return False
    requirements = [(k, "In", [v]) for k, v in (selector.get("matchLabels") or {}).items()]
    requirements += [(r["key"], r["operator"], r.get("values") or []) for r in selector.get("matchExpressions") or []]
    for key, op, values in requirements:
        value = labels.get(key)  # None when absent; never a valid label value
        ok = {
            "In": value in values,
            "NotIn": value not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def parse_query(query: str) -> list[str]:
    return [] if not query else query.split(",")


@given(selector_st, labels_st)
def test_matches_reference(selector: dict[str, Any] | None, labels: dict[str, str]) -> None:
    assert matches(selector, labels) == reference(selector, labels)


@given(st.lists(selector_st, max_size=3), labels_st)
def test_matches_any_is_or(selectors: list[dict[str, Any] | None], labels: dict[str, str]) -> None:
    assert matches_any(selectors, labels) == any(reference(s, labels) for s in selectors)


@given(selector_st)
def test_query_is_deterministic_and_model_roundtrips(selector: dict[str, Any] | None) -> None:
    if selector is None:
        return
    model = LabelSelector.model_validate(selector)
    again = LabelSelector.model_validate(model.model_dump(by_alias=True, exclude_none=True))
    assert again == model
    assert to_label_query(again) == to_label_query(selector)
