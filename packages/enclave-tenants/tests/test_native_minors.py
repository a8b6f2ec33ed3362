"""What the served Kubernetes minor's CEL environment offers a policy (:mod:`enclave_tenants.native.minors`), and
the compiler keeping on the webhook what kube-apiserver would refuse to take.

The compiled policies themselves are proven on each supported minor by the native differential test
(``tox -e compat -- tests/integration/rules``); these tests pin the table and its use.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from enclave_core.api.rules import AppliedRule
from enclave_tenants.native import minors
from enclave_tenants.native.compiler import Program, compile_namespace, webhook_needed
from enclave_testing.binaries import supported_kubernetes_minors

SUPPORTED = [(int(m.split(".")[0]), int(m.split(".")[1])) for m in supported_kubernetes_minors()]


def _rules(*bodies: dict[str, Any]) -> list[AppliedRule]:
    return [
        AppliedRule.model_validate({**body, "origin": {"kind": "Tenant", "name": "t", "index": index}})
        for index, body in enumerate(bodies)
    ]


def _conditional(expression: str) -> dict[str, Any]:
    return {
        "enforce": {
            "action": "deny",
            "metadata": [{"kinds": ["ConfigMap"], "labels": {"env": {"values": [{"exact": ["prod"]}]}}}],
            "conditions": [{"name": "c", "expression": expression}],
        }
    }


EVERY_AREA = (
    _conditional("object.data.k == 'x'"),
    {"enforce": {"action": "allow", "services": {"externalIPs": {"cidrs": ["10.0.0.0/8"]}, "types": ["ClusterIP"]}}},
    {"enforce": {"action": "deny", "ingress": {"hostnames": [{"exp": "a.*"}]}}},
    {"enforce": {"action": "allow", "network": {"policies": {"egress": {"cidrs": ["10.0.0.0/8"]}}}}},
    {
        "enforce": {
            "action": "allow",
            "workloads": {
                "registries": [{"url": "^registry.example/"}],
                "resources": {"limits": {"max": {"cpu": 2}}},
                "placement": {"runtimeClasses": [{"exp": "gvisor-.*"}]},
            },
        }
    },
)
"""A rule of each area that compiles, so that every kind of CEL text the compiler writes is written."""

MUTATION = {"mutate": [{"metadata": {"kinds": ["ConfigMap"], "labels": {"team": "a"}, "overwrite": True}}]}
"""A metadata mutation: a MutatingAdmissionPolicy where kube-apiserver serves them (1.36 and later)."""


def _paths(program: Program) -> dict[tuple[str, str], str]:
    return {(p.origin, p.area): p.path for p in program.placements}


def test_the_served_minor_is_read_from_version() -> None:
    assert minors.served({"major": "1", "minor": "35", "gitVersion": "v1.35.4"}) == (1, 35)
    assert minors.served({"major": "1", "minor": "36+", "gitVersion": "v1.36.3-gke.1"}) == (1, 36)
    assert minors.served({"major": "", "minor": "", "gitVersion": "v1.37.2"}) == (1, 37)
    with pytest.raises(ValueError, match="no Kubernetes minor"):
        minors.served({"gitVersion": "unknown"})


def test_new_expressions_take_a_library_one_minor_after_its_release() -> None:
    """kube-apiserver N checks new expressions in N-1's environment (its compatibility version)."""
    assert minors.offered_from("flatten") == (1, 35)  # the lists extension v3, introduced in 1.34
    assert minors.offered_from("cidr") == (1, 31)
    assert minors.offered_from("includes") == (1, 38)  # Kubernetes' lists library v1, introduced in 1.37
    assert minors.offered_from("format.dns1123Label") == (1, 32)
    assert minors.offered_from("math.greatest") is None
    assert minors.offered_from("size") == (1, 1)


