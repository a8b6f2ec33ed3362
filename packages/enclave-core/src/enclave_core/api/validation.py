"""Validation of API objects beyond what their CRD schema can express (the validating webhook's rules).

kube-apiserver's CEL rules cannot compile a regular expression, parse a duration's range or compile an
embedded CEL expression. These checks are pure functions shared by the validating webhook (which refuses
the object) and the owning controller (which reports it in status), so the two can never disagree.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Final

from enclave_core import cel
from enclave_core.api.configuration import MutatingAdmission, ServiceConfigurationSpec, ValidatingAdmission
from enclave_core.api.meta import ApiModel, ValueMatcher
from enclave_core.api.rules import RuleBody, WorkloadsPolicy
from enclave_core.durations import parse_duration
from enclave_core.quantity import Quantity

# Namespaces whose failure to admit would stop the cluster from healing itself.
CRITICAL_NAMESPACES: Final = ("kube-system",)


class Problem(ApiModel):
    """One thing wrong with an object, located by its JSON path."""

    field: str
    message: str

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def _regex_problem(field: str, pattern: str | None) -> list[Problem]:
    if not pattern:
        return []
    try:
        re.compile(pattern)
    except re.error as err:
        return [Problem(field=field, message=f"invalid regular expression {pattern!r}: {err}")]
    return []


def service_configuration_problems(spec: ServiceConfigurationSpec) -> list[Problem]:
    """Everything the schema cannot check: regexes, durations, CEL, webhooks that would break the cluster."""
    found: list[Problem] = []
    found += _regex_problem("spec.protectedNamespaceRegex", spec.protected_namespace_regex)
    if spec.node_metadata is not None:
        for key, forbidden in (
            ("forbiddenLabels", spec.node_metadata.forbidden_labels),
            ("forbiddenAnnotations", spec.node_metadata.forbidden_annotations),
        ):
            if forbidden is not None:
                found += _regex_problem(f"spec.nodeMetadata.{key}.deniedRegex", forbidden.denied_regex)
    try:
        if parse_duration(spec.cache_invalidation).total_seconds() < 1:
            found.append(Problem(field="spec.cacheInvalidation", message="must be at least 1s"))
    except ValueError as err:
        found.append(Problem(field="spec.cacheInvalidation", message=str(err)))
    if spec.admission is not None:
        for side_name, side in (("mutating", spec.admission.mutating), ("validating", spec.admission.validating)):
            if side is not None:
                found += _admission_problems(f"spec.admission.{side_name}", side)
    return found


def _admission_problems(path: str, side: MutatingAdmission | ValidatingAdmission) -> list[Problem]:
    found: list[Problem] = []
    seen: set[str] = set()
    for index, webhook in enumerate(side.webhooks or []):
        where = f"{path}.webhooks[{index}]"
        if webhook.name in seen:
            found.append(Problem(field=f"{where}.name", message=f"duplicate webhook name {webhook.name!r}"))
        seen.add(webhook.name)
        for position, condition in enumerate(webhook.match_conditions or []):
            if "authorizer" in condition.expression:
                # kube-apiserver's authorizer library is not modelled by our CEL environment; the API server
                # itself rejects a bad expression when the configuration is applied (reported as ApplyFailed).
                continue
            for issue in cel.check(condition.expression, cel.MATCH_CONDITION_ENV):
                found.append(Problem(field=f"{where}.matchConditions[{position}].expression", message=str(issue)))
        if webhook.failure_policy == "Fail" and _catches_critical_namespaces(webhook):
            found.append(
                Problem(
                    field=f"{where}.namespaceSelector",
                    message="a failurePolicy: Fail webhook on all resources must exclude kube-system "
                    "(e.g. kubernetes.io/metadata.name NotIn [kube-system]); otherwise an outage of the "
                    "webhook stops the cluster's own controllers",
                )
            )
    return found


def _catches_critical_namespaces(webhook: object) -> bool:
    """A fail-closed webhook on every resource that does not exclude kube-system would wedge the cluster."""
    rules = getattr(webhook, "rules", None) or []
    wildcard = any((rule.resources or []) in (["*"], ["*/*"]) and (rule.api_groups or []) == ["*"] for rule in rules)
    if not wildcard:
        return False
    selector = getattr(webhook, "namespace_selector", None)
    if selector is None:
        return True
    for requirement in selector.match_expressions or []:
        if (
            requirement.key == "kubernetes.io/metadata.name"
            and requirement.operator == "NotIn"
            and all(ns in (requirement.values or []) for ns in CRITICAL_NAMESPACES)
        ):
            return False
    labels = selector.match_labels or {}
    return not labels


# -- rules (Tenant.spec.rules[], RuleStatus.spec[]) --------------------------------------------------------

KIND_PATTERN: Final = re.compile(r"^(\*|[A-Z][A-Za-z0-9]*)$")
"""A kind name as the API spells it (``ConfigMap``), or ``*``."""


def _matchers_problems(field: str, matchers: Sequence[ValueMatcher] | None) -> list[Problem]:
    found: list[Problem] = []
    for index, matcher in enumerate(matchers or []):
        found += _regex_problem(f"{field}[{index}].exp", matcher.exp)
    return found


def _cidr_problems(field: str, cidrs: Sequence[str] | None) -> list[Problem]:
    found: list[Problem] = []
    for index, cidr in enumerate(cidrs or []):
        try:
            ipaddress.ip_network(cidr, strict=False)
        except ValueError:
            found.append(Problem(field=f"{field}[{index}]", message=f"{cidr!r} is not an IP address or a CIDR"))
    return found


def _kinds_problems(field: str, kinds: Sequence[str]) -> list[Problem]:
    return [
        Problem(field=f"{field}[{index}]", message=f"{kind!r} is not a kind name (e.g. ConfigMap) or '*'")
        for index, kind in enumerate(kinds)
        if not KIND_PATTERN.match(kind)
    ]


def _quantity_problems(field: str, values: Mapping[str, object] | None) -> list[Problem]:
    found: list[Problem] = []
    for key, value in (values or {}).items():
        try:
            Quantity.parse(str(value))
        except ValueError as err:
            found.append(Problem(field=f"{field}[{key!r}]", message=f"{value!r} is not a quantity: {err}"))
    return found


def rule_problems(rule: RuleBody, path: str) -> list[Problem]:
    """What in ``rule`` (found at ``path``, e.g. ``spec.rules[2]``) could never work: CEL that does not compile,
    regular expressions, CIDRs, kind names and quantities. The Tenant webhook refuses such a rule naming the
    field; the tenants controller reports one that got in anyway (webhook down) in the RuleStatus."""
    found: list[Problem] = []
    for index, audience in enumerate(rule.audience or []):
        if audience.kind == "Custom":
            for issue in cel.check(audience.name, cel.RULE_AUDIENCE_ENV):
                found.append(Problem(field=f"{path}.audience[{index}].name", message=str(issue)))
    enforce = rule.enforce
    if enforce is not None:
        where = f"{path}.enforce"
        for index, condition in enumerate(enforce.conditions or []):
            for issue in cel.check(condition.expression, cel.RULE_CONDITION_ENV):
                found.append(Problem(field=f"{where}.conditions[{index}].expression", message=str(issue)))
        for index, metadata in enumerate(enforce.metadata or []):
            found += _kinds_problems(f"{where}.metadata[{index}].kinds", metadata.kinds)
            for part, entries in (("labels", metadata.labels), ("annotations", metadata.annotations)):
                for key, value in (entries or {}).items():
                    found += _matchers_problems(f"{where}.metadata[{index}].{part}[{key!r}].values", value.values)
        if enforce.ingress is not None:
            found += _matchers_problems(f"{where}.ingress.hostnames", enforce.ingress.hostnames)
        services = enforce.services
        if services is not None:
            if services.external_i_ps is not None:
                found += _cidr_problems(f"{where}.services.externalIPs.cidrs", services.external_i_ps.cidrs)
            if services.load_balancers is not None:
                found += _cidr_problems(f"{where}.services.loadBalancers.cidrs", services.load_balancers.cidrs)
            if services.external_names is not None:
                found += _matchers_problems(
                    f"{where}.services.externalNames.hostnames", services.external_names.hostnames
                )
        policies = enforce.network.policies if enforce.network else None
        if policies is not None:
            for direction, policy in (("ingress", policies.ingress), ("egress", policies.egress)):
                if policy is not None:
                    found += _cidr_problems(f"{where}.network.policies.{direction}.cidrs", policy.cidrs)
        if enforce.workloads is not None:
            found += _workloads_problems(f"{where}.workloads", enforce.workloads)
    for index, mutation in enumerate(rule.mutate or []):
        if mutation.metadata is not None:
            found += _kinds_problems(f"{path}.mutate[{index}].metadata.kinds", mutation.metadata.kinds)
        if mutation.workloads is not None:
            workload = mutation.workloads
            found += _quantity_problems(f"{path}.mutate[{index}].workloads.defaultRequests", workload.default_requests)
            found += _quantity_problems(f"{path}.mutate[{index}].workloads.defaultLimits", workload.default_limits)
    return found


def _workloads_problems(where: str, workloads: WorkloadsPolicy) -> list[Problem]:
    found = _matchers_problems(f"{where}.schedulers", workloads.schedulers)
    for index, registry in enumerate(workloads.registries or []):
        found += _regex_problem(f"{where}.registries[{index}].url", registry.url)
    placement = workloads.placement
    if placement is not None:
        found += _matchers_problems(f"{where}.placement.schedulers", placement.schedulers)
        found += _matchers_problems(f"{where}.placement.priorityClasses", placement.priority_classes)
        found += _matchers_problems(f"{where}.placement.runtimeClasses", placement.runtime_classes)
    if workloads.security is not None:
        found += _matchers_problems(f"{where}.security.hostPaths", workloads.security.host_paths)
    resources = workloads.resources
    if resources is not None:
        for part, bounds in (("requests", resources.requests), ("limits", resources.limits)):
            if bounds is not None:
                found += _quantity_problems(f"{where}.resources.{part}.min", bounds.min)
                found += _quantity_problems(f"{where}.resources.{part}.max", bounds.max)
    return found


def rules_problems(rules: Sequence[RuleBody] | None, path: str) -> list[Problem]:
    """:func:`rule_problems` of every rule of a list found at ``path`` (``spec.rules`` or ``spec``)."""
    found: list[Problem] = []
    for index, rule in enumerate(rules or []):
        found += rule_problems(rule, f"{path}[{index}]")
    return found
