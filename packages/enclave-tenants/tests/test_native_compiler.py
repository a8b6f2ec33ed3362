"""The compiler from a namespace's rules to ValidatingAdmissionPolicies: what goes where, and why.

What the policies *decide* is proven on kube-apiserver against the webhook
(tests/integration/rules/test_rules_native_differential.py); these tests pin the placement of each rule, the
shape of the objects and the hostile-input bounds.
"""

from __future__ import annotations

import json
import time
from typing import Any

from enclave_core.api.rules import AppliedRule
from enclave_tenants.native.celtext import lit
from enclave_tenants.native.compiler import (
    MAX_TERMS,
    Program,
    compile_namespace,
    webhook_needed,
)
from enclave_tenants.native.controller import binding_covers
from enclave_tenants.native.mutations import NOT_SERVED
from enclave_tenants.native.objects import policies, skip_unjudged


def _rules(*bodies: dict[str, Any]) -> list[AppliedRule]:
    return [
        AppliedRule.model_validate({**body, "origin": {"kind": "Tenant", "name": "t", "index": index}})
        for index, body in enumerate(bodies)
    ]


def _deny_label(key: str = "env", **extra: Any) -> dict[str, Any]:
    return {
        "enforce": {
            "action": "deny",
            "metadata": [{"kinds": ["ConfigMap"], "labels": {key: {"values": [{"exact": ["prod"]}]}}}],
            **extra,
        }
    }


def _placed(program: Program) -> dict[tuple[str, str], tuple[str, str]]:
    return {(p.origin, p.area): (p.path, p.why) for p in program.placements}


def test_metadata_and_services_rules_compile_together_into_one_program() -> None:
    program = compile_namespace(
        _rules(
            _deny_label(),
            {"enforce": {"action": "allow", "services": {"externalIPs": {"cidrs": ["10.0.0.0/8"]}}}},
        )
    )
    placed = _placed(program)
    assert placed[("Tenant t spec.rules[0]", "metadata")][0] == "native"
    assert placed[("Tenant t spec.rules[1]", "services")][0] == "native"
    assert program.resources == {"*", "services"}
    assert len(program.validations) == 2  # the env key, the external IPs
    assert not program.audit_validations


def test_metadata_rules_on_namespace_objects_say_the_namespaces_hook_judges_those() -> None:
    every_kind = {"enforce": {"metadata": [{"kinds": ["*"], "labels": {"env": {"values": [{"exact": ["prod"]}]}}}]}}
    namespaces = {"enforce": {"metadata": [{"kinds": ["Namespace"], "labels": {"team": {"required": True}}}]}}
    placed = _placed(compile_namespace(_rules(_deny_label(), every_kind, namespaces)))
    assert ("Tenant t spec.rules[0]", "metadata of Namespace objects") not in placed  # ConfigMaps only
    for index in (1, 2):
        assert placed[(f"Tenant t spec.rules[{index}]", "metadata")][0] == "native"
        path, why = placed[(f"Tenant t spec.rules[{index}]", "metadata of Namespace objects")]
        assert path == "webhook"
        assert "namespaces hook" in why


def test_a_label_key_is_one_chain_with_the_last_rule_outermost() -> None:
    program = compile_namespace(
        _rules(
            _deny_label(),
            {
                "enforce": {
                    "action": "allow",
                    "metadata": [{"kinds": ["ConfigMap"], "labels": {"env": {"values": [{"exact": ["dev"]}]}}}],
                }
            },
        )
    )
    (key,) = [v for v in program.variables if v["name"] == "m0"]
    expression = key["expression"]
    # the allow (rule 1) is tested before the deny (rule 0): the last match decides
    assert expression.index("variables.a1") < expression.index("variables.a0")
    assert "Tenant t spec.rules[1] allows metadata.labels['env'] only exact ['dev']; got " in expression


