"""v1beta1 <-> v1beta2 conversion: every kind round-trips field for field, the deprecated layouts map as
documented, edits made through v1beta1 keep what only v1beta2 holds, and what v1beta2 cannot hold is refused."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from enclave_core.api import KINDS, kind_info
from enclave_core.api.conversion import HUB, SPOKE, ConversionError, convert, review
from enclave_core.api.names import CONVERSION_ANNOTATION
from enclave_core.api.v1beta1 import IDENTICAL, MODELS, validate
from enclave_testing.examples import example, status_example
from enclave_testing.examples_v1beta1 import example_v1beta1

KIND_NAMES = [info.kind for info in KINDS]


def _with_status(obj: dict[str, Any]) -> dict[str, Any]:
    obj["status"] = status_example(obj["kind"])
    obj["metadata"] |= {"uid": "u-1", "resourceVersion": "42", "generation": 3, "annotations": {"keep": "me"}}
    return obj


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_v1beta2_to_v1beta1_and_back_is_exact(kind: str) -> None:
    hub = _with_status(example(kind))
    spoke = convert(hub, SPOKE)
    assert spoke["apiVersion"] == SPOKE
    assert spoke["status"] == hub["status"]
    assert {k: v for k, v in spoke["metadata"].items() if k != "annotations"} == {
        k: v for k, v in hub["metadata"].items() if k != "annotations"
    }
    validate(spoke)  # what a v1beta1 client reads is a valid v1beta1 object
    assert convert(spoke, HUB) == hub


@pytest.mark.parametrize("kind", KIND_NAMES)
def test_v1beta1_to_v1beta2_and_back_is_exact(kind: str) -> None:
    spoke = _with_status(example_v1beta1(kind))
    validate(spoke)
    hub = convert(spoke, HUB)
    kind_info(kind).model.model_validate(hub)  # what controllers read is a valid v1beta2 object
    assert CONVERSION_ANNOTATION not in hub["metadata"]["annotations"], "the v1beta1 examples map onto v1beta2 exactly"
    assert convert(hub, SPOKE) == spoke


def test_identical_kinds_change_only_api_version() -> None:
    assert set(KIND_NAMES) - {"Tenant", "ServiceConfiguration"} == IDENTICAL
    assert set(MODELS) == {"Tenant", "ServiceConfiguration"}
    for kind in IDENTICAL:
        hub = _with_status(example(kind))
        assert convert(hub, SPOKE) == {**hub, "apiVersion": SPOKE}


def test_tenant_deprecated_layout_maps_onto_namespace_options() -> None:
    hub = convert(example_v1beta1("Tenant"), HUB)
    assert hub["spec"]["namespaceOptions"] == {
        "quota": 3,
        "additionalMetadata": {"labels": {"tenant-tier": "gold"}, "annotations": {"contact": "lunar@example.com"}},
        "forbiddenLabels": {"denied": ["forbidden"], "deniedRegex": "^secret-"},
        "forbiddenAnnotations": {"denied": ["nope"]},
    }
    for old in ("namespaceQuota", "namespacesMetadata", "forbiddenNamespaceLabels", "forbiddenNamespaceAnnotations"):
        assert old not in hub["spec"]


def test_configuration_user_lists_become_entities() -> None:
    hub = convert(example_v1beta1("ServiceConfiguration"), HUB)
    assert hub["spec"]["users"] == [
        {"kind": "Group", "name": "enclave.dev"},
        {"kind": "Group", "name": "platform"},
        {"kind": "User", "name": "bob"},
        {"kind": "User", "name": "system:serviceaccount:ci:deployer"},
    ]
    assert "userGroups" not in hub["spec"]
    assert "userNames" not in hub["spec"]
    assert hub["spec"]["overrides"]["mutatingWebhookConfigurationName"] == "legacy-mutating"


def test_v1beta2_deprecated_user_fields_read_as_v1beta1_lists() -> None:
    hub = example("ServiceConfiguration")
    hub["spec"] |= {"userGroups": ["old-group"], "userNames": ["old-user"]}
    spoke = convert(hub, SPOKE)
    assert spoke["spec"]["userGroups"] == ["enclave.dev", "old-group"]
    assert spoke["spec"]["userNames"] == ["system:serviceaccount:ci:deployer", "old-user"]
    assert "admission" not in spoke["spec"]
    assert "users" not in spoke["spec"]
    assert convert(spoke, HUB) == hub


def test_an_edit_through_v1beta1_keeps_the_v1beta2_only_fields() -> None:
    hub = example("Tenant")
    spoke = convert(hub, SPOKE)
    spoke["spec"]["namespaceQuota"] = 9
    spoke["spec"]["owners"].append({"kind": "User", "name": "carol"})
    edited = convert(spoke, HUB)
    assert edited["spec"]["namespaceOptions"]["quota"] == 9
    assert edited["spec"]["owners"][-1] == {"kind": "User", "name": "carol"}
    assert edited["spec"]["rules"] == hub["spec"]["rules"], "rules have no v1beta1 field and must survive"
    assert edited["spec"]["proxy"] == hub["spec"]["proxy"], "nor has proxy"
    assert "proxy" not in spoke["spec"]

    configuration = example("ServiceConfiguration")
    spoke = convert(configuration, SPOKE)
    spoke["spec"]["userGroups"] = ["only-this-group"]
    spoke["spec"].pop("userNames")
    edited = convert(spoke, HUB)
    assert edited["spec"]["users"] == [{"kind": "Group", "name": "only-this-group"}]
    assert edited["spec"]["admission"] == configuration["spec"]["admission"]
    assert edited["spec"]["proxy"] == configuration["spec"]["proxy"]


def test_the_rules_engine_lives_in_v1beta2_and_survives_an_edit_through_v1beta1() -> None:
    hub = example("ServiceConfiguration")
    hub["spec"]["rules"] = {"engine": "both"}
    spoke = convert(hub, SPOKE)
    assert "rules" not in spoke["spec"]
    assert convert(spoke, HUB) == hub
    spoke["spec"]["forceTenantPrefix"] = True
    edited = convert(spoke, HUB)
    assert edited["spec"]["rules"] == {"engine": "both"}
    assert edited["spec"]["forceTenantPrefix"] is True


def test_a_field_removed_through_v1beta1_stays_removed() -> None:
    spoke = convert(example("Tenant"), SPOKE)
    del spoke["spec"]["namespaceQuota"]
    assert "quota" not in convert(spoke, HUB)["spec"]["namespaceOptions"]


def test_too_many_users_for_v1beta2_is_refused_naming_the_field() -> None:
    spoke = example_v1beta1("ServiceConfiguration")
    spoke["spec"]["userGroups"] = [f"g{i}" for i in range(200)]
    spoke["spec"]["userNames"] = [f"u{i}" for i in range(57)]
    with pytest.raises(ConversionError) as err:
        convert(spoke, HUB)
    assert err.value.field == "spec.userGroups"
    assert "at most 256" in str(err.value)


def test_a_review_fails_whole_never_partial() -> None:
    good = example_v1beta1("Tenant")
    bad = example_v1beta1("ServiceConfiguration")
    bad["spec"]["userNames"] = [f"u{i}" for i in range(300)]
    answer = review({"request": {"uid": "r-1", "desiredAPIVersion": HUB, "objects": [good, bad, good]}})
    response = answer["response"]
    assert answer["kind"] == "ConversionReview"
    assert response["uid"] == "r-1"
    assert response["result"]["status"] == "Failure"
    assert "convertedObjects" not in response
    assert response["result"]["message"].startswith("ServiceConfiguration default: spec.userGroups: ")


def test_a_review_converts_every_object_in_order() -> None:
    objects = [example_v1beta1(kind) for kind in KIND_NAMES]
    answer = review({"request": {"uid": "r-2", "desiredAPIVersion": HUB, "objects": objects}})
    response = answer["response"]
    assert response["result"] == {"status": "Success"}
    assert [obj["kind"] for obj in response["convertedObjects"]] == KIND_NAMES
    assert {obj["apiVersion"] for obj in response["convertedObjects"]} == {HUB}


def test_unknown_versions_are_refused() -> None:
    answer = review({"request": {"uid": "r-3", "desiredAPIVersion": "enclave.dev/v2", "objects": [example("Tenant")]}})
    assert answer["response"]["result"]["status"] == "Failure"
    assert "enclave.dev/v2" in answer["response"]["result"]["message"]
    with pytest.raises(ConversionError):
        convert({**example("Tenant"), "apiVersion": "enclave.dev/v1alpha1"}, HUB)


def test_a_malformed_conversion_annotation_is_refused_on_write_and_ignored_on_read() -> None:
    spoke = example_v1beta1("Tenant")
    spoke["metadata"]["annotations"] = {CONVERSION_ANNOTATION: "{not json"}
    with pytest.raises(ConversionError) as err:
        convert(spoke, HUB)
    assert err.value.field == f"metadata.annotations[{CONVERSION_ANNOTATION}]"
    hub = example("Tenant")
    hub["metadata"]["annotations"] = {CONVERSION_ANNOTATION: "[]"}
    assert convert(hub, SPOKE)["spec"]["namespaceQuota"] == 3


# -- properties: any subset of fields round-trips ----------------------------------------------------------


def _subsets(obj: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    keys = sorted(obj["spec"])
    return st.sets(st.sampled_from(keys)).map(
        lambda chosen: {**copy.deepcopy(obj), "spec": {k: copy.deepcopy(obj["spec"][k]) for k in chosen}}
    )


def _empties(spec: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """The spec with some list or map fields replaced by empty ones (where layouts lose information)."""
    keys = sorted(k for k, v in spec.items() if isinstance(v, list | dict))
    if not keys:
        return st.just(spec)
    return st.sets(st.sampled_from(keys)).map(
        lambda chosen: {k: (type(v)() if k in chosen else v) for k, v in spec.items()}
    )


@settings(max_examples=60, deadline=None)
@given(
    st.sampled_from(["Tenant", "ServiceConfiguration"]).flatmap(
        lambda kind: st.tuples(_subsets(example(kind)), _subsets(example_v1beta1(kind)))
    ),
    st.data(),
)
def test_any_subset_of_fields_round_trips_both_ways(pair: tuple[dict[str, Any], dict[str, Any]], data: Any) -> None:
    hub, spoke = pair
    hub["spec"] = data.draw(_empties(hub["spec"]))
    spoke["spec"] = data.draw(_empties(spoke["spec"]))
    assert convert(convert(hub, SPOKE), HUB) == hub
    assert convert(convert(spoke, HUB), SPOKE) == spoke


def test_the_annotation_is_small_json_of_the_source_spec() -> None:
    spoke = convert(example("Tenant"), SPOKE)
    saved = json.loads(spoke["metadata"]["annotations"][CONVERSION_ANNOTATION])
    assert saved == {"apiVersion": HUB, "spec": example("Tenant")["spec"]}