@pytest.mark.parametrize("served", SUPPORTED, ids=[f"{a}.{b}" for a, b in SUPPORTED])
def test_on_every_supported_minor_the_compiler_writes_only_what_kube_apiserver_offers(served: minors.Minor) -> None:
    rules = _rules(*EVERY_AREA, MUTATION)
    mutating = served >= (1, 36)
    program = compile_namespace(rules, local_check=False, network_grants=True, mutations=mutating, served=served)
    newest = compile_namespace(rules, local_check=False, network_grants=True, mutations=mutating)
    assert _paths(program) == _paths(newest)
    assert {path for (_, area), path in _paths(program).items() if area != "mutate"} == {"native"}
    assert _paths(program)[("Tenant t spec.rules[5]", "mutate")] == ("native" if mutating else "webhook")
    assert program.signature() == newest.signature()
    assert bool(program.mutations) == mutating


def test_on_an_older_kube_apiserver_nothing_compiles_and_the_reason_names_the_function() -> None:
    """1.34 takes no ``flatten()`` in a new expression: every rule stays on the webhook, saying so, and the
    namespace keeps the webhook (no policy is written for it)."""
    rules = _rules(*EVERY_AREA)
    program = compile_namespace(rules, local_check=False, network_grants=True, served=(1, 34))
    assert program.empty
    assert not program.variables
    assert {p.path for p in program.placements} == {"webhook"}
    assert any("flatten() (the lists extension v3)" in p.why and "serves 1.34" in p.why for p in program.placements)
    assert webhook_needed(rules, program)


@pytest.mark.parametrize(
    ("expression", "named"),
    [
        ("math.greatest(1, 2) == 2", "math.greatest() is not in kube-apiserver's CEL environment"),
        ("cel.bind(x, object.data.k, x == 'y')", "cel.bind() is not in kube-apiserver's CEL environment"),
        ("base64.encode(b'a') == object.data.k", "base64.encode() is not in kube-apiserver's CEL environment"),
    ],
)
def test_a_condition_kube_apiserver_would_refuse_keeps_its_rule_on_the_webhook(expression: str, named: str) -> None:
    """Enclave's CEL engine knows functions kube-apiserver's environment does not offer: the webhook judges such
    a rule (a policy calling one would be refused when written), and the other rules stay native."""
    rules = _rules(_conditional(expression), _conditional("object.data.k.startsWith('x')"))
    for served in SUPPORTED:
        program = compile_namespace(rules, served=served)
        placed = {(p.origin, p.area): p for p in program.placements}
        first = placed[("Tenant t spec.rules[0]", "metadata")]
        assert first.path == "webhook"
        assert first.why.startswith("enforce.conditions[0] cannot be a policy expression: ")
        assert named in first.why
        assert expression not in str(program.variables)
        assert webhook_needed(rules, program) == "Tenant t spec.rules[0] does not compile to a policy"


def test_a_custom_audience_kube_apiserver_would_refuse_keeps_its_rule_on_the_webhook() -> None:
    rule = {**_conditional("true"), "audience": [{"kind": "Custom", "name": "math.least(1, 2) == 1"}]}
    (placement,) = compile_namespace(_rules(rule)).placements
    assert placement.path == "webhook"
    assert placement.why.startswith("audience[0] cannot be a policy expression: math.least() is not in")


def test_function_names_are_read_outside_string_literals() -> None:
    text = "object.data.k == 'math.greatest(1)' && \"x\\\"reverse(\" != '' && [[1]].flatten().size() > 0"
    assert minors.calls(text) == {"flatten", "size"}
    assert minors.unavailable([text], (1, 35)) == []


def test_the_scan_is_linear_in_the_worst_tenant_text() -> None:
    """Tenant-written conditions are scanned: literals that never close, runs of backslashes and of calls, each
    a quarter of a million characters, take a fraction of a second (every pattern reads each character one way;
    a backtracking pattern would take hours)."""
    size = 250_000
    for text in ('"' + "\\" * size, "'''" + "\\'" * size, "r'" + "a" * size, "f(" * size, "'\\" * size):
        started = time.process_time()  # CPU time: a loaded host does not inflate it
        minors.calls(text)
        assert time.process_time() - started < 2, text[:10]