def test_rules_that_cannot_be_native_stay_on_the_webhook_and_say_why() -> None:
    program = compile_namespace(
        _rules(
            _deny_label(conditions=[{"expression": "now > timestamp('2020-01-01T00:00:00Z')"}]),
            {
                "enforce": {
                    "action": "deny",
                    "conditions": [{"expression": "now > timestamp('2020-01-01T00:00:00Z')"}],
                    "network": {"policies": {"egress": {"cidrs": ["10.0.0.0/8"]}}},
                }
            },
            {"enforce": {"action": "deny", "workloads": {"security": {"privileged": True}}}},
            {"mutate": [{"metadata": {"kinds": ["ConfigMap"], "labels": {"a": "b"}}}]},
            {"quota": [{"name": "q", "hard": {"pods": "1"}}]},
            {"enforce": {"storage": {"volumes": [{"selector": {}}]}}},
            {"enforce": {"ingress": {"hostnames": [{"exp": r"\pL+\.example"}]}}},
        ),
        mutations=False,
    )
    placed = _placed(program)
    assert placed[("Tenant t spec.rules[0]", "metadata")] == (
        "webhook",
        "enforce.conditions[0] reads `now`, which a ValidatingAdmissionPolicy has no variable for",
    )
    assert placed[("Tenant t spec.rules[1]", "network")][0] == "webhook"
    assert "security features" in placed[("Tenant t spec.rules[2]", "workloads")][1]
    assert placed[("Tenant t spec.rules[3]", "mutate")] == ("webhook", NOT_SERVED)
    assert "ledgers" in placed[("Tenant t spec.rules[4]", "quota")][1]
    assert "labels of the PersistentVolume" in placed[("Tenant t spec.rules[5]", "storage")][1]
    assert placed[("Tenant t spec.rules[6]", "ingress")][0] == "webhook"
    assert "uses the escape '\\p'" in placed[("Tenant t spec.rules[6]", "ingress")][1]
    assert program.empty


def test_a_key_one_webhook_rule_governs_stays_on_the_webhook_for_every_rule() -> None:
    program = compile_namespace(
        _rules(
            _deny_label(),
            _deny_label(conditions=[{"expression": "now > timestamp('2020-01-01T00:00:00Z')"}]),
            _deny_label("team"),
        )
    )
    placed = _placed(program)
    path, why = placed[("Tenant t spec.rules[0]", "metadata")]
    assert path == "webhook"
    assert "Tenant t spec.rules[1] also governs it" in why
    assert placed[("Tenant t spec.rules[2]", "metadata")][0] == "native"  # team: no webhook rule speaks of it


def test_managed_keys_stay_on_the_webhook_where_no_mutating_policy_sets_them() -> None:
    managed = {"enforce": {"action": "allow", "metadata": [{"kinds": ["*"], "labels": {"env": {"managed": "x"}}}]}}
    assert _placed(compile_namespace(_rules(_deny_label(), managed)))[("Tenant t spec.rules[0]", "metadata")][0] == (
        "native"
    )
    placed = _placed(compile_namespace(_rules(_deny_label(), managed), mutations=False))
    assert placed[("Tenant t spec.rules[0]", "metadata")] == (
        "webhook",
        "metadata.labels['env'] has a managed value: the mutating webhook sets it and refuses any other",
    )


def test_services_go_to_the_webhook_together_when_one_services_rule_must() -> None:
    program = compile_namespace(
        _rules(
            {"enforce": {"action": "deny", "services": {"types": ["LoadBalancer"]}}},
            {
                "enforce": {
                    "action": "allow",
                    "services": {"types": ["LoadBalancer"]},
                    "conditions": [{"expression": "now > timestamp('2020-01-01T00:00:00Z')"}],
                }
            },
        )
    )
    path, why = _placed(program)[("Tenant t spec.rules[0]", "services")]
    assert path == "webhook"
    assert "Tenant t spec.rules[1] also judges Services" in why
    assert program.empty


def test_regexes_go_cannot_take_stay_on_the_webhook() -> None:
    rule = {
        "enforce": {
            "action": "deny",
            "metadata": [{"kinds": ["*"], "labels": {"env": {"values": [{"exp": "a\\Cb"}]}}}],
        }
    }
    path, why = _placed(compile_namespace(_rules(rule)))[("Tenant t spec.rules[0]", "metadata")]
    assert path == "webhook"
    assert "Go's regexp" in why


