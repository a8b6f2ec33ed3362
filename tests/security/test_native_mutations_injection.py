"""Attacks on the native-rules compiler through the mutations tenants write into a RuleStatus: its ``mutate[]``
labels and annotations go into the CEL text of the MutatingAdmissionPolicy that also sets the Tenant's own
(administrator's) managed values (one policy per namespace program), so a value that escaped its string
literal could make the policy patch fields of its choosing, and a mutation could try to outrank a managed value.
The compiled policies are created on the real control plane, bound to one namespace, and applied there (no
webhook: kube-apiserver alone mutates).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from enclave_core.api.rules import AppliedRule
from enclave_tenants.native.compiler import compile_namespace
from enclave_tenants.native.objects import policies
from enclave_testing.names import unique
from enclave_testing.policies import create_bound_to, delete_labelled
from enclave_testing.waiting import poll

from .test_native_rules_injection import _rules

LABEL = "test.enclave.dev/native-mutation-injection"
PROBE = "enclave-mutation-probe"
HOSTILE = [
    'x"]] + [["/metadata/finalizers", ["evil"]',
    "x']] + [['/metadata/finalizers', ['evil']",
    '\\" + "',
    "\"), JSONPatch{op: 'add', path: '/metadata/finalizers', value: ['evil']}, (\"",
]
"""Annotation values a tenant writes hoping to close the CEL string literal and add patch operations of its own."""


@pytest.fixture
def mutated_by(kube: Any, impersonate: Callable[..., Any]) -> Iterator[Callable[[list[AppliedRule]], Any]]:
    """Creates the rules' compiled policies bound to a fresh namespace, waits until kube-apiserver applies the
    mutating one, and returns a function creating a ConfigMap there as a tenant user (the stored object)."""
    namespace = unique("mutinject")
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
    user = client.CoreV1Api(impersonate("mallory", ["enclave.dev"]))

    def enforce(rules: list[AppliedRule]) -> Any:
        program = compile_namespace(rules)
        assert program.mutations, program.placements
        program.mutations.append(
            {
                "patchType": "JSONPatch",
                "jsonPatch": {
                    "expression": f"has(object.metadata.labels) && {PROBE!r} in object.metadata.labels ? "
                    f"[JSONPatch{{op: 'add', path: '/metadata/labels/{PROBE}', value: 'set'}}] : []"
                },
            }
        )
        made = policies("acme", program, [namespace], enclave_namespace="enclave-system", ignored_groups=[])
        create_bound_to(kube, made, namespace, LABEL)

        def applied() -> bool:
            probe = {"metadata": {"generateName": "probe-", "labels": {PROBE: "x"}}}
            found = user.create_namespaced_config_map(namespace, probe, dry_run="All")
            return (found.metadata.labels or {}).get(PROBE) == "set"

        poll(applied, timeout=30, what="the compiled mutating policy applied")
        return lambda body: user.create_namespaced_config_map(namespace, body)

    yield enforce
    delete_labelled(kube, LABEL)
    registrations = client.AdmissionregistrationV1Api(kube)
    for binding in registrations.list_validating_admission_policy_binding(label_selector=LABEL).items:
        registrations.delete_validating_admission_policy_binding(binding.metadata.name)
    for policy in registrations.list_validating_admission_policy(label_selector=LABEL).items:
        registrations.delete_validating_admission_policy(policy.metadata.name)
    core.delete_namespace(namespace)


def test_mutation_values_closing_their_literal_to_patch_other_fields_is_refused(
    mutated_by: Callable[[list[AppliedRule]], Any],
) -> None:
    """Each hostile value is stored verbatim as the annotation it was written for, and nothing else is patched:
    tenant-written text is only ever inside a CEL string literal (JSON-escaped) and a JSON pointer (escaped)."""
    annotations = {f"example.com/a{n}": value for n, value in enumerate(HOSTILE)}
    create = mutated_by(_rules([], [{"mutate": [{"metadata": {"kinds": ["*"], "annotations": annotations}}]}]))
    stored = create({"metadata": {"name": unique("cm")}, "data": {"k": "v"}})
    assert stored.metadata.annotations == annotations
    assert not stored.metadata.finalizers
    assert stored.metadata.labels is None


def test_tenant_mutation_overwriting_a_managed_value_is_refused(
    mutated_by: Callable[[list[AppliedRule]], Any],
) -> None:
    """A RuleStatus rule (the tenant's, later in order) that overwrites a label the Tenant manages does not win:
    the managed value is applied last, as on the webhook."""
    managed = {
        "enforce": {"action": "allow", "metadata": [{"kinds": ["ConfigMap"], "labels": {"cost": {"managed": "cc-1"}}}]}
    }
    overwrite = {"mutate": [{"metadata": {"kinds": ["*"], "labels": {"cost": "free"}, "overwrite": True}}]}
    create = mutated_by(_rules([managed], [overwrite]))
    stored = create({"metadata": {"name": unique("cm"), "labels": {"cost": "free"}}})
    assert stored.metadata.labels == {"cost": "cc-1"}
