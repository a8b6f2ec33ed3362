"""Attacks on the native-rules compiler through the values tenants write into rules: hostnames, patterns and CIDRs
of a RuleStatus go into the CEL text of a ValidatingAdmissionPolicy that also enforces the Tenant's own rules
(one policy per namespace program), so a value that escaped its string literal, or a pattern that changed the
policy's regular expression around it, could neuter the administrator's rules or make kube-apiserver refuse the
whole policy. The compiled policies are created on the real control plane, bound to one namespace, and judged
there (no webhook: kube-apiserver alone decides).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from enclave_core.api.rules import AppliedRule
from enclave_tenants.native.compiler import Program, compile_namespace
from enclave_tenants.native.objects import policies
from enclave_testing.names import unique
from enclave_testing.policies import create_bound_to
from enclave_testing.waiting import poll

LABEL = "test.enclave.dev/native-injection"
PROBE = "enclave-injection-probe"
APPS = {"exp": r"[a-z0-9-]+\.apps\.example"}
HOSTILE = ['") || true || ("', "') || true || ('", '\\" + "', "a.example\") ? '' : ('"]
"""Exact hostnames a tenant writes hoping to close the CEL string literal and write code of its own."""


def _rules(tenant: list[dict[str, Any]], namespace: list[dict[str, Any]]) -> list[AppliedRule]:
    """The Tenant's rules (the administrator's) then the RuleStatus's (the tenant's), as status.rules holds them."""
    found = [
        AppliedRule.model_validate({**body, "origin": {"kind": "Tenant", "name": "acme", "index": i}})
        for i, body in enumerate(tenant)
    ]
    found += [
        AppliedRule.model_validate(
            {**body, "origin": {"kind": "RuleStatus", "name": "default", "namespace": "acme-dev", "index": i}}
        )
        for i, body in enumerate(namespace)
    ]
    return found


@pytest.fixture
def enforced(kube: Any, impersonate: Callable[..., Any]) -> Iterator[Callable[[Program], Any]]:
    """Creates a program's policies bound to a fresh namespace (refused creation raises), waits until
    kube-apiserver enforces them, and returns a tenant user's API client there."""
    namespace = unique("inject")
    core = client.CoreV1Api(kube)
    core.create_namespace({"metadata": {"name": namespace}})
    client.RbacAuthorizationV1Api(kube).create_namespaced_role_binding(
        namespace,
        {
            "metadata": {"name": "owner"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}],
        },
    )
    registrations = client.AdmissionregistrationV1Api(kube)
    user = impersonate("mallory", ["enclave.dev"])

    def enforce(program: Program) -> Any:
        program.validations.insert(
            0,
            {"expression": f"!has(object.metadata.labels) || !({PROBE!r} in object.metadata.labels)", "message": PROBE},
        )
        program.resources.add("configmaps")
        made = policies("acme", program, [namespace], enclave_namespace="enclave-system", ignored_groups=[])
        create_bound_to(kube, made, namespace, LABEL)
        probe = {"metadata": {"generateName": "probe-", "labels": {PROBE: "x"}}}

        def refused() -> bool:
            try:
                client.CoreV1Api(user).create_namespaced_config_map(namespace, probe, dry_run="All")
            except ApiException as err:
                return PROBE in str(err.body)
            return False

        poll(refused, timeout=30, what="the compiled policies enforced")
        return user, namespace

    yield enforce
    for binding in registrations.list_validating_admission_policy_binding(label_selector=LABEL).items:
        registrations.delete_validating_admission_policy_binding(binding.metadata.name)
    for policy in registrations.list_validating_admission_policy(label_selector=LABEL).items:
        registrations.delete_validating_admission_policy(policy.metadata.name)
    core.delete_namespace(namespace)


def _ingress(api: Any, namespace: str, host: str) -> str:
    """'' when admitted, else the denial."""
    rule = {
        "host": host,
        "http": {
            "paths": [
                {"path": "/", "pathType": "Prefix", "backend": {"service": {"name": "w", "port": {"number": 80}}}}
            ]
        },
    }
    body = {"metadata": {"name": unique("ing")}, "spec": {"rules": [rule]}}
    try:
        client.NetworkingV1Api(api).create_namespaced_ingress(namespace, body, dry_run="All")
    except ApiException as err:
        return str(json.loads(err.body or "{}").get("message", err.body))
    return ""


def test_hostnames_crafted_to_close_the_cel_string_literal_are_refused_or_inert(
    kube: Any, enforced: Callable[[Program], Any]
) -> None:
    exact = {"exact": HOSTILE}
    program = compile_namespace(
        _rules(
            [{"enforce": {"action": "allow", "ingress": {"hostnames": [APPS]}}}],
            [
                {"enforce": {"action": "deny", "ingress": {"hostnames": [exact, {"exp": "x\"y|'z'"}]}}},
                {"enforce": {"action": "audit", "ingress": {"hostnames": [exact]}}},
            ],
        )
    )
    assert {p.path for p in program.placements if p.area == "ingress"} == {"native"}
    user, namespace = enforced(program)  # kube-apiserver took every expression as written
    assert _ingress(user, namespace, "web.apps.example") == ""
    refused = _ingress(user, namespace, "x.org")
    assert "Tenant acme spec.rules[0] allows spec.rules[0].host only matching" in refused
    assert "got 'x.org'" in refused


def test_a_pattern_that_would_swallow_the_policys_anchors_is_refused(
    kube: Any, enforced: Callable[[Program], Any]
) -> None:
    r"""``x\Q`` is RE2 for "x" (the rest quoted); wrapped as the compiler wraps a pattern, ``\A(?:x\Q)\z``, it
    quotes the closing anchors and Go refuses it: the whole policy, the administrator's rules with it, would
    be refused by kube-apiserver. The pattern's rules stay on the webhook instead, and the policy is created."""
    program = compile_namespace(
        _rules(
            [{"enforce": {"action": "deny", "metadata": [{"kinds": ["ConfigMap"], "labels": {"env": {}}}]}}],
            [{"enforce": {"action": "allow", "services": {"externalNames": {"hostnames": [{"exp": "x\\Q"}]}}}}],
        )
    )
    services = [p for p in program.placements if p.area == "services"]
    assert [p.path for p in services] == ["webhook"]
    assert "\\Q" in services[0].why
    user, namespace = enforced(program)
    with pytest.raises(ApiException) as caught:
        client.CoreV1Api(user).create_namespaced_config_map(
            namespace, {"metadata": {"name": "c", "labels": {"env": "x"}}}, dry_run="All"
        )
    assert "Tenant acme spec.rules[0] denies metadata.labels['env']" in str(caught.value.body)