def test_audit_rules_go_to_the_warn_and_audit_policy() -> None:
    audit = {"enforce": {"action": "audit", "metadata": [{"kinds": ["ConfigMap"], "labels": {"cost": {}}}]}}
    program = compile_namespace(_rules(_deny_label(), audit))
    assert len(program.audit_validations) == 1
    assert "audits metadata.labels['cost']=" in program.audit_validations[0]["messageExpression"]
    deciding, deciding_binding, auditing, auditing_binding = policies(
        "t", program, ["t-b", "t-a"], enclave_namespace="enclave-system", ignored_groups=["ops"]
    )
    assert deciding["spec"]["failurePolicy"] == "Fail"
    assert deciding_binding["spec"]["validationActions"] == ["Deny"]
    assert auditing["spec"]["failurePolicy"] == "Ignore"
    assert auditing_binding["spec"]["validationActions"] == ["Warn", "Audit"]
    assert auditing["metadata"]["name"] == deciding["metadata"]["name"] + "-audit"
    selector = deciding_binding["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    assert selector == [
        {"key": "enclave.dev/tenant", "operator": "In", "values": ["t"]},
        {"key": "kubernetes.io/metadata.name", "operator": "In", "values": ["t-a", "t-b"]},
    ]
    assert deciding["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "enclave-tenants"
    (condition,) = deciding["spec"]["matchConditions"]
    assert "'system:masters' in request.userInfo.groups" in condition["expression"]
    assert '["ops"]' in condition["expression"]


def test_same_rules_same_signature_and_different_rules_differ() -> None:
    first = compile_namespace(_rules(_deny_label()))
    again = compile_namespace(_rules(_deny_label()))
    other = compile_namespace(_rules(_deny_label("team")))
    assert first.signature() == again.signature() != other.signature()


def test_conditional_rules_refuse_when_their_conditions_error() -> None:
    """The check comes first (kube-apiserver reports the first failed validation) and fails with an error of the
    webhook's words, raised only when the rule's variable errors (``!(asked) || E || A || !A``)."""
    program = compile_namespace(_rules(_deny_label(conditions=[{"expression": "object.data.k == 'x'"}])))
    check = program.validations[0]
    words = "Tenant t spec.rules[0] could not be evaluated: a condition that errors rejects the request unless"
    assert words in check["message"]
    assert check["expression"].startswith("!(variables.k0) || {'': false}[" + json.dumps(check["message"]) + "] || ")
    assert check["expression"].endswith(" || variables.a0 || !variables.a0")
    (applies,) = [v for v in program.variables if v["name"] == "a0"]
    assert applies["expression"] == "(object.data.k == 'x')"


def test_audiences_compile_to_user_group_and_custom_terms() -> None:
    rule = {
        **_deny_label(),
        "audience": [
            {"kind": "User", "name": "alice"},
            {"kind": "ServiceAccount", "name": "ns:robot"},
            {"kind": "Group", "name": "devs"},
            {"kind": "Custom", "name": "request.operation == 'CREATE'"},
        ],
    }
    (applies,) = [v for v in compile_namespace(_rules(rule)).variables if v["name"] == "a0"]
    assert applies["expression"] == (
        '(request.userInfo.username in ["alice", "system:serviceaccount:ns:robot"] || '
        "request.userInfo.groups.exists(g, g in [\"devs\"]) || (request.operation == 'CREATE'))"
    )


def test_cidrs_are_collapsed_so_a_union_covers_exactly() -> None:
    rule = {"enforce": {"action": "allow", "services": {"externalIPs": {"cidrs": ["10.0.0.0/25", "10.0.0.128/25"]}}}}
    (items,) = [v for v in compile_namespace(_rules(rule)).variables if v["name"] == "s_externalIPs"]
    assert '["10.0.0.0/24"]' in items["expression"]


def test_literals_escape_quotes_backslashes_and_control_characters() -> None:
    assert lit("a'b\"c\\d\ne") == '"a\'b\\"c\\\\d\\ne"'
    assert json.loads(lit("é\u0001")) == "é\u0001"
    assert "'kube-root-ca.crt'" in skip_unjudged("enclave-system", [])["expression"]


def test_worst_case_rules_compile_fast_and_past_the_budget_stay_on_the_webhook() -> None:
    """About as much as one stored object holds (kube-apiserver refuses objects past 1.5 MiB): 32 rules on the same
    64 label keys, 16 regular expressions each, so every key's chain is as long as it gets (past the budget)."""
    values = [{"exp": f"x{n}[0-9]+"} for n in range(16)]
    entry = {"kinds": ["*"], "labels": {f"k{n}": {"values": values} for n in range(64)}}
    rules = _rules(*[{"enforce": {"action": "deny", "metadata": [entry]}}] * 32)
    # a bound against a blow-up in the tenant's input, not a speed target: CPU time, which the other processes of
    # a loaded host (a parallel test run) do not inflate, with room for a slow one
    started = time.process_time()
    program = compile_namespace(rules)
    assert time.process_time() - started < 15
    path, why = _placed(program)[("Tenant t spec.rules[0]", "metadata")]
    assert path == "webhook"
    assert f"more than {MAX_TERMS} terms" in why
    assert program.empty
    started = time.process_time()
    program = compile_namespace(rules[:28])  # 28 x 17 terms: within the budget, compiled
    assert time.process_time() - started < 15
    assert _placed(program)[("Tenant t spec.rules[0]", "metadata")][0] == "native"
    assert len(program.validations) == 64


# -- which namespaces the resources hooks may skip -------------------------------------------------------------


def _needed(*bodies: dict[str, Any]) -> str:
    rules = _rules(*bodies)
    return webhook_needed(rules, compile_namespace(rules))


def test_namespaces_whose_rules_all_compile_need_no_webhook() -> None:
    every_kind = {"enforce": {"action": "deny", "metadata": [{"kinds": ["*"], "labels": {"x": {}}}]}}
    services = {"enforce": {"action": "allow", "services": {"types": ["ClusterIP"]}}}
    assert _needed(_deny_label(), every_kind, services) == ""  # Namespace objects are the namespaces hook's


def test_anything_the_policies_cannot_do_keeps_the_webhook() -> None:
    now: dict[str, Any] = {"conditions": [{"name": "c", "expression": "now > timestamp('2000-01-01T00:00:00Z')"}]}
    cases = {
        "does not compile to a policy": _deny_label(**now),
        "mutate[].workloads stays on the webhook": {"mutate": [{"workloads": {"nodeSelector": {"a": "b"}}}]},
        "managed and default metadata stays on the webhook": {  # a conditional rule's value: an error skips it
            "enforce": {
                "action": "allow",
                "metadata": [{"kinds": ["Pod"], "labels": {"a": {"managed": "b"}}}],
                "conditions": [{"expression": "object.metadata.name == 'x'"}],
            }
        },
        "workloads stays on the webhook": {
            "enforce": {"action": "deny", "workloads": {"security": {"privileged": True}}}
        },
    }
    for why, rule in cases.items():
        assert why in _needed(_deny_label(), rule), why
    metadata_mutation = {"mutate": [{"metadata": {"kinds": ["Pod"], "labels": {"a": "b"}}}]}
    rules = _rules(_deny_label(), metadata_mutation)
    assert "mutate stays on the webhook" in webhook_needed(rules, compile_namespace(rules, mutations=False))


def test_a_binding_covers_a_namespace_whatever_else_it_names() -> None:
    program = compile_namespace(_rules(_deny_label()))
    _, binding = policies("t", program, ["t-a", "t-b"], enclave_namespace="enclave-system", ignored_groups=[])
    live = json.loads(json.dumps(binding))
    expressions = live["spec"]["matchResources"]["namespaceSelector"]["matchExpressions"]
    expressions[1]["values"] = ["t-a"]  # the live one does not name t-b yet
    assert binding_covers(live, binding, "t-a")
    assert not binding_covers(live, binding, "t-b")
    expressions[0]["values"] = ["other"]
    assert not binding_covers(live, binding, "t-a")


# -- what a request costs: kube-apiserver evaluates every messageExpression again, for every request it admits --


def _labelled(operation: str, labels: dict[str, str], old: dict[str, str] | None = None) -> dict[str, Any]:
    def configmap(labels: dict[str, str]) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "labels": labels}, "data": {}}

    return {
        "uid": "u",
        "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
        "resource": {"group": "", "version": "v1", "resource": "configmaps"},
        "name": "c",
        "namespace": "t-a",
        "operation": operation,
        "userInfo": {"username": "alice", "groups": []},
        "object": configmap(labels),
        "oldObject": None if old is None else configmap(old),
    }


