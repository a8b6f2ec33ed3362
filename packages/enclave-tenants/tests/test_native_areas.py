"""The ingress and network areas of the native-rules compiler, the regular-expression dialect both engines read
alike, and tenant-written values in the CEL text.

What the policies decide is proven against the webhook on kube-apiserver
(tests/integration/rules/test_rules_native_differential.py); these pin the text, the placements and the
hostile-input guarantees.
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from enclave_admission.rules.ingress import kind_of
from enclave_core.api.rules import AppliedRule
from enclave_tenants.native import dialect, ingress
from enclave_tenants.native.celtext import networks
from enclave_tenants.native.compiler import NETWORK_ON_WEBHOOK, Program, compile_namespace, webhook_needed


def _rules(*bodies: dict[str, Any]) -> list[AppliedRule]:
    return [
        AppliedRule.model_validate({**body, "origin": {"kind": "Tenant", "name": "t", "index": index}})
        for index, body in enumerate(bodies)
    ]


def _placed(program: Program) -> dict[tuple[str, str], tuple[str, str]]:
    return {(p.origin, p.area): (p.path, p.why) for p in program.placements}


def _text(program: Program) -> str:
    """Every CEL expression of the program, as kube-apiserver reads it."""
    entries = [*program.variables, *program.validations, *program.audit_validations]
    return "\n".join(str(entry.get(key, "")) for entry in entries for key in ("expression", "messageExpression"))


_LITERAL = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'')


def _skeleton(program: Program) -> list[str]:
    """Every CEL expression of the program with its string literals blanked: the code a value cannot change."""
    found = []
    for entry in [*program.variables, *program.validations, *program.audit_validations]:
        for key in ("expression", "messageExpression"):
            if key in entry:
                found.append(_LITERAL.sub("''", entry[key]))
    return found


APPS = {"exp": r"[a-z0-9-]+\.apps\.example"}


def test_ingress_kinds_are_the_ones_the_webhook_reads() -> None:
    for kind, pairs in ingress.KINDS.items():
        for group, plural in pairs:
            assert kind_of(group, plural) == kind


def test_ingress_rules_compile_per_kind_with_the_webhooks_paths_and_messages() -> None:
    program = compile_namespace(_rules({"enforce": {"action": "allow", "ingress": {"hostnames": [APPS]}}}))
    assert _placed(program)[("Tenant t spec.rules[0]", "ingress")] == ("native", "hostnames compile to the policy")
    assert {"ingresses.networking.k8s.io", "routes.route.openshift.io", "tlsroutes.gateway.networking.k8s.io"} <= (
        program.resources
    )
    names = {v["name"] for v in program.variables}
    assert {f"i_{kind}" for kind in ingress.KINDS} <= names
    text = _text(program)
    for path in ("spec.rules[", "spec.tls[", "spec.listeners[", "spec.hostnames[", "spec.host"):
        assert path in text
    assert "requires a hostname in every hostname field of a Ingress; " in text
    assert r"\\A(?:[a-z0-9-]+\\.apps\\.example)\\z" in text  # anchored as fullmatch, escaped for CEL
    assert webhook_needed(_rules({"enforce": {"action": "allow", "ingress": {"hostnames": [APPS]}}}), program) == ""


def test_ingress_types_limit_the_kinds_a_rule_is_asked_for() -> None:
    program = compile_namespace(_rules({"enforce": {"action": "deny", "ingress": {"types": ["Route"]}}}))
    assert {v["name"] for v in program.variables} >= {"i_Route", "i_Route_old"}
    assert "i_Ingress" not in {v["name"] for v in program.variables}
    assert program.resources == {"routes.route.openshift.io"}


def test_ingress_rules_go_to_the_webhook_together_and_say_why() -> None:
    program = compile_namespace(
        _rules(
            {"enforce": {"action": "allow", "ingress": {"hostnames": [APPS]}}},
            {"enforce": {"action": "deny", "ingress": {"hostnames": [{"exp": r"(?P<x>a)\.example"}]}}},
        )
    )
    placed = _placed(program)
    for index in (0, 1):
        path, why = placed[(f"Tenant t spec.rules[{index}]", "ingress")]
        assert path == "webhook"
        assert "uses the group syntax '(?P<x>a)'" in why
    broken = compile_namespace(
        _rules(
            {"enforce": {"action": "allow", "ingress": {"hostnames": [APPS]}}},
            {
                "enforce": {
                    "action": "deny",
                    "ingress": {},
                    "conditions": [{"expression": "now > timestamp('2000-01-01T00:00:00Z')"}],
                }
            },
        )
    )
    assert "also judges ingress hostnames" in _placed(broken)[("Tenant t spec.rules[0]", "ingress")][1]


def test_network_grants_compile_with_collapsed_networks_and_carried_limbs() -> None:
    rules = _rules(
        {
            "enforce": {
                "action": "allow",
                "network": {"policies": {"egress": {"cidrs": ["10.0.0.0/9", "10.128.0.0/9", "fd00::/8"]}}},
            }
        },
        {"enforce": {"action": "audit", "network": {"policies": {"ingress": {"cidrs": ["0.0.0.0/0"]}}}}},
        {"enforce": {"action": "deny", "network": {"policies": {"ingress": {"cidrs": []}}}}},
    )
    program = compile_namespace(rules, network_grants=True)
    placed = _placed(program)
    assert placed[("Tenant t spec.rules[0]", "network")][0] == "native"
    assert placed[("Tenant t spec.rules[1]", "network")][0] == "native"
    assert ("Tenant t spec.rules[2]", "network") not in placed  # an empty list imposes nothing
    text = _text(program)
    assert '["10.0.0.0/8", "fd00::/8"]' in text  # collapsed: one network, as the union reads
    assert "4294967296" in text  # four 32-bit limbs, carried
    assert "2147483648" in text
    assert program.resources == {"networkpolicies.networking.k8s.io"}
    assert len(program.audit_validations) == 1
    assert webhook_needed(rules, program) == ""


def test_network_grants_stay_on_the_webhook_unless_asked_for() -> None:
    rules = _rules({"enforce": {"action": "deny", "network": {"policies": {"ingress": {"cidrs": ["10.0.0.0/8"]}}}}})
    program = compile_namespace(rules)
    assert _placed(program)[("Tenant t spec.rules[0]", "network")] == ("webhook", NETWORK_ON_WEBHOOK)
    assert program.empty
    assert "network stays on the webhook" in webhook_needed(rules, program)


def test_storage_stays_on_the_webhook_without_keeping_the_namespace_on_the_resources_hooks() -> None:
    rules = _rules({"enforce": {"action": "allow", "storage": {"volumes": [{"selector": {}}]}}})
    program = compile_namespace(rules)
    path, why = _placed(program)[("Tenant t spec.rules[0]", "storage")]
    assert path == "webhook"
    assert "labels of the PersistentVolume" in why
    assert "volumeclaims.enclave.dev" in why
    assert webhook_needed(rules, program) == ""


@pytest.mark.parametrize(
    "pattern",
    [
        r"[a-z0-9-]+\.apps\.example",
        r".*\.internal",
        r"(?i)web|API",
        r"(?i:a|b)c{1,3}?",
        r"[^a-z\d_.]+",
        r"[[:alpha:]][a-]",
        r"\x41\x{1F600}\b\A\z",
        r"(a)|(?:b)*$",
    ],
)
def test_patterns_both_engines_read_alike_compile(pattern: str) -> None:
    assert dialect.problem(pattern) == ""


@pytest.mark.parametrize(
    ("pattern", "named"),
    [
        (r"\pL+", r"'\p'"),
        (r"\Qa)|(?:.*", r"'\Q'"),
        (r"(?P<n>a)", "(?P<"),
        (r"(?<n>a)", "(?<"),
        (r"\C", r"'\C'"),
        (r"a**", "repeats"),
        (r"a{2}{3}", "repeats"),
        (r"[]a]", "']'"),
        (r"[a-z-0]", "'-'"),
        ("x{", "'{'"),
        (r"\1", r"'\1'"),
        ("a)|(b", "unbalanced"),
        ("(a", "unclosed"),
        ("\\", "lone backslash"),
    ],
)
def test_patterns_outside_the_shared_dialect_stay_on_the_webhook_named(pattern: str, named: str) -> None:
    problem = dialect.problem(pattern)
    assert named in problem
    assert "Go's regexp" in problem


def test_worst_case_pattern_is_scanned_in_linear_time() -> None:
    import time

    pattern = "(" * 500 + "a" + ")" * 500 + "[" + "a-z" * 100 + "]"
    started = time.perf_counter()
    for _ in range(100):
        dialect.problem(pattern[:1024])
    assert time.perf_counter() - started < 2.0


HOSTILE = [
    '") || true || ("',
    "') || true || ('",
    '\\" + string(1) + \\"',
    "a\nb\tc\\z",
    "}{value}{path}",
    "é\u2028\u0000",
]


def test_hostile_exact_hostnames_change_no_cel_but_their_literals() -> None:
    def compiled(values: list[str]) -> Program:
        exact = {"exact": values}
        return compile_namespace(
            _rules(
                {"enforce": {"action": "allow", "ingress": {"hostnames": [exact]}}},
                {"enforce": {"action": "deny", "ingress": {"hostnames": [exact, {"exp": "a\"b'c"}]}}},
                {"enforce": {"action": "audit", "ingress": {"hostnames": [exact]}}},
            )
        )

    benign = compiled(["a.example"] * len(HOSTILE))
    hostile = compiled(HOSTILE)
    assert _placed(hostile)[("Tenant t spec.rules[0]", "ingress")][0] == "native"
    assert _skeleton(hostile) == _skeleton(benign)
    text = _text(hostile)
    for value in HOSTILE:
        assert json.dumps(value, ensure_ascii=False) in text  # one CEL string literal, escaped


def test_a_pattern_that_would_swallow_the_anchors_is_refused() -> None:
    r"""``\Q`` without ``\E`` compiles for RE2 (the rest is literal) but would quote the ``)\z`` the compiler
    appends: kube-apiserver would refuse the whole policy."""
    for area in (
        {"ingress": {"hostnames": [{"exp": "x\\Q"}]}},
        {"services": {"externalNames": {"hostnames": [{"exp": "x\\Q"}]}}},
    ):
        program = compile_namespace(_rules({"enforce": {"action": "allow", **area}}))
        (placement,) = [p for p in program.placements if p.area in ("ingress", "services")]
        assert placement.path == "webhook"
        assert "\\Q" in placement.why
        assert program.empty


def test_cidrs_reach_the_cel_text_only_as_parsed_networks() -> None:
    crafted = ['10.0.0.0/8"] + [true', "10.0.0.0/8') || (true", "10.1.0.0/16", "fd00::1/8"]
    assert networks(crafted) == ["10.1.0.0/16", "fd00::/8"]
