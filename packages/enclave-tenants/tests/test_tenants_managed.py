"""Managed metadata: which rules contribute, what an object must carry, and when a namespace is reconciled."""

from __future__ import annotations

from enclave_core.api.rules import AppliedRule
from enclave_tenants import managed as mg


def rule(index: int, **body: object) -> AppliedRule:
    return AppliedRule.model_validate({**body, "origin": {"kind": "Tenant", "name": "t", "index": index}})


def metadata(kinds: list[str], value: str, groups: list[str] | None = None, **rule_fields: object) -> dict[str, object]:
    entry: dict[str, object] = {"kinds": kinds, "labels": {"team": {"managed": value}}}
    if groups:
        entry["apiGroups"] = groups
    return {"action": "allow", "metadata": [entry], **rule_fields}


def test_only_unconditional_rules_for_everyone_contribute_and_the_last_value_wins() -> None:
    rules = [
        rule(0, enforce=metadata(["*"], "a")),
        rule(1, enforce=metadata(["ConfigMap"], "b")),
        rule(2, enforce=metadata(["ConfigMap"], "c", conditions=[{"expression": "true"}])),
        rule(3, audience=[{"kind": "User", "name": "x"}], enforce=metadata(["ConfigMap"], "d")),
        rule(4, enforce=metadata(["Deployment"], "e", ["apps"])),
    ]
    found = mg.entries(rules)
    assert [e.value for e in found] == ["a", "b", "e"]
    assert mg.wanted(found, "ConfigMap", "v1") == {"labels": {"team": "b"}}
    assert mg.wanted(found, "Deployment", "apps/v1") == {"labels": {"team": "e"}}
    assert mg.wanted(found, "Secret", "v1") == {"labels": {"team": "a"}}
    assert mg.drift({"metadata": {"labels": {"team": "b"}}}, {"labels": {"team": "b"}}) == {}
    assert mg.drift({"metadata": {}}, {"labels": {"team": "b"}}) == {"labels": {"team": "b"}}
    assert mg.signature(found) == mg.signature(mg.entries(rules))
    assert mg.signature(found) != mg.signature(found[:1])
