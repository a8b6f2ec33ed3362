"""The Kubernetes objects a namespace's compiled rules become: a ValidatingAdmissionPolicy per distinct program
of a tenant (and one for its audit rules) and the bindings that scope each to the tenant's namespaces.

The compiler (:mod:`enclave_tenants.native.compiler`) says *what* a namespace's rules decide; this module says
*where*: which requests a policy sees (the tenant label and the namespace names, the skip of what the webhook
exempts) and how it is named, labelled and owned.
"""

from __future__ import annotations

from collections.abc import Sequence

from enclave_core.api.names import (
    MANAGED_BY,
    NATIVE_RULES_TENANT_LABEL,
    SKIP_UNJUDGED_CONDITION,
    TENANT_LABEL,
    TENANTS_MANAGER,
)
from enclave_core.snapshots.tenancy import SERVICE_ACCOUNT_PREFIX
from enclave_tenants.native import celtext
from enclave_tenants.native.compiler import GROUP_VERSION, JSON, Program


def skip_unjudged(namespace: str, ignored_groups: Sequence[str]) -> JSON:
    """The policy's matchCondition: who and what the webhook never judges (``enclave_admission.rules.exempt``):
    Enclave's service accounts, ``system:masters``, ``system:`` users that are not service accounts, users of
    ``ignoreUserWithGroups``, the control plane's objects in every namespace."""
    user = "request.userInfo.username"
    skipped = [
        f"{user}.startsWith({celtext.lit(SERVICE_ACCOUNT_PREFIX + namespace + ':')})",
        "'system:masters' in request.userInfo.groups",
        f"({user}.startsWith('system:') && !{user}.startsWith('system:serviceaccount:'))",
        "(request.resource.group == '' && request.resource.resource == 'configmaps' && request.name == 'kube-root-ca.crt')",
        "(request.resource.group == '' && request.resource.resource == 'serviceaccounts' && request.name == 'default')",
    ]
    if ignored_groups:
        skipped.append(f"request.userInfo.groups.exists(g, g in {celtext.list_literal(sorted(ignored_groups))})")
    return {"name": SKIP_UNJUDGED_CONDITION, "expression": "!(" + " || ".join(skipped) + ")"}


def _resource_rules(resources: set[str]) -> list[JSON]:
    """The policy's resourceRules for :attr:`Program.resources` (``resource[/subresource][.group]``, or ``*``):
    one rule per API group; ``*`` takes in every resource but no subresource, so those stay listed."""
    groups: dict[str, set[str]] = {}
    for entry in sorted(resources):
        if entry == "*":
            groups.setdefault("*", set()).add("*")
            continue
        resource, _, group = entry.partition(".")
        if "*" in resources and "/" not in resource:
            continue
        groups.setdefault(group, set()).add(resource)
    return [
        {
            "apiGroups": [group],
            "apiVersions": ["*"],
            "operations": ["CREATE", "UPDATE"],
            "resources": sorted(names),
            "scope": "Namespaced",
        }
        for group, names in sorted(groups.items())
    ]


def policy_name(tenant: str, program: Program, audit: bool = False) -> str:
    return f"enclave-rules-{tenant}-{program.signature()}" + ("-audit" if audit else "")


def policies(
    tenant: str, program: Program, namespaces: Sequence[str], *, enclave_namespace: str, ignored_groups: Sequence[str]
) -> list[JSON]:
    """The ValidatingAdmissionPolicies and bindings enforcing ``program`` in ``namespaces`` of ``tenant``: the
    deciding one (failure policy Fail, bound with Deny) and, with audit rules, the auditing one (Ignore, bound
    with Warn and Audit). Each binding selects the namespaces by the tenant label and by name."""
    labels = {MANAGED_BY: TENANTS_MANAGER, NATIVE_RULES_TENANT_LABEL: tenant}
    resource_rules = _resource_rules(program.resources)
    found: list[JSON] = []
    for audit, validations in ((False, program.validations), (True, program.audit_validations)):
        if not validations:
            continue
        name = policy_name(tenant, program, audit)
        found.append(
            {
                "apiVersion": GROUP_VERSION,
                "kind": "ValidatingAdmissionPolicy",
                "metadata": {"name": name, "labels": dict(labels)},
                "spec": {
                    "failurePolicy": "Ignore" if audit else "Fail",
                    "matchConstraints": {"resourceRules": resource_rules},
                    "matchConditions": [skip_unjudged(enclave_namespace, ignored_groups)],
                    "variables": program.variables,
                    "validations": validations,
                },
            }
        )
        found.append(
            {
                "apiVersion": GROUP_VERSION,
                "kind": "ValidatingAdmissionPolicyBinding",
                "metadata": {"name": name, "labels": dict(labels)},
                "spec": {
                    "policyName": name,
                    "validationActions": ["Warn", "Audit"] if audit else ["Deny"],
                    "matchResources": {
                        "namespaceSelector": {
                            "matchExpressions": [
                                {"key": TENANT_LABEL, "operator": "In", "values": [tenant]},
                                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(namespaces)},
                            ]
                        }
                    },
                },
            }
        )
    return found
