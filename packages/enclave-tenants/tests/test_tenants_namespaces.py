"""Namespace metadata: what we apply, and when the live object has drifted from it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tenants_helpers import namespace

from enclave_core.api.names import TENANTS_MANAGER
from enclave_core.api.tenancy import TenantSpec
from enclave_tenants.namespaces import (
    desired_namespace,
    foreign_tenant_references,
    needs_apply,
    node_selector_annotation,
    owns_anything,
    without_foreign_references_patch,
)


def spec(**fields: Any) -> TenantSpec:
    return TenantSpec.model_validate(fields)


def applied(
    obj: dict[str, Any], labels: Sequence[str] = (), annotations: Sequence[str] = (), refs: Sequence[str] = ()
) -> dict[str, Any]:
    """Give ``obj`` a managedFields entry saying our manager applied these keys."""
    fields: dict[str, Any] = {"f:metadata": {}}
    if labels:
        fields["f:metadata"]["f:labels"] = {f"f:{k}": {} for k in labels}
    if annotations:
        fields["f:metadata"]["f:annotations"] = {f"f:{k}": {} for k in annotations}
    if refs:
        fields["f:metadata"]["f:ownerReferences"] = {f'k:{{"uid":"{u}"}}': {".": {}} for u in refs}
    obj["metadata"]["managedFields"] = [
        {"manager": TENANTS_MANAGER, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": fields}
    ]
    return obj


def test_node_selector_annotation_is_sorted() -> None:
    assert node_selector_annotation({"zone": "a", "pool": "solar"}) == "pool=solar,zone=a"
    assert node_selector_annotation({}) == ""


def test_desired_namespace_carries_label_metadata_selector_and_reference() -> None:
    tenant_spec = spec(
        namespaceOptions={
            "additionalMetadata": {
                "labels": {"cost-center": "solar", "enclave.dev/tenant": "other"},
                "annotations": {"team.example.com/contact": "alice"},
            }
        },
        nodeSelector={"pool": "solar"},
    )
    body, problems = desired_namespace("solar-dev", "solar", "uid-1", tenant_spec, None)
    assert problems == []
    meta = body["metadata"]
    assert meta["labels"] == {"cost-center": "solar", "enclave.dev/tenant": "solar"}  # the tenant label wins
    assert meta["annotations"] == {
        "team.example.com/contact": "alice",
        "scheduler.alpha.kubernetes.io/node-selector": "pool=solar",
    }
    assert meta["ownerReferences"] == [
        {"apiVersion": "enclave.dev/v1beta2", "kind": "Tenant", "name": "solar", "uid": "uid-1", "controller": False}
    ]


def test_existing_reference_is_kept_as_admission_wrote_it() -> None:
    ref = {
        "apiVersion": "enclave.dev/v1beta2",
        "kind": "Tenant",
        "name": "solar",
        "uid": "uid-1",
        "controller": True,
        "blockOwnerDeletion": True,
    }
    live = namespace("solar-dev", "solar", ownerReferences=[ref])
    body, _ = desired_namespace("solar-dev", "solar", "uid-1", spec(), live)
    assert body["metadata"]["ownerReferences"] == [ref]
    assert "annotations" not in body["metadata"]


def test_invalid_metadata_is_reported_and_left_out() -> None:
    tenant_spec = spec(
        namespaceOptions={"additionalMetadata": {"labels": {"ok": "yes", "bad key!": "x", "v": "not valid!"}}}
    )
    body, problems = desired_namespace("n", "t", "u", tenant_spec, None)
    assert body["metadata"]["labels"] == {"ok": "yes", "enclave.dev/tenant": "t"}
    assert len(problems) == 2
    assert all(p.startswith("spec.namespaceOptions.additionalMetadata.labels[") for p in problems)


def test_needs_apply_when_something_wanted_is_missing_or_edited() -> None:
    body, _ = desired_namespace("n", "t", "u", spec(nodeSelector={"pool": "a"}), None)
    live = namespace(
        "n",
        "t",
        annotations={"scheduler.alpha.kubernetes.io/node-selector": "pool=a"},
        ownerReferences=body["metadata"]["ownerReferences"],
    )
    assert not needs_apply(live, body, TENANTS_MANAGER)
    edited = namespace(
        "n",
        "t",
        annotations={"scheduler.alpha.kubernetes.io/node-selector": "pool=b"},
        ownerReferences=body["metadata"]["ownerReferences"],
    )
    assert needs_apply(edited, body, TENANTS_MANAGER)
    unreferenced = namespace("n", "t", annotations={"scheduler.alpha.kubernetes.io/node-selector": "pool=a"})
    assert needs_apply(unreferenced, body, TENANTS_MANAGER)


def test_needs_apply_when_we_own_something_no_longer_wanted() -> None:
    body, _ = desired_namespace("n", "t", "u", spec(), None)
    refs = body["metadata"]["ownerReferences"]
    live = applied(namespace("n", "t", ownerReferences=refs), labels=["enclave.dev/tenant"], refs=["u"])
    assert not needs_apply(live, body, TENANTS_MANAGER)
    live = applied(namespace("n", "t", ownerReferences=refs), labels=["enclave.dev/tenant", "cost-center"], refs=["u"])
    assert needs_apply(live, body, TENANTS_MANAGER)
    live = applied(
        namespace("n", "t", ownerReferences=refs), annotations=["scheduler.alpha.kubernetes.io/node-selector"]
    )
    assert needs_apply(live, body, TENANTS_MANAGER)
    live = applied(namespace("n", "t", ownerReferences=refs), refs=["u", "old-uid"])
    assert needs_apply(live, body, TENANTS_MANAGER)


def test_owns_anything_reads_only_our_apply_entries() -> None:
    assert owns_anything(applied(namespace("n"), labels=["x"]), TENANTS_MANAGER)
    assert not owns_anything(namespace("n"), TENANTS_MANAGER)
    other = applied(namespace("n"), labels=["x"])
    other["metadata"]["managedFields"][0]["manager"] = "kubectl"
    assert not owns_anything(other, TENANTS_MANAGER)


def test_foreign_tenant_references_are_removed_with_a_guarded_patch() -> None:
    mine = {"apiVersion": "enclave.dev/v1beta2", "kind": "Tenant", "name": "b", "uid": "ub"}
    old = {"apiVersion": "enclave.dev/v1beta2", "kind": "Tenant", "name": "a", "uid": "ua"}
    other = {"apiVersion": "v1", "kind": "ConfigMap", "name": "x", "uid": "ux"}
    live = namespace("n", "b", ownerReferences=[old, mine, other])
    assert foreign_tenant_references(live, "ub") == [old]
    patch = without_foreign_references_patch(live, "ub")
    assert patch[0] == {"op": "test", "path": "/metadata/ownerReferences", "value": [old, mine, other]}
    assert patch[1] == {"op": "replace", "path": "/metadata/ownerReferences", "value": [mine, other]}