def _judged(rules: list[AppliedRule], request: dict[str, Any]) -> list[str]:
    from enclave_cli.native import judge_policy

    policy, binding = policies("t", compile_namespace(rules), ["t-a"], enclave_namespace="e", ignored_groups=[])[:2]
    labels = {"enclave.dev/tenant": "t", "kubernetes.io/metadata.name": "t-a"}
    verdict = judge_policy(policy, binding, request, labels)
    assert verdict.matched, verdict
    assert not verdict.undecided, verdict
    return [refusal.message for refusal in verdict.denials]


def test_an_absent_key_is_decided_before_any_rule_is_read_unless_a_rule_requires_it() -> None:
    allow = {
        "enforce": {
            "action": "allow",
            "metadata": [{"kinds": ["ConfigMap"], "labels": {"app": {"values": [{"exp": "[a-z]+"}]}}}],
        }
    }
    required = {
        "enforce": {"action": "allow", "metadata": [{"kinds": ["ConfigMap"], "labels": {"app": {"required": True}}}]}
    }
    (plain,) = [v["expression"] for v in compile_namespace(_rules(_deny_label(), allow)).variables if v["name"] == "m0"]
    assert plain.startswith("!variables.m0v.hasValue() || ")
    (must,) = [v["expression"] for v in compile_namespace(_rules(required)).variables if v["name"] == "m0"]
    assert not must.startswith("!variables.m0v.hasValue()")
    cases: list[tuple[list[AppliedRule], dict[str, Any], str]] = [
        (_rules(_deny_label(), allow), _labelled("CREATE", {}), ""),
        (_rules(_deny_label(), allow), _labelled("CREATE", {"env": "prod"}), "spec.rules[0] denies"),
        (_rules(_deny_label(), allow), _labelled("CREATE", {"app": "Web"}), "spec.rules[1] allows"),
        (_rules(_deny_label(), allow), _labelled("UPDATE", {"app": "Web"}, {"app": "Web"}), ""),
        (_rules(_deny_label(), allow), _labelled("UPDATE", {"app": "Web"}, {}), "spec.rules[1] allows"),
        (_rules(required), _labelled("CREATE", {}), "spec.rules[0] requires"),
        (_rules(required), _labelled("UPDATE", {}, {}), ""),
        (_rules(required), _labelled("UPDATE", {}, {"app": "web"}), "spec.rules[0] requires"),
    ]
    for rules, request, refused in cases:
        denials = _judged(rules, request)
        assert (refused in "; ".join(denials)) if refused else not denials, (request, denials)


def test_a_condition_that_errors_refuses_though_no_chain_reads_it() -> None:
    """The absent key no longer reads the rule's variable: the shared check still does, and refuses."""
    erroring = _deny_label(conditions=[{"expression": "object.data.missing == 'x'"}])
    (denial,) = _judged(_rules(erroring), _labelled("CREATE", {}))
    assert "resulted in error" in denial
    assert "variables.a0" in denial


def test_kind_scopes_are_variables_read_by_every_link_and_check() -> None:
    program = compile_namespace(
        _rules(
            _deny_label(conditions=[{"expression": "object.data.k == 'x'"}]),
            _deny_label("team", conditions=[{"expression": "object.data.k == 'y'"}]),
        )
    )
    scopes = [v for v in program.variables if v["name"].startswith("k")]
    assert [v["expression"] for v in scopes] == [
        '(request.kind.kind in ["ConfigMap"] && ((request.kind.group == \'\' && request.kind.version in ["v1"])))'
    ]
    assert sum("variables.k0 && variables.a" in v["expression"] for v in program.variables) == 2
    checks = [v for v in program.validations if "could not be evaluated" in v.get("message", "")]
    assert [check["expression"].startswith("!(variables.k0) || ") for check in checks] == [True, True]
