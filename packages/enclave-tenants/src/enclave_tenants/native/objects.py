"""The Kubernetes objects a namespace's compiled rules become: a ValidatingAdmissionPolicy per distinct program
of a tenant (and one for its audit rules), a MutatingAdmissionPolicy when its rules set labels or annotations
the policy can (:mod:`enclave_tenants.native.mutations`), and the bindings that scope each to the tenant's
namespaces.

The compiler (:mod:`enclave_tenants.native.compiler`) says *what* a namespace's rules decide; this module says
*where*: which requests a policy sees (the tenant label and the namespace names, the skip of what the webhook
exempts) and how it is named, labelled and owned.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

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

UNGOVERNED: Final = (
    "/events",
    "events.k8s.io/events",
    "coordination.k8s.io/leases",
    "/endpoints",
    "discovery.k8s.io/endpointslices",
)
"""``group/resource`` the webhook never judges (``enclave_admission.rules.exempt.UNGOVERNED``): the control
plane writes them constantly and no rule is about them."""


def skip_unjudged(namespace: str, ignored_groups: Sequence[str], *, unnamed: bool = False) -> JSON:
    """The policy's matchCondition: who and what the webhook never judges (``enclave_admission.rules.exempt``):
    Enclave's service accounts, ``system:masters``, ``system:`` users that are not service accounts, users of
    ``ignoreUserWithGroups``, the control plane's objects in every namespace, and the kinds it writes constantly
    (Events, Leases, Endpoints, EndpointSlices: a tenant application's leader-election Lease is not judged nor
    mutated either). ``unnamed``: for a mutating
    policy, which sees a create by ``generateName`` before kube-apiserver names the object (``request.name``
    is then absent, and reading it an error)."""
    user = "request.userInfo.username"
    name = "request.?name.orValue('')" if unnamed else "request.name"
    skipped = [
        f"{user}.startsWith({celtext.lit(SERVICE_ACCOUNT_PREFIX + namespace + ':')})",
        "'system:masters' in request.userInfo.groups",
        f"({user}.startsWith('system:') && !{user}.startsWith('system:serviceaccount:'))",
        "(request.resource.group == '' && request.resource.resource == 'configmaps' && "
        + name
        + " == 'kube-root-ca.crt')",
        "(request.resource.group == '' && request.resource.resource == 'serviceaccounts' && " + name + " == 'default')",
    ]
    skipped.append(f"(request.resource.group + '/' + request.resource.resource) in {celtext.list_literal(UNGOVERNED)}")
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


MUTATING_RULES: Final = [
    {
        "apiGroups": ["*"],
        "apiVersions": ["*"],
        "operations": ["CREATE", "UPDATE"],
        "resources": ["*"],
        "scope": "Namespaced",
    }
]
"""What the MutatingAdmissionPolicy matches: the mutating webhook's namespaced resources (a subresource write,
such as ``pods/ephemeralcontainers``, stores no metadata)."""


def _selector(tenant: str, namespaces: Sequence[str]) -> JSON:
    return {
        "namespaceSelector": {
            "matchExpressions": [
                {"key": TENANT_LABEL, "operator": "In", "values": [tenant]},
                {"key": "kubernetes.io/metadata.name", "operator": "In", "values": sorted(namespaces)},
            ]
        }
    }


def policy_name(tenant: str, program: Program, audit: bool = False) -> str:
    return f"enclave-rules-{tenant}-{program.signature()}" + ("-audit" if audit else "")


def policies(
    tenant: str, program: Program, namespaces: Sequence[str], *, enclave_namespace: str, ignored_groups: Sequence[str]
) -> list[JSON]:
    """The policies and bindings enforcing ``program`` in ``namespaces`` of ``tenant``: the deciding
    ValidatingAdmissionPolicy (failure policy Fail, bound with Deny), with audit rules the auditing one (Ignore,
    bound with Warn and Audit), and with mutations the MutatingAdmissionPolicy (Fail, reinvoked ``IfNeeded`` as
    the mutating webhook is). Each binding selects the namespaces by the tenant label and by name."""
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
                    "matchResources": _selector(tenant, namespaces),
                },
            }
        )
    if program.mutations:
        name = policy_name(tenant, program)
        found.append(
            {
                "apiVersion": GROUP_VERSION,
                "kind": "MutatingAdmissionPolicy",
                "metadata": {"name": name, "labels": dict(labels)},
                "spec": {
                    "failurePolicy": "Fail",
                    "reinvocationPolicy": "IfNeeded",
                    "matchConstraints": {"resourceRules": MUTATING_RULES},
                    "matchConditions": [skip_unjudged(enclave_namespace, ignored_groups, unnamed=True)],
                    "variables": program.mutation_variables,
                    "mutations": program.mutations,
                },
            }
        )
        found.append(
            {
                "apiVersion": GROUP_VERSION,
                "kind": "MutatingAdmissionPolicyBinding",
                "metadata": {"name": name, "labels": dict(labels)},
                "spec": {"policyName": name, "matchResources": _selector(tenant, namespaces)},
            }
        )
    return found
