"""Native admission policies enclave-config keeps beside the webhook configurations (pure rendering).

``Tenant.spec.preventDeletion`` exists for one mistake: deleting a tenant (and, through the tenants component,
its namespaces and everything in them) by accident. Cluster administrators make that mistake as often as
anyone, but the Tenant webhook skips ``system:masters`` so that an Enclave outage never blocks break-glass
work. A ValidatingAdmissionPolicy has no such trade-off: kube-apiserver evaluates it in-process, for every
requester, with no network hop and no outage of ours to fear. So deletion protection is enforced here for
everyone, and break-glass stays what the refusal says: set ``spec.preventDeletion`` to false, then delete.

The policy and its binding are named after the ServiceConfiguration (several configurations, as the test
suites run, each keep their own; the rule is the same). They carry the managed-by label, like the webhook
configurations, which is how pruning finds them and never touches a hand-made policy.
"""

from __future__ import annotations

from typing import Any, Final

from enclave_core import API_GROUP
from enclave_core.api.names import CONFIG_MANAGER, MANAGED_BY

JSON = dict[str, Any]

POLICY_GROUP: Final = "admissionregistration.k8s.io/v1"
PATHS: Final = {
    "ValidatingAdmissionPolicy": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicies",
    "ValidatingAdmissionPolicyBinding": "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings",
}

DELETION_EXPRESSION: Final = (
    "!(has(oldObject.spec) && has(oldObject.spec.preventDeletion) && oldObject.spec.preventDeletion)"
)
"""True unless the Tenant being deleted has ``spec.preventDeletion`` (on DELETE ``oldObject`` is the stored one)."""

DELETION_MESSAGE: Final = (
    "'tenant ' + oldObject.metadata.name + ' has spec.preventDeletion set; set it to false before deleting the tenant'"
)


def deletion_policy_name(configuration: str) -> str:
    """``enclave-<configuration>-tenant-deletion``: one per ServiceConfiguration."""
    return f"enclave-{configuration}-tenant-deletion"


def render(configuration: str) -> list[JSON]:
    """The Tenant deletion protection policy, then its binding (apply order: a binding names its policy)."""
    name = deletion_policy_name(configuration)
    labels = {MANAGED_BY: CONFIG_MANAGER}
    policy: JSON = {
        "apiVersion": POLICY_GROUP,
        "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "resourceRules": [
                    {
                        "apiGroups": [API_GROUP],
                        "apiVersions": ["*"],
                        "operations": ["DELETE"],
                        "resources": ["tenants"],
                    }
                ]
            },
            "validations": [
                {
                    "expression": DELETION_EXPRESSION,
                    "messageExpression": DELETION_MESSAGE,
                    "reason": "Forbidden",
                }
            ],
        },
    }
    binding: JSON = {
        "apiVersion": POLICY_GROUP,
        "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name, "labels": dict(labels)},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    }
    return [policy, binding]
