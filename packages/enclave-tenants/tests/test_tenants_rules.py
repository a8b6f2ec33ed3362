"""RuleStatus compilation: which rules a tenant namespace gets, with their origins, and its status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from enclave_core.api.tenancy import Tenant
from enclave_core.snapshots.rules import RulesSnapshot
from enclave_tenants import rules as rl

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DENY_ENV = {"enforce": {"metadata": [{"kinds": ["*"], "labels": {"env": {}}}]}}


def namespace(name: str, **labels: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"enclave.dev/tenant": "solar", **labels}}}


def tenant(*rules: dict[str, Any]) -> Tenant:
    return Tenant.model_validate({"metadata": {"name": "solar"}, "spec": {"rules": list(rules)}})


def test_selected_tenant_rules_then_own_spec_with_origins() -> None:
    prod_only = {**DENY_ENV, "namespaceSelector": {"matchLabels": {"env": "prod"}}}
    own = {
        "metadata": {"name": "default", "namespace": "solar-prod", "generation": 3},
        "spec": [{"enforce": {"action": "audit"}}],
    }
    plans = rl.compile_namespaces(
        {"solar": tenant(DENY_ENV, prod_only)},
        {"solar-dev": "solar", "solar-prod": "solar"},
        {"solar-dev": namespace("solar-dev"), "solar-prod": namespace("solar-prod", env="prod")},
        {"solar-prod": own},
    )
    assert [r.origin.index for r in plans["solar-dev"].rules] == [0]
    prod = plans["solar-prod"].rules
    assert [(r.origin.kind, r.origin.index) for r in prod] == [("Tenant", 0), ("Tenant", 1), ("RuleStatus", 0)]
    status = rl.desired_status(plans["solar-prod"], NOW)
    assert status["size"] == 3
    assert status["observedGeneration"] == 3
    assert status["conditions"][0]["status"] == "True"
    assert "namespaceSelector" not in status["rules"][1]
    snapshot = rl.snapshot(plans, [{"metadata": {"name": "pv1", "labels": {"a": "b"}}}])
    parsed = RulesSnapshot.model_validate_json(snapshot.payload())
    assert parsed.by_namespace["solar-prod"].rules[2].origin.namespace == "solar-prod"
    assert parsed.volume_labels == {"pv1": {"a": "b"}}


def test_a_rule_that_cannot_work_is_reported_not_dropped() -> None:
    bad = {"enforce": {"conditions": [{"expression": "object.("}]}}
    plans = rl.compile_namespaces(
        {"solar": tenant(bad)}, {"solar-dev": "solar"}, {"solar-dev": namespace("solar-dev")}, {}
    )
    plan = plans["solar-dev"]
    assert len(plan.rules) == 1
    status = rl.desired_status(plan, NOW)
    ready = status["conditions"][0]
    assert ready["status"] == "False"
    assert ready["reason"] == "InvalidRule"
    assert "spec.rules[0].enforce.conditions[0].expression" in ready["message"]


def test_status_is_written_only_on_change() -> None:
    plans = rl.compile_namespaces(
        {"solar": tenant()}, {"solar-dev": "solar"}, {"solar-dev": namespace("solar-dev")}, {}
    )
    status = rl.desired_status(plans["solar-dev"], NOW)
    assert not rl.status_changed({"status": status}, status)


def test_a_terminating_namespace_keeps_its_rules_until_it_is_gone() -> None:
    own = {"metadata": {"name": "default", "namespace": "solar-old"}, "spec": [{"enforce": {"action": "audit"}}]}
    terminating = {**namespace("solar-old"), "status": {"phase": "Terminating"}}
    solar = {"solar": tenant(DENY_ENV)}
    where = {"solar-old": "solar"}
    # While its RuleStatus exists: compiled as usual (the tenant's rules, then its own), marked terminating.
    first = rl.compile_namespaces(solar, where, {"solar-old": terminating}, {"solar-old": own})
    assert first["solar-old"].terminating
    assert [r.origin.kind for r in first["solar-old"].rules] == ["Tenant", "RuleStatus"]
    # The namespace controller deleted the RuleStatus: the last compiled rules stay, its own ones included.
    kept = rl.compile_namespaces(solar, where, {"solar-old": terminating}, {}, previous=first)
    assert [r.origin.kind for r in kept["solar-old"].rules] == ["Tenant", "RuleStatus"]
    assert [n.namespace for n in rl.snapshot(kept, []).namespaces] == ["solar-old"]
    # A replica that never compiled them leaves the namespace out: admission refuses writes there.
    fresh = rl.compile_namespaces(solar, where, {"solar-old": terminating}, {})
    snapshot = rl.snapshot(fresh, [])
    assert fresh == {}
    assert snapshot.complete
    assert "solar-old" not in snapshot.known
    # Gone: nothing is kept.
    assert rl.compile_namespaces(solar, {}, {}, {}, previous=kept) == {}


def test_the_snapshot_names_namespaces_without_rules() -> None:
    plans = rl.compile_namespaces(
        {"solar": tenant()}, {"solar-dev": "solar"}, {"solar-dev": namespace("solar-dev")}, {}
    )
    parsed = RulesSnapshot.model_validate_json(rl.snapshot(plans, []).payload())
    assert parsed.namespaces == []
    assert parsed.without_rules == ["solar-dev"]
    assert parsed.known == {"solar-dev"}
    assert not RulesSnapshot.model_validate_json(b"{}").complete  # an older publisher


def test_disruption_budgets_of_namespaces_that_require_coverage_reach_admission() -> None:
    required = {"enforce": {"workloads": {"targets": ["Deployment"], "disruptionBudgets": {"required": True}}}}
    only_prod = {**required, "namespaceSelector": {"matchLabels": {"env": "prod"}}}
    plans = rl.compile_namespaces(
        {"solar": tenant(DENY_ENV, only_prod)},
        {"solar-dev": "solar", "solar-prod": "solar"},
        {"solar-dev": namespace("solar-dev"), "solar-prod": namespace("solar-prod", env="prod")},
        {},
    )

    def budget(ns: str, name: str, selector: Any, **extra: Any) -> dict[str, Any]:
        return {"metadata": {"namespace": ns, "name": name, **extra}, "spec": {"selector": selector, "minAvailable": 1}}

    budgets = [
        budget("solar-prod", "web", {"matchLabels": {"app": "web"}}),
        budget("solar-prod", "none", None),
        budget("solar-prod", "going", {}, deletionTimestamp="2026-01-01T00:00:00Z"),
        budget("solar-dev", "dev", {}),  # no rule there requires coverage: of no use to admission
        budget("elsewhere", "x", {}),
    ]
    parsed = RulesSnapshot.model_validate_json(rl.snapshot(plans, [], budgets).payload())
    prod = parsed.budgets_by_namespace["solar-prod"]
    assert [(b.name, b.selector is not None, b.min_available) for b in prod] == [("none", False, 1), ("web", True, 1)]
    assert set(parsed.budgets_by_namespace) == {"solar-prod"}


def test_rules_naming_namespace_are_published_per_tenant_cut_to_those_entries() -> None:
    namespaced = {"kinds": ["Namespace"], "labels": {"cost-center": {"required": True}}}
    other = {"kinds": ["*"], "labels": {"legacy": {}}}
    mixed = {
        "namespaceSelector": {"matchLabels": {"stage": "prod"}},
        "enforce": {"action": "allow", "metadata": [namespaced, other], "services": {"types": ["NodePort"]}},
    }
    solar = tenant({"enforce": {"metadata": [other]}}, mixed)
    snapshot = rl.snapshot({}, [], tenants={"solar": solar, "broken": None})
    parsed = RulesSnapshot.model_validate_json(snapshot.payload())
    (found,) = parsed.namespace_rules
    assert found.tenant == "solar"
    (item,) = found.rules
    assert item.namespace_selector is not None
    assert item.namespace_selector.match_labels == {"stage": "prod"}
    assert item.rule.origin.index == 1  # a denial names the rule as the user wrote it
    assert item.rule.enforce is not None
    assert [entry.kinds for entry in item.rule.enforce.metadata or []] == [["Namespace"]]
    assert item.rule.enforce.services is None
