"""Tenant rules whose metadata ``kinds`` name ``Namespace`` judge the tenant's namespaces on create and update
by tenant users (issue 30: they were accepted and inert), selected by their ``namespaceSelector``."""

from __future__ import annotations

from admission_helpers import ALICE, make_state, namespace, request, tenant

from enclave_admission.namespaces import validation
from enclave_admission.state import State
from enclave_core.api.names import TENANT_LABEL
from enclave_core.api.rules import AppliedRule
from enclave_core.selectors import LabelSelector
from enclave_core.snapshots.rules import RulesSnapshot, TenantNamespaceRule, TenantNamespaceRules

REQUIRED = AppliedRule.model_validate(
    {
        "enforce": {
            "action": "allow",
            "metadata": [{"kinds": ["Namespace"], "labels": {"cost-center": {"required": True}}}],
        },
        "origin": {"kind": "Tenant", "name": "solar", "index": 0},
    }
)
NO_GOLD = AppliedRule.model_validate(
    {
        "enforce": {
            "action": "deny",
            "metadata": [{"kinds": ["Namespace"], "annotations": {"tier": {"values": [{"exact": ["gold"]}]}}}],
        },
        "origin": {"kind": "Tenant", "name": "solar", "index": 1},
    }
)
PROD = LabelSelector.model_validate({"matchLabels": {"stage": "prod"}})


def state() -> State:
    found = make_state([tenant("solar", "alice", namespaces=["solar-ok"])])
    found.set_rules(
        RulesSnapshot(
            namespace_rules=[
                TenantNamespaceRules(
                    tenant="solar",
                    rules=[
                        TenantNamespaceRule(rule=REQUIRED),
                        TenantNamespaceRule(rule=NO_GOLD, namespace_selector=PROD),
                    ],
                )
            ]
        )
    )
    return found


def assigned(name: str, labels: dict[str, str], **annotations: str) -> dict[str, object]:
    obj = namespace(name, {TENANT_LABEL: "solar", **labels})
    obj["metadata"]["ownerReferences"] = [
        {"apiVersion": "enclave.dev/v1beta2", "kind": "Tenant", "name": "solar", "uid": "uid-solar", "controller": True}
    ]
    if annotations:
        obj["metadata"]["annotations"] = annotations
    return obj


def test_create_requires_the_label_a_namespace_rule_requires() -> None:
    refused = validation.validate(request(ALICE, "CREATE", assigned("solar-a", {})), state())
    assert refused.reason == "RuleViolation"
    assert "Tenant solar spec.rules[0] requires metadata.labels['cost-center']" in refused.message
    assert validation.validate(request(ALICE, "CREATE", assigned("solar-a", {"cost-center": "c"})), state()).allowed


def test_the_namespace_selector_chooses_where_a_rule_applies() -> None:
    prod = assigned("solar-p", {"cost-center": "c", "stage": "prod"}, tier="gold")
    refused = validation.validate(request(ALICE, "CREATE", prod), state())
    assert "spec.rules[1] denies metadata.annotations['tier']='gold'" in refused.message
    dev = assigned("solar-d", {"cost-center": "c", "stage": "dev"}, tier="gold")
    assert validation.validate(request(ALICE, "CREATE", dev), state()).allowed


def test_update_judges_the_keys_that_change() -> None:
    old = assigned("solar-ok", {"cost-center": "a"})
    refused = validation.validate(request(ALICE, "UPDATE", assigned("solar-ok", {}), old=old), state())
    assert refused.reason == "RuleViolation"
    # a namespace that predates the rule is not locked out of unrelated edits
    bare = assigned("solar-ok", {})
    assert validation.validate(request(ALICE, "UPDATE", assigned("solar-ok", {"x": "1"}), old=bare), state()).allowed
