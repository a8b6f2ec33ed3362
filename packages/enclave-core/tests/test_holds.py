"""One test per rule of :func:`enclave_core.kube.holds.holds` (the module docstring numbers them)."""

from __future__ import annotations

from typing import Any

from enclave_core.kube.holds import holds, quantity_equal, same


def test_rule1_keys_only_live_has_are_no_difference() -> None:
    desired = {"metadata": {"labels": {"a": "b"}}, "spec": {"ports": [{"port": 80}]}}
    live = {
        "metadata": {"labels": {"a": "b", "other": "c"}, "resourceVersion": "7"},
        "spec": {"ports": [{"port": 80, "protocol": "TCP"}], "sessionAffinity": "None"},
    }
    assert holds(live, desired)
    assert not holds({**live, "metadata": {"labels": {"a": "changed"}}}, desired)
    assert not holds({"spec": live["spec"]}, desired), "a key desired sets and live lacks"


def test_rule2_null_empty_maps_and_empty_lists_are_all_nothing() -> None:
    removed: dict[str, Any] = {"spec": {"paused": None}}
    assert holds({"spec": {}}, removed)
    assert holds({"spec": {"paused": None}}, removed)
    assert holds({"spec": {"paused": {}}}, removed)
    assert not holds({"spec": {"paused": False}}, removed), "null is not held by a value"
    assert holds({"metadata": {"name": "v"}}, {"metadata": {"name": "v", "annotations": {}}})
    assert holds({"metadata": {"name": "v", "annotations": None}}, {"metadata": {"annotations": {}}})
    assert holds({"metadata": {"annotations": {"k": "v"}}}, {"metadata": {"annotations": {}}}), "rule 1 still"
    assert holds({"spec": {}}, {"spec": {"rules": []}})
    assert holds({"spec": {"rules": []}}, {"spec": {"rules": []}})
    assert not holds({"spec": {"rules": [{"x": 1}]}}, {"spec": {"rules": []}}), "an item added is drift"


def test_rule3_an_empty_string_is_a_value() -> None:
    assert not holds({"metadata": {"labels": {}}}, {"metadata": {"labels": {"a": ""}}}), "a label valued ''"
    assert not holds({"data": {}}, {"data": {"k": ""}})
    assert holds({"data": {"k": ""}}, {"data": {"k": ""}})
    assert not holds({"data": {"k": None}}, {"data": {"k": ""}})


def test_rule4_lists_compare_item_by_item_with_the_same_length() -> None:
    desired = {"webhooks": [{"name": "x"}, {"name": "y"}]}
    assert holds({"webhooks": [{"name": "x", "timeoutSeconds": 10}, {"name": "y"}]}, desired)
    assert not holds({"webhooks": [{"name": "y"}, {"name": "x"}]}, desired), "order is part of the value"
    assert not holds({"webhooks": [{"name": "x"}]}, desired)
    assert not holds({"webhooks": [{"name": "x"}, {"name": "y"}, {"name": "z"}]}, desired)
    assert not holds({"webhooks": {"name": "x"}}, desired)


def test_rule5_booleans_by_identity_numbers_by_value_strings_by_text() -> None:
    assert holds({"flag": False}, {"flag": False})
    assert not holds({"flag": 0}, {"flag": False})
    assert not holds({"flag": True}, {"flag": 1})
    assert holds({"n": 1.0}, {"n": 1})
    assert not holds({"s": "1"}, {"s": 1})
    assert not holds({"data": {"cpu": "1"}}, {"data": {"cpu": "1000m"}}), "no quantities outside quantity maps"


def test_rule6_values_of_quantity_maps_compare_as_quantities() -> None:
    assert holds({"spec": {"hard": {"cpu": "1", "memory": "1Gi"}}}, {"spec": {"hard": {"cpu": "1000m"}}})
    assert holds({"spec": {"hard": {"memory": "1Gi"}}}, {"spec": {"hard": {"memory": "1024Mi"}}})
    assert holds({"resources": {"limits": {"cpu": "2"}}}, {"resources": {"limits": {"cpu": 2}}})
    assert not holds({"spec": {"hard": {"cpu": "1"}}}, {"spec": {"hard": {"cpu": "1001m"}}})
    assert not holds({"spec": {"hard": {"cpu": "lots"}}}, {"spec": {"hard": {"cpu": "1"}}})
    assert holds({"spec": {"hard": {"cpu": "lots"}}}, {"spec": {"hard": {"cpu": "lots"}}}), "text when unparsable"
    assert holds({"cpu": "1"}, {"cpu": "1000m"}, quantities=True)
    assert not holds({"cpu": "1"}, {"cpu": "1000m"})


def test_rule7_apiversion_and_kind_may_be_missing_at_the_top_only() -> None:
    desired = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"spec": {"kind": "x"}}}
    assert holds({"data": {"spec": {"kind": "x"}}}, desired)
    assert not holds({"apiVersion": "v2", "data": {"spec": {"kind": "x"}}}, desired)
    assert not holds({"apiVersion": "v1", "kind": "ConfigMap", "data": {"spec": {}}}, desired), "nested: a field"


def test_same_is_equality_under_the_rules() -> None:
    assert same({"cpu": "1", "pods": "10"}, {"cpu": "1000m", "pods": 10}, quantities=True)
    assert not same({"cpu": "1", "pods": "10"}, {"cpu": "1"}, quantities=True), "a key someone added"
    assert same({}, {"rules": []})
    assert same(None, [])
    assert not same({"scopes": ["BestEffort"]}, {})
    assert same({"labels": {}}, {})
    assert not same([], [{}])


def test_quantity_equal_refuses_booleans_and_other_types() -> None:
    assert quantity_equal("100Mi", "104857600")
    assert not quantity_equal(True, "1")
    assert not quantity_equal(None, "0")
